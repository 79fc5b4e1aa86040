//! The ZooKeeper machine, step by step, against the reference ZooKeeper: every request is
//! served at once unless a test holds it back.

use std::time::Duration;

use dlock_core::ZkSettings;
use dlock_core::zk::reference::{SessionId, Store};
use dlock_core::zk::{ZkOp, ZkReply};
use dlock_core::{
    Acquire, ClientId, Command, Config, Engine, Error, Event, HoldId, Input, Instant, Kind, Leader,
    LostReason, NotAcquired, Notice, Op, OpId, Output, Protocol, Request, Response, TransportError,
    Wait,
};

const SESSION: Duration = Duration::from_secs(3);

struct Bed {
    store: Store,
    now: Instant,
    engines: Vec<(Engine, SessionId)>,
    events: Vec<Vec<Event>>,
    sent: Vec<Vec<ZkOp>>,
    /// While set, a client's requests are dropped unanswered.
    cut: Vec<bool>,
}

impl Bed {
    fn new(clients: usize) -> Self {
        let mut store = Store::new();
        let now = Instant::from_nanos(1_000_000_000);
        let engines = (0..clients)
            .map(|i| {
                let mut config = Config::new(ClientId(i as u128 + 1));
                config.protocol = Protocol::ZooKeeper(ZkSettings::new(SESSION));
                (Engine::new(config, now).unwrap(), store.open_session())
            })
            .collect();
        Bed {
            store,
            now,
            engines,
            events: vec![Vec::new(); clients],
            sent: vec![Vec::new(); clients],
            cut: vec![false; clients],
        }
    }

    fn input(&mut self, c: usize, input: Input) {
        self.engines[c].0.handle_input(self.now, input);
        self.settle();
    }

    fn cmd(&mut self, c: usize, cmd: Command) {
        self.input(c, Input::Command(cmd));
    }

    fn settle(&mut self) {
        loop {
            let mut progress = false;
            for c in 0..self.engines.len() {
                while let Some(out) = self.engines[c].0.poll_output() {
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
        let Op::Zk(op) = op else {
            panic!("a ZooKeeper engine sent {op:?}")
        };
        self.sent[c].push(op.clone());
        if self.cut[c] {
            return;
        }
        let Ok(outcome) = self.store.execute(self.engines[c].1, &op) else {
            let reply = Err(TransportError::Unavailable("session expired".into()));
            return self.engines[c]
                .0
                .handle_input(self.now, Input::Reply { id, reply });
        };
        self.fire(outcome.fired);
        let reply = Ok(Response::Zk(outcome.reply));
        self.engines[c]
            .0
            .handle_input(self.now, Input::Reply { id, reply });
    }

    fn fire(&mut self, fired: Vec<(SessionId, String)>) {
        for (session, path) in fired {
            let to = self
                .engines
                .iter()
                .position(|(_, s)| *s == session)
                .unwrap();
            let notice = Input::Notice(Notice::Watch { path });
            self.engines[to].0.handle_input(self.now, notice);
        }
    }

    /// `op` by session `session` of another client (Curator's, say), and what follows.
    fn foreign(&mut self, session: SessionId, op: ZkOp) -> ZkReply {
        let outcome = self.store.execute(session, &op).unwrap();
        self.fire(outcome.fired);
        self.settle();
        outcome.reply
    }

    fn take(&mut self, c: usize) -> Vec<Event> {
        std::mem::take(&mut self.events[c])
    }

    fn take_sent(&mut self, c: usize) -> Vec<ZkOp> {
        std::mem::take(&mut self.sent[c])
    }

    /// The contenders' nodes of lock "job" (its directory keeps its pin besides).
    fn children(&self) -> Vec<String> {
        self.contenders("/dlock/job")
    }

    fn contenders(&self, dir: &str) -> Vec<String> {
        let mut children = self.store.children(dir);
        let pin = children.iter().position(|c| c == dlock_core::zk::PIN);
        assert!(pin.is_some(), "{dir} has no pin: {children:?}");
        children.retain(|c| c != dlock_core::zk::PIN);
        children
    }
}

fn acquire(op: u64, wait: Wait) -> Command {
    Command::Acquire(Acquire {
        op: OpId(op),
        name: "job".into(),
        owner: 1,
        lease: Duration::from_secs(1),
        wait,
        max_hold: None,
        fair: true,
        kind: Kind::Mutex,
    })
}

fn acquired(events: &[Event]) -> (HoldId, u64) {
    match events {
        [
            Event::Acquired {
                hold,
                fencing_token,
                ..
            },
        ] => (*hold, *fencing_token),
        other => panic!("expected one Acquired, got {other:?}"),
    }
}

#[test]
fn first_acquire_creates_the_directory_and_its_pin_then_holds_with_token_two() {
    let mut bed = Bed::new(1);
    bed.cmd(0, acquire(1, Wait::No));
    let (hold, token) = acquired(&bed.take(0));
    assert_eq!(token, 2, "sequence 1 (the pin took 0) + 1");
    let sent = bed.take_sent(0);
    assert!(matches!(sent[0], ZkOp::CreateSequential { .. }));
    assert_eq!(
        sent[1],
        ZkOp::CreateParents {
            path: "/dlock/job/dlock-pin".into()
        }
    );
    let [child] = bed.children().try_into().unwrap();
    assert!(child.starts_with(&format!("{:032x}-1-lock-", 1)), "{child}");
    // Reentry is counted locally: no request.
    bed.cmd(0, acquire(2, Wait::No));
    assert_eq!(acquired(&bed.take(0)), (hold, 2));
    assert!(bed.take_sent(0).is_empty());
    bed.cmd(0, Command::Release { op: OpId(3), hold });
    assert!(bed.take_sent(0).is_empty());
    bed.cmd(0, Command::Release { op: OpId(4), hold });
    assert!(matches!(bed.take_sent(0)[..], [ZkOp::Delete { .. }]));
    assert!(bed.children().is_empty());
}

#[test]
fn a_waiter_watches_only_its_predecessor_and_takes_over_on_its_delete() {
    let mut bed = Bed::new(3);
    bed.cmd(0, acquire(1, Wait::No));
    let (hold, first) = acquired(&bed.take(0));
    bed.cmd(1, acquire(1, Wait::Forever));
    bed.cmd(2, acquire(1, Wait::Forever));
    let watch = |sent: Vec<ZkOp>| {
        sent.into_iter()
            .find_map(|op| match op {
                ZkOp::Watch { path } => Some(path),
                _ => None,
            })
            .expect("a watch")
    };
    let children = bed.children();
    assert_eq!(
        watch(bed.take_sent(1)),
        format!("/dlock/job/{}", children[0])
    );
    assert_eq!(
        watch(bed.take_sent(2)),
        format!("/dlock/job/{}", children[1])
    );
    bed.cmd(0, Command::Release { op: OpId(2), hold });
    let (_, second) = acquired(&bed.take(1));
    assert!(second > first);
    assert!(bed.take(2).is_empty(), "only the successor woke");
    // The stats count the first acquire as taken at once, the successor's as handed off.
    let stats = |c: usize| bed.engines[c].0.stats().locks[0].clone();
    assert_eq!(
        (stats(0).acquired, stats(0).handed_off, stats(0).released),
        (1, 0, 1)
    );
    assert_eq!(
        (stats(1).acquired, stats(1).handed_off, stats(1).held),
        (1, 1, 1)
    );
    assert_eq!((stats(2).acquired, stats(2).waiting), (0, 1));
}

#[test]
fn try_acquire_on_a_held_lock_is_busy_and_leaves_no_node() {
    let mut bed = Bed::new(2);
    bed.cmd(0, acquire(1, Wait::No));
    acquired(&bed.take(0));
    bed.cmd(1, acquire(1, Wait::No));
    assert_eq!(
        bed.take(1),
        vec![Event::NotAcquired {
            op: OpId(1),
            reason: NotAcquired::Busy
        }]
    );
    assert_eq!(bed.children().len(), 1);
}

#[test]
fn a_broken_connection_loses_the_lock_at_once_and_deletes_the_node_after_it() {
    let mut bed = Bed::new(1);
    bed.cmd(0, acquire(1, Wait::No));
    let (hold, _) = acquired(&bed.take(0));
    bed.cut[0] = true;
    bed.input(0, Input::Notice(Notice::Disconnected));
    assert_eq!(
        bed.take(0),
        vec![Event::Lost {
            hold,
            reason: LostReason::Disconnected
        }]
    );
    assert_eq!(bed.children().len(), 1, "the delete could not get through");
    bed.cut[0] = false;
    bed.input(0, Input::Notice(Notice::Connected));
    assert!(bed.children().is_empty(), "deleted after the reconnect");
}

#[test]
fn validity_runs_out_without_heartbeat_answers() {
    let mut bed = Bed::new(1);
    bed.cmd(0, acquire(1, Wait::No));
    let events = bed.take(0);
    let Event::Acquired { valid_until, .. } = events[0] else {
        panic!("{events:?}")
    };
    assert_eq!(valid_until, bed.now + SESSION - dlock_core::drift(SESSION));
    // Heartbeats renew it while answered.
    bed.now = bed.now + SESSION / 2;
    bed.engines[0].0.handle_timeout(bed.now);
    bed.settle();
    assert!(matches!(bed.take(0)[..], [Event::Renewed { .. }]));
    // Unanswered, the hold is lost when the validity ends.
    bed.cut[0] = true;
    bed.now = bed.now + SESSION;
    bed.engines[0].0.handle_timeout(bed.now);
    bed.settle();
    let events = bed.take(0);
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::Lost {
                reason: LostReason::Expired,
                ..
            }
        )),
        "{events:?}"
    );
}

#[test]
fn session_expiry_fails_waiters_and_loses_holds() {
    let mut bed = Bed::new(2);
    bed.cmd(0, acquire(1, Wait::No));
    let (hold, _) = acquired(&bed.take(0));
    bed.cmd(1, acquire(1, Wait::Forever));
    for c in 0..2 {
        let session = bed.engines[c].1;
        bed.store.expire(session);
    }
    bed.input(0, Input::Notice(Notice::SessionExpired));
    bed.input(1, Input::Notice(Notice::SessionExpired));
    assert_eq!(
        bed.take(0),
        vec![Event::Lost {
            hold,
            reason: LostReason::SessionExpired
        }]
    );
    assert_eq!(
        bed.take(1),
        vec![Event::Failed {
            op: OpId(1),
            error: Error::SessionExpired
        }]
    );
}

#[test]
fn malformed_replies_become_typed_errors() {
    let mut engine = Engine::new(
        Config {
            protocol: Protocol::ZooKeeper(ZkSettings::new(SESSION)),
            ..Config::new(ClientId(1))
        },
        Instant::from_nanos(1),
    )
    .unwrap();
    let now = Instant::from_nanos(2);
    for bad in [
        Response::Zk(ZkReply::Created("/elsewhere/x-lock-0000000001".into())),
        Response::Zk(ZkReply::Children(vec![])),
        Response::Zk(ZkReply::NodeExists),
        Response::Redis(dlock_core::redis::Value::Nil),
    ] {
        engine.handle_input(now, Input::Command(acquire(1, Wait::No)));
        let Some(Output::Request(req)) = engine.poll_output() else {
            panic!("no request")
        };
        engine.handle_input(
            now,
            Input::Reply {
                id: req.id,
                reply: Ok(bad.clone()),
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
            "{bad:?} gave {events:?}"
        );
    }
    // A bad root is refused before anything is sent.
    let config = Config {
        protocol: Protocol::ZooKeeper(ZkSettings {
            root: "dlock/".into(),
            session_timeout: SESSION,
        }),
        ..Config::new(ClientId(1))
    };
    assert!(matches!(
        Engine::new(config, now),
        Err(Error::InvalidConfig(_))
    ));
    // So is lock-delay, which ZooKeeper cannot provide.
    let config = Config {
        lock_delay: Duration::from_secs(1),
        protocol: Protocol::ZooKeeper(ZkSettings::new(SESSION)),
        ..Config::new(ClientId(1))
    };
    assert!(matches!(
        Engine::new(config, now),
        Err(Error::InvalidConfig(_))
    ));
}

#[test]
fn status_reads_the_lock_directory() {
    let mut bed = Bed::new(2);
    bed.cmd(0, acquire(1, Wait::No));
    let (_, token) = acquired(&bed.take(0));
    bed.cmd(1, acquire(1, Wait::Forever));
    let protocol = Protocol::ZooKeeper(ZkSettings::new(SESSION));
    let ops = protocol.status_requests("job").unwrap();
    let [Op::Zk(op)] = ops.as_slice() else {
        panic!("not one ZooKeeper op")
    };
    let reply = bed.store.execute(bed.engines[0].1, op).unwrap().reply;
    let status = protocol.parse_status(Ok(Response::Zk(reply))).unwrap();
    assert_eq!(status.fencing_token, token);
    assert_eq!(status.waiters.len(), 1);
    assert!(matches!(
        protocol.status_requests(""),
        Err(Error::EmptyName)
    ));
    let wrong = protocol.parse_status(Ok(Response::Zk(ZkReply::Done)));
    assert!(matches!(wrong, Err(Error::MalformedReply(_))));
}

fn permit(op: u64, wait: Wait) -> Command {
    match acquire(op, wait) {
        Command::Acquire(a) => Command::Acquire(Acquire {
            kind: Kind::Semaphore { permits: 2 },
            ..a
        }),
        _ => unreachable!(),
    }
}

/// Curator's `InterProcessSemaphoreV2` layout: a waiter first holds the gate (a lock in
/// `locks`), then adds a lease and watches 2 of the others (any 2: while neither goes, the
/// leases stay more than its 2 permits allow); its gate goes only when it holds a permit, so
/// the next waiter queues on the gate and is not woken by a release meanwhile. Every child of
/// `leases` counts, Curator's and foreign ones too. Tokens are the gate's numbers + 1.
#[test]
fn a_permit_waiter_holds_the_gate_and_counts_every_lease() {
    let mut bed = Bed::new(5);
    let (gate, leases) = ("/dlock/job.semaphore/locks", "/dlock/job.semaphore/leases");
    bed.cmd(0, permit(1, Wait::No));
    let (first, t1) = acquired(&bed.take(0));
    // The same client and owner again: a permit of its own.
    bed.cmd(0, permit(2, Wait::No));
    let (second, t2) = acquired(&bed.take(0));
    assert!(first != second && t1 < t2, "{t1} {t2}");
    assert_eq!(bed.contenders(gate), Vec::<String>::new(), "gates released");
    assert_eq!(bed.store.children(leases).len(), 2);
    bed.cmd(1, permit(1, Wait::No));
    assert!(matches!(
        bed.take(1)[..],
        [Event::NotAcquired {
            reason: NotAcquired::Busy,
            ..
        }]
    ));
    assert_eq!(
        bed.contenders(gate).len() + bed.store.children(leases).len(),
        2
    );
    bed.take_sent(2);
    bed.cmd(2, permit(1, Wait::Forever));
    bed.cmd(3, permit(1, Wait::Forever));
    let held = bed.store.children(leases);
    assert_eq!(
        held.len(),
        3,
        "client 2's lease beside the 2 held: {held:?}"
    );
    let watched = |sent: Vec<ZkOp>| -> Vec<String> {
        let mut paths: Vec<String> = sent
            .into_iter()
            .filter_map(|op| match op {
                ZkOp::Watch { path } => Some(path),
                _ => None,
            })
            .collect();
        paths.sort();
        paths
    };
    let mut permits: Vec<String> = held[..2].iter().map(|c| format!("{leases}/{c}")).collect();
    permits.sort();
    assert_eq!(watched(bed.take_sent(2)), permits, "the 2 other leases");
    let gates = bed.contenders(gate);
    assert_eq!(
        watched(bed.take_sent(3)),
        [format!("{gate}/{}", gates[0])],
        "client 3 waits for client 2's gate"
    );
    bed.cmd(
        0,
        Command::Release {
            op: OpId(3),
            hold: first,
        },
    );
    let (_, t3) = acquired(&bed.take(2));
    assert!(t3 > t2);
    assert!(
        bed.take(3).is_empty(),
        "client 3 counts 2 leases beside its own"
    );
    // Client 3 holds the gate now. A Curator lease and a child of no recipe count too.
    let java = bed.store.open_session();
    let curator = ZkOp::CreateSequential {
        prefix: format!("{leases}/_c_0f3b2c1e-9a8d-4c1b-b2a7-5e6f7a8b9c0d-lease-"),
    };
    let ZkReply::Created(curator) = bed.foreign(java, curator) else {
        panic!("created")
    };
    let junk = format!("{leases}/junk");
    bed.foreign(java, ZkOp::CreateEphemeral { path: junk.clone() });
    bed.cmd(
        0,
        Command::Release {
            op: OpId(4),
            hold: second,
        },
    );
    assert!(bed.take(3).is_empty(), "3 leases beside its own");
    bed.foreign(java, ZkOp::Delete { path: curator });
    assert!(bed.take(3).is_empty(), "2 leases beside its own");
    bed.foreign(java, ZkOp::Delete { path: junk });
    let (_, t4) = acquired(&bed.take(3));
    assert!(t4 > t3);
    assert_eq!(bed.contenders(gate), Vec::<String>::new(), "gates released");
    // A lock of the same name is another thing.
    bed.cmd(4, acquire(1, Wait::No));
    acquired(&bed.take(4));
}
fn rw(op: u64, owner: u64, write: bool, wait: Wait) -> Command {
    match acquire(op, wait) {
        Command::Acquire(a) => Command::Acquire(Acquire {
            owner,
            kind: if write { Kind::Write } else { Kind::Read },
            ..a
        }),
        _ => unreachable!(),
    }
}

#[test]
fn readers_watch_the_nearest_writer_ahead_and_a_writer_may_downgrade() {
    let mut bed = Bed::new(3);
    let dir = "/dlock/job.rwlock";
    bed.cmd(0, rw(1, 1, false, Wait::No));
    let (r0, _) = acquired(&bed.take(0));
    bed.cmd(1, rw(1, 1, false, Wait::No));
    acquired(&bed.take(1));
    bed.take_sent(2);
    bed.cmd(2, rw(1, 1, true, Wait::Forever));
    assert!(bed.take(2).is_empty(), "a writer waits for the readers");
    // A later reader waits behind the writer, watching the writer's node only.
    bed.take_sent(1);
    bed.cmd(1, rw(2, 2, false, Wait::Forever));
    let children = bed.contenders(dir);
    let writer = children
        .iter()
        .find(|c| c.contains("-__WRIT__"))
        .expect("the writer's node");
    let watched: Vec<ZkOp> = bed
        .take_sent(1)
        .into_iter()
        .filter(|op| matches!(op, ZkOp::Watch { .. }))
        .collect();
    assert_eq!(
        watched,
        [ZkOp::Watch {
            path: format!("{dir}/{writer}")
        }]
    );
    bed.cmd(
        0,
        Command::Release {
            op: OpId(2),
            hold: r0,
        },
    );
    assert!(bed.take(2).is_empty(), "one reader is left");
    assert!(matches!(bed.take(0)[..], [Event::Released { .. }]));
    bed.cmd(
        1,
        Command::Release {
            op: OpId(3),
            hold: HoldId(1),
        },
    );
    assert!(matches!(bed.take(1)[..], [Event::Released { .. }]));
    let (w, tw) = acquired(&bed.take(2));
    // The writer's owner reads beside its write hold, past the waiting reader: its read node
    // takes the write node's number, and so its token.
    bed.cmd(2, rw(2, 1, false, Wait::No));
    let (r, tr) = acquired(&bed.take(2));
    assert_eq!(tr, tw);
    // No upgrade: that owner may not ask to write again while it reads... its write is
    // reentrant, though.
    bed.cmd(2, rw(3, 1, true, Wait::No));
    assert_eq!(acquired(&bed.take(2)), (w, tw));
    bed.cmd(
        2,
        Command::Release {
            op: OpId(4),
            hold: w,
        },
    );
    bed.cmd(
        2,
        Command::Release {
            op: OpId(5),
            hold: w,
        },
    );
    bed.take(2);
    // Downgraded: the waiting reader joins.
    acquired(&bed.take(1));
    assert!(bed.engines[2].0.hold(r).is_some());
    bed.cmd(0, rw(3, 1, true, Wait::No));
    assert!(matches!(
        bed.take(0)[..],
        [Event::NotAcquired {
            reason: NotAcquired::Busy,
            ..
        }]
    ));
    bed.cmd(2, rw(6, 1, true, Wait::No));
    assert!(
        matches!(
            bed.take(2)[..],
            [Event::Failed {
                error: Error::InvalidArgument(_),
                ..
            }]
        ),
        "no upgrade"
    );
}

/// A waiter whose CREATE-PARENTS fails tries again: after its retry delay, and at once on a
/// reconnect. (It used to stay marked as busy with nothing under way, and hung.)
#[test]
fn a_failed_create_parents_is_tried_again() {
    let mut config = Config::new(ClientId(1));
    config.protocol = Protocol::ZooKeeper(ZkSettings::new(SESSION));
    let mut now = Instant::from_nanos(1_000_000_000);
    let mut engine = Engine::new(config, now).unwrap();
    let next = |engine: &mut Engine| -> Request {
        let mut requests = Vec::new();
        while let Some(out) = engine.poll_output() {
            match out {
                Output::Request(r) => requests.push(r),
                Output::Event(e) => panic!("no event yet, got {e:?}"),
            }
        }
        let [r] = requests.try_into().expect("exactly one request");
        r
    };
    let fail = |engine: &mut Engine, now, id| {
        let reply = Err(TransportError::Unavailable("connection lost".into()));
        engine.handle_input(now, Input::Reply { id, reply });
    };
    engine.handle_input(now, Input::Command(acquire(1, Wait::Forever)));
    let create = next(&mut engine);
    assert!(matches!(create.op, Op::Zk(ZkOp::CreateSequential { .. })));
    let reply = Ok(Response::Zk(ZkReply::NoNode));
    engine.handle_input(
        now,
        Input::Reply {
            id: create.id,
            reply,
        },
    );
    let parents = next(&mut engine);
    assert!(matches!(parents.op, Op::Zk(ZkOp::CreateParents { .. })));
    fail(&mut engine, now, parents.id);

    // The retry timer sends again.
    now = engine.poll_timeout().expect("a retry is scheduled");
    engine.handle_timeout(now);
    let again = next(&mut engine);
    assert!(
        matches!(again.op, Op::Zk(ZkOp::CreateSequential { .. })),
        "{again:?}"
    );
    let reply = Ok(Response::Zk(ZkReply::NoNode));
    engine.handle_input(
        now,
        Input::Reply {
            id: again.id,
            reply,
        },
    );
    let parents = next(&mut engine);
    fail(&mut engine, now, parents.id);

    // So does a reconnect, without waiting for the timer.
    engine.handle_input(now, Input::Notice(Notice::Connected));
    let again = next(&mut engine);
    assert!(
        matches!(again.op, Op::Zk(ZkOp::CreateSequential { .. })),
        "{again:?}"
    );
}

/// A writer that queued while the owner of the write hold downgrades does not hold the
/// downgrade off (the read node takes the write node's number, as Curator's does), and it
/// does not get in beside the read hold that stays when the write hold goes.
#[test]
fn a_downgrade_passes_a_writer_queued_in_between() {
    let mut bed = Bed::new(2);
    let dir = "/dlock/job.rwlock";
    bed.cmd(0, rw(1, 1, true, Wait::No));
    let (w, tw) = acquired(&bed.take(0));
    bed.cmd(1, rw(1, 1, true, Wait::Forever));
    assert!(bed.take(1).is_empty(), "the second writer waits");
    bed.take_sent(0);
    bed.cmd(0, rw(2, 1, false, Wait::No));
    let (r, tr) = acquired(&bed.take(0));
    assert_eq!(tr, tw);
    let write_node = bed
        .contenders(dir)
        .into_iter()
        .find(|c| c.starts_with("00000000000000000000000000000001-") && c.contains("__WRIT__"))
        .expect("the write node");
    let seq = &write_node[write_node.len() - 10..];
    assert!(
        bed.take_sent(0).iter().any(|op| matches!(
            op,
            ZkOp::CreateEphemeral { path } if path.ends_with(&format!("-__READ__{seq}"))
        )),
        "the read node is created with the write node's number"
    );
    bed.cmd(
        0,
        Command::Release {
            op: OpId(3),
            hold: w,
        },
    );
    assert!(matches!(bed.take(0)[..], [Event::Released { .. }]));
    assert!(bed.take(1).is_empty(), "the read hold keeps the writer out");
    bed.cmd(
        0,
        Command::Release {
            op: OpId(4),
            hold: r,
        },
    );
    let (_, t2) = acquired(&bed.take(1));
    assert!(t2 > tr);
}

/// A lock directory that Curator created as a container node, which ZooKeeper deletes once
/// it is empty (its numbers starting again at 0 when it comes back), is pinned by a
/// persistent child before any of its numbers is a token: it stays, and tokens keep growing.
#[test]
fn a_container_directory_is_pinned_before_a_token_comes_from_it() {
    let mut bed = Bed::new(1);
    let parents = ZkOp::CreateParents {
        path: "/dlock".into(),
    };
    bed.store.execute(bed.engines[0].1, &parents).unwrap();
    bed.store.create_container("/dlock/job");
    bed.cmd(0, acquire(1, Wait::No));
    let (hold, token) = acquired(&bed.take(0));
    assert!(
        bed.take_sent(0).contains(&ZkOp::CreateParents {
            path: "/dlock/job/dlock-pin".into()
        }),
        "the directory is pinned"
    );
    bed.cmd(0, Command::Release { op: OpId(2), hold });
    bed.take(0);
    assert!(bed.children().is_empty());
    bed.cmd(0, acquire(3, Wait::No));
    let (_, next) = acquired(&bed.take(0));
    assert!(next > token, "{next} after {token}");
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

fn leader(term: u64, value: &str) -> Option<Leader> {
    Some(Leader {
        term,
        value: value.into(),
    })
}

/// An election on ZooKeeper is Curator's `LeaderSelector` layout: the leader's node carries
/// its value. An observer lists the directory with a watch and reads the lowest node's data
/// with a watch: a proclaim, a candidate and a resignation each reach it by a watch, with
/// nothing polled.
#[test]
fn an_election_leader_proclaims_in_its_node_and_observers_follow_by_watches() {
    let mut bed = Bed::new(3);
    let observe = Command::Observe {
        op: OpId(9),
        name: "job".into(),
    };
    bed.cmd(2, observe);
    assert_eq!(
        seen(&bed.take(2), 9),
        [None],
        "nobody leads: the directory is made"
    );
    assert!(bed.contenders("/dlock/job").is_empty());

    bed.cmd(0, acquire(1, Wait::Forever));
    let (hold, term) = acquired(&bed.take(0));
    assert_eq!(
        seen(&bed.take(2), 9),
        Vec::<Option<Leader>>::new(),
        "no value yet"
    );
    let proclaim = |op, hold, value: &str| Command::Proclaim {
        op: OpId(op),
        hold,
        value: value.into(),
    };
    bed.cmd(0, proclaim(2, hold, "a:1"));
    assert_eq!(
        bed.take(0),
        [Event::Proclaimed {
            op: OpId(2),
            hold,
            term
        }]
    );
    let node = format!("/dlock/job/{}", bed.children()[0]);
    assert!(bed.take_sent(0).contains(&ZkOp::SetData {
        path: node,
        data: "a:1".into()
    }));
    assert_eq!(seen(&bed.take(2), 9), [leader(term, "a:1")]);

    bed.cmd(1, acquire(1, Wait::Forever));
    assert!(bed.take(1).is_empty(), "the second candidate queues");
    assert_eq!(
        seen(&bed.take(2), 9),
        Vec::<Option<Leader>>::new(),
        "a candidate is no news"
    );
    bed.take_sent(2);
    bed.cmd(0, Command::Release { op: OpId(3), hold });
    let count = 0;
    let released = Event::Released {
        op: OpId(3),
        hold,
        count,
    };
    assert_eq!(bed.take(0), [released]);
    let (hold1, term1) = acquired(&bed.take(1));
    assert!(term1 > term);
    bed.cmd(1, proclaim(2, hold1, "b:1"));
    let heard = seen(&bed.take(2), 9);
    assert_eq!(heard.last(), Some(&leader(term1, "b:1")), "{heard:?}");
    let sent = bed.take_sent(2);
    assert!(
        sent.iter().all(|op| matches!(
            op,
            ZkOp::WatchChildren { .. } | ZkOp::GetData { watch: true, .. }
        )),
        "observers only read with watches: {sent:?}"
    );

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

    // A proclaim whose node went (deleted behind its back) loses the hold.
    bed.cmd(0, acquire(4, Wait::No));
    let (hold, _) = acquired(&bed.take(0));
    let node = format!("/dlock/job/{}", bed.children()[0]);
    let session = bed.store.open_session();
    assert_eq!(
        bed.foreign(session, ZkOp::Delete { path: node }),
        ZkReply::Done
    );
    bed.cmd(0, proclaim(5, hold, "gone"));
    let events = bed.take(0);
    assert!(
        events.contains(&Event::Failed {
            op: OpId(5),
            error: Error::LockLost { hold }
        }),
        "{events:?}"
    );
}
