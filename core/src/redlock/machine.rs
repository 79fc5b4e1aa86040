//! The Redlock backend as a strategy of the lock lifecycle ([`crate::lock`]): attempts of
//! ACQUIRE `try` on every node with a back-off between them, RAISE until a majority carries
//! the tenure's token, and rounds of EXTEND or RELEASE settled per hold by a majority.

use core::time::Duration;
use std::collections::BTreeMap;

use super::{MAX_NODES, quorum};
use crate::base::{InFlight, check_lease};
use crate::config::Config;
use crate::error::Error;
use crate::ids::ClientId;
use crate::jitter::Jitter;
use crate::lock::tenures::{Held, State, Tenure};
use crate::lock::{Backend, Lifecycle, Machine, Renewal, valid_until};
use crate::owner::{OwnerToken, owner_token};
use crate::plant::{self, Plant};
use crate::redis::machine::extend;
use crate::redis::{self, AcquireReply, Fairness, LockKeys, Mode, RedisOp, ReleaseReply, Value};
use crate::time::{Instant, server_delay};
use crate::types::{
    Acquire, Event, HoldId, LostReason, NotAcquired, Notice, Op, OpId, Primitive, Response, Wait,
};

/// The first back-off ceiling of a waiter whose attempt found no majority, and the highest.
/// Each failed attempt doubles it; the wait is drawn uniformly below it.
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_millis(200);

/// A tenure's keys, and the round of its latest attempt: the tenure's owner token is that
/// round's ([`Backend::token`]).
#[derive(Clone, Debug)]
pub(crate) struct Rounds {
    keys: LockKeys,
    round: u64,
}

/// A pending acquire: the attempt under way (`None` while backing off), and how many found
/// no majority so far.
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    attempt: Option<Attempt>,
    tries: u32,
}

/// One round of ACQUIREs on every node, then RAISEs until a majority carries the token.
#[derive(Clone, Debug)]
struct Attempt {
    round: u64,
    sent: Instant,
    answers: Vec<Answer>,
    raising: Option<Raising>,
    /// The last error a node gave, reported if the attempt cannot succeed.
    error: Option<Error>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Waiting,
    /// Granted; the node's counter after granting.
    Granted(u64),
    /// Held by another owner.
    Busy,
    Failed,
}

#[derive(Clone, Debug)]
struct Raising {
    token: u64,
    /// Nodes that carry `token` as this tenure's.
    carried: u32,
    /// RAISEs under way.
    under_way: u32,
}

/// A request to every node for some holds, settled per hold by a majority.
#[derive(Clone, Debug)]
struct Round {
    sent: Instant,
    kind: RoundKind,
    items: Vec<Item>,
    /// Nodes that have not answered.
    waiting: u32,
    error: Option<Error>,
}

#[derive(Debug, Clone, Copy)]
enum RoundKind {
    Renew,
    Extend { op: OpId },
    Release { op: OpId },
}

#[derive(Clone, Debug)]
struct Item {
    seq: u64,
    lease: Duration,
    /// Nodes that said yes (extended, freed).
    yes: u32,
    /// Nodes that said the lock is not ours.
    refused: u32,
    settled: bool,
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Yes,
    NotOwner,
    NoQuorum,
}

#[derive(Clone, Debug)]
pub(crate) enum Purpose {
    Acquire {
        seq: u64,
        round: u64,
        node: u32,
    },
    Raise {
        seq: u64,
        round: u64,
    },
    /// EXTEND or RELEASE of a [`Round`].
    Round {
        round: u64,
    },
    /// Best effort; the reply is ignored.
    Cleanup,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum RedlockTimer {
    /// A waiter's back-off after an attempt that found no majority is over.
    Backoff(u64),
}

/// The Redlock strategy: [`Engine`](crate::Engine) runs it for
/// [`Protocol::Redlock`](crate::Protocol::Redlock).
#[derive(Clone, Debug)]
pub(crate) struct Redlock {
    client_id: ClientId,
    nodes: u32,
    lock_delay: Duration,
    /// Back-off jitter (randomness comes from the host, through the client id).
    jitter: Jitter,
    next_round: u64,
    rounds: BTreeMap<u64, Round>,
}

type Life = Lifecycle<Redlock>;

impl Redlock {
    pub(crate) fn machine(
        config: &Config,
        nodes: u32,
        now: Instant,
    ) -> Result<Machine<Redlock>, Error> {
        check_lease(config.request_timeout)?;
        if !config.lock_delay.is_zero() {
            check_lease(config.lock_delay)?;
        }
        if !(1..=MAX_NODES).contains(&nodes) {
            return Err(Error::InvalidConfig(format!(
                "Redlock needs 1 to {MAX_NODES} nodes, not {nodes}"
            )));
        }
        let redlock = Redlock {
            client_id: config.client_id,
            nodes,
            lock_delay: server_delay(config.lock_delay),
            jitter: Jitter::new(config.client_id),
            next_round: 1,
            rounds: BTreeMap::new(),
        };
        Ok(Machine::new(
            config,
            redlock,
            config.request_timeout,
            now,
            |_, _| {},
        ))
    }

    fn quorum(&self) -> u32 {
        quorum(self.nodes)
    }

    // --- acquiring ---

    /// Sends ACQUIRE `try` to every node.
    fn attempt(&mut self, life: &mut Life, seq: u64) {
        let round = self.next_round;
        self.next_round += 1;
        let (nodes, now) = (self.nodes, life.now());
        let request_timeout = life.base.request_timeout;
        let Some(t) = life.tenures.get_mut(seq) else {
            return;
        };
        let Some(w) = pending_of(t) else { return };
        w.attempt = Some(Attempt {
            round,
            sent: now,
            answers: vec![Answer::Waiting; nodes as usize],
            raising: None,
            error: None,
        });
        // Each attempt its own token: a grant that comes after its attempt ended is told from
        // the tenure's.
        t.data.round = round;
        let lease = t.lease + self.lock_delay;
        let op = redis::acquire(
            t.data.keys.clone(),
            &self.token(t),
            lease,
            1,
            Mode::Try,
            lease,
            Fairness::Fair,
        );
        let timeout = node_timeout(request_timeout, t.lease);
        for node in 0..nodes {
            let purpose = Purpose::Acquire { seq, round, node };
            self.send(life, node, op.clone(), purpose, timeout);
        }
    }

    fn on_acquire(
        &mut self,
        life: &mut Life,
        seq: u64,
        round: u64,
        node: u32,
        reply: Result<Value, Error>,
    ) {
        let (answer, error) = match reply.and_then(|v| redis::parse_acquire(&v)) {
            Ok(AcquireReply::Acquired { fencing_token, .. }) => {
                (Answer::Granted(fencing_token), None)
            }
            Ok(AcquireReply::Busy) => (Answer::Busy, None),
            Ok(other) => {
                let error = Error::MalformedReply(format!("acquire in mode try replied {other:?}"));
                (Answer::Failed, Some(error))
            }
            Err(error) => (Answer::Failed, Some(error)),
        };
        let token = owner_token(self.client_id, round);
        let Some(a) = attempt_mut(life, seq, round) else {
            // An attempt that has ended: give back what it got, unless it won the tenure —
            // then record the tenure's token there too, so that every node shows one tenure.
            let won = life
                .tenures
                .get(seq)
                .filter(|t| t.data.round == round)
                .and_then(|_| life.tenures.held(seq))
                .map(|h| h.fencing_token);
            match (answer, won) {
                (Answer::Granted(value), Some(fencing_token)) if value != fencing_token => {
                    self.send_raise(life, seq, round, node, fencing_token);
                }
                (Answer::Granted(_), None) => {
                    // A tenure that is already forgotten sent its give-back before (a grant
                    // that overtakes it holds the lock for no one for at most a lease).
                    if let Some(t) = life.tenures.get(seq) {
                        let (keys, lease) = (t.data.keys.clone(), t.lease);
                        self.give_back_on(life, node, &keys, &token, lease);
                    }
                }
                _ => {}
            }
            return;
        };
        if error.is_some() {
            a.error = error;
        }
        a.answers[node as usize] = answer;
        if let (Some(r), Answer::Granted(value)) = (&mut a.raising, answer) {
            // Late, but it can help carry the token (a node ahead of it — its counter moved on
            // in between — is raised too, to record the tenure's token in its lock).
            if value == r.token {
                r.carried += 1;
                return self.decide(life, seq);
            }
            let token = r.token;
            r.under_way += 1;
            return self.send_raise(life, seq, round, node, token);
        }
        self.decide(life, seq);
    }

    fn on_raise(&mut self, life: &mut Life, seq: u64, round: u64, reply: Result<Value, Error>) {
        let ok = reply.and_then(|v| redis::parse_raise(&v));
        let Some(a) = attempt_mut(life, seq, round) else {
            return;
        };
        let Some(r) = &mut a.raising else { return };
        r.under_way -= 1;
        match ok {
            Ok(true) => r.carried += 1,
            Ok(false) => {}
            Err(e) => a.error = Some(e),
        }
        self.decide(life, seq);
    }

    /// Moves an attempt on once its answers allow: to RAISE, to held, or to failed.
    fn decide(&mut self, life: &mut Life, seq: u64) {
        let (quorum, nodes, now) = (self.quorum(), self.nodes, life.now());
        let Some(t) = life.tenures.get_mut(seq) else {
            return;
        };
        let lease = t.lease;
        let Some(Pending {
            attempt: Some(a), ..
        }) = pending_of(t)
        else {
            return;
        };
        let valid = valid_until(a.sent, lease);
        if let Some(r) = &a.raising {
            if r.carried >= quorum {
                let (token, renew_at) = (r.token, a.sent + lease / 3);
                return if valid > now {
                    life.grant(self, seq, Held::new(token, 1, valid, ()), renew_at)
                } else {
                    self.failed_attempt(life, seq, Some(Error::Timeout))
                };
            }
            if r.carried + r.under_way < quorum {
                return self.failed_attempt(life, seq, None);
            }
            return;
        }
        let granted: Vec<(u32, u64)> = (0..nodes)
            .filter_map(|n| match a.answers[n as usize] {
                Answer::Granted(v) => Some((n, v)),
                _ => None,
            })
            .collect();
        let refused = a
            .answers
            .iter()
            .filter(|x| matches!(x, Answer::Busy | Answer::Failed))
            .count() as u32;
        if granted.len() as u32 >= quorum {
            if valid <= now {
                return self.failed_attempt(life, seq, Some(Error::Timeout));
            }
            // The tenure's token: the largest counter of the granting nodes. Every granting
            // node read its counter while it held the lock for us, so a majority's largest
            // value is above every token a majority carried before (PROTOCOL.md §9).
            let counters = granted.iter().map(|&(_, v)| v);
            let token = if plant::on(Plant::RedlockSmallestCounter) {
                counters.min()
            } else {
                counters.max()
            }
            .unwrap_or(0);
            let behind: Vec<u32> = granted
                .iter()
                .filter(|&&(_, v)| v < token)
                .map(|&(n, _)| n)
                .collect();
            let round = a.round;
            a.raising = Some(Raising {
                token,
                carried: granted.len() as u32 - behind.len() as u32,
                under_way: behind.len() as u32,
            });
            for node in behind {
                self.send_raise(life, seq, round, node, token);
            }
            self.decide(life, seq);
        } else if refused > nodes - quorum {
            self.failed_attempt(life, seq, None);
        }
    }

    fn send_raise(&mut self, life: &mut Life, seq: u64, round: u64, node: u32, token: u64) {
        let Some(t) = life.tenures.get(seq) else {
            return;
        };
        let op = redis::raise(&t.data.keys, &self.token(t), token);
        let timeout = node_timeout(life.base.request_timeout, t.lease);
        self.send(life, node, op, Purpose::Raise { seq, round }, timeout);
    }

    /// An attempt found no majority: give back what it got, then end a try-acquire or back off.
    fn failed_attempt(&mut self, life: &mut Life, seq: u64, error: Option<Error>) {
        let Some(w) = life.tenures.pending_mut(seq) else {
            return;
        };
        let Some(a) = w.state.attempt.take() else {
            return;
        };
        w.state.tries += 1;
        let (op, wait, tries) = (w.op, w.wait, w.state.tries);
        let busy = a.answers.iter().any(|x| matches!(x, Answer::Busy));
        if let Some(t) = life.tenures.get(seq) {
            let (keys, token, lease) = (t.data.keys.clone(), self.token(t), t.lease);
            self.give_back(life, &keys, &token, lease);
        }
        if wait == Wait::No {
            let event = match error.or(a.error) {
                Some(error) if !busy => Event::Failed { op, error },
                _ => Event::NotAcquired {
                    op,
                    reason: NotAcquired::Busy,
                },
            };
            return life.abandon(self, seq, event, false);
        }
        if busy {
            life.waits(seq);
        }
        // Not sooner when a holder's lease runs out: contenders that all waited for it would
        // collide again, in lockstep.
        let at = life.now() + self.backoff(tries);
        life.set_timer(RedlockTimer::Backoff(seq), at);
    }

    /// Randomised exponential back-off ("full jitter"): uniform between 1 ms and
    /// 10 ms × 2^(tries − 1), at most 200 ms, so that contenders that split the nodes between
    /// them do not collide again in lockstep.
    fn backoff(&mut self, tries: u32) -> Duration {
        let ceiling = BACKOFF_MIN
            .saturating_mul(1 << tries.saturating_sub(1).min(16))
            .min(BACKOFF_MAX);
        self.jitter.between(Duration::from_millis(1), ceiling)
    }

    // --- rounds: renew, extend, release ---

    /// Sends `op` to every node for `items` (hold, lease) and tallies the answers.
    fn round(&mut self, life: &mut Life, kind: RoundKind, items: &[(u64, Duration)], op: RedisOp) {
        let id = self.next_round;
        self.next_round += 1;
        let shortest = items.iter().map(|&(_, l)| l).min().unwrap_or(Duration::MAX);
        self.rounds.insert(
            id,
            Round {
                sent: life.now(),
                kind,
                items: items
                    .iter()
                    .map(|&(seq, lease)| Item {
                        seq,
                        lease,
                        yes: 0,
                        refused: 0,
                        settled: false,
                    })
                    .collect(),
                waiting: self.nodes,
                error: None,
            },
        );
        let timeout = node_timeout(life.base.request_timeout, shortest);
        for node in 0..self.nodes {
            self.send(
                life,
                node,
                op.clone(),
                Purpose::Round { round: id },
                timeout,
            );
        }
    }

    fn on_round(&mut self, life: &mut Life, id: u64, reply: Result<Value, Error>) {
        let (quorum, nodes) = (self.quorum(), self.nodes);
        let Some(round) = self.rounds.get_mut(&id) else {
            return;
        };
        round.waiting -= 1;
        let flags = reply.and_then(|v| match round.kind {
            RoundKind::Release { .. } => redis::parse_release(&v).map(|r| match r {
                ReleaseReply::NotOwner => vec![false],
                ReleaseReply::Held { .. } | ReleaseReply::Freed => vec![true],
            }),
            RoundKind::Renew | RoundKind::Extend { .. } => {
                redis::parse_extend(&v, round.items.len())
            }
        });
        let mut outcomes = Vec::new();
        for (i, item) in round.items.iter_mut().enumerate() {
            if item.settled {
                continue;
            }
            match &flags {
                Ok(flags) if flags[i] => item.yes += 1,
                Ok(_) => item.refused += 1,
                Err(_) => {}
            }
            let outcome = if item.yes >= quorum {
                Outcome::Yes
            } else if item.refused > nodes - quorum {
                Outcome::NotOwner
            } else if item.yes + round.waiting < quorum {
                Outcome::NoQuorum
            } else {
                continue;
            };
            item.settled = true;
            outcomes.push((item.seq, item.lease, outcome));
        }
        if let Err(e) = flags {
            round.error = Some(e);
        }
        let (kind, sent, error) = (round.kind, round.sent, round.error.clone());
        if round.waiting == 0 || round.items.iter().all(|i| i.settled) {
            self.rounds.remove(&id);
        }
        for (seq, lease, outcome) in outcomes {
            self.settle(life, kind, seq, lease, sent, outcome, error.clone());
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn settle(
        &mut self,
        life: &mut Life,
        kind: RoundKind,
        seq: u64,
        lease: Duration,
        sent: Instant,
        outcome: Outcome,
        error: Option<Error>,
    ) {
        let hold = HoldId(seq);
        let error = error.unwrap_or(Error::Unavailable(format!(
            "no majority of the {} Redlock nodes answered",
            self.nodes
        )));
        match (kind, outcome) {
            (RoundKind::Renew, outcome) => {
                let outcome = match outcome {
                    Outcome::Yes => Renewal::Kept,
                    Outcome::NotOwner => Renewal::Refused,
                    Outcome::NoQuorum => Renewal::Failed,
                };
                life.renewal(self, seq, lease, sent, outcome);
            }
            (RoundKind::Extend { op }, Outcome::Yes) => {
                if let Some(t) = life.tenures.get_mut(seq) {
                    t.lease = lease;
                }
                life.renewed(seq, sent, lease, false);
                // Released (or lost) while the extend was under way: it extended nothing.
                let event = match life.tenures.held(seq) {
                    Some(h) => Event::Extended {
                        op,
                        hold,
                        valid_until: h.valid_until,
                    },
                    None => Event::Failed {
                        op,
                        error: Error::LockLost { hold },
                    },
                };
                life.finish(event);
            }
            (RoundKind::Extend { op } | RoundKind::Release { op }, Outcome::NotOwner) => {
                life.refused(self, seq, op);
            }
            (RoundKind::Extend { op } | RoundKind::Release { op }, Outcome::NoQuorum) => {
                life.finish(Event::Failed { op, error });
            }
            (RoundKind::Release { op }, Outcome::Yes) => {
                life.finish(Event::Released { op, hold, count: 0 });
            }
        }
    }

    /// RELEASE of `token` on every node, best effort.
    fn give_back(&mut self, life: &mut Life, keys: &LockKeys, token: &str, lease: Duration) {
        for node in 0..self.nodes {
            self.give_back_on(life, node, keys, token, lease);
        }
    }

    /// RELEASE of `token` on `node`, unless the machine is closed.
    fn give_back_on(
        &mut self,
        life: &mut Life,
        node: u32,
        keys: &LockKeys,
        token: &str,
        lease: Duration,
    ) {
        if life.closed() {
            return;
        }
        let op = redis::release(keys.clone(), token, 0, Fairness::Fair);
        let timeout = node_timeout(life.base.request_timeout, lease);
        self.send(life, node, op, Purpose::Cleanup, timeout);
    }

    fn send(
        &mut self,
        life: &mut Life,
        node: u32,
        op: RedisOp,
        purpose: Purpose,
        timeout: Duration,
    ) {
        life.base
            .send_within(Op::Redlock { node, op }, purpose, timeout);
    }
}

/// The attempt of pending tenure `t`, if it has one.
fn pending_of(t: &mut Tenure<Redlock>) -> Option<&mut Pending> {
    match &mut t.state {
        State::Pending(w) => Some(&mut w.state),
        State::Held(_) => None,
    }
}

/// The attempt `round` of pending `seq`, if it is still the one under way.
fn attempt_mut(life: &mut Life, seq: u64, round: u64) -> Option<&mut Attempt> {
    match life.tenures.pending_mut(seq) {
        Some(w) => match &mut w.state.attempt {
            Some(a) if a.round == round => Some(a),
            _ => None,
        },
        None => None,
    }
}

/// A node's share of a request's time: a node that does not answer within a third of the
/// lease (or the request timeout, if shorter) counts as failed, so that one silent node cannot
/// use up a tenure's validity.
fn node_timeout(request_timeout: Duration, lease: Duration) -> Duration {
    request_timeout.min(lease / 3)
}

impl Backend for Redlock {
    const NAME: &'static str = "Redlock";
    /// Every node speaks the Redis protocol.
    const WIRE: &'static str = "Redis";
    const OFFERS: &'static [Primitive] = &[Primitive::Lock];
    const SERVER_COUNTS: bool = false;
    const RENEWS_HOLDS: bool = true;

    type Tenure = Rounds;
    type Pending = Pending;
    type Held = ();
    type Purpose = Purpose;
    type Timer = RedlockTimer;
    type Reply = Value;

    fn reply(response: Response) -> Result<Value, Response> {
        response.redis()
    }

    fn waiter_timer(seq: u64) -> RedlockTimer {
        RedlockTimer::Backoff(seq)
    }

    fn tenure(&self, _: &Life, a: &Acquire, _: Wait) -> (Rounds, Pending) {
        let pending = Pending {
            attempt: None,
            tries: 0,
        };
        let keys = LockKeys::new(&a.name);
        (Rounds { keys, round: 0 }, pending)
    }

    /// The owner token is drawn per attempt: its round's.
    fn token(&self, t: &Tenure<Self>) -> OwnerToken {
        owner_token(self.client_id, t.data.round)
    }

    fn start(&mut self, life: &mut Life, seq: u64) {
        self.attempt(life, seq);
    }

    fn release(&mut self, life: &mut Life, op: OpId, seq: u64, t: Tenure<Redlock>) {
        let token = self.token(&t);
        let req = redis::release(t.data.keys, &token, 0, Fairness::Fair);
        self.round(life, RoundKind::Release { op }, &[(seq, t.lease)], req);
    }

    fn extend(&mut self, life: &mut Life, op: OpId, seq: u64, lease: Duration) {
        let items = [(seq, lease)];
        let req = extend(&life.tenures, &items, self.lock_delay, |t| {
            (t.data.keys.lock().to_owned(), self.token(t))
        });
        self.round(life, RoundKind::Extend { op }, &items, req);
    }

    fn renew(&mut self, life: &mut Life, items: &[(u64, Duration)]) {
        let req = extend(&life.tenures, items, self.lock_delay, |t| {
            (t.data.keys.lock().to_owned(), self.token(t))
        });
        self.round(life, RoundKind::Renew, items, req);
    }

    fn on_reply(&mut self, life: &mut Life, req: InFlight<Purpose>, reply: Result<Value, Error>) {
        match req.purpose {
            Purpose::Acquire { seq, round, node } => self.on_acquire(life, seq, round, node, reply),
            Purpose::Raise { seq, round } => self.on_raise(life, seq, round, reply),
            Purpose::Round { round } => self.on_round(life, round, reply),
            Purpose::Cleanup => {}
        }
    }

    /// Connection news changes nothing: holds keep their validity until a majority stops
    /// renewing them. There are no wake-ups to listen for.
    fn notice(&mut self, _: &mut Life, _: Notice) {}

    fn timer(&mut self, life: &mut Life, timer: RedlockTimer) {
        let RedlockTimer::Backoff(seq) = timer;
        if life
            .tenures
            .pending(seq)
            .is_some_and(|w| w.state.attempt.is_none())
        {
            self.attempt(life, seq);
        }
    }

    /// What the nodes may still hold is given back as on one Redis (not a lease that ran out
    /// under lock-delay).
    fn lost(&mut self, life: &mut Life, t: &Tenure<Redlock>, reason: &LostReason) {
        let give_back = match reason {
            LostReason::Expired => self.lock_delay.is_zero(),
            LostReason::MaxHold => true,
            _ => false,
        };
        if give_back {
            self.give_back(life, &t.data.keys, &self.token(t), t.lease);
        }
    }

    fn give_up(&mut self, life: &mut Life, t: &Tenure<Redlock>) {
        self.give_back(life, &t.data.keys, &self.token(t), t.lease);
    }

    /// Rounds carry the commands; a request only names its round.
    const IGNORED: Purpose = Purpose::Cleanup;

    fn command_of(_: &Purpose) -> Option<OpId> {
        None
    }

    fn acting_on(_: &Purpose, _: u64) -> Option<OpId> {
        None
    }

    /// The extends under way on lost hold `seq` (their answers are ignored from now on), or
    /// every extend and release when the machine closes.
    fn end_own(&mut self, seq: Option<u64>) -> Vec<OpId> {
        let ended: Vec<u64> = self
            .rounds
            .iter()
            .filter(|(_, r)| match seq {
                Some(seq) => {
                    matches!(r.kind, RoundKind::Extend { .. })
                        && r.items.iter().any(|i| i.seq == seq)
                }
                None => true,
            })
            .map(|(id, _)| *id)
            .collect();
        ended
            .into_iter()
            .filter_map(|id| match self.rounds.remove(&id)?.kind {
                RoundKind::Extend { op } | RoundKind::Release { op } => Some(op),
                RoundKind::Renew => None,
            })
            .collect()
    }
}
