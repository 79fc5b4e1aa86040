//! `just bench-redlock`: acquire + release latency of one client on Redlock over 3 and over 5
//! redis-servers, next to the same client on one of those servers alone (`redis://`), in one
//! run: 2,000 cycles each, measured in turns of 250 so that the machine's noise falls on all
//! of them alike. Then the same on 5 nodes with 2 of them frozen (SIGSTOP), which a majority
//! does not wait for.
//!
//! Writes bench/results/redlock.md.

use std::time::Duration;

use dlock_bench::{cycles, percentiles};
use dlock_testkit::{RedisServer, redlock_url};

const LEASE: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() {
    let nodes: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let setups = [
        ("one Redis (`redis://`)", nodes[0].url()),
        ("Redlock, 3 nodes", redlock_url(&nodes[..3])),
        ("Redlock, 5 nodes", redlock_url(&nodes)),
    ];
    let mut clients = Vec::new();
    for (_, url) in &setups {
        let client = dlock::Client::connect(url).await.expect("connects");
        cycles(&client, 200, LEASE).await; // warm-up
        clients.push(client);
    }
    let mut samples = vec![Vec::new(); clients.len()];
    for _ in 0..8 {
        for (client, samples) in clients.iter().zip(&mut samples) {
            samples.extend(cycles(client, 250, LEASE).await);
        }
    }
    nodes[3].pause();
    nodes[4].pause();
    let frozen = percentiles(cycles(&clients[2], 1000, LEASE).await);
    nodes[3].resume();
    nodes[4].resume();

    let results: Vec<(f64, f64)> = samples.into_iter().map(percentiles).collect();
    let single = results[0].0;
    let mut report = String::from(
        "# Redlock latency\n\n\
         One client, acquire + release of an uncontended lock (lease 10 s), 2,000 cycles per row \
         measured in turns of 250 in one run, redis-servers on loopback; `just bench-redlock`.\n\n\
         | backend | p50 ms | p99 ms | p50 vs one Redis |\n| --- | ---: | ---: | ---: |\n",
    );
    for ((name, _), (p50, p99)) in setups.iter().zip(&results) {
        report += &format!("| {name} | {p50:.3} | {p99:.3} | {:.2}× |\n", p50 / single);
    }
    report += &format!(
        "| Redlock, 5 nodes, 2 of them frozen (1,000 cycles) | {:.3} | {:.3} | {:.2}× |\n",
        frozen.0,
        frozen.1,
        frozen.0 / single
    );
    print!("{report}");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results/redlock.md");
    std::fs::write(out, report).expect("writable bench/results");
}
