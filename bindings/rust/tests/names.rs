//! Crafted names cannot reach another lock's keys, nodes or rows: names built from the
//! characters that structure keys, paths and SQL (`{`, `}`, `%`, `/`, `.`, `:`, `'`, `\`, `_`,
//! NUL, 4-byte UTF-8) and names that a careless collation would confuse (case, a trailing space,
//! composed and decomposed accents) are each a lock of their own, held at once, on real
//! redis-server, ZooKeeper, PostgreSQL and MariaDB and on memory://; every key, node and row
//! they make belongs to its own name.

use std::collections::BTreeSet;
use std::time::Duration;

use dlock::Client;
use dlock_testkit::{MariadbServer, PostgresServer, RedisServer, ZkEnsemble};

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
    "A",
    "a ",
    "'",
    "a'; DROP TABLE dlock_lock; --",
    "\\",
    "_",
    "\u{e9}",
    "e\u{301}",
];

/// Holds every name as a lock, a permit of a one-permit semaphore and a write hold at once:
/// had two of them shared a key or node, one acquire would find it taken. Then another
/// client finds each of them taken, and each name's status shows its own tenure.
async fn every_name_is_a_place_of_its_own(url: &str, names: &[&str]) {
    let client = connect(url).await.unwrap();
    let other = connect(url).await.unwrap();
    let mut held = Vec::new();
    for name in names {
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
    for name in names {
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
    for (name, guards) in names.iter().zip(held.chunks(3)) {
        let status = client.status(name).await.unwrap();
        assert_eq!(status.fencing_token, guards[0].fencing_token(), "{name:?}");
        assert_eq!(status.count, 1, "{name:?}");
    }
    for guard in held {
        guard.release().await.unwrap();
    }
    for name in names {
        assert!(
            other.lock(*name).try_acquire().await.unwrap().is_some(),
            "{name:?}"
        );
    }
    drop::<Client>(client);
}

#[tokio::test]
async fn crafted_names_stay_apart_in_memory() {
    every_name_is_a_place_of_its_own("memory://crafted-names", NAMES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_names_stay_inside_their_hash_tag_on_redis() {
    let server = RedisServer::start();
    every_name_is_a_place_of_its_own(&server.url(), NAMES).await;
    let raw = redis::Client::open(server.url()).unwrap();
    let mut con = raw.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut con)
        .await
        .unwrap();
    let tags: BTreeSet<String> = NAMES
        .iter()
        .map(|n| dlock_core::redis::escape(n).into_owned())
        .collect();
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
    every_name_is_a_place_of_its_own(&zk.url(), NAMES).await;
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
        // Released: each place is a directory that keeps only its pin (and so its
        // sequence), no deeper; a semaphore's, its gate (pinned) and its leases (empty).
        let path = format!("/dlock/{child}");
        let mut inside = client.list_children(&path).await.unwrap();
        inside.sort();
        if child.ends_with(".semaphore") {
            assert_eq!(inside, ["leases", "locks"], "{path}");
            let gate = client.list_children(&format!("{path}/locks")).await;
            assert_eq!(gate.unwrap(), [dlock_core::zk::PIN], "{path}/locks");
            let leases = client.list_children(&format!("{path}/leases")).await;
            assert_eq!(leases.unwrap(), Vec::<String>::new(), "{path}/leases");
        } else {
            assert_eq!(inside, [dlock_core::zk::PIN], "{path}");
        }
    }
    assert_eq!(
        children.len(),
        places.len(),
        "one place per name and primitive"
    );
}

/// The names as the database stores them, in hex: every row of every table names one of
/// `names` (compared as bytes, so no collation can have merged two of them).
fn stored_names_are_the_names(hex_names: &str, names: &[&str]) {
    let expected: BTreeSet<String> = names
        .iter()
        .map(|n| n.bytes().map(|b| format!("{b:02X}")).collect())
        .collect();
    let stored: BTreeSet<String> = hex_names.lines().map(str::to_uppercase).collect();
    assert_eq!(stored, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_names_are_rows_of_their_own_on_postgres() {
    let db = PostgresServer::start();
    // PostgreSQL's text holds no NUL: such a name is refused before anything is sent.
    let (nul, names): (Vec<&str>, Vec<&str>) = NAMES.iter().partition(|n| n.contains('\0'));
    let client = connect(&db.url()).await.unwrap();
    for name in nul {
        let err = client.lock(name).try_acquire().await.unwrap_err();
        assert_eq!(
            err.code(),
            dlock::ErrorCode::InvalidArgument,
            "{name:?}: {err}"
        );
    }
    every_name_is_a_place_of_its_own(&db.url(), &names).await;
    let hex = |table| {
        db.psql(&format!(
            "SELECT DISTINCT encode(convert_to(name, 'UTF8'), 'hex') FROM {table}"
        ))
    };
    stored_names_are_the_names(&hex("dlock_lock"), &names);
    assert_eq!(hex("dlock_holder"), "", "every hold released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_names_are_rows_of_their_own_on_mariadb() {
    let db = MariadbServer::start();
    every_name_is_a_place_of_its_own(&db.url(), NAMES).await;
    let hex = |table| db.sql(&format!("SELECT DISTINCT HEX(name) FROM dlock.{table}"));
    stored_names_are_the_names(&hex("dlock_lock"), NAMES);
    assert_eq!(hex("dlock_holder"), "", "every hold released");
}
