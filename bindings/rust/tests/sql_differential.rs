//! The SQL reference (`dlock_core::sql::reference`, what the simulation runs against) against
//! a real PostgreSQL and a real MariaDB: the same random sequences of statements — every
//! lock and election statement the engine sends, in every mode, with leases short enough to
//! expire mid-run — must give the same replies, leave the same rows (owner, hold count,
//! fencing token; the waiters in queue order; each election's value and term) and the same
//! fencing counter.
//!
//! Each statement runs between two readings of the database's clock on the same connection;
//! the reference runs it at the first reading and at the second, and one of them must agree
//! (an expiry between the readings decides which). Remaining milliseconds in replies, and the
//! expiry times the statement wrote, may differ by the time between the readings; after each
//! statement the reference takes the database's expiry times, so that this never adds up.

use std::collections::BTreeMap;
use std::time::Duration;

use dlock_core::redis::Words;
use dlock_core::sql::reference::Store;
use dlock_core::sql::{Dialect, Param, SqlOp, SqlSettings, SqlValue, Statement};
use dlock_testkit::{MariadbServer, PostgresServer, Rng};
use mysql_async::prelude::Queryable;

/// A database connection the test drives statement by statement.
enum Real {
    Postgres(tokio_postgres::Client),
    Mysql(mysql_async::Conn),
}

/// The rows of `dlock_lock` and `dlock_holder` as compared, by (name, kind, holder's owner
/// token or ""): owner, holds, fence, permits; and the expiry (µs), compared within the time a
/// statement took.
type Rows = BTreeMap<RowKey, RowValue>;
/// A compared row's key: name, kind, holder's owner token or "".
type RowKey = (String, String, String);
/// A compared row: owner, holds, fence, permits; and its expiry (µs).
type RowValue = ((Option<String>, i64, i64, Option<i64>), Option<u64>);
/// A lock row as MySQL gives it: name, kind, owner, holds, fence, permits, expiry (µs).
type MysqlRow = (
    Vec<u8>,
    String,
    Option<String>,
    i64,
    i64,
    Option<i64>,
    Option<i64>,
);
/// A waiter: name, kind, owner, mode.
type WaiterKey = (String, String, String, Option<String>);
/// The waiters in ticket order, each with its deadline (µs).
type Queue = Vec<(WaiterKey, u64)>;

impl Real {
    async fn connect(url: &str) -> (Real, SqlSettings) {
        // The client creates the schema; this test then speaks SQL itself.
        let client = dlock::Client::connect(url).await.expect("schema created");
        drop(client);
        if let Some(rest) = url.strip_prefix("postgres://") {
            let (client, connection) =
                tokio_postgres::connect(&format!("postgres://{rest}"), tokio_postgres::NoTls)
                    .await
                    .unwrap();
            tokio::spawn(connection);
            (Real::Postgres(client), SqlSettings::new(Dialect::Postgres))
        } else {
            let mut conn = mysql_async::Conn::from_url(url).await.unwrap();
            conn.query_drop("SET time_zone = '+00:00'").await.unwrap();
            (Real::Mysql(conn), SqlSettings::new(Dialect::Mysql))
        }
    }

    /// The database's clock, µs since the epoch.
    async fn now_us(&mut self) -> u64 {
        match self {
            Real::Postgres(c) => {
                let row = c
                    .query_one(
                        "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
                        &[],
                    )
                    .await
                    .unwrap();
                row.get::<_, i64>(0) as u64
            }
            Real::Mysql(c) => {
                let n: Option<i64> = c
                    .query_first(
                        "SELECT CAST(UNIX_TIMESTAMP(UTC_TIMESTAMP(6)) * 1000000 AS SIGNED)",
                    )
                    .await
                    .unwrap();
                n.unwrap() as u64
            }
        }
    }

    async fn run(&mut self, op: &SqlOp) -> Vec<SqlValue> {
        let SqlOp::Query {
            statement,
            sql,
            params,
        } = op
        else {
            unreachable!()
        };
        match self {
            Real::Postgres(c) => {
                let values: Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>> = params
                    .iter()
                    .map(|p| -> Box<dyn tokio_postgres::types::ToSql + Sync + Send> {
                        match p {
                            Param::Text(s) => Box::new(s.clone()),
                            Param::Int(n) => Box::new(*n),
                            Param::TextList(v) => Box::new(v.clone()),
                            Param::IntList(v) => Box::new(v.clone()),
                        }
                    })
                    .collect();
                let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                    values.iter().map(|v| &**v as _).collect();
                let row = c.query_one(sql.as_str(), &refs).await.unwrap();
                if statement.replies_text() {
                    let v: Vec<Option<String>> = row.get(0);
                    let text = |v: Option<String>| v.map_or(SqlValue::Null, SqlValue::Text);
                    v.into_iter().map(text).collect()
                } else {
                    let v: Vec<i64> = row.get(0);
                    v.into_iter().map(SqlValue::Int).collect()
                }
            }
            Real::Mysql(c) => {
                let values: Vec<mysql_async::Value> = params
                    .iter()
                    .map(|p| match p {
                        Param::Text(s) => mysql_async::Value::Bytes(s.clone().into_bytes()),
                        Param::Int(n) => mysql_async::Value::Int(*n),
                        other => unreachable!("{other:?}"),
                    })
                    .collect();
                let row: mysql_async::Row =
                    c.exec_first(sql.as_str(), values).await.unwrap().unwrap();
                row.unwrap()
                    .into_iter()
                    .map(|v| match v {
                        mysql_async::Value::NULL => SqlValue::Null,
                        mysql_async::Value::Int(n) => SqlValue::Int(n),
                        mysql_async::Value::UInt(n) => SqlValue::Int(n as i64),
                        mysql_async::Value::Bytes(b) => {
                            let text = String::from_utf8(b).unwrap();
                            match text.parse() {
                                Ok(n) if !statement.replies_text() => SqlValue::Int(n),
                                _ => SqlValue::Text(text),
                            }
                        }
                        other => panic!("{other:?}"),
                    })
                    .collect()
            }
        }
    }

    /// The lock rows, the queue and the fencing counter.
    async fn state(&mut self) -> (Rows, Queue, i64) {
        let us = |n: Option<i64>| n.map(|n| n as u64);
        match self {
            Real::Postgres(c) => {
                let mut rows: Rows = c
                    .query(
                        "SELECT name, kind, owner, holds::bigint, fence, permits::bigint, (extract(epoch FROM expires_at) * 1000000)::bigint FROM dlock_lock",
                        &[],
                    )
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|r| {
                        let key = (r.get(0), r.get(1), String::new());
                        (key, ((r.get(2), r.get(3), r.get(4), r.get(5)), us(r.get(6))))
                    })
                    .collect();
                rows.extend(
                    c.query(
                        "SELECT name, kind, owner, holds::bigint, fence, (extract(epoch FROM expires_at) * 1000000)::bigint FROM dlock_holder",
                        &[],
                    )
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|r| {
                        let key = (r.get(0), r.get(1), r.get(2));
                        (key, ((r.get(2), r.get(3), r.get(4), None), us(r.get(5))))
                    }),
                );
                let queue = c
                    .query(
                        "SELECT name, kind, owner, mode, (extract(epoch FROM expires_at) * 1000000)::bigint FROM dlock_waiter ORDER BY ticket",
                        &[],
                    )
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|r| {
                        let key = (r.get(0), r.get(1), r.get(2), r.get(3));
                        (key, r.get::<_, i64>(4) as u64)
                    })
                    .collect();
                let leaders = c
                    .query("SELECT name, fence, value FROM dlock_leader", &[])
                    .await
                    .unwrap();
                rows.extend(
                    leaders
                        .into_iter()
                        .map(|r| leader_row(r.get(0), r.get(1), r.get(2))),
                );
                let fence: i64 = c
                    .query_one(
                        "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM dlock_fence",
                        &[],
                    )
                    .await
                    .unwrap()
                    .get(0);
                (rows, queue, fence)
            }
            Real::Mysql(c) => {
                let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
                let locks: Vec<mysql_async::Row> = c
                    .query("SELECT name, kind, owner, holds, fence, permits, CAST(UNIX_TIMESTAMP(expires_at) * 1000000 AS SIGNED) FROM dlock_lock")
                    .await
                    .unwrap();
                let mut rows: Rows = locks
                    .into_iter()
                    .map(|r| {
                        let (name, kind, owner, holds, fence, permits, e): MysqlRow =
                            mysql_async::from_row(r);
                        let key = (text(name), kind, String::new());
                        (key, ((owner, holds, fence, permits), us(e)))
                    })
                    .collect();
                let holders: Vec<(Vec<u8>, String, String, i64, i64, i64)> = c
                    .query("SELECT name, kind, owner, holds, fence, CAST(UNIX_TIMESTAMP(expires_at) * 1000000 AS SIGNED) FROM dlock_holder")
                    .await
                    .unwrap();
                rows.extend(holders.into_iter().map(|(n, k, o, h, f, e)| {
                    (
                        (text(n), k, o.clone()),
                        ((Some(o), h, f, None), Some(e as u64)),
                    )
                }));
                let leaders: Vec<(Vec<u8>, i64, Vec<u8>)> = c
                    .query("SELECT name, fence, value FROM dlock_leader")
                    .await
                    .unwrap();
                rows.extend(
                    leaders
                        .into_iter()
                        .map(|(n, f, v)| leader_row(text(n), f, text(v))),
                );
                type MysqlWaiter = (Vec<u8>, String, String, Option<String>, i64);
                let queue: Vec<MysqlWaiter> = c
                    .query("SELECT name, kind, owner, mode, CAST(UNIX_TIMESTAMP(expires_at) * 1000000 AS SIGNED) FROM dlock_waiter ORDER BY ticket")
                    .await
                    .unwrap();
                let fence: Option<i64> = c
                    .query_first("SELECT value FROM dlock_fence WHERE id = 1")
                    .await
                    .unwrap();
                (
                    rows,
                    queue
                        .into_iter()
                        .map(|(n, k, o, m, e)| ((text(n), k, o, m), e as u64))
                        .collect(),
                    fence.unwrap_or(0),
                )
            }
        }
    }
}

/// The kind under which `dlock_leader`'s rows are compared.
const LEADER: &str = "leader";

/// A row of `dlock_leader` among the compared rows: its value where a lock row has its owner.
fn leader_row(name: String, fence: i64, value: String) -> (RowKey, RowValue) {
    (
        (name, LEADER.into(), String::new()),
        ((Some(value), 0, fence, None), None),
    )
}

fn reference_state(store: &Store) -> (Rows, Queue, i64) {
    let mut rows: Rows = store
        .locks
        .iter()
        .map(|((n, k), r)| {
            (
                (n.clone(), k.to_string(), String::new()),
                ((r.owner.clone(), r.holds, r.fence, r.permits), r.expires_at),
            )
        })
        .collect();
    for ((n, k), holders) in &store.holders {
        for (owner, h) in holders {
            let key = (n.clone(), k.to_string(), owner.clone());
            rows.insert(
                key,
                (
                    (Some(owner.clone()), h.holds, h.fence, None),
                    Some(h.expires_at),
                ),
            );
        }
    }
    for (name, (fence, value)) in &store.leaders {
        let (key, row) = leader_row(name.clone(), *fence, value.clone());
        rows.insert(key, row);
    }
    let mut queue: Vec<(u64, WaiterKey, u64)> = store
        .waiters
        .iter()
        .flat_map(|((n, k), q)| {
            q.iter().map(move |w| {
                let key = (n.clone(), k.to_string(), w.owner.clone(), w.mode.clone());
                (w.ticket, key, w.expires_at)
            })
        })
        .collect();
    queue.sort();
    let queue = queue.into_iter().map(|(_, k, e)| (k, e)).collect();
    (rows, queue, store.fence)
}

/// The same expiry, within `slack_us`.
fn near(a: Option<u64>, b: Option<u64>, slack_us: u64) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.abs_diff(b) <= slack_us,
        (a, b) => a == b,
    }
}

/// The database's tables and the reference's agree: the same rows, queue and fencing
/// counter, expiry times within `slack_us`.
fn agree(
    real: &(Rows, Queue, i64),
    reference: &(Rows, Queue, i64),
    slack_us: u64,
) -> Result<(), String> {
    let ((rows, queue, fence), (ref_rows, ref_queue, ref_fence)) = (real, reference);
    let keys = |r: &Rows| {
        r.iter()
            .map(|(n, (k, _))| (n.clone(), k.clone()))
            .collect::<Vec<_>>()
    };
    if keys(rows) != keys(ref_rows) {
        return Err(format!(
            "rows {:?}, the database's {:?}",
            keys(ref_rows),
            keys(rows)
        ));
    }
    for (key, (_, expires)) in rows {
        let theirs = ref_rows[key].1;
        if !near(*expires, theirs, slack_us) {
            return Err(format!(
                "{key:?}'s expiry {theirs:?}, the database's {expires:?}"
            ));
        }
    }
    let owners = |q: &Queue| q.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    if owners(queue) != owners(ref_queue) {
        return Err(format!(
            "queue {:?}, the database's {:?}",
            owners(ref_queue),
            owners(queue)
        ));
    }
    for (real_w, ref_w) in queue.iter().zip(ref_queue) {
        if !near(Some(real_w.1), Some(ref_w.1), slack_us) {
            return Err(format!("deadline of {:?}", real_w.0));
        }
    }
    if fence != ref_fence {
        return Err(format!(
            "fencing counter {ref_fence}, the database's {fence}"
        ));
    }
    Ok(())
}

/// The reference takes the database's expiry times (checked near its own already).
fn take_expiries(store: &mut Store, rows: &Rows, queue: &Queue) {
    for ((name, kind, holder), (_, expires)) in rows {
        if kind == LEADER {
            continue;
        }
        let key = (name.clone(), kind_of(kind));
        if holder.is_empty() {
            if let Some(row) = store.locks.get_mut(&key) {
                row.expires_at = *expires;
            }
        } else if let Some(h) = store
            .holders
            .get_mut(&key)
            .and_then(|hs| hs.get_mut(holder))
        {
            h.expires_at = expires.expect("a holder's lease ends");
        }
    }
    for ((name, kind, owner, _), expires) in queue {
        if let Some(w) = store
            .waiters
            .get_mut(&(name.clone(), kind_of(kind)))
            .and_then(|q| q.iter_mut().find(|w| &w.owner == owner))
        {
            w.expires_at = *expires;
        }
    }
}

fn kind_of(kind: &str) -> &'static str {
    use dlock_core::sql::reference::{LOCK, RWLOCK, SEMAPHORE};
    [LOCK, SEMAPHORE, RWLOCK]
        .into_iter()
        .find(|k| *k == kind)
        .unwrap_or_else(|| panic!("kind {kind:?}"))
}

/// Where a reply carries remaining milliseconds.
fn pttl_at(statement: Statement, values: &[SqlValue]) -> Option<usize> {
    match (statement, values.first()) {
        (
            Statement::Acquire | Statement::PermitAcquire | Statement::RwAcquire,
            Some(SqlValue::Int(0 | 2)),
        ) => Some(1),
        (Statement::Status, _) => Some(3),
        (Statement::Leader, _) => Some(2),
        _ => None,
    }
}

fn number(v: &SqlValue) -> Option<i64> {
    match v {
        SqlValue::Int(n) => Some(*n),
        SqlValue::Text(s) => s.parse().ok(),
        SqlValue::Null => None,
    }
}

/// The replies agree, remaining milliseconds within `slack_ms`.
fn same(statement: Statement, real: &[SqlValue], reference: &[SqlValue], slack_ms: i64) -> bool {
    let pttl = pttl_at(statement, reference);
    real.len() == reference.len()
        && real.iter().zip(reference).enumerate().all(|(i, (a, b))| {
            a == b
                || matches!((number(a), number(b)), (Some(x), Some(y)) if x == y)
                || (Some(i) == pttl
                    && matches!((number(a), number(b)), (Some(x), Some(y)) if x >= 0 && y >= 0 && (x - y).abs() <= slack_ms))
        })
}

/// A random statement of the engine's repertoire: of a lock, a semaphore or a read-write
/// lock, in every mode, and of an election (proclaims mostly under the lock's latest term,
/// from `store`).
fn random_op(rng: &mut Rng, settings: &SqlSettings, store: &Store) -> SqlOp {
    use dlock_core::redis::Script;
    use dlock_core::sql::reference::LOCK;
    let names = ["a", "b/ü"];
    // An owner token is one hold's, of one kind, as the engine makes them.
    let lock_tokens = ["c1-1", "c1-2", "c2-1", "c3-7"];
    let permit_tokens = ["c1-3", "c2-2", "c2-3", "c3-8"];
    let rw_tokens = ["c1-4", "c2-4", "c3-9", "c4-1"];
    let tokens = [lock_tokens, permit_tokens, rw_tokens].concat();
    // Leases that end mid-run, and ones that do not.
    let leases = ["15", "45", "120", "60000"];
    let name = *rng.pick(&names);
    let (lease, lease2) = (*rng.pick(&leases), *rng.pick(&leases));
    let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mode = *rng.pick(&["try", "wait", "wait", "refresh"]);
    let count = *rng.pick(&["1", "1", "2"]);
    let flag = |rng: &mut Rng, a: &mut Vec<String>, word: &str| {
        if rng.chance(200) {
            a.push(word.into());
        }
    };
    let kind = rng.below(23);
    let token = *rng.pick(match kind {
        0..=8 | 20..=22 => &lock_tokens,
        9..=12 => &permit_tokens,
        13..=16 => &rw_tokens,
        _ => &tokens,
    });
    match kind {
        0..=5 => {
            let mut a = args(&[token, lease, count, mode, lease2]);
            flag(rng, &mut a, "barge");
            call(settings, Script::Acquire, &[name], &a)
        }
        6..=7 => {
            let mut a = args(&[token, *rng.pick(&["0", "0", "1"])]);
            flag(rng, &mut a, "free");
            call(settings, Script::Release, &[name], &a)
        }
        8 => call(settings, Script::Dequeue, &[name], &args(&[token])),
        // A semaphore of two permits, now and then asked for with three.
        9..=10 => {
            let permits = *rng.pick(&["2", "2", "2", "3"]);
            let mut a = args(&[token, lease, permits, mode, lease2]);
            flag(rng, &mut a, "barge");
            call(settings, Script::PermitAcquire, &[name], &a)
        }
        11 => {
            let mut a = args(&[token]);
            flag(rng, &mut a, "free");
            call(settings, Script::PermitRelease, &[name], &a)
        }
        12 => call(settings, Script::PermitDequeue, &[name], &args(&[token])),
        // Reads and writes; a read now and then as a downgrade beside another token's write.
        13..=14 => {
            let want = *rng.pick(&["read", "write"]);
            let mut a = args(&[token, lease, count, mode, lease2, want]);
            if want == "read" && rng.chance(300) {
                a.push((*rng.pick(&rw_tokens)).into());
            }
            call(settings, Script::RwAcquire, &[name], &a)
        }
        15 => {
            let a = args(&[token, *rng.pick(&["0", "0", "1"])]);
            call(settings, Script::RwRelease, &[name], &a)
        }
        16 => call(settings, Script::RwDequeue, &[name], &args(&[token])),
        17..=18 => match settings.dialect {
            Dialect::Postgres => {
                let other = names.iter().find(|n| **n != name).unwrap();
                let t2 = *rng.pick(&tokens);
                let a = args(&[token, lease, t2, lease2]);
                call(settings, Script::Extend, &[name, other], &a)
            }
            Dialect::Mysql => call(settings, Script::Extend, &[name], &args(&[token, lease])),
        },
        19 => settings.status(name),
        20 => {
            let latest = store
                .locks
                .get(&(name.to_owned(), LOCK))
                .map_or(0, |r| r.fence);
            let term = if rng.chance(800) { latest } else { latest - 1 };
            let value = *rng.pick(&["10.0.0.7:8080", "ü", ""]);
            let a = args(&[token, &term.to_string(), value]);
            call(settings, Script::Proclaim, &[name], &a)
        }
        21 => call(settings, Script::Resign, &[name], &args(&[token])),
        _ => call(settings, Script::Leader, &[name], &[]),
    }
}

fn call(
    settings: &SqlSettings,
    script: dlock_core::redis::Script,
    names: &[&str],
    args: &[String],
) -> SqlOp {
    settings.call(script, names, &Words::from_iter(args))
}

async fn differential(url: &str, seeds: u64, steps: usize) {
    let (mut real, settings) = Real::connect(url).await;
    let dialect = settings.dialect;
    let mut compared = 0;
    for seed in 0..seeds {
        // Every sequence starts from empty tables.
        match &mut real {
            Real::Postgres(c) => c
                .batch_execute(
                    "TRUNCATE dlock_lock, dlock_holder, dlock_waiter, dlock_leader; ALTER SEQUENCE dlock_fence RESTART",
                )
                .await
                .unwrap(),
            Real::Mysql(c) => {
                for sql in [
                    "DELETE FROM dlock_lock",
                    "DELETE FROM dlock_holder",
                    "DELETE FROM dlock_waiter",
                    "DELETE FROM dlock_leader",
                    "UPDATE dlock_fence SET value = 0",
                ] {
                    c.query_drop(sql).await.unwrap();
                }
            }
        }
        let mut store = Store::new(&settings);
        let mut rng = Rng(seed * 7919 + 1);
        for step in 0..steps {
            let op = random_op(&mut rng, &settings, &store);
            let SqlOp::Query { statement, .. } = &op else {
                unreachable!()
            };
            let t0 = real.now_us().await;
            let got = real.run(&op).await;
            let t1 = real.now_us().await;
            let slack = ((t1 - t0) / 1000 + 2) as i64;
            let real_state = real.state().await;
            let at = format!("{dialect:?} seed {seed} step {step}, after {op:?}");
            // The reference at the first reading, else at the second: the one whose reply and
            // tables agree with the database's (a reply alone may not tell, e.g. which waiter a
            // DEQUEUE handed the lock to when one's deadline fell between the readings).
            let mut tried = Vec::new();
            let mut agreed = None;
            for t in [t0, t1] {
                let mut candidate = store.clone();
                let outcome = candidate.exec(t, &op).unwrap();
                let verdict = if same(*statement, &got, &outcome.values, slack) {
                    agree(&real_state, &reference_state(&candidate), t1 - t0 + 1)
                } else {
                    Err(format!("replied {:?}", outcome.values))
                };
                match verdict {
                    Ok(()) => {
                        agreed = Some(candidate);
                        break;
                    }
                    Err(why) => tried.push(format!("at {t}: {why}")),
                }
            }
            let Some(next) = agreed else {
                panic!("{at}: the database replied {got:?}; the reference {tried:?}");
            };
            store = next;
            let (rows, queue, _) = &real_state;
            take_expiries(&mut store, rows, queue);
            compared += 1;
            // Now and then let short leases and waiter deadlines run out.
            if rng.chance(100) {
                tokio::time::sleep(Duration::from_millis(rng.range(10, 60))).await;
            }
        }
    }
    println!("{dialect:?}: {compared} statements agreed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_agrees_with_postgres() {
    let pg = PostgresServer::start();
    differential(&pg.url(), 20, 100).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_agrees_with_mariadb() {
    let db = MariadbServer::start();
    differential(&db.url(), 20, 100).await;
}
