//! `just bench-sql`: dlock on PostgreSQL and on MariaDB next to the databases' own locks
//! (`pg_advisory_lock`, `GET_LOCK`: session locks, no lease, no fence — the yardstick of what
//! the server can do) and next to dlock on Redis, in one run on this machine:
//!
//! - the raw round trip (`SELECT 1`);
//! - uncontended acquire + release of one client, 2,000 cycles in turns of 250 that rotate
//!   over the setups, so that the machine's noise falls on all alike;
//! - hand-off between 4 clients (a connection each) on one lock for 3 s: each holds it 1 ms
//!   (spinning), then works 4 ms outside it; the hand-off latency is the time from a release,
//!   while another waited, to the next acquisition; fairness is max/min acquisitions.
//!
//! Writes bench/results/sql.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dlock_bench::{cycles, percentiles};
use dlock_testkit::{MariadbServer, PostgresServer, RedisServer};
use mysql_async::prelude::Queryable;

const LEASE: Duration = Duration::from_secs(10);
const WORKERS: usize = 4;
const HOLD: Duration = Duration::from_millis(1);
const OUTSIDE: Duration = Duration::from_millis(4);
const CONTEND: Duration = Duration::from_secs(3);

/// A lock the bench takes: dlock, or a database's session lock on a connection of its own.
#[derive(Clone)]
enum Taker {
    Dlock(dlock::Client),
    Advisory(Arc<tokio_postgres::Client>),
    GetLock(Arc<tokio::sync::Mutex<mysql_async::Conn>>),
}

impl Taker {
    async fn cycle_until(&self, hold: Duration) -> (Instant, Instant) {
        let spin = |d: Duration| {
            let t = Instant::now();
            while t.elapsed() < d {
                std::hint::spin_loop();
            }
        };
        match self {
            Taker::Dlock(client) => {
                let guard = client
                    .lock("hot")
                    .lease(LEASE)
                    .acquire()
                    .await
                    .expect("acquires");
                let acquired = Instant::now();
                spin(hold);
                let released = Instant::now();
                guard.release().await.expect("releases");
                (acquired, released)
            }
            Taker::Advisory(c) => {
                c.execute("SELECT pg_advisory_lock(hashtext('hot'))", &[])
                    .await
                    .unwrap();
                let acquired = Instant::now();
                spin(hold);
                let released = Instant::now();
                c.execute("SELECT pg_advisory_unlock(hashtext('hot'))", &[])
                    .await
                    .unwrap();
                (acquired, released)
            }
            Taker::GetLock(c) => {
                let mut c = c.lock().await;
                c.query_drop("DO GET_LOCK('hot', 60)").await.unwrap();
                let acquired = Instant::now();
                spin(hold);
                let released = Instant::now();
                c.query_drop("DO RELEASE_LOCK('hot')").await.unwrap();
                (acquired, released)
            }
        }
    }
}

/// `n` uncontended cycles, ms each.
async fn solo(taker: &Taker, n: usize) -> Vec<f64> {
    match taker {
        Taker::Dlock(client) => cycles(client, n, LEASE).await,
        other => {
            let mut samples = Vec::with_capacity(n);
            for _ in 0..n {
                let started = Instant::now();
                other.cycle_until(Duration::ZERO).await;
                samples.push(started.elapsed().as_secs_f64() * 1e3);
            }
            samples
        }
    }
}

/// Hand-off latencies (ms) and acquisitions per worker of `takers` contending for 3 s.
async fn contend(takers: Vec<Taker>) -> (Vec<f64>, Vec<usize>) {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = takers
        .into_iter()
        .map(|taker| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut timeline = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    let (acquired, released) = taker.cycle_until(HOLD).await;
                    timeline.push((asked, acquired, released));
                    tokio::time::sleep(OUTSIDE).await;
                }
                timeline
            })
        })
        .collect();
    tokio::time::sleep(CONTEND).await;
    stop.store(true, Ordering::Relaxed);
    let mut timelines = Vec::new();
    for t in tasks {
        timelines.push(t.await.expect("worker"));
    }
    let counts = timelines.iter().map(Vec::len).collect();
    let mut cycles: Vec<(Instant, Instant)> = timelines
        .iter()
        .flatten()
        .map(|&(_, acquired, released)| (acquired, released))
        .collect();
    cycles.sort();
    let asked: Vec<(Instant, Instant)> = timelines
        .iter()
        .flatten()
        .map(|&(asked, acquired, _)| (asked, acquired))
        .collect();
    let mut latencies = Vec::new();
    for pair in cycles.windows(2) {
        let (released, next) = (pair[0].1, pair[1].0);
        // Someone else was waiting when the lock was released.
        let waiting = asked.iter().any(|&(a, got)| a < released && got > released);
        if waiting && next >= released {
            latencies.push((next - released).as_secs_f64() * 1e3);
        }
    }
    (latencies, counts)
}

async fn pg_connection(url: &str) -> Arc<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connects");
    tokio::spawn(connection);
    Arc::new(client)
}

#[tokio::main]
async fn main() {
    let (pg, db, redis) = (
        PostgresServer::start(),
        MariadbServer::start(),
        RedisServer::start(),
    );
    let mut setups: Vec<(String, Vec<Taker>)> = Vec::new();
    let dlock_takers = |url: String| async move {
        let mut takers = Vec::new();
        for _ in 0..WORKERS {
            takers.push(Taker::Dlock(
                dlock::Client::connect(&url).await.expect("connects"),
            ));
        }
        takers
    };
    setups.push(("dlock on PostgreSQL".into(), dlock_takers(pg.url()).await));
    let mut advisory = Vec::new();
    for _ in 0..WORKERS {
        advisory.push(Taker::Advisory(pg_connection(&pg.url()).await));
    }
    setups.push(("`pg_advisory_lock` (yardstick)".into(), advisory));
    setups.push(("dlock on MariaDB".into(), dlock_takers(db.url()).await));
    let mut get_lock = Vec::new();
    for _ in 0..WORKERS {
        let conn = mysql_async::Conn::from_url(db.url())
            .await
            .expect("connects");
        get_lock.push(Taker::GetLock(Arc::new(tokio::sync::Mutex::new(conn))));
    }
    setups.push(("MariaDB `GET_LOCK` (yardstick)".into(), get_lock));
    setups.push(("dlock on Redis".into(), dlock_takers(redis.url()).await));

    // Raw round trips.
    let probe = pg_connection(&pg.url()).await;
    let mut my = mysql_async::Conn::from_url(db.url())
        .await
        .expect("connects");
    let (mut pg_rtt, mut my_rtt) = (Vec::new(), Vec::new());
    for _ in 0..2000 {
        let t = Instant::now();
        probe.query_typed("SELECT 1", &[]).await.unwrap();
        pg_rtt.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        my.query_drop("DO 1").await.unwrap();
        my_rtt.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (pg_rtt, my_rtt) = (percentiles(pg_rtt).0, percentiles(my_rtt).0);

    for (_, takers) in &setups {
        solo(&takers[0], 200).await; // warm-up
    }
    let mut samples = vec![Vec::new(); setups.len()];
    for _ in 0..8 {
        for ((_, takers), samples) in setups.iter().zip(&mut samples) {
            samples.extend(solo(&takers[0], 250).await);
        }
    }
    let mut report = format!(
        "# SQL backend\n\n\
         dlock on PostgreSQL 15 and MariaDB 10.11 (Debian's packages, started by the bench on \
         loopback, default settings but PostgreSQL's `fsync=off`), next to the databases' own \
         session locks and dlock on Redis, in one run; `just bench-sql`. A dlock acquire and a \
         release are one statement (one round trip) each. Raw round trip (`SELECT 1`, p50): \
         PostgreSQL {pg_rtt:.3} ms, MariaDB {my_rtt:.3} ms.\n\n\
         Uncontended acquire + release, one client, 2,000 cycles in turns of 250:\n\n\
         | lock | p50 ms | p99 ms | p50 / 2 round trips |\n| --- | ---: | ---: | ---: |\n"
    );
    for (i, ((name, _), s)) in setups.iter().zip(samples).enumerate() {
        let (p50, p99) = percentiles(s);
        let rtt = match i {
            0 | 1 => format!("{:.2}×", p50 / (2.0 * pg_rtt)),
            2 | 3 => format!("{:.2}×", p50 / (2.0 * my_rtt)),
            _ => "–".into(),
        };
        report += &format!("| {name} | {p50:.3} | {p99:.3} | {rtt} |\n");
    }
    report += &format!(
        "\nHand-off between {WORKERS} clients on one lock for {} s (hold 1 ms, then 4 ms outside):\n\n\
         | lock | acquisitions | hand-off p50 ms | p99 ms | fairness max/min |\n| --- | ---: | ---: | ---: | ---: |\n",
        CONTEND.as_secs()
    );
    for (name, takers) in setups {
        let (latencies, counts) = contend(takers).await;
        let (p50, p99) = percentiles(latencies);
        let total: usize = counts.iter().sum();
        let fairness =
            *counts.iter().max().unwrap() as f64 / (*counts.iter().min().unwrap()).max(1) as f64;
        report += &format!("| {name} | {total} | {p50:.3} | {p99:.3} | {fairness:.2} |\n");
    }
    print!("{report}");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results/sql.md");
    std::fs::write(out, report).expect("writable bench/results");
}
