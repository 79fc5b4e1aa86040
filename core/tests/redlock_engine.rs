//! The Redlock engine, case by case, on reference Redis nodes whose answers the test delivers
//! by hand: quorum, validity, the max-register fencing token, give-back, renewal and back-off.

use std::time::Duration;

use dlock_core::LockStatus;
use dlock_core::redis::reference::Store;
use dlock_core::redis::{LockKeys, RedisOp, Script, Value};
use dlock_core::redlock::{merge_status, quorum};
use dlock_core::{
    Acquire, ClientId, Command, Config, Engine, Error, Event, HoldId, Input, Instant, Kind,
    LostReason, NotAcquired, Op, OpId, Output, Protocol, Request, Response, TransportError, Wait,
    drift,
};

const EPOCH_MS: u64 = 1_764_000_000_000;
const MS: Duration = Duration::from_millis(1);
const LEASE: Duration = Duration::from_secs(3);

/// One engine over `n` reference nodes. Requests wait in `pending` until the test answers.
struct Bed {
    nodes: Vec<Store>,
    /// Milliseconds each node's clock runs ahead.
    skew: Vec<u64>,
    now: Instant,
    engine: Engine,
    pending: Vec<(Request, u32, RedisOp)>,
    events: Vec<Event>,
}

impl Bed {
    fn new(n: u32, client: u128) -> Self {
        let now = Instant::from_nanos(1_000_000_000);
        let mut config = Config::new(ClientId(client));
        config.protocol = Protocol::Redlock { nodes: n };
        let mut bed = Bed {
            nodes: (0..n).map(|_| Store::new()).collect(),
            skew: vec![0; n as usize],
            now,
            engine: Engine::new(config, now).expect("config"),
            pending: Vec::new(),
            events: Vec::new(),
        };
        bed.drain();
        bed
    }

    fn drain(&mut self) {
        while let Some(out) = self.engine.poll_output() {
            match out {
                Output::Request(r) => {
                    let Op::Redlock { node, op } = r.op.clone() else {
                        panic!("not a Redlock op: {:?}", r.op)
                    };
                    self.pending.push((r, node, op));
                }
                Output::Event(e) => self.events.push(e),
            }
        }
    }

    fn cmd(&mut self, cmd: Command) {
        self.engine.handle_input(self.now, Input::Command(cmd));
        self.drain();
    }

    fn at(&mut self, d: Duration) {
        self.now = self.now + d;
        self.engine.handle_timeout(self.now);
        self.drain();
    }

    /// Runs on its node and answers the oldest pending request of `script` to `node`.
    fn answer(&mut self, node: u32, script: Script) -> Value {
        let i = self
            .pending
            .iter()
            .position(|(_, n, op)| {
                *n == node && matches!(op, RedisOp::Eval { script: s, .. } if *s == script)
            })
            .unwrap_or_else(|| panic!("no {} pending for node {node}", script.name()));
        let (request, _, op) = self.pending.remove(i);
        let RedisOp::Eval { script, keys, args } = op else {
            unreachable!()
        };
        let ms = EPOCH_MS + self.skew[node as usize] + self.now.as_nanos() / 1_000_000;
        let reply = self.nodes[node as usize]
            .eval(ms, script, &keys, &args)
            .expect("script")
            .reply;
        self.reply(request, Ok(Response::Redis(reply.clone())));
        reply
    }

    /// Fails the oldest pending request to `node`.
    fn fail(&mut self, node: u32) {
        let i = self
            .pending
            .iter()
            .position(|(_, n, _)| *n == node)
            .expect("a request to fail");
        let (request, _, _) = self.pending.remove(i);
        let e = TransportError::Unavailable("connection refused".into());
        self.reply(request, Err(e));
    }

    fn reply(&mut self, request: Request, reply: dlock_core::Reply) {
        self.engine.handle_input(
            self.now,
            Input::Reply {
                id: request.id,
                reply,
            },
        );
        self.drain();
    }

    /// Answers every pending request of `script`, node by node.
    fn answer_all(&mut self, script: Script) {
        while let Some(node) = self
            .pending
            .iter()
            .find(|(_, _, op)| matches!(op, RedisOp::Eval { script: s, .. } if *s == script))
            .map(|(_, n, _)| *n)
        {
            self.answer(node, script);
        }
    }

    fn pending(&self, script: Script) -> Vec<u32> {
        self.pending
            .iter()
            .filter(|(_, _, op)| matches!(op, RedisOp::Eval { script: s, .. } if *s == script))
            .map(|(_, n, _)| *n)
            .collect()
    }

    /// Another owner takes the lock on `node` directly.
    fn occupy(&mut self, node: u32) {
        let keys = LockKeys::new("job");
        let op = dlock_core::redis::acquire(
            keys.clone(),
            "ffffffffffffffffffffffffffffffff-1",
            LEASE,
            1,
            dlock_core::redis::Mode::Try,
            LEASE,
            dlock_core::redis::Fairness::Fair,
        );
        let RedisOp::Eval { script, keys, args } = op else {
            unreachable!()
        };
        let ms = EPOCH_MS + self.now.as_nanos() / 1_000_000;
        self.nodes[node as usize]
            .eval(ms, script, &keys, &args)
            .expect("acquire");
    }

    fn owner_on(&mut self, node: u32) -> Option<String> {
        let ms = EPOCH_MS + self.now.as_nanos() / 1_000_000;
        self.nodes[node as usize]
            .hget_at(ms, LockKeys::new("job").lock(), "owner")
            .expect("hget")
    }

    fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }
}

fn acquire(op: u64, wait: Wait) -> Command {
    Command::Acquire(Acquire {
        op: OpId(op),
        name: "job".into(),
        owner: 1,
        lease: LEASE,
        wait,
        max_hold: None,
        fair: true,
        kind: Kind::Mutex,
    })
}

fn acquired(events: &[Event]) -> (HoldId, u64, Instant) {
    match events {
        [
            Event::Acquired {
                hold,
                fencing_token,
                valid_until,
                ..
            },
        ] => (*hold, *fencing_token, *valid_until),
        other => panic!("expected one acquired event, got {other:?}"),
    }
}

#[test]
fn quorum_is_a_strict_majority() {
    assert_eq!(
        [1, 2, 3, 4, 5, 6, 7].map(quorum),
        [1, 2, 2, 3, 3, 4, 4],
        "majorities of 1..=7 nodes"
    );
    let mut config = Config::new(ClientId(1));
    config.protocol = Protocol::Redlock { nodes: 0 };
    assert!(matches!(
        Engine::new(config, Instant::from_nanos(0)),
        Err(Error::InvalidConfig(_))
    ));
}

#[test]
fn a_majority_grants_and_validity_counts_from_the_first_send() {
    let mut bed = Bed::new(5, 1);
    let sent = bed.now;
    bed.cmd(acquire(1, Wait::No));
    assert_eq!(bed.pending(Script::Acquire), vec![0, 1, 2, 3, 4]);
    // Two answer quickly, the third only 300 ms later: the hold is valid from the send, not
    // from when the majority was complete.
    bed.answer(0, Script::Acquire);
    bed.answer(1, Script::Acquire);
    assert!(bed.take_events().is_empty(), "two of five is no majority");
    bed.at(300 * MS);
    bed.answer(2, Script::Acquire);
    bed.answer_all(Script::Raise);
    let (_, token, valid_until) = acquired(&bed.take_events());
    assert_eq!(valid_until, sent + LEASE - drift(LEASE));
    assert!(token > 0);
    // The two silent nodes are not waited for; their late grants join the tenure.
    bed.answer(3, Script::Acquire);
    bed.answer(4, Script::Acquire);
    assert!(
        bed.pending(Script::Release).is_empty(),
        "nothing given back"
    );
    assert!(bed.take_events().is_empty());
}

#[test]
fn the_token_is_the_largest_counter_and_is_raised_on_a_majority() {
    let mut bed = Bed::new(3, 1);
    // Node 2's clock runs 40 ms ahead, so its counter (time × 1000) is the largest.
    bed.skew = vec![0, 0, 40];
    bed.cmd(acquire(1, Wait::No));
    let counter = |bed: &mut Bed, n| match bed.answer(n, Script::Acquire) {
        Value::Array(v) => match v[1] {
            Value::Int(c) => c as u64,
            _ => panic!("{v:?}"),
        },
        other => panic!("{other:?}"),
    };
    let ahead = counter(&mut bed, 2);
    let behind = counter(&mut bed, 0);
    assert!(ahead > behind);
    // A majority granted; node 0 is behind and gets a RAISE, node 2 already carries the token.
    assert_eq!(bed.pending(Script::Raise), vec![0]);
    // A late grant that is behind is raised too.
    counter(&mut bed, 1);
    assert_eq!(bed.pending(Script::Raise), vec![0, 1]);
    assert!(
        bed.take_events().is_empty(),
        "one node carrying it is no majority"
    );
    let max = ahead;
    bed.answer(0, Script::Raise);
    let (_, token, _) = acquired(&bed.take_events());
    assert_eq!(token, max);
    bed.answer(1, Script::Raise);
    // Every node that carries the tenure records its token, and counters never go back.
    let statuses: Vec<Result<LockStatus, Error>> = (0..3)
        .map(|n| {
            let keys = LockKeys::new("job");
            let op = dlock_core::redis::status(keys.clone());
            let RedisOp::Eval { script, keys, args } = op else {
                unreachable!()
            };
            let ms = EPOCH_MS + bed.now.as_nanos() / 1_000_000;
            let v = bed.nodes[n].eval(ms, script, &keys, &args).unwrap().reply;
            dlock_core::redis::parse_status(&v)
        })
        .collect();
    for s in &statuses {
        let s = s.as_ref().unwrap();
        assert_eq!((s.fencing_token, s.latest_token), (token, token));
    }
    let merged = merge_status(&statuses).unwrap();
    assert_eq!(merged.fencing_token, token);
    assert!(merged.owner.is_some());
}

#[test]
fn a_raise_refused_by_too_many_nodes_fails_the_attempt_and_gives_everything_back() {
    let mut bed = Bed::new(3, 1);
    bed.skew = vec![0, 0, 40];
    bed.cmd(acquire(1, Wait::No));
    for n in [2, 0, 1] {
        bed.answer(n, Script::Acquire);
    }
    // Both RAISEs fail: only node 2 carries the token, which is no majority.
    bed.fail(0);
    bed.fail(1);
    assert_eq!(bed.pending(Script::Release), vec![0, 1, 2]);
    bed.answer_all(Script::Release);
    for n in 0..3 {
        assert_eq!(bed.owner_on(n), None);
    }
    match bed.take_events().as_slice() {
        [Event::Failed { op: OpId(1), .. }] => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_busy_majority_ends_a_try_acquire_and_releases_the_minority_it_got() {
    let mut bed = Bed::new(3, 1);
    bed.occupy(1);
    bed.occupy(2);
    bed.cmd(acquire(1, Wait::No));
    bed.answer(0, Script::Acquire);
    assert!(bed.owner_on(0).is_some());
    bed.answer(1, Script::Acquire);
    assert!(bed.take_events().is_empty());
    bed.answer(2, Script::Acquire);
    assert_eq!(
        bed.take_events(),
        vec![Event::NotAcquired {
            op: OpId(1),
            reason: NotAcquired::Busy
        }]
    );
    bed.answer_all(Script::Release);
    assert_eq!(bed.owner_on(0), None, "the node it got was given back");
}

#[test]
fn unreachable_nodes_fail_a_try_acquire_with_their_error() {
    let mut bed = Bed::new(3, 1);
    bed.cmd(acquire(1, Wait::No));
    bed.answer(0, Script::Acquire);
    bed.fail(1);
    bed.fail(2);
    match bed.take_events().as_slice() {
        [
            Event::Failed {
                op: OpId(1),
                error: Error::Unavailable(_),
            },
        ] => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_silent_node_times_out_after_a_third_of_the_lease() {
    let mut bed = Bed::new(3, 1);
    bed.cmd(acquire(1, Wait::No));
    bed.answer(0, Script::Acquire);
    bed.at(LEASE / 3 - MS);
    assert!(bed.take_events().is_empty());
    bed.at(MS);
    assert!(matches!(
        bed.take_events().as_slice(),
        [Event::Failed {
            error: Error::Timeout,
            ..
        }]
    ));
}

#[test]
fn a_waiter_backs_off_at_random_and_takes_the_lock_once_it_is_free() {
    let mut retries = Vec::new();
    for client in [1, 2] {
        let mut bed = Bed::new(3, client);
        for n in 0..3 {
            bed.occupy(n);
        }
        bed.cmd(acquire(1, Wait::Forever));
        bed.answer_all(Script::Acquire);
        bed.answer_all(Script::Release);
        // The next attempt comes after a random pause of 1 ms to 10 ms.
        let start = bed.now;
        while bed.pending(Script::Acquire).is_empty() {
            bed.at(MS / 4);
        }
        let pause = Duration::from_nanos(bed.now.as_nanos() - start.as_nanos());
        assert!((MS..=10 * MS).contains(&pause), "{pause:?}");
        retries.push(pause);
        // The holder lets go; the next attempt succeeds.
        bed.nodes = (0..3).map(|_| Store::new()).collect();
        bed.answer_all(Script::Acquire);
        bed.answer_all(Script::Raise);
        acquired(&bed.take_events());
        let stats = bed.engine.stats();
        assert_eq!((stats.locks[0].acquired, stats.locks[0].handed_off), (1, 1));
    }
    assert_ne!(retries[0], retries[1], "two clients back off alike");
}

#[test]
fn renewals_need_a_majority_and_a_majority_of_strangers_means_lost() {
    let mut bed = Bed::new(3, 1);
    bed.cmd(acquire(1, Wait::No));
    bed.answer_all(Script::Acquire);
    bed.answer_all(Script::Raise);
    let (hold, _, first) = acquired(&bed.take_events());
    // A renewal a third of a lease later, answered by two of three nodes, moves the validity.
    bed.at(LEASE / 3);
    let renew_sent = bed.now;
    assert_eq!(bed.pending(Script::Extend), vec![0, 1, 2]);
    bed.answer(0, Script::Extend);
    assert!(bed.take_events().is_empty());
    bed.answer(1, Script::Extend);
    assert_eq!(
        bed.take_events(),
        vec![Event::Renewed {
            hold,
            valid_until: renew_sent + LEASE - drift(LEASE)
        }]
    );
    assert!(renew_sent + LEASE - drift(LEASE) > first);
    bed.fail(2);
    // Two nodes restart empty: the next renewal is refused by a majority, so the hold is lost
    // at once, without waiting for its validity.
    bed.nodes[0] = Store::new();
    bed.nodes[1] = Store::new();
    bed.at(LEASE / 3);
    bed.answer(0, Script::Extend);
    bed.answer(1, Script::Extend);
    assert_eq!(
        bed.take_events(),
        vec![Event::Lost {
            hold,
            reason: LostReason::NotOwner
        }]
    );
}

#[test]
fn reentry_is_counted_by_the_engine_and_release_goes_to_every_node() {
    let mut bed = Bed::new(3, 1);
    bed.cmd(acquire(1, Wait::No));
    bed.answer_all(Script::Acquire);
    bed.answer_all(Script::Raise);
    let (hold, token, _) = acquired(&bed.take_events());
    bed.cmd(acquire(2, Wait::No));
    assert!(bed.pending.is_empty(), "a reentry sends nothing");
    match bed.take_events().as_slice() {
        [
            Event::Acquired {
                hold: h,
                fencing_token,
                count: 2,
                ..
            },
        ] => assert_eq!((*h, *fencing_token), (hold, token)),
        other => panic!("{other:?}"),
    }
    bed.cmd(Command::Release { op: OpId(3), hold });
    assert_eq!(
        bed.take_events(),
        vec![Event::Released {
            op: OpId(3),
            hold,
            count: 1
        }]
    );
    bed.cmd(Command::Release { op: OpId(4), hold });
    assert_eq!(bed.pending(Script::Release), vec![0, 1, 2]);
    bed.answer(0, Script::Release);
    bed.fail(1);
    assert!(bed.take_events().is_empty());
    bed.answer(2, Script::Release);
    assert_eq!(
        bed.take_events(),
        vec![Event::Released {
            op: OpId(4),
            hold,
            count: 0
        }]
    );
}

#[test]
fn the_majority_view_of_status() {
    let held = |owner: &str, token: u64, ttl_ms: u64| LockStatus {
        owner: Some(owner.into()),
        count: 1,
        fencing_token: token,
        ttl: Some(Duration::from_millis(ttl_ms)),
        latest_token: token,
        waiters: Vec::new(),
    };
    let down = || Err(Error::Unavailable("refused".into()));
    // A late grant still shows its own (larger) counter, one node is down: the majority's
    // owner, its token, and the time until fewer than three of five hold it.
    let nodes = vec![
        Ok(held("a-1", 7, 900)),
        Ok(held("a-1", 7, 800)),
        Ok(held("a-1", 9, 950)),
        Ok(held("a-1", 7, 700)),
        down(),
    ];
    let merged = merge_status(&nodes).unwrap();
    assert_eq!(merged.owner.as_deref(), Some("a-1"));
    assert_eq!(merged.fencing_token, 7);
    assert_eq!(merged.ttl, Some(Duration::from_millis(800)));
    assert_eq!(merged.latest_token, 9);
    // No owner holds a majority: free.
    let split = vec![Ok(held("a-1", 7, 900)), Ok(held("b-1", 8, 900)), down()];
    assert_eq!(merge_status(&split).unwrap().owner, None);
    // Fewer than a majority answered.
    let dark = vec![Ok(held("a-1", 7, 900)), down(), down()];
    assert!(matches!(merge_status(&dark), Err(Error::Unavailable(_))));
}
