//! The `metrics` feature against a real redis-server: after the scripted sequence of every
//! host's stats test, the facade holds the same counts as `Client::stats`.

use dlock_testkit::RedisServer;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_facade_gets_every_observation() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    let server = RedisServer::start();
    common::stats_after_a_script(&server.url()).await;

    let mut counters = Vec::new();
    let (mut held, mut waits, mut holds) = (None, Vec::new(), Vec::new());
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        assert_eq!(labels[..2], ["name=stats/a", "kind=lock"], "{key:?}");
        match (key.name(), value) {
            ("dlock_held", DebugValue::Gauge(g)) => held = Some(g.into_inner()),
            ("dlock_wait_seconds", DebugValue::Histogram(h)) => waits = h,
            ("dlock_hold_seconds", DebugValue::Histogram(h)) => holds = h,
            (name, DebugValue::Counter(n)) => {
                counters.push((format!("{name}{}", labels[2..].join(",")), n))
            }
            (name, other) => panic!("{name}: {other:?}"),
        }
    }
    counters.sort();
    let expected = [
        ("dlock_acquired_total", 3),
        ("dlock_busy_total", 1),
        ("dlock_cancelled_total", 1),
        ("dlock_handed_off_total", 1),
        ("dlock_lost_totalreason=max-hold", 1),
        ("dlock_reentered_total", 1),
        ("dlock_released_total", 2),
        ("dlock_timed_out_total", 1),
    ];
    let expected: Vec<(String, u64)> = expected.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    assert_eq!(counters, expected);
    assert_eq!(held, Some(0.0), "three holds began and ended");
    assert_eq!((waits.len(), holds.len()), (3, 3));
    assert!(holds.iter().any(|h| h.into_inner() >= 0.1), "{holds:?}");
}
