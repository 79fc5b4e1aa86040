//! Leader election (PROTOCOL.md §20) against a real redis-server, Redis Cluster and ZooKeeper,
//! and on memory:// (PostgreSQL and MariaDB run the same scenarios in `tests/sql.rs`): one
//! leader at a time, terms that grow, observers that hear every change — a resignation, a new
//! value, and a leader that dies without a word — and refusals of what cannot be done.
//! Verdicts wait for events, never for a sleep to be long enough.

use std::time::Duration;

use dlock::Error;
use dlock_testkit::{RedisCluster, RedisServer, ZkEnsemble};

mod common;
use common::{connect, leader, next};

/// A leader of election `reports` written by hand into redis-server, as PROCLAIM leaves it
/// (term 7, value `dead:9`), with a lease of `ms` milliseconds from now: a process that died.
async fn write_dead_leader(url: String, ms: u64) {
    let mut con = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let key = dlock_core::redis::LockKeys::new("reports")
        .lock()
        .to_owned();
    let _: () = redis::pipe()
        .hset_multiple(
            &key,
            &[
                ("owner", "dead-1"),
                ("count", "1"),
                ("fence", "7"),
                ("value", "dead:9"),
            ],
        )
        .pexpire(&key, ms as i64)
        .query_async(&mut con)
        .await
        .unwrap();
}

#[tokio::test]
async fn on_redis_candidates_take_turns_and_observers_hear_each() {
    let server = RedisServer::start();
    common::candidates_take_turns_and_observers_hear_each(&server.url()).await;
}

#[tokio::test]
async fn on_redis_a_silent_death_is_noticed_within_the_lease() {
    let server = RedisServer::start();
    let url = server.url();
    common::a_silent_death_is_noticed_within_the_lease(&url, |ms| {
        write_dead_leader(url.clone(), ms)
    })
    .await;
}

#[tokio::test]
async fn on_memory_candidates_take_turns_and_observers_hear_each() {
    common::candidates_take_turns_and_observers_hear_each("memory://election-turns").await;
}

#[tokio::test]
async fn on_a_cluster_candidates_take_turns_and_observers_hear_each() {
    let cluster = RedisCluster::start(3);
    common::candidates_take_turns_and_observers_hear_each(&cluster.url()).await;
}

#[tokio::test]
async fn on_zookeeper_candidates_take_turns_and_observers_hear_each() {
    let zk = ZkEnsemble::start(1);
    common::candidates_take_turns_and_observers_hear_each(&zk.url()).await;
}

/// Curator's `LeaderSelector` is an `InterProcessMutex` whose nodes carry the participant id:
/// a Java participant's node (created here as Curator creates it) leads a dlock election of
/// that path with its id as the value, dlock's candidates queue behind it, and its session's
/// end (its node going) is heard at once.
#[tokio::test]
async fn on_zookeeper_a_curator_leader_selector_participant_leads_and_is_observed() {
    let zk = ZkEnsemble::start(1);
    let (watcher, candidate) = (
        connect(&zk.url()).await.unwrap(),
        connect(&zk.url()).await.unwrap(),
    );
    let mut observer = watcher.election("reports").observe().unwrap();
    assert_eq!(next(&mut observer).await, None);
    let java = zookeeper_client::Client::connect(&zk.hosts())
        .await
        .unwrap();
    let dir = dlock_core::zk::lock_dir(dlock_core::DEFAULT_ZK_ROOT, "reports");
    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    java.mkdir(&dir, &persistent).await.unwrap();
    let prefix = format!("{dir}/_c_0f3b2c1e-9a8d-4c1b-b2a7-5e6f7a8b9c0d-lock-");
    let ephemeral = zookeeper_client::CreateMode::EphemeralSequential
        .with_acls(zookeeper_client::Acls::anyone_all());
    let (_, seq) = java.create(&prefix, b"java-1", &ephemeral).await.unwrap();
    let term = seq.into_i64() as u64 + 1;
    assert_eq!(next(&mut observer).await, leader(term, "java-1"));
    let election = candidate.election("reports");
    let campaign = tokio::spawn(async move { election.campaign("dlock-1").await });
    common::eventually("dlock queues behind Java", || async {
        common::waiters(&watcher, "reports").await == 1
    })
    .await;
    drop(java); // its session closes: the node goes
    let lead = campaign.await.unwrap().unwrap();
    assert!(lead.term() > term);
    let mut seen = next(&mut observer).await;
    if seen.is_none() {
        seen = next(&mut observer).await;
    }
    assert_eq!(seen, leader(lead.term(), "dlock-1"));
    lead.resign().await.unwrap();
}

/// Losing the lease ends leadership once, and the term is refused by the fenced write after a
/// successor wrote.
#[tokio::test]
async fn a_paused_leader_is_told_before_its_successor_leads_and_its_writes_are_fenced() {
    let server = RedisServer::start();
    let old = connect(&server.url()).await.unwrap();
    let new = connect(&server.url()).await.unwrap();
    let lead = old
        .election("jobs")
        .lease(Duration::from_millis(1_500))
        .campaign("old")
        .await
        .unwrap();
    // The local deadline is ahead, within the lease, and renewals move it on.
    let first_deadline = lead.valid_until();
    let left = first_deadline - tokio::time::Instant::now();
    assert!(left <= Duration::from_millis(1_500), "{left:?}");
    common::eventually("a renewal moves the deadline on", || async {
        lead.valid_until() > first_deadline
    })
    .await;
    let election = new.election("jobs");
    let next_leader = tokio::spawn(async move { election.campaign("new").await });
    server.pause(); // the old leader cannot renew; the new one cannot be granted either
    let reason = lead.lost().await;
    assert_eq!(reason, dlock::LostReason::Expired);
    server.resume();
    let successor = next_leader.await.unwrap().unwrap();
    assert!(successor.term() > lead.term());
    let written = new
        .fenced_write("jobs-table", successor.term(), "new")
        .await;
    assert_eq!(written.unwrap(), dlock::FencedWrite::Written);
    let stale = old.fenced_write("jobs-table", lead.term(), "old").await;
    assert!(matches!(stale.unwrap(), dlock::FencedWrite::Stale { .. }));
    assert!(matches!(lead.resign().await, Err(Error::Lost(_))));
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_sent() {
    let client = connect("memory://election-refusals").await.unwrap();
    let too_long = "v".repeat(dlock_core::MAX_VALUE_LEN + 1);
    let refused = client.election("e").campaign(too_long).await;
    assert!(
        matches!(&refused, Err(Error::Engine(dlock_core::Error::InvalidArgument(m))) if m.contains("4096")),
        "{refused:?}"
    );
    let empty = client.election("").campaign("x").await;
    assert!(
        matches!(empty, Err(Error::Engine(dlock_core::Error::EmptyName))),
        "{empty:?}"
    );
    assert!(client.election("").observe().is_err());
}

#[tokio::test]
async fn redlock_refuses_elections_and_keeps_nothing() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let client = connect(&dlock_testkit::redlock_url(&nodes)).await.unwrap();
    let refused = client.election("e").leader().await;
    assert!(
        matches!(&refused, Err(Error::Engine(dlock_core::Error::InvalidArgument(m))) if m.contains("no elections")),
        "{refused:?}"
    );
    let refused = client.election("e").campaign("v").await;
    assert!(matches!(
        refused,
        Err(Error::Engine(dlock_core::Error::InvalidArgument(_)))
    ));
    // Refused before the campaign took the lock.
    assert!(client.status("e").await.unwrap().owner.is_none());
}
