//! How an engine is set up: its identity, its backend protocol and their settings.

use core::time::Duration;

use crate::ids::ClientId;
use crate::sql::SqlSettings;

/// Which backend protocol an engine speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protocol {
    /// One Redis server (or a `memory://` reference store): [`crate::redis`].
    Redis,
    /// One Redis server, each lock laid out as Redisson's `RLock` lays it out, so that dlock
    /// and Redisson clients exclude each other: [`crate::redisson`].
    Redisson,
    /// A ZooKeeper ensemble: [`crate::zk`].
    ZooKeeper(ZkSettings),
    /// Redlock over this many independent Redis servers: [`crate::redlock`]. Requests name
    /// their node ([`Op::Redlock`](crate::Op::Redlock)).
    Redlock { nodes: u32 },
    /// A SQL database (PostgreSQL, MySQL, MariaDB): [`crate::sql`]. The queue protocol of one
    /// Redis, run by the database's functions.
    Sql(SqlSettings),
}

/// Engine settings. [`Config::new`] gives the defaults for Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// This engine's identity; owner tokens derive from it. Read it from a CSPRNG.
    pub client_id: ClientId,
    /// How long a queued waiter keeps its place without renewing it, and how long a lock
    /// handed to a waiter stays promised to it before the waiter confirms. A crashed waiter
    /// stalls the queue for at most this long. Renewed every third of it. An acquire whose
    /// lease is shorter uses its lease instead, so that a lock handed to a waiter that dies
    /// never outlives a lease. (One Redis only: a ZooKeeper waiter's place lasts as long as
    /// its session, and Redlock waiters do not queue, they retry.)
    pub waiter_lease: Duration,
    /// A request with no reply after this long counts as failed.
    pub request_timeout: Duration,
    /// At most this many locks are renewed by one request (Redis, and per node on Redlock:
    /// ZooKeeper renews a session, not locks).
    pub max_batch: usize,
    /// Lock-delay (Chubby's idea; Redis only): a lock whose holder stops renewing it without
    /// releasing it stays taken for this long after its lease, so that a paused holder that
    /// wakes up cannot clash with a new holder in that window. The server keeps each lock for
    /// `lease + lock_delay` (the delay 1% longer, for clock rates; PROTOCOL.md §4); the
    /// holder's own validity still ends with the lease. A release
    /// frees the lock at once. Zero (the default) is off.
    pub lock_delay: Duration,
    pub protocol: Protocol,
}

impl Config {
    pub fn new(client_id: ClientId) -> Self {
        Self {
            client_id,
            waiter_lease: Duration::from_secs(3),
            request_timeout: Duration::from_secs(2),
            max_batch: 100,
            lock_delay: Duration::ZERO,
            protocol: Protocol::Redis,
        }
    }
}

/// Where ZooKeeper lock nodes live unless configured otherwise.
pub const DEFAULT_ZK_ROOT: &str = "/dlock";

/// ZooKeeper settings of an engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkSettings {
    /// The parent of every lock's node, e.g. `/dlock`.
    pub root: String,
    /// The session timeout the server granted: the lease of every lock this engine holds.
    pub session_timeout: Duration,
}

impl ZkSettings {
    pub fn new(session_timeout: Duration) -> Self {
        Self {
            root: DEFAULT_ZK_ROOT.to_owned(),
            session_timeout,
        }
    }
}
