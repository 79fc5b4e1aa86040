//! `just bench-many [N]`: one client holding N locks (default 100,000) on its own redis-server.
//! Reports, side by side in one run:
//!
//! - renewal traffic while the client held the N locks and did nothing else, from three
//!   periods after the last was taken: locks per renewal request (holds renewed, by the
//!   client's stats, over the scripts the server ran, by `INFO commandstats`) and the
//!   requests one round over all N takes;
//! - client memory per held lock: heap bytes (counted by this binary's allocator) held once
//!   the N locks are acquired and a round of their renewals has settled (none in flight),
//!   less before, over N — the engine's state, the driver's and the guards';
//! - acquire + release latency of one more lock: before the N are taken, and then, in turns
//!   of 500 cycles, by the client holding the N and by a second client of the same server
//!   (what the server's load costs, apart from the engine's) — p50 and p99 of 2,000 cycles;
//! - then a fleet on a fresh redis-server: 1,000 clients (10 processes of this binary, each
//!   with 100 clients, every client its own connections and engine) each holding 10 locks.
//!   The server's CPU time (`INFO cpu`, user + system) per renewal period, first with the
//!   clients connected and holding nothing, then holding their locks, over three periods
//!   each, and the renewal requests it ran per period.
//!
//! Writes bench/results/many.md. (`many fleet-member URL CLIENTS LOCKS TAG` is one process of
//! the fleet: it connects, says `connected`, acquires on a line from its standard input, says
//! `holding`, and at the end of its input releases and says `lost K`.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
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

/// The fleet: processes × clients in each, and locks per client.
const FLEET_PROCESSES: usize = 10;
const FLEET_CLIENTS: usize = 100;
const FLEET_LOCKS: usize = 10;

async fn info(con: &mut redis::aio::MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(con)
        .await
        .expect("INFO")
}

/// The server's CPU time so far (user + system), in seconds.
async fn server_cpu(con: &mut redis::aio::MultiplexedConnection) -> f64 {
    info(con, "cpu")
        .await
        .lines()
        .filter(|l| l.starts_with("used_cpu_user:") || l.starts_with("used_cpu_sys:"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        .sum()
}

async fn scripts_run(con: &mut redis::aio::MultiplexedConnection) -> u64 {
    let stats = dlock_bench::commandstats(&info(con, "commandstats").await);
    ["fcall", "evalsha", "eval"]
        .iter()
        .filter_map(|c| stats.get(*c))
        .map(|(calls, _)| calls)
        .sum()
}

/// Waits for a moment with no script running: none for 50 ms (after a burst of them first,
/// with `after_burst`). The scripts run by then.
async fn quiet(con: &mut redis::aio::MultiplexedConnection, after_burst: bool) -> u64 {
    let mut last = scripts_run(con).await;
    let mut quiet_since = Instant::now();
    let mut burst_seen = !after_burst;
    loop {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = scripts_run(con).await;
        if now != last {
            burst_seen = true;
            quiet_since = Instant::now();
            last = now;
        } else if burst_seen && quiet_since.elapsed() > Duration::from_millis(50) {
            return last;
        }
    }
}

/// Holds the client's watchdog has renewed so far, over every lock.
async fn renewals(client: &dlock::Client) -> u64 {
    let stats = client.stats().await.expect("stats");
    stats.locks.iter().map(|l| l.renewals).sum()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("fleet-member") {
        let num = |i: usize| args[i].parse::<usize>().expect("a number");
        return fleet_member(&args[1], num(2), num(3), &args[4]).await;
    }
    // The fleet's server serves 2,000 connections (a client's scripts and its pub/sub): it
    // inherits this limit, and takes no more clients than it has descriptors for.
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .expect("the file limit");
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard)
        .expect("the file limit raised to its hard limit");
    let n: usize = args
        .first()
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
    // takes the holds due soon with it). A round of renewals is not one burst: holds
    // confirmed late in a burst (the server works through it for a good part of a period)
    // come due after the next burst's horizon and follow it as a small one, so a window of
    // time counts a round's stragglers or not depending on where it falls. Counted instead
    // between two moments with no renewal in flight, at least `rounds` periods apart: the
    // holds renewed (the client's count, one per hold per renewal sent) over the requests
    // the server ran — the requests one round over all N costs, whatever the window.
    let rounds = 6;
    let period = LEASE / 3;
    tokio::time::sleep(period * 3).await;
    let start = quiet(&mut con, true).await;
    // Between two rounds, no renewal in flight: what holding the N locks costs.
    let per_lock = (IN_USE.load(Ordering::Relaxed).saturating_sub(before)) / n;
    let renewed = renewals(&client).await;
    tokio::time::sleep(period * rounds).await;
    let requests = quiet(&mut con, false).await - start;
    let renewed = renewals(&client).await - renewed;
    let locks_per = renewed as f64 / requests as f64;
    let per_round = n as f64 / locks_per;
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
    drop((client, other, server));
    let fleet = fleet().await;

    let report = format!(
        "# One client holding {n} locks\n\n\
         One redis-server, lease {lease} s (renewed every {period_ms} ms), measured by `just bench-many {n}`.\n\n\
         | measure | value |\n| --- | ---: |\n\
         | acquiring the {n} locks (500 at a time) | {acq:.2} s |\n\
         | renewal requests per round (each of the {n} renewed once) | {per_round:.1} |\n\
         | locks per renewal request | {locks_per:.1} |\n\
         | client heap per held lock | {per_lock} bytes |\n\
         | acquire + release p50 / p99, before the {n} were taken | {idle_p50:.3} / {idle_p99:.3} ms |\n\
         | the same, by the client holding the {n} | {held_p50:.3} / {held_p99:.3} ms |\n\
         | the same, by another client at the same time | {other_p50:.3} / {other_p99:.3} ms |\n\
         | holding client ÷ other client, p50 | {p50_ratio:.2}× |\n\
         | holding client with the {n} ÷ before, p50 | {held_ratio:.2}× |\n\n\
         ## {clients} clients holding {locks_each} locks each\n\n\
         A fresh redis-server; {processes} processes of {per_process} clients each, every client \
         with its own connections and engine, the same lease. The server's CPU time (user + \
         system, `INFO cpu`) over three renewal periods, per period.\n\n\
         | measure | value |\n| --- | ---: |\n\
         | server CPU per renewal period, the clients connected, holding nothing | {idle_ms:.1} ms ({idle_share:.1}% of a core) |\n\
         | server CPU per renewal period, each client holding {locks_each} locks | {held_ms:.1} ms ({held_share:.1}% of a core) |\n\
         | renewal requests per renewal period | {fleet_requests:.1} |\n\
         | locks per renewal request | {fleet_locks_per:.1} |\n\
         | server CPU per renewal request, over the idle clients' | {per_request:.1} µs |\n",
        lease = LEASE.as_secs(),
        period_ms = period.as_millis(),
        acq = acquired_in.as_secs_f64(),
        p50_ratio = held_p50 / other_p50,
        held_ratio = held_p50 / idle_p50,
        clients = FLEET_PROCESSES * FLEET_CLIENTS,
        locks_each = FLEET_LOCKS,
        processes = FLEET_PROCESSES,
        per_process = FLEET_CLIENTS,
        idle_ms = fleet.idle * 1e3,
        idle_share = fleet.idle / period.as_secs_f64() * 100.0,
        held_ms = fleet.holding * 1e3,
        held_share = fleet.holding / period.as_secs_f64() * 100.0,
        fleet_requests = fleet.requests,
        fleet_locks_per = (FLEET_PROCESSES * FLEET_CLIENTS * FLEET_LOCKS) as f64 / fleet.requests,
        per_request = (fleet.holding - fleet.idle) / fleet.requests * 1e6,
    );
    print!("{report}");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results/many.md");
    std::fs::write(out, report).expect("writable bench/results");
}

/// What the fleet cost the server per renewal period: CPU seconds connected and holding
/// nothing, CPU seconds holding, and renewal requests.
struct Fleet {
    idle: f64,
    holding: f64,
    requests: f64,
}

/// The next line a fleet member says.
fn says(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).expect("a fleet member's output");
    line.trim_end().to_owned()
}

async fn fleet() -> Fleet {
    let server = dlock_testkit::RedisServer::start();
    let con = redis::Client::open(server.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connects");
    let started: Vec<(Child, BufReader<ChildStdout>)> = (0..FLEET_PROCESSES)
        .map(|p| {
            let mut child = Command::new(std::env::current_exe().expect("this binary"))
                .args(["fleet-member", &server.url()])
                .args([FLEET_CLIENTS, FLEET_LOCKS, p].map(|n| n.to_string()))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("a fleet member starts");
            let out = BufReader::new(child.stdout.take().expect("piped"));
            (child, out)
        })
        .collect();
    let mut members = tokio::task::spawn_blocking(move || {
        let mut members = started;
        for (_, out) in &mut members {
            assert_eq!(says(out), "connected");
        }
        members
    })
    .await
    .expect("the fleet connects");
    let period = LEASE / 3;
    let rounds = 3;
    // Over `rounds` periods: the server's CPU seconds and the scripts it ran, per period.
    let measure = |mut con: redis::aio::MultiplexedConnection| async move {
        let (cpu, scripts) = (server_cpu(&mut con).await, scripts_run(&mut con).await);
        tokio::time::sleep(period * rounds).await;
        let per = |x: f64| x / f64::from(rounds);
        (
            per(server_cpu(&mut con).await - cpu),
            per((scripts_run(&mut con).await - scripts) as f64),
        )
    };
    tokio::time::sleep(period).await;
    let (idle, _) = measure(con.clone()).await;
    members = tokio::task::spawn_blocking(move || {
        for (child, _) in &mut members {
            let input = child.stdin.as_mut().expect("piped");
            input.write_all(b"hold\n").expect("a fleet member listens");
        }
        for (_, out) in &mut members {
            assert_eq!(says(out), "holding");
        }
        members
    })
    .await
    .expect("the fleet acquires");
    // Renewals of locks taken over several periods merge within a few periods (see above).
    tokio::time::sleep(period * 3).await;
    let (holding, requests) = measure(con.clone()).await;
    let lost: usize = tokio::task::spawn_blocking(move || {
        members
            .into_iter()
            .map(|(mut child, mut out)| {
                drop(child.stdin.take());
                let lost = says(&mut out)
                    .strip_prefix("lost ")
                    .and_then(|k| k.parse::<usize>().ok())
                    .expect("lost K");
                assert!(child.wait().expect("exits").success());
                lost
            })
            .sum()
    })
    .await
    .expect("the fleet stops");
    assert_eq!(lost, 0, "the fleet lost locks");
    drop(server);
    Fleet {
        idle,
        holding,
        requests,
    }
}

/// One process of the fleet (see the module's doc).
async fn fleet_member(url: &str, clients: usize, locks: usize, tag: &str) {
    let mut fleet = Vec::with_capacity(clients);
    for _ in 0..clients {
        fleet.push(dlock::Client::connect(url).await.expect("connects"));
    }
    let say = |what: &str| {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{what}")
            .and_then(|()| out.flush())
            .expect("says");
    };
    say("connected");
    heard().await;
    let acquires = fleet.iter().enumerate().flat_map(|(c, client)| {
        (0..locks).map(move |i| {
            let lock = client.lock(format!("fleet/{tag}/{c}/{i}")).lease(LEASE);
            async move { lock.acquire().await.expect("acquires") }
        })
    });
    let guards = futures_util::future::join_all(acquires).await;
    say("holding");
    while heard().await {}
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    for guard in guards.into_iter().filter(|g| !g.is_lost()) {
        guard.release().await.expect("releases");
    }
    say(&format!("lost {lost}"));
}

/// Waits for a line of standard input: false at its end.
async fn heard() -> bool {
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).expect("reads") > 0
    })
    .await
    .expect("reads")
}
