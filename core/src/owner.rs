//! Owner tokens: how a tenure is named on every backend. Each derives from the engine's
//! client id and the tenure's sequence number, so it is unique per tenure and never reused.

use crate::ids::ClientId;

/// The owner token of one tenure: the client id as 32 lowercase hex digits, `-`, and the
/// tenure's sequence number in lowercase hex. Unique per tenure, never reused.
pub fn owner_token(client: ClientId, seq: u64) -> OwnerToken {
    OwnerToken::new::<16>(client, b'-', seq)
}

/// An owner token (or Redisson's hash field, [`crate::redisson::field`]) kept inline: every
/// request names its tenure, and a `String` for it would cost an allocation each time. It
/// reads as the `str` it is.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerToken {
    /// The token, then zeros: so the derived order is the strings' order.
    bytes: [u8; OwnerToken::MAX],
    len: u8,
}

impl OwnerToken {
    /// The longest: 32 hex digits, a separator, and a sequence number's 20 decimal digits.
    const MAX: usize = 32 + 1 + 20;

    /// `client` as 32 lowercase hex digits, `separator`, and `seq` in base `RADIX` (10 or 16).
    pub(crate) fn new<const RADIX: u64>(client: ClientId, separator: u8, seq: u64) -> Self {
        // Written digit by digit: `format!` of a u128 costs more than the rest of a request.
        let mut bytes = [0u8; Self::MAX];
        for (i, byte) in client.0.to_be_bytes().into_iter().enumerate() {
            bytes[2 * i] = DIGITS[usize::from(byte >> 4)];
            bytes[2 * i + 1] = DIGITS[usize::from(byte & 0xf)];
        }
        bytes[32] = separator;
        let mut scratch = [0u8; 20];
        let seq = digits::<RADIX>(seq, &mut scratch);
        bytes[33..33 + seq.len()].copy_from_slice(seq);
        Self {
            bytes,
            len: (33 + seq.len()) as u8,
        }
    }

    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..usize::from(self.len)]).expect("digits are ASCII")
    }
}

impl core::ops::Deref for OwnerToken {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for OwnerToken {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl core::fmt::Display for OwnerToken {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq<str> for OwnerToken {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for OwnerToken {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<OwnerToken> for String {
    fn from(token: OwnerToken) -> Self {
        token.as_str().to_owned()
    }
}

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `n`'s digits in base `RADIX`, 10 or 16 (at most 20 digits), lowercase, written at the end
/// of `scratch`. The base is a constant so that dividing by it compiles to a multiplication,
/// not a division.
pub(crate) fn digits<const RADIX: u64>(n: u64, scratch: &mut [u8; 20]) -> &[u8] {
    const { assert!(RADIX == 10 || RADIX == 16) };
    let (mut n, mut at) = (n, scratch.len());
    loop {
        at -= 1;
        scratch[at] = DIGITS[(n % RADIX) as usize];
        n /= RADIX;
        if n == 0 {
            return &scratch[at..];
        }
    }
}

/// The sequence number of `token` if it is one of `client`'s tokens.
pub fn token_seq(client: ClientId, token: &str) -> Option<u64> {
    let (id, seq) = token.split_once('-')?;
    if id.len() != 32 || u128::from_str_radix(id, 16).ok()? != client.0 || seq.is_empty() {
        return None;
    }
    if seq.starts_with('+') {
        return None;
    }
    u64::from_str_radix(seq, 16).ok()
}
