//! The Rust client on Redlock over independent redis-servers (free loopback ports, no
//! persistence), with either engine (`DLOCK_TEST_ENGINE=wasm`): exclusion, fencing, nodes
//! that stop, freeze and come back empty.

use std::time::Duration;

use dlock::{Error, LostReason};
use dlock_testkit::{RedisServer, redlock_url as url};

mod common;
use common::{connect, contend};

const MS: Duration = Duration::from_millis(1);

fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_exclude_count_exactly_and_fence() {
    let nodes = servers(5);
    let url = url(&nodes);
    // Three clients, two tasks each, racing on one lock: the count is exact and tokens grow
    // in the order the holders got the lock.
    contend(&url, 3, 2, 10).await;

    let client = connect(&url).await.unwrap();
    let guard = client.lock("job").owner(1).acquire().await.unwrap();
    let token = guard.fencing_token();
    // The majority view has the tenure's token at once: a majority granted it, or was raised
    // to it, before the acquire returned. The other nodes' grants and raises may still be on
    // their way (a status request goes straight to the nodes, past the engine's requests in
    // flight), and each of them records the token once they land.
    let status = client.status("job").await.unwrap();
    assert_eq!(status.fencing_token, token);
    // Only a bound for a client that never raises a node; the loop ends on what the nodes say.
    let stuck = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let per_node = client.node_status("job").await.unwrap();
        assert_eq!(per_node.len(), 5);
        let views: Vec<_> = per_node.into_iter().map(Result::unwrap).collect();
        let carrying = views
            .iter()
            .filter(|s| s.owner.is_some() && s.fencing_token == token && s.latest_token >= token)
            .count();
        assert!(
            carrying >= 3,
            "no majority carries token {token}: {views:?}"
        );
        if carrying == 5 {
            break;
        }
        assert!(
            std::time::Instant::now() < stuck,
            "nodes never all recorded token {token}: {views:?}"
        );
        tokio::time::sleep(10 * MS).await;
    }
    assert_eq!(status.fencing_token, token);
    assert!(status.owner.is_some() && status.waiters.is_empty());
    // Reentry is counted by the engine: same tenure, same token.
    let again = client.lock("job").owner(1).acquire().await.unwrap();
    assert_eq!(again.fencing_token(), token);
    again.release().await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(client.status("job").await.unwrap().owner, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_locks_are_all_or_none_and_never_deadlock() {
    let nodes = servers(3);
    common::multi_all_or_none(&url(&nodes)).await;
    common::multi_contend(&url(&nodes), 2, 2, 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_down_changes_nothing_and_a_majority_down_loses_the_lock() {
    let mut nodes = servers(5);
    let url = url(&nodes);
    let a = connect(&url).await.unwrap();
    let b = connect(&url).await.unwrap();
    let guard = a.lock("job").lease(900 * MS).acquire().await.unwrap();
    let first = guard.fencing_token();

    // Two of five stop: renewals still reach a majority for several leases.
    nodes[0].stop();
    nodes[1].stop();
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(!guard.is_lost(), "lost with a majority up");
    assert!(b.lock("job").try_acquire().await.unwrap().is_none());
    let other = b.lock("other").acquire().await.unwrap();
    assert!(other.fencing_token() > 0);
    other.release().await.unwrap();
    let per_node = b.node_status("job").await.unwrap();
    assert!(per_node[0].is_err() && per_node[1].is_err());
    assert!(
        per_node[2..]
            .iter()
            .all(|s| s.as_ref().unwrap().owner.is_some())
    );

    // A third stops: no majority is left. The holder is told, within its lease.
    nodes[2].stop();
    let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("told it is lost within the lease");
    assert_eq!(reason, LostReason::Expired);
    // Stopped nodes refuse or never answer: a try-acquire of a lock nobody holds fails with
    // their error, not "busy". (On "job" the two live nodes may still report the old tenure
    // until its give-back reaches them, and "busy" would then be right.)
    match b.lock("fresh").try_acquire().await {
        Err(Error::Engine(dlock_core::Error::Unavailable(_) | dlock_core::Error::Timeout)) => {}
        other => panic!("a try-acquire without a majority gave {other:?}"),
    }
    match b.lock("job").wait(300 * MS).acquire().await {
        Err(Error::WaitTimedOut) => {}
        other => panic!("a wait without a majority gave {other:?}"),
    }
    assert!(matches!(
        b.status("job").await,
        Err(Error::Engine(dlock_core::Error::Unavailable(_)))
    ));

    // They come back empty; the lock works again and its tokens still grow.
    for node in &mut nodes[..3] {
        node.restart();
    }
    let next = b
        .lock("job")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    assert!(next.fencing_token() > first);
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_restarted_without_persistence_never_lower_a_token() {
    let mut nodes = servers(5);
    let url = url(&nodes);
    let a = connect(&url).await.unwrap();
    let b = connect(&url).await.unwrap();

    // A holder keeps its lock while one node comes back empty: four of five still hold it.
    let held = a.lock("job").lease(900 * MS).acquire().await.unwrap();
    nodes[4].restart();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!held.is_lost());
    assert!(b.lock("job").try_acquire().await.unwrap().is_none());
    let mut last = held.fencing_token();
    held.release().await.unwrap();

    // A minority, the other minority, then every node loses all its keys between tenures.
    for restart in [&[0, 1][..], &[2, 3], &[0, 1, 2, 3, 4]] {
        for &n in restart {
            nodes[n].restart();
        }
        let guard = b
            .lock("job")
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap();
        assert!(
            guard.fencing_token() > last,
            "token {} after {last} once nodes {restart:?} restarted",
            guard.fencing_token()
        );
        last = guard.fencing_token();
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_nodes_cost_a_timeout_not_the_lock() {
    let nodes = servers(5);
    let url = url(&nodes);
    let client = connect(&url).await.unwrap();
    // Two nodes freeze (SIGSTOP): their requests time out after a third of the lease while
    // the other three answer at once.
    nodes[0].pause();
    nodes[1].pause();
    let guard = client.lock("job").lease(600 * MS).acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!guard.is_lost(), "lost while a majority answered");
    nodes[0].resume();
    nodes[1].resume();
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_at_start_joins_later_and_bad_urls_are_refused() {
    let mut nodes = servers(3);
    let url = url(&nodes);
    nodes[2].stop();
    // One of three down: the client starts and locks with the other two.
    let client = connect(&url).await.unwrap();
    let guard = client.lock("job").acquire().await.unwrap();
    guard.release().await.unwrap();
    // The missing node comes up and is connected in the background: with another node down,
    // the lock still works, through it.
    nodes[2].restart();
    nodes[0].stop();
    let guard = client
        .lock("job")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    guard.release().await.unwrap();
    // Two of three down at start: no majority answers.
    nodes[1].stop();
    assert!(matches!(connect(&url).await, Err(Error::Connect(_))));

    assert!(matches!(
        client.fenced_write("stock", 1, "7").await,
        Err(Error::Unsupported(_))
    ));
    for bad in [
        "redlock://",
        "redlock://127.0.0.1",
        "redlock://127.0.0.1:6379,127.0.0.1:6379",
        "redlock://127.0.0.1:6379/2",
        "redlock://127.0.0.1:6379,:7000",
    ] {
        assert!(
            matches!(connect(bad).await, Err(Error::InvalidUrl(_))),
            "{bad} was not refused as invalid"
        );
    }
}
