//! What the engine and the servers say about a lock: a hold of this engine ([`HoldInfo`]) and
//! a lock as a server sees it ([`LockStatus`]).

use core::time::Duration;

use crate::time::Instant;

/// A snapshot of one held lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldInfo {
    pub name: String,
    pub owner: u64,
    pub fencing_token: u64,
    pub count: u32,
    /// The lease the server grants (on ZooKeeper: the session timeout).
    pub lease: Duration,
    pub valid_until: Instant,
}

/// A parsed STATUS reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockStatus {
    /// The holder's owner token, `None` when the lock is free.
    pub owner: Option<String>,
    /// The holder's hold count (0 when free).
    pub count: u32,
    /// The holder's fencing token (0 when free).
    pub fencing_token: u64,
    /// What is left of the holder's lease.
    pub ttl: Option<Duration>,
    /// The latest fencing token ever given out for this lock (0: never held).
    pub latest_token: u64,
    /// Owner tokens of the live waiters, first in line first.
    pub waiters: Vec<String>,
}
