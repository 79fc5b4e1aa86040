//! One error type for the whole client.

use std::fmt;

pub use dlock_core::LostReason;

/// Why a dlock call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The URL could not be parsed.
    InvalidUrl(String),
    /// The URL names a backend this build does not support (yet), or the call needs another
    /// backend (a fenced write needs Redis).
    Unsupported(String),
    /// An argument the call cannot work with (e.g. fencing token 0), refused before anything
    /// was sent.
    InvalidArgument(String),
    /// The backend could not be reached when connecting.
    Connect(String),
    /// The wait ran out before the lock could be acquired.
    WaitTimedOut,
    /// The lock was lost (lease ran out, taken over, max hold reached, client closed).
    Lost(LostReason),
    /// The client was closed.
    Closed,
    /// The engine refused the command or the backend failed it.
    Engine(dlock_core::Error),
    /// A pluggable engine failed (a Wasm trap, a fuel or memory limit); the client stopped.
    Machine(String),
}

impl Error {
    /// True when a wait or a backend request ran out of time.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            Error::WaitTimedOut | Error::Engine(dlock_core::Error::Timeout)
        )
    }

    /// True when the lock is (or was already) lost.
    pub fn is_lost(&self) -> bool {
        matches!(
            self,
            Error::Lost(_) | Error::Engine(dlock_core::Error::LockLost { .. })
        )
    }

    /// True for the caller's mistakes: bad names, leases, URLs, or using a released lock.
    pub fn is_misuse(&self) -> bool {
        match self {
            Error::InvalidUrl(_)
            | Error::Unsupported(_)
            | Error::InvalidArgument(_)
            | Error::Closed => true,
            Error::Engine(e) => e.is_misuse(),
            _ => false,
        }
    }

    /// True when the backend could not be reached or answered badly.
    pub fn is_backend(&self) -> bool {
        matches!(self, Error::Connect(_))
            || matches!(
                self,
                Error::Engine(e) if matches!(
                    e,
                    dlock_core::Error::Unavailable(_) | dlock_core::Error::Backend(_) | dlock_core::Error::MalformedReply(_)
                )
            )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidUrl(why) => write!(f, "invalid backend URL: {why}"),
            Error::Unsupported(why) => write!(f, "unsupported backend: {why}"),
            Error::InvalidArgument(why) => write!(f, "invalid argument: {why}"),
            Error::Connect(why) => write!(f, "cannot connect to the backend: {why}"),
            Error::WaitTimedOut => f.write_str("timed out waiting for the lock"),
            Error::Lost(reason) => write!(f, "the lock was lost ({})", reason_text(reason)),
            Error::Closed => f.write_str("the client is closed"),
            Error::Engine(e) => e.fmt(f),
            Error::Machine(why) => write!(f, "the lock engine failed: {why}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Engine(e) => Some(e),
            _ => None,
        }
    }
}

impl From<dlock_core::Error> for Error {
    fn from(e: dlock_core::Error) -> Self {
        match e {
            dlock_core::Error::Closed => Error::Closed,
            e => Error::Engine(e),
        }
    }
}

pub(crate) fn reason_text(reason: &LostReason) -> &'static str {
    match reason {
        LostReason::Expired => "lease ran out before a renewal got through",
        LostReason::NotOwner => "the server says another owner has it",
        LostReason::MaxHold => "max hold time reached",
        LostReason::Closed => "client closed",
        LostReason::Disconnected => "the connection to ZooKeeper broke",
        LostReason::SessionExpired => "the ZooKeeper session expired",
    }
}
