//! The ZooKeeper backend, as a strategy of the lock lifecycle ([`crate::lock`]): Curator's
//! lock recipe (sequential ephemeral nodes, the lowest holds, each waiter watches its
//! predecessor) with reentrancy counted by the lifecycle, fencing by sequence number and a
//! lease bounded by the session's latest confirmation. A semaphore of N permits is Curator's
//! `InterProcessSemaphoreV2`: the lock recipe on its gate directory, whose holder adds a lease
//! node and holds a permit once the leases directory has at most N children (its own
//! included), watching N of the others until then; the token is the gate node's. A
//! read-write lock is Curator's too, with its node names: a writer's node holds when it is the
//! lowest, a reader's when no writer's node is lower; a writer watches its predecessor, a
//! reader the nearest writer's node ahead. A downgrade's read node takes its write node's
//! sequence number, so that no writer queued since comes between them.
//!
//! Validity: any answer the session gives to a request sent at `t` proves the session was
//! alive on the server after `t`, so it lives — and keeps our ephemeral nodes — until at
//! least `t + session timeout` on the server's clock. Every hold is valid locally until the
//! latest such `t` plus the session timeout minus drift; a heartbeat every third of the
//! timeout moves it on. A broken connection loses every hold at once (Curator's advice for
//! SUSPENDED), since the session may expire without us hearing of it.

mod election;

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet};

use crate::base::{InFlight, check_lease, retry_delay};
use crate::config::{Config, ZkSettings};
use crate::error::Error;
use crate::ids::ClientId;
use crate::lock::tenures::{Held, State, Tenure};
use crate::lock::{Backend, Lifecycle, Machine, valid_until};
use crate::owner::{OwnerToken, owner_token};
use crate::plant::{self, Plant};
use crate::time::{Instant, drift};
use crate::types::{
    Acquire, Event, HoldId, Kind, LostReason, NotAcquired, Notice, Op, OpId, Response, Wait,
};
use crate::zk::{self, ZkOp, ZkReply};

/// Where a ZooKeeper tenure lives.
#[derive(Clone, Debug)]
pub(crate) struct Dir {
    /// The lock's directory node.
    dir: String,
    /// A downgrade's write node: the name of the held write node of a reader's own owner,
    /// whose sequence number the read node takes.
    downgrade: Option<String>,
    /// A semaphore's leases directory; `dir` is then its gate's.
    leases: Option<String>,
}

/// A pending acquire: what we know of its contender node, where its requests stand, and the
/// nodes ahead of it still to watch, set one after the other.
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    node: Node,
    step: Step,
    to_watch: Vec<String>,
    /// A semaphore's gate node once it holds (path, sequence number): `node` is then the
    /// lease node.
    gate: Option<(String, u64)>,
}

/// A pending acquire has at most one request under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// None: it waits for a watch to fire, or for its retry.
    Idle,
    /// One is; `stale`: a watch of ours fired meanwhile, so a watch being set is moot and the
    /// directory is listed again once it is answered.
    Asking { stale: bool },
}

impl Pending {
    fn asking(&self) -> bool {
        self.step != Step::Idle
    }
}

/// The directory where a pending tenure's node is (or is to be): a semaphore's leases once
/// its gate holds, else the tenure's own.
fn node_dir<'t>(t: &'t Tenure<Zk>, p: &Pending) -> &'t str {
    match (&t.data.leases, &p.gate) {
        (Some(leases), Some(_)) => leases,
        _ => &t.data.dir,
    }
}

/// Pending tenure `seq`, and where its acquire stands.
fn pending(life: &Life, seq: u64) -> Option<(&Tenure<Zk>, &Pending)> {
    let t = life.tenures.get(seq)?;
    match &t.state {
        State::Pending(w) => Some((t, &w.state)),
        State::Held(_) => None,
    }
}

/// The path prefix of a pending tenure's next node (the server appends the sequence);
/// `token` is the tenure's.
fn node_prefix(t: &Tenure<Zk>, p: &Pending, token: &str) -> String {
    match p.gate {
        Some(_) => zk::lease_prefix(node_dir(t, p), token),
        None => zk::node_prefix(&t.data.dir, token, t.kind),
    }
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

/// A node of ours that must go.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Cleanup {
    Delete(String),
    /// Delete every child of `dir` created for `token` (after a create that got no answer).
    Sweep {
        dir: String,
        token: OwnerToken,
    },
}

#[derive(Clone, Debug)]
pub(crate) enum Purpose {
    /// Create the directory and its pin, then the node.
    Parents {
        seq: u64,
    },
    /// Create the pin of an existing directory, then list it again.
    Pin {
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
    /// SET-DATA of held `seq`'s node: its proclaim.
    Proclaim {
        seq: u64,
        op: OpId,
    },
    /// An observer's read `read`: its directory's children (with a watch).
    ObserveList {
        op: OpId,
        read: u64,
    },
    /// An observer's read `read`: the leader's node's data (with a watch), in term `term`.
    ObserveData {
        op: OpId,
        read: u64,
        term: u64,
    },
    /// An observer's read `read`: the creation of its missing directory and pin.
    ObserveDir {
        op: OpId,
        read: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ZkTimer {
    /// A pending acquire whose request failed tries again.
    Retry(u64),
    /// Confirm the session again.
    Heartbeat,
    /// Try the deletes of abandoned nodes again.
    Cleanup,
    /// An observer whose read failed reads again.
    Observe(OpId),
}

/// The ZooKeeper strategy.
#[derive(Clone, Debug)]
pub(crate) struct Zk {
    client_id: ClientId,
    root: String,
    session_timeout: Duration,
    /// (Watched node ahead, the waiting tenure that watches it).
    watches: BTreeSet<(String, u64)>,
    /// Watches that fired before the reply that set them arrived.
    fired: BTreeSet<String>,
    /// Send time of the latest request the session answered.
    confirmed: Option<Instant>,
    /// Nodes to delete, and whether a request for each is under way.
    cleanup: BTreeMap<Cleanup, bool>,
    /// The elections observed.
    observers: BTreeMap<OpId, election::Observer>,
    /// The id of the next observer read.
    next_read: u64,
}

type Life = Lifecycle<Zk>;

impl Zk {
    pub(crate) fn machine(
        config: &Config,
        zk: &ZkSettings,
        now: Instant,
    ) -> Result<Machine<Zk>, Error> {
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
        let backend = Zk {
            client_id: config.client_id,
            root: zk.root.clone(),
            session_timeout: zk.session_timeout,
            watches: BTreeSet::new(),
            fired: BTreeSet::new(),
            confirmed: None,
            cleanup: BTreeMap::new(),
            observers: BTreeMap::new(),
            next_read: 0,
        };
        Ok(Machine::new(
            config,
            backend,
            request_timeout,
            now,
            |_, _| {},
        ))
    }

    /// Until when every hold is valid, from the session's latest confirmation.
    /// The lease a confirmation proves: the session timeout (from the send that was answered).
    fn validity_lease(&self) -> Duration {
        if plant::on(Plant::ZkLongValidity) {
            return self.session_timeout * 3 / 2;
        }
        self.session_timeout
    }

    fn valid_until(&self) -> Option<Instant> {
        self.confirmed
            .map(|c| valid_until(c, self.validity_lease()))
    }

    fn retry_delay(&self) -> Duration {
        retry_delay(self.session_timeout)
    }

    fn send(life: &mut Life, op: ZkOp, purpose: Purpose) {
        life.send(Op::Zk(op), purpose);
    }

    /// A request for pending `seq` failed: a waiter tries again soon, a try fails.
    fn retry(&mut self, life: &mut Life, seq: u64, error: Error) {
        let delay = self.retry_delay();
        life.retry(self, seq, error, delay);
    }

    fn malformed(&mut self, life: &mut Life, seq: u64, what: &str, reply: ZkReply) {
        let error = Error::MalformedReply(format!("{what} replied {reply:?}"));
        life.fail(self, seq, error);
    }

    fn on_create(&mut self, life: &mut Life, seq: u64, reply: Result<ZkReply, Error>) {
        let Some(t) = life.tenures.get_mut(seq) else {
            // Abandoned while the create was under way.
            if let Ok(ZkReply::Created(path)) = reply {
                self.clean(life, Cleanup::Delete(path));
            }
            return;
        };
        let downgrade = self.downgrade_path(t);
        let State::Pending(w) = &t.state else {
            return;
        };
        let prefix = node_prefix(t, &w.state, &self.token(t));
        let dir = node_dir(t, &w.state).to_owned();
        let State::Pending(w) = &mut t.state else {
            return;
        };
        let p = &mut w.state;
        match reply {
            // Ours: its name carries our token (an earlier create got no answer).
            Ok(ZkReply::NodeExists) if downgrade.is_some() => {
                p.node = Node::Uncertain;
                self.children(life, seq);
            }
            Ok(ZkReply::Created(path)) => {
                let seq_no = path
                    .strip_prefix(&prefix)
                    .and_then(|_| zk::parse_child(path.rsplit('/').next().unwrap_or("")));
                match seq_no {
                    Some((_, n)) => {
                        p.node = Node::Created { path, seq: n };
                        self.children(life, seq);
                    }
                    None => {
                        self.clean(life, Cleanup::Delete(path.clone()));
                        self.malformed(life, seq, "create", ZkReply::Created(path));
                    }
                }
            }
            // A missing directory: created with its pin, unless it holds leases (Curator
            // counts every child there).
            Ok(ZkReply::NoNode) => {
                let path = match p.gate {
                    Some(_) => dir,
                    None => zk::pin_path(&dir),
                };
                let op = ZkOp::CreateParents { path };
                self.send_pending(life, seq, op, Purpose::Parents { seq });
            }
            Ok(other) => self.malformed(life, seq, "create", other),
            Err(e) => {
                p.node = Node::Uncertain;
                self.retry(life, seq, e);
            }
        }
    }

    fn on_children(&mut self, life: &mut Life, seq: u64, reply: Result<ZkReply, Error>) {
        let Some((t, p)) = pending(life, seq) else {
            return;
        };
        let (leasing, dir) = (p.gate.is_some(), node_dir(t, p).to_owned());
        let own = self.token(t);
        let Some(t) = life.tenures.get_mut(seq) else {
            return;
        };
        let State::Pending(w) = &mut t.state else {
            return;
        };
        let p = &mut w.state;
        let children = match reply {
            // A directory someone else created (Curator, perhaps as a container): pinned
            // before any of its numbers is a token. It cannot go meanwhile: our node is in it,
            // or it is not (and a create finds the directory missing).
            Ok(ZkReply::Children(children))
                if !leasing
                    && !children.iter().any(|c| c == zk::PIN)
                    && !plant::on(Plant::ZkNoPin) =>
            {
                let path = zk::pin_path(&dir);
                let op = ZkOp::CreateParents { path };
                return self.send_pending(life, seq, op, Purpose::Pin { seq });
            }
            Ok(ZkReply::Children(children)) => children,
            Ok(ZkReply::NoNode) => {
                p.node = Node::None;
                return self.advance(life, seq);
            }
            Ok(other) => return self.malformed(life, seq, "children", other),
            Err(e) => return self.retry(life, seq, e),
        };
        let queue = zk::queue(&children);
        let mine: Vec<(u64, &str)> = queue
            .iter()
            .copied()
            .filter(|(_, c)| zk::parse_child(c).is_some_and(|(token, _)| token == own.as_str()))
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
            self.clean_all(life, strays);
            return self.advance(life, seq);
        };
        let path = format!("{dir}/{child}");
        if let Some(write) = &t.data.downgrade
            && !children.contains(write)
        {
            // The write hold went (lost, or released before the read node was created):
            // someone may have written since, so this read queues as any other.
            t.data.downgrade = None;
            p.node = Node::None;
            self.clean_all(life, strays.into_iter().chain([path]));
            return self.advance(life, seq);
        }
        p.node = Node::Created {
            path: path.clone(),
            seq: n,
        };
        // Who stands in our way, and how many of them we can live with. A lock (and a
        // semaphore's gate) is held by the lowest node: the nodes ahead, none allowed. A
        // reader counts only the writers' nodes ahead; a downgrade's read node has its write
        // node's number, so nothing holds it off. A semaphore's leases, Curator's count: every
        // other child of the directory, lease or not, N allowed.
        let (allowed, ahead): (usize, Vec<&str>) = match (t.kind, leasing) {
            (Kind::Semaphore { permits }, true) => {
                let foreign = children
                    .iter()
                    .map(String::as_str)
                    .filter(|c| zk::parse_child(c).is_none());
                let others = queue.iter().map(|(_, c)| *c).chain(foreign);
                let allowed =
                    permits as usize - 1 + usize::from(plant::on(Plant::ZkLeaseUncounted));
                (allowed, others.filter(|c| *c != child).collect())
            }
            (kind, _) => {
                let ahead = queue
                    .iter()
                    .take_while(|(s, _)| *s < n)
                    .map(|(_, c)| *c)
                    .filter(|c| {
                        kind != Kind::Read
                            || (zk::is_writer(c) && !plant::on(Plant::ZkReadersIgnoreWriters))
                    });
                (0, ahead.collect())
            }
        };
        // With too many, watch the last `allowed + 1` of them: while none of those goes, at
        // least as many stay as now (a lock's waiter watches its predecessor). When one goes,
        // look again.
        let full = ahead.len() > allowed;
        let window = ahead.len().saturating_sub(allowed + 1);
        p.to_watch = ahead[window..]
            .iter()
            .rev()
            .map(|c| format!("{dir}/{c}"))
            .collect();
        let (wait, op, gate) = (w.wait, w.op, p.gate.clone());
        // A semaphore's gate is ours: ask for a lease.
        let to_lease = !full && gate.is_none() && matches!(t.kind, Kind::Semaphore { .. });
        if to_lease {
            p.gate = Some((path.clone(), n));
            p.node = Node::None;
            p.to_watch.clear();
        }
        self.clean_all(life, strays);
        if full && wait == Wait::No {
            let reason = NotAcquired::Busy;
            life.abandon(self, seq, Event::NotAcquired { op, reason }, true);
        } else if full {
            life.waits(seq);
            self.watch_next(life, seq);
        } else if to_lease {
            self.create(life, seq);
        } else if let Some((gate, gate_seq)) = gate {
            // A permit, fenced by the gate's number; the gate goes to the next in line.
            self.take(life, seq, path, fencing_token(gate_seq));
            if life.tenures.held(seq).is_some() {
                self.clean(life, Cleanup::Delete(gate));
            }
        } else {
            self.take(life, seq, path, fencing_token(n));
        }
    }

    /// Sets the next watch on a node ahead of a waiter's; with all set, it waits for one to
    /// fire.
    fn watch_next(&mut self, life: &mut Life, seq: u64) {
        let Some(w) = life.tenures.pending_mut(seq) else {
            return;
        };
        if let Some(path) = w.state.to_watch.pop() {
            let op = ZkOp::Watch { path: path.clone() };
            self.send_pending(life, seq, op, Purpose::Watch { seq, path });
        }
    }

    fn on_watch(
        &mut self,
        life: &mut Life,
        seq: u64,
        path: String,
        stale: bool,
        reply: Result<ZkReply, Error>,
    ) {
        let fired = self.fired.remove(&path);
        if life.tenures.pending(seq).is_none() {
            return;
        }
        match reply {
            Ok(ZkReply::Done) if !fired && !stale => {
                self.watches.insert((path, seq));
                self.watch_next(life, seq);
            }
            // A node ahead is gone (or went while we set a watch): look again.
            Ok(ZkReply::Done | ZkReply::NoNode) => self.children(life, seq),
            Ok(other) => self.malformed(life, seq, "watch", other),
            Err(e) => self.retry(life, seq, e),
        }
    }

    fn on_release(
        &mut self,
        life: &mut Life,
        op: OpId,
        hold: HoldId,
        path: String,
        reply: Result<ZkReply, Error>,
    ) {
        let event = match reply {
            Ok(ZkReply::Done) => Event::Released { op, hold, count: 0 },
            Ok(ZkReply::NoNode) => Event::Failed {
                op,
                error: Error::LockLost { hold },
            },
            Ok(other) => Event::Failed {
                op,
                error: Error::MalformedReply(format!("delete replied {other:?}")),
            },
            Err(error) => {
                // The node would keep the lock for as long as the session lives.
                self.clean(life, Cleanup::Delete(path));
                Event::Failed { op, error }
            }
        };
        life.finish(event);
    }

    fn on_extend(&mut self, life: &mut Life, seq: u64, op: OpId, reply: Result<ZkReply, Error>) {
        let hold = HoldId(seq);
        let Some(h) = life.tenures.held(seq) else {
            let error = Error::LockLost { hold };
            return life.finish(Event::Failed { op, error });
        };
        match reply {
            Ok(ZkReply::Done) => {
                let valid_until = h.valid_until;
                life.finish(Event::Extended {
                    op,
                    hold,
                    valid_until,
                });
            }
            Ok(ZkReply::NoNode) => life.refused(self, seq, op),
            Ok(other) => life.finish(Event::Failed {
                op,
                error: Error::MalformedReply(format!("exists replied {other:?}")),
            }),
            Err(error) => life.finish(Event::Failed { op, error }),
        }
    }

    fn on_cleanup(&mut self, life: &mut Life, c: Cleanup, reply: Result<ZkReply, Error>) {
        if let Some(in_flight) = self.cleanup.get_mut(&c) {
            *in_flight = false;
        }
        match (&c, reply) {
            (Cleanup::Sweep { dir, token }, Ok(ZkReply::Children(children))) => {
                let doomed: Vec<String> = children
                    .iter()
                    .filter(|child| {
                        zk::parse_child(child).is_some_and(|(t, _)| t == token.as_str())
                    })
                    .map(|child| format!("{dir}/{child}"))
                    .collect();
                self.cleanup.remove(&c);
                for path in doomed {
                    self.clean(life, Cleanup::Delete(path));
                }
            }
            (_, Ok(_)) => {
                self.cleanup.remove(&c);
            }
            (_, Err(_)) => {
                let at = life.now() + self.retry_delay();
                life.set_timer(ZkTimer::Cleanup, at);
            }
        }
    }

    /// The next step of a pending tenure, from what we know of its node.
    fn advance(&mut self, life: &mut Life, seq: u64) {
        let Some(w) = life.tenures.pending(seq) else {
            return;
        };
        match w.state.node {
            Node::None => self.create(life, seq),
            Node::Uncertain | Node::Created { .. } => self.children(life, seq),
        }
    }

    fn create(&mut self, life: &mut Life, seq: u64) {
        let Some((t, p)) = pending(life, seq) else {
            return;
        };
        let op = match self.downgrade_path(t) {
            Some(path) => ZkOp::CreateEphemeral { path },
            None => ZkOp::CreateSequential {
                prefix: node_prefix(t, p, &self.token(t)),
            },
        };
        self.send_pending(life, seq, op, Purpose::Create { seq });
    }

    /// The path of a downgrade's read node: the reader's name with its write node's number.
    fn downgrade_path(&self, t: &Tenure<Zk>) -> Option<String> {
        let (_, write_seq) = zk::parse_child(t.data.downgrade.as_deref()?)?;
        Some(zk::downgrade_path(&t.data.dir, &self.token(t), write_seq))
    }

    fn children(&mut self, life: &mut Life, seq: u64) {
        let Some((t, p)) = pending(life, seq) else {
            return;
        };
        let path = node_dir(t, p).to_owned();
        self.send_pending(
            life,
            seq,
            ZkOp::Children { path },
            Purpose::Children { seq },
        );
    }

    fn send_pending(&mut self, life: &mut Life, seq: u64, op: ZkOp, purpose: Purpose) {
        if let Some(w) = life.tenures.pending_mut(seq) {
            w.state.step = Step::Asking { stale: false };
            life.clear_timer(ZkTimer::Retry(seq));
            Zk::send(life, op, purpose);
        }
    }

    /// Pending `seq`'s node holds: it becomes held, if the session's latest confirmation
    /// leaves it time.
    fn take(&mut self, life: &mut Life, seq: u64, path: String, fencing_token: u64) {
        let now = life.now();
        match self.valid_until() {
            Some(valid) if valid > now => {
                life.grant(self, seq, Held::new(fencing_token, 1, valid, path), now)
            }
            // The answer came too late to rely on: look again.
            _ => self.retry(life, seq, Error::Timeout),
        }
    }

    /// The session answered a request sent at `sent`: every hold's validity moves on.
    fn confirm(&mut self, life: &mut Life, sent: Instant) {
        if self.confirmed.is_some_and(|c| c >= sent) {
            return;
        }
        self.confirmed = Some(sent);
        for seq in life.tenures.holds() {
            life.renewed(seq, sent, self.validity_lease(), false);
        }
    }

    fn clean_all(&mut self, life: &mut Life, paths: impl IntoIterator<Item = String>) {
        for path in paths {
            self.clean(life, Cleanup::Delete(path));
        }
    }

    fn clean(&mut self, life: &mut Life, c: Cleanup) {
        if !self.cleanup.contains_key(&c) {
            self.send_cleanup(life, c);
        }
    }

    /// Sends every cleanup that is not under way.
    fn retry_cleanup(&mut self, life: &mut Life) {
        let idle: Vec<Cleanup> = self
            .cleanup
            .iter()
            .filter(|(_, in_flight)| !**in_flight)
            .map(|(c, _)| c.clone())
            .collect();
        for c in idle {
            self.send_cleanup(life, c);
        }
    }

    fn send_cleanup(&mut self, life: &mut Life, c: Cleanup) {
        self.cleanup.insert(c.clone(), true);
        let op = match &c {
            Cleanup::Delete(path) => ZkOp::Delete { path: path.clone() },
            Cleanup::Sweep { dir, .. } => ZkOp::Children { path: dir.clone() },
        };
        Zk::send(life, op, Purpose::Cleanup(c));
    }
}

/// A holder's fencing token: its node's sequence number + 1, so that tokens start at 1 as on
/// Redis and 0 never is one.
pub(crate) fn fencing_token(sequence: u64) -> u64 {
    sequence + 1
}

impl Backend for Zk {
    const NAME: &'static str = "ZooKeeper";
    const SERVER_COUNTS: bool = false;
    const RENEWS_HOLDS: bool = false;

    type Tenure = Dir;
    type Pending = Pending;
    /// The path of the node that holds.
    type Held = String;
    type Purpose = Purpose;
    type Timer = ZkTimer;
    type Reply = ZkReply;

    fn reply(response: Response) -> Result<ZkReply, Response> {
        response.zk()
    }

    fn waiter_timer(seq: u64) -> ZkTimer {
        ZkTimer::Retry(seq)
    }

    fn refuse(&self, a: &Acquire) -> Result<(), Error> {
        if !a.fair {
            // Waiters are sequential nodes, served in order: there is nothing to barge past.
            return Err(Error::InvalidArgument(
                "ZooKeeper locks are always fair (waiters are served in order)".into(),
            ));
        }
        Ok(())
    }

    /// The lease is the session timeout; a lease is still checked, so that a call that is
    /// wrong on Redis is wrong here too.
    fn lease(&self, _: Duration) -> Duration {
        self.session_timeout
    }

    fn tenure(&self, life: &Life, a: &Acquire, _: Wait) -> (Dir, Pending) {
        // A read beside the same owner's write hold: downgrade.
        let downgrade = match a.kind {
            Kind::Read => life
                .tenures
                .slot(Kind::Write, &a.name, a.owner)
                .and_then(|seq| life.tenures.held(seq))
                .and_then(|h| h.data.rsplit('/').next().map(str::to_owned)),
            _ => None,
        };
        let (dir, leases) = match a.kind {
            Kind::Mutex => (zk::lock_dir(&self.root, &a.name), None),
            Kind::Semaphore { .. } => {
                let semaphore = zk::semaphore_dir(&self.root, &a.name);
                (zk::gate_dir(&semaphore), Some(zk::leases_dir(&semaphore)))
            }
            Kind::Read | Kind::Write => (zk::rw_dir(&self.root, &a.name), None),
        };
        let pending = Pending {
            node: Node::None,
            step: Step::Idle,
            to_watch: Vec::new(),
            gate: None,
        };
        let dir = Dir {
            dir,
            downgrade,
            leases,
        };
        (dir, pending)
    }

    fn token(&self, t: &Tenure<Self>) -> OwnerToken {
        owner_token(self.client_id, t.seq)
    }

    fn start(&mut self, life: &mut Life, seq: u64) {
        self.advance(life, seq);
    }

    fn release(&mut self, life: &mut Life, op: OpId, seq: u64, t: Tenure<Zk>) {
        let State::Held(h) = t.state else { return };
        let (path, hold) = (h.data, HoldId(seq));
        let req = ZkOp::Delete { path: path.clone() };
        Zk::send(life, req, Purpose::Release { op, hold, path });
    }

    /// Confirms that the node is still ours; the lease stays the session timeout.
    fn extend(&mut self, life: &mut Life, op: OpId, seq: u64, _: Duration) {
        let Some(h) = life.tenures.held(seq) else {
            return;
        };
        let path = h.data.clone();
        Zk::send(life, ZkOp::Exists { path }, Purpose::Extend { seq, op });
    }

    fn renew(&mut self, _: &mut Life, _: &[(u64, Duration)]) {
        unreachable!("ZooKeeper renews its session, not each hold")
    }

    fn on_reply(&mut self, life: &mut Life, req: InFlight<Purpose>, reply: Result<ZkReply, Error>) {
        if reply.is_ok() {
            let sent = if plant::on(Plant::ZkValidityFromReply) {
                life.now()
            } else if plant::on(Plant::ZkNoDrift) {
                req.sent_at + drift(self.session_timeout)
            } else {
                req.sent_at
            };
            self.confirm(life, sent);
        }
        // A pending tenure has at most one request under way: whatever its answer, the next
        // step (or a retry, or a reconnect) may send again. Idle again here, once, so that no
        // reply arm can leave a waiter asking with nothing under way.
        let mut stale = false;
        if let Purpose::Parents { seq }
        | Purpose::Pin { seq }
        | Purpose::Create { seq }
        | Purpose::Children { seq }
        | Purpose::Watch { seq, .. } = req.purpose
            && let Some(w) = life.tenures.pending_mut(seq)
            && let Step::Asking { stale: s } = std::mem::replace(&mut w.state.step, Step::Idle)
        {
            stale = s;
        }
        match req.purpose {
            Purpose::Parents { seq } => match reply {
                Ok(ZkReply::Done) => self.create(life, seq),
                Ok(other) => self.malformed(life, seq, "create-parents", other),
                Err(e) => self.retry(life, seq, e),
            },
            Purpose::Pin { seq } => match reply {
                Ok(ZkReply::Done) => self.children(life, seq),
                Ok(other) => self.malformed(life, seq, "create-parents", other),
                Err(e) => self.retry(life, seq, e),
            },
            Purpose::Create { seq } => self.on_create(life, seq, reply),
            Purpose::Children { seq } => self.on_children(life, seq, reply),
            Purpose::Watch { seq, path } => self.on_watch(life, seq, path, stale, reply),
            Purpose::Release { op, hold, path } => self.on_release(life, op, hold, path, reply),
            Purpose::Extend { seq, op } => self.on_extend(life, seq, op, reply),
            // A failed heartbeat is not retried: the next one is a third of the session
            // timeout away, and several may be under way at once, so one stuck request
            // cannot starve the validity.
            Purpose::Heartbeat => {
                if reply.is_ok() {
                    for seq in life.tenures.holds() {
                        if let Some(h) = life.tenures.held(seq) {
                            let valid_until = h.valid_until;
                            let hold = HoldId(seq);
                            life.event(Event::Renewed { hold, valid_until });
                        }
                    }
                }
            }
            Purpose::Cleanup(c) => self.on_cleanup(life, c, reply),
            Purpose::Ended => {}
            Purpose::Proclaim { seq, op } => self.on_proclaim(life, seq, op, reply),
            Purpose::ObserveList { op, read } => self.on_observe_list(life, op, read, reply),
            Purpose::ObserveData { op, read, term } => {
                self.on_observe_data(life, (op, read, term), reply)
            }
            Purpose::ObserveDir { op, read } => self.on_observe_dir(life, op, read, reply),
        }
    }

    fn notice(&mut self, life: &mut Life, notice: Notice) {
        match notice {
            Notice::Connected => {
                if life.closed() {
                    return;
                }
                // Requests under way when the connection broke may never be answered.
                for c in self.cleanup.keys().cloned().collect::<Vec<_>>() {
                    self.send_cleanup(life, c);
                }
                for seq in life.tenures.pending_where(|p| !p.asking()) {
                    self.advance(life, seq);
                }
                self.observers_reconnected(life);
            }
            Notice::Disconnected => {
                self.confirmed = None;
                for seq in life.tenures.holds() {
                    life.lose(self, seq, LostReason::Disconnected);
                }
            }
            Notice::SessionExpired => {
                // Our nodes went with the session. Deletes still run, for a node created on
                // the next session by a request that overtook this notice.
                self.confirmed = None;
                self.watches.clear();
                self.fired.clear();
                for seq in life.tenures.seqs() {
                    match life.tenures.get(seq).map(|t| &t.state) {
                        Some(State::Held(_)) => life.lose(self, seq, LostReason::SessionExpired),
                        // A waiter lost its place in line with its node. An acquire that
                        // has no node yet goes on with the next session.
                        Some(State::Pending(w))
                            if w.state.node == Node::None
                                && w.state.gate.is_none()
                                && !w.state.asking() => {}
                        Some(State::Pending(_)) => life.fail(self, seq, Error::SessionExpired),
                        None => {}
                    }
                }
            }
            Notice::Watch { path } => {
                self.observers_watch(life, &path);
                let watchers: Vec<u64> = self
                    .watches
                    .range((path.clone(), 0)..=(path.clone(), u64::MAX))
                    .map(|(_, seq)| *seq)
                    .collect();
                for seq in &watchers {
                    self.watches.remove(&(path.clone(), *seq));
                    // A waiter setting its next watch looks again once that is answered.
                    match life.tenures.pending_mut(*seq) {
                        Some(w) if w.state.asking() => w.state.step = Step::Asking { stale: true },
                        _ => self.children(life, *seq),
                    }
                }
                if watchers.is_empty() && life.tenures.any_pending(Pending::asking) {
                    self.fired.insert(path);
                }
            }
            Notice::Message { .. } | Notice::Closed => {}
        }
    }

    fn timer(&mut self, life: &mut Life, timer: ZkTimer) {
        match timer {
            ZkTimer::Retry(seq) => {
                if life.tenures.pending(seq).is_some_and(|w| !w.state.asking()) {
                    self.advance(life, seq);
                }
            }
            ZkTimer::Heartbeat => {
                if !life.tenures.holds().is_empty() {
                    let path = self.root.clone();
                    Zk::send(life, ZkOp::Exists { path }, Purpose::Heartbeat);
                    let at = life.now() + self.session_timeout / 3;
                    life.set_timer(ZkTimer::Heartbeat, at);
                }
            }
            ZkTimer::Cleanup => self.retry_cleanup(life),
            ZkTimer::Observe(op) => self.relist(life, op),
        }
    }

    fn proclaim(
        &mut self,
        life: &mut Life,
        op: OpId,
        seq: u64,
        value: String,
    ) -> Result<(), Error> {
        self.start_proclaim(life, op, seq, value)
    }

    fn observe(&mut self, life: &mut Life, op: OpId, name: String) -> Result<(), Error> {
        self.start_observe(life, op, name);
        Ok(())
    }

    fn unobserve(&mut self, life: &mut Life, op: OpId) -> bool {
        self.stop_observe(life, op)
    }

    fn end_observers(&mut self) -> Vec<OpId> {
        self.stop_observers()
    }

    /// A node the session may still keep is deleted; only a node the server says is gone
    /// needs no delete.
    fn lost(&mut self, life: &mut Life, t: &Tenure<Zk>, reason: &LostReason) {
        if let State::Held(h) = &t.state
            && *reason != LostReason::NotOwner
            && !life.closed()
        {
            self.clean(life, Cleanup::Delete(h.data.clone()));
        }
    }

    /// Its node (if any) goes.
    fn give_up(&mut self, life: &mut Life, t: &Tenure<Zk>) {
        let State::Pending(w) = &t.state else { return };
        let p = &w.state;
        if let Some((gate, _)) = &p.gate {
            self.clean(life, Cleanup::Delete(gate.clone()));
        }
        match &p.node {
            Node::Created { path, .. } => self.clean(life, Cleanup::Delete(path.clone())),
            // A create that got no answer, or one still under way: the sweep's listing runs
            // after it on the session's connection and finds the node if it exists.
            Node::Uncertain | Node::None if p.node == Node::Uncertain || p.asking() => {
                let sweep = Cleanup::Sweep {
                    dir: node_dir(t, p).to_owned(),
                    token: self.token(t),
                };
                self.clean(life, sweep);
            }
            Node::Uncertain | Node::None => {}
        }
    }

    /// A lost hold's extends still under way only confirm the session.
    const IGNORED: Purpose = Purpose::Ended;

    fn command_of(purpose: &Purpose) -> Option<OpId> {
        match *purpose {
            Purpose::Release { op, .. }
            | Purpose::Extend { op, .. }
            | Purpose::Proclaim { op, .. } => Some(op),
            _ => None,
        }
    }

    fn acting_on(purpose: &Purpose, seq: u64) -> Option<OpId> {
        match *purpose {
            Purpose::Extend { seq: s, op } | Purpose::Proclaim { seq: s, op } if s == seq => {
                Some(op)
            }
            _ => None,
        }
    }

    fn forgot(&mut self, life: &mut Life, seq: u64) {
        self.watches.retain(|(_, s)| *s != seq);
        if life.tenures.holds().is_empty() {
            life.clear_timer(ZkTimer::Heartbeat);
        }
    }

    fn granted(&mut self, life: &mut Life, _: u64) {
        if !life.timer_is_set(ZkTimer::Heartbeat) {
            let at = life.now() + self.session_timeout / 3;
            life.set_timer(ZkTimer::Heartbeat, at);
        }
    }
}
