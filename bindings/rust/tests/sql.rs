//! The Rust client against a real PostgreSQL and a real MariaDB (Debian's packages, run by the
//! tests in temp dirs on free loopback ports): every test runs on both (`on_both!`), but for
//! the wake-ups, which differ (NOTIFY on PostgreSQL, waiters that look again on MariaDB). With
//! `DLOCK_TEST_ENGINE=wasm` every client runs the engine from its WebAssembly component.

use std::sync::Arc;
use std::time::Duration;

use dlock::{Error, LostReason};
use dlock_testkit::{MariadbServer, PostgresServer};

mod common;
use common::{builder, connect, eventually, waiters};

const MS: Duration = Duration::from_millis(1);

/// A database server of the test's own, as the tests below use it.
trait Db: Sized {
    fn start() -> Self;
    fn url(&self) -> String;
    fn port(&self) -> u16;
    /// Runs SQL in the lock's database; rows by line, columns separated by `|`.
    fn query(&self, sql: &str) -> String;
    /// The database's "now" in SQL.
    const NOW: &'static str;
    /// The database's "now" plus `ms` milliseconds, in SQL.
    fn ms_from_now(ms: u64) -> String;
    /// Calls the protocol's function `function` (`dlock_<function>_v1`) with `args`, in SQL.
    fn call(&self, function: &str, args: &str) -> String;
    /// What the protocol's functions are: `FUNCTION` or `PROCEDURE`.
    const ROUTINE: &'static str;
    /// `expires_at` as µs on the database's clock, in SQL.
    const EXPIRES_US: &'static str;
    /// Kills the crash-like way and starts again on the same data.
    fn restart(&mut self);
    /// Kills every connection of the dlock clients; how many.
    fn kill_clients(&self) -> usize;
    /// URLs of this database's scheme that must be refused as invalid.
    fn bad_urls(&self) -> Vec<String>;
    /// The database stores a name with a NUL character (PostgreSQL's `text` cannot).
    const TAKES_NUL: bool;
    /// A server that speaks TLS with a certificate for 127.0.0.1 from its own CA.
    fn start_tls() -> Self;
    fn ca_file(&self) -> std::path::PathBuf;
    /// Whether every connection of the dlock clients is TLS.
    fn all_tls(&self) -> bool;
    /// The TLS server also takes plain connections.
    const TAKES_PLAIN: bool;
    /// Takes lock `name` for `token` for `lease_ms` behind dlock's back with `function`
    /// (`acquire`, or `permit_acquire` with `count` the number of permits): its fencing token.
    fn acquire_raw(
        &self,
        function: &str,
        name: &str,
        token: &str,
        lease_ms: u64,
        count: u32,
    ) -> u64 {
        let sql = format!(
            "CALL dlock_{function}_v1('{name}', '{token}', {lease_ms}, {count}, 'try', 3000, '')"
        );
        let row = self.query(&sql);
        row.split('|')
            .nth(1)
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{row}"))
    }
}

impl Db for PostgresServer {
    fn start() -> Self {
        PostgresServer::start()
    }
    fn url(&self) -> String {
        PostgresServer::url(self)
    }
    fn port(&self) -> u16 {
        PostgresServer::port(self)
    }
    fn query(&self, sql: &str) -> String {
        self.psql(sql)
    }
    fn start_tls() -> Self {
        PostgresServer::start_tls().expect("a TLS server")
    }
    fn ca_file(&self) -> std::path::PathBuf {
        PostgresServer::ca_file(self)
    }
    fn all_tls(&self) -> bool {
        self.psql("SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'dlock'") == "t"
    }
    const TAKES_PLAIN: bool = true;
    const NOW: &'static str = "now()";
    fn ms_from_now(ms: u64) -> String {
        format!("now() + interval '{ms} milliseconds'")
    }
    fn call(&self, function: &str, args: &str) -> String {
        self.psql(&format!("SELECT dlock_{function}_v1({args})"))
    }
    const ROUTINE: &'static str = "FUNCTION";
    const EXPIRES_US: &'static str = "(extract(epoch FROM expires_at) * 1000000)::bigint";
    const TAKES_NUL: bool = false;
    fn bad_urls(&self) -> Vec<String> {
        let port = self.port();
        vec![
            format!("postgres://postgres@127.0.0.1:{port}/postgres?table_prefix=Bad-Prefix"),
            format!("postgres://postgres@127.0.0.1:{port}/postgres?table_prefix="),
            format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=bogus"),
            format!("postgres://postgres@127.0.0.1:{port}/postgres?sslrootcert=/ca.pem"),
            format!("postgresql://postgres@127.0.0.1:{port}/postgres?no_such_option=1"),
            "postgres://".to_owned(),
        ]
    }
    fn restart(&mut self) {
        PostgresServer::restart(self)
    }
    fn kill_clients(&self) -> usize {
        self.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'dlock'")
            .parse()
            .unwrap()
    }
    fn acquire_raw(
        &self,
        function: &str,
        name: &str,
        token: &str,
        lease_ms: u64,
        count: u32,
    ) -> u64 {
        let sql = format!(
            "SELECT (dlock_{function}_v1('{name}', '{token}', {lease_ms}, {count}, 'try', 3000, ''))[2]"
        );
        self.psql(&sql).parse().unwrap()
    }
}

impl Db for MariadbServer {
    fn start() -> Self {
        MariadbServer::start()
    }
    fn url(&self) -> String {
        MariadbServer::url(self)
    }
    fn port(&self) -> u16 {
        MariadbServer::port(self)
    }
    fn query(&self, sql: &str) -> String {
        self.sql(sql).replace('\t', "|")
    }
    fn start_tls() -> Self {
        MariadbServer::start_tls().expect("a TLS server")
    }
    fn ca_file(&self) -> std::path::PathBuf {
        MariadbServer::ca_file(self)
    }
    /// The TLS server refuses every other connection (`require_secure_transport`).
    fn all_tls(&self) -> bool {
        self.sql("SELECT @@require_secure_transport") == "1"
    }
    const TAKES_PLAIN: bool = false;
    const NOW: &'static str = "UTC_TIMESTAMP(6)";
    fn ms_from_now(ms: u64) -> String {
        format!("UTC_TIMESTAMP(6) + INTERVAL {} MICROSECOND", ms * 1000)
    }
    fn call(&self, function: &str, args: &str) -> String {
        self.query(&format!("CALL dlock_{function}_v1({args})"))
    }
    const ROUTINE: &'static str = "PROCEDURE";
    const EXPIRES_US: &'static str = "CAST(UNIX_TIMESTAMP(expires_at) * 1000000 AS SIGNED)";
    const TAKES_NUL: bool = true;
    fn bad_urls(&self) -> Vec<String> {
        let port = self.port();
        vec![
            format!("mysql://root@127.0.0.1:{port}/dlock?table_prefix=Bad-Prefix"),
            format!("mariadb://root@127.0.0.1:{port}/dlock?table_prefix="),
            format!("mysql://root@127.0.0.1:{port}/dlock?poll_interval_ms=0"),
            format!("mysql://root@127.0.0.1:{port}/dlock?poll_interval_ms=soon"),
            format!("mysql://root@127.0.0.1:{port}/dlock?no_such_option=1"),
            format!("mysql://root@127.0.0.1:{port}/dlock?require_ssl=true"),
            format!("mysql://root@127.0.0.1:{port}/dlock?sslmode=bogus"),
            format!("mysql://root@127.0.0.1:{port}/dlock?sslrootcert=/ca.pem"),
            format!("mysql://root@127.0.0.1:{port}"),
            "mysql://".to_owned(),
        ]
    }
    fn restart(&mut self) {
        MariadbServer::restart(self)
    }
    fn kill_clients(&self) -> usize {
        let ids = self.sql("SELECT id FROM information_schema.PROCESSLIST WHERE db = 'dlock' AND id <> CONNECTION_ID()");
        let ids: Vec<&str> = ids.lines().filter(|l| !l.is_empty()).collect();
        for id in &ids {
            let _ = self.sql(&format!("KILL {id}"));
        }
        ids.len()
    }
}

/// Each test body, a generic async fn over the database, runs on PostgreSQL and on MariaDB.
macro_rules! on_both {
    ($($test:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test::<dlock_testkit::PostgresServer>().await
                }
            )*
        }
        mod mariadb {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test::<dlock_testkit::MariadbServer>().await
                }
            )*
        }
    };
}

/// Elections (PROTOCOL.md §20): candidates take turns and an observer hears each change —
/// by NOTIFY on PostgreSQL, by looking again on MariaDB.
async fn elections_take_turns_and_observers_hear_each<D: Db>() {
    let db = D::start();
    common::candidates_take_turns_and_observers_hear_each(&db.url()).await;
}

/// A leader that dies silently (written by hand: a tenure taken behind dlock's back with term
/// 7, its value proclaimed, its lease then cut short) is noticed by the database's clock.
async fn a_silent_leader_death_is_noticed_within_the_lease<D: Db>() {
    let db = D::start();
    common::a_silent_death_is_noticed_within_the_lease(&db.url(), |ms| {
        if db.query("SELECT count(*) FROM dlock_leader WHERE name = 'reports'") == "0" {
            let term = db.acquire_raw("acquire", "reports", "dead-1", ms, 1);
            db.query(&format!(
                "UPDATE dlock_lock SET fence = 7 WHERE name = 'reports' AND fence = {term}"
            ));
            db.call("proclaim", "'reports', 'dead-1', 7, 'dead:9'");
        }
        let until = D::ms_from_now(ms);
        db.query(&format!(
            "UPDATE dlock_lock SET expires_at = {until} WHERE name = 'reports'"
        ));
        std::future::ready(())
    })
    .await;
}

/// A database set up by a release before elections (no `dlock_leader`, no election
/// functions): the next client to connect brings the schema up to date, and leads.
async fn a_schema_from_before_elections_is_brought_up_to_date<D: Db>() {
    let db = D::start();
    drop(connect(&db.url()).await.unwrap());
    db.query("DROP TABLE dlock_leader");
    for function in ["proclaim", "resign", "leader"] {
        db.query(&format!("DROP {} dlock_{function}_v1", D::ROUTINE));
    }
    let client = connect(&db.url()).await.unwrap();
    let lead = client.election("upgraded").campaign("v").await.unwrap();
    assert_eq!(
        client.election("upgraded").leader().await.unwrap(),
        common::leader(lead.term(), "v")
    );
    lead.resign().await.unwrap();
}

/// A leader's value or an election's name the database cannot store (a NUL on PostgreSQL) is
/// refused before the campaign takes the lock, or an observer reads; MariaDB stores them as
/// bytes.
async fn a_leader_value_is_stored_or_refused_before_anything_is_sent<D: Db>() {
    let db = D::start();
    let client = connect(&db.url()).await.unwrap();
    let campaign = client.election("e").campaign("a\0b").await;
    if D::TAKES_NUL {
        let lead = campaign.unwrap();
        let seen = client.election("e").leader().await.unwrap();
        assert_eq!(seen, common::leader(lead.term(), "a\0b"));
        lead.resign().await.unwrap();
    } else {
        assert!(
            matches!(&campaign, Err(Error::Engine(dlock_core::Error::InvalidArgument(m))) if m.contains("NUL")),
            "{campaign:?}"
        );
        assert!(client.status("e").await.unwrap().owner.is_none());
    }
    let observed = client.election("a\0b").observe();
    if D::TAKES_NUL {
        assert_eq!(observed.unwrap().changed().await.unwrap(), None);
    } else {
        assert!(
            matches!(&observed, Err(Error::Engine(dlock_core::Error::InvalidArgument(m))) if m.contains("NUL")),
            "{:?}",
            observed.err()
        );
    }
}

on_both!(
    mutual_exclusion_and_increasing_tokens_across_clients,
    multi_locks_are_all_or_none_and_never_deadlock,
    non_fair_and_fair_acquires_exclude_each_other,
    reentrant_acquires_share_a_tenure_and_the_row_shows_it,
    try_acquire_and_wait_timeout,
    waiters_are_served_first_come_first_served_and_woken,
    fencing_tokens_grow_across_row_deletion_and_a_database_restart,
    a_dead_holders_lock_goes_to_the_waiter_after_its_lease,
    lost_fires_when_the_row_is_taken_behind_the_holders_back,
    killed_connections_come_back_and_keep_the_hold,
    a_hold_survives_a_database_restart_within_its_lease,
    a_table_prefix_is_a_lock_space_of_its_own,
    semaphores_let_in_at_most_their_permits,
    an_abandoned_permit_goes_to_the_waiter_after_its_lease,
    read_write_locks_let_readers_share_and_writers_alone,
    bad_names_and_urls_are_refused_with_a_typed_error,
    tls_verifies_the_server,
    a_fenced_update_refuses_a_stale_holder,
    elections_take_turns_and_observers_hear_each,
    a_silent_leader_death_is_noticed_within_the_lease,
    a_schema_from_before_elections_is_brought_up_to_date,
    a_leader_value_is_stored_or_refused_before_anything_is_sent,
    stats_are_exact_after_a_scripted_sequence,
);

/// The stats test every host runs (`common::stats_after_a_script`).
async fn stats_are_exact_after_a_scripted_sequence<D: Db>() {
    let db = D::start();
    common::stats_after_a_script(&db.url()).await;
}

async fn mutual_exclusion_and_increasing_tokens_across_clients<D: Db>() {
    let pg = D::start();
    common::contend(&pg.url(), 3, 3, 8).await;
    let client = connect(&pg.url()).await.unwrap();
    let status = client.status("counter").await.unwrap();
    assert_eq!((status.owner, status.waiters.len()), (None, 0));
    assert_eq!(
        status.latest_token,
        pg.query("SELECT fence FROM dlock_lock WHERE name = 'counter'")
            .parse::<u64>()
            .unwrap()
    );
}

async fn multi_locks_are_all_or_none_and_never_deadlock<D: Db>() {
    let pg = D::start();
    common::multi_all_or_none(&pg.url()).await;
    common::multi_contend(&pg.url(), 2, 2, 6).await;
}

async fn non_fair_and_fair_acquires_exclude_each_other<D: Db>() {
    let pg = D::start();
    common::fair_and_non_fair_contend(&pg.url(), 4, 10).await;
}

/// The row says who holds the lock, in words a person reads: the full name, the owner token,
/// the hold count, the fencing token and the expiry by the database's clock.
async fn reentrant_acquires_share_a_tenure_and_the_row_shows_it<D: Db>() {
    let pg = D::start();
    let client = connect(&pg.url()).await.unwrap();
    let name = "orders/42 — ünïcode's \"quoted\" name";
    let outer = client.lock(name).owner(7).acquire().await.unwrap();
    let inner = client.lock(name).owner(7).acquire().await.unwrap();
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    let status = client.status(name).await.unwrap();
    assert_eq!(status.count, 2);
    let row = pg.query(&format!(
        "SELECT name, owner, holds, fence, CASE WHEN expires_at > {} THEN 'valid' END FROM dlock_lock WHERE name = '{}'",
        D::NOW,
        name.replace('\'', "''")
    ));
    assert_eq!(
        row,
        format!(
            "{name}|{}|2|{}|valid",
            status.owner.clone().unwrap(),
            outer.fencing_token()
        )
    );
    assert!(
        client
            .lock(name)
            .owner(8)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    inner.release().await.unwrap();
    assert_eq!(client.status(name).await.unwrap().count, 1);
    outer.release().await.unwrap();
    assert_eq!(client.status(name).await.unwrap().owner, None);
}

async fn try_acquire_and_wait_timeout<D: Db>() {
    let pg = D::start();
    let a = connect(&pg.url()).await.unwrap();
    let b = connect(&pg.url()).await.unwrap();
    let held = a.lock("x").acquire().await.unwrap();
    assert!(b.lock("x").try_acquire().await.unwrap().is_none());
    let err = b.lock("x").wait(200 * MS).acquire().await.unwrap_err();
    assert_eq!(err, Error::WaitTimedOut);
    eventually("the timed-out waiter to leave the queue", || async {
        waiters(&a, "x").await == 0
    })
    .await;
    held.release().await.unwrap();
    assert!(b.lock("x").try_acquire().await.unwrap().is_some());
}

/// Waiters queue in order and each release hands the lock to the next, which is woken by NOTIFY
/// on PostgreSQL and finds it at its next look (every 50 ms) on MariaDB: their waiter lease
/// (60 s) makes them refresh only every 20 s, and the holders' leases last 60 s, so without
/// either the five hand-offs could not end within the 60 s allowed.
async fn waiters_are_served_first_come_first_served_and_woken<D: Db>() {
    let pg = D::start();
    let holder = connect(&pg.url()).await.unwrap();
    let held = holder
        .lock("fifo")
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let client = builder(&pg.url())
            .waiter_lease(Duration::from_secs(60))
            .connect()
            .await
            .unwrap();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let guard = client
                .lock("fifo")
                .lease(Duration::from_secs(60))
                .acquire()
                .await
                .unwrap();
            order.lock().unwrap().push((i, guard.fencing_token()));
            guard.release().await.unwrap();
        }));
        eventually("the waiter to queue", || async {
            waiters(&holder, "fifo").await == i + 1
        })
        .await;
    }
    let first = held.fencing_token();
    held.release().await.unwrap();
    let all = futures_util::future::join_all(tasks);
    for t in tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("every waiter woken by its hand-off")
    {
        t.unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );
    let mut last = first;
    for (_, token) in order {
        assert!(token > last, "{token} after {last}");
        last = token;
    }
}

/// Tokens keep growing when the lock's row is deleted and after the database restarts: they
/// come from a sequence, whose advances are in the WAL before any commit that used them.
async fn fencing_tokens_grow_across_row_deletion_and_a_database_restart<D: Db>() {
    let mut pg = D::start();
    let mut last = 0;
    let client = connect(&pg.url()).await.unwrap();
    for _ in 0..3 {
        let guard = client.lock("fenced").acquire().await.unwrap();
        assert!(guard.fencing_token() > last);
        last = guard.fencing_token();
        guard.release().await.unwrap();
    }
    pg.query("DELETE FROM dlock_lock");
    let guard = client.lock("fenced").acquire().await.unwrap();
    assert!(
        guard.fencing_token() > last,
        "{} after {last}",
        guard.fencing_token()
    );
    last = guard.fencing_token();
    guard.release().await.unwrap();
    drop(client);
    pg.restart();
    let client = connect(&pg.url()).await.unwrap();
    let guard = client.lock("fenced").acquire().await.unwrap();
    assert!(
        guard.fencing_token() > last,
        "{} after {last}",
        guard.fencing_token()
    );
}

/// A holder that dies without releasing keeps the lock until its lease runs out by the
/// database's clock; then the waiter at the head takes it with a newer token. Both instants
/// are read from the database's clock, never from this process's.
async fn a_dead_holders_lock_goes_to_the_waiter_after_its_lease<D: Db>() {
    let pg = D::start();
    let client = connect(&pg.url()).await.unwrap();
    let first = pg.acquire_raw("acquire", "abandoned", "dead-holder", 400, 1);
    let expires = |pg: &D| -> i64 {
        let sql = format!(
            "SELECT {} FROM dlock_lock WHERE name = 'abandoned' AND kind = 'lock'",
            D::EXPIRES_US
        );
        pg.query(&sql).parse().unwrap()
    };
    let dead_until = expires(&pg);
    let lease = Duration::from_secs(60); // no renewal before the check below
    let guard = client
        .lock("abandoned")
        .lease(lease)
        .wait(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let granted_at = expires(&pg) - lease.as_micros() as i64;
    assert!(
        granted_at >= dead_until,
        "granted at {granted_at} µs, before the dead holder's lease ran out at {dead_until} µs"
    );
    assert!(guard.fencing_token() > first);
}

async fn lost_fires_when_the_row_is_taken_behind_the_holders_back<D: Db>() {
    let pg = D::start();
    let client = connect(&pg.url()).await.unwrap();
    let guard = client
        .lock("fragile")
        .lease(600 * MS)
        .acquire()
        .await
        .unwrap();
    pg.query("UPDATE dlock_lock SET owner = 'someone else' WHERE name = 'fragile'");
    let reason = tokio::time::timeout(Duration::from_secs(30), guard.lost())
        .await
        .expect("lost at its next renewal");
    assert_eq!(reason, LostReason::NotOwner);
    assert!(guard.release().await.unwrap_err().is_lost());
}

/// Every dlock connection killed (`pg_terminate_backend`, `KILL`): the clients reconnect, the
/// hold is renewed on a new connection, and the waiter gets the lock at its release — woken
/// through the new LISTEN on PostgreSQL, at its next look on MariaDB (its refresh would come
/// only after 20 s, the holder's lease after 60 s).
async fn killed_connections_come_back_and_keep_the_hold<D: Db>() {
    let pg = D::start();
    let holder = connect(&pg.url()).await.unwrap();
    let guard = holder
        .lock("k")
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let waiter = builder(&pg.url())
        .waiter_lease(Duration::from_secs(60))
        .connect()
        .await
        .unwrap();
    let waiting = tokio::spawn(async move { waiter.lock("k").acquire().await });
    eventually("the waiter to queue", || async {
        waiters(&holder, "k").await == 1
    })
    .await;
    let killed = pg.kill_clients();
    assert!(
        killed >= 2,
        "killed {killed} connections, at least one per client"
    );
    // The hold is still ours: an extend on the new connection confirms it.
    let mut extended = guard.extend(Duration::from_secs(60)).await;
    for _ in 0..300 {
        if extended.is_ok() {
            break;
        }
        tokio::time::sleep(100 * MS).await;
        extended = guard.extend(Duration::from_secs(60)).await;
    }
    extended.expect("the hold survives its connection");
    assert!(!guard.is_lost());
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("handed the lock at the release")
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > token);
}

/// A restart within the lease keeps the lock: the row is durable, and the holder's renewals
/// reach the database again once it is back.
async fn a_hold_survives_a_database_restart_within_its_lease<D: Db>() {
    let mut pg = D::start();
    let client = connect(&pg.url()).await.unwrap();
    let guard = client
        .lock("durable")
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    pg.restart();
    let mut status = client.status("durable").await;
    for _ in 0..300 {
        if status.is_ok() {
            break;
        }
        tokio::time::sleep(100 * MS).await;
        status = client.status("durable").await;
    }
    let status = status.expect("the database is back");
    assert_eq!(status.fencing_token, guard.fencing_token());
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
    assert_eq!(client.status("durable").await.unwrap().owner, None);
}

/// Two table prefixes are two separate lock spaces.
async fn a_table_prefix_is_a_lock_space_of_its_own<D: Db>() {
    let pg = D::start();
    let a = connect(&pg.url()).await.unwrap();
    let b = connect(&format!("{}?table_prefix=jobs_", pg.url()))
        .await
        .unwrap();
    let held = a.lock("x").acquire().await.unwrap();
    let other = b
        .lock("x")
        .try_acquire()
        .await
        .unwrap()
        .expect("another lock space");
    assert_eq!(
        pg.query("SELECT count(*) FROM jobs_lock WHERE owner IS NOT NULL"),
        "1"
    );
    held.release().await.unwrap();
    other.release().await.unwrap();
}

async fn semaphores_let_in_at_most_their_permits<D: Db>() {
    let db = D::start();
    common::semaphore_rules(&db.url(), true).await;
    common::semaphore_contend(&db.url(), 3, 3, 3, 4).await;
    // The semaphore's row keeps its number of permits; its permits have gone.
    assert_eq!(
        db.query("SELECT permits FROM dlock_lock WHERE name = 'pool' AND kind = 'semaphore'"),
        "3"
    );
    assert_eq!(
        db.query(&format!(
            "SELECT count(*) FROM dlock_holder WHERE name = 'pool' AND expires_at > {}",
            D::NOW
        )),
        "0"
    );
}

/// Two permits taken behind dlock's back by a client that then dies: the waiter gets one when
/// the first lease runs out by the database's clock, with a newer token than both.
async fn an_abandoned_permit_goes_to_the_waiter_after_its_lease<D: Db>() {
    let db = D::start();
    let client = connect(&db.url()).await.unwrap();
    // The client creates the schema before the raw calls below.
    drop(
        client
            .semaphore("abandoned", 2)
            .try_acquire()
            .await
            .unwrap(),
    );
    let tokens = [
        db.acquire_raw("permit_acquire", "abandoned", "dead-1", 400, 2),
        db.acquire_raw("permit_acquire", "abandoned", "dead-2", 60_000, 2),
    ];
    let dead_until: i64 = db
        .query(&format!(
            "SELECT {} FROM dlock_holder WHERE owner = 'dead-1'",
            D::EXPIRES_US
        ))
        .parse()
        .unwrap();
    let lease = Duration::from_secs(60);
    let guard = client
        .semaphore("abandoned", 2)
        .lease(lease)
        .wait(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let token = guard.fencing_token();
    let granted_at: i64 = db
        .query(&format!(
            "SELECT {} FROM dlock_holder WHERE fence = {token}",
            D::EXPIRES_US
        ))
        .parse::<i64>()
        .unwrap()
        - lease.as_micros() as i64;
    assert!(
        granted_at >= dead_until,
        "granted at {granted_at} µs, before the dead permit's lease ran out at {dead_until} µs"
    );
    assert!(
        tokens.iter().all(|t| token > *t),
        "{token} after {tokens:?}"
    );
    guard.release().await.unwrap();
}

async fn read_write_locks_let_readers_share_and_writers_alone<D: Db>() {
    let db = D::start();
    common::rw_rules(&db.url()).await;
    common::rw_contend(&db.url(), 3, 3, 4).await;
}

async fn bad_names_and_urls_are_refused_with_a_typed_error<D: Db>() {
    let pg = D::start();
    let client = connect(&pg.url()).await.unwrap();
    let long = "n".repeat(1025);
    assert!(client.lock(long).acquire().await.unwrap_err().is_misuse());
    assert_eq!(
        pg.query("SELECT count(*) FROM dlock_lock"),
        "0",
        "nothing was sent"
    );

    // A NUL character: refused by PostgreSQL's client (text cannot hold it), kept by MariaDB's.
    if D::TAKES_NUL {
        let guard = client.lock("nul\0name").acquire().await.unwrap();
        assert_eq!(
            client.status("nul\0name").await.unwrap().fencing_token,
            guard.fencing_token()
        );
        assert_eq!(
            client.status("nul").await.unwrap().owner,
            None,
            "names stay apart"
        );
        guard.release().await.unwrap();
    } else {
        let err = client.lock("nul\0name").acquire().await.unwrap_err();
        assert!(err.is_misuse(), "{err:?}");
        assert!(client.status("nul\0name").await.unwrap_err().is_misuse());
    }

    for url in pg.bad_urls() {
        let err = connect(&url).await.unwrap_err();
        assert!(matches!(err, Error::InvalidUrl(_)), "{url}: {err:?}");
    }
    // A password never shows, not in a bad URL's message nor in a failed connection's.
    let (port, closed) = (pg.port(), dlock_testkit::free_port());
    let scheme = pg.url().split_once("://").unwrap().0.to_owned();
    for url in [
        format!("{scheme}://u:hunter2-secret@127.0.0.1:{closed}/db"),
        format!("{scheme}://u:hunter2-secret@127.0.0.1:{closed}/db?table_prefix=9"),
        format!("{scheme}://u:hunter2-secret@127.0.0.1:{port}/nosuchdb"),
    ] {
        let err = connect(&url).await.unwrap_err();
        assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
    }
}

/// `sslmode=verify-full` with the server's CA: every connection is TLS, verified; without the
/// CA (the system's roots do not know it) the client refuses to connect; a CA file without
/// TLS asked for is a bad URL.
async fn tls_verifies_the_server<D: Db>() {
    let db = D::start_tls();
    let ca = db.ca_file().display().to_string();
    let url = format!("{}?sslmode=verify-full&sslrootcert={ca}", db.url());
    let client = connect(&url).await.unwrap();
    let guard = client.lock("tls").acquire().await.unwrap();
    assert!(db.all_tls());
    guard.release().await.unwrap();
    let err = connect(&format!("{}?sslmode=require", db.url()))
        .await
        .unwrap_err();
    assert!(
        err.is_backend() && err.to_string().contains("certificate"),
        "{err}"
    );
    let err = connect(&format!("{}?sslrootcert={ca}", db.url()))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidUrl(_)), "{err:?}");
    let plain = connect(&format!("{}?sslmode=disable", db.url())).await;
    assert_eq!(plain.is_ok(), D::TAKES_PLAIN, "{plain:?}");
}

/// The seed's optimistic lock with the fencing token as the version: the statement of
/// `dlock::fenced_update_sql`, run by the caller's own driver (tokio-postgres with `$n`,
/// mysql_async with `?`), writes under the newer holder's token and refuses the older one's.
async fn a_fenced_update_refuses_a_stale_holder<D: Db>() {
    let db = D::start();
    db.query(
        "CREATE TABLE stock (item VARCHAR(32) PRIMARY KEY, quantity BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)",
    );
    db.query("INSERT INTO stock (item, quantity) VALUES ('widget', 10)");
    let client = connect(&db.url()).await.unwrap();
    let stale = client.lock("stock/widget").acquire().await.unwrap();
    let stale_token = stale.fencing_token();
    stale.release().await.unwrap();
    let fresh = client.lock("stock/widget").acquire().await.unwrap();
    let postgres = db.url().starts_with("postgres");
    let style = if postgres {
        dlock::Placeholder::Numbered
    } else {
        dlock::Placeholder::Question
    };
    let sql = dlock::fenced_update_sql("stock", &["item"], &["quantity"], "fence", style).unwrap();
    // Parameters: the new quantity, the token, the key, the token.
    let update = |quantity: i64, token: u64| {
        let (url, sql) = (db.url(), sql.clone());
        async move {
            let token = token as i64;
            if postgres {
                let (c, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(connection);
                c.execute(sql.as_str(), &[&quantity, &token, &"widget", &token])
                    .await
                    .unwrap()
            } else {
                use mysql_async::prelude::Queryable;
                let mut c = mysql_async::Conn::from_url(url.as_str()).await.unwrap();
                c.exec_drop(sql.as_str(), (quantity, token, "widget", token))
                    .await
                    .unwrap();
                c.affected_rows()
            }
        }
    };
    assert_eq!(
        update(9, fresh.fencing_token()).await,
        1,
        "the holder writes"
    );
    assert_eq!(
        update(11, stale_token).await,
        0,
        "a stale holder is refused"
    );
    assert_eq!(
        db.query("SELECT quantity, fence FROM stock")
            .replace('|', " "),
        format!("9 {}", fresh.fencing_token())
    );
    fresh.release().await.unwrap();
}

/// On MySQL/MariaDB, statements that overlap reuse the pool's connections. The driver's pool
/// kept one idle connection and closed every other one as it came back, so a client running
/// statements at once opened a connection (TCP, login, the switch to the server's socket)
/// for nearly every overlap; now it opens no more than the pool holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_statements_reuse_the_pools_connections_on_mariadb() {
    const TASKS: usize = 8;
    let db = MariadbServer::start();
    let client = connect(&db.url()).await.unwrap();
    // Connections the server has accepted so far; each reading is one more of its own (the
    // mariadb command line's).
    let accepted = || -> usize {
        db.sql("SHOW GLOBAL STATUS LIKE 'Connections'")
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .expect("a count")
    };
    let before = accepted();
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                for _ in 0..50 {
                    let guard = client.lock(format!("pool-{i}")).acquire().await.unwrap();
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let opened = accepted() - before - 1;
    // At most the pool's 32, each counted twice when the driver moves it from TCP to the
    // server's socket (`prefer_socket`): not one per statement, as the 800 here were.
    assert!(
        opened <= 2 * 32,
        "{opened} connections opened for {TASKS} tasks' 400 cycles"
    );
}
