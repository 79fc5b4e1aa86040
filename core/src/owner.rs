//! Owner tokens: how a tenure is named on every backend. Each derives from the engine's
//! client id and the tenure's sequence number, so it is unique per tenure and never reused.

use core::fmt::Write as _;

use crate::ids::ClientId;

/// The owner token of one tenure: the client id as 32 lowercase hex digits, `-`, and the
/// tenure's sequence number in lowercase hex. Unique per tenure, never reused.
pub fn owner_token(client: ClientId, seq: u64) -> String {
    let mut token = String::with_capacity(32 + 1 + 16);
    let _ = write!(token, "{:032x}-{seq:x}", client.0);
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
