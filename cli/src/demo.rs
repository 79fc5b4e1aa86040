//! `dlock demo`: workers contend for one lock and do fenced read-modify-writes on a counter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock::{Client, Error};

const LOCK: &str = "demo-counter";

/// The protected resource: a counter that refuses writes carrying a fencing token older
/// than the newest it has seen.
#[derive(Default)]
struct Counter {
    value: u64,
    newest_token: u64,
    stale_writes: u64,
}

impl Counter {
    fn write(&mut self, token: u64, value: u64) {
        if token < self.newest_token {
            self.stale_writes += 1;
        } else {
            self.newest_token = token;
            self.value = value;
        }
    }
}

#[derive(Default)]
struct Shared {
    counter: Mutex<Counter>,
    /// When the last holder asked to release, if nobody has taken the lock since.
    released_at: Mutex<Option<Instant>>,
    handoffs: Mutex<Vec<Duration>>,
    tokens: Mutex<Vec<u64>>,
    acquisitions: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) async fn run(
    backend: &str,
    workers: usize,
    length: Duration,
    serve: Option<&str>,
) -> Result<u8, Error> {
    if workers == 0 {
        eprintln!("dlock demo: --workers must be at least 1");
        return Ok(crate::exit::USAGE);
    }
    println!(
        "dlock demo: {workers} workers contend for lock {LOCK:?} on {backend} for {}",
        humantime::format_duration(length)
    );
    println!(
        "each holder reads a shared counter, yields, and writes it back with its fencing token\n"
    );
    let shared = Arc::new(Shared::default());
    let started = Instant::now();
    let deadline = started + length;
    let mut tasks = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..workers {
        // One client per worker, as if each were its own process.
        let client = Client::connect(backend).await?;
        clients.push(client.clone());
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            worker(client, shared, deadline).await
        }));
    }

    let server = match serve {
        Some(addr) => {
            let listener = match tokio::net::TcpListener::bind(addr).await {
                Ok(listener) => listener,
                Err(e) => {
                    eprintln!("dlock demo: cannot serve on {addr}: {e}");
                    return Ok(crate::exit::USAGE);
                }
            };
            let at = listener
                .local_addr()
                .map_or(addr.to_owned(), |a| a.to_string());
            println!(
                "lock statistics at http://{at}/metrics and /stats (dlock stats --from {at})\n"
            );
            let clients = clients.clone();
            let stats = move || {
                let clients = clients.clone();
                async move { crate::stats::gather(&clients).await }
            };
            Some(tokio::spawn(crate::stats::serve(listener, stats)))
        }
        None => None,
    };

    let mut ticker = tokio::time::interval(Duration::from_millis(500));
    ticker.tick().await;
    while Instant::now() < deadline {
        ticker.tick().await;
        let n = shared.acquisitions.load(Ordering::Relaxed);
        let value = lock(&shared.counter).value;
        let p50 = percentile(&lock(&shared.handoffs), 0.50);
        println!(
            "{:>6.1} s  {n:>7} acquisitions  counter {value:>7}  hand-off p50 {:.3} ms",
            started.elapsed().as_secs_f64(),
            p50.as_secs_f64() * 1e3
        );
    }
    let mut per_worker = Vec::new();
    for task in tasks {
        per_worker.push(task.await.map_err(|_| Error::Closed)??);
    }

    if let Some(server) = server {
        server.abort();
    }
    let mut stats = Vec::new();
    for client in &clients {
        stats.push(client.stats().await?);
    }

    let total: u64 = per_worker.iter().sum();
    let counter = lock(&shared.counter);
    let tokens = lock(&shared.tokens);
    let handoffs = lock(&shared.handoffs);
    let increasing = tokens.windows(2).all(|w| w[0] < w[1]);
    let (min, max) = (
        per_worker.iter().min().copied().unwrap_or(0),
        per_worker.iter().max().copied().unwrap_or(0),
    );
    println!("\nsummary");
    for (i, n) in per_worker.iter().enumerate() {
        println!("  worker {i}: {n} acquisitions");
    }
    println!(
        "  fairness (max/min acquisitions): {:.2}",
        max as f64 / min.max(1) as f64
    );
    println!(
        "  hand-off latency (release to next acquire): p50 {:.3} ms, p99 {:.3} ms over {} hand-offs",
        percentile(&handoffs, 0.50).as_secs_f64() * 1e3,
        percentile(&handoffs, 0.99).as_secs_f64() * 1e3,
        handoffs.len()
    );
    let ok = counter.value == total && increasing && counter.stale_writes == 0;
    println!(
        "  final counter {} = {total} acquisitions: {}",
        counter.value,
        mark(counter.value == total)
    );
    println!(
        "  fencing tokens strictly increasing ({} tenures): {}",
        tokens.len(),
        mark(increasing)
    );
    println!(
        "  stale writes refused by the counter: {}",
        counter.stale_writes
    );
    println!("\nstats (what each worker's engine counted; `Client::stats`)");
    for (i, stats) in stats.iter().enumerate() {
        for s in &stats.locks {
            println!("  worker {i}: {}", stats_line(s));
        }
    }
    Ok(if ok { 0 } else { 1 })
}

async fn worker(client: Client, shared: Arc<Shared>, deadline: Instant) -> Result<u64, Error> {
    let mut count = 0;
    while Instant::now() < deadline {
        let asked = Instant::now();
        let guard = client
            .lock(LOCK)
            .lease(Duration::from_secs(5))
            .acquire()
            .await?;
        let got = Instant::now();
        if let Some(released) = lock(&shared.released_at).take().filter(|r| *r >= asked) {
            lock(&shared.handoffs).push(got - released);
        }
        let token = guard.fencing_token();
        let read = lock(&shared.counter).value;
        tokio::task::yield_now().await; // the "work": others run, none may write
        lock(&shared.counter).write(token, read + 1);
        lock(&shared.tokens).push(token);
        shared.acquisitions.fetch_add(1, Ordering::Relaxed);
        count += 1;
        *lock(&shared.released_at) = Some(Instant::now());
        guard.release().await?;
    }
    Ok(count)
}

/// One lock's counts: acquisitions, hand-offs, waits and holds (mean and max), losses.
fn stats_line(s: &dlock::LockStats) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = |h: &dlock::Histogram| ms(h.sum) / h.count.max(1) as f64;
    let lost: u64 = s.lost.iter().sum();
    format!(
        "{} acquired, {} handed off, wait mean {:.3} ms max {:.3} ms, hold mean {:.3} ms, {} renewals, {lost} lost",
        s.acquired,
        s.handed_off,
        mean(&s.wait),
        ms(s.wait.max),
        mean(&s.hold),
        s.renewals,
    )
}

fn percentile(samples: &[Duration], q: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn mark(ok: bool) -> &'static str {
    if ok { "ok" } else { "FAILED" }
}
