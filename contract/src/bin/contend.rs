//! One contender of the live mixed-language test (`tests/contention.rs`), in Rust: natively,
//! or with the engine's Wasm component (`--wasm PATH`).
//!
//! `contend URL NAME DIR LABEL TARGET [lock|rw|sem] [--wasm PATH]` acquires lock NAME until the
//! counter in DIR/counter reaches TARGET, starting when DIR/go appears (it writes
//! DIR/LABEL.ready once connected). Each time it holds the lock it does a fenced
//! read-modify-write of the counter and appends `token start_ns end_ns outcome`
//! (CLOCK_MONOTONIC) to DIR/LABEL.log; the outcome is 0 for a write, 1 for a write the fence
//! refused, 2 for finding the target reached, 3 for a read hold, 4 for a permit. In mode `rw`
//! it takes the write hold of read-write lock NAME, and every third time its read hold. In
//! mode `sem` it takes a permit of semaphore NAME (2 permits) TARGET times, holding each for
//! 5 ms. The Python, Node and Java workers in `contract/workers/` and `contract/java/` do the
//! same.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Reads `count last_token` from the counter file and writes `count+1 token` back (0),
/// unless the token is not newer than the last one written (1: stale, nothing written) or
/// the count has reached the target (2: done).
fn fenced_increment(counter: &Path, token: u64, target: u64) -> u8 {
    let text = std::fs::read_to_string(counter).unwrap_or_default();
    let mut fields = text
        .split_whitespace()
        .map(|f| f.parse::<u64>().expect("a number"));
    let (count, last) = (fields.next().unwrap_or(0), fields.next().unwrap_or(0));
    if token <= last {
        return 1;
    }
    if count >= target {
        return 2;
    }
    std::fs::write(counter, format!("{} {token}\n", count + 1)).expect("writable counter");
    0
}

/// The semaphore's permits in mode `sem`.
const PERMITS: u32 = 2;

fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC, the clock Python's time.monotonic_ns and Node's process.hrtime read.
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("a clock");
    u64::try_from(ts.tv_sec()).expect("after boot") * 1_000_000_000
        + u64::try_from(ts.tv_nsec()).expect("in range")
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, name, dir, label, target, mode, rest @ ..] = args.as_slice() else {
        panic!("usage: contend URL NAME DIR LABEL TARGET lock|rw|sem [--wasm PATH]");
    };
    let (rw, sem) = (mode == "rw", mode == "sem");
    let dir = PathBuf::from(dir);
    let target: u64 = target.parse().expect("TARGET is a number");
    let mut builder = dlock::Client::builder(url);
    if let [flag, path] = rest {
        assert_eq!(flag, "--wasm");
        let component = dlock_wasmtime::WasmComponent::from_file(path).expect("dlock.wasm loads");
        builder = builder.machine(component.factory());
    }
    let client = builder.connect().await.expect("connects");
    std::fs::write(dir.join(format!("{label}.ready")), "").expect("writable dir");
    while !dir.join("go").exists() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rw_lock = client.rw_lock(name);
    let mut log = Vec::new();
    for i in 0.. {
        let reading = rw && i % 3 == 2;
        let lock = match (rw, reading) {
            _ if sem => client.semaphore(name, PERMITS),
            (false, _) => client.lock(name),
            (true, true) => rw_lock.read(),
            (true, false) => rw_lock.write(),
        };
        let guard = lock
            .lease(Duration::from_secs(10))
            .acquire()
            .await
            .expect("acquires");
        let start = monotonic_ns();
        let token = guard.fencing_token();
        let outcome = if sem {
            tokio::time::sleep(Duration::from_millis(5)).await;
            4
        } else if reading {
            3
        } else {
            fenced_increment(&dir.join("counter"), token, target)
        };
        let end = monotonic_ns();
        guard.release().await.expect("releases");
        writeln!(log, "{token} {start} {end} {outcome}").expect("in memory");
        if outcome == 2 || (sem && i + 1 == target) {
            break;
        }
    }
    std::fs::write(dir.join(format!("{label}.log")), log).expect("writable log");
}
