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

/// `verb function` (`FCALL` or `EVALSHA`) of `ops`, scripts of one kind: every op's keys,
/// then every op's arguments (one op: the command the engine's transport sends for it).
pub fn script_call(verb: &str, function: &str, ops: &[dlock_core::redis::RedisOp]) -> redis::Cmd {
    let words = |keys: bool| {
        ops.iter().flat_map(move |op| match op {
            dlock_core::redis::RedisOp::Eval { keys: k, args, .. } => {
                if keys { k } else { args }.iter()
            }
            _ => unreachable!("a script"),
        })
    };
    let mut cmd = redis::cmd(verb);
    cmd.arg(function).arg(words(true).count());
    for word in words(true).chain(words(false)) {
        cmd.arg(word);
    }
    cmd
}

/// `INFO commandstats` as (command, (calls, µs)): `cmdstat_fcall:calls=2,usec=9,…` is
/// `("fcall", (2, 9))`.
pub fn commandstats(info: &str) -> std::collections::BTreeMap<String, (u64, u64)> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| -> Option<u64> {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))?
                    .parse()
                    .ok()
            };
            Some((name.to_owned(), (field("calls")?, field("usec")?)))
        })
        .collect()
}
