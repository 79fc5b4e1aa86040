//! The ZooKeeper protocol, v1: node layout, node names, the operations a transport performs
//! and their replies.
//!
//! Per lock name N under a root (default `/dlock`): a persistent node `root/escape(N)`, and
//! under it one `EPHEMERAL_SEQUENTIAL` node per contender, `<owner token>-lock-<10-digit
//! sequence>`. The lowest sequence holds the lock; each waiter watches only the node just
//! before its own. The fencing token is the holder's sequence number + 1. A semaphore of N
//! permits is Curator's `InterProcessSemaphoreV2` under `root/escape(N).semaphore`: a lock
//! `locks` (the gate) whose holder alone adds a lease node to `leases` and holds a permit once
//! that directory has at most N children; its token is its gate node's. A read-write lock's writers and
//! readers queue under `root/escape(N).rwlock` as Curator's `InterProcessReadWriteLock` names
//! them: `<token>-__WRIT__<seq>` and `<token>-__READ__<seq>`. `docs/PROTOCOL.md` describes the
//! same thing for other implementers.

pub(crate) mod machine;
pub mod reference;

use core::fmt::Write as _;

use crate::error::Error;
use crate::status::LockStatus;
use crate::types::Kind;

/// Version of the node layout in this module.
pub const PROTOCOL_VERSION: u32 = 1;

/// What separates the owner token from the server's sequence number in a contender's name:
/// a lock's or a permit's node (Curator's `InterProcessMutex` names its nodes
/// `_c_<uuid>-lock-<seq>`), and a writer's and a reader's of a read-write lock (Curator's
/// `InterProcessReadWriteLock`: `_c_<uuid>-__WRIT__<seq>`, `_c_<uuid>-__READ__<seq>`).
const LOCK_MARK: &str = "-lock-";
const WRITE_MARK: &str = "-__WRIT__";
const READ_MARK: &str = "-__READ__";
/// A semaphore's lease node (Curator's `InterProcessSemaphoreV2`: `_c_<uuid>-lease-<seq>`).
const LEASE_MARK: &str = "-lease-";
/// kazoo's `Lock` names its nodes `<32 hex>__lock__<seq>`: a contender too (dlock never
/// creates one), so that a kazoo lock built with `extra_lock_patterns=["-lock-"]` and a dlock
/// lock on one directory exclude each other.
const KAZOO_MARK: &str = "__lock__";

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
    /// Create an empty `EPHEMERAL` node at `path` (a downgrade's read node, which takes its
    /// write node's sequence number). Reply: [`ZkReply::Created`] with `path`,
    /// [`ZkReply::NodeExists`], or [`ZkReply::NoNode`] if the parent is missing.
    CreateEphemeral { path: String },
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
    /// `setData(path, data, any version)`: an election's leader publishes its value in its
    /// node (Curator's `LeaderSelector` keeps the participant id there). Reply:
    /// [`ZkReply::Done`] or [`ZkReply::NoNode`].
    SetData { path: String, data: String },
    /// `getData(path, watch)`: [`ZkReply::Data`] (lossy UTF-8), with a one-shot watch set if
    /// asked, which fires as [`Notice::Watch`](crate::Notice::Watch); or
    /// [`ZkReply::NoNode`], leaving no watch behind.
    GetData { path: String, watch: bool },
    /// `getChildren(path, watch = true)`: [`ZkReply::Children`] with a one-shot watch set,
    /// which fires as [`Notice::Watch`](crate::Notice::Watch) when a child comes or goes (or
    /// the node goes); or [`ZkReply::NoNode`], leaving no watch behind.
    WatchChildren { path: String },
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
    /// A node already exists at the path created.
    NodeExists,
    /// A node's data ([`ZkOp::GetData`]).
    Data(String),
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

/// The persistent child every directory of contenders keeps. ZooKeeper never deletes a node
/// that has children, so a directory that Curator created as a container node (deleted by the
/// server once empty, its sequence numbers, and so fencing tokens, starting again at 0 when
/// it is created anew) stays, like a persistent one. Clients cannot tell a container from a
/// persistent node (ZooKeeper reports 0 as a container's `ephemeralOwner`), so every
/// directory gets one. It is no contender for dlock, and sorts after every contender in
/// Curator's order (by the text after the last `lock-`: `pin`) and in kazoo's (unknown names
/// last).
pub const PIN: &str = "dlock-pin";

/// The path of the pin of directory `dir`.
pub fn pin_path(dir: &str) -> String {
    format!("{dir}/{PIN}")
}

/// The persistent node under which the contenders for lock `name` queue.
pub fn lock_dir(root: &str, name: &str) -> String {
    format!("{root}/{}", escape(name))
}

/// The persistent node of semaphore `name` (Curator's `InterProcessSemaphoreV2` path), apart
/// from the lock of that name (an escaped name never contains `.`).
pub fn semaphore_dir(root: &str, name: &str) -> String {
    format!("{root}/{}.semaphore", escape(name))
}

/// A semaphore's gate: a lock whose holder alone adds a lease (Curator's `<path>/locks`).
pub fn gate_dir(semaphore_dir: &str) -> String {
    format!("{semaphore_dir}/locks")
}

/// A semaphore's leases: every child is a permit held, or the gate holder's asking for one
/// (Curator's `<path>/leases`). It has no pin, since Curator counts every child; no token
/// comes from its numbers.
pub fn leases_dir(semaphore_dir: &str) -> String {
    format!("{semaphore_dir}/leases")
}

/// The path prefix of the lease node of tenure `token` in `leases_dir`.
pub fn lease_prefix(leases_dir: &str, token: &str) -> String {
    format!("{leases_dir}/{token}{LEASE_MARK}")
}

/// The persistent node under which the readers and writers of read-write lock `name` queue,
/// apart from the lock and the semaphore of that name.
pub fn rw_dir(root: &str, name: &str) -> String {
    format!("{root}/{}.rwlock", escape(name))
}

/// The path prefix of the contender node of tenure `token` of `kind` (the server appends the
/// sequence): `-__READ__` for a reader of a read-write lock, `-__WRIT__` for a writer,
/// `-lock-` for a lock's holder and a semaphore's gate.
pub fn node_prefix(dir: &str, token: &str, kind: Kind) -> String {
    let mark = match kind {
        Kind::Read => READ_MARK,
        Kind::Write => WRITE_MARK,
        Kind::Mutex | Kind::Semaphore { .. } => LOCK_MARK,
    };
    format!("{dir}/{token}{mark}")
}

/// The read node of a downgrade: named as the reader's sequential node would be, with the
/// sequence number of the same owner's write node, so that it sorts beside that node and
/// ahead of every writer queued since (Curator 5.x does the same).
pub fn downgrade_path(dir: &str, token: &str, write_seq: u64) -> String {
    format!("{}{write_seq:010}", node_prefix(dir, token, Kind::Read))
}

/// Whether a contender node is a writer's of a read-write lock (Curator's test: the name
/// contains `__WRIT__`).
pub fn is_writer(child: &str) -> bool {
    child.contains(&WRITE_MARK[1..])
}

/// A contender node's owner token and sequence number; `None` for a foreign child. The
/// sequence follows the last mark in the name.
pub fn parse_child(child: &str) -> Option<(&str, u64)> {
    let (token, seq) = [LOCK_MARK, WRITE_MARK, READ_MARK, LEASE_MARK, KAZOO_MARK]
        .iter()
        .filter_map(|mark| child.rsplit_once(mark))
        .max_by_key(|(token, _)| token.len())?;
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

    /// Curator's and kazoo's nodes are contenders, by the sequence after their last mark; the
    /// pin is none.
    #[test]
    fn foreign_recipes_nodes_parse() {
        let uuid = "_c_0f3b2c1e-9a8d-4c1b-b2a7-5e6f7a8b9c0d";
        for (child, parsed) in [
            (
                format!("{uuid}-lock-0000000007"),
                Some((uuid.to_owned(), 7)),
            ),
            (
                format!("{uuid}-__WRIT__0000000008"),
                Some((uuid.to_owned(), 8)),
            ),
            (
                format!("{uuid}-__READ__0000000009"),
                Some((uuid.to_owned(), 9)),
            ),
            (
                format!("{uuid}-lease-0000000011"),
                Some((uuid.to_owned(), 11)),
            ),
            (
                "4c1bb2a75e6f7a8b9c0d0f3b2c1e9a8d__lock__0000000010".to_owned(),
                Some(("4c1bb2a75e6f7a8b9c0d0f3b2c1e9a8d".to_owned(), 10)),
            ),
            (PIN.to_owned(), None),
        ] {
            let got = parse_child(&child).map(|(t, s)| (t.to_owned(), s));
            assert_eq!(got, parsed, "{child}");
        }
        assert!(is_writer(&format!("{uuid}-__WRIT__0000000008")));
        assert!(!is_writer(&format!("{uuid}-__READ__0000000009")));
        assert_eq!(
            downgrade_path("/d", "aa-1", 42),
            "/d/aa-1-__READ__0000000042"
        );
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
