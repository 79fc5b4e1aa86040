//! The Rust client on a real three-master Redis Cluster (`redis-cli --cluster create` on free
//! loopback ports), with either engine (`DLOCK_TEST_ENGINE=wasm`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use dlock::FencedWrite;
use dlock_testkit::RedisCluster;

mod common;
use common::{builder, connect};

const MS: Duration = Duration::from_millis(1);

/// Lock names whose keys (hash tag `{name}`) land on each of the cluster's nodes.
fn names_on_every_node(cluster: &RedisCluster, per_node: usize) -> Vec<String> {
    let mut by_node = vec![Vec::new(); cluster.nodes().len()];
    for i in 0.. {
        let name = format!("job/{i}");
        let node = cluster.owner(cluster.slot(&name));
        if by_node[node].len() < per_node {
            by_node[node].push(name);
        }
        if by_node.iter().all(|names| names.len() == per_node) {
            break;
        }
    }
    by_node.concat()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_every_node_exclude_hand_off_and_renew() {
    let cluster = RedisCluster::start(3);
    let names = names_on_every_node(&cluster, 3);
    let a = builder(&cluster.url())
        // A waiter refreshes its place only every 10 s: a quick hand-off below is the wake-up.
        .waiter_lease(Duration::from_secs(30))
        .connect()
        .await
        .unwrap();
    let b = builder(&cluster.url())
        .waiter_lease(Duration::from_secs(30))
        .connect()
        .await
        .unwrap();

    // Nine locks on three nodes, with short leases: the watchdog must keep every one (a
    // renewal that mixed slots would fail with CROSSSLOT and the locks would be lost).
    let mut held = Vec::new();
    for name in &names {
        let guard = a
            .lock(name.as_str())
            .lease(300 * MS)
            .acquire()
            .await
            .unwrap();
        assert!(b.lock(name.as_str()).try_acquire().await.unwrap().is_none());
        held.push(guard);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        held.iter().all(|g| !g.is_lost()),
        "a renewal failed on the cluster"
    );

    // A waiter on each node is woken by the release, whichever node its pub/sub listens to.
    for guard in held {
        let name = guard.name().to_owned();
        let token = guard.fencing_token();
        let waiter = {
            let b = b.clone();
            let name = name.clone();
            tokio::spawn(async move { b.lock(name).lease(Duration::from_secs(30)).acquire().await })
        };
        tokio::time::sleep(50 * MS).await;
        let released = Instant::now();
        guard.release().await.unwrap();
        let next = waiter.await.unwrap().unwrap();
        assert!(
            released.elapsed() < Duration::from_secs(5),
            "{name}: handed off after {:?}, not by its wake-up",
            released.elapsed()
        );
        assert!(next.fencing_token() > token);
        next.release().await.unwrap();
    }
    let on_nodes: BTreeSet<usize> = names
        .iter()
        .map(|n| cluster.owner(cluster.slot(n)))
        .collect();
    assert_eq!(on_nodes.len(), 3, "the names covered every node");
}

/// A multi-lock's names live in different slots, on different masters: each is a lock of its
/// own, so nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_locks_span_slots_all_or_none() {
    let cluster = RedisCluster::start(3);
    common::multi_all_or_none(&cluster.url()).await;
    common::multi_contend(&cluster.url(), 2, 2, 6).await;
}

/// A semaphore's keys share the hash slot of its name; its permits are renewed in batches with
/// locks of other slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_let_in_at_most_their_permits() {
    let cluster = RedisCluster::start(3);
    common::semaphore_rules(&cluster.url(), true).await;
    common::semaphore_contend(&cluster.url(), 2, 2, 2, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_let_readers_share_and_writers_alone() {
    let cluster = RedisCluster::start(3);
    common::rw_rules(&cluster.url()).await;
    common::rw_contend(&cluster.url(), 2, 3, 3).await;
}

#[tokio::test]
async fn a_lock_survives_the_migration_of_its_slot() {
    let cluster = RedisCluster::start(3);
    let client = connect(&cluster.url()).await.unwrap();
    let guard = client
        .lock("migrating")
        .lease(600 * MS)
        .acquire()
        .await
        .unwrap();
    let slot = cluster.slot("migrating");
    let from = cluster.owner(slot);
    let to = (from + 1) % 3;
    cluster.migrate_slot(slot, to);
    assert_eq!(cluster.owner(slot), to);
    // Renewals now reach the new owner (through MOVED) and keep the lock for several leases.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(!guard.is_lost(), "the lock was lost in the migration");
    let status = client.status("migrating").await.unwrap();
    assert_eq!(status.fencing_token, guard.fencing_token());
    let other = connect(&cluster.url()).await.unwrap();
    assert!(
        other
            .lock("migrating")
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    guard.release().await.unwrap();
    let next = other
        .lock("migrating")
        .try_acquire()
        .await
        .unwrap()
        .unwrap();
    next.release().await.unwrap();
}

#[tokio::test]
async fn fenced_writes_and_bad_cluster_urls() {
    let cluster = RedisCluster::start(3);
    let client = connect(&cluster.url()).await.unwrap();
    let old = client.lock("stock").acquire().await.unwrap();
    let old_token = old.fencing_token();
    old.release().await.unwrap();
    let new = client.lock("stock").acquire().await.unwrap();
    assert_eq!(
        client
            .fenced_write("stock/42", new.fencing_token(), "7")
            .await
            .unwrap(),
        FencedWrite::Written
    );
    assert!(matches!(
        client
            .fenced_write("stock/42", old_token, "9")
            .await
            .unwrap(),
        FencedWrite::Stale { .. }
    ));
    new.release().await.unwrap();

    for url in [
        "redis-cluster://",
        "redis-cluster://127.0.0.1",
        "redis-cluster://127.0.0.1:6379/1",
        "redis-cluster://127.0.0.1:6379,:7000",
        "redis-cluster://127.0.0.1:notaport",
    ] {
        assert!(
            matches!(connect(url).await, Err(dlock::Error::InvalidUrl(_))),
            "{url} was not refused as invalid"
        );
    }
}
