//! Elections on the ZooKeeper machine (PROTOCOL.md §20): an election is the lock of its name,
//! laid out as Curator's `LeaderSelector` lays it out (an `InterProcessMutex` whose nodes
//! carry the participant's id): the leader publishes its value as its node's data. Observers
//! list the directory with a watch on its children and read the lowest contender's data with a
//! watch on it; either watch firing — a candidate came or went, the leader proclaimed or its
//! node went with its session — makes them read again. Nothing is polled.

use super::{Life, Purpose, Zk, ZkTimer, fencing_token};
use crate::election::Seen;
use crate::error::Error;
use crate::types::{Event, HoldId, Kind, Leader, OpId};
use crate::zk::{self, ZkOp, ZkReply};

/// One observe command.
#[derive(Clone, Debug)]
pub(crate) struct Observer {
    dir: String,
    /// The leader's node whose data is watched.
    node: Option<String>,
    seen: Seen,
    /// The read under way, if one is.
    reading: Option<u64>,
    /// A watch fired while it was under way: its answer is out of date.
    stale: bool,
}

impl Zk {
    pub(super) fn start_proclaim(
        &mut self,
        life: &mut Life,
        op: OpId,
        seq: u64,
        value: String,
    ) -> Result<(), Error> {
        let hold = HoldId(seq);
        let t = life.tenures.get(seq).ok_or(Error::NotHeld { hold })?;
        if t.kind != Kind::Mutex {
            return Err(Error::InvalidArgument(
                "an election's leader holds a lock, not a permit or a read-write hold".into(),
            ));
        }
        let path = life
            .tenures
            .held(seq)
            .ok_or(Error::NotHeld { hold })?
            .data
            .clone();
        let op_ = ZkOp::SetData { path, data: value };
        Zk::send(life, op_, Purpose::Proclaim { seq, op });
        Ok(())
    }

    pub(super) fn on_proclaim(
        &mut self,
        life: &mut Life,
        seq: u64,
        op: OpId,
        reply: Result<ZkReply, Error>,
    ) {
        let hold = HoldId(seq);
        let Some(h) = life.tenures.held(seq) else {
            let error = Error::LockLost { hold };
            return life.finish(Event::Failed { op, error });
        };
        let term = h.fencing_token;
        match reply {
            Ok(ZkReply::Done) => life.finish(Event::Proclaimed { op, hold, term }),
            Ok(ZkReply::NoNode) => life.refused(self, seq, op),
            Ok(other) => {
                let error = Error::MalformedReply(format!("set-data replied {other:?}"));
                life.finish(Event::Failed { op, error });
            }
            Err(error) => life.finish(Event::Failed { op, error }),
        }
    }

    pub(super) fn start_observe(&mut self, life: &mut Life, op: OpId, name: String) {
        let observer = Observer {
            dir: zk::lock_dir(&self.root, &name),
            node: None,
            seen: Seen::default(),
            reading: None,
            stale: false,
        };
        self.observers.insert(op, observer);
        self.relist(life, op);
    }

    pub(super) fn stop_observe(&mut self, life: &mut Life, op: OpId) -> bool {
        life.clear_timer(ZkTimer::Observe(op));
        self.observers.remove(&op).is_some()
    }

    /// Observer `op` lists its directory again (after its read under way, if one is).
    pub(super) fn relist(&mut self, life: &mut Life, op: OpId) {
        let Some(o) = self.observers.get(&op) else {
            return;
        };
        let path = o.dir.clone();
        self.read(life, op, ZkOp::WatchChildren { path }, |read| {
            Purpose::ObserveList { op, read }
        });
    }

    /// Sends one read of observer `op`, unless one is under way (that one's answer is then
    /// stale, and it lists again when it comes).
    fn read(&mut self, life: &mut Life, op: OpId, req: ZkOp, purpose: impl FnOnce(u64) -> Purpose) {
        let read = self.next_read;
        let Some(o) = self.observers.get_mut(&op) else {
            return;
        };
        if o.reading.is_some() {
            o.stale = true;
            return;
        }
        self.next_read += 1;
        o.reading = Some(read);
        o.stale = false;
        life.clear_timer(ZkTimer::Observe(op));
        Zk::send(life, req, purpose(read));
    }

    /// The answer to read `read` of observer `op`: whether to use it (not another read's,
    /// not stale — a stale one lists again).
    fn answered(&mut self, life: &mut Life, op: OpId, read: u64) -> bool {
        let Some(o) = self.observers.get_mut(&op) else {
            return false;
        };
        if o.reading != Some(read) {
            return false;
        }
        o.reading = None;
        if o.stale {
            self.relist(life, op);
            return false;
        }
        true
    }

    /// A read failed: try again soon.
    fn observe_later(&mut self, life: &mut Life, op: OpId) {
        let at = life.now() + self.retry_delay();
        life.set_timer(ZkTimer::Observe(op), at);
    }

    fn observed(&mut self, life: &mut Life, op: OpId, leader: Option<Leader>, held: bool) {
        if let Some(o) = self.observers.get_mut(&op)
            && let Some(leader) = o.seen.read(leader, held)
        {
            life.event(Event::Leader { op, leader });
        }
    }

    pub(super) fn on_observe_list(
        &mut self,
        life: &mut Life,
        op: OpId,
        read: u64,
        reply: Result<ZkReply, Error>,
    ) {
        if !self.answered(life, op, read) {
            return;
        }
        let Some(o) = self.observers.get_mut(&op) else {
            return;
        };
        match reply {
            Ok(ZkReply::Children(children)) => {
                let Some((n, child)) = zk::queue(&children).first().copied() else {
                    o.node = None;
                    return self.observed(life, op, None, false);
                };
                let path = format!("{}/{child}", o.dir);
                o.node = Some(path.clone());
                let term = fencing_token(n);
                let req = ZkOp::GetData { path, watch: true };
                self.read(life, op, req, |read| Purpose::ObserveData {
                    op,
                    read,
                    term,
                });
            }
            // No directory yet: nobody leads. Create it (as a campaign would, with its pin),
            // so that a watch on its children can be set.
            Ok(ZkReply::NoNode) => {
                o.node = None;
                let path = zk::pin_path(&o.dir);
                self.observed(life, op, None, false);
                let req = ZkOp::CreateParents { path };
                self.read(life, op, req, |read| Purpose::ObserveDir { op, read });
            }
            Ok(_) | Err(_) => self.observe_later(life, op),
        }
    }

    pub(super) fn on_observe_data(
        &mut self,
        life: &mut Life,
        (op, read, term): (OpId, u64, u64),
        reply: Result<ZkReply, Error>,
    ) {
        if !self.answered(life, op, read) {
            return;
        }
        match reply {
            // An empty node: a holder that has not proclaimed (yet), no leader.
            Ok(ZkReply::Data(value)) => {
                let leader = (!value.is_empty()).then_some(Leader { term, value });
                self.observed(life, op, leader, true);
            }
            // The leader's node went meanwhile: look again.
            Ok(ZkReply::NoNode) => self.relist(life, op),
            Ok(_) | Err(_) => self.observe_later(life, op),
        }
    }

    pub(super) fn on_observe_dir(
        &mut self,
        life: &mut Life,
        op: OpId,
        read: u64,
        reply: Result<ZkReply, Error>,
    ) {
        if !self.answered(life, op, read) {
            return;
        }
        match reply {
            Ok(ZkReply::Done) => self.relist(life, op),
            Ok(_) | Err(_) => self.observe_later(life, op),
        }
    }

    /// A watch fired on `path`: the observers of that directory or leader node look again.
    pub(super) fn observers_watch(&mut self, life: &mut Life, path: &str) {
        let ops: Vec<OpId> = self
            .observers
            .iter()
            .filter(|(_, o)| o.dir == path || o.node.as_deref() == Some(path))
            .map(|(op, _)| *op)
            .collect();
        for op in ops {
            self.relist(life, op);
        }
    }

    /// After a reconnect (watches may be gone): every observer looks again.
    pub(super) fn observers_reconnected(&mut self, life: &mut Life) {
        let ops: Vec<OpId> = self.observers.keys().copied().collect();
        for op in ops {
            if let Some(o) = self.observers.get_mut(&op) {
                o.reading = None;
            }
            self.relist(life, op);
        }
    }

    /// Every observer, ended (the machine closes).
    pub(super) fn stop_observers(&mut self) -> Vec<OpId> {
        std::mem::take(&mut self.observers).into_keys().collect()
    }
}
