//! Owner tokens: how a tenure is named on every backend. Each derives from the engine's
//! client id and the tenure's sequence number, so it is unique per tenure and never reused.

use crate::ids::ClientId;

/// The owner token of one tenure: the client id as 32 lowercase hex digits, `-`, and the
/// tenure's sequence number in lowercase hex. Unique per tenure, never reused.
pub fn owner_token(client: ClientId, seq: u64) -> String {
    // Written digit by digit into a buffer: every request names its tenure, and `format!`
    // of a u128 (or a `String::push` per digit) costs more than the rest of building it.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut token = [0u8; 32 + 1 + 16];
    for (i, byte) in client.0.to_be_bytes().into_iter().enumerate() {
        token[2 * i] = HEX[usize::from(byte >> 4)];
        token[2 * i + 1] = HEX[usize::from(byte & 0xf)];
    }
    token[32] = b'-';
    let digits = (64 - seq.leading_zeros()).div_ceil(4).max(1) as usize;
    for (i, digit) in token[33..33 + digits].iter_mut().enumerate() {
        *digit = HEX[(seq >> (4 * (digits - 1 - i))) as usize & 0xf];
    }
    String::from(std::str::from_utf8(&token[..33 + digits]).expect("hex digits are ASCII"))
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
