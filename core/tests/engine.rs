//! The engine's contract, case by case, on the reference Redis with an instant network.

use std::time::Duration;

use dlock_core::redis::reference::Store;
use dlock_core::redis::{self, LockKeys, RedisOp, Value};
use dlock_core::{
    Acquire, AcquireMulti, ClientId, Command, Config, Engine, Error, Event, HoldId, Input, Instant,
    Kind, Leader, LostReason, MAX_MULTI, Member, NotAcquired, Notice, Op, OpId, Output,
    RESERVED_IDS, Request, RequestId, Response, Wait, drift,
};

const EPOCH_MS: u64 = 1_764_000_000_000;
const SEC: Duration = Duration::from_secs(1);

/// Engines and the reference Redis, with a network that delivers at once (or not at all).
struct Bed {
    store: Store,
    now: Instant,
    engines: Vec<Engine>,
    events: Vec<Vec<Event>>,
    /// Requests a client sent while its link was cut: never answered.
    cut: Vec<bool>,
    sent: Vec<Vec<RedisOp>>,
    /// Requests a client sent while its link was slow: run and answered by [`Bed::deliver`].
    slow: Vec<Option<Vec<Request>>>,
    /// The channels each client subscribed to besides its wake-up channel (elections').
    subscribed: Vec<Vec<String>>,
}

impl Bed {
    fn new(clients: usize) -> Self {
        let now = Instant::from_nanos(1_000_000_000);
        let engines = (0..clients)
            .map(|i| Engine::new(Config::new(ClientId(0xabc0 + i as u128)), now).expect("config"))
            .collect();
        let mut bed = Bed {
            store: Store::new(),
            now,
            engines,
            events: vec![Vec::new(); clients],
            cut: vec![false; clients],
            sent: vec![Vec::new(); clients],
            slow: vec![None; clients],
            subscribed: vec![Vec::new(); clients],
        };
        bed.settle();
        bed
    }

    fn cmd(&mut self, c: usize, cmd: Command) {
        self.engines[c].handle_input(self.now, Input::Command(cmd));
        self.settle();
    }

    fn acquire(&mut self, c: usize, op: u64, name: &str, wait: Wait) {
        self.cmd(c, acquire(op, name, 1, 10 * SEC, wait));
    }

    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        // Step through every timer on the way, as a driver sleeping until poll_timeout would.
        loop {
            let next = self.engines.iter().filter_map(|e| e.poll_timeout()).min();
            match next {
                Some(at) if at <= end => {
                    self.now = self.now.max(at);
                    for e in &mut self.engines {
                        e.handle_timeout(self.now);
                    }
                    self.settle();
                }
                _ => break,
            }
        }
        self.now = end;
        for e in &mut self.engines {
            e.handle_timeout(end);
        }
        self.settle();
    }

    fn settle(&mut self) {
        loop {
            let mut progress = false;
            for c in 0..self.engines.len() {
                while let Some(out) = self.engines[c].poll_output() {
                    progress = true;
                    match out {
                        Output::Event(e) => self.events[c].push(e),
                        Output::Request(r) => self.serve(c, r),
                    }
                }
            }
            if !progress {
                return;
            }
        }
    }

    fn serve(&mut self, c: usize, Request { id, op }: Request) {
        let Op::Redis(op) = op else {
            panic!("a Redis engine sent {op:?}")
        };
        self.sent[c].push(op.clone());
        if self.cut[c] {
            return;
        }
        match &mut self.slow[c] {
            Some(slow) => slow.push(Request {
                id,
                op: Op::Redis(op),
            }),
            None => self.run(c, id, op),
        }
    }

    /// Runs request `id` of client `c` on the store and answers it.
    fn run(&mut self, c: usize, id: RequestId, op: RedisOp) {
        let reply = match op {
            RedisOp::Subscribe { channel } => {
                if channel != self.engines[c].wake_channel() {
                    self.subscribed[c].push(channel);
                }
                Ok(Value::Status("OK".into()))
            }
            RedisOp::Eval { script, keys, args } => {
                let ms = EPOCH_MS + self.now.as_nanos() / 1_000_000;
                let outcome = self
                    .store
                    .eval(ms, script, &keys, &args)
                    .expect("script runs");
                for (channel, payload) in outcome.published {
                    for to in 0..self.engines.len() {
                        if self.engines[to].wake_channel() == channel
                            || self.subscribed[to].contains(&channel)
                        {
                            let notice = Notice::Message {
                                channel: channel.clone(),
                                payload: payload.clone(),
                            };
                            self.engines[to].handle_input(self.now, Input::Notice(notice));
                        }
                    }
                }
                Ok(outcome.reply)
            }
        };
        let reply = reply.map(Response::Redis);
        self.engines[c].handle_input(self.now, Input::Reply { id, reply });
    }

    /// Runs and answers the requests client `c` sent while its link was slow, in the order
    /// they were sent, and makes it fast again.
    fn deliver(&mut self, c: usize) {
        for Request { id, op } in self.slow[c].take().unwrap_or_default() {
            let Op::Redis(op) = op else { unreachable!() };
            self.run(c, id, op);
        }
        self.settle();
    }

    fn take(&mut self, c: usize) -> Vec<Event> {
        std::mem::take(&mut self.events[c])
    }

    fn take_sent(&mut self, c: usize) -> Vec<RedisOp> {
        std::mem::take(&mut self.sent[c])
    }
}

fn acquire(op: u64, name: &str, owner: u64, lease: Duration, wait: Wait) -> Command {
    Command::Acquire(Acquire {
        lease,
        ..acquire_of(op, name, owner, wait)
    })
}

/// An acquire of lock `name` for ten seconds.
fn acquire_of(op: u64, name: &str, owner: u64, wait: Wait) -> Acquire {
    Acquire {
        op: OpId(op),
        name: name.into(),
        owner,
        lease: 10 * SEC,
        wait,
        max_hold: None,
        fair: true,
        kind: Kind::Mutex,
    }
}

fn acquired(events: &[Event]) -> (HoldId, u64, u32) {
    match events {
        [
            Event::Acquired {
                hold,
                fencing_token,
                count,
                ..
            },
        ] => (*hold, *fencing_token, *count),
        other => panic!("expected one Acquired, got {other:?}"),
    }
}

#[test]
fn invalid_input_is_refused_before_anything_is_sent() {
    let mut bed = Bed::new(1);
    bed.take_sent(0);
    let long = "x".repeat(1025);
    let cases: Vec<(Command, Error)> = vec![
        (acquire(1, "", 1, SEC, Wait::No), Error::EmptyName),
        (
            acquire(2, &long, 1, SEC, Wait::No),
            Error::NameTooLong { len: 1025 },
        ),
        (
            acquire(3, "a", 1, Duration::ZERO, Wait::No),
            Error::InvalidLease {
                lease: Duration::ZERO,
            },
        ),
        (
            acquire(4, "a", 1, Duration::from_millis(9), Wait::No),
            Error::InvalidLease {
                lease: Duration::from_millis(9),
            },
        ),
        (
            acquire(5, "a", 1, Duration::from_secs(8 * 86400), Wait::No),
            Error::InvalidLease {
                lease: Duration::from_secs(8 * 86400),
            },
        ),
        (
            Command::Acquire(Acquire {
                op: OpId(6),
                name: "a".into(),
                owner: 1,
                lease: SEC,
                wait: Wait::No,
                max_hold: Some(Duration::ZERO),
                fair: true,
                kind: Kind::Mutex,
            }),
            Error::InvalidLease {
                lease: Duration::ZERO,
            },
        ),
        (
            Command::Release {
                op: OpId(7),
                hold: HoldId(99),
            },
            Error::NotHeld { hold: HoldId(99) },
        ),
        (
            Command::Extend {
                op: OpId(8),
                hold: HoldId(99),
                lease: SEC,
            },
            Error::NotHeld { hold: HoldId(99) },
        ),
    ];
    for (cmd, expected) in cases {
        let op = cmd.op();
        bed.cmd(0, cmd);
        assert_eq!(
            bed.take(0),
            [Event::Failed {
                op,
                error: expected.clone()
            }]
        );
        assert!(expected.is_misuse());
        assert!(bed.take_sent(0).is_empty(), "{expected:?} sent a request");
    }
    // A 1024-byte name is fine.
    bed.acquire(0, 9, &"y".repeat(1024), Wait::No);
    acquired(&bed.take(0));
}

#[test]
fn a_busy_op_id_is_refused_and_the_first_command_goes_on() {
    let mut bed = Bed::new(2);
    bed.acquire(0, 1, "a", Wait::No);
    acquired(&bed.take(0));
    bed.acquire(1, 1, "a", Wait::Forever);
    bed.acquire(1, 1, "b", Wait::No);
    assert_eq!(
        bed.take(1),
        [Event::Failed {
            op: OpId(1),
            error: Error::DuplicateOp { op: OpId(1) }
        }]
    );
    bed.cmd(1, Command::Cancel { op: OpId(1) });
    assert_eq!(
        bed.take(1),
        [Event::NotAcquired {
            op: OpId(1),
            reason: NotAcquired::Cancelled
        }]
    );
}

#[test]
fn reentrant_acquires_share_one_tenure_and_one_fencing_token() {
    let mut bed = Bed::new(1);
    let keys = LockKeys::new("orders/42");
    bed.acquire(0, 1, "orders/42", Wait::No);
    let (hold, token, count) = acquired(&bed.take(0));
    // The first token of a lock is the server time (ms × 1000): see next_token.
    let ms = EPOCH_MS + bed.now.as_nanos() / 1_000_000;
    assert_eq!((token, count), (ms * 1000, 1));

    bed.acquire(0, 2, "orders/42", Wait::No);
    assert_eq!(acquired(&bed.take(0)), (hold, token, 2));
    let ms = EPOCH_MS + bed.now.as_nanos() / 1_000_000;
    assert_eq!(
        bed.store
            .hget_at(ms, keys.lock(), "count")
            .unwrap()
            .as_deref(),
        Some("2")
    );

    // Another owner of the same engine is another contender.
    bed.cmd(0, acquire(3, "orders/42", 2, SEC, Wait::No));
    assert_eq!(
        bed.take(0),
        [Event::NotAcquired {
            op: OpId(3),
            reason: NotAcquired::Busy
        }]
    );

    bed.cmd(0, Command::Release { op: OpId(4), hold });
    assert_eq!(
        bed.take(0),
        [Event::Released {
            op: OpId(4),
            hold,
            count: 1
        }]
    );
    assert_eq!(
        bed.store
            .hget_at(ms, keys.lock(), "count")
            .unwrap()
            .as_deref(),
        Some("1")
    );
    bed.cmd(0, Command::Release { op: OpId(5), hold });
    assert_eq!(
        bed.take(0),
        [Event::Released {
            op: OpId(5),
            hold,
            count: 0
        }]
    );
    assert_eq!(bed.store.hget_at(ms, keys.lock(), "owner").unwrap(), None);

    // The next tenure gets the next token; the fence counter stays.
    bed.cmd(0, acquire(6, "orders/42", 2, SEC, Wait::No));
    let (hold2, token2, _) = acquired(&bed.take(0));
    assert_ne!(hold2, hold);
    assert_eq!(token2, token + 1, "the same millisecond: the counter leads");
    bed.cmd(0, Command::Release { op: OpId(7), hold });
    assert_eq!(
        bed.take(0),
        [Event::Failed {
            op: OpId(7),
            error: Error::NotHeld { hold }
        }]
    );
}

#[test]
fn release_hands_the_lock_to_waiters_in_fifo_order_and_wakes_only_the_next() {
    let mut bed = Bed::new(3);
    bed.acquire(0, 1, "job", Wait::No);
    let (hold0, token0, _) = acquired(&bed.take(0));
    bed.acquire(1, 1, "job", Wait::Forever);
    bed.advance(Duration::from_millis(1));
    bed.acquire(2, 1, "job", Wait::Forever);
    assert!(bed.take(1).is_empty() && bed.take(2).is_empty());
    bed.take_sent(1);

    bed.cmd(
        0,
        Command::Release {
            op: OpId(2),
            hold: hold0,
        },
    );
    assert_eq!(
        bed.take(0),
        [Event::Released {
            op: OpId(2),
            hold: hold0,
            count: 0
        }]
    );
    // The wake-up alone made client 1 the holder: it acquired without another acquire request.
    let (hold1, token1, _) = acquired(&bed.take(1));
    assert!(token1 > token0, "tokens grow: {token1} after {token0}");
    assert!(bed.take_sent(1).iter().all(|op| matches!(
        op,
        RedisOp::Eval {
            script: redis::Script::Extend,
            ..
        }
    )));
    assert!(bed.take(2).is_empty());

    bed.cmd(
        1,
        Command::Release {
            op: OpId(2),
            hold: hold1,
        },
    );
    let (_, token2, _) = acquired(&bed.take(2));
    assert!(token2 > token1);
}

#[test]
fn a_hand_off_is_valid_for_the_waiter_lease_from_the_last_refresh_until_renewed() {
    let mut bed = Bed::new(2);
    bed.acquire(0, 1, "job", Wait::No);
    let (hold0, _, _) = acquired(&bed.take(0));
    bed.acquire(1, 1, "job", Wait::Forever);
    let queued_at = bed.now;
    bed.cut[1] = true; // the renewal after the hand-off will never be answered
    bed.cmd(
        0,
        Command::Release {
            op: OpId(2),
            hold: hold0,
        },
    );
    let wl = Config::new(ClientId(0)).waiter_lease;
    match bed.take(1).as_slice() {
        [Event::Acquired { valid_until, .. }] => {
            assert_eq!(*valid_until, queued_at + wl - drift(wl))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn validity_runs_out_without_renewal_and_the_lock_is_reported_lost() {
    let mut bed = Bed::new(1);
    bed.acquire(0, 1, "a", Wait::No);
    let sent = bed.now;
    let (hold, _, _) = acquired(&bed.take(0));
    bed.cut[0] = true;
    let lease = 10 * SEC;
    let valid_until = sent + lease - drift(lease);
    bed.advance(valid_until.saturating_duration_since(bed.now) - Duration::from_nanos(1));
    assert!(bed.take(0).is_empty(), "lost too early");
    bed.advance(Duration::from_nanos(1));
    assert_eq!(
        bed.take(0),
        [Event::Lost {
            hold,
            reason: LostReason::Expired
        }]
    );
    assert_eq!(bed.engines[0].hold(hold), None);
}

#[test]
fn the_watchdog_renews_at_a_third_of_the_lease() {
    let mut bed = Bed::new(1);
    bed.acquire(0, 1, "a", Wait::No);
    let (hold, _, _) = acquired(&bed.take(0));
    bed.take_sent(0);
    bed.advance(10 * SEC / 3 - Duration::from_millis(1));
    assert!(bed.take_sent(0).is_empty());
    bed.advance(Duration::from_millis(1));
    assert_eq!(bed.take_sent(0).len(), 1);
    match bed.take(0).as_slice() {
        [
            Event::Renewed {
                hold: h,
                valid_until,
            },
        ] => {
            assert_eq!(*h, hold);
            assert_eq!(*valid_until, bed.now + 10 * SEC - drift(10 * SEC));
        }
        other => panic!("{other:?}"),
    }
    // An hour later it is still held.
    bed.advance(Duration::from_secs(3600));
    assert!(
        bed.take(0)
            .iter()
            .all(|e| matches!(e, Event::Renewed { .. }))
    );
    assert!(bed.engines[0].hold(hold).is_some());
}

#[test]
fn renewals_are_batched_across_locks() {
    let mut bed = Bed::new(1);
    for i in 0..250 {
        bed.acquire(0, i, &format!("lock-{i}"), Wait::No);
    }
    assert_eq!(bed.take(0).len(), 250);
    bed.take_sent(0);
    bed.advance(10 * SEC / 3);
    let sent = bed.take_sent(0);
    assert_eq!(sent.len(), 3, "250 renewals in batches of at most 100");
    assert_eq!(bed.take(0).len(), 250);
}

#[test]
fn a_renewal_with_room_left_takes_the_holds_due_next_with_it() {
    // Ten-second leases: renewed every 3.33 s, those due within 1.67 s of each other together.
    let mut bed = Bed::new(1);
    let keys = |op: &RedisOp| match op {
        RedisOp::Eval {
            script: redis::Script::Extend,
            keys,
            ..
        } => keys.len(),
        other => panic!("sent {other:?}"),
    };
    for i in 0..150 {
        bed.acquire(0, i, &format!("early-{i}"), Wait::No);
    }
    // Two seconds later, beyond the sixth of a lease: a later burst of its own, once.
    bed.advance(2 * SEC);
    for i in 0..30 {
        bed.acquire(0, 150 + i, &format!("late-{i}"), Wait::No);
    }
    assert_eq!(bed.take(0).len(), 180);
    bed.take_sent(0);
    bed.advance(10 * SEC / 3);
    // 150 due: a full request and one with room for 50, which the 30 due later fill.
    let sent: Vec<usize> = bed.take_sent(0).iter().map(keys).collect();
    assert_eq!(sent, [100, 80]);
    assert_eq!(bed.take(0).len(), 180);
    // From then on all 180 are due together: still two requests per renewal.
    bed.advance(10 * SEC / 3);
    let sent: Vec<usize> = bed.take_sent(0).iter().map(keys).collect();
    assert_eq!(sent, [100, 80]);
}

#[test]
fn max_hold_stops_renewal_and_releases() {
    let mut bed = Bed::new(2);
    bed.cmd(
        0,
        Command::Acquire(Acquire {
            op: OpId(1),
            name: "a".into(),
            owner: 1,
            lease: SEC,
            wait: Wait::No,
            max_hold: Some(Duration::from_millis(2500)),
            fair: true,
            kind: Kind::Mutex,
        }),
    );
    let (hold, _, _) = acquired(&bed.take(0));
    bed.acquire(1, 1, "a", Wait::Forever);
    bed.advance(Duration::from_millis(2499));
    assert!(
        bed.take(0)
            .iter()
            .all(|e| matches!(e, Event::Renewed { .. }))
    );
    bed.advance(Duration::from_millis(1));
    assert_eq!(
        bed.take(0),
        [Event::Lost {
            hold,
            reason: LostReason::MaxHold
        }]
    );
    // It was released, and so handed to the waiter at once.
    let events = bed.take(1);
    assert!(matches!(events[0], Event::Acquired { .. }), "{events:?}");
}

#[test]
fn waits_end_by_deadline_or_cancel_and_leave_the_queue() {
    let mut bed = Bed::new(3);
    bed.acquire(0, 1, "a", Wait::No);
    let (hold, _, _) = acquired(&bed.take(0));
    let deadline = bed.now + Duration::from_millis(500);
    bed.acquire(1, 1, "a", Wait::Until(deadline));
    bed.acquire(2, 1, "a", Wait::Forever);
    bed.advance(Duration::from_millis(499));
    assert!(bed.take(1).is_empty());
    bed.advance(Duration::from_millis(1));
    assert_eq!(
        bed.take(1),
        [Event::NotAcquired {
            op: OpId(1),
            reason: NotAcquired::TimedOut
        }]
    );
    bed.cmd(2, Command::Cancel { op: OpId(1) });
    assert_eq!(
        bed.take(2),
        [Event::NotAcquired {
            op: OpId(1),
            reason: NotAcquired::Cancelled
        }]
    );
    // Cancelling again, or an unknown op, does nothing.
    bed.cmd(2, Command::Cancel { op: OpId(1) });
    assert!(bed.take(2).is_empty());
    // Both left the queue: the release frees the lock outright.
    bed.cmd(0, Command::Release { op: OpId(2), hold });
    let keys = LockKeys::new("a");
    let ms = EPOCH_MS + bed.now.as_nanos() / 1_000_000;
    assert_eq!(bed.store.hget_at(ms, keys.lock(), "owner").unwrap(), None);
    assert!(
        bed.store.is_empty(ms) || bed.store.len(ms) == 1,
        "only the fence counter stays"
    );
}

#[test]
fn a_give_up_waits_for_its_acquire_to_be_answered_before_it_leaves_the_queue() {
    // A transport may run requests in another order than they were sent (a pool of
    // connections does): a DEQUEUE sent behind the ACQUIRE it undoes could run first, and the
    // ACQUIRE would then queue a waiter nobody refreshes. So the DEQUEUE waits for the reply.
    let mut bed = Bed::new(2);
    bed.acquire(0, 1, "a", Wait::No);
    let (hold, _, _) = acquired(&bed.take(0));
    bed.take_sent(1);
    bed.slow[1] = Some(Vec::new());
    bed.acquire(1, 1, "a", Wait::Forever);
    bed.cmd(1, Command::Cancel { op: OpId(1) });
    let cancelled = Event::NotAcquired {
        op: OpId(1),
        reason: NotAcquired::Cancelled,
    };
    assert_eq!(bed.take(1), [cancelled]);
    let scripts = |sent: Vec<RedisOp>| -> Vec<redis::Script> {
        sent.into_iter()
            .map(|op| match op {
                RedisOp::Eval { script, .. } => script,
                other => panic!("sent {other:?}"),
            })
            .collect()
    };
    assert_eq!(scripts(bed.take_sent(1)), [redis::Script::Acquire]);
    // The ACQUIRE runs only now, after the give-up: it queues the waiter, and its reply
    // sends the DEQUEUE.
    bed.deliver(1);
    assert_eq!(scripts(bed.take_sent(1)), [redis::Script::Dequeue]);
    assert!(bed.take(1).is_empty());
    // Nobody waits: the release frees the lock outright.
    bed.cmd(0, Command::Release { op: OpId(2), hold });
    let keys = LockKeys::new("a");
    let ms = EPOCH_MS + bed.now.as_nanos() / 1_000_000;
    assert_eq!(bed.store.hget_at(ms, keys.lock(), "owner").unwrap(), None);
    assert!(bed.store.len(ms) <= 1, "only the fence counter stays");
    assert!(bed.take(1).is_empty());
}

#[test]
fn a_lost_wake_up_costs_at_most_a_third_of_the_waiter_lease() {
    let mut bed = Bed::new(2);
    bed.acquire(0, 1, "a", Wait::No);
    let (hold, _, _) = acquired(&bed.take(0));
    bed.acquire(1, 1, "a", Wait::Forever);
    // Release behind the engines' backs: the hand-off's message reaches nobody.
    let keys = LockKeys::new("a");
    let token = dlock_core::owner_token(ClientId(0xabc0), hold.0);
    let ms = EPOCH_MS + bed.now.as_nanos() / 1_000_000;
    let RedisOp::Eval { script, keys, args } =
        redis::release(keys.clone(), &token, 0, redis::Fairness::Fair)
    else {
        unreachable!()
    };
    bed.store.eval(ms, script, &keys, &args).unwrap();
    let wl = Config::new(ClientId(0)).waiter_lease;
    bed.advance(wl / 3);
    acquired(&bed.take(1));
}

#[test]
fn malformed_replies_fail_the_command_and_never_panic() {
    let garbage = [
        Value::Nil,
        Value::Int(7),
        Value::Status("OK".into()),
        Value::Data(b"\xff\xfe".to_vec()),
        Value::Array(vec![]),
        Value::Array(vec![Value::Int(1)]),
        Value::Array(vec![Value::Int(1), Value::Int(-5), Value::Int(1)]),
        Value::Array(vec![Value::Int(1), Value::Int(3), Value::Int(0)]),
        Value::Array(vec![Value::Int(9), Value::Int(9)]),
        Value::Array(vec![
            Value::Data(b"1".to_vec()),
            Value::Int(1),
            Value::Int(1),
        ]),
        Value::Array(vec![Value::Array(vec![])]),
    ];
    for value in garbage {
        let now = Instant::from_nanos(1);
        let mut engine = Engine::new(Config::new(ClientId(1)), now).unwrap();
        let _ = engine.poll_output();
        engine.handle_input(now, Input::Command(acquire(1, "a", 1, SEC, Wait::Forever)));
        let Some(Output::Request(req)) = engine.poll_output() else {
            panic!("no request")
        };
        engine.handle_input(
            now,
            Input::Reply {
                id: req.id,
                reply: Ok(Response::Redis(value.clone())),
            },
        );
        let events: Vec<Output> = std::iter::from_fn(|| engine.poll_output()).collect();
        assert!(
            events.iter().any(|o| matches!(
                o,
                Output::Event(Event::Failed {
                    error: Error::MalformedReply(_),
                    ..
                })
            )),
            "{value:?} gave {events:?}"
        );
    }
}

#[test]
fn a_renewal_refused_by_the_server_loses_the_lock_at_once() {
    let mut bed = Bed::new(2);
    bed.acquire(0, 1, "a", Wait::No);
    let (hold, _, _) = acquired(&bed.take(0));
    // Someone deletes the key (an operator, a failover that lost the write).
    bed.store = Store::new();
    bed.advance(10 * SEC / 3);
    assert_eq!(
        bed.take(0),
        [Event::Lost {
            hold,
            reason: LostReason::NotOwner
        }]
    );
    // Transport errors are retried instead, until validity runs out.
    bed.acquire(1, 1, "b", Wait::No);
    let (hold_b, _, _) = acquired(&bed.take(1));
    bed.cut[1] = true;
    bed.take_sent(1);
    bed.advance(9 * SEC);
    let extends = bed.take_sent(1).len();
    assert!(extends >= 3, "renewal retried only {extends} times");
    bed.advance(SEC);
    assert_eq!(
        bed.take(1),
        [Event::Lost {
            hold: hold_b,
            reason: LostReason::Expired
        }]
    );
}

#[test]
fn time_never_goes_backwards() {
    let mut bed = Bed::new(1);
    bed.acquire(0, 1, "a", Wait::No);
    let (hold, _, _) = acquired(&bed.take(0));
    let valid_until = bed.engines[0].hold(hold).unwrap().valid_until;
    bed.cut[0] = true;
    bed.advance(20 * SEC);
    assert_eq!(
        bed.take(0),
        [Event::Lost {
            hold,
            reason: LostReason::Expired
        }]
    );
    // An older `now` is taken as the newest seen: nothing revives or moves.
    bed.engines[0].handle_timeout(valid_until - 5 * SEC);
    bed.engines[0].handle_input(
        Instant::from_nanos(0),
        Input::Command(acquire(2, "b", 1, SEC, Wait::No)),
    );
    bed.settle();
    assert!(bed.engines[0].hold(hold).is_none());
}

#[test]
fn closing_is_sticky() {
    let mut bed = Bed::new(1);
    bed.acquire(0, 1, "a", Wait::No);
    let (hold, _, _) = acquired(&bed.take(0));
    bed.cut[0] = true;
    bed.acquire(0, 2, "b", Wait::Forever);
    bed.engines[0].handle_input(bed.now, Input::Notice(Notice::Closed));
    bed.settle();
    let events = bed.take(0);
    assert!(
        events.contains(&Event::Lost {
            hold,
            reason: LostReason::Closed
        }),
        "{events:?}"
    );
    assert!(
        events.contains(&Event::Failed {
            op: OpId(2),
            error: Error::Closed
        }),
        "{events:?}"
    );
    bed.acquire(0, 3, "c", Wait::No);
    assert_eq!(
        bed.take(0),
        [Event::Failed {
            op: OpId(3),
            error: Error::Closed
        }]
    );
    assert_eq!(bed.engines[0].poll_timeout(), None);
}

#[test]
fn names_cannot_escape_their_hash_tag() {
    for name in ["a{b}c", "}", "{", "%7B", "{}", "x%y"] {
        let keys = LockKeys::new(name);
        for key in [&keys.lock(), &keys.fence(), &keys.queue(), &keys.waiters()] {
            let open = key.find('{').unwrap();
            let close = open + key[open..].find('}').unwrap();
            assert_eq!(&key[open + 1..close], redis::escape(name));
            assert!(!redis::escape(name).contains(['{', '}']));
        }
    }
    assert_ne!(redis::escape("%7B"), redis::escape("{"));
    assert_eq!(redis::escape("a{b}c%"), "a%7Bb%7Dc%25");
}

#[test]
fn owner_tokens_are_unique_per_tenure_and_parse_back() {
    let client = ClientId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
    let token = dlock_core::owner_token(client, 0x2a);
    assert_eq!(token, "0123456789abcdef0011223344556677-2a");
    assert_eq!(dlock_core::token_seq(client, &token), Some(0x2a));
    assert_eq!(dlock_core::token_seq(ClientId(1), &token), None);
    for bad in [
        "",
        "-",
        "0123456789abcdef0011223344556677-",
        "0123456789abcdef0011223344556677-+1",
        "x-1",
    ] {
        assert_eq!(dlock_core::token_seq(client, bad), None, "{bad:?}");
    }
    // Written digit by digit, as `{:032x}-{:x}` would write it, at the edges too; and
    // Redisson's hash field as `{:032x}:{}`.
    for client in [0, 1, 0xf, u128::from(u64::MAX), u128::MAX] {
        for seq in [
            0,
            1,
            9,
            10,
            0xf,
            0x10,
            0xff,
            0x100,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let token = dlock_core::owner_token(ClientId(client), seq);
            assert_eq!(token.as_str(), format!("{client:032x}-{seq:x}"));
            assert_eq!(dlock_core::token_seq(ClientId(client), &token), Some(seq));
            let field = dlock_core::redisson::field(ClientId(client), seq);
            assert_eq!(field.as_str(), format!("{client:032x}:{seq}"));
        }
    }
}

#[test]
fn a_hand_off_notice_that_overtakes_the_queued_reply_is_taken_at_once() {
    let now = Instant::from_nanos(1_000_000_000);
    let mut store = Store::new();
    let exec = |store: &mut Store, op: Op| match op {
        Op::Redis(RedisOp::Eval { script, keys, args }) => {
            store.eval(EPOCH_MS + 1000, script, &keys, &args).unwrap()
        }
        other => unreachable!("{other:?}"),
    };
    let requests = |e: &mut Engine| -> Vec<Request> {
        std::iter::from_fn(|| e.poll_output())
            .filter_map(|o| match o {
                Output::Request(r) if !matches!(r.op, Op::Redis(RedisOp::Subscribe { .. })) => {
                    Some(r)
                }
                _ => None,
            })
            .collect()
    };
    let mut a = Engine::new(Config::new(ClientId(1)), now).unwrap();
    let mut b = Engine::new(Config::new(ClientId(2)), now).unwrap();
    a.handle_input(now, Input::Command(acquire(1, "x", 1, SEC, Wait::No)));
    let [req] = requests(&mut a).try_into().unwrap();
    let reply = exec(&mut store, req.op).reply;
    a.handle_input(
        now,
        Input::Reply {
            id: req.id,
            reply: Ok(Response::Redis(reply)),
        },
    );
    let (hold, token_a) = match a.poll_output() {
        Some(Output::Event(Event::Acquired {
            hold,
            fencing_token,
            ..
        })) => (hold, fencing_token),
        other => panic!("{other:?}"),
    };

    // B queues; its reply is still on the way when A releases and the wake-up arrives.
    b.handle_input(now, Input::Command(acquire(1, "x", 1, SEC, Wait::Forever)));
    let [queue] = requests(&mut b).try_into().unwrap();
    let queued = exec(&mut store, queue.op).reply;
    a.handle_input(now, Input::Command(Command::Release { op: OpId(2), hold }));
    let [release] = requests(&mut a).try_into().unwrap();
    let outcome = exec(&mut store, release.op);
    let (channel, payload) = outcome.published[0].clone();
    assert_eq!(channel, b.wake_channel());
    b.handle_input(now, Input::Notice(Notice::Message { channel, payload }));
    assert!(b.poll_output().is_none(), "nothing provable yet");
    b.handle_input(
        now,
        Input::Reply {
            id: queue.id,
            reply: Ok(Response::Redis(queued)),
        },
    );
    match b.poll_output() {
        Some(Output::Event(Event::Acquired { fencing_token, .. })) => {
            assert_eq!(fencing_token, token_a + 1)
        }
        other => panic!("the hand-off was not taken at once: {other:?}"),
    }
}

/// A client paused past its lease (a stopped process: no timers ran) finds on waking that its
/// hold's validity ran out. It reports the hold lost without renewing it first — a renewal
/// would only keep the lock from the others — and, under lock-delay, without giving it back.
#[test]
fn a_client_that_wakes_after_its_lease_reports_the_loss_without_renewing() {
    for lock_delay in [Duration::ZERO, 2 * SEC] {
        let mut bed = Bed::new(1);
        let mut config = Config::new(ClientId(7));
        config.lock_delay = lock_delay;
        bed.engines[0] = Engine::new(config, bed.now).unwrap();
        bed.acquire(0, 1, "job", Wait::No);
        let (hold, _, _) = acquired(&bed.take(0));
        bed.take_sent(0);
        bed.now = bed.now + 30 * SEC; // the pause: the lease is 10 s
        bed.engines[0].handle_timeout(bed.now);
        bed.settle();
        assert!(matches!(
            bed.take(0).as_slice(),
            [Event::Lost { hold: h, reason: LostReason::Expired }] if *h == hold
        ));
        let scripts: Vec<redis::Script> = bed
            .take_sent(0)
            .into_iter()
            .filter_map(|op| match op {
                RedisOp::Eval { script, .. } => Some(script),
                _ => None,
            })
            .collect();
        let expected: &[redis::Script] = if lock_delay.is_zero() {
            &[redis::Script::Release]
        } else {
            &[]
        };
        assert_eq!(scripts, expected, "lock-delay {lock_delay:?}");
    }
}

// --- multi-locks ---

fn multi(op: u64, names: &[&str], wait: Wait) -> Command {
    Command::AcquireMulti(AcquireMulti {
        op: OpId(op),
        names: names.iter().map(|n| n.to_string()).collect(),
        lease: 10 * SEC,
        wait,
        max_hold: None,
    })
}

/// The multi-lock acquired in `events`, besides renewals (a lock handed to a waiter is
/// renewed at once: its first validity is the waiter lease).
fn acquired_multi(events: &[Event]) -> (HoldId, Vec<Member>) {
    let events: Vec<&Event> = events
        .iter()
        .filter(|e| !matches!(e, Event::Renewed { .. }))
        .collect();
    match events.as_slice() {
        [Event::AcquiredMulti { hold, members, .. }] => (*hold, members.clone()),
        other => panic!("expected one AcquiredMulti, got {other:?}"),
    }
}

/// Whether client `c` can take `name` at once (and gives it back).
fn free(bed: &mut Bed, c: usize, name: &str) -> bool {
    bed.acquire(c, 900, name, Wait::No);
    let events = bed.take(c);
    let ended = events.iter().filter(|e| e.terminal_op().is_some());
    match ended.collect::<Vec<_>>().as_slice() {
        [Event::Acquired { hold, .. }] => {
            let hold = *hold;
            bed.cmd(
                c,
                Command::Release {
                    op: OpId(901),
                    hold,
                },
            );
            bed.take(c);
            true
        }
        [Event::NotAcquired { .. }] => false,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_multi_lock_takes_every_name_in_canonical_order_and_releases_them_all() {
    let mut bed = Bed::new(2);
    bed.take_sent(0);
    bed.cmd(0, multi(1, &["c", "a", "b", "a"], Wait::No));
    let (hold, members) = acquired_multi(&bed.take(0));
    assert!(
        hold.0 >= RESERVED_IDS,
        "a multi-lock's hold id is the engine's own"
    );
    let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert!(members.iter().all(|m| m.fencing_token > 0));
    // One acquire script per name, in canonical order.
    let keys: Vec<String> = bed
        .take_sent(0)
        .into_iter()
        .map(|op| match op {
            RedisOp::Eval { keys, .. } => keys[0].to_owned(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(keys, ["dlock:{a}:lock", "dlock:{b}:lock", "dlock:{c}:lock"]);
    for name in ["a", "b", "c"] {
        assert!(!free(&mut bed, 1, name), "{name} is held");
    }
    // Renewals are news about the multi-lock's hold, never about its members'.
    bed.advance(4 * SEC);
    let news = bed.take(0);
    assert!(!news.is_empty());
    assert!(
        news.iter()
            .all(|e| matches!(e, Event::Renewed { hold: h, .. } if *h == hold)),
        "{news:?}"
    );
    bed.cmd(
        0,
        Command::Extend {
            op: OpId(2),
            hold,
            lease: 20 * SEC,
        },
    );
    match bed.take(0).as_slice() {
        [
            Event::Extended {
                op,
                hold: h,
                valid_until,
            },
        ] => {
            assert_eq!((*op, *h), (OpId(2), hold));
            assert!(*valid_until > bed.now + 19 * SEC);
            // The engine's own view of the multi-lock: its earliest member's validity.
            assert_eq!(bed.engines[0].valid_until(hold), Some(*valid_until));
        }
        other => panic!("{other:?}"),
    }
    bed.cmd(0, Command::Release { op: OpId(3), hold });
    assert_eq!(bed.engines[0].valid_until(hold), None, "released");
    assert_eq!(
        bed.take(0),
        [Event::Released {
            op: OpId(3),
            hold,
            count: 0
        }]
    );
    for name in ["a", "b", "c"] {
        assert!(free(&mut bed, 1, name), "{name} is free again");
    }
    bed.cmd(0, Command::Release { op: OpId(4), hold });
    assert_eq!(
        bed.take(0),
        [Event::Failed {
            op: OpId(4),
            error: Error::NotHeld { hold }
        }]
    );
}

#[test]
fn a_multi_lock_is_all_or_none() {
    let mut bed = Bed::new(2);
    bed.acquire(1, 1, "b", Wait::No);
    let (b, _, _) = acquired(&bed.take(1));
    bed.cmd(0, multi(1, &["a", "b", "c"], Wait::No));
    assert_eq!(
        bed.take(0),
        [Event::NotAcquired {
            op: OpId(1),
            reason: NotAcquired::Busy
        }]
    );
    // "a" was taken and given back; "c" was never asked for.
    assert!(free(&mut bed, 1, "a"));
    assert!(free(&mut bed, 1, "c"));
    // A wait that times out gives back what it took too.
    bed.cmd(0, multi(2, &["a", "b"], Wait::Until(bed.now + SEC)));
    assert!(bed.take(0).is_empty());
    assert!(!free(&mut bed, 1, "a"), "a is held while waiting for b");
    bed.advance(2 * SEC);
    assert_eq!(
        bed.take(0),
        [Event::NotAcquired {
            op: OpId(2),
            reason: NotAcquired::TimedOut
        }]
    );
    assert!(free(&mut bed, 1, "a"));
    // So does a cancel.
    bed.cmd(0, multi(3, &["a", "b"], Wait::Forever));
    bed.cmd(0, Command::Cancel { op: OpId(3) });
    assert_eq!(
        bed.take(0),
        [Event::NotAcquired {
            op: OpId(3),
            reason: NotAcquired::Cancelled
        }]
    );
    assert!(free(&mut bed, 1, "a"));
    bed.cmd(
        1,
        Command::Release {
            op: OpId(2),
            hold: b,
        },
    );
    bed.take(1);
    assert!(free(&mut bed, 1, "b"), "the cancelled wait left b's queue");
}

#[test]
fn overlapping_multi_locks_queue_without_deadlock() {
    let mut bed = Bed::new(3);
    // 1 takes {b, a}; 2 asks for {a, c} and 0 for {c, b}: in canonical order both queue
    // behind 1 on their smallest shared name instead of each holding what the other needs.
    bed.cmd(1, multi(1, &["b", "a"], Wait::No));
    let (first, _) = acquired_multi(&bed.take(1));
    bed.cmd(2, multi(1, &["c", "a"], Wait::Forever));
    bed.cmd(0, multi(1, &["b", "c"], Wait::Forever));
    assert!(bed.take(2).is_empty() && bed.take(0).is_empty());
    assert!(free(&mut bed, 1, "d"));
    bed.cmd(
        1,
        Command::Release {
            op: OpId(2),
            hold: first,
        },
    );
    bed.take(1);
    // Hand-offs go in FIFO order: 2 was first in a's queue, 0 in b's; 2 then takes c, so 0
    // waits for c behind 2.
    let (second, _) = acquired_multi(&bed.take(2));
    assert!(bed.take(0).is_empty(), "0 waits for c, held by 2");
    bed.cmd(
        2,
        Command::Release {
            op: OpId(2),
            hold: second,
        },
    );
    bed.take(2);
    let (_, members) = acquired_multi(&bed.take(0));
    assert_eq!(members.len(), 2);
}

#[test]
fn losing_one_member_loses_the_multi_lock_once_and_frees_the_rest() {
    let mut bed = Bed::new(2);
    bed.cmd(0, multi(1, &["a", "b"], Wait::No));
    let (hold, _) = acquired_multi(&bed.take(0));
    // "b" is freed behind the holder's back (say, by an operator), and another client takes
    // it. The members were the engine's first tenures: "a" is 1, "b" is 2.
    let token = dlock_core::owner_token(ClientId(0xabc0), 2);
    let RedisOp::Eval { script, keys, args } =
        redis::release(LockKeys::new("b"), &token, 0, redis::Fairness::Fair)
    else {
        panic!("release is a script")
    };
    let ms = EPOCH_MS + bed.now.as_nanos() / 1_000_000;
    bed.store
        .eval(ms, script, &keys, &args)
        .expect("script runs");
    bed.acquire(1, 1, "b", Wait::No);
    acquired(&bed.take(1));
    bed.advance(4 * SEC); // the next renewal finds "b" not ours
    let events = bed.take(0);
    assert_eq!(
        events,
        [Event::Lost {
            hold,
            reason: LostReason::NotOwner
        }]
    );
    bed.advance(30 * SEC);
    assert!(bed.take(0).is_empty(), "one loss, reported once");
    assert!(free(&mut bed, 1, "a"), "a was given back");
    bed.cmd(0, Command::Release { op: OpId(2), hold });
    assert_eq!(
        bed.take(0),
        [Event::Failed {
            op: OpId(2),
            error: Error::NotHeld { hold }
        }]
    );
}

#[test]
fn bad_multi_locks_are_refused_before_anything_is_sent() {
    let mut bed = Bed::new(1);
    bed.take_sent(0);
    let many: Vec<String> = (0..=MAX_MULTI).map(|i| format!("n{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let reserved = RESERVED_IDS | 5;
    type Expect = fn(&Error) -> bool;
    let cases: Vec<(Command, Expect)> = vec![
        (multi(1, &[], Wait::No), |e| {
            matches!(e, Error::InvalidArgument(_))
        }),
        (multi(2, &many, Wait::No), |e| {
            matches!(e, Error::InvalidArgument(_))
        }),
        (multi(3, &["a", ""], Wait::No), |e| *e == Error::EmptyName),
        (multi(reserved, &["a"], Wait::No), |e| {
            matches!(e, Error::InvalidArgument(_))
        }),
        (acquire(4, "a", reserved, SEC, Wait::No), |e| {
            matches!(e, Error::InvalidArgument(_))
        }),
        (
            Command::Release {
                op: OpId(5),
                hold: HoldId(reserved),
            },
            |e| matches!(e, Error::NotHeld { .. }),
        ),
    ];
    for (cmd, expected) in cases {
        let op = cmd.op();
        bed.cmd(0, cmd);
        match bed.take(0).as_slice() {
            [Event::Failed { op: o, error }] if *o == op && expected(error) => {
                assert!(error.is_misuse(), "{error:?}");
            }
            other => panic!("{op:?}: {other:?}"),
        }
        assert!(bed.take_sent(0).is_empty(), "{op:?} sent a request");
    }
    // A lease out of range is the first member's error, and nothing is sent either.
    bed.cmd(
        0,
        Command::AcquireMulti(AcquireMulti {
            op: OpId(6),
            names: vec!["a".into(), "b".into()],
            lease: Duration::ZERO,
            wait: Wait::No,
            max_hold: None,
        }),
    );
    assert_eq!(
        bed.take(0),
        [Event::Failed {
            op: OpId(6),
            error: Error::InvalidLease {
                lease: Duration::ZERO
            }
        }]
    );
    assert!(bed.take_sent(0).is_empty());
    // An op id in use by a multi-lock's acquire is refused for any other command.
    bed.cmd(0, multi(7, &["a"], Wait::No));
    let (hold, _) = acquired_multi(&bed.take(0));
    bed.cmd(0, multi(8, &["a"], Wait::Forever));
    bed.acquire(0, 8, "z", Wait::No);
    assert_eq!(
        bed.take(0),
        [Event::Failed {
            op: OpId(8),
            error: Error::DuplicateOp { op: OpId(8) }
        }]
    );
    bed.cmd(0, Command::Release { op: OpId(9), hold });
    let events = bed.take(0);
    assert!(events.contains(&Event::Released {
        op: OpId(9),
        hold,
        count: 0
    }));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::AcquiredMulti { op: OpId(8), .. })),
        "{events:?}"
    );
}

// --- fair and non-fair ---

fn non_fair(op: u64, name: &str, wait: Wait) -> Command {
    match acquire(op, name, 1, 10 * SEC, wait) {
        Command::Acquire(a) => Command::Acquire(Acquire { fair: false, ..a }),
        _ => unreachable!(),
    }
}

#[test]
fn a_non_fair_acquire_barges_past_the_queue_and_a_fair_one_does_not() {
    let mut bed = Bed::new(3);
    bed.cmd(0, non_fair(1, "x", Wait::No));
    let (first, _, _) = acquired(&bed.take(0));
    // Client 1 queues; its link is cut, so the wake-up it gets when the lock is freed leads
    // to a request that is never answered: the lock stays free, with client 1 at the head of
    // the queue.
    bed.acquire(1, 1, "x", Wait::Forever);
    assert!(bed.take(1).is_empty());
    bed.cut[1] = true;
    bed.take_sent(0);
    bed.cmd(
        0,
        Command::Release {
            op: OpId(2),
            hold: first,
        },
    );
    assert_eq!(bed.take(0).len(), 1);
    match bed.take_sent(0).as_slice() {
        [RedisOp::Eval { args, .. }] => assert_eq!(args.last(), Some("free")),
        other => panic!("{other:?}"),
    }
    assert!(
        bed.take_sent(1)
            .iter()
            .any(|op| matches!(op, RedisOp::Eval { script, .. } if script.name() == "acquire")),
        "the freed lock's first waiter was woken and came to take it"
    );
    // A fair try defers to the live head of the queue; a non-fair one takes the free lock.
    bed.acquire(2, 1, "x", Wait::No);
    assert_eq!(
        bed.take(2),
        [Event::NotAcquired {
            op: OpId(1),
            reason: NotAcquired::Busy
        }]
    );
    bed.cmd(2, non_fair(2, "x", Wait::No));
    let (barger, _, _) = acquired(&bed.take(2));
    // The barger's (non-fair) release frees the lock again and wakes client 1, now heard.
    bed.cut[1] = false;
    bed.advance(3 * SEC); // client 1's unanswered request times out; it asks again, queued
    bed.take(1);
    bed.cmd(
        2,
        Command::Release {
            op: OpId(3),
            hold: barger,
        },
    );
    bed.take(2);
    let events = bed.take(1);
    assert!(
        matches!(events.as_slice(), [Event::Acquired { op: OpId(1), .. }]),
        "{events:?}"
    );
}

#[test]
fn a_fair_release_hands_over_even_to_a_non_fair_waiter() {
    let mut bed = Bed::new(2);
    bed.acquire(0, 1, "x", Wait::No);
    let (first, _, _) = acquired(&bed.take(0));
    bed.cmd(1, non_fair(1, "x", Wait::Forever));
    assert!(bed.take(1).is_empty());
    bed.take_sent(0);
    bed.cmd(
        0,
        Command::Release {
            op: OpId(2),
            hold: first,
        },
    );
    match bed.take_sent(0).as_slice() {
        [RedisOp::Eval { args, .. }] => assert_eq!(args.len(), 2, "a fair release: {args:?}"),
        other => panic!("{other:?}"),
    }
    acquired(&bed.take(1));
}

#[test]
fn zookeeper_refuses_non_fair_acquires_before_sending_anything() {
    let zk = dlock_core::Protocol::ZooKeeper(dlock_core::ZkSettings::new(SEC));
    refused_on(zk, non_fair(1, "x", Wait::No));
}

/// On a fresh engine of `protocol`, `cmd` (op 1) fails with `invalid-argument` before anything
/// is sent.
fn refused_on(protocol: dlock_core::Protocol, cmd: Command) {
    let mut config = Config::new(ClientId(9));
    config.protocol = protocol.clone();
    let mut engine = Engine::new(config, Instant::from_nanos(0)).unwrap();
    while engine.poll_output().is_some() {}
    engine.handle_input(Instant::from_nanos(1), Input::Command(cmd));
    match engine.poll_output() {
        Some(Output::Event(Event::Failed {
            op: OpId(1),
            error: Error::InvalidArgument(_),
        })) => {}
        other => panic!("{protocol:?}: {other:?}"),
    }
    assert_eq!(engine.poll_output(), None, "nothing sent");
}

#[test]
fn closing_loses_a_held_multi_lock_once_and_fails_a_waiting_one() {
    let mut bed = Bed::new(2);
    bed.acquire(1, 1, "c", Wait::No);
    acquired(&bed.take(1));
    bed.cmd(0, multi(1, &["a", "b"], Wait::No));
    let (held, _) = acquired_multi(&bed.take(0));
    bed.cmd(0, multi(2, &["b2", "c"], Wait::Forever));
    assert!(bed.take(0).is_empty(), "waits for c");
    bed.engines[0].handle_input(bed.now, Input::Notice(Notice::Closed));
    bed.settle();
    let mut events = bed.take(0);
    events.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(
        events,
        [
            Event::Failed {
                op: OpId(2),
                error: Error::Closed
            },
            Event::Lost {
                hold: held,
                reason: LostReason::Closed
            },
        ]
    );
    bed.cmd(0, multi(3, &["z"], Wait::No));
    assert_eq!(
        bed.take(0),
        [Event::Failed {
            op: OpId(3),
            error: Error::Closed
        }]
    );
}

fn permit(op: u64, name: &str, permits: u32, wait: Wait) -> Command {
    match acquire(op, name, 1, 10 * SEC, wait) {
        Command::Acquire(a) => Command::Acquire(Acquire {
            kind: Kind::Semaphore { permits },
            ..a
        }),
        _ => unreachable!(),
    }
}

/// Releases one level of `hold`; returns the levels left.
fn release(bed: &mut Bed, c: usize, op: u64, hold: HoldId) -> u32 {
    bed.cmd(c, Command::Release { op: OpId(op), hold });
    match bed.take(c).as_slice() {
        [
            Event::Released {
                op: o,
                hold: h,
                count,
            },
        ] if *o == OpId(op) && *h == hold => *count,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_semaphore_gives_each_acquire_a_permit_of_its_own_up_to_its_number() {
    let mut bed = Bed::new(2);
    // One owner, two permits: two holds, two tokens, no reentrancy.
    bed.cmd(0, permit(1, "pool", 2, Wait::No));
    let (a, token_a, count_a) = acquired(&bed.take(0));
    bed.cmd(0, permit(2, "pool", 2, Wait::No));
    let (b, token_b, count_b) = acquired(&bed.take(0));
    assert!(a != b && token_b > token_a && count_a == 1 && count_b == 1);
    // The lock of the same name is another thing, free.
    bed.acquire(1, 3, "pool", Wait::No);
    let (lock, _, _) = acquired(&bed.take(1));
    bed.cmd(1, permit(4, "pool", 2, Wait::No));
    assert_eq!(
        bed.take(1),
        [Event::NotAcquired {
            op: OpId(4),
            reason: NotAcquired::Busy
        }]
    );
    release(&mut bed, 1, 5, lock);
    // A permit's release frees it for the next acquire; the other permit stays held.
    release(&mut bed, 0, 6, a);
    bed.cmd(1, permit(7, "pool", 2, Wait::No));
    let (c, token_c, _) = acquired(&bed.take(1));
    assert!(token_c > token_b);
    // Both holds are renewed by the watchdog, like locks.
    bed.advance(4 * SEC);
    for (client, hold) in [(0, b), (1, c)] {
        let events = bed.take(client);
        assert!(
            matches!(events.as_slice(), [Event::Renewed { hold: h, .. }] if *h == hold),
            "{events:?}"
        );
    }
}

#[test]
fn permit_waiters_are_served_in_order_one_release_each() {
    let mut bed = Bed::new(3);
    bed.cmd(0, permit(1, "pool", 2, Wait::No));
    let (a, _, _) = acquired(&bed.take(0));
    bed.cmd(0, permit(2, "pool", 2, Wait::No));
    let (b, _, _) = acquired(&bed.take(0));
    bed.cmd(1, permit(1, "pool", 2, Wait::Forever));
    bed.advance(Duration::from_millis(1));
    bed.cmd(2, permit(1, "pool", 2, Wait::Forever));
    assert!(bed.take(1).is_empty() && bed.take(2).is_empty());
    // The first release goes to the first waiter only, by the wake-up alone.
    bed.take_sent(1);
    release(&mut bed, 0, 3, a);
    acquired(&bed.take(1));
    assert!(bed.take(2).is_empty());
    assert!(bed.take_sent(1).iter().all(|op| matches!(
        op,
        RedisOp::Eval {
            script: redis::Script::Extend,
            ..
        }
    )));
    release(&mut bed, 0, 4, b);
    acquired(&bed.take(2));
}

#[test]
fn a_semaphore_in_use_refuses_another_number_of_permits() {
    let mut bed = Bed::new(2);
    bed.cmd(0, permit(1, "pool", 2, Wait::No));
    let (a, _, _) = acquired(&bed.take(0));
    bed.cmd(1, permit(1, "pool", 3, Wait::Forever));
    match bed.take(1).as_slice() {
        [
            Event::Failed {
                op: OpId(1),
                error: Error::InvalidArgument(why),
            },
        ] => assert!(why.contains("2 permits"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Once nobody holds or waits, the number may change.
    release(&mut bed, 0, 2, a);
    bed.cmd(1, permit(2, "pool", 1, Wait::No));
    acquired(&bed.take(1));
    bed.cmd(0, permit(3, "pool", 1, Wait::No));
    assert_eq!(
        bed.take(0),
        [Event::NotAcquired {
            op: OpId(3),
            reason: NotAcquired::Busy
        }]
    );
}

#[test]
fn bad_semaphores_are_refused_before_anything_is_sent() {
    let mut bed = Bed::new(1);
    bed.take_sent(0);
    for (op, permits) in [(1, 0), (2, dlock_core::MAX_PERMITS + 1)] {
        bed.cmd(0, permit(op, "pool", permits, Wait::No));
        assert!(
            matches!(
                bed.take(0).as_slice(),
                [Event::Failed {
                    error: Error::InvalidArgument(_),
                    ..
                }]
            ),
            "{permits} permits"
        );
    }
    assert!(bed.take_sent(0).is_empty());
    // Redlock offers locks only.
    refused_on(
        dlock_core::Protocol::Redlock { nodes: 3 },
        permit(1, "pool", 2, Wait::No),
    );
}

fn rw(op: u64, name: &str, owner: u64, write: bool, wait: Wait) -> Command {
    match acquire(op, name, owner, 10 * SEC, wait) {
        Command::Acquire(a) => Command::Acquire(Acquire {
            kind: if write { Kind::Write } else { Kind::Read },
            ..a
        }),
        _ => unreachable!(),
    }
}

/// The acquire `op` was busy (renewals of other holds aside).
fn busy(events: &[Event], op: u64) {
    let events: Vec<&Event> = events
        .iter()
        .filter(|e| !matches!(e, Event::Renewed { .. }))
        .collect();
    assert_eq!(
        events,
        [&Event::NotAcquired {
            op: OpId(op),
            reason: NotAcquired::Busy
        }]
    );
}

#[test]
fn readers_share_a_writer_waits_for_them_and_later_readers_wait_for_the_writer() {
    let mut bed = Bed::new(3);
    bed.cmd(0, rw(1, "doc", 1, false, Wait::No));
    let (r0, t0, _) = acquired(&bed.take(0));
    bed.cmd(1, rw(1, "doc", 1, false, Wait::No));
    let (r1, t1, _) = acquired(&bed.take(1));
    assert!(t1 > t0, "every hold a token of its own");
    // A reader reenters its hold.
    bed.cmd(0, rw(2, "doc", 1, false, Wait::No));
    assert_eq!(acquired(&bed.take(0)), (r0, t0, 2));
    bed.cmd(2, rw(1, "doc", 1, true, Wait::No));
    busy(&bed.take(2), 1);
    bed.cmd(2, rw(2, "doc", 1, true, Wait::Forever));
    assert!(bed.take(2).is_empty());
    // Writer preference: a new reader does not pass the waiting writer.
    bed.cmd(1, rw(2, "doc", 2, false, Wait::No));
    busy(&bed.take(1), 2);
    for op in [3, 4] {
        release(&mut bed, 0, op, r0);
    }
    assert!(bed.take(2).is_empty(), "one reader is left");
    bed.take_sent(2);
    release(&mut bed, 1, 3, r1);
    // The last reader's release handed the lock to the writer by the wake-up alone.
    let (w, tw, _) = acquired(&bed.take(2));
    assert!(tw > t1);
    assert!(bed.take_sent(2).iter().all(|op| matches!(
        op,
        RedisOp::Eval {
            script: redis::Script::Extend,
            ..
        }
    )));
    bed.cmd(0, rw(5, "doc", 1, false, Wait::No));
    busy(&bed.take(0), 5);
    // The lock of the same name is another thing.
    bed.acquire(0, 6, "doc", Wait::No);
    acquired(&bed.take(0));
    bed.cmd(0, rw(7, "doc", 1, false, Wait::Forever));
    bed.cmd(1, rw(4, "doc", 2, false, Wait::Forever));
    release(&mut bed, 2, 3, w);
    // The writer's release hands the lock to every reader first in line.
    acquired(&bed.take(0));
    acquired(&bed.take(1));
}

#[test]
fn a_writer_downgrades_by_reading_then_releasing_the_write_hold() {
    let mut bed = Bed::new(2);
    bed.cmd(0, rw(1, "doc", 7, true, Wait::No));
    let (w, tw, _) = acquired(&bed.take(0));
    bed.cmd(0, rw(2, "doc", 7, true, Wait::No));
    assert_eq!(acquired(&bed.take(0)), (w, tw, 2), "a writer reenters");
    // Another owner of the same client is just another reader: it waits.
    bed.cmd(0, rw(3, "doc", 8, false, Wait::No));
    busy(&bed.take(0), 3);
    bed.cmd(1, rw(1, "doc", 1, false, Wait::Forever));
    // The writer's owner reads beside its write hold, past the queued reader.
    bed.cmd(0, rw(4, "doc", 7, false, Wait::No));
    let (r, tr, _) = acquired(&bed.take(0));
    assert!(tr > tw);
    // Reading, it still reenters its write hold (not an upgrade).
    bed.cmd(0, rw(7, "doc", 7, true, Wait::No));
    assert_eq!(acquired(&bed.take(0)), (w, tw, 3));
    assert_eq!(release(&mut bed, 0, 8, w), 2);
    for op in [5, 6] {
        release(&mut bed, 0, op, w);
    }
    // Downgraded: the read hold stays, and the waiting reader joins it.
    acquired(&bed.take(1));
    assert!(bed.engines[0].hold(r).is_some());
    bed.cmd(1, rw(2, "doc", 2, true, Wait::No));
    busy(&bed.take(1), 2);
}

#[test]
fn a_read_hold_is_never_upgraded_and_bad_rw_acquires_are_refused() {
    let mut bed = Bed::new(1);
    bed.cmd(0, rw(1, "doc", 1, false, Wait::No));
    acquired(&bed.take(0));
    bed.take_sent(0);
    let non_fair = match rw(3, "doc", 2, true, Wait::No) {
        Command::Acquire(a) => Command::Acquire(Acquire { fair: false, ..a }),
        _ => unreachable!(),
    };
    for cmd in [rw(2, "doc", 1, true, Wait::Forever), non_fair] {
        bed.cmd(0, cmd);
        assert!(
            matches!(
                bed.take(0).as_slice(),
                [Event::Failed {
                    error: Error::InvalidArgument(_),
                    ..
                }]
            ),
            "refused"
        );
    }
    assert!(bed.take_sent(0).is_empty(), "nothing sent");
    refused_on(
        dlock_core::Protocol::Redlock { nodes: 3 },
        rw(1, "doc", 1, true, Wait::No),
    );
}

fn leader(term: u64, value: &str) -> Option<Leader> {
    Some(Leader {
        term,
        value: value.into(),
    })
}

fn proclaim(op: u64, hold: HoldId, value: &str) -> Command {
    Command::Proclaim {
        op: OpId(op),
        hold,
        value: value.into(),
    }
}

/// The leaders observe `op` reported.
fn seen(events: &[Event], op: u64) -> Vec<Option<Leader>> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Leader { op: o, leader } if o.0 == op => Some(leader.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn an_election_leader_proclaims_resigns_and_observers_hear_every_change() {
    let mut bed = Bed::new(3);
    let observe = Command::Observe {
        op: OpId(9),
        name: "e".into(),
    };
    bed.cmd(2, observe);
    assert_eq!(seen(&bed.take(2), 9), [None], "nobody leads yet");

    bed.acquire(0, 1, "e", Wait::Forever);
    let (hold, term, _) = acquired(&bed.take(0));
    // Held but not proclaimed: no leader yet, and no news for the observer.
    bed.advance(SEC);
    assert_eq!(seen(&bed.take(2), 9), Vec::<Option<Leader>>::new());
    bed.cmd(0, proclaim(2, hold, "a:1"));
    assert_eq!(
        bed.take(0),
        [Event::Proclaimed {
            op: OpId(2),
            hold,
            term
        }]
    );
    assert_eq!(seen(&bed.take(2), 9), [leader(term, "a:1")]);

    bed.acquire(1, 1, "e", Wait::Forever);
    assert!(bed.take(1).is_empty(), "the second candidate queues");
    bed.cmd(0, proclaim(3, hold, "a:2"));
    assert_eq!(
        seen(&bed.take(2), 9),
        [leader(term, "a:2")],
        "a new value, same term"
    );

    bed.take_sent(0);
    bed.cmd(0, Command::Release { op: OpId(4), hold });
    assert!(
        matches!(
            &bed.take_sent(0)[..],
            [RedisOp::Eval {
                script: redis::Script::Resign,
                ..
            }]
        ),
        "a leader's final release resigns"
    );
    let (hold1, term1, _) = acquired(&bed.take(1));
    assert!(term1 > term);
    bed.cmd(1, proclaim(2, hold1, "b:1"));
    let heard = seen(&bed.take(2), 9);
    assert_eq!(heard.last(), Some(&leader(term1, "b:1")));
    assert!(heard.len() <= 2 && heard[..heard.len() - 1].iter().all(Option::is_none));

    bed.cmd(
        1,
        Command::Release {
            op: OpId(3),
            hold: hold1,
        },
    );
    assert_eq!(seen(&bed.take(2), 9), [None], "free after the last resigns");

    bed.cmd(2, Command::Cancel { op: OpId(9) });
    let reason = NotAcquired::Cancelled;
    assert_eq!(
        bed.take(2),
        [Event::NotAcquired {
            op: OpId(9),
            reason
        }]
    );
    bed.take_sent(2);
    bed.advance(60 * SEC);
    assert!(
        bed.take_sent(2).is_empty(),
        "a cancelled observer reads no more"
    );
}

#[test]
fn an_observer_notices_a_leader_that_dies_silently_within_its_lease() {
    let mut bed = Bed::new(2);
    bed.cmd(0, acquire(1, "e", 1, 10 * SEC, Wait::Forever));
    let (hold, term, _) = acquired(&bed.take(0));
    bed.cmd(0, proclaim(2, hold, "a"));
    bed.cmd(
        1,
        Command::Observe {
            op: OpId(5),
            name: "e".into(),
        },
    );
    assert_eq!(seen(&bed.take(1), 5), [leader(term, "a")]);
    // The leader's process dies: nothing more from it, not even a release.
    bed.cut[0] = true;
    bed.advance(9 * SEC);
    assert_eq!(seen(&bed.take(1), 5), Vec::<Option<Leader>>::new());
    let reads = bed
        .take_sent(1)
        .iter()
        .filter(|op| {
            matches!(
                op,
                RedisOp::Eval {
                    script: redis::Script::Leader,
                    ..
                }
            )
        })
        .count();
    assert!(
        reads <= 4,
        "{reads} reads in 9 s: one per waiter lease (3 s) at most"
    );
    bed.advance(2 * SEC);
    assert_eq!(
        seen(&bed.take(1), 5),
        [None],
        "seen free once its lease ran out"
    );
}

#[test]
fn elections_refuse_what_they_cannot_do_and_observers_end_on_close() {
    let mut bed = Bed::new(1);
    bed.cmd(0, proclaim(1, HoldId(77), "v"));
    assert!(matches!(
        &bed.take(0)[..],
        [Event::Failed {
            error: Error::NotHeld { .. },
            ..
        }]
    ));
    bed.acquire(0, 2, "e", Wait::Forever);
    let (hold, ..) = acquired(&bed.take(0));
    bed.cmd(
        0,
        proclaim(3, hold, &"v".repeat(dlock_core::MAX_VALUE_LEN + 1)),
    );
    assert!(matches!(
        &bed.take(0)[..],
        [Event::Failed {
            error: Error::InvalidArgument(_),
            ..
        }]
    ));
    let mut permit = acquire(4, "s", 1, 10 * SEC, Wait::Forever);
    if let Command::Acquire(a) = &mut permit {
        a.kind = Kind::Semaphore { permits: 2 };
    }
    bed.cmd(0, permit);
    let (permit, ..) = acquired(&bed.take(0));
    bed.take_sent(0);
    bed.cmd(0, proclaim(5, permit, "v"));
    assert!(matches!(
        &bed.take(0)[..],
        [Event::Failed {
            error: Error::InvalidArgument(_),
            ..
        }]
    ));
    bed.cmd(
        0,
        Command::Observe {
            op: OpId(6),
            name: String::new(),
        },
    );
    assert!(matches!(
        &bed.take(0)[..],
        [Event::Failed {
            error: Error::EmptyName,
            ..
        }]
    ));
    assert!(
        bed.take_sent(0).is_empty(),
        "nothing was sent for refused commands"
    );

    bed.cmd(
        0,
        Command::Observe {
            op: OpId(7),
            name: "e".into(),
        },
    );
    assert_eq!(seen(&bed.take(0), 7), [None]);
    bed.engines[0].handle_input(bed.now, Input::Notice(Notice::Closed));
    bed.settle();
    let events = bed.take(0);
    assert!(
        events.contains(&Event::Failed {
            op: OpId(7),
            error: Error::Closed
        }),
        "{events:?}"
    );
}

#[test]
fn stats_count_every_outcome_per_name_and_kind_from_injected_time() {
    use dlock_core::{BUCKETS, Histogram, LockStats};
    let ms = Duration::from_millis;
    let mut bed = Bed::new(1);
    let t0 = bed.now;
    bed.acquire(0, 1, "a", Wait::No);
    let (hold, _, _) = acquired(&bed.take(0));
    bed.acquire(0, 2, "a", Wait::No); // the same owner: a reentry
    bed.cmd(0, acquire(3, "a", 2, 10 * SEC, Wait::No)); // busy
    bed.cmd(0, acquire(4, "a", 3, 10 * SEC, Wait::Until(t0 + ms(500))));
    bed.advance(ms(500)); // op 4 times out
    bed.cmd(0, acquire(5, "a", 4, 10 * SEC, Wait::Forever)); // queued
    bed.cmd(0, acquire(6, "a", 5, 10 * SEC, Wait::Forever));
    bed.cmd(0, Command::Cancel { op: OpId(6) });
    bed.cmd(
        0,
        Command::Acquire(Acquire {
            kind: Kind::Semaphore { permits: 2 },
            ..acquire_of(7, "s", 6, Wait::Forever)
        }),
    );
    let live = bed.engines[0].stats();
    let a = live.get("a", Kind::Mutex).expect("a counted");
    assert_eq!((a.held, a.waiting), (1, 1));
    bed.advance(ms(4000));
    bed.cmd(0, Command::Release { op: OpId(8), hold });
    bed.cmd(0, Command::Release { op: OpId(9), hold });
    bed.engines[0].handle_input(bed.now, Input::Notice(Notice::Closed));
    bed.settle();
    let events = bed.take(0);
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Lost {
            reason: LostReason::Closed,
            ..
        }
    )));

    let histogram = |times: &[Duration]| {
        let mut h = Histogram::default();
        for &t in times {
            h.observe(t);
        }
        h
    };
    let stats = bed.engines[0].stats();
    let mut lost = [0; LostReason::ALL.len()];
    lost[LostReason::Closed.index()] = 1;
    let expected_a = LockStats {
        name: "a".into(),
        kind: Kind::Mutex,
        acquired: 2,
        handed_off: 1,
        reentered: 1,
        released: 1,
        busy: 1,
        timed_out: 1,
        cancelled: 1,
        failed: 0,
        // Op 1's at a third of its lease. Op 5's none: a handed tenure is renewed a third of
        // the waiter lease after the waiter's last request, and it is closed before then.
        renewals: 1,
        renewals_failed: 0,
        lost,
        held: 0,
        waiting: 0,
        // Op 1 at once; op 5 from 0.5 s to the release at 4.5 s.
        wait: histogram(&[Duration::ZERO, ms(4000)]),
        // Op 1's tenure until its release; op 5's from then until the close.
        hold: histogram(&[ms(4500), Duration::ZERO]),
    };
    assert_eq!(stats.locks[0], expected_a);
    assert_eq!(expected_a.wait.buckets[0], 1);
    assert_eq!(
        expected_a.wait.buckets[BUCKETS.partition_point(|&b| b < ms(4000))],
        1
    );
    assert_eq!(stats.locks[0].lost(&LostReason::Closed), 1);
    // The semaphore's permit is counted apart, under its own kind.
    let s = &stats.locks[1];
    assert_eq!(
        (s.name.as_str(), s.kind),
        ("s", Kind::Semaphore { permits: 2 })
    );
    assert_eq!((s.acquired, s.handed_off, s.released), (1, 0, 0));
    assert_eq!(s.lost(&LostReason::Closed), 1);
    assert_eq!(stats.locks.len(), 2);
}

#[test]
fn stats_count_names_past_the_limit_together() {
    use dlock_core::{MAX_STATS_NAMES, OTHER_NAMES};
    let mut bed = Bed::new(1);
    for i in 0..MAX_STATS_NAMES as u64 + 10 {
        bed.acquire(0, 2 * i + 1, &format!("n{i}"), Wait::No);
        let (hold, _, _) = acquired(&bed.take(0));
        bed.cmd(
            0,
            Command::Release {
                op: OpId(2 * i + 2),
                hold,
            },
        );
        bed.take(0);
    }
    let stats = bed.engines[0].stats();
    assert_eq!(stats.locks.len(), MAX_STATS_NAMES + 1);
    // Counted in the order taken (n0, n1, …, n10, …), shown sorted by name ("" first, then
    // n0, n1, n10, n100, …).
    assert!(
        stats
            .locks
            .windows(2)
            .all(|w| (&w[0].name, w[0].kind) < (&w[1].name, w[1].kind)),
        "sorted by name, then kind"
    );
    assert_eq!(stats.locks[0].name, OTHER_NAMES);
    let other = stats
        .get(OTHER_NAMES, Kind::Mutex)
        .expect("the rest, together");
    assert_eq!((other.acquired, other.released), (10, 10));
    assert_eq!(stats.get("n0", Kind::Mutex).map(|s| s.acquired), Some(1));
}

#[test]
fn observations_are_the_counts_one_by_one_when_kept() {
    use dlock_core::{MAX_OBSERVATIONS, Observation, Observed};
    let mut bed = Bed::new(1);
    bed.acquire(0, 1, "a", Wait::No);
    assert_eq!(
        bed.engines[0].poll_observation(),
        None,
        "not kept by default"
    );
    bed.engines[0].keep_observations(true);
    let (hold, _, _) = acquired(&bed.take(0));
    bed.advance(Duration::from_millis(2000));
    bed.cmd(0, Command::Release { op: OpId(2), hold });
    bed.acquire(0, 3, "a", Wait::No);
    let seen: Vec<Observation> = std::iter::from_fn(|| bed.engines[0].poll_observation()).collect();
    let of = |what| Observation {
        name: "a".into(),
        kind: Kind::Mutex,
        what,
    };
    let granted = Observed::Acquired {
        waited: Duration::ZERO,
        handed_off: false,
    };
    let held = Duration::from_millis(2000);
    let expected = [
        of(Observed::Released),
        of(Observed::Ended { held }),
        of(granted),
    ];
    assert_eq!(seen, expected);
    // A host that stops polling keeps the latest MAX_OBSERVATIONS only.
    for i in 0..MAX_OBSERVATIONS as u64 {
        bed.cmd(0, acquire(10 + i, "a", 1, 10 * SEC, Wait::No)); // reentries
    }
    let kept = std::iter::from_fn(|| bed.engines[0].poll_observation()).count();
    assert_eq!(kept, MAX_OBSERVATIONS);
    bed.engines[0].keep_observations(false);
    bed.cmd(0, acquire(1_000_000, "a", 1, 10 * SEC, Wait::No));
    assert_eq!(bed.engines[0].poll_observation(), None);
}

/// A MySQL engine whose acquire of "a" (lease 10 s, waiter lease 3 s) is queued: the ACQUIRE
/// it sent, and the time.
fn queued_on_mysql(poll: Duration) -> (Engine, Instant, Request) {
    use dlock_core::Protocol;
    use dlock_core::sql::{Dialect, SqlSettings};
    let mut config = Config::new(ClientId(7));
    let mut settings = SqlSettings::new(Dialect::Mysql);
    settings.poll_interval = poll;
    config.protocol = Protocol::Sql(settings);
    let now = Instant::from_nanos(1_000_000_000);
    let mut engine = Engine::new(config, now).expect("config");
    while engine.poll_output().is_some() {}
    engine.handle_input(
        now,
        Input::Command(acquire(1, "a", 1, 10 * SEC, Wait::Forever)),
    );
    let Some(Output::Request(req)) = engine.poll_output() else {
        panic!("no ACQUIRE sent")
    };
    (engine, now, req)
}

/// The statement a request runs, and its parameters.
fn statement(req: &Request) -> (dlock_core::sql::Statement, Vec<String>) {
    use dlock_core::sql::SqlOp;
    let Op::Sql(SqlOp::Query {
        statement, params, ..
    }) = &req.op
    else {
        panic!("not a statement: {:?}", req.op)
    };
    (
        *statement,
        params.iter().map(|p| format!("{p:?}")).collect(),
    )
}

/// A STATUS row of lock "a": held by `owner` in tenure `fence`, `pttl` ms left, the latest
/// fencing token `latest`.
fn status_row(owner: &str, fence: i64, pttl: i64, latest: i64) -> dlock_core::Reply {
    use dlock_core::sql::SqlValue;
    let owner = SqlValue::Text(owner.to_owned());
    let ints = [1, fence, pttl, latest].map(SqlValue::Int);
    Ok(Response::Sql(
        [vec![owner], ints.to_vec(), vec![SqlValue::Null]].concat(),
    ))
}

/// MySQL has no wake-ups: a queued waiter looks again an eighth of the poll interval after a
/// look that found a new tenure — or after it first queued — and each look that finds the
/// same tenure doubles that, up to the poll interval (PROTOCOL.md §18). A look reads the
/// lock's STATUS, which locks no row and commits nothing; only keeping the place in the queue
/// (at a third of the waiter lease) or taking the lock sends an ACQUIRE.
#[test]
fn a_mysql_waiter_looks_sooner_while_the_lock_changes_hands() {
    use dlock_core::sql::{SqlValue, Statement};
    let poll = Duration::from_millis(80);
    let (mut engine, mut now, first) = queued_on_mysql(poll);
    assert_eq!(statement(&first).0, Statement::Acquire);
    assert!(statement(&first).1[4].contains("wait"));
    let queued = [2, 10_000, 5].map(SqlValue::Int).to_vec();
    engine.handle_input(
        now,
        Input::Reply {
            id: first.id,
            reply: Ok(Response::Sql(queued)),
        },
    );
    // Each look answered "held by another, in the tenure with fencing token `latest`": the
    // longest wait until the next, and the statement that next look ran.
    let mut waits = Vec::new();
    for latest in [5, 5, 5, 5, 6, 6, 6] {
        assert_eq!(engine.poll_output(), None, "nothing but a timer");
        let at = engine.poll_timeout().expect("a next look");
        waits.push(at.saturating_duration_since(now));
        now = at;
        engine.handle_timeout(now);
        let Some(Output::Request(req)) = engine.poll_output() else {
            panic!("no look sent")
        };
        assert_eq!(statement(&req).0, Statement::Status, "a look only reads");
        let reply = status_row("someone-else", latest, 10_000, latest);
        engine.handle_input(now, Input::Reply { id: req.id, reply });
    }
    // Each wait is jittered between half of its interval and all of it.
    for (i, (wait, interval)) in waits.iter().zip([8, 4, 2, 1, 1, 8, 4]).enumerate() {
        let interval = poll / interval;
        assert!(
            *wait >= interval / 2 && *wait <= interval,
            "look {i}: waited {wait:?}, interval {interval:?}: {waits:?}"
        );
    }
}

/// A MySQL waiter's look decides what comes next: a lock handed to it after its place was
/// last confirmed is taken at once, as a wake-up would be; a free one is taken by ACQUIRE;
/// and the place is kept by ACQUIRE `refresh` in time, however often it looks.
#[test]
fn a_mysql_waiters_look_takes_a_handed_lock_and_keeps_its_place() {
    use dlock_core::sql::{SqlValue, Statement};
    let poll = Duration::from_millis(80);
    let next = |engine: &mut Engine, now: &mut Instant| {
        assert_eq!(engine.poll_output(), None, "nothing but a timer");
        *now = engine.poll_timeout().expect("a next look");
        engine.handle_timeout(*now);
        let Some(Output::Request(req)) = engine.poll_output() else {
            panic!("nothing sent")
        };
        req
    };
    let queue = |engine: &mut Engine, now: Instant, req: &Request| {
        let queued = [2, 10_000, 5].map(SqlValue::Int).to_vec();
        let reply = Ok(Response::Sql(queued));
        engine.handle_input(now, Input::Reply { id: req.id, reply });
    };

    // A queued waiter (its place confirmed at tenure 5) whose first look finds `status`
    // (owner `None`: its own token): what the engine does next.
    let first_look = |owner: Option<&str>, fence: i64, pttl: i64| {
        let (mut engine, mut now, first) = queued_on_mysql(poll);
        let token = statement(&first).1[1].clone();
        let token = token.trim_start_matches("Text(\"").trim_end_matches("\")");
        queue(&mut engine, now, &first);
        let look = next(&mut engine, &mut now);
        assert_eq!(statement(&look).0, Statement::Status);
        let reply = status_row(owner.unwrap_or(token), fence, pttl, fence.max(5));
        engine.handle_input(now, Input::Reply { id: look.id, reply });
        let out = engine.poll_output();
        assert_eq!(engine.poll_output(), None, "one output");
        out
    };

    // Handed to us (tenure 6, after our place was confirmed at 5): held, nothing sent.
    let Some(Output::Event(Event::Acquired { fencing_token, .. })) = first_look(None, 6, 2_000)
    else {
        panic!("a look that finds the lock handed over takes it")
    };
    assert_eq!(fencing_token, 6);

    // Ours, but not provably handed after our place was confirmed (tenure 5): ACQUIRE tells;
    // free: ACQUIRE `refresh` takes it.
    for (owner, fence, pttl) in [(None, 5, 2_000), (Some(""), 0, -2)] {
        let Some(Output::Request(req)) = first_look(owner, fence, pttl) else {
            panic!("{owner:?} {fence}: nothing asked")
        };
        assert_eq!(statement(&req).0, Statement::Acquire);
        assert!(statement(&req).1[4].contains("refresh"));
    }

    // Held by another for long: looks read, until the place must be kept (a third of the
    // 3 s waiter lease after the ACQUIRE that queued): then ACQUIRE `refresh`.
    let (mut engine, mut now, first) = queued_on_mysql(poll);
    let queued_at = now;
    queue(&mut engine, now, &first);
    loop {
        let req = next(&mut engine, &mut now);
        match statement(&req).0 {
            Statement::Status => {
                let reply = status_row("someone-else", 5, 60_000, 5);
                engine.handle_input(now, Input::Reply { id: req.id, reply });
            }
            Statement::Acquire => {
                assert!(statement(&req).1[4].contains("refresh"));
                assert_eq!(
                    now,
                    queued_at + Duration::from_secs(1),
                    "kept a third of the waiter lease after"
                );
                break;
            }
            other => panic!("{other:?} sent"),
        }
    }
}
