//! Elections on the Redis machine (PROTOCOL.md §20), on Redis and on SQL: an election is
//! the lock of its name, whose holder publishes a value with PROCLAIM and resigns with RESIGN.
//! Observers subscribe to the election's channel (a NOTIFY channel on PostgreSQL), read
//! LEADER when a message comes, and read again when the leader's lease would run out — a
//! leader that dies silently sends nothing. Without a push channel (MySQL) they read again
//! every poll interval.

use core::time::Duration;
use std::collections::BTreeMap;

use super::{Life, Purpose, Redis, RedisTimer, Target, Wire};
use crate::base::retry_delay;
use crate::election::Seen;
use crate::error::Error;
use crate::lock::Backend;
use crate::redis::{self, LeaderRead, LockKeys, RedisOp, Value};
use crate::types::{Event, HoldId, Leader, OpId};

/// The elections a machine observes, and their channels.
#[derive(Clone, Debug, Default)]
pub(crate) struct Elections {
    observers: BTreeMap<OpId, Observer>,
    /// Each election channel in use: subscribed (`true`), or being subscribed to.
    channels: BTreeMap<String, bool>,
    /// The id of the next LEADER read.
    next_read: u64,
}

/// One observe command.
#[derive(Clone, Debug)]
struct Observer {
    name: String,
    keys: LockKeys,
    channel: String,
    seen: Seen,
    /// The read under way, if one is.
    reading: Option<u64>,
    /// Its answer is out of date: a message came after it was sent.
    stale: bool,
}

impl<W: Wire> Redis<W> {
    pub(super) fn start_proclaim(
        &mut self,
        life: &mut Life<W>,
        op: OpId,
        seq: u64,
        value: String,
    ) -> Result<(), Error> {
        let hold = HoldId(seq);
        let term = life
            .tenures
            .held(seq)
            .ok_or(Error::NotHeld { hold })?
            .fencing_token;
        let t = life.tenures.get_mut(seq).ok_or(Error::NotHeld { hold })?;
        if !matches!(t.data.target, Target::Lock) {
            return Err(Error::InvalidArgument(
                "an election's leader holds a lock, not a permit or a read-write hold".into(),
            ));
        }
        self.wire.refuse_value(&value)?;
        t.data.leads = true;
        let req = self.wire.op(
            redis::proclaim(&LockKeys::new(&t.name), &self.token(t), term, &value),
            &[&t.name],
        );
        life.send(req, Purpose::Proclaim { seq, op });
        Ok(())
    }

    pub(super) fn on_proclaim(
        &mut self,
        life: &mut Life<W>,
        seq: u64,
        op: OpId,
        reply: Result<Value, Error>,
    ) {
        let hold = HoldId(seq);
        let Some(h) = life.tenures.held(seq) else {
            let error = Error::LockLost { hold };
            return life.finish(Event::Failed { op, error });
        };
        match reply.and_then(|v| redis::parse_proclaim(&v)) {
            Ok(Some(term)) if term == h.fencing_token => {
                life.finish(Event::Proclaimed { op, hold, term })
            }
            Ok(Some(term)) => {
                let error = Error::MalformedReply(format!(
                    "proclaim got term {term}, its tenure has {}",
                    h.fencing_token
                ));
                life.finish(Event::Failed { op, error });
            }
            Ok(None) => life.refused(self, seq, op),
            Err(error) => life.finish(Event::Failed { op, error }),
        }
    }

    pub(super) fn start_observe(
        &mut self,
        life: &mut Life<W>,
        op: OpId,
        name: String,
    ) -> Result<(), Error> {
        self.wire.refuse_name(&name)?;
        let channel = self.wire.leader_channel(&name);
        // Without a push channel, observers only read (and read again).
        let subscribed = match self.wire.pushes() {
            true => self.elections.channels.get(&channel).copied(),
            false => Some(true),
        };
        self.elections.observers.insert(
            op,
            Observer {
                keys: LockKeys::new(&name),
                name,
                channel: channel.clone(),
                seen: Seen::default(),
                reading: None,
                stale: false,
            },
        );
        match subscribed {
            Some(true) => self.read(life, op),
            Some(false) => {} // read once subscribed
            None => self.follow(life, channel),
        }
        Ok(())
    }

    pub(super) fn stop_observe(&mut self, life: &mut Life<W>, op: OpId) -> bool {
        life.clear_timer(RedisTimer::Observe(op));
        self.elections.observers.remove(&op).is_some()
    }

    /// Every observer, ended (the machine closes).
    pub(super) fn stop_observers(&mut self) -> Vec<OpId> {
        let ended = std::mem::take(&mut self.elections.observers);
        ended.into_keys().collect()
    }

    /// Subscribes to an election's channel; its observers read once it is done.
    fn follow(&mut self, life: &mut Life<W>, channel: String) {
        self.elections.channels.insert(channel.clone(), false);
        let op = RedisOp::Subscribe {
            channel: channel.clone(),
        };
        self.send(life, op, &[], Purpose::Follow { channel });
    }

    /// The subscription to `channel` was answered: its observers read now. A failed one is
    /// tried again soon, and its observers read meanwhile (they poll until it is made).
    pub(super) fn on_follow(&mut self, life: &mut Life<W>, channel: String, ok: bool) {
        if ok {
            self.elections.channels.insert(channel.clone(), true);
        } else {
            let at = life.now() + retry_delay(self.waiter_lease);
            life.set_timer(RedisTimer::Follow, at);
        }
        let ops: Vec<OpId> = self.observers_of(&channel).collect();
        for op in ops {
            self.read(life, op);
        }
    }

    /// Subscribes again to every election channel not subscribed to (after a failure, or a
    /// reconnect: `all`).
    pub(super) fn refollow(&mut self, life: &mut Life<W>, all: bool) {
        let channels: Vec<String> = self
            .elections
            .channels
            .iter()
            .filter(|(_, done)| all || !**done)
            .map(|(c, _)| c.clone())
            .collect();
        for channel in channels {
            if self.observers_of(&channel).next().is_some() {
                self.follow(life, channel);
            } else {
                self.elections.channels.remove(&channel);
            }
        }
    }

    fn observers_of<'a>(&'a self, channel: &'a str) -> impl Iterator<Item = OpId> + 'a {
        let observers = self.elections.observers.iter();
        observers
            .filter(move |(_, o)| o.channel == channel)
            .map(|(op, _)| *op)
    }

    /// A message on an election channel makes the observers of the election it concerns
    /// read again; on Redis, a proclaim's `<term> <value>` is news at once if its term is
    /// newer than any reported. Returns whether the channel was an election's.
    pub(super) fn leader_message(
        &mut self,
        life: &mut Life<W>,
        channel: &str,
        payload: &[u8],
    ) -> bool {
        if !self.elections.channels.contains_key(channel) {
            return false;
        }
        let ops: Vec<OpId> = self.observers_of(channel).collect();
        for op in ops {
            let Some(o) = self.elections.observers.get_mut(&op) else {
                continue;
            };
            let Some(news) = self.wire.leader_news(&o.name, payload) else {
                continue; // another election's, on a channel they share
            };
            if let Some((term, Some(value))) = news {
                let value = value.to_owned();
                if let Some(leader) = o.seen.pushed(Leader { term, value }) {
                    o.stale = o.reading.is_some();
                    life.event(Event::Leader { op, leader });
                }
            }
            self.read(life, op);
        }
        true
    }

    /// Sends observer `op`'s LEADER read, unless one is under way (then its answer is read
    /// again if stale).
    pub(super) fn read(&mut self, life: &mut Life<W>, op: OpId) {
        let Some(o) = self.elections.observers.get_mut(&op) else {
            return;
        };
        if o.reading.is_some() {
            o.stale = true;
            return;
        }
        let read = self.elections.next_read;
        self.elections.next_read += 1;
        o.reading = Some(read);
        o.stale = false;
        let req = self.wire.op(redis::leader(&o.keys), &[&o.name]);
        life.clear_timer(RedisTimer::Observe(op));
        life.send(req, Purpose::Leader { op, read });
    }

    /// A LEADER read answered: a change is reported (terms never go back), and the next read
    /// is due when the leader's lease would run out, or after a waiter lease at the latest
    /// (a poll interval, jittered, without a push channel).
    pub(super) fn on_leader(
        &mut self,
        life: &mut Life<W>,
        op: OpId,
        read: u64,
        reply: Result<Value, Error>,
    ) {
        let now = life.now();
        let poll = match self.wire.poll() {
            Some(poll) => self.jitter.between(poll / 2, poll),
            None => self.waiter_lease,
        };
        let Some(o) = self.elections.observers.get_mut(&op) else {
            return;
        };
        if o.reading != Some(read) {
            return;
        }
        o.reading = None;
        if o.stale {
            return self.read(life, op);
        }
        let next = match reply.and_then(|v| redis::parse_leader(&v)) {
            Ok(LeaderRead { leader, held, ttl }) => {
                if let Some(leader) = o.seen.read(leader, held) {
                    life.event(Event::Leader { op, leader });
                }
                let lapse = ttl.map_or(poll, |t| t + Duration::from_millis(1));
                now + lapse.min(poll)
            }
            Err(_) => now + retry_delay(poll),
        };
        life.set_timer(RedisTimer::Observe(op), next);
    }
}

/// Refuses elections on a wire that offers none.
pub(super) fn check_elects<W: Wire>() -> Result<(), Error> {
    if W::ELECTS {
        Ok(())
    } else {
        Err(crate::lock::no_elections(<Redis<W> as Backend>::NAME))
    }
}
