//! The hash of the engine's in-memory tables (the tenure index, the counters): a word at a time,
//! without a random key, so that the engine stays deterministic. It is the design of rustc's
//! `FxHasher` (version 2): one add and one multiply per word, and a rotation at the end to
//! bring the well-mixed high bits down to the low bits that pick a table's bucket.
//!
//! Not for anything persistent (the Redis library's content address is [`crate::fnv`]'s,
//! fixed by the protocol), and not for anything an adversary chooses to collide: names that
//! share a bucket cost more comparisons, never a wrong answer.

use std::hash::{BuildHasherDefault, Hasher};

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Fx(u64);

/// What a `HashMap` of the engine is built with.
pub(crate) type FxBuild = BuildHasherDefault<Fx>;

impl Fx {
    const K: u64 = 0xf135_7aea_2e62_a9c5;

    fn add(&mut self, word: u64) {
        self.0 = self.0.wrapping_add(word).wrapping_mul(Self::K);
    }
}

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            // The length too: "a" and "a\0" must differ.
            self.add(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn write_isize(&mut self, n: isize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, Hash};

    use super::FxBuild;

    fn hash(value: impl Hash) -> u64 {
        FxBuild::default().hash_one(value)
    }

    #[test]
    fn equal_values_hash_alike_and_near_ones_apart() {
        assert_eq!(hash("dlock-a"), hash(String::from("dlock-a")));
        assert_eq!(hash((3u8, 7u64)), hash((3u8, 7u64)));
        // Texts that differ in length only, or in a byte past the first word, and integers
        // one apart all hash apart; so do the low bits a table's bucket is taken from.
        let distinct = |values: Vec<u64>| {
            let mut low: Vec<u64> = values.iter().map(|h| h & 0xff).collect();
            low.sort_unstable();
            low.dedup();
            let mut all = values;
            all.sort_unstable();
            all.dedup();
            (all.len(), low.len())
        };
        let texts = [
            "a",
            "a\0",
            "",
            "\0",
            "dlock-lock-1",
            "dlock-lock-2",
            "dlock-lock-10",
        ];
        assert_eq!(distinct(texts.iter().map(hash).collect()).0, texts.len());
        let (all, low) = distinct((0..64u64).map(hash).collect());
        assert_eq!(all, 64);
        assert!(
            low >= 48,
            "64 sequence numbers fill only {low} of 256 buckets"
        );
    }
}
