//! `just bench-many [N]`: one client holding N locks (default 100,000) on its own redis-server.
//! Reports, side by side in one run:
//!
//! - renewal traffic: scripts the server ran per renewal period while the client held the N
//!   locks and did nothing else (`INFO commandstats`), three periods after the last was
//!   taken, and locks per renewal request;
//! - client memory per held lock: heap bytes (counted by this binary's allocator) held once
//!   the N locks are acquired and a round of their renewals has settled (none in flight),
//!   less before, over N — the engine's state, the driver's and the guards';
//! - acquire + release latency of one more lock: before the N are taken, and then, in turns
//!   of 500 cycles, by the client holding the N and by a second client of the same server
//!   (what the server's load costs, apart from the engine's) — p50 and p99 of 2,000 cycles.
//!
//! Writes bench/results/many.md.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dlock_bench::{cycles, percentiles};

/// The system allocator, counting the bytes in use.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is added.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        IN_USE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Lease of every held lock: the watchdog renews each a third of a lease after its last
/// confirmation, so the renewal period is lease / 3.
const LEASE: Duration = Duration::from_secs(3);

async fn scripts_run(con: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await
        .expect("INFO");
    info.lines()
        .filter(|l| {
            ["cmdstat_fcall:", "cmdstat_evalsha:", "cmdstat_eval:"]
                .iter()
                .any(|c| l.starts_with(c))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(100_000, |a| a.parse().expect("N is a number"));
    let server = dlock_testkit::RedisServer::start();
    let mut con = redis::Client::open(server.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connects");
    let client = dlock::Client::connect(&server.url())
        .await
        .expect("connects");
    let other = dlock::Client::connect(&server.url())
        .await
        .expect("connects");

    cycles(&client, 200, LEASE).await; // warm-up
    cycles(&other, 200, LEASE).await;
    let (idle_p50, idle_p99) = percentiles(cycles(&client, 2000, LEASE).await);

    let before = IN_USE.load(Ordering::Relaxed);
    let started = Instant::now();
    let mut guards = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let acquires = chunk.iter().map(|i| {
            let lock = client.lock(format!("many/{i}")).lease(LEASE);
            async move { lock.acquire().await.expect("acquires") }
        });
        guards.extend(futures_util::future::join_all(acquires).await);
    }
    let acquired_in = started.elapsed();

    // Renewal traffic of the N locks alone, once their renewals have gathered (locks taken
    // over several periods renew in several bursts at first, which then merge: a renewal
    // takes the holds due soon with it): from just after a round of renewals, over the next
    // three rounds (a window of 3.5 periods holds exactly three).
    let rounds = 3;
    let period = LEASE / 3;
    tokio::time::sleep(period * 3).await;
    let mut last = scripts_run(&mut con).await;
    let mut quiet_since = Instant::now();
    let mut burst_seen = false;
    loop {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = scripts_run(&mut con).await;
        if now != last {
            burst_seen = true;
            quiet_since = Instant::now();
            last = now;
        } else if burst_seen && quiet_since.elapsed() > Duration::from_millis(50) {
            break;
        }
    }
    // Between two rounds, no renewal in flight: what holding the N locks costs.
    let per_lock = (IN_USE.load(Ordering::Relaxed).saturating_sub(before)) / n;
    tokio::time::sleep(period * rounds + period / 2).await;
    let renewals = scripts_run(&mut con).await - last;
    let per_period = renewals as f64 / f64::from(rounds);
    assert!(guards.iter().all(|g| !g.is_lost()), "a lock was lost");

    let (mut holding, mut beside) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        holding.extend(cycles(&client, 500, LEASE).await);
        beside.extend(cycles(&other, 500, LEASE).await);
    }
    let ((held_p50, held_p99), (other_p50, other_p99)) =
        (percentiles(holding), percentiles(beside));
    for guard in guards {
        guard.release().await.expect("releases");
    }

    let report = format!(
        "# One client holding {n} locks\n\n\
         One redis-server, lease {lease} s (renewed every {period_ms} ms), measured by `just bench-many {n}`.\n\n\
         | measure | value |\n| --- | ---: |\n\
         | acquiring the {n} locks (500 at a time) | {acq:.2} s |\n\
         | renewal requests per renewal period | {per_period:.1} |\n\
         | locks per renewal request | {locks_per:.1} |\n\
         | client heap per held lock | {per_lock} bytes |\n\
         | acquire + release p50 / p99, before the {n} were taken | {idle_p50:.3} / {idle_p99:.3} ms |\n\
         | the same, by the client holding the {n} | {held_p50:.3} / {held_p99:.3} ms |\n\
         | the same, by another client at the same time | {other_p50:.3} / {other_p99:.3} ms |\n\
         | holding client ÷ other client, p50 | {p50_ratio:.2}× |\n\
         | holding client with the {n} ÷ before, p50 | {held_ratio:.2}× |\n",
        lease = LEASE.as_secs(),
        period_ms = period.as_millis(),
        acq = acquired_in.as_secs_f64(),
        locks_per = n as f64 / per_period,
        p50_ratio = held_p50 / other_p50,
        held_ratio = held_p50 / idle_p50,
    );
    print!("{report}");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results/many.md");
    std::fs::write(out, report).expect("writable bench/results");
}
