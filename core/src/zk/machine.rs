//! The machine behind a ZooKeeper backend: Curator's lock recipe (sequential ephemeral nodes,
//! the lowest holds, each waiter watches its predecessor) with reentrancy counted here,
//! fencing by sequence number and a lease bounded by the session's latest confirmation. A
//! semaphore of N permits is the same recipe with the N lowest holding, each waiter watching
//! the N nodes just before its own. A read-write lock is Curator's too: a writer's node holds
//! when it is the lowest, a reader's when no writer's node is lower (but its own owner's:
//! downgrade); a writer watches its predecessor, a reader the nearest writer's node ahead.
//!
//! Validity: any answer the session gives to a request sent at `t` proves the session was
//! alive on the server after `t`, so it lives — and keeps our ephemeral nodes — until at
//! least `t + session timeout` on the server's clock. Every hold is valid locally until the
//! latest such `t` plus the session timeout minus drift; a heartbeat every third of the
//! timeout moves it on. A broken connection loses every hold at once (Curator's advice for
//! SUSPENDED), since the session may expire without us hearing of it.

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet};

use crate::base::{
    Base, Commands, InFlight, check_acquire, check_lease, refuse_upgrade, retry_delay, unpack,
};
use crate::config::Config;
use crate::status::HoldInfo;
use crate::error::Error;
use crate::owner::owner_token;
use crate::time::{Instant, drift};
use crate::timers::Timer;
use crate::types::{
    Acquire, Event, HoldId, Kind, LostReason, NotAcquired, Notice, Op, OpId, Primitive, Reply,
    RequestId, Response, Wait,
};
use crate::config::ZkSettings;
use crate::zk::{self, ZkOp, ZkReply};

#[derive(Debug)]
struct Tenure {
    name: String,
    owner: u64,
    /// The lock's directory node.
    dir: String,
    /// A lock, a permit of a semaphore, or a read or write hold.
    kind: Kind,
    /// A reader's own owner's write node (its name), which does not hold it off: downgrade.
    downgrade: Option<String>,
    token: String,
    max_hold: Option<Duration>,
    state: State,
}

#[derive(Debug)]
enum State {
    Pending(Pending),
    Held(Held),
}

#[derive(Debug)]
struct Pending {
    op: OpId,
    wait: Wait,
    node: Node,
    in_flight: bool,
    /// Nodes ahead of ours still to watch, set one after the other.
    to_watch: Vec<String>,
    /// A watch of ours fired while a request was under way: list the directory again once
    /// it is answered.
    stale: bool,
}

/// What we know of a pending tenure's contender node.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    /// Not created (or gone again).
    None,
    /// A create got no answer: the node may exist. Its name carries our token, so listing
    /// the directory finds it.
    Uncertain,
    Created {
        path: String,
        seq: u64,
    },
}

#[derive(Debug)]
struct Held {
    path: String,
    fencing_token: u64,
    count: u32,
}

/// A node of ours that must go.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Cleanup {
    Delete(String),
    /// Delete every child of `dir` created for `token` (after a create that got no answer).
    Sweep {
        dir: String,
        token: String,
    },
}

#[derive(Debug)]
pub(crate) enum Purpose {
    Parents {
        seq: u64,
    },
    Create {
        seq: u64,
    },
    Children {
        seq: u64,
    },
    Watch {
        seq: u64,
        path: String,
    },
    Release {
        op: OpId,
        hold: HoldId,
        path: String,
    },
    Extend {
        seq: u64,
        op: OpId,
    },
    Heartbeat,
    Cleanup(Cleanup),
    /// The command of this request has already ended (its hold was lost): the reply only
    /// confirms the session.
    Ended,
}

#[derive(Debug)]
pub(crate) struct Machine {
    base: Base<Purpose>,
    client_id: crate::ClientId,
    root: String,
    session_timeout: Duration,
    next_seq: u64,
    tenures: BTreeMap<u64, Tenure>,
    /// (kind, name, owner) → tenure, for reentrancy and for "already waiting" (permits have
    /// none).
    slots: BTreeMap<(Kind, String, u64), u64>,
    /// Pending acquire op → tenure, for cancel.
    acquires: BTreeMap<OpId, u64>,
    /// (Watched node ahead, the waiting tenure that watches it).
    watches: BTreeSet<(String, u64)>,
    /// Watches that fired before the reply that set them arrived.
    fired: BTreeSet<String>,
    /// Send time of the latest request the session answered.
    confirmed: Option<Instant>,
    /// Nodes to delete, and whether a request for each is under way.
    cleanup: BTreeMap<Cleanup, bool>,
}

impl Machine {
    pub(crate) fn new(config: &Config, zk: &ZkSettings, now: Instant) -> Result<Self, Error> {
        check_lease(config.request_timeout)?;
        if !config.lock_delay.is_zero() {
            return Err(Error::InvalidConfig(
                "lock-delay is a Redis feature: ZooKeeper deletes a dead holder's node with its \
                 session, and the next waiter cannot tell that from a release"
                    .into(),
            ));
        }
        check_lease(zk.session_timeout)?;
        zk::check_root(&zk.root)?;
        // ZooKeeper answers in order on one connection, and its client library fails what is
        // outstanding when the connection breaks (after two thirds of the session timeout
        // without a word from the server): a reply is never lost while the connection lives.
        // The engine's own timeout is only a backstop, so that a slow connection does not
        // turn every request into a retry that loads it further.
        let request_timeout = config.request_timeout.max(zk.session_timeout * 2);
        Ok(Self {
            base: Base::new(now, request_timeout),
            client_id: config.client_id,
            root: zk.root.clone(),
            session_timeout: zk.session_timeout,
            next_seq: 1,
            tenures: BTreeMap::new(),
            slots: BTreeMap::new(),
            acquires: BTreeMap::new(),
            watches: BTreeSet::new(),
            fired: BTreeSet::new(),
            confirmed: None,
            cleanup: BTreeMap::new(),
        })
    }

    /// Until when every hold is valid, from the session's latest confirmation.
    fn valid_until(&self) -> Option<Instant> {
        let st = self.session_timeout;
        self.confirmed.map(|c| c + st - drift(st))
    }

    fn holds(&self) -> Vec<u64> {
        self.tenures
            .iter()
            .filter(|(_, t)| matches!(t.state, State::Held(_)))
            .map(|(seq, _)| *seq)
            .collect()
    }

    // --- replies ---

    fn on_reply(&mut self, req: InFlight<Purpose>, reply: Result<ZkReply, Error>) {
        if reply.is_ok() {
            self.confirm(req.sent_at);
        }
        // A pending tenure has at most one request under way: whatever its answer, the next
        // step (or a retry, or a reconnect) may send again. Cleared here, once, so that no
        // reply arm can leave a waiter marked busy with nothing under way.
        if let Purpose::Parents { seq }
        | Purpose::Create { seq }
        | Purpose::Children { seq }
        | Purpose::Watch { seq, .. } = req.purpose
            && let Some(p) = self.pending_mut(seq)
        {
            p.in_flight = false;
        }
        match req.purpose {
            Purpose::Parents { seq } => match reply {
                Ok(ZkReply::Done) => self.create(seq),
                Ok(other) => self.malformed(seq, "create-parents", other),
                Err(e) => self.retry_or_fail(seq, e),
            },
            Purpose::Create { seq } => self.on_create(seq, reply),
            Purpose::Children { seq } => self.on_children(seq, reply),
            Purpose::Watch { seq, path } => self.on_watch(seq, path, reply),
            Purpose::Release { op, hold, path } => match reply {
                Ok(ZkReply::Done) => self.base.finish(Event::Released { op, hold, count: 0 }),
                Ok(ZkReply::NoNode) => self.base.finish(Event::Failed {
                    op,
                    error: Error::LockLost { hold },
                }),
                Ok(other) => self.base.finish(Event::Failed {
                    op,
                    error: Error::MalformedReply(format!("delete replied {other:?}")),
                }),
                Err(error) => {
                    // The node would keep the lock for as long as the session lives.
                    self.clean(Cleanup::Delete(path));
                    self.base.finish(Event::Failed { op, error });
                }
            },
            Purpose::Extend { seq, op } => {
                let hold = HoldId(seq);
                if self.hold(hold).is_none() {
                    let error = Error::LockLost { hold };
                    return self.base.finish(Event::Failed { op, error });
                }
                match reply {
                    Ok(ZkReply::Done) => {
                        let valid_until = self.valid_until().unwrap_or(req.sent_at);
                        self.base.finish(Event::Extended {
                            op,
                            hold,
                            valid_until,
                        });
                    }
                    Ok(ZkReply::NoNode) => {
                        self.lose(seq, LostReason::NotOwner);
                        self.base.finish(Event::Failed {
                            op,
                            error: Error::LockLost { hold },
                        });
                    }
                    Ok(other) => self.base.finish(Event::Failed {
                        op,
                        error: Error::MalformedReply(format!("exists replied {other:?}")),
                    }),
                    Err(error) => self.base.finish(Event::Failed { op, error }),
                }
            }
            // A failed heartbeat is not retried: the next one is a third of the session
            // timeout away, and several may be under way at once, so one stuck request
            // cannot starve the validity.
            Purpose::Heartbeat => {
                if let (Ok(_), Some(valid_until)) = (reply, self.valid_until()) {
                    for seq in self.holds() {
                        self.base.event(Event::Renewed {
                            hold: HoldId(seq),
                            valid_until,
                        });
                    }
                }
            }
            Purpose::Cleanup(c) => self.on_cleanup(c, reply),
            Purpose::Ended => {}
        }
    }

    fn on_create(&mut self, seq: u64, reply: Result<ZkReply, Error>) {
        let Some(t) = self.tenures.get_mut(&seq) else {
            // Abandoned while the create was under way.
            if let Ok(ZkReply::Created(path)) = reply {
                self.clean(Cleanup::Delete(path));
            }
            return;
        };
        let prefix = zk::node_prefix(&t.dir, &t.token, t.kind == Kind::Read);
        let State::Pending(p) = &mut t.state else {
            return;
        };
        match reply {
            Ok(ZkReply::Created(path)) => {
                let seq_no = path
                    .strip_prefix(&prefix)
                    .and_then(|_| zk::parse_child(path.rsplit('/').next().unwrap_or("")));
                match seq_no {
                    Some((_, n)) => {
                        p.node = Node::Created { path, seq: n };
                        self.children(seq);
                    }
                    None => {
                        self.clean(Cleanup::Delete(path.clone()));
                        self.malformed(seq, "create", ZkReply::Created(path));
                    }
                }
            }
            Ok(ZkReply::NoNode) => {
                let path = t.dir.clone();
                self.send_pending(seq, ZkOp::CreateParents { path }, Purpose::Parents { seq });
            }
            Ok(other) => self.malformed(seq, "create", other),
            Err(e) => {
                p.node = Node::Uncertain;
                self.retry_or_fail(seq, e);
            }
        }
    }

    fn on_children(&mut self, seq: u64, reply: Result<ZkReply, Error>) {
        let Some(t) = self.tenures.get_mut(&seq) else {
            return;
        };
        let State::Pending(p) = &mut t.state else {
            return;
        };
        let children = match reply {
            Ok(ZkReply::Children(children)) => children,
            Ok(ZkReply::NoNode) => {
                p.node = Node::None;
                return self.advance(seq);
            }
            Ok(other) => return self.malformed(seq, "children", other),
            Err(e) => return self.retry_or_fail(seq, e),
        };
        let dir = t.dir.clone();
        let queue = zk::queue(&children);
        let mine: Vec<(u64, &str)> = queue
            .iter()
            .copied()
            .filter(|(_, c)| zk::parse_child(c).is_some_and(|(token, _)| token == t.token))
            .collect();
        // Our node: the one we created, or after an unanswered create the first we find.
        let ours = match &p.node {
            Node::Created { seq: n, .. } => mine.iter().copied().find(|(s, _)| s == n),
            Node::Uncertain => mine.first().copied(),
            Node::None => None,
        };
        let strays: Vec<String> = mine
            .iter()
            .filter(|m| Some(**m) != ours)
            .map(|(_, c)| format!("{dir}/{c}"))
            .collect();
        let Some((n, child)) = ours else {
            // Never created, or gone (deleted by hand, or with an expired session): again.
            p.node = Node::None;
            for path in strays {
                self.clean(Cleanup::Delete(path));
            }
            return self.advance(seq);
        };
        let path = format!("{dir}/{child}");
        p.node = Node::Created {
            path: path.clone(),
            seq: n,
        };
        // A lock is held by the lowest node, a semaphore's permits by its N lowest: with N
        // or more nodes ahead, watch the N just before ours. Another node going changes
        // nothing for us: the N stay the ones just before ours, and as many are still ahead.
        // A reader counts only the writers' nodes ahead (but its own owner's), as a lock does.
        let permits = match t.kind {
            Kind::Semaphore { permits } => permits as usize,
            _ => 1,
        };
        let ahead: Vec<&str> = queue
            .iter()
            .take_while(|(s, _)| *s < n)
            .map(|(_, c)| *c)
            .filter(|c| {
                t.kind != Kind::Read || !(zk::is_reader(c) || t.downgrade.as_deref() == Some(*c))
            })
            .collect();
        let window = ahead.len().saturating_sub(permits);
        p.to_watch = ahead[window..]
            .iter()
            .rev()
            .map(|c| format!("{dir}/{c}"))
            .collect();
        p.stale = false;
        let (wait, full) = (p.wait, ahead.len() >= permits);
        for stray in strays {
            self.clean(Cleanup::Delete(stray));
        }
        if !full {
            self.held(seq, path, fencing_token(n));
        } else if wait == Wait::No {
            let op = self.pending_op(seq);
            let event = Event::NotAcquired {
                op,
                reason: NotAcquired::Busy,
            };
            self.abandon(seq, event, true);
        } else {
            self.watch_next(seq);
        }
    }

    /// Sets the next watch on a node ahead of a waiter's; with all set, it waits for one to
    /// fire.
    fn watch_next(&mut self, seq: u64) {
        let Some(Tenure {
            state: State::Pending(p),
            ..
        }) = self.tenures.get_mut(&seq)
        else {
            return;
        };
        if let Some(path) = p.to_watch.pop() {
            self.send_pending(
                seq,
                ZkOp::Watch { path: path.clone() },
                Purpose::Watch { seq, path },
            );
        }
    }

    fn on_watch(&mut self, seq: u64, path: String, reply: Result<ZkReply, Error>) {
        let fired = self.fired.remove(&path);
        let Some(Tenure {
            state: State::Pending(p),
            ..
        }) = self.tenures.get_mut(&seq)
        else {
            return;
        };
        let stale = std::mem::take(&mut p.stale);
        match reply {
            Ok(ZkReply::Done) if !fired && !stale => {
                self.watches.insert((path, seq));
                self.watch_next(seq);
            }
            // A node ahead is gone (or went while we set a watch): look again.
            Ok(ZkReply::Done | ZkReply::NoNode) => self.children(seq),
            Ok(other) => self.malformed(seq, "watch", other),
            Err(e) => self.retry_or_fail(seq, e),
        }
    }

    fn on_cleanup(&mut self, c: Cleanup, reply: Result<ZkReply, Error>) {
        if let Some(in_flight) = self.cleanup.get_mut(&c) {
            *in_flight = false;
        }
        match (&c, reply) {
            (Cleanup::Sweep { dir, token }, Ok(ZkReply::Children(children))) => {
                let doomed: Vec<String> = children
                    .iter()
                    .filter(|child| zk::parse_child(child).is_some_and(|(t, _)| t == token))
                    .map(|child| format!("{dir}/{child}"))
                    .collect();
                self.cleanup.remove(&c);
                for path in doomed {
                    self.clean(Cleanup::Delete(path));
                }
            }
            (_, Ok(_)) => {
                self.cleanup.remove(&c);
            }
            (_, Err(_)) => {
                let at = self.base.now + self.retry_delay();
                self.base.timers.set(Timer::Cleanup, at);
            }
        }
    }

    // --- notices ---

    pub(crate) fn notice(&mut self, notice: Notice) {
        match notice {
            Notice::Connected => {
                if self.base.closed {
                    return;
                }
                // Requests under way when the connection broke may never be answered.
                for c in self.cleanup.keys().cloned().collect::<Vec<_>>() {
                    self.send_cleanup(c);
                }
                let pending: Vec<u64> = self
                    .tenures
                    .iter()
                    .filter(|(_, t)| matches!(&t.state, State::Pending(p) if !p.in_flight))
                    .map(|(seq, _)| *seq)
                    .collect();
                for seq in pending {
                    self.advance(seq);
                }
            }
            Notice::Disconnected => {
                self.confirmed = None;
                for seq in self.holds() {
                    self.lose(seq, LostReason::Disconnected);
                }
            }
            Notice::SessionExpired => {
                // Our nodes went with the session. Deletes still run, for a node created on
                // the next session by a request that overtook this notice.
                self.confirmed = None;
                self.watches.clear();
                self.fired.clear();
                for seq in self.tenures.keys().copied().collect::<Vec<_>>() {
                    match self.tenures.get(&seq).map(|t| &t.state) {
                        Some(State::Held(_)) => self.lose(seq, LostReason::SessionExpired),
                        // A waiter lost its place in line with its node. An acquire that
                        // has no node yet goes on with the next session.
                        Some(State::Pending(p)) if p.node == Node::None && !p.in_flight => {}
                        Some(State::Pending(p)) => {
                            let event = Event::Failed {
                                op: p.op,
                                error: Error::SessionExpired,
                            };
                            self.abandon(seq, event, true);
                        }
                        None => {}
                    }
                }
            }
            Notice::Watch { path } => {
                let watchers: Vec<u64> = self
                    .watches
                    .range((path.clone(), 0)..=(path.clone(), u64::MAX))
                    .map(|(_, seq)| *seq)
                    .collect();
                for seq in &watchers {
                    self.watches.remove(&(path.clone(), *seq));
                    // A waiter setting its next watch looks again once that is answered.
                    match self.tenures.get_mut(seq).map(|t| &mut t.state) {
                        Some(State::Pending(p)) if p.in_flight => p.stale = true,
                        _ => self.children(*seq),
                    }
                }
                if watchers.is_empty()
                    && self
                        .tenures
                        .values()
                        .any(|t| matches!(&t.state, State::Pending(p) if p.in_flight))
                {
                    self.fired.insert(path);
                }
            }
            Notice::Closed => self.close(),
            Notice::Message { .. } => {}
        }
    }

    fn close(&mut self) {
        self.base.closed = true;
        for seq in self.tenures.keys().copied().collect::<Vec<_>>() {
            match self.tenures.get(&seq).map(|t| &t.state) {
                Some(State::Held(_)) => self.lose(seq, LostReason::Closed),
                Some(State::Pending(p)) => {
                    let event = Event::Failed {
                        op: p.op,
                        error: Error::Closed,
                    };
                    self.abandon(seq, event, false);
                }
                None => {}
            }
        }
        for req in self.base.close() {
            if let Purpose::Release { op, .. } | Purpose::Extend { op, .. } = req.purpose {
                self.base.finish(Event::Failed {
                    op,
                    error: Error::Closed,
                });
            }
        }
    }

    // --- timers ---

    pub(crate) fn timer(&mut self, timer: Timer) {
        match timer {
            Timer::Request(id) => {
                if let Some(req) = self.base.requests.remove(&RequestId(id)) {
                    self.on_reply(req, Err(Error::Timeout));
                }
            }
            Timer::Refresh(seq) => {
                if let Some(Tenure {
                    state: State::Pending(p),
                    ..
                }) = self.tenures.get(&seq)
                    && !p.in_flight
                {
                    self.advance(seq);
                }
            }
            Timer::WaitDeadline(seq) => {
                if self.acquires.values().any(|s| *s == seq) {
                    let op = self.pending_op(seq);
                    let event = Event::NotAcquired {
                        op,
                        reason: NotAcquired::TimedOut,
                    };
                    self.abandon(seq, event, true);
                }
            }
            Timer::MaxHold(seq) => self.lose(seq, LostReason::MaxHold),
            Timer::Session => {
                for seq in self.holds() {
                    self.lose(seq, LostReason::Expired);
                }
            }
            Timer::Heartbeat => {
                if !self.holds().is_empty() {
                    let path = self.root.clone();
                    self.send(ZkOp::Exists { path }, Purpose::Heartbeat);
                    let at = self.base.now + self.session_timeout / 3;
                    self.base.timers.set(Timer::Heartbeat, at);
                }
            }
            Timer::Cleanup => self.retry_cleanup(),
            Timer::Renew(_) | Timer::Expire(_) | Timer::Subscribe => {}
        }
    }

    // --- state changes ---

    /// The next step of a pending tenure, from what we know of its node.
    fn advance(&mut self, seq: u64) {
        let Some(Tenure {
            state: State::Pending(p),
            ..
        }) = self.tenures.get(&seq)
        else {
            return;
        };
        match p.node {
            Node::None => self.create(seq),
            Node::Uncertain | Node::Created { .. } => self.children(seq),
        }
    }

    fn create(&mut self, seq: u64) {
        let Some(t) = self.tenures.get(&seq) else {
            return;
        };
        let prefix = zk::node_prefix(&t.dir, &t.token, t.kind == Kind::Read);
        self.send_pending(
            seq,
            ZkOp::CreateSequential { prefix },
            Purpose::Create { seq },
        );
    }

    fn children(&mut self, seq: u64) {
        let Some(t) = self.tenures.get(&seq) else {
            return;
        };
        let path = t.dir.clone();
        self.send_pending(seq, ZkOp::Children { path }, Purpose::Children { seq });
    }

    fn send_pending(&mut self, seq: u64, op: ZkOp, purpose: Purpose) {
        if let Some(Tenure {
            state: State::Pending(p),
            ..
        }) = self.tenures.get_mut(&seq)
        {
            p.in_flight = true;
            self.base.timers.clear(Timer::Refresh(seq));
            self.send(op, purpose);
        }
    }

    /// A request for pending tenure `seq` failed: a waiter tries again soon, a try fails.
    fn retry_or_fail(&mut self, seq: u64, error: Error) {
        let Some(Tenure {
            state: State::Pending(p),
            ..
        }) = self.tenures.get(&seq)
        else {
            return;
        };
        if p.wait == Wait::No {
            let event = Event::Failed { op: p.op, error };
            self.abandon(seq, event, true);
        } else {
            let at = self.base.now + self.retry_delay();
            self.base.timers.set(Timer::Refresh(seq), at);
        }
    }

    fn malformed(&mut self, seq: u64, what: &str, reply: ZkReply) {
        let op = self.pending_op(seq);
        let error = Error::MalformedReply(format!("{what} replied {reply:?}"));
        self.abandon(seq, Event::Failed { op, error }, true);
    }

    fn pending_mut(&mut self, seq: u64) -> Option<&mut Pending> {
        match self.tenures.get_mut(&seq).map(|t| &mut t.state) {
            Some(State::Pending(p)) => Some(p),
            _ => None,
        }
    }

    fn pending_op(&self, seq: u64) -> OpId {
        match self.tenures.get(&seq).map(|t| &t.state) {
            Some(State::Pending(p)) => p.op,
            _ => OpId(u64::MAX),
        }
    }

    /// A pending tenure becomes held, if the session's latest confirmation leaves it time.
    fn held(&mut self, seq: u64, path: String, fencing_token: u64) {
        if self.valid_until().is_none_or(|v| v <= self.base.now) {
            // The answer came too late to rely on: look again.
            return self.retry_or_fail(seq, Error::Timeout);
        }
        let Some(t) = self.tenures.get_mut(&seq) else {
            return;
        };
        let State::Pending(p) = &t.state else { return };
        let op = p.op;
        t.state = State::Held(Held {
            path,
            fencing_token,
            count: 1,
        });
        let max_hold = t.max_hold;
        self.acquires.remove(&op);
        self.base.timers.clear(Timer::WaitDeadline(seq));
        self.base.timers.clear(Timer::Refresh(seq));
        if let Some(max) = max_hold {
            self.base
                .timers
                .set(Timer::MaxHold(seq), self.base.now + max);
        }
        let valid_until = self.valid_until().unwrap_or(self.base.now);
        self.base.timers.set(Timer::Session, valid_until);
        if !self.base.timers.is_set(Timer::Heartbeat) {
            let at = self.base.now + self.session_timeout / 3;
            self.base.timers.set(Timer::Heartbeat, at);
        }
        self.base.finish(Event::Acquired {
            op,
            hold: HoldId(seq),
            fencing_token,
            valid_until,
            count: 1,
        });
    }

    /// The session answered a request sent at `sent`.
    fn confirm(&mut self, sent: Instant) {
        if self.confirmed.is_some_and(|c| c >= sent) {
            return;
        }
        self.confirmed = Some(sent);
        if self.holds().is_empty() {
            return;
        }
        if let Some(valid_until) = self.valid_until() {
            self.base.timers.set(Timer::Session, valid_until);
        }
    }

    /// A held tenure is gone. A node the session may still keep is deleted.
    pub(crate) fn lose(&mut self, seq: u64, reason: LostReason) {
        if self.hold(HoldId(seq)).is_none() {
            return;
        }
        let Some(Tenure {
            state: State::Held(h),
            ..
        }) = self.forget(seq)
        else {
            return;
        };
        // Only a node the server says is gone needs no delete.
        if reason != LostReason::NotOwner && !self.base.closed {
            self.clean(Cleanup::Delete(h.path));
        }
        self.base.event(Event::Lost {
            hold: HoldId(seq),
            reason,
        });
        // Extends still under way on it end now; their replies only confirm the session.
        let lost = Error::LockLost { hold: HoldId(seq) };
        self.base.fail_in_flight(&lost, |purpose| match *purpose {
            Purpose::Extend { seq: s, op } if s == seq => {
                *purpose = Purpose::Ended;
                Some(op)
            }
            _ => None,
        });
    }

    /// A pending acquire ends with `event`; with `cleanup`, its node (if any) goes.
    fn abandon(&mut self, seq: u64, event: Event, cleanup: bool) {
        let Some(t) = self.forget(seq) else { return };
        if let (State::Pending(p), true) = (&t.state, cleanup && !self.base.closed) {
            match &p.node {
                Node::Created { path, .. } => self.clean(Cleanup::Delete(path.clone())),
                // A create that got no answer, or one still under way: the sweep's listing
                // runs after it on the session's connection and finds the node if it exists.
                Node::Uncertain | Node::None if p.node == Node::Uncertain || p.in_flight => self
                    .clean(Cleanup::Sweep {
                        dir: t.dir.clone(),
                        token: t.token.clone(),
                    }),
                Node::Uncertain | Node::None => {}
            }
        }
        self.base.finish(event);
    }

    /// Removes a tenure and everything that points at it.
    fn forget(&mut self, seq: u64) -> Option<Tenure> {
        let t = self.tenures.remove(&seq)?;
        if let Some(slot) = slot(&t) {
            self.slots.remove(&slot);
        }
        if let State::Pending(p) = &t.state {
            self.acquires.remove(&p.op);
        }
        self.watches.retain(|(_, s)| *s != seq);
        for timer in [Timer::MaxHold, Timer::WaitDeadline, Timer::Refresh] {
            self.base.timers.clear(timer(seq));
        }
        if self.holds().is_empty() {
            self.base.timers.clear(Timer::Session);
            self.base.timers.clear(Timer::Heartbeat);
        }
        Some(t)
    }

    fn clean(&mut self, c: Cleanup) {
        if !self.cleanup.contains_key(&c) {
            self.send_cleanup(c);
        }
    }

    /// Sends every cleanup that is not under way.
    fn retry_cleanup(&mut self) {
        let idle: Vec<Cleanup> = self
            .cleanup
            .iter()
            .filter(|(_, in_flight)| !**in_flight)
            .map(|(c, _)| c.clone())
            .collect();
        for c in idle {
            self.send_cleanup(c);
        }
    }

    fn send_cleanup(&mut self, c: Cleanup) {
        self.cleanup.insert(c.clone(), true);
        let op = match &c {
            Cleanup::Delete(path) => ZkOp::Delete { path: path.clone() },
            Cleanup::Sweep { dir, .. } => ZkOp::Children { path: dir.clone() },
        };
        self.send(op, Purpose::Cleanup(c));
    }

    fn send(&mut self, op: ZkOp, purpose: Purpose) {
        self.base.send(Op::Zk(op), purpose);
    }

    fn retry_delay(&self) -> Duration {
        retry_delay(self.session_timeout)
    }
}

/// Where a reentrant tenure is found; a permit has no place (every acquire is a new one).
fn slot(t: &Tenure) -> Option<(Kind, String, u64)> {
    (!matches!(t.kind, Kind::Semaphore { .. })).then(|| (t.kind, t.name.clone(), t.owner))
}

/// A holder's fencing token: its node's sequence number + 1, so that tokens start at 1 as on
/// Redis and 0 never is one.
pub(crate) fn fencing_token(sequence: u64) -> u64 {
    sequence + 1
}

/// The commands, as [`crate::base::dispatch`] hands them over.
impl Commands for Machine {
    type Purpose = Purpose;

    fn base(&mut self) -> &mut Base<Purpose> {
        &mut self.base
    }

    fn acquire(&mut self, a: Acquire) -> Result<(), Error> {
        // The lease is the session timeout; a lease is still checked, so that a call that
        // is wrong on Redis is wrong here too.
        let (_, max_hold) = check_acquire(
            &a,
            "ZooKeeper",
            &[Primitive::Lock, Primitive::Semaphore, Primitive::RwLock],
        )?;
        let has = |kind| self.slots.contains_key(&(kind, a.name.clone(), a.owner));
        refuse_upgrade(&a, has(Kind::Read), has(Kind::Write))?;
        if !a.fair {
            // Waiters are sequential nodes, served in order: there is nothing to barge past.
            return Err(Error::InvalidArgument(
                "ZooKeeper locks are always fair (waiters are served in order)".into(),
            ));
        }
        // A lock's or read-write hold's owner reenters its tenure; every permit is a tenure
        // of its own.
        if let Some(&seq) = self.slots.get(&(a.kind, a.name.clone(), a.owner)) {
            let valid_until = self.valid_until();
            return match self.tenures.get_mut(&seq).map(|t| &mut t.state) {
                Some(State::Pending(p)) => Err(Error::AlreadyWaiting { op: p.op }),
                Some(State::Held(h)) => {
                    h.count += 1;
                    let event = Event::Acquired {
                        op: a.op,
                        hold: HoldId(seq),
                        fencing_token: h.fencing_token,
                        valid_until: valid_until.unwrap_or(self.base.now),
                        count: h.count,
                    };
                    self.base.finish(event);
                    Ok(())
                }
                None => Err(Error::NotHeld { hold: HoldId(seq) }),
            };
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let wait = match a.wait {
            Wait::Until(t) if t <= self.base.now => Wait::No,
            w => w,
        };
        // A read beside the same owner's write hold: downgrade.
        let downgrade = match a.kind {
            Kind::Read => self
                .slots
                .get(&(Kind::Write, a.name.clone(), a.owner))
                .and_then(|seq| match self.tenures.get(seq).map(|t| &t.state) {
                    Some(State::Held(h)) => h.path.rsplit('/').next().map(str::to_owned),
                    _ => None,
                }),
            _ => None,
        };
        let tenure = Tenure {
            dir: match a.kind {
                Kind::Mutex => zk::lock_dir(&self.root, &a.name),
                Kind::Semaphore { .. } => zk::semaphore_dir(&self.root, &a.name),
                Kind::Read | Kind::Write => zk::rw_dir(&self.root, &a.name),
            },
            kind: a.kind,
            downgrade,
            token: owner_token(self.client_id, seq),
            name: a.name.clone(),
            owner: a.owner,
            max_hold,
            state: State::Pending(Pending {
                op: a.op,
                wait,
                node: Node::None,
                in_flight: false,
                to_watch: Vec::new(),
                stale: false,
            }),
        };
        if let Some(slot) = slot(&tenure) {
            self.slots.insert(slot, seq);
        }
        self.tenures.insert(seq, tenure);
        self.acquires.insert(a.op, seq);
        if let Wait::Until(deadline) = wait {
            self.base.timers.set(Timer::WaitDeadline(seq), deadline);
        }
        self.advance(seq);
        Ok(())
    }

    fn release(&mut self, op: OpId, hold: HoldId) -> Result<(), Error> {
        let Some(Tenure {
            state: State::Held(h),
            ..
        }) = self.tenures.get_mut(&hold.0)
        else {
            return Err(Error::NotHeld { hold });
        };
        h.count -= 1;
        if h.count > 0 {
            let count = h.count;
            self.base.finish(Event::Released { op, hold, count });
            return Ok(());
        }
        // The application stops relying on the lock now, whatever the reply says.
        let Some(Tenure {
            state: State::Held(h),
            ..
        }) = self.forget(hold.0)
        else {
            return Err(Error::NotHeld { hold });
        };
        let path = h.path;
        self.send(
            ZkOp::Delete { path: path.clone() },
            Purpose::Release { op, hold, path },
        );
        Ok(())
    }

    /// Confirms that the node is still ours; the lease stays the session timeout.
    fn extend(&mut self, op: OpId, hold: HoldId, lease: Duration) -> Result<(), Error> {
        check_lease(lease)?;
        let Some(Tenure {
            state: State::Held(h),
            ..
        }) = self.tenures.get(&hold.0)
        else {
            return Err(Error::NotHeld { hold });
        };
        let path = h.path.clone();
        self.send(ZkOp::Exists { path }, Purpose::Extend { seq: hold.0, op });
        Ok(())
    }

    fn cancel(&mut self, op: OpId) {
        if let Some(&seq) = self.acquires.get(&op) {
            let event = Event::NotAcquired {
                op,
                reason: NotAcquired::Cancelled,
            };
            self.abandon(seq, event, true);
        }
    }
}

impl Machine {
    pub(crate) fn base(&mut self) -> &mut Base<Purpose> {
        &mut self.base
    }

    pub(crate) fn base_ref(&self) -> &Base<Purpose> {
        &self.base
    }

    pub(crate) fn hold(&self, hold: HoldId) -> Option<HoldInfo> {
        let t = self.tenures.get(&hold.0)?;
        let State::Held(h) = &t.state else {
            return None;
        };
        Some(HoldInfo {
            name: t.name.clone(),
            owner: t.owner,
            fencing_token: h.fencing_token,
            count: h.count,
            lease: self.session_timeout,
            valid_until: self.valid_until().unwrap_or(self.base.now),
        })
    }

    pub(crate) fn reply(&mut self, id: RequestId, reply: Reply) {
        if let Some(req) = self.base.answered(id) {
            let reply = unpack(reply, "ZooKeeper", |r| match r {
                Response::Zk(v) => Ok(v),
                other => Err(other),
            });
            self.on_reply(req, reply);
        }
    }
}
