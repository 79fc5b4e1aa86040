//! Jitter without a random source of the engine's own: splitmix64 seeded from the client id,
//! which the host drew from its CSPRNG.

use core::time::Duration;

use crate::ids::ClientId;

/// A splitmix64 stream.
#[derive(Debug, Clone)]
pub(crate) struct Jitter(u64);

impl Jitter {
    pub(crate) fn new(client: ClientId) -> Self {
        Self((client.0 as u64) ^ ((client.0 >> 64) as u64))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform between `lo` and `hi` (inclusive), to the microsecond.
    pub(crate) fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo, hi) = (lo.as_micros() as u64, hi.as_micros() as u64);
        if hi <= lo {
            return Duration::from_micros(lo);
        }
        Duration::from_micros(lo + self.next_u64() % (hi - lo + 1))
    }
}
