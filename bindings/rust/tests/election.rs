//! Leader election (PROTOCOL.md §20) against a real redis-server, Redis Cluster, ZooKeeper,
//! PostgreSQL and MariaDB, and on memory://: one leader at a time, terms that grow, observers that hear every change — a
//! resignation, a new value, and a leader that dies without a word — and refusals of what
//! cannot be done. Verdicts wait for events, never for a sleep to be long enough.

use std::time::Duration;

use dlock::{Error, Leader};
use dlock_testkit::{MariadbServer, PostgresServer, RedisCluster, RedisServer, ZkEnsemble};
use futures_util::StreamExt;

mod common;
use common::connect;

/// The next change an observer reports, within 60 s.
async fn next(observer: &mut dlock::Observer) -> Option<Leader> {
    tokio::time::timeout(Duration::from_secs(60), observer.next())
        .await
        .expect("an observer heard nothing for 60 s")
        .expect("the observer ended")
        .expect("the observer failed")
}

fn leader(term: u64, value: &str) -> Option<Leader> {
    Some(Leader {
        term,
        value: value.to_owned(),
    })
}

/// Two candidates on two clients, one observer on a third: the first leads, the second waits
/// and leads when the first resigns, with a larger term; a new value is heard in the same
/// term; the last resignation leaves the election free.
async fn candidates_take_turns_and_observers_hear_each(url: &str) {
    let (a, b, watcher) = (
        connect(url).await.unwrap(),
        connect(url).await.unwrap(),
        connect(url).await.unwrap(),
    );
    let mut observer = watcher.election("scheduler").observe().unwrap();
    assert_eq!(next(&mut observer).await, None, "nobody leads yet");

    let first = a.election("scheduler").campaign("a:1").await.unwrap();
    assert_eq!(next(&mut observer).await, leader(first.term(), "a:1"));
    assert_eq!(
        b.election("scheduler").leader().await.unwrap(),
        leader(first.term(), "a:1")
    );

    let election = b.election("scheduler");
    let second = tokio::spawn(async move { election.campaign("b:2").await });
    common::eventually("b queues", || async {
        common::waiters(&watcher, "scheduler").await == 1
    })
    .await;

    first.proclaim("a:1 (draining)").await.unwrap();
    assert_eq!(
        next(&mut observer).await,
        leader(first.term(), "a:1 (draining)")
    );

    let first_term = first.term();
    first.resign().await.unwrap();
    let second = second.await.unwrap().unwrap();
    assert!(second.term() > first_term, "terms grow");
    // A hand-off may show the free interval first; the new leader comes next either way.
    let mut seen = next(&mut observer).await;
    if seen.is_none() {
        seen = next(&mut observer).await;
    }
    assert_eq!(seen, leader(second.term(), "b:2"));

    second.resign().await.unwrap();
    assert_eq!(
        next(&mut observer).await,
        None,
        "free after the last resigns"
    );
    assert_eq!(a.election("scheduler").leader().await.unwrap(), None);
}

/// A leader of election `reports` written by hand into the server, as PROCLAIM leaves it (term
/// 7, value `dead:9`), with a lease of `ms` milliseconds from now: a process that died.
async fn write_dead_leader(url: &str, ms: u64) {
    if let Some(rest) = url.strip_prefix("postgres://") {
        let (client, connection) =
            tokio_postgres::connect(&format!("postgres://{rest}"), tokio_postgres::NoTls)
                .await
                .unwrap();
        tokio::spawn(connection);
        let sql = format!(
            "INSERT INTO dlock_lock (name, kind, owner, holds, fence, expires_at)
                 VALUES ('reports', 'lock', 'dead-1', 1, 7,
                         clock_timestamp() + interval '{ms} milliseconds')
                 ON CONFLICT (name, kind) DO UPDATE SET expires_at = EXCLUDED.expires_at;
             INSERT INTO dlock_leader VALUES ('reports', 7, 'dead:9') ON CONFLICT DO NOTHING"
        );
        client.batch_execute(&sql).await.unwrap();
    } else if url.starts_with("mysql://") {
        use mysql_async::prelude::Queryable;
        let mut conn = mysql_async::Conn::from_url(url).await.unwrap();
        let sql = format!(
            "INSERT INTO dlock_lock (name, kind, owner, holds, fence, expires_at)
                 VALUES ('reports', 'lock', 'dead-1', 1, 7,
                         UTC_TIMESTAMP(6) + INTERVAL {ms} * 1000 MICROSECOND)
                 ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at);
             INSERT IGNORE INTO dlock_leader VALUES ('reports', 7, 'dead:9')"
        );
        conn.query_drop(sql).await.unwrap();
    } else {
        let mut con = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let key = dlock_core::redis::LockKeys::new("reports").lock;
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
}

/// A leader whose process died: its lease runs out without a message. The observer notices
/// within the lease, and a waiting candidate takes over with a larger term.
async fn a_silent_death_is_noticed_within_the_lease(url: &str) {
    let watcher = connect(url).await.unwrap();
    let candidate = connect(url).await.unwrap();
    // Written with a long lease first: the observer sees it however slow the machine is.
    write_dead_leader(url, 600_000).await;

    let mut observer = watcher.election("reports").observe().unwrap();
    assert_eq!(next(&mut observer).await, leader(7, "dead:9"));
    let election = candidate.election("reports").lease(Duration::from_secs(5));
    let campaign = tokio::spawn(async move { election.campaign("alive:1").await });
    common::eventually("the candidate queues", || async {
        common::waiters(&watcher, "reports").await == 1
    })
    .await;
    // Its process dies: nothing more from it, and its lease runs out in 1 s.
    write_dead_leader(url, 1_000).await;
    let leadership = campaign.await.unwrap().unwrap();
    assert!(leadership.term() > 7);
    let mut seen = next(&mut observer).await;
    if seen.is_none() {
        seen = next(&mut observer).await;
    }
    assert_eq!(seen, leader(leadership.term(), "alive:1"));
    leadership.resign().await.unwrap();
}

#[tokio::test]
async fn on_redis_candidates_take_turns_and_observers_hear_each() {
    let server = RedisServer::start();
    candidates_take_turns_and_observers_hear_each(&server.url()).await;
}

#[tokio::test]
async fn on_redis_a_silent_death_is_noticed_within_the_lease() {
    let server = RedisServer::start();
    a_silent_death_is_noticed_within_the_lease(&server.url()).await;
}

#[tokio::test]
async fn on_postgres_candidates_take_turns_and_observers_hear_each() {
    let db = PostgresServer::start();
    candidates_take_turns_and_observers_hear_each(&db.url()).await;
}

#[tokio::test]
async fn on_postgres_a_silent_death_is_noticed_within_the_lease() {
    let db = PostgresServer::start();
    a_silent_death_is_noticed_within_the_lease(&db.url()).await;
}

#[tokio::test]
async fn on_mariadb_candidates_take_turns_and_observers_hear_each() {
    let db = MariadbServer::start();
    candidates_take_turns_and_observers_hear_each(&db.url()).await;
}

#[tokio::test]
async fn on_mariadb_a_silent_death_is_noticed_within_the_lease() {
    let db = MariadbServer::start();
    a_silent_death_is_noticed_within_the_lease(&db.url()).await;
}

/// A database set up by a release before elections (no `dlock_leader`, no election
/// functions): the next client to connect brings the schema up to date, and leads.
async fn a_schema_from_before_elections_is_brought_up_to_date(url: &str) {
    drop(connect(url).await.unwrap());
    let old_schema = [
        "DROP TABLE dlock_leader",
        "DROP PROCEDURE dlock_proclaim_v1",
        "DROP PROCEDURE dlock_resign_v1",
        "DROP PROCEDURE dlock_leader_v1",
    ];
    if let Some(rest) = url.strip_prefix("postgres://") {
        let (client, connection) =
            tokio_postgres::connect(&format!("postgres://{rest}"), tokio_postgres::NoTls)
                .await
                .unwrap();
        tokio::spawn(connection);
        let sql =
            old_schema.join(";").replace("PROCEDURE", "FUNCTION") + "; DROP FUNCTION dlock_tell_v1";
        client.batch_execute(&sql).await.unwrap();
    } else {
        use mysql_async::prelude::Queryable;
        let mut conn = mysql_async::Conn::from_url(url).await.unwrap();
        for sql in old_schema {
            conn.query_drop(sql).await.unwrap();
        }
    }
    let client = connect(url).await.unwrap();
    let lead = client.election("upgraded").campaign("v").await.unwrap();
    assert_eq!(
        client.election("upgraded").leader().await.unwrap(),
        leader(lead.term(), "v")
    );
    lead.resign().await.unwrap();
}

#[tokio::test]
async fn on_postgres_a_schema_from_before_elections_is_brought_up_to_date() {
    let db = PostgresServer::start();
    a_schema_from_before_elections_is_brought_up_to_date(&db.url()).await;
}

#[tokio::test]
async fn on_mariadb_a_schema_from_before_elections_is_brought_up_to_date() {
    let db = MariadbServer::start();
    a_schema_from_before_elections_is_brought_up_to_date(&db.url()).await;
}

/// PostgreSQL's text holds no NUL: such a value is refused before the campaign takes the lock.
#[tokio::test]
async fn on_postgres_a_value_it_cannot_store_is_refused_before_anything_is_sent() {
    let db = PostgresServer::start();
    let client = connect(&db.url()).await.unwrap();
    let refused = client.election("e").campaign("a\0b").await;
    assert!(
        matches!(&refused, Err(Error::Engine(dlock_core::Error::InvalidArgument(m))) if m.contains("NUL")),
        "{refused:?}"
    );
    assert!(client.status("e").await.unwrap().owner.is_none());
}

#[tokio::test]
async fn on_memory_candidates_take_turns_and_observers_hear_each() {
    candidates_take_turns_and_observers_hear_each("memory://election-turns").await;
}

#[tokio::test]
async fn on_a_cluster_candidates_take_turns_and_observers_hear_each() {
    let cluster = RedisCluster::start(3);
    candidates_take_turns_and_observers_hear_each(&cluster.url()).await;
}

#[tokio::test]
async fn on_zookeeper_candidates_take_turns_and_observers_hear_each() {
    let zk = ZkEnsemble::start(1);
    candidates_take_turns_and_observers_hear_each(&zk.url()).await;
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
