//! `just bench-fairness`: throughput of one hot lock, fair next to non-fair, in one run.
//! Eight workers (four clients, two tasks each) on one redis-server take lock "hot" over and
//! over, each holding it for a short critical section, for turns of 2 s alternating between
//! the two modes (4 turns each), so that the machine's noise falls on both alike. Then the
//! same with one of the four clients behind a slow link (5 ms each way, through a proxy), as
//! a distant or overloaded client would be. Reports acquisitions per second, the wait for the
//! lock (p50, p99) and how evenly the workers were served (the fewest and the most
//! acquisitions of one worker).
//!
//! Writes bench/results/fairness.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dlock_bench::percentiles;
use dlock_testkit::{RedisServer, TcpProxy};

const CLIENTS: usize = 4;
const TASKS: usize = 2;
const TURN: Duration = Duration::from_secs(2);
const TURNS: usize = 4;
const CRITICAL: Duration = Duration::from_micros(200);

/// One turn: every worker takes the lock until the turn ends. Per worker: its waits in ms.
async fn turn(clients: &[dlock::Client], fair: bool) -> Vec<Vec<f64>> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for client in clients {
        for _ in 0..TASKS {
            let (client, stop) = (client.clone(), stop.clone());
            workers.push(tokio::spawn(async move {
                let mut waits = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let guard = client
                        .lock("hot")
                        .lease(Duration::from_secs(10))
                        .fair(fair)
                        .acquire()
                        .await
                        .expect("acquires");
                    waits.push(started.elapsed().as_secs_f64() * 1e3);
                    let busy = Instant::now();
                    while busy.elapsed() < CRITICAL {
                        std::hint::spin_loop();
                    }
                    guard.release().await.expect("releases");
                    tokio::task::yield_now().await;
                }
                waits
            }));
        }
    }
    tokio::time::sleep(TURN).await;
    stop.store(true, Ordering::Relaxed);
    let mut out = Vec::new();
    for w in workers {
        out.push(w.await.expect("worker"));
    }
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port());
    proxy.delay(Duration::from_millis(5));
    let slow_url = format!("redis://127.0.0.1:{}", proxy.port());
    let mut report = format!(
        "# Fair and non-fair\n\n\
         {} workers ({CLIENTS} clients × {TASKS} tasks) on one redis-server take one lock over and over, \
         holding it for {} µs each time; {TURNS} turns of {} s per mode, alternating, in one run; \
         `just bench-fairness`.\n\n\
         | clients | mode | acquisitions/s | wait p50 ms | wait p99 ms | fewest / most by one worker |\n\
         | --- | --- | ---: | ---: | ---: | ---: |\n",
        CLIENTS * TASKS,
        CRITICAL.as_micros(),
        TURN.as_secs()
    );
    let mut ratios = Vec::new();
    for (setup, slow) in [("all on loopback", 0), ("one behind a 5 ms link", 1)] {
        let mut clients = Vec::new();
        for i in 0..CLIENTS {
            let url = if i < slow {
                slow_url.clone()
            } else {
                server.url()
            };
            clients.push(dlock::Client::connect(&url).await.expect("connects"));
        }
        turn(&clients, true).await; // warm-up
        let modes = [("fair (default)", true), ("non-fair", false)];
        let mut per_worker = vec![vec![Vec::new(); CLIENTS * TASKS]; modes.len()];
        for _ in 0..TURNS {
            for (m, (_, fair)) in modes.iter().enumerate() {
                for (w, waits) in turn(&clients, *fair).await.into_iter().enumerate() {
                    per_worker[m][w].extend(waits);
                }
            }
        }
        let seconds = (TURN * TURNS as u32).as_secs_f64();
        let mut rates = Vec::new();
        for ((name, _), workers) in modes.iter().zip(per_worker) {
            let counts: Vec<usize> = workers.iter().map(Vec::len).collect();
            let total: usize = counts.iter().sum();
            let (p50, p99) = percentiles(workers.into_iter().flatten().collect());
            let rate = total as f64 / seconds;
            rates.push(rate);
            report += &format!(
                "| {setup} | {name} | {rate:.0} | {p50:.3} | {p99:.3} | {} / {} |\n",
                counts.iter().min().unwrap_or(&0),
                counts.iter().max().unwrap_or(&0)
            );
        }
        ratios.push((setup, rates[1] / rates[0]));
    }
    report += "\nNon-fair over fair throughput: ";
    let ratios: Vec<String> = ratios
        .iter()
        .map(|(setup, r)| format!("{r:.2}× with {setup}"))
        .collect();
    report += &ratios.join(", ");
    report += ".\n";
    print!("{report}");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results/fairness.md");
    std::fs::write(&out, report).expect("writes the report");
}
