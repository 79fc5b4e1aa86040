//! Injected time. The engine never reads a clock: the host passes `now` with every call.

use core::fmt;
use core::ops::{Add, Sub};
use core::time::Duration;

use crate::plant::{self, Plant};

/// A point on the host's monotonic clock, in nanoseconds from an origin the host chooses.
///
/// Only differences between instants of one engine carry meaning.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The instant `nanos` nanoseconds after the host's origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// Nanoseconds since the host's origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturates at the end of time rather than wrapping.
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(nanos(d)))
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    /// Saturates at the origin.
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(nanos(d)))
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// A lock-delay as the server is asked to keep it: 1% longer (whole ms, rounded up), so that on
/// a server whose clock runs up to 1% fast it still lasts the delay in the client's time, as
/// the drift allowance makes the lease do.
pub(crate) fn server_delay(delay: Duration) -> Duration {
    let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
    delay + Duration::from_millis(ms.div_ceil(100))
}

/// The safety margin subtracted from every lease (Redlock's clock drift allowance):
/// 1% of the lease plus 2 ms.
pub fn drift(lease: Duration) -> Duration {
    if plant::on(Plant::NoDrift) {
        return Duration::ZERO;
    }
    if plant::on(Plant::DriftHalved) {
        return lease / 200 + Duration::from_millis(2);
    }
    lease / 100 + Duration::from_millis(2)
}
