//! FNV-1a (64 bits): the content address of the Redis function library, whose name carries
//! the hash of its text (PROTOCOL.md §6), so the protocol fixes it. The engine's in-memory
//! tables hash with [`crate::fx`].

use std::hash::Hasher;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Fnv(u64);

impl Fnv {
    const PRIME: u64 = 0x0100_0000_01b3;
}

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(Self::PRIME);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
