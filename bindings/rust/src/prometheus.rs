//! Lock statistics ([`Stats`]) in the Prometheus text format, and the table of metric names
//! every host uses: this crate's text and its `metrics` feature, Python's `dlock.prometheus`
//! and Node's `registerMetrics` read [`COUNTERS`], [`GAUGES`] and [`HISTOGRAMS`], so that a
//! dashboard sees the same names whichever language a service is written in.
//!
//! Every metric is labelled `name` (the lock's; `""` for every name past the first 1,024) and
//! `kind` (`lock`, `semaphore`, `read`, `write`); `dlock_lost_total` also `reason`.

use core::fmt::Write as _;
use core::time::Duration;

use dlock_core::{Histogram, LockStats, LostReason, Stats};

/// (field of the stats' JSON form, metric name, help) of every counter but the losses.
pub const COUNTERS: [(&str, &str, &str); 10] = [
    (
        "acquired",
        "dlock_acquired_total",
        "New holds granted (reentries apart).",
    ),
    (
        "handed_off",
        "dlock_handed_off_total",
        "Holds granted after waiting for another holder.",
    ),
    (
        "reentered",
        "dlock_reentered_total",
        "Reentries of a hold by its owner.",
    ),
    (
        "released",
        "dlock_released_total",
        "Holds released by their owner (the last level).",
    ),
    (
        "busy",
        "dlock_busy_total",
        "Try-acquires that found the lock held.",
    ),
    (
        "timed_out",
        "dlock_timed_out_total",
        "Acquires whose wait ran out.",
    ),
    (
        "cancelled",
        "dlock_cancelled_total",
        "Acquires cancelled while they waited.",
    ),
    (
        "failed",
        "dlock_failed_total",
        "Acquires that ended with an error.",
    ),
    (
        "renewals",
        "dlock_renewals_total",
        "Holds renewed by the watchdog, one per hold per renewal sent.",
    ),
    (
        "renewals_failed",
        "dlock_renewals_failed_total",
        "Renewals with no answer that tells (tried again soon).",
    ),
];

/// The losses: a counter labelled `reason` too.
pub const LOST: (&str, &str) = ("dlock_lost_total", "Holds lost, by reason.");

/// (field, metric name, help) of the gauges.
pub const GAUGES: [(&str, &str, &str); 2] = [
    ("held", "dlock_held", "Holds now."),
    ("waiting", "dlock_waiting", "Acquires waiting now."),
];

/// (field, metric name, help) of the histograms, in seconds.
pub const HISTOGRAMS: [(&str, &str, &str); 2] = [
    (
        "wait",
        "dlock_wait_seconds",
        "From an acquire's start to its grant.",
    ),
    (
        "hold",
        "dlock_hold_seconds",
        "From a grant to its release or loss.",
    ),
];

/// The count of `s` that the stats' JSON form names `field` (one of [`COUNTERS`]' and
/// [`GAUGES`]' fields).
pub fn count(s: &LockStats, field: &str) -> Option<u64> {
    Some(match field {
        "acquired" => s.acquired,
        "handed_off" => s.handed_off,
        "reentered" => s.reentered,
        "released" => s.released,
        "busy" => s.busy,
        "timed_out" => s.timed_out,
        "cancelled" => s.cancelled,
        "failed" => s.failed,
        "renewals" => s.renewals,
        "renewals_failed" => s.renewals_failed,
        "held" => s.held,
        "waiting" => s.waiting,
        _ => return None,
    })
}

/// `stats` in the Prometheus text exposition format (version 0.0.4).
pub fn text(stats: &Stats) -> String {
    let mut out = String::new();
    let family = |out: &mut String, name: &str, help: &str, kind: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    for (field, name, help) in COUNTERS {
        family(&mut out, name, help, "counter");
        for s in &stats.locks {
            let n = count(s, field).unwrap_or_default();
            let _ = writeln!(out, "{name}{{{}}} {n}", labels(s));
        }
    }
    let (name, help) = LOST;
    family(&mut out, name, help, "counter");
    for s in &stats.locks {
        for reason in &LostReason::ALL {
            let (labels, n) = (labels(s), s.lost(reason));
            let _ = writeln!(out, "{name}{{{labels},reason=\"{}\"}} {n}", reason.as_str());
        }
    }
    for (field, name, help) in GAUGES {
        family(&mut out, name, help, "gauge");
        for s in &stats.locks {
            let n = count(s, field).unwrap_or_default();
            let _ = writeln!(out, "{name}{{{}}} {n}", labels(s));
        }
    }
    for (field, name, help) in HISTOGRAMS {
        family(&mut out, name, help, "histogram");
        for s in &stats.locks {
            let h = if field == "wait" { &s.wait } else { &s.hold };
            histogram(&mut out, name, &labels(s), h);
        }
    }
    out
}

/// A bucket's upper bound as the `le` label gives it, in seconds: `0.001`, …, `+Inf`.
pub fn le(bound: Option<Duration>) -> String {
    bound.map_or_else(|| "+Inf".to_owned(), |b| b.as_secs_f64().to_string())
}

fn histogram(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    for (bound, total) in h.cumulative() {
        let le = le(bound);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {total}");
    }
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum.as_secs_f64());
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

/// `name="…",kind="…"`, the name escaped as the format asks (backslash, quote, newline).
fn labels(s: &LockStats) -> String {
    let mut name = String::with_capacity(s.name.len());
    for c in s.name.chars() {
        match c {
            '\\' => name.push_str("\\\\"),
            '"' => name.push_str("\\\""),
            '\n' => name.push_str("\\n"),
            c => name.push(c),
        }
    }
    format!("name=\"{name}\",kind=\"{}\"", s.kind.as_str())
}
