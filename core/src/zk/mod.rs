//! The ZooKeeper protocol, v1: node layout, node names, the operations a transport performs
//! and their replies.
//!
//! Per lock name N under a root (default `/dlock`): a persistent node `root/escape(N)`, and
//! under it one `EPHEMERAL_SEQUENTIAL` node per contender, `<owner token>-lock-<10-digit
//! sequence>`. The lowest sequence holds the lock; each waiter watches only the node just
//! before its own. The fencing token is the holder's sequence number + 1. A semaphore of N
//! permits queues the same way under `root/escape(N).semaphore`: the N lowest hold a permit,
//! and each waiter watches the N nodes just before its own. `docs/PROTOCOL.md`
//! describes the same thing for other implementers.

pub(crate) mod machine;
pub mod reference;

use core::fmt::Write as _;

use crate::error::Error;
use crate::status::LockStatus;

/// Version of the node layout in this module.
pub const PROTOCOL_VERSION: u32 = 1;

/// What separates the owner token from the server's sequence number in a contender's name:
/// a lock's, a permit's or a writer's node, and a reader's of a read-write lock.
const LOCK_MARK: &str = "-lock-";
const READ_MARK: &str = "-read-";

/// Checks a root path: absolute, no trailing `/`, no empty, `.` or `..` component.
pub fn check_root(root: &str) -> Result<(), Error> {
    let bad = |why: &str| {
        Err(Error::InvalidConfig(format!(
            "ZooKeeper root {root:?} {why}"
        )))
    };
    let Some(rest) = root.strip_prefix('/') else {
        return bad("must start with '/'");
    };
    if rest
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == ".." || c.chars().any(char::is_control))
    {
        return bad("has an empty, '.', '..' or control-character component");
    }
    Ok(())
}

/// A backend operation on ZooKeeper. Every node is created with the transport's ACL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkOp {
    /// Create `path` and every missing ancestor as persistent, empty nodes; nodes that exist
    /// already are fine (Curator's `creatingParentsIfNeeded`, kazoo's `ensure_path`).
    /// Reply: [`ZkReply::Done`].
    CreateParents { path: String },
    /// Create an empty `EPHEMERAL_SEQUENTIAL` node named `prefix` + the server's 10-digit
    /// sequence number. Reply: [`ZkReply::Created`] with the full path, or
    /// [`ZkReply::NoNode`] if the parent is missing.
    CreateSequential { prefix: String },
    /// Delete `path`, any version. Reply: [`ZkReply::Done`] or [`ZkReply::NoNode`].
    Delete { path: String },
    /// The names of `path`'s children. Reply: [`ZkReply::Children`] or [`ZkReply::NoNode`].
    Children { path: String },
    /// `getData(path, watch = true)`: [`ZkReply::Done`] with a one-shot watch set, which
    /// fires once as [`Notice::Watch`](crate::Notice::Watch) when the node changes or goes;
    /// or [`ZkReply::NoNode`], leaving no watch behind.
    Watch { path: String },
    /// `exists(path)` without a watch: [`ZkReply::Done`] or [`ZkReply::NoNode`]. Any answer
    /// proves the session alive.
    Exists { path: String },
}

/// A successful answer to a [`ZkOp`]. Connection loss, a closed or expired session and
/// other server errors are transport errors instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkReply {
    Done,
    /// The created node's full path (without any chroot).
    Created(String),
    /// Child names, in any order.
    Children(Vec<String>),
    /// The node (or, for a create, its parent) does not exist.
    NoNode,
}

/// Escapes a lock name into one path component: every byte outside `A-Z a-z 0-9 - _` becomes
/// `%XX` (uppercase hex). The result is never empty, `.` or `..`, contains no `/`, and
/// distinct names stay distinct.
pub fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The persistent node under which the contenders for lock `name` queue.
pub fn lock_dir(root: &str, name: &str) -> String {
    format!("{root}/{}", escape(name))
}

/// The persistent node under which the contenders for the permits of semaphore `name` queue:
/// apart from the lock of that name (an escaped name never contains `.`).
pub fn semaphore_dir(root: &str, name: &str) -> String {
    format!("{root}/{}.semaphore", escape(name))
}

/// The persistent node under which the readers and writers of read-write lock `name` queue,
/// apart from the lock and the semaphore of that name.
pub fn rw_dir(root: &str, name: &str) -> String {
    format!("{root}/{}.rwlock", escape(name))
}

/// The path prefix of the contender node of tenure `token` (the server appends the sequence):
/// `-read-` for a reader of a read-write lock, `-lock-` for any other.
pub fn node_prefix(dir: &str, token: &str, reader: bool) -> String {
    let mark = if reader { READ_MARK } else { LOCK_MARK };
    format!("{dir}/{token}{mark}")
}

/// Whether a contender node is a reader's.
pub fn is_reader(child: &str) -> bool {
    child.rsplit_once(LOCK_MARK).is_none() && child.contains(READ_MARK)
}

/// A contender node's owner token and sequence number; `None` for a foreign child.
pub fn parse_child(child: &str) -> Option<(&str, u64)> {
    let (token, seq) = child
        .rsplit_once(LOCK_MARK)
        .or_else(|| child.rsplit_once(READ_MARK))?;
    if seq.len() != 10 || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((token, seq.parse().ok()?))
}

/// The contenders among `children`, first in line first: `(sequence, child name)`.
pub fn queue(children: &[String]) -> Vec<(u64, &str)> {
    let mut q: Vec<(u64, &str)> = children
        .iter()
        .filter_map(|c| parse_child(c).map(|(_, seq)| (seq, c.as_str())))
        .collect();
    q.sort_unstable();
    q
}

/// The status of a lock from a [`ZkOp::Children`] reply of its directory. The hold count
/// reads 1 when held (reentrancy is counted by the holder's engine) and there is no TTL
/// (the holder's session decides); `latest_token` is the newest contender's token.
pub fn status(children: &[String]) -> LockStatus {
    let q = queue(children);
    let mut contenders = q
        .iter()
        .filter_map(|(seq, child)| Some((parse_child(child)?.0.to_owned(), *seq)));
    let holder = contenders.next();
    LockStatus {
        count: u32::from(holder.is_some()),
        fencing_token: holder.as_ref().map_or(0, |h| machine::fencing_token(h.1)),
        owner: holder.map(|h| h.0),
        ttl: None,
        latest_token: q.last().map_or(0, |(seq, _)| machine::fencing_token(*seq)),
        waiters: contenders.map(|(token, _)| token).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_keeps_names_apart_and_inside_one_component() {
        for (name, escaped) in [
            ("orders/42", "orders%2F42"),
            (".", "%2E"),
            ("..", "%2E%2E"),
            ("a%2Fb", "a%252Fb"),
            ("é", "%C3%A9"),
            ("Ab-_9", "Ab-_9"),
        ] {
            assert_eq!(escape(name), escaped);
        }
    }

    #[test]
    fn children_parse_and_sort_by_sequence() {
        let children: Vec<String> = [
            "bb-2-lock-0000000012",
            "aa-1-lock-0000000003",
            "foreign",
            "cc-3-lock-12",
        ]
        .map(String::from)
        .into();
        assert_eq!(
            queue(&children),
            vec![(3, "aa-1-lock-0000000003"), (12, "bb-2-lock-0000000012")]
        );
        let s = status(&children);
        assert_eq!(s.owner.as_deref(), Some("aa-1"));
        assert_eq!((s.fencing_token, s.latest_token, s.count), (4, 13, 1));
        assert_eq!(s.waiters, vec!["bb-2".to_owned()]);
    }

    #[test]
    fn roots_are_checked() {
        for ok in ["/dlock", "/a/b"] {
            assert!(check_root(ok).is_ok(), "{ok}");
        }
        for bad in ["", "/", "dlock", "/dlock/", "/a//b", "/a/./b", "/.."] {
            assert!(check_root(bad).is_err(), "{bad}");
        }
    }
}
