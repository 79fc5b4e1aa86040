//! Owner tokens: how a tenure is named on every backend. Each derives from the engine's
//! client id and the tenure's sequence number, so it is unique per tenure and never reused.

use crate::ids::ClientId;

/// The owner token of one tenure: the client id as 32 lowercase hex digits, `-`, and the
/// tenure's sequence number in lowercase hex. Unique per tenure, never reused.
pub fn owner_token(client: ClientId, seq: u64) -> String {
    // Written digit by digit: every request names its tenure, and `format!` of a u128 costs
    // more than the rest of building the request.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut token = String::with_capacity(32 + 1 + 16);
    for byte in client.0.to_be_bytes() {
        token.push(HEX[usize::from(byte >> 4)] as char);
        token.push(HEX[usize::from(byte & 0xf)] as char);
    }
    token.push('-');
    let digits = (64 - seq.leading_zeros()).div_ceil(4).max(1);
    for i in (0..digits).rev() {
        token.push(HEX[(seq >> (4 * i)) as usize & 0xf] as char);
    }
    token
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
