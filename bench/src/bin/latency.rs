//! Uncontended acquire + release latency of dlock (native engine, Wasm engine, memory://)
//! next to the raw round trips of the same redis-server (PING, and EVALSHA of a script that
//! returns at once), measured in one run. The operations take turns, one call each per
//! round, so that a noisy moment on the machine hits them all alike.
//!
//! `just bench-latency [iterations]`. It starts its own redis-server on a free port, or uses
//! the one at the URL given as second argument.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use dlock::Client;
use dlock_testkit::RedisServer;

type Call = Box<dyn FnMut() -> Pin<Box<dyn Future<Output = ()>>>>;

fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * q).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One uncontended acquire + release on `client`.
fn cycle(client: Client, name: &'static str) -> Call {
    Box::new(move || {
        let client = client.clone();
        Box::pin(async move {
            let guard = client
                .lock(name)
                .try_acquire()
                .await
                .unwrap()
                .expect("uncontended");
            guard.release().await.unwrap();
        })
    })
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5000);
    let own = std::env::args().nth(2).is_none().then(RedisServer::start);
    let url = std::env::args()
        .nth(2)
        .unwrap_or_else(|| own.as_ref().map(RedisServer::url).unwrap_or_default());
    let con = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let script = redis::Script::new("return 1");
    let component = dlock_wasmtime::WasmComponent::from_file(dlock_testkit::wasm_component())
        .expect("target/dlock.wasm (just wasm)");
    let native = Client::connect(&url).await.unwrap();
    let wasm = Client::builder(&url)
        .machine(component.factory())
        .connect()
        .await
        .unwrap();
    let memory = Client::connect("memory://bench").await.unwrap();

    let ping_con = con.clone();
    let mut ops: Vec<(&str, Call)> = vec![
        (
            "PING round trip",
            Box::new(move || {
                let mut con = ping_con.clone();
                Box::pin(async move {
                    let _: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
                })
            }),
        ),
        (
            "EVALSHA round trip (`return 1`)",
            Box::new(move || {
                let (mut con, script) = (con.clone(), script.clone());
                Box::pin(async move {
                    let _: i64 = script.invoke_async(&mut con).await.unwrap();
                })
            }),
        ),
        (
            "dlock acquire + release, redis://",
            cycle(native, "bench-native"),
        ),
        (
            "dlock acquire + release, redis://, Wasm engine",
            cycle(wasm, "bench-wasm"),
        ),
        (
            "dlock acquire + release, memory://",
            cycle(memory, "bench-memory"),
        ),
    ];
    for _ in 0..n / 10 {
        for (_, op) in ops.iter_mut() {
            op().await; // warm up
        }
    }
    let mut samples = vec![Vec::with_capacity(n); ops.len()];
    for _ in 0..n {
        for (i, (_, op)) in ops.iter_mut().enumerate() {
            let start = Instant::now();
            op().await;
            samples[i].push(start.elapsed());
        }
    }
    let p50: Vec<Duration> = samples.iter_mut().map(|s| percentile(s, 0.50)).collect();
    println!(
        "uncontended latency, {n} iterations each, taking turns, one redis-server on loopback (ms)\n"
    );
    println!("| operation | p50 | p99 | p50 / EVALSHA p50 |");
    println!("| --- | ---: | ---: | ---: |");
    for (i, (name, _)) in ops.iter().enumerate() {
        let p99 = percentile(&mut samples[i], 0.99);
        println!(
            "| {name} | {:.3} | {:.3} | {:.2} |",
            ms(p50[i]),
            ms(p99),
            ms(p50[i]) / ms(p50[1])
        );
    }
    println!(
        "\nWasm engine / native engine (p50): {:.3}",
        ms(p50[3]) / ms(p50[2])
    );
}
