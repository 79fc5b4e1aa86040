//! The `metrics` feature: every observation the engine counts ([`dlock_core::Observed`]) goes
//! to the [`metrics`] facade as it happens, so that whichever recorder the application installs
//! (Prometheus, StatsD, OpenTelemetry…) sees dlock's locks, under the names and labels of
//! every host ([`crate::prometheus`] lists them), the gauge `dlock_held` moved as holds begin
//! and end (the snapshot's `waiting` has no event-by-event counterpart here).
//!
//! Every metric is labelled `name` (the lock's; `""` for every name past the first 1,024) and
//! `kind` (`lock`, `semaphore`, `read`, `write`). [`crate::Client::stats`] gives the same
//! counts as a snapshot, with or without the feature. A client whose engine runs as a Wasm
//! component ([`crate::ClientBuilder::machine`]) feeds no metrics (its snapshot still works).

use ::metrics::{counter, gauge, histogram};
use dlock_core::{NotAcquired, Observation, Observed};

use crate::prometheus::{COUNTERS, GAUGES, HISTOGRAMS, LOST};

/// The metric name of a field of the stats (`acquired`: `dlock_acquired_total`).
fn metric(field: &str) -> &'static str {
    let mut table = COUNTERS.iter().chain(&GAUGES).chain(&HISTOGRAMS);
    table
        .find(|(f, _, _)| *f == field)
        .map(|(_, name, _)| *name)
        .expect("a field of the metrics table")
}

/// Hands one observation to the installed recorder.
pub(crate) fn publish(o: Observation) {
    let labels = [("name", o.name), ("kind", o.kind.as_str().to_owned())];
    let count = |field: &str| counter!(metric(field), &labels).increment(1);
    match o.what {
        Observed::Acquired { waited, handed_off } => {
            count("acquired");
            if handed_off {
                count("handed_off");
            }
            histogram!(metric("wait"), &labels).record(waited.as_secs_f64());
            gauge!(metric("held"), &labels).increment(1.0);
        }
        Observed::Ended { held } => {
            histogram!(metric("hold"), &labels).record(held.as_secs_f64());
            gauge!(metric("held"), &labels).decrement(1.0);
        }
        Observed::Reentered => count("reentered"),
        Observed::Released => count("released"),
        Observed::NotAcquired(NotAcquired::Busy) => count("busy"),
        Observed::NotAcquired(NotAcquired::TimedOut) => count("timed_out"),
        Observed::NotAcquired(NotAcquired::Cancelled) => count("cancelled"),
        Observed::Failed => count("failed"),
        Observed::Renewal => count("renewals"),
        Observed::RenewalFailed => count("renewals_failed"),
        Observed::Lost(reason) => {
            let [name, kind] = labels;
            let labels = [name, kind, ("reason", reason.as_str().to_owned())];
            counter!(LOST.0, &labels).increment(1);
        }
    }
}
