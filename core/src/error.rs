//! Errors. Caller misuse and backend trouble are different variants so that hosts can map
//! them to different exception types; see [`Error::is_misuse`].

use core::fmt;
use core::time::Duration;

use crate::ids::{HoldId, OpId};

/// Longest lock name, in bytes of UTF-8.
pub const MAX_NAME_LEN: usize = 1024;
/// Shortest lease the engine accepts: below it the drift margin eats the lease.
pub const MIN_LEASE: Duration = Duration::from_millis(10);
/// Most locks in one multi-lock.
pub const MAX_MULTI: usize = 64;
/// Most permits of one semaphore (every permit script reads each holder).
pub const MAX_PERMITS: u32 = 1024;
/// Longest value an election's leader may publish, in bytes of UTF-8.
pub const MAX_VALUE_LEN: usize = 4096;
/// Longest lease the engine accepts.
pub const MAX_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Why a command failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    // --- caller misuse: refused before anything is sent ---
    /// The lock name is empty.
    EmptyName,
    /// The lock name is longer than [`MAX_NAME_LEN`] bytes.
    NameTooLong { len: usize },
    /// A lease (or waiter lease, or max hold) outside [`MIN_LEASE`]..=[`MAX_LEASE`].
    InvalidLease { lease: Duration },
    /// This op id is still in use by an earlier command.
    DuplicateOp { op: OpId },
    /// The hold is not (or no longer) held by this engine: never acquired, released, or lost.
    NotHeld { hold: HoldId },
    /// This owner is already waiting for this lock; wait for that acquire to end first.
    AlreadyWaiting { op: OpId },
    /// The engine was closed; it accepts no more commands.
    Closed,
    /// A setting the engine cannot work with (e.g. a ZooKeeper root that is not a path).
    InvalidConfig(String),
    /// A command the engine cannot take as given (e.g. a multi-lock of no names, or an op id
    /// the engine reserves for itself).
    InvalidArgument(String),

    // --- backend trouble ---
    /// The backend could not be reached or the connection broke before a reply.
    Unavailable(String),
    /// No reply came within the request timeout.
    Timeout,
    /// The backend answered with an error (e.g. a script error).
    Backend(String),
    /// The backend's reply does not follow the protocol.
    MalformedReply(String),
    /// The lock was lost while the command was under way (lease ran out or taken over).
    LockLost { hold: HoldId },
    /// The ZooKeeper session expired while the command was under way.
    SessionExpired,
}

impl Error {
    /// True for errors the caller caused, which retrying cannot fix.
    pub fn is_misuse(&self) -> bool {
        matches!(
            self,
            Error::EmptyName
                | Error::NameTooLong { .. }
                | Error::InvalidLease { .. }
                | Error::DuplicateOp { .. }
                | Error::NotHeld { .. }
                | Error::AlreadyWaiting { .. }
                | Error::Closed
                | Error::InvalidConfig(_)
                | Error::InvalidArgument(_)
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::EmptyName => f.write_str("lock name is empty"),
            Error::NameTooLong { len } => {
                write!(
                    f,
                    "lock name is {len} bytes long; at most {MAX_NAME_LEN} are allowed"
                )
            }
            Error::InvalidLease { lease } => write!(
                f,
                "lease {lease:?} is out of range ({MIN_LEASE:?} to {MAX_LEASE:?})"
            ),
            Error::DuplicateOp { op } => write!(f, "op id {} is already in use", op.0),
            Error::NotHeld { hold } => write!(f, "hold {} is not held", hold.0),
            Error::AlreadyWaiting { op } => {
                write!(
                    f,
                    "this owner is already waiting for this lock (op {})",
                    op.0
                )
            }
            Error::Closed => f.write_str("the engine is closed"),
            Error::InvalidConfig(why) => write!(f, "invalid configuration: {why}"),
            Error::InvalidArgument(why) => write!(f, "invalid argument: {why}"),
            Error::Unavailable(why) => write!(f, "backend unavailable: {why}"),
            Error::Timeout => f.write_str("backend request timed out"),
            Error::Backend(why) => write!(f, "backend error: {why}"),
            Error::MalformedReply(why) => write!(f, "malformed backend reply: {why}"),
            Error::LockLost { hold } => write!(f, "hold {} was lost", hold.0),
            Error::SessionExpired => f.write_str("the ZooKeeper session expired"),
        }
    }
}

impl std::error::Error for Error {}

/// How a transport reports that a request got no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportError {
    /// Connection refused, broken, or closed before the reply arrived.
    Unavailable(String),
    /// The server answered with an error reply (e.g. `ERR` from a script).
    Server(String),
}

impl From<TransportError> for Error {
    fn from(e: TransportError) -> Self {
        match e {
            TransportError::Unavailable(why) => Error::Unavailable(why),
            TransportError::Server(why) => Error::Backend(why),
        }
    }
}
