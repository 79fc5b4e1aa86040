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

/// The class of an [`Error`], stable across every host: Python raises one exception class per
/// code, Node sets `err.code` to `DLOCK_` and the code in upper snake case, the CLI picks its
/// exit code by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The wait ran out before the lock could be acquired.
    Timeout,
    /// The lock is (or was already) lost.
    Lost,
    /// The hold was released already (or never held by this handle).
    NotHeld,
    /// The caller's mistake, refused before anything was sent: a bad name, lease, URL, option.
    InvalidArgument,
    /// The backend could not be reached, timed out, or answered badly; or the engine failed.
    Backend,
    /// The client is closed.
    Closed,
}

impl ErrorCode {
    /// Every code, in the order of the docs.
    pub const ALL: [ErrorCode; 6] = [
        ErrorCode::Timeout,
        ErrorCode::Lost,
        ErrorCode::NotHeld,
        ErrorCode::InvalidArgument,
        ErrorCode::Backend,
        ErrorCode::Closed,
    ];

    /// The code's stable name: `timeout`, `lost`, `not-held`, `invalid-argument`, `backend`,
    /// `closed`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Timeout => "timeout",
            ErrorCode::Lost => "lost",
            ErrorCode::NotHeld => "not-held",
            ErrorCode::InvalidArgument => "invalid-argument",
            ErrorCode::Backend => "backend",
            ErrorCode::Closed => "closed",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Error {
    /// The error's class; see [`ErrorCode`]. The one place errors are sorted for the hosts.
    pub fn code(&self) -> ErrorCode {
        use dlock_core::Error as E;
        match self {
            Error::WaitTimedOut => ErrorCode::Timeout,
            Error::Lost(_) | Error::Engine(E::LockLost { .. } | E::SessionExpired) => {
                ErrorCode::Lost
            }
            Error::Engine(E::NotHeld { .. }) => ErrorCode::NotHeld,
            Error::Closed | Error::Engine(E::Closed) => ErrorCode::Closed,
            Error::InvalidUrl(_) | Error::Unsupported(_) | Error::InvalidArgument(_) => {
                ErrorCode::InvalidArgument
            }
            Error::Engine(e) if e.is_misuse() => ErrorCode::InvalidArgument,
            Error::Connect(_) | Error::Engine(_) | Error::Machine(_) => ErrorCode::Backend,
        }
    }

    /// True when a wait or a backend request ran out of time.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            Error::WaitTimedOut | Error::Engine(dlock_core::Error::Timeout)
        )
    }

    /// True when the lock is (or was already) lost.
    pub fn is_lost(&self) -> bool {
        self.code() == ErrorCode::Lost
    }

    /// True for the caller's mistakes: bad names, leases, URLs, or using a released lock or a
    /// closed client.
    pub fn is_misuse(&self) -> bool {
        matches!(
            self.code(),
            ErrorCode::InvalidArgument | ErrorCode::NotHeld | ErrorCode::Closed
        )
    }

    /// True when the backend could not be reached, timed out or answered badly.
    pub fn is_backend(&self) -> bool {
        self.code() == ErrorCode::Backend
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
