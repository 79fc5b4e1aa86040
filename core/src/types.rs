//! What goes into the engine ([`Input`]) and what comes out ([`Output`]).

use core::time::Duration;

use crate::error::{Error, TransportError};
pub use crate::ids::{ClientId, HoldId, OpId, RequestId};
use crate::redis::{RedisOp, Value};
use crate::sql::{SqlOp, SqlValue};
use crate::time::Instant;
use crate::zk::{ZkOp, ZkReply};

/// How long an acquire may wait for a held lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Try once (try-acquire): a held lock ends the command with [`NotAcquired::Busy`].
    No,
    /// Queue until this instant at the latest.
    Until(Instant),
    /// Queue until acquired or cancelled.
    Forever,
}

/// What an acquire takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Kind {
    /// The lock `name` (the default): one holder at a time, reentrant for its owner.
    #[default]
    Mutex,
    /// One permit of the semaphore `name`, which has `permits` of them (1 to
    /// [`MAX_PERMITS`](crate::MAX_PERMITS)): at most that many holders at a time. Every
    /// acquire is a permit of its own with its own lease, hold and fencing token (not
    /// reentrant); only its hold releases it. Every client must give the same number: while
    /// anyone holds or waits, another number fails the acquire with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) on Redis (ZooKeeper cannot
    /// check it). Redis and ZooKeeper; Redlock refuses semaphores.
    Semaphore { permits: u32 },
    /// A read hold of the read-write lock `name`: many readers at once, none beside a writer
    /// — except the writer's own owner, whose read is granted beside its write hold
    /// (downgrade: take the read, then release the write). Reentrant for its owner. A reader
    /// that arrives while a writer waits queues behind it (writer preference). Redis and
    /// ZooKeeper.
    Read,
    /// The write hold of the read-write lock `name`: one writer, and no reader beside it.
    /// Reentrant for its owner. An owner that holds or waits for a read hold of the lock is
    /// refused with [`Error::InvalidArgument`](crate::Error::InvalidArgument): upgrading would
    /// wait for itself.
    Write,
}

/// The primitives a backend may offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Primitive {
    Lock,
    Semaphore,
    RwLock,
}

impl Kind {
    /// What it takes, in every host's stats and metrics: `lock`, `semaphore`, `read`, `write`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Mutex => "lock",
            Kind::Semaphore { .. } => "semaphore",
            Kind::Read => "read",
            Kind::Write => "write",
        }
    }

    pub(crate) fn primitive(self) -> Primitive {
        match self {
            Kind::Mutex => Primitive::Lock,
            Kind::Semaphore { .. } => Primitive::Semaphore,
            Kind::Read | Kind::Write => Primitive::RwLock,
        }
    }
}

/// One acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquire {
    pub op: OpId,
    /// The lock's name: 1 to [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes of UTF-8.
    pub name: String,
    /// Who in the application asks (a thread, a task, a lock object). The same owner
    /// acquiring a lock it holds is reentrant: same hold, same fencing token, count + 1.
    pub owner: u64,
    /// Time to live on the server, renewed by the watchdog while held.
    pub lease: Duration,
    pub wait: Wait,
    /// Stop renewing and release this long after the tenure began. `None`: renew until
    /// released.
    pub max_hold: Option<Duration>,
    /// Fair (the default): waiters are served first come, first served, and a release hands
    /// the lock to the next. Non-fair: this acquire takes a free lock even when others
    /// queue, and its final release frees the lock and wakes the first waiter to race for it
    /// (more throughput when some waiters are slow to answer, no order). One Redis; Redlock
    /// never queues, and ZooKeeper refuses non-fair acquires.
    pub fair: bool,
    /// A lock, or a permit of a semaphore.
    pub kind: Kind,
}

/// Op ids, owners and hold ids from this value up are the engine's own (multi-locks and their
/// members); a command that uses one as an op id or owner fails with
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument). The engine's ids stay below
/// 2^53, so they survive JSON numbers in JavaScript.
pub const RESERVED_IDS: u64 = 1 << 52;

/// One acquire of several locks as one: all of them or none ([`crate::multi`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireMulti {
    pub op: OpId,
    /// The locks' names, each as for [`Acquire::name`]: 1 to
    /// [`MAX_MULTI`](crate::MAX_MULTI) of them, in any order, duplicates counted once.
    pub names: Vec<String>,
    /// Each lock's lease, as for [`Acquire::lease`].
    pub lease: Duration,
    /// One deadline for the whole set.
    pub wait: Wait,
    /// As for [`Acquire::max_hold`], counted from the first lock's grant.
    pub max_hold: Option<Duration>,
}

/// One lock of a held multi-lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// This lock's tenure's fencing token.
    pub fencing_token: u64,
}

/// A command from the application. Each ends in exactly one terminal [`Event`] naming its
/// op id, except [`Command::Cancel`], which ends the acquire it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Acquire(Acquire),
    /// Acquire several locks as one (a multi-lock); ends in [`Event::AcquiredMulti`]. Its
    /// hold takes [`Command::Release`] and [`Command::Extend`] like any other; a release
    /// frees every lock of it.
    AcquireMulti(AcquireMulti),
    /// Drop one hold count; at zero the lock is freed and handed to the next waiter.
    Release {
        op: OpId,
        hold: HoldId,
    },
    /// Renew now, with a (possibly longer) lease that later renewals keep using.
    Extend {
        op: OpId,
        hold: HoldId,
        lease: Duration,
    },
    /// Stop waiting: the pending acquire `op` ends with [`NotAcquired::Cancelled`] and leaves
    /// the queue; an [`Command::Observe`] ends the same way. A no-op if that command has
    /// already ended.
    Cancel {
        op: OpId,
    },
    /// Publish `value` (at most [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) bytes) as the leader
    /// of the election named as the lock `hold` holds: an election is a lock whose holder
    /// publishes a value, and its term is the tenure's fencing token. Ends in
    /// [`Event::Proclaimed`]; later proclaims replace the value within the term. A hold that
    /// has proclaimed resigns when it is released, telling the observers. Redis, Redis
    /// Cluster and `memory://`.
    Proclaim {
        op: OpId,
        hold: HoldId,
        value: String,
    },
    /// Follow the leader of election `name`: an [`Event::Leader`] at once with the current
    /// leader, then one for each change (a new term, a new value, or none once the lock is
    /// free), until [`Command::Cancel`] ends it with [`NotAcquired::Cancelled`]. Pushed by
    /// the leaders' messages, and read again when the leader's lease would run out, so a
    /// leader that dies silently is noticed within its lease.
    Observe {
        op: OpId,
        name: String,
    },
}

impl Command {
    /// The op id the command names.
    pub fn op(&self) -> OpId {
        match self {
            Command::Acquire(a) => a.op,
            Command::AcquireMulti(m) => m.op,
            Command::Release { op, .. }
            | Command::Extend { op, .. }
            | Command::Cancel { op }
            | Command::Proclaim { op, .. }
            | Command::Observe { op, .. } => *op,
        }
    }
}

/// Unsolicited news from the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The transport (re)connected: subscriptions must be made again.
    Connected,
    /// The transport lost its connection. On Redis, held locks keep their local validity,
    /// which runs out unless a renewal gets through after a reconnect; on ZooKeeper they are
    /// lost at once (the session may expire without the client hearing of it).
    Disconnected,
    /// A pub/sub message (Redis).
    Message { channel: String, payload: Vec<u8> },
    /// A one-shot watch set by [`ZkOp::Watch`] fired: the node at `path` changed or is gone
    /// (ZooKeeper).
    Watch { path: String },
    /// The ZooKeeper session expired: its ephemeral nodes are gone. The transport opens a
    /// new session and then reports [`Notice::Connected`].
    SessionExpired,
    /// The transport is gone for good: every pending command fails, every hold is lost, and
    /// the engine refuses further commands (sticky).
    Closed,
}

/// A backend operation, in the protocol of the engine's backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Redis(RedisOp),
    Zk(ZkOp),
    /// Redlock: a Redis operation for node `node` (counted from 0 in the order the host
    /// configured them) of several independent Redis servers.
    Redlock {
        node: u32,
        op: RedisOp,
    },
    /// A statement on a SQL database ([`crate::sql`]).
    Sql(SqlOp),
}

/// A successful answer to an [`Op`], in the same protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Redis(Value),
    Zk(ZkReply),
    /// The elements of the one array a SQL statement selects.
    Sql(Vec<SqlValue>),
}

impl Response {
    /// The Redis value, or the response back if it is another protocol's.
    pub(crate) fn redis(self) -> Result<Value, Response> {
        match self {
            Response::Redis(v) => Ok(v),
            other => Err(other),
        }
    }

    /// The ZooKeeper reply, or the response back if it is another protocol's.
    pub(crate) fn zk(self) -> Result<ZkReply, Response> {
        match self {
            Response::Zk(r) => Ok(r),
            other => Err(other),
        }
    }
}

/// The transport's answer to a [`Request`].
pub type Reply = Result<Response, TransportError>;

/// Everything the host feeds in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Command(Command),
    Reply { id: RequestId, reply: Reply },
    Notice(Notice),
}

/// A backend operation for the host's transport to perform verbatim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub id: RequestId,
    pub op: Op,
}

/// Why an acquire ended without the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotAcquired {
    /// Try-acquire found the lock held (or promised to a queued waiter).
    Busy,
    /// The wait deadline passed.
    TimedOut,
    /// Cancelled by [`Command::Cancel`].
    Cancelled,
}

/// Why a held lock was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LostReason {
    /// Local validity ran out before a renewal succeeded. The server may still hold it.
    Expired,
    /// The server says another token owns the lock (or nobody does).
    NotOwner,
    /// The max-hold bound was reached: renewal stopped and the lock was released.
    MaxHold,
    /// The engine was closed.
    Closed,
    /// The connection to ZooKeeper broke: the session (and the lock with it) may expire
    /// before the client can find out, so the lock counts as lost at once.
    Disconnected,
    /// The ZooKeeper session expired; its lock nodes are gone.
    SessionExpired,
}

impl LostReason {
    /// Every reason, in the order of the docs.
    pub const ALL: [LostReason; 6] = [
        LostReason::Expired,
        LostReason::NotOwner,
        LostReason::MaxHold,
        LostReason::Closed,
        LostReason::Disconnected,
        LostReason::SessionExpired,
    ];

    /// The reason's stable name in every host: `expired`, `not-owner`, `max-hold`, `closed`,
    /// `disconnected`, `session-expired`.
    pub fn as_str(&self) -> &'static str {
        match self {
            LostReason::Expired => "expired",
            LostReason::NotOwner => "not-owner",
            LostReason::MaxHold => "max-hold",
            LostReason::Closed => "closed",
            LostReason::Disconnected => "disconnected",
            LostReason::SessionExpired => "session-expired",
        }
    }

    /// Its place in [`LostReason::ALL`].
    pub fn index(&self) -> usize {
        match self {
            LostReason::Expired => 0,
            LostReason::NotOwner => 1,
            LostReason::MaxHold => 2,
            LostReason::Closed => 3,
            LostReason::Disconnected => 4,
            LostReason::SessionExpired => 5,
        }
    }
}

/// News for the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Terminal for an acquire. `count` is the hold count after it (> 1: reentrant).
    Acquired {
        op: OpId,
        hold: HoldId,
        fencing_token: u64,
        valid_until: Instant,
        count: u32,
    },
    /// Terminal for a multi-lock's acquire: every lock is held. `members` are in the
    /// canonical order (names sorted by their bytes, duplicates dropped); `valid_until` is
    /// the earliest of theirs.
    AcquiredMulti {
        op: OpId,
        hold: HoldId,
        members: Vec<Member>,
        valid_until: Instant,
    },
    /// Terminal for an acquire.
    NotAcquired { op: OpId, reason: NotAcquired },
    /// Terminal for a release. `count` is what is left; 0 means the lock is free (or handed on).
    Released { op: OpId, hold: HoldId, count: u32 },
    /// Terminal for an extend.
    Extended {
        op: OpId,
        hold: HoldId,
        valid_until: Instant,
    },
    /// Terminal for any command.
    Failed { op: OpId, error: Error },
    /// The watchdog renewed a hold.
    Renewed { hold: HoldId, valid_until: Instant },
    /// A hold is gone. Stop using the resource: only fencing protects it from here on.
    Lost { hold: HoldId, reason: LostReason },
    /// Terminal for a proclaim: the value is published under `term`, the hold's fencing
    /// token.
    Proclaimed { op: OpId, hold: HoldId, term: u64 },
    /// Observe `op` saw the election's leader change (the first one reports the leader at
    /// the start). Terms only grow from one event to the next.
    Leader { op: OpId, leader: Option<Leader> },
}

/// An election's leader: its term (the fencing token of the tenure that leads) and the value
/// it proclaimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub term: u64,
    pub value: String,
}

impl Event {
    /// The command this event ends, if it is terminal.
    pub fn terminal_op(&self) -> Option<OpId> {
        match self {
            Event::Acquired { op, .. }
            | Event::AcquiredMulti { op, .. }
            | Event::NotAcquired { op, .. }
            | Event::Released { op, .. }
            | Event::Extended { op, .. }
            | Event::Failed { op, .. }
            | Event::Proclaimed { op, .. } => Some(*op),
            Event::Renewed { .. } | Event::Lost { .. } | Event::Leader { .. } => None,
        }
    }
}

/// Everything the host drains out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Request(Request),
    Event(Event),
}
