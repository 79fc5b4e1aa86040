//! Uncontended acquire + release latency of dlock next to the raw round trips of the same
//! redis-server (PING, and EVALSHA of a script that returns at once), measured in one run.
//!
//! `just bench-latency [iterations]`. It starts its own redis-server on a free port, or uses
//! the one at the URL given as second argument.

use std::time::{Duration, Instant};

use dlock::Client;
use dlock_testkit::RedisServer;

fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * q).round() as usize]
}

async fn measure<F, Fut>(n: usize, mut f: F) -> (Duration, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..n / 10 {
        f().await; // warm up
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        f().await;
        samples.push(start.elapsed());
    }
    (
        percentile(&mut samples, 0.50),
        percentile(&mut samples, 0.99),
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
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
    let raw = redis::Client::open(url.as_str()).unwrap();
    let mut con = raw.get_multiplexed_async_connection().await.unwrap();
    let script = redis::Script::new("return 1");

    let ping = measure(n, || {
        let mut con = con.clone();
        async move {
            let _: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
        }
    })
    .await;
    let evalsha = measure(n, || {
        let mut con = con.clone();
        let script = &script;
        async move {
            let _: i64 = script.invoke_async(&mut con).await.unwrap();
        }
    })
    .await;
    let client = Client::connect(&url).await.unwrap();
    let dlock_redis = measure(n, || {
        let client = client.clone();
        async move {
            let guard = client
                .lock("bench")
                .try_acquire()
                .await
                .unwrap()
                .expect("uncontended");
            guard.release().await.unwrap();
        }
    })
    .await;
    let memory = Client::connect("memory://bench").await.unwrap();
    let dlock_memory = measure(n, || {
        let client = memory.clone();
        async move {
            let guard = client
                .lock("bench")
                .try_acquire()
                .await
                .unwrap()
                .expect("uncontended");
            guard.release().await.unwrap();
        }
    })
    .await;
    let _: () = redis::cmd("PING")
        .query_async(&mut con)
        .await
        .map(|_: String| ())
        .unwrap();

    println!("uncontended latency, {n} iterations each, one redis-server on loopback (ms)\n");
    println!("| operation | p50 | p99 | p50 / EVALSHA p50 |");
    println!("| --- | ---: | ---: | ---: |");
    for (name, (p50, p99)) in [
        ("PING round trip", ping),
        ("EVALSHA round trip (`return 1`)", evalsha),
        ("dlock acquire + release, redis://", dlock_redis),
        ("dlock acquire + release, memory://", dlock_memory),
    ] {
        println!(
            "| {name} | {:.3} | {:.3} | {:.2} |",
            ms(p50),
            ms(p99),
            ms(p50) / ms(evalsha.0)
        );
    }
}
