//! Crafted names cannot reach another lock's keys or nodes: names built from the characters
//! that structure keys and paths (`{`, `}`, `%`, `/`, `.`, `:`, NUL, 4-byte UTF-8) are each a
//! lock of their own, held at once, on real redis-server and ZooKeeper and on memory://; every
//! key and node they make stays inside its own name's place.

use std::collections::BTreeSet;
use std::time::Duration;

use dlock::Client;
use dlock_testkit::{RedisServer, ZkEnsemble};

mod common;
use common::connect;

const NAMES: &[&str] = &[
    "a",
    "a}",
    "{a}",
    "a{b}c",
    "a%7Db",
    "a}b",
    "%",
    "%25",
    "}",
    "{",
    "a/../b",
    "..",
    ".",
    "/",
    "a/b",
    "a\0b",
    "\0",
    "𝄞",
    "a:lock",
    "dlock:{a}:lock",
    "a}:lock",
    "a.semaphore",
    "a.rwlock",
];

/// Holds every name as a lock, a permit of a one-permit semaphore and a write hold at once:
/// had two of them shared a key or node, one acquire would find it taken. Then another
/// client finds each of them taken, and each name's status shows its own tenure.
async fn every_name_is_a_place_of_its_own(url: &str) {
    let client = connect(url).await.unwrap();
    let other = connect(url).await.unwrap();
    let mut held = Vec::new();
    for name in NAMES {
        let builders = [
            client.lock(*name),
            client.semaphore(*name, 1),
            client.rw_lock(*name).write(),
        ];
        for lock in builders {
            let guard = lock.lease(Duration::from_secs(30)).try_acquire().await;
            held.push(
                guard
                    .unwrap()
                    .unwrap_or_else(|| panic!("{name:?} was taken already")),
            );
        }
    }
    for name in NAMES {
        assert!(
            other.lock(*name).try_acquire().await.unwrap().is_none(),
            "{name:?}"
        );
        assert!(
            other
                .semaphore(*name, 1)
                .try_acquire()
                .await
                .unwrap()
                .is_none(),
            "{name:?}"
        );
        assert!(
            other
                .rw_lock(*name)
                .read()
                .try_acquire()
                .await
                .unwrap()
                .is_none(),
            "{name:?}"
        );
    }
    for (name, guards) in NAMES.iter().zip(held.chunks(3)) {
        let status = client.status(name).await.unwrap();
        assert_eq!(status.fencing_token, guards[0].fencing_token(), "{name:?}");
        assert_eq!(status.count, 1, "{name:?}");
    }
    for guard in held {
        guard.release().await.unwrap();
    }
    for name in NAMES {
        assert!(
            other.lock(*name).try_acquire().await.unwrap().is_some(),
            "{name:?}"
        );
    }
    drop::<Client>(client);
}

#[tokio::test]
async fn crafted_names_stay_apart_in_memory() {
    every_name_is_a_place_of_its_own("memory://crafted-names").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_names_stay_inside_their_hash_tag_on_redis() {
    let server = RedisServer::start();
    every_name_is_a_place_of_its_own(&server.url()).await;
    let raw = redis::Client::open(server.url()).unwrap();
    let mut con = raw.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut con)
        .await
        .unwrap();
    let tags: BTreeSet<String> = NAMES.iter().map(|n| dlock_core::redis::escape(n)).collect();
    assert!(!keys.is_empty());
    for key in keys {
        let key = String::from_utf8(key).expect("keys are the names' UTF-8");
        let tag = key
            .strip_prefix("dlock:{")
            .and_then(|rest| rest.split_once('}'))
            .map(|(tag, _)| tag.to_owned());
        assert!(
            tag.as_ref().is_some_and(|t| tags.contains(t)),
            "{key:?} is not inside one name's hash tag"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_names_stay_one_node_below_the_root_on_zookeeper() {
    let zk = ZkEnsemble::start(1);
    every_name_is_a_place_of_its_own(&zk.url()).await;
    let client = zookeeper_client::Client::connect(&zk.hosts())
        .await
        .unwrap();
    let top = client.list_children("/").await.unwrap();
    let top: BTreeSet<String> = top.into_iter().collect();
    assert_eq!(
        top,
        BTreeSet::from(["dlock".to_owned(), "zookeeper".to_owned()])
    );
    let mut places = BTreeSet::new();
    for name in NAMES {
        let escaped = dlock_core::zk::escape(name);
        for suffix in ["", ".semaphore", ".rwlock"] {
            places.insert(format!("{escaped}{suffix}"));
        }
    }
    let children = client.list_children("/dlock").await.unwrap();
    for child in &children {
        assert!(places.contains(child), "/dlock/{child} is no name's place");
        // Released: each place is an empty directory (it keeps the sequence), no deeper.
        let inside = client
            .list_children(&format!("/dlock/{child}"))
            .await
            .unwrap();
        assert!(inside.is_empty(), "/dlock/{child} holds {inside:?}");
    }
    assert_eq!(
        children.len(),
        places.len(),
        "one place per name and primitive"
    );
}
