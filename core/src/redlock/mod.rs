//! Redlock: one lock over several independent Redis servers, held while a majority of them
//! hold it, with fencing tokens that keep growing (a max-register over a majority).
//!
//! Every node runs the Redis protocol's own scripts ([`crate::redis`]) on the same keys; this
//! machine only decides which node gets what and when a majority has answered. Requests go
//! out as [`Op::Redlock`](crate::Op::Redlock) with the node's index. `docs/PROTOCOL.md` §9 gives the rules and the
//! argument.
//!
//! - **Acquire**: ACQUIRE `try` on every node at once. Each node that grants the lock answers
//!   with its own next counter value. With a majority granted, the tenure's fencing token is
//!   the largest of those values; RAISE records it on granting nodes that gave a smaller one,
//!   until a majority carries it. The hold is valid until `sent + lease − drift`, counted from
//!   the first round, and only if that is still ahead when the majority is complete. Without
//!   a majority, the lock is released on every node and — for a waiter — tried again after a
//!   randomised back-off (there is no queue across independent servers).
//! - **Renew, extend**: EXTEND on every node; a majority of "extended" renews the hold.
//! - **Release**: RELEASE on every node; a majority of "freed" ends it cleanly.
//! - **Reentrancy** is counted by the engine, as on ZooKeeper.
//!
//! `machine` is the strategy that does this on the lock lifecycle (`core/src/lock`).

pub(crate) mod machine;

use crate::error::Error;
use crate::status::LockStatus;

/// Most nodes one engine will spread a lock over.
pub const MAX_NODES: u32 = 255;

/// How many of `nodes` make a majority.
pub fn quorum(nodes: u32) -> u32 {
    nodes / 2 + 1
}

/// What a majority of nodes agree on, from each node's STATUS (PROTOCOL.md §6): the owner
/// that holds the lock on a majority, with the fencing token a majority of them records and
/// the time until fewer than a majority hold it; no owner if none holds a majority. The
/// latest token is the largest any node answered. Fails when fewer than a majority answered.
pub fn merge_status(nodes: &[Result<LockStatus, Error>]) -> Result<LockStatus, Error> {
    let quorum = quorum(nodes.len() as u32) as usize;
    let answered: Vec<&LockStatus> = nodes.iter().filter_map(|s| s.as_ref().ok()).collect();
    if answered.len() < quorum {
        let error = nodes.iter().find_map(|s| s.as_ref().err());
        return Err(Error::Unavailable(format!(
            "{} of {} Redlock nodes answered{}",
            answered.len(),
            nodes.len(),
            error.map_or(String::new(), |e| format!(" ({e})"))
        )));
    }
    let latest_token = answered.iter().map(|s| s.latest_token).max().unwrap_or(0);
    let majority = answered.iter().find_map(|s| {
        let owner = s.owner.as_ref()?;
        let holding: Vec<&&LockStatus> = answered
            .iter()
            .filter(|o| o.owner.as_ref() == Some(owner))
            .collect();
        (holding.len() >= quorum).then_some((owner, holding))
    });
    let Some((owner, mut holding)) = majority else {
        return Ok(LockStatus {
            owner: None,
            count: 0,
            fencing_token: 0,
            ttl: None,
            latest_token,
            waiters: Vec::new(),
        });
    };
    holding.sort_by_key(|s| core::cmp::Reverse(s.ttl));
    Ok(LockStatus {
        owner: Some(owner.clone()),
        count: holding.iter().map(|s| s.count).max().unwrap_or(0),
        // The token a majority records (a late grant may show its own until it is raised).
        fencing_token: holding
            .iter()
            .map(|s| s.fencing_token)
            .find(|t| holding.iter().filter(|s| s.fencing_token == *t).count() >= quorum)
            .unwrap_or_else(|| holding.iter().map(|s| s.fencing_token).max().unwrap_or(0)),
        ttl: holding[quorum - 1].ttl,
        latest_token,
        waiters: Vec::new(),
    })
}
