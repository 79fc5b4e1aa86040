//! The lock engine: one sans-IO state machine per backend protocol behind one interface.

use core::time::Duration;

use crate::base::unpack;
use crate::error::Error;
use crate::multi::{Multis, ToMachine};
use crate::redis::LockStatus;
use crate::time::Instant;
use crate::types::{ClientId, HoldId, Input, LostReason, Op, Output, Reply, Response};
use crate::zk::ZkSettings;
use crate::{redis, redlock, zk};

/// Which backend protocol an engine speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protocol {
    /// One Redis server (or a `memory://` reference store): [`crate::redis`].
    Redis,
    /// A ZooKeeper ensemble: [`crate::zk`].
    ZooKeeper(ZkSettings),
    /// Redlock over this many independent Redis servers: [`crate::redlock`]. Requests name
    /// their node ([`Op::Redlock`]).
    Redlock { nodes: u32 },
}

impl Protocol {
    /// The read-only requests that show who holds lock `name` and who waits: one, or one per
    /// node on Redlock. Answer each with [`Protocol::parse_status`]. Checks the name first.
    pub fn status_requests(&self, name: &str) -> Result<Vec<Op>, Error> {
        crate::check_name(name)?;
        Ok(match self {
            Protocol::Redis => vec![Op::Redis(redis::status(&redis::LockKeys::new(name)))],
            Protocol::ZooKeeper(zk) => vec![Op::Zk(zk::ZkOp::Children {
                path: zk::lock_dir(&zk.root, name),
            })],
            Protocol::Redlock { nodes } => {
                let op = redis::status(&redis::LockKeys::new(name));
                (0..*nodes)
                    .map(|node| Op::Redlock {
                        node,
                        op: op.clone(),
                    })
                    .collect()
            }
        })
    }

    /// The status from the reply to one of [`Protocol::status_requests`].
    pub fn parse_status(&self, reply: Reply) -> Result<LockStatus, Error> {
        match unpack(reply, "status", Ok)? {
            Response::Redis(value) if !matches!(self, Protocol::ZooKeeper(_)) => {
                redis::parse_status(&value)
            }
            Response::Zk(zk::ZkReply::Children(children)) => Ok(zk::status(&children)),
            Response::Zk(zk::ZkReply::NoNode) => Ok(zk::status(&[])),
            other => Err(Error::MalformedReply(format!("status replied {other:?}"))),
        }
    }
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
    /// `lease + lock_delay`; the holder's own validity still ends with the lease. A release
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

#[derive(Debug)]
enum Inner {
    Redis(redis::machine::Machine),
    Zk(zk::machine::Machine),
    Redlock(redlock::Machine),
}

/// The sans-IO lock engine.
///
/// Feed it with [`handle_input`](Self::handle_input) and
/// [`handle_timeout`](Self::handle_timeout), then drain [`poll_output`](Self::poll_output)
/// until it returns `None` and sleep until [`poll_timeout`](Self::poll_timeout).
#[derive(Debug)]
pub struct Engine {
    config: Config,
    inner: Inner,
    /// Multi-locks, made of the machine's locks.
    multis: Multis,
}

/// Runs `$body` with `$m` bound to the engine's machine, whichever backend it speaks: both
/// machines have the same methods (`command`, `reply`, `notice`, `timer`, `hold`, `base`).
macro_rules! with_machine {
    ($engine:expr, $m:ident => $body:expr) => {
        match &mut $engine.inner {
            Inner::Redis($m) => $body,
            Inner::Zk($m) => $body,
            Inner::Redlock($m) => $body,
        }
    };
}

impl Engine {
    /// A new engine at time `now`. On Redis its first output subscribes to its wake-up
    /// channel.
    pub fn new(config: Config, now: Instant) -> Result<Self, Error> {
        let inner = match &config.protocol {
            Protocol::Redis => Inner::Redis(redis::machine::Machine::new(&config, now)?),
            Protocol::ZooKeeper(settings) => {
                Inner::Zk(zk::machine::Machine::new(&config, settings, now)?)
            }
            Protocol::Redlock { nodes } => {
                Inner::Redlock(redlock::Machine::new(&config, *nodes, now)?)
            }
        };
        Ok(Self {
            config,
            inner,
            multis: Multis::default(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The pub/sub channel on which this engine's waiters are woken (Redis).
    pub fn wake_channel(&self) -> String {
        redis::wake_channel(self.config.client_id)
    }

    /// A snapshot of a held lock, `None` if it is not held.
    pub fn hold(&self, hold: HoldId) -> Option<HoldInfo> {
        match &self.inner {
            Inner::Redis(m) => m.hold(hold),
            Inner::Zk(m) => m.hold(hold),
            Inner::Redlock(m) => m.hold(hold),
        }
    }

    /// Feeds one input. Timers due at `now` run first, so a late reply can never revive a
    /// lock whose validity has already run out.
    pub fn handle_input(&mut self, now: Instant, input: Input) {
        self.handle_timeout(now);
        match input {
            Input::Command(cmd) => {
                let in_use = with_machine!(self, m => m.base_ref().in_use(cmd.op()));
                if let Some(cmd) = self.multis.command(cmd, in_use) {
                    with_machine!(self, m => crate::base::dispatch(m, cmd));
                }
                self.run_multi_commands();
            }
            Input::Reply { id, reply } => with_machine!(self, m => m.reply(id, reply)),
            Input::Notice(notice) => with_machine!(self, m => m.notice(notice)),
        }
    }

    /// Hands the multi-locks' member commands to the machine.
    fn run_multi_commands(&mut self) {
        while let Some(work) = self.multis.next_command() {
            match work {
                ToMachine::Command(cmd) => with_machine!(self, m => crate::base::dispatch(m, cmd)),
                ToMachine::Lapse(hold) => {
                    with_machine!(self, m => m.lose(hold.0, LostReason::Expired))
                }
            }
        }
    }

    /// Runs every timer due at `now`. Call it when [`poll_timeout`](Self::poll_timeout) has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        with_machine!(self, m => while let Some(timer) = m.base().due(now) {
            m.timer(timer);
        })
    }

    /// The next output, `None` when drained.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        loop {
            if let Some(event) = self.multis.next_event() {
                return Some(Output::Event(event));
            }
            match with_machine!(self, m => m.base().poll_output())? {
                Output::Event(event) if self.multis.claims(&event) => {
                    self.multis.event(event);
                    self.run_multi_commands();
                }
                out => return Some(out),
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next, `None` if no timer is set.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.inner {
            Inner::Redis(m) => m.base_ref().timers.next(),
            Inner::Zk(m) => m.base_ref().timers.next(),
            Inner::Redlock(m) => m.base_ref().timers.next(),
        }
    }
}
