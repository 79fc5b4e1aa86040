//! The lock engine: one sans-IO state machine per backend protocol behind one interface.

use crate::base::unpack;
use crate::config::{Config, Protocol};
use crate::error::Error;
use crate::lock::Machine;
use crate::multi::{Multis, ToMachine};
use crate::redis::machine::{Lua, Redis};
use crate::redisson::machine::Redisson;
use crate::redlock::machine::Redlock;
use crate::sql::SqlSettings;
use crate::stats::{Observation, Stats};
use crate::status::{HoldInfo, LockStatus};
use crate::time::Instant;
use crate::types::{HoldId, Input, LostReason, Op, Output, Reply, Response};
use crate::zk::machine::Zk;
use crate::{redis, redisson, sql, zk};

impl Protocol {
    /// Refuses an election where the protocol offers none, before anything is sent: one
    /// Redis (and Redis Cluster, and `memory://`), ZooKeeper and SQL offer them.
    pub fn check_elections(&self) -> Result<(), Error> {
        Err(crate::lock::no_elections(match self {
            Protocol::Redis | Protocol::ZooKeeper(_) | Protocol::Sql(_) => return Ok(()),
            Protocol::Redisson => "the Redisson-compatible layout",
            Protocol::Redlock { .. } => "Redlock",
        }))
    }

    /// Checks a lock name before anything is sent: its length, and that the server can store
    /// it (PostgreSQL's text holds no NUL character).
    pub fn check_name(&self, name: &str) -> Result<(), Error> {
        crate::check_name(name)?;
        match self {
            Protocol::Sql(settings) => sql::check_name(settings.dialect, name),
            _ => Ok(()),
        }
    }

    /// Checks a leader's value before anything is sent: its length, and that the server can
    /// store it (PostgreSQL's text holds no NUL character).
    pub fn check_value(&self, value: &str) -> Result<(), Error> {
        crate::check_value(value)?;
        match self {
            Protocol::Sql(settings) => sql::check_text(settings.dialect, "a leader's value", value),
            _ => Ok(()),
        }
    }

    /// The read-only requests that show who holds lock `name` and who waits: one, or one per
    /// node on Redlock. Answer each with [`Protocol::parse_status`]. Checks the name first.
    pub fn status_requests(&self, name: &str) -> Result<Vec<Op>, Error> {
        self.check_name(name)?;
        Ok(match self {
            Protocol::Redis => vec![Op::Redis(redis::status(redis::LockKeys::new(name)))],
            Protocol::Redisson => vec![Op::Redis(redisson::status(&redisson::Keys::new(name)))],
            Protocol::ZooKeeper(zk) => vec![Op::Zk(zk::ZkOp::Children {
                path: zk::lock_dir(&zk.root, name),
            })],
            Protocol::Sql(settings) => vec![Op::Sql(settings.status(name))],
            Protocol::Redlock { nodes } => {
                let op = redis::status(redis::LockKeys::new(name));
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
            Response::Redis(value) if *self == Protocol::Redisson => redisson::parse_status(&value),
            Response::Redis(value) if !matches!(self, Protocol::ZooKeeper(_)) => {
                redis::parse_status(&value)
            }
            Response::Zk(zk::ZkReply::Children(children)) => Ok(zk::status(&children)),
            Response::Zk(zk::ZkReply::NoNode) => Ok(zk::status(&[])),
            Response::Sql(values) if matches!(self, Protocol::Sql(_)) => sql::parse_status(&values),
            other => Err(Error::MalformedReply(format!("status replied {other:?}"))),
        }
    }
}

#[derive(Clone, Debug)]
enum Inner {
    Redis(Machine<Redis>),
    Redisson(Machine<Redisson>),
    Zk(Machine<Zk>),
    Redlock(Machine<Redlock>),
    Sql(Machine<Redis<SqlSettings>>),
}

/// What one [`Engine::step`] gives back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    /// Every output that followed the event, in order.
    pub outputs: Vec<Output>,
    /// When to step again with no input (the timers); `None` if no timer is set.
    pub timeout: Option<Instant>,
}

/// The sans-IO lock engine.
///
/// Feed it with [`handle_input`](Self::handle_input) and
/// [`handle_timeout`](Self::handle_timeout), then drain [`poll_output`](Self::poll_output)
/// until it returns `None` and sleep until [`poll_timeout`](Self::poll_timeout) — or do all
/// of that for one event with [`step`](Self::step).
#[derive(Clone, Debug)]
pub struct Engine {
    config: Config,
    inner: Inner,
    /// Multi-locks, made of the machine's locks.
    multis: Multis,
}

/// Runs `$body` with `$m` bound to the engine's machine, whichever backend it speaks: each is
/// a [`Machine`] of the one lock lifecycle.
macro_rules! with_machine {
    ($engine:expr, $m:ident => $body:expr) => {
        match &$engine.inner {
            Inner::Redis($m) => $body,
            Inner::Redisson($m) => $body,
            Inner::Zk($m) => $body,
            Inner::Redlock($m) => $body,
            Inner::Sql($m) => $body,
        }
    };
    (mut $engine:expr, $m:ident => $body:expr) => {
        match &mut $engine.inner {
            Inner::Redis($m) => $body,
            Inner::Redisson($m) => $body,
            Inner::Zk($m) => $body,
            Inner::Redlock($m) => $body,
            Inner::Sql($m) => $body,
        }
    };
}

impl Engine {
    /// A new engine at time `now`. On Redis and SQL its first output subscribes to its
    /// wake-up channel.
    pub fn new(config: Config, now: Instant) -> Result<Self, Error> {
        let inner = match &config.protocol {
            Protocol::Redis => Inner::Redis(Redis::machine(&config, Lua, now)?),
            Protocol::Redisson => Inner::Redisson(Redisson::machine(&config, now)?),
            Protocol::Sql(settings) => {
                settings.check()?;
                let config = Config {
                    max_batch: settings.max_batch(config.max_batch),
                    ..config.clone()
                };
                Inner::Sql(Redis::machine(&config, settings.clone(), now)?)
            }
            Protocol::ZooKeeper(settings) => Inner::Zk(Zk::machine(&config, settings, now)?),
            Protocol::Redlock { nodes } => Inner::Redlock(Redlock::machine(&config, *nodes, now)?),
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

    /// The channel on which this engine's waiters are woken (Redis pub/sub, PostgreSQL
    /// `LISTEN`).
    pub fn wake_channel(&self) -> String {
        redis::wake_channel(self.config.client_id)
    }

    /// A snapshot of a held lock, `None` if it is not held.
    pub fn hold(&self, hold: HoldId) -> Option<HoldInfo> {
        with_machine!(self, m => m.hold(hold))
    }

    /// What the engine has counted about its locks, per name and kind, with the holds and
    /// waiters of now ([`Stats`]).
    pub fn stats(&self) -> Stats {
        with_machine!(self, m => m.stats())
    }

    /// From now on (`on`), each thing [`stats`](Self::stats) counts is also handed out one by
    /// one by [`poll_observation`](Self::poll_observation), for a host that feeds a metrics
    /// system event by event (the `dlock` crate's `metrics` feature). Off by default; at most
    /// [`MAX_OBSERVATIONS`](crate::MAX_OBSERVATIONS) wait, the oldest going first.
    pub fn keep_observations(&mut self, on: bool) {
        with_machine!(mut self, m => m.keep_observations(on))
    }

    /// The next observation kept since the last call, `None` when drained (or not kept).
    pub fn poll_observation(&mut self) -> Option<Observation> {
        with_machine!(mut self, m => m.poll_observation())
    }

    /// Until when a held lock or multi-lock is valid, as the engine knows it now (`None` if it
    /// is not held). ZooKeeper moves every hold's validity on with each answer of its session
    /// and announces it only with the heartbeat's [`Event::Renewed`](crate::Event::Renewed); a multi-lock is valid
    /// until its earliest member is.
    pub fn valid_until(&self, hold: HoldId) -> Option<Instant> {
        if let Some(members) = self.multis.members_of(hold) {
            return members
                .map(|m| self.hold(m).map(|h| h.valid_until))
                .min()
                .flatten();
        }
        self.hold(hold).map(|h| h.valid_until)
    }

    /// Feeds one input. Timers due at `now` run first, so a late reply can never revive a
    /// lock whose validity has already run out.
    pub fn handle_input(&mut self, now: Instant, input: Input) {
        self.handle_timeout(now);
        match input {
            Input::Command(cmd) => {
                let in_use = with_machine!(self, m => m.base_ref().in_use(cmd.op()));
                if let Some(cmd) = self.multis.command(cmd, in_use) {
                    with_machine!(mut self, m => m.command(cmd));
                }
                self.run_multi_commands();
            }
            Input::Reply { id, reply } => with_machine!(mut self, m => m.reply(id, reply)),
            Input::Notice(notice) => with_machine!(mut self, m => m.notice(notice)),
        }
    }

    /// Hands the multi-locks' member commands to the machine.
    fn run_multi_commands(&mut self) {
        while let Some(work) = self.multis.next_command() {
            match work {
                ToMachine::Command(cmd) => with_machine!(mut self, m => m.command(cmd)),
                ToMachine::Lapse(hold) => {
                    with_machine!(mut self, m => m.lose(hold.0, LostReason::Expired))
                }
            }
        }
    }

    /// Runs every timer due at `now`. Call it when [`poll_timeout`](Self::poll_timeout) has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        with_machine!(mut self, m => while let Some(timer) = m.base().due(now) {
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
            match with_machine!(mut self, m => m.base().poll_output())? {
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
        with_machine!(self, m => m.base_ref().next_deadline())
    }

    /// One event in one call: [`handle_input`](Self::handle_input) (or, with `None`,
    /// [`handle_timeout`](Self::handle_timeout)), then every output and the next deadline —
    /// for a host that pays per call into the engine (a Wasm component's boundary).
    pub fn step(&mut self, now: Instant, input: Option<Input>) -> Step {
        let mut outputs = Vec::new();
        let timeout = self.step_into(now, input, &mut outputs);
        Step { outputs, timeout }
    }

    /// [`step`](Self::step) into a buffer of the caller's: the outputs are appended to
    /// `outputs`, and the next deadline is returned. A host that steps on every reply keeps
    /// one buffer, rather than a new list per step.
    pub fn step_into(
        &mut self,
        now: Instant,
        input: Option<Input>,
        outputs: &mut impl Extend<Output>,
    ) -> Option<Instant> {
        match input {
            Some(input) => self.handle_input(now, input),
            None => self.handle_timeout(now),
        }
        outputs.extend(std::iter::from_fn(|| self.poll_output()));
        self.poll_timeout()
    }
}
