//! What the benchmark binaries share.

use std::time::{Duration, Instant};

/// `n` acquire + release cycles of a lock nobody else uses, with `lease`, in ms.
pub async fn cycles(client: &dlock::Client, n: usize, lease: Duration) -> Vec<f64> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let guard = client
            .lock("probe")
            .lease(lease)
            .acquire()
            .await
            .expect("acquires");
        guard.release().await.expect("releases");
        samples.push(started.elapsed().as_secs_f64() * 1e3);
    }
    samples
}

/// p50 and p99.
pub fn percentiles(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    (samples[n / 2], samples[n * 99 / 100])
}
