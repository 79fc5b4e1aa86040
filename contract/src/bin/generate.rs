//! Writes `tests/vectors/*.json`: `just vectors` (or `cargo run -p dlock-contract --bin
//! generate -- DIR`).
//!
//! Each scenario drives one native engine — the subject, whose every step is recorded —
//! against dlock-core's reference Redis or ZooKeeper, sometimes beside other engines (ghosts)
//! that hold or release the same lock without being recorded. Requests are answered by the
//! reference server at once unless the scenario takes them over to answer by hand (lost,
//! late, failed or malformed replies).

use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use dlock::json::{config_to_json, input_to_json, output_to_json};
use dlock_core::ZkSettings;
use dlock_core::redis::reference::Store as RedisStore;
use dlock_core::redis::{RedisOp, Value};
use dlock_core::sql::reference::Store as SqlStore;
use dlock_core::sql::{Dialect, SqlOp, SqlSettings};
use dlock_core::zk::reference::{SessionId, Store as ZkStore};
use dlock_core::zk::{ZkOp, ZkReply};
use dlock_core::{
    Acquire, AcquireMulti, ClientId, Command, Config, Engine, Event, HoldId, Input, Instant, Kind,
    Notice, Op, OpId, Output, Protocol, Reply, Request, RequestId, Response, TransportError, Wait,
};
use serde_json::{Value as Json, json};

const MS: u64 = 1_000_000;
const SUBJECT: usize = 0;

enum Server {
    Redis(RedisStore),
    /// Independent servers, one per Redlock node.
    Redlock(Vec<RedisStore>),
    Zk {
        store: ZkStore,
        sessions: Vec<SessionId>,
    },
    Sql(SqlStore),
}

/// One scenario under way.
struct Bed {
    name: &'static str,
    about: &'static str,
    config: Config,
    start: Instant,
    now: Instant,
    server: Server,
    /// `engines[0]` is the subject.
    engines: Vec<Engine>,
    steps: Vec<Json>,
    /// Inputs on their way to an engine, in delivery order.
    deliveries: VecDeque<(usize, Input)>,
    /// While true the subject's requests are kept in `held` for the scenario to answer.
    manual: bool,
    held: Vec<Request>,
    events: Vec<Event>,
    /// The channels each engine subscribed to (Redis) or listens on (PostgreSQL).
    subscribed: Vec<BTreeSet<String>>,
}

fn config(id: u128, protocol: &Protocol) -> Config {
    Config {
        protocol: protocol.clone(),
        ..Config::new(ClientId(0x5eed_0000_0000_0000_0000_0000_0000_0000 | id))
    }
}

fn zookeeper() -> Protocol {
    Protocol::ZooKeeper(ZkSettings::new(Duration::from_secs(6)))
}

fn sql(dialect: Dialect) -> Protocol {
    Protocol::Sql(SqlSettings::new(dialect))
}

impl Bed {
    fn new(name: &'static str, about: &'static str, protocol: Protocol, ghosts: usize) -> Self {
        Self::with(name, about, config(1, &protocol), ghosts)
    }

    fn redis(name: &'static str, about: &'static str) -> Self {
        Self::new(name, about, Protocol::Redis, 1)
    }

    fn zk(name: &'static str, about: &'static str) -> Self {
        Self::new(name, about, zookeeper(), 1)
    }

    fn with(name: &'static str, about: &'static str, subject: Config, ghosts: usize) -> Self {
        let start = Instant::from_nanos(1_000 * MS);
        let mut configs = vec![subject.clone()];
        configs.extend((0..ghosts).map(|g| config(2 + g as u128, &subject.protocol)));
        let server = match subject.protocol {
            Protocol::Redis | Protocol::Redisson => Server::Redis(RedisStore::new()),
            Protocol::Redlock { nodes } => {
                Server::Redlock((0..nodes).map(|_| RedisStore::new()).collect())
            }
            Protocol::ZooKeeper(_) => {
                let mut store = ZkStore::new();
                let sessions = configs.iter().map(|_| store.open_session()).collect();
                Server::Zk { store, sessions }
            }
            Protocol::Sql(ref settings) => Server::Sql(SqlStore::new(settings)),
        };
        let engines = configs
            .iter()
            .map(|c| Engine::new(c.clone(), start).expect("a valid configuration"))
            .collect();
        let mut bed = Bed {
            name,
            about,
            config: subject,
            start,
            now: start,
            server,
            engines,
            steps: Vec::new(),
            deliveries: VecDeque::new(),
            manual: false,
            held: Vec::new(),
            events: Vec::new(),
            subscribed: vec![BTreeSet::new(); configs.len()],
        };
        bed.step(None);
        bed.settle();
        bed
    }

    /// Feeds the subject, records the step, routes its requests.
    fn step(&mut self, input: Option<Input>) {
        let mut step = json!({ "now": self.now.as_nanos() });
        match input {
            Some(input) => {
                step["input"] = input_to_json(&input);
                self.engines[SUBJECT].handle_input(self.now, input);
            }
            None => self.engines[SUBJECT].handle_timeout(self.now),
        }
        let mut outputs = Vec::new();
        while let Some(out) = self.engines[SUBJECT].poll_output() {
            outputs.push(output_to_json(&out));
            match out {
                Output::Request(r) if self.manual => self.held.push(r),
                Output::Request(r) => self.serve(SUBJECT, r),
                Output::Event(e) => self.events.push(e),
            }
        }
        step["outputs"] = Json::Array(outputs);
        step["timeout"] = json!(self.engines[SUBJECT].poll_timeout().map(Instant::as_nanos));
        self.steps.push(step);
    }

    /// Runs `op` for engine `who` on the reference server; its reply and any notices it
    /// causes join the deliveries.
    fn serve(&mut self, who: usize, Request { id, op }: Request) {
        let (reply, notices) = self.run(who, op);
        // The reply first, then the notices the same request caused.
        self.deliveries.push_back((who, Input::Reply { id, reply }));
        self.deliveries
            .extend(notices.into_iter().map(|(to, n)| (to, Input::Notice(n))));
    }

    /// Runs `op` for engine `who` on the reference server: its reply, and the notices it
    /// causes for each engine.
    fn run(&mut self, who: usize, op: Op) -> (Reply, Vec<(usize, Notice)>) {
        let now_ms = self.now.as_nanos() / MS;
        let mut notices = Vec::new();
        let reply: Reply = match (&mut self.server, op) {
            (Server::Redis(_), Op::Redis(RedisOp::Subscribe { channel })) => {
                self.subscribed[who].insert(channel);
                Ok(Response::Redis(Value::Status("OK".into())))
            }
            (Server::Redis(store), Op::Redis(RedisOp::Eval { script, keys, args })) => {
                match store.eval(now_ms, script, &keys, &args) {
                    Ok(outcome) => {
                        deliver(&self.subscribed, outcome.published, &mut notices);
                        Ok(Response::Redis(outcome.reply))
                    }
                    Err(e) => Err(TransportError::Server(e)),
                }
            }
            (Server::Redlock(stores), Op::Redlock { node, op }) => match op {
                RedisOp::Eval { script, keys, args } => stores[node as usize]
                    .eval(now_ms, script, &keys, &args)
                    .map(|outcome| Response::Redis(outcome.reply))
                    .map_err(TransportError::Server),
                RedisOp::Subscribe { .. } => Err(TransportError::Server("no pub/sub".into())),
            },
            (Server::Zk { store, sessions }, Op::Zk(op)) => {
                match store.execute(sessions[who], &op) {
                    Ok(outcome) => {
                        for (session, path) in outcome.fired {
                            if let Some(to) = sessions.iter().position(|s| *s == session) {
                                notices.push((to, Notice::Watch { path }));
                            }
                        }
                        Ok(Response::Zk(outcome.reply))
                    }
                    Err(_) => Err(TransportError::Unavailable("session expired".into())),
                }
            }
            (Server::Sql(_), Op::Sql(SqlOp::Listen { channel })) => {
                self.subscribed[who].insert(channel);
                Ok(Response::Sql(Vec::new()))
            }
            (Server::Sql(store), Op::Sql(op)) => {
                let outcome = store
                    .exec(self.now.as_nanos() / 1_000, &op)
                    .expect("a statement of the engine's");
                deliver(&self.subscribed, outcome.notified, &mut notices);
                Ok(Response::Sql(outcome.values))
            }
            (_, op) => panic!("{op:?} sent to the wrong server"),
        };
        (reply, notices)
    }

    /// Delivers everything on its way and serves every ghost's requests until all is quiet.
    fn settle(&mut self) {
        loop {
            for g in 1..self.engines.len() {
                while let Some(out) = self.engines[g].poll_output() {
                    if let Output::Request(r) = out {
                        self.serve(g, r);
                    }
                }
            }
            let Some((to, input)) = self.deliveries.pop_front() else {
                return;
            };
            if to == SUBJECT {
                self.step(Some(input));
            } else {
                self.engines[to].handle_input(self.now, input);
            }
        }
    }

    fn input(&mut self, input: Input) -> &mut Self {
        self.step(Some(input));
        self.settle();
        self
    }

    fn command(&mut self, command: Command) -> &mut Self {
        self.input(Input::Command(command))
    }

    fn notice(&mut self, notice: Notice) -> &mut Self {
        self.input(Input::Notice(notice))
    }

    fn ghost(&mut self, g: usize, command: Command) -> &mut Self {
        self.engines[g].handle_input(self.now, Input::Command(command));
        self.settle();
        self
    }

    /// Moves the clock on by `ms`, running every engine's timers on the way.
    fn advance(&mut self, ms: u64) -> &mut Self {
        let end = self.now + Duration::from_millis(ms);
        while let Some(at) = self
            .engines
            .iter()
            .filter_map(Engine::poll_timeout)
            .min()
            .filter(|at| *at <= end)
        {
            self.now = self.now.max(at);
            if self.engines[SUBJECT].poll_timeout() <= Some(self.now) {
                self.step(None);
            }
            for g in 1..self.engines.len() {
                self.engines[g].handle_timeout(self.now);
            }
            self.settle();
        }
        self.now = end;
        self
    }

    /// From now on the scenario answers the subject's requests itself.
    fn by_hand(&mut self) -> &mut Self {
        self.manual = true;
        self
    }

    /// Answers the subject's requests from the server again (held ones stay held).
    fn by_server(&mut self) -> &mut Self {
        self.manual = false;
        self
    }

    /// The oldest request the subject sent while answered by hand.
    fn take(&mut self) -> Request {
        assert!(
            !self.held.is_empty(),
            "{}: no request is waiting",
            self.name
        );
        self.held.remove(0)
    }

    /// Answers the oldest held request from the server.
    fn pass(&mut self) -> &mut Self {
        let r = self.take();
        self.serve(SUBJECT, r);
        self.settle();
        self
    }

    /// Back to the server: every held request is answered by it, and so are later ones.
    fn flush(&mut self) -> &mut Self {
        self.manual = false;
        while !self.held.is_empty() {
            self.pass();
        }
        self
    }

    fn answer(&mut self, reply: Reply) -> &mut Self {
        let id = self.take().id;
        self.input(Input::Reply { id, reply })
    }

    fn answer_late(&mut self, id: RequestId, reply: Reply) -> &mut Self {
        self.input(Input::Reply { id, reply })
    }

    /// The hold the subject's acquire `op` got.
    fn hold(&self, op: u64) -> HoldId {
        self.events
            .iter()
            .find_map(|e| match e {
                Event::Acquired { op: o, hold, .. } | Event::AcquiredMulti { op: o, hold, .. }
                    if o.0 == op =>
                {
                    Some(*hold)
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("{}: acquire {op} did not succeed", self.name))
    }

    /// Ends the subject's ZooKeeper session on the server (watches fire), and opens a new one
    /// for its next connection.
    fn expire_session(&mut self) -> &mut Self {
        let Server::Zk { store, sessions } = &mut self.server else {
            panic!("not ZooKeeper")
        };
        let fired = store.expire(sessions[SUBJECT]);
        sessions[SUBJECT] = store.open_session();
        for (session, path) in fired {
            if let Some(to) = sessions.iter().position(|s| *s == session) {
                self.deliveries
                    .push_back((to, Input::Notice(Notice::Watch { path })));
            }
        }
        self.settle();
        self
    }

    /// Restarts Redlock node `node` without persistence: its keys are gone.
    fn wipe_node(&mut self, node: usize) -> &mut Self {
        let Server::Redlock(stores) = &mut self.server else {
            panic!("not Redlock")
        };
        stores[node] = RedisStore::new();
        self
    }

    /// Creates a ZooKeeper node as Curator does a lock's directory: a container.
    fn zk_container(&mut self, path: &str) -> &mut Self {
        let Server::Zk { store, .. } = &mut self.server else {
            panic!("not ZooKeeper")
        };
        store.create_container(path);
        self
    }

    /// A Redisson client (another process) takes lock `name` for `lease_ms` with Redisson's
    /// own field, and is never heard of again.
    fn redisson_holder(&mut self, name: &str, lease_ms: u64) -> &mut Self {
        let Server::Redis(store) = &mut self.server else {
            panic!("not Redis")
        };
        let RedisOp::Eval { script, keys, args } = dlock_core::redisson::acquire(
            &dlock_core::redisson::Keys::new(name),
            "4f0e5b1c-7a2d-4e9b-9c3f-1d2e3f4a5b6c:1",
            Duration::from_millis(lease_ms),
        ) else {
            unreachable!("a script")
        };
        let now_ms = self.now.as_nanos() / MS;
        store.eval(now_ms, script, &keys, &args).expect("acquired");
        self
    }

    /// Restarts the Redis server without persistence: every key is gone.
    fn wipe_redis(&mut self) -> &mut Self {
        self.server = Server::Redis(RedisStore::new());
        self
    }

    fn finish(&self) -> Json {
        assert!(
            self.held.is_empty(),
            "{}: {} requests left unanswered on purpose? take them. Steps so far:\n{}",
            self.name,
            self.held.len(),
            self.steps
                .iter()
                .map(Json::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
        json!({
            "name": self.name,
            "about": self.about,
            "config": config_to_json(&self.config),
            "start": self.start.as_nanos(),
            "steps": self.steps,
        })
    }
}

fn acquire(op: u64, name: &str, owner: u64, lease_ms: u64, wait: Wait) -> Command {
    Command::Acquire(Acquire {
        op: OpId(op),
        name: name.into(),
        owner,
        lease: Duration::from_millis(lease_ms),
        wait,
        max_hold: None,
        fair: true,
        kind: Kind::Mutex,
    })
}

fn try_lock(op: u64, name: &str) -> Command {
    acquire(op, name, 1, 10_000, Wait::No)
}

fn wait_lock(op: u64, name: &str) -> Command {
    acquire(op, name, 1, 10_000, Wait::Forever)
}

fn release(op: u64, hold: HoldId) -> Command {
    Command::Release { op: OpId(op), hold }
}

fn extend(op: u64, hold: HoldId, lease_ms: u64) -> Command {
    Command::Extend {
        op: OpId(op),
        hold,
        lease: Duration::from_millis(lease_ms),
    }
}

fn redis_value(v: Value) -> Reply {
    Ok(Response::Redis(v))
}

fn zk_reply(r: ZkReply) -> Reply {
    Ok(Response::Zk(r))
}

fn unavailable() -> Reply {
    Err(TransportError::Unavailable(
        "connection reset by peer".into(),
    ))
}

/// The Redisson-compatible lock (`Protocol::Redisson`, PROTOCOL.md §19).
fn redisson_only() -> Vec<Json> {
    let mut out = Vec::new();
    let bed = |name, about, ghosts| Bed::new(name, about, Protocol::Redisson, ghosts);

    let mut b = bed(
        "redisson-acquire-release",
        "REDISSON-ACQUIRE takes a free lock: the raw name becomes a hash of one field <client id>:<tenure> with the lease as its TTL, and the token comes from redisson_lock_token:{name}. A reentry is counted by the engine, with no request. The final REDISSON-RELEASE deletes the hash and publishes 0 on redisson_lock__channel:{name}.",
        0,
    );
    b.command(try_lock(1, "orders/42"));
    let h = b.hold(1);
    b.command(try_lock(2, "orders/42"))
        .command(release(3, h))
        .command(release(4, h));
    out.push(b.finish());

    let mut b = bed(
        "redisson-waiter-woken",
        "A held lock answers with its TTL: a try-acquire ends Busy; a waiter subscribes to the lock's channel, tries again once subscribed, and waits for the channel or the TTL. The holder's release publishes 0 and the waiter takes the lock.",
        1,
    );
    b.ghost(1, try_lock(1, "jobs"))
        .command(try_lock(1, "jobs"))
        .command(wait_lock(2, "jobs"))
        .ghost(1, release(2, HoldId(1)));
    out.push(b.finish());

    let mut b = bed(
        "redisson-holder-lapses",
        "A Redisson holder (field 4f0e5b1c-…:1, lease 2 s) that dies publishes nothing: the waiter tries again when the holder's TTL has run out (at the latest after one waiter lease), and takes the lock.",
        0,
    );
    b.redisson_holder("jobs", 2_000)
        .command(wait_lock(1, "jobs"))
        .advance(2_100);
    out.push(b.finish());

    let mut b = bed(
        "redisson-watchdog",
        "The watchdog renews a hold every third of its lease with REDISSON-EXTEND (its TTL never shrinks); a renewal the server refuses (the hash no longer has our field) loses the lock.",
        0,
    );
    b.command(acquire(1, "jobs", 1, 3_000, Wait::No))
        .advance(1_000);
    b.wipe_redis().advance(1_000);
    out.push(b.finish());

    let mut b = bed(
        "redisson-refuses",
        "Only locks: a semaphore and a read-write lock are refused before anything is sent.",
        0,
    );
    b.command(permit(1, "pool", 2, Wait::No))
        .command(rw(2, "doc", 1, false, Wait::No));
    out.push(b.finish());
    out
}

/// The scenarios that apply to either backend, with the protocol as a parameter.
fn common(p: &str, protocol: &Protocol) -> Vec<Json> {
    let new = |name: &'static str, about: &'static str| Bed::new(name, about, protocol.clone(), 1);
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let name = |n: &str| leak(format!("{p}-{n}"));
    let mut out = Vec::new();

    let mut b = new(
        name("acquire-free"),
        "A free lock is acquired at once, with fencing token 1.",
    );
    b.command(try_lock(1, "orders/42"));
    out.push(b.finish());

    let mut b = new(
        name("acquire-reentrant"),
        "The same owner acquiring a held lock gets the same hold and token, count 2, with no request; two releases free it.",
    );
    b.command(try_lock(1, "jobs"));
    let h = b.hold(1);
    b.command(try_lock(2, "jobs"))
        .command(release(3, h))
        .command(release(4, h));
    out.push(b.finish());

    let mut b = new(
        name("acquire-busy"),
        "Try-acquire of a lock another client holds ends Busy and leaves nothing behind.",
    );
    b.ghost(1, try_lock(1, "jobs")).command(try_lock(1, "jobs"));
    out.push(b.finish());

    let mut b = new(
        name("hand-off"),
        "A waiter queues behind another client; that client's release hands the lock over with the next token.",
    );
    b.ghost(1, try_lock(1, "jobs"))
        .command(wait_lock(1, "jobs"))
        .advance(200);
    b.ghost(1, release(2, HoldId(1))).advance(1_000);
    out.push(b.finish());

    let mut b = new(
        name("wait-timeout"),
        "A waiter whose deadline passes ends TimedOut and leaves the queue.",
    );
    let until = b.now + Duration::from_millis(1500);
    b.ghost(1, try_lock(1, "jobs"))
        .command(acquire(1, "jobs", 1, 10_000, Wait::Until(until)))
        .advance(2000);
    out.push(b.finish());

    let mut b = new(
        name("cancel"),
        "Cancel ends a waiting acquire with Cancelled and takes it out of the queue; cancelling again is a no-op.",
    );
    b.ghost(1, try_lock(1, "jobs"))
        .command(wait_lock(1, "jobs"))
        .command(Command::Cancel { op: OpId(1) })
        .command(Command::Cancel { op: OpId(1) });
    out.push(b.finish());

    let mut b = new(name("release"), "Release frees the lock: count 0.");
    b.command(try_lock(1, "jobs"));
    let h = b.hold(1);
    b.command(release(2, h));
    out.push(b.finish());

    let mut b = new(
        name("release-not-held"),
        "Releasing a hold that was never acquired, or twice, fails NotHeld without a request.",
    );
    b.command(release(1, HoldId(99)));
    b.command(try_lock(2, "jobs"));
    let h = b.hold(2);
    b.command(release(3, h)).command(release(4, h));
    out.push(b.finish());

    let mut b = new(
        name("extend"),
        "Extend renews the hold now with a longer lease, which later renewals keep.",
    );
    b.command(try_lock(1, "jobs"));
    let h = b.hold(1);
    b.advance(1000)
        .command(extend(2, h, 30_000))
        .advance(12_000);
    out.push(b.finish());

    let mut b = new(
        name("extend-not-held"),
        "Extending an unknown hold fails NotHeld; a bad lease fails InvalidLease.",
    );
    b.command(extend(1, HoldId(5), 10_000));
    b.command(try_lock(2, "jobs"));
    let h = b.hold(2);
    b.command(extend(3, h, 0));
    out.push(b.finish());

    let mut b = new(
        name("watchdog"),
        "A held lock is renewed in the background and reported Renewed, for as long as it is held.",
    );
    b.command(acquire(1, "jobs", 1, 3_000, Wait::No))
        .advance(7_000);
    out.push(b.finish());

    let mut b = new(
        name("max-hold"),
        "A hold with max_hold is released by the engine when the bound is reached and reported lost (max-hold).",
    );
    b.command(Command::Acquire(Acquire {
        max_hold: Some(Duration::from_millis(2500)),
        ..match acquire(1, "jobs", 1, 10_000, Wait::No) {
            Command::Acquire(a) => a,
            _ => unreachable!(),
        }
    }))
    .advance(3000);
    out.push(b.finish());

    let mut b = new(
        name("bad-names"),
        "Empty and oversized names fail before anything is sent.",
    );
    b.command(try_lock(1, ""))
        .command(try_lock(2, &"x".repeat(1025)));
    out.push(b.finish());

    let mut b = new(
        name("bad-leases"),
        "Leases below 10 ms or above 7 days, and such a max_hold, fail InvalidLease before anything is sent.",
    );
    b.command(acquire(1, "jobs", 1, 0, Wait::No))
        .command(acquire(2, "jobs", 1, 9, Wait::No))
        .command(acquire(3, "jobs", 1, 7 * 24 * 3600 * 1000 + 1, Wait::No))
        .command(Command::Acquire(Acquire {
            max_hold: Some(Duration::from_millis(1)),
            ..match acquire(4, "jobs", 1, 10_000, Wait::No) {
                Command::Acquire(a) => a,
                _ => unreachable!(),
            }
        }));
    out.push(b.finish());

    let mut b = new(
        name("duplicate-op"),
        "An op id still in use fails DuplicateOp; the first command goes on.",
    );
    b.ghost(1, try_lock(1, "jobs"))
        .command(wait_lock(1, "jobs"))
        .command(try_lock(1, "other"))
        .command(Command::Cancel { op: OpId(1) });
    out.push(b.finish());

    let mut b = new(
        name("already-waiting"),
        "The same owner waiting twice for one lock fails AlreadyWaiting; another owner may queue.",
    );
    b.ghost(1, try_lock(1, "jobs"))
        .command(wait_lock(1, "jobs"))
        .command(wait_lock(2, "jobs"))
        .command(acquire(3, "jobs", 2, 10_000, Wait::No))
        .command(Command::Cancel { op: OpId(1) });
    out.push(b.finish());

    let mut b = new(
        name("request-timeout"),
        "An acquire whose reply is lost fails Timeout after the request timeout; the engine cleans up what the request may have done, and the late reply is ignored.",
    );
    b.ghost(1, try_lock(1, "jobs"))
        .ghost(1, release(2, HoldId(1)))
        .by_hand()
        .command(try_lock(1, "jobs"));
    let mut lost = b.take();
    while matches!(lost.op, Op::Zk(ZkOp::CreateParents { .. })) {
        b.serve(SUBJECT, lost);
        b.settle();
        lost = b.take();
    }
    let (late, _) = b.run(SUBJECT, lost.op.clone());
    b.flush()
        .advance(15_000)
        .answer_late(lost.id, late)
        .advance(1_000);
    out.push(b.finish());

    let mut b = new(
        name("unavailable"),
        "A try-acquire whose request fails with a transport error fails Unavailable and cleans up after itself (DEQUEUE on Redis, a sweep on ZooKeeper); a later acquire works.",
    );
    b.by_hand()
        .command(try_lock(1, "jobs"))
        .answer(unavailable())
        .flush()
        .advance(1_000)
        .command(try_lock(2, "other"));
    out.push(b.finish());

    let mut b = new(
        name("renewal-unavailable"),
        "Renewals answered with transport errors let the validity run out: the hold is lost, and releasing it fails NotHeld.",
    );
    b.command(acquire(1, "jobs", 1, 3_000, Wait::No));
    let h = b.hold(1);
    b.by_hand();
    for _ in 0..16 {
        b.advance(500);
        while !b.held.is_empty() {
            b.answer(unavailable());
        }
    }
    b.by_server().command(release(2, h));
    out.push(b.finish());

    let mut b = new(
        name("closed"),
        "Closed ends everything: a holder is lost (closed), a waiter fails Closed, and later commands fail Closed.",
    );
    b.ghost(1, try_lock(1, "other"))
        .command(try_lock(1, "jobs"))
        .command(wait_lock(2, "other"))
        .notice(Notice::Closed)
        .command(try_lock(3, "jobs"));
    out.push(b.finish());

    let mut b = new(
        name("two-locks"),
        "One engine holds two locks with independent tokens and releases them in any order.",
    );
    b.command(try_lock(1, "a")).command(try_lock(2, "b/c"));
    let (a, c) = (b.hold(1), b.hold(2));
    b.command(release(3, c)).command(try_lock(4, "b/c"));
    let c2 = b.hold(4);
    b.command(release(5, a)).command(release(6, c2));
    out.push(b.finish());

    let mut b = new(
        name("multi-lock"),
        "A multi-lock takes its names one by one in canonical order (sorted, duplicates dropped) and reports one hold with each lock's token; extend and release act on every lock.",
    );
    b.command(multi(1, &["b/c", "a", "b/c"], Wait::No));
    let h = b.hold(1);
    b.command(extend(2, h, 20_000)).command(release(3, h));
    out.push(b.finish());

    let mut b = new(
        name("multi-lock-busy"),
        "A multi-lock is all or none: a try that meets a busy name ends Busy and gives back what it took; a set of no names fails InvalidArgument with nothing sent.",
    );
    b.ghost(1, try_lock(1, "b"))
        .command(multi(1, &["c", "b", "a"], Wait::No))
        .command(multi(2, &[], Wait::No))
        .command(try_lock(3, "a"));
    out.push(b.finish());

    out
}

fn multi(op: u64, names: &[&str], wait: Wait) -> Command {
    Command::AcquireMulti(AcquireMulti {
        op: OpId(op),
        names: names.iter().map(|n| n.to_string()).collect(),
        lease: Duration::from_secs(10),
        wait,
        max_hold: None,
    })
}

fn redis_only() -> Vec<Json> {
    let mut out = Vec::new();

    let mut b = Bed::redis(
        "redis-server-error",
        "An error reply from Redis (e.g. a script error) fails the command Backend.",
    );
    b.by_hand()
        .command(try_lock(1, "jobs"))
        .answer(Err(TransportError::Server(
            "ERR Error running script".into(),
        )))
        .flush();
    out.push(b.finish());

    let mut b = Bed::redis(
        "redis-malformed-reply",
        "A reply the acquire script cannot give fails the command MalformedReply; so does a non-UTF-8 bulk string.",
    );
    b.by_hand()
        .command(try_lock(1, "jobs"))
        .answer(redis_value(Value::Status("QUEUED".into())))
        .flush()
        .by_hand()
        .command(try_lock(2, "other"))
        .answer(redis_value(Value::Array(vec![
            Value::Data(b"held".to_vec()),
            Value::Data(vec![0xff, 0xfe]),
        ])))
        .flush();
    out.push(b.finish());

    let mut b = Bed::redis(
        "redis-restart-not-owner",
        "Redis restarts without persistence: the next renewal finds no lock and the hold is lost (not-owner).",
    );
    b.command(acquire(1, "jobs", 1, 3_000, Wait::No))
        .wipe_redis()
        .advance(1_500);
    out.push(b.finish());

    let mut b = Bed::redis(
        "redis-renewal-lost",
        "Renewals that get no reply let the local validity run out: the hold is lost (expired) before the lease ends on the server.",
    );
    b.command(acquire(1, "jobs", 1, 3_000, Wait::No))
        .by_hand()
        .advance(3_500);
    b.held.clear();
    out.push(b.finish());

    let mut b = Bed::with(
        "redis-batched-renewal",
        "Locks are renewed in batches of at most max_batch per request.",
        Config {
            max_batch: 2,
            ..config(1, &Protocol::Redis)
        },
        0,
    );
    for op in 1..=5 {
        b.command(acquire(op, &format!("job-{op}"), 1, 3_000, Wait::No));
    }
    b.advance(1_100);
    out.push(b.finish());

    let mut b = Bed::redis(
        "redis-waiter-refresh",
        "A queued waiter renews its place every third of the waiter lease while it waits.",
    );
    b.ghost(1, try_lock(1, "jobs"))
        .command(wait_lock(1, "jobs"))
        .advance(3_500)
        .command(Command::Cancel { op: OpId(1) });
    out.push(b.finish());

    let mut b = Bed::redis(
        "redis-reconnect",
        "After Disconnected and Connected the engine subscribes to its wake-up channel again, and a hand-off still reaches the waiter.",
    );
    b.ghost(1, try_lock(1, "jobs"))
        .command(wait_lock(1, "jobs"))
        .notice(Notice::Disconnected)
        .notice(Notice::Connected)
        .ghost(1, release(2, HoldId(1)))
        .advance(1_000);
    out.push(b.finish());

    let mut b = Bed::with(
        "redis-lock-delay",
        "With lock-delay, the server is asked to keep every lock lease + delay (acquire, renewal, extend); the holder's validity still ends with its lease.",
        Config {
            lock_delay: Duration::from_secs(2),
            ..config(1, &Protocol::Redis)
        },
        0,
    );
    b.command(acquire(1, "jobs", 1, 3_000, Wait::No))
        .advance(1_100);
    let h = b.hold(1);
    b.command(extend(2, h, 6_000)).command(release(3, h));
    out.push(b.finish());

    let mut b = Bed::redis(
        "redis-stray-messages",
        "Wake-up messages that are malformed, for another channel or for a token not waiting are ignored.",
    );
    let channel = b.engines[SUBJECT].wake_channel();
    b.ghost(1, try_lock(1, "jobs"))
        .command(wait_lock(1, "jobs"))
        .notice(Notice::Message {
            channel: channel.clone(),
            payload: vec![0xff, 0x00],
        })
        .notice(Notice::Message {
            channel: channel.clone(),
            payload: b"nobody-1 7".to_vec(),
        })
        .notice(Notice::Message {
            channel: "dlock:wake:elsewhere".into(),
            payload: b"x 1".to_vec(),
        })
        .command(Command::Cancel { op: OpId(1) });
    out.push(b.finish());

    let mut b = Bed::redis(
        "redis-escaped-keys",
        "Names with braces and percent signs are escaped so that all keys of a lock share one hash tag.",
    );
    b.command(try_lock(1, "a{b}%c/ünï"));
    out.push(b.finish());

    let mut b = Bed::redis(
        "redis-lost-during-extend",
        "An extend still under way when the validity runs out ends with it: the hold is lost (expired) and the extend fails LockLost at once; its late reply is ignored.",
    );
    b.command(acquire(1, "jobs", 1, 1_000, Wait::No));
    let h = b.hold(1);
    b.by_hand().command(extend(2, h, 1_000)).advance(3_000);
    b.held.clear();
    out.push(b.finish());

    let mut b = Bed::redis(
        "redis-non-fair",
        "Non-fair ACQUIREs carry 'barge'. A non-fair release frees the lock instead of handing it over and wakes the first waiter with 'free'; the waiter comes and takes it with its own ACQUIRE. The subject's own non-fair release says 'free'.",
    );
    b.ghost(1, non_fair(1, "jobs", Wait::No))
        .command(non_fair(1, "jobs", Wait::Forever))
        .ghost(1, release(2, HoldId(1)));
    let h = b.hold(1);
    b.ghost(1, wait_lock(3, "jobs")).command(release(2, h));
    out.push(b.finish());

    let mut b = Bed::redis(
        "redis-semaphore",
        "Each acquire of a semaphore takes a permit of its own (PERMIT-ACQUIRE, with the number of permits in place of the count; never reentrant). With both permits taken the next acquire queues; a release (PERMIT-RELEASE) hands its permit to it; the watchdog renews permits with EXTEND, in one batch.",
    );
    b.command(permit(1, "pool", 2, Wait::No))
        .ghost(1, permit(1, "pool", 2, Wait::No))
        .command(permit(2, "pool", 2, Wait::Forever))
        .ghost(1, release(2, HoldId(1)))
        .advance(4_000);
    let (first, second) = (b.hold(1), b.hold(2));
    b.command(release(3, first)).command(release(4, second));
    out.push(b.finish());

    let mut b = Bed::redis(
        "redis-semaphore-permits",
        "A semaphore in use with 2 permits refuses an acquire that says 3 (invalid-argument, from the server's {4, 2}); 0 permits and 1025 are refused before anything is sent; the same name as a lock is another thing.",
    );
    b.ghost(1, permit(1, "pool", 2, Wait::No))
        .command(permit(1, "pool", 3, Wait::Forever))
        .command(permit(2, "pool", 0, Wait::No))
        .command(permit(3, "pool", 1025, Wait::No))
        .command(try_lock(4, "pool"));
    out.push(b.finish());

    let mut b = Bed::redis(
        "redis-rw-lock",
        "Read and write holds (RW-ACQUIRE with 'read' or 'write'): a ghost reads; the subject's write queues; the ghost's release hands the write hold over. The subject's owner then reads beside its own write hold (the write hold's token rides along: downgrade) and releases the write, still reading; a reader reenters its hold.",
    );
    b.ghost(1, rw(1, "doc", 1, false, Wait::No))
        .command(rw(1, "doc", 1, true, Wait::Forever))
        .ghost(1, release(2, HoldId(1)));
    let w = b.hold(1);
    b.command(rw(2, "doc", 1, false, Wait::No));
    let r = b.hold(2);
    b.command(release(3, w))
        .command(rw(4, "doc", 1, false, Wait::No))
        .command(release(5, r))
        .command(release(6, r));
    out.push(b.finish());

    let mut b = Bed::redis(
        "redis-rw-lock-refused",
        "An owner that holds a read hold may not ask to write (no upgrade), a read-write lock is never non-fair, and a writer waits while readers hold: all refused or busy with nothing sent but the try.",
    );
    let non_fair = match rw(3, "doc", 2, true, Wait::No) {
        Command::Acquire(a) => Command::Acquire(Acquire { fair: false, ..a }),
        _ => unreachable!(),
    };
    b.command(rw(1, "doc", 1, false, Wait::No))
        .command(rw(2, "doc", 1, true, Wait::No))
        .command(non_fair)
        .command(rw(4, "doc", 2, true, Wait::No));
    out.push(b.finish());

    let mut b = Bed::redis(
        "redis-election",
        "An election (§20): the subject observes 'scheduler' (SUBSCRIBE to its channel, then LEADER: nobody leads). A ghost takes the lock and proclaims: its message is news at once, and a read follows. The subject campaigns (ACQUIRE, queued); the ghost resigns (RESIGN hands the lock over); the subject proclaims twice (same term, new value) and resigns; the observer sees each change and then the free lock, and its cancel ends it.",
    );
    election_turns(&mut b, 0);
    out.push(b.finish());

    let mut b = Bed::redis(
        "redis-election-refused",
        "A proclaim of a hold not held, of a value over 4096 bytes, and by a permit's hold, and an observe of an empty name: refused with nothing sent. Messages on an election channel that are malformed or carry an old term change nothing but a read. The subject's release of the hold that proclaimed is a RESIGN; the observer then reports the lock free, and reads again a waiter lease later.",
    );
    b.command(proclaim(1, HoldId(42), "v"))
        .command(permit(2, "pool", 2, Wait::No));
    let p = b.hold(2);
    b.command(proclaim(3, p, "v"))
        .command(acquire(4, "jobs", 1, 2_000, Wait::No));
    let h = b.hold(4);
    b.command(proclaim(5, h, &"v".repeat(dlock_core::MAX_VALUE_LEN + 1)))
        .command(Command::Observe {
            op: OpId(6),
            name: String::new(),
        })
        .command(proclaim(7, h, "jobs:1"))
        .command(Command::Observe {
            op: OpId(8),
            name: "jobs".into(),
        });
    let channel = dlock_core::redis::leader_channel("jobs");
    b.notice(Notice::Message {
        channel: channel.clone(),
        payload: vec![0xff],
    })
    .notice(Notice::Message {
        channel,
        payload: b"1 stale".to_vec(),
    })
    .command(release(9, h))
    .advance(4_000);
    out.push(b.finish());

    out
}

/// Messages a script published (a statement notified), as notices for each engine that
/// subscribed to (listens on) their channel.
fn deliver(
    subscribed: &[BTreeSet<String>],
    messages: Vec<(String, Vec<u8>)>,
    notices: &mut Vec<(usize, Notice)>,
) {
    for (channel, payload) in messages {
        for (to, channels) in subscribed.iter().enumerate() {
            if channels.contains(&channel) {
                let (channel, payload) = (channel.clone(), payload.clone());
                notices.push((to, Notice::Message { channel, payload }));
            }
        }
    }
}

/// The subject observes "scheduler", a ghost leads and proclaims, the subject campaigns, the
/// ghost resigns, the subject proclaims twice, resigns and stops observing. Without a push
/// channel, `look_ms` passes after each step, so that the subject looks again.
fn election_turns(b: &mut Bed, look_ms: u64) {
    let look = |b: &mut Bed| {
        if look_ms > 0 {
            b.advance(look_ms);
        }
    };
    b.command(Command::Observe {
        op: OpId(9),
        name: "scheduler".into(),
    })
    .ghost(1, wait_lock(1, "scheduler"))
    .ghost(1, proclaim(2, HoldId(1), "ghost:1"));
    look(b);
    b.command(wait_lock(1, "scheduler"))
        .ghost(1, release(3, HoldId(1)));
    look(b);
    let h = b.hold(1);
    for (op, value) in [(2, "subject:1"), (3, "subject:2")] {
        b.command(proclaim(op, h, value));
        look(b);
    }
    b.command(release(4, h));
    look(b);
    b.command(Command::Cancel { op: OpId(9) });
}

fn proclaim(op: u64, hold: HoldId, value: &str) -> Command {
    Command::Proclaim {
        op: OpId(op),
        hold,
        value: value.into(),
    }
}

fn rw(op: u64, name: &str, owner: u64, write: bool, wait: Wait) -> Command {
    match acquire(op, name, owner, 10_000, wait) {
        Command::Acquire(a) => Command::Acquire(Acquire {
            kind: if write { Kind::Write } else { Kind::Read },
            ..a
        }),
        _ => unreachable!(),
    }
}

fn permit(op: u64, name: &str, permits: u32, wait: Wait) -> Command {
    match acquire(op, name, 1, 10_000, wait) {
        Command::Acquire(a) => Command::Acquire(Acquire {
            kind: Kind::Semaphore { permits },
            ..a
        }),
        _ => unreachable!(),
    }
}

fn non_fair(op: u64, name: &str, wait: Wait) -> Command {
    match acquire(op, name, 1, 10_000, wait) {
        Command::Acquire(a) => Command::Acquire(Acquire { fair: false, ..a }),
        _ => unreachable!(),
    }
}

fn redlock(name: &'static str, about: &'static str) -> Bed {
    Bed::new(name, about, Protocol::Redlock { nodes: 3 }, 1)
}

fn redlock_only() -> Vec<Json> {
    let mut out = Vec::new();

    let mut b = redlock(
        "redlock-acquire-release",
        "Redlock over 3 nodes: ACQUIRE try goes to every node; a majority grants the lock (counters alike: no RAISE); reentry is counted locally; the last release goes to every node.",
    );
    b.command(try_lock(1, "jobs"));
    let hold = b.hold(1);
    b.command(try_lock(2, "jobs"))
        .command(release(3, hold))
        .command(release(4, hold));
    out.push(b.finish());

    let mut b = redlock(
        "redlock-busy",
        "Another client holds the lock on every node: the try-acquire ends busy and gives back nothing it got (RELEASE to every node).",
    );
    b.ghost(1, try_lock(1, "jobs")).command(try_lock(1, "jobs"));
    out.push(b.finish());

    let mut b = redlock(
        "redlock-raise",
        "One node answers with a counter ahead of the others: it is the tenure's token, and RAISE records it on the nodes behind until a majority carries it, then on the node that grants after the tenure was acquired.",
    );
    b.by_hand().command(try_lock(1, "jobs"));
    b.answer(redis_value(Value::Array(vec![
        Value::Int(1),
        Value::Int(9_000_000_000_000_000),
        Value::Int(1),
    ])));
    b.flush();
    out.push(b.finish());

    let mut b = redlock(
        "redlock-node-down",
        "One of three nodes fails every request: acquire, renewals and release go on with the other two.",
    );
    b.by_hand().command(acquire(1, "jobs", 1, 3_000, Wait::No));
    b.answer(unavailable()).pass().pass();
    b.advance(1_100);
    b.answer(unavailable()).pass().pass();
    let hold = b.hold(1);
    b.command(release(2, hold));
    b.answer(unavailable()).flush();
    out.push(b.finish());

    let mut b = redlock(
        "redlock-wait-backoff",
        "A waiter that finds no majority gives back what it got, backs off for a random while (drawn from the client id) and tries again with a new owner token until the holder lets go.",
    );
    b.ghost(1, try_lock(1, "jobs"))
        .command(acquire(1, "jobs", 1, 3_000, Wait::Forever))
        .advance(30);
    b.ghost(1, release(2, HoldId(1))).advance(300);
    out.push(b.finish());

    let mut b = redlock(
        "redlock-majority-lost",
        "Two of three nodes restart empty: the next renewal is refused by a majority and the hold is lost (not-owner) at once.",
    );
    b.command(acquire(1, "jobs", 1, 3_000, Wait::No))
        .wipe_node(0)
        .wipe_node(1)
        .advance(1_100);
    out.push(b.finish());

    out
}

fn zk_only() -> Vec<Json> {
    let mut out = Vec::new();

    let mut b = Bed::zk(
        "zookeeper-disconnected",
        "A broken connection loses every hold at once (disconnected); after reconnecting the engine deletes its old node.",
    );
    b.command(try_lock(1, "jobs"))
        .notice(Notice::Disconnected)
        .notice(Notice::Connected);
    out.push(b.finish());

    let mut b = Bed::zk(
        "zookeeper-session-expired",
        "Session expiry loses the hold (session-expired) and fails a waiter that had a node with SessionExpired.",
    );
    b.ghost(1, try_lock(1, "other"))
        .command(try_lock(1, "jobs"))
        .command(wait_lock(2, "other"))
        .expire_session()
        .notice(Notice::SessionExpired)
        .notice(Notice::Connected);
    out.push(b.finish());

    let mut b = Bed::zk(
        "zookeeper-heartbeat",
        "A holder checks its session every third of the session timeout; each answer moves the validity on.",
    );
    b.command(try_lock(1, "jobs")).advance(7_000);
    out.push(b.finish());

    let mut b = Bed::zk(
        "zookeeper-heartbeat-lost",
        "Heartbeats with no answer let the validity run out: the hold is lost (expired).",
    );
    b.command(try_lock(1, "jobs")).by_hand().advance(7_000);
    b.held.clear();
    out.push(b.finish());

    let mut b = Bed::zk(
        "zookeeper-lost-create",
        "A waiter's create whose reply is lost is found again by its name in the children listing: no second node, and the waiter goes on with it.",
    );
    b.ghost(1, try_lock(1, "jobs"))
        .by_hand()
        .command(wait_lock(1, "jobs"));
    let create = b.take();
    let (_, _) = b.run(SUBJECT, create.op.clone());
    b.answer_late(create.id, unavailable())
        .flush()
        .advance(1_000)
        .ghost(1, release(2, HoldId(1)));
    out.push(b.finish());

    let mut b = Bed::zk(
        "zookeeper-abandoned-create",
        "A try-acquire whose create reply is lost fails Unavailable, and the engine sweeps the directory for the node the create may have left.",
    );
    b.ghost(1, try_lock(1, "jobs"))
        .ghost(1, release(2, HoldId(1)))
        .by_hand()
        .command(try_lock(1, "jobs"));
    let create = b.take();
    let (_, _) = b.run(SUBJECT, create.op.clone());
    b.answer_late(create.id, unavailable()).flush();
    out.push(b.finish());

    let mut b = Bed::zk(
        "zookeeper-malformed-reply",
        "Replies that do not fit the request fail the acquire MalformedReply (a create answered with a foreign path, children answered with Created).",
    );
    b.by_hand()
        .command(try_lock(1, "jobs"))
        .pass()
        .pass()
        .answer(zk_reply(ZkReply::Created("/elsewhere/x".into())))
        .flush()
        .by_hand()
        .command(try_lock(2, "other"))
        .pass()
        .pass()
        .pass()
        .answer(zk_reply(ZkReply::Created("/dlock/other".into())))
        .flush();
    out.push(b.finish());

    let mut b = Bed::new(
        "zookeeper-predecessor-watch",
        "Each waiter watches only its predecessor: the second waiter is not woken by the holder's release, only by its predecessor's.",
        zookeeper(),
        2,
    );
    b.ghost(1, try_lock(1, "jobs"))
        .ghost(2, wait_lock(2, "jobs"))
        .command(wait_lock(1, "jobs"))
        .ghost(1, release(3, HoldId(1)))
        .ghost(2, release(4, HoldId(1)));
    out.push(b.finish());

    let mut b = Bed::new(
        "zookeeper-rw-lock",
        "A read-write lock's directory is <name>.rwlock; writers' nodes are <token>-__WRIT__<seq>, readers' <token>-__READ__<seq> (Curator's names). A writer waits for the reader ahead; a reader that comes after the writer watches the writer's node only. The writer's owner reads beside its write hold (downgrade): its read node is EPHEMERAL, with the write node's number, and its token is the write hold's.",
        zookeeper(),
        1,
    );
    b.ghost(1, rw(1, "jobs", 1, false, Wait::No))
        .command(rw(1, "jobs", 1, true, Wait::Forever))
        .ghost(1, release(2, HoldId(1)));
    let w = b.hold(1);
    b.command(rw(2, "jobs", 1, false, Wait::No));
    let r = b.hold(2);
    b.command(release(3, w)).command(release(4, r));
    out.push(b.finish());

    let mut b = Bed::new(
        "zookeeper-semaphore",
        "A semaphore is Curator's InterProcessSemaphoreV2 at <name>.semaphore: a waiter holds the gate (a lock in locks/), adds a lease to leases/ and, with 2 other leases there and 2 permits, watches them; the release of one gives it a permit, fenced by its gate node's number + 1, and its gate node goes.",
        zookeeper(),
        2,
    );
    b.ghost(1, permit(1, "jobs", 2, Wait::No))
        .ghost(2, permit(1, "jobs", 2, Wait::No))
        .command(permit(1, "jobs", 2, Wait::Forever))
        .ghost(1, release(2, HoldId(1)));
    let h = b.hold(1);
    b.command(release(2, h));
    out.push(b.finish());

    let mut b = Bed::with(
        "zookeeper-custom-root",
        "A custom root: lock directories are created under it, with escaped names.",
        Config {
            protocol: Protocol::ZooKeeper(ZkSettings {
                root: "/apps/billing/locks".into(),
                session_timeout: Duration::from_secs(4),
            }),
            ..config(1, &Protocol::Redis)
        },
        0,
    );
    b.command(try_lock(1, "invoice 7/ü"));
    out.push(b.finish());

    let mut b = Bed::zk(
        "zookeeper-pin",
        "A lock directory someone else created (Curator, as a container node that ZooKeeper deletes once empty) has no pin: the client creates the persistent child dlock-pin before a number from that directory is a token, and lists again. A released lock then leaves the directory in place.",
    );
    b.zk_container("/dlock").zk_container("/dlock/jobs");
    b.command(wait_lock(1, "jobs"));
    let h = b.hold(1);
    b.command(release(2, h)).command(wait_lock(3, "jobs"));
    out.push(b.finish());

    let mut b = Bed::zk(
        "zookeeper-release-unavailable",
        "A release whose delete fails with a transport error fails Unavailable, and the engine deletes the node again until it is gone.",
    );
    b.command(try_lock(1, "jobs"));
    let h = b.hold(1);
    b.by_hand().command(release(2, h)).answer(unavailable());
    b.by_server().advance(1_000);
    b.flush();
    out.push(b.finish());

    let mut b = Bed::zk(
        "zookeeper-election",
        "An election on ZooKeeper (§20, Curator's LeaderSelector layout): the subject observes 'scheduler' (WATCH-CHILDREN of the directory: missing, so it is made with its pin and listed again; nobody leads). A ghost takes the lock and proclaims (SET-DATA of its node): the watches fire, the subject lists and reads the lowest node's data (GET-DATA with a watch). The subject campaigns and queues; the ghost resigns (deletes its node); the subject proclaims twice and resigns; its observer follows each change by watches, and its cancel ends it.",
    );
    election_turns(&mut b, 0);
    out.push(b.finish());

    out
}

/// The SQL backend's own: the semaphore and read-write lock as the database functions run
/// them (wake-ups by NOTIFY on PostgreSQL, by the waiter's next look on MySQL).
fn sql_only() -> Vec<Json> {
    let mut out = Vec::new();
    for (p, dialect) in [("postgres", Dialect::Postgres), ("mysql", Dialect::Mysql)] {
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let mut b = Bed::new(
            leak(format!("{p}-semaphore")),
            "A semaphore of 2 permits: with both held, a waiter queues; the release of one permit hands it to the waiter with the next token.",
            sql(dialect),
            2,
        );
        b.ghost(1, permit(1, "jobs", 2, Wait::No))
            .ghost(2, permit(1, "jobs", 2, Wait::No))
            .command(permit(1, "jobs", 2, Wait::Forever))
            .advance(200);
        b.ghost(1, release(2, HoldId(1))).advance(1_000);
        let h = b.hold(1);
        b.command(release(2, h));
        out.push(b.finish());

        let mut b = Bed::new(
            leak(format!("{p}-rw-lock")),
            "A read-write lock: a writer queues behind another client's reader and is handed the lock when the reader releases; its owner then reads beside the write hold (downgrade).",
            sql(dialect),
            1,
        );
        b.ghost(1, rw(1, "jobs", 1, false, Wait::No))
            .command(rw(1, "jobs", 1, true, Wait::Forever))
            .advance(200);
        b.ghost(1, release(2, HoldId(1))).advance(1_000);
        let w = b.hold(1);
        b.command(rw(2, "jobs", 1, false, Wait::No));
        let r = b.hold(2);
        b.command(release(3, w)).command(release(4, r));
        out.push(b.finish());

        let about = match dialect {
            Dialect::Postgres => {
                "An election (§20, §18): the subject observes 'scheduler' (LISTEN on the prefix's election channel, then LEADER: nobody leads). A ghost takes the lock and proclaims (PROCLAIM notifies the channel with the election's name): the subject reads LEADER. The subject campaigns (queued); the ghost resigns (RESIGN hands the lock over and notifies); the subject proclaims twice (same term, new value) and resigns; the observer sees each change and then the free lock, and its cancel ends it."
            }
            Dialect::Mysql => {
                "An election (§20, §18) without a push channel: the subject observes 'scheduler' by reading LEADER, and again every poll interval (jittered). A ghost takes the lock and proclaims; the subject campaigns (queued, looking again every poll interval); the ghost resigns (RESIGN hands the lock over); the subject proclaims twice (same term, new value) and resigns; the observer's reads see each change and then the free lock, and its cancel ends it."
            }
        };
        let mut b = Bed::new(leak(format!("{p}-election")), about, sql(dialect), 1);
        let look_ms = match dialect {
            Dialect::Postgres => 0,
            Dialect::Mysql => 100, // twice the poll interval
        };
        election_turns(&mut b, look_ms);
        out.push(b.finish());
    }
    out
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .map_or_else(dlock_contract::dir, PathBuf::from);
    let mut vectors = common("redis", &Protocol::Redis);
    vectors.extend(redis_only());
    vectors.extend(redisson_only());
    vectors.extend(common("zookeeper", &zookeeper()));
    vectors.extend(zk_only());
    vectors.extend(redlock_only());
    vectors.extend(common("postgres", &sql(Dialect::Postgres)));
    vectors.extend(common("mysql", &sql(Dialect::Mysql)));
    vectors.extend(sql_only());
    for old in dlock_contract::files_in(&dir) {
        std::fs::remove_file(old).expect("removable");
    }
    for v in &vectors {
        let name = v["name"].as_str().expect("named");
        let path = dir.join(format!("{name}.json"));
        let text = serde_json::to_string_pretty(v).expect("serialisable") + "\n";
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let count = |prefix: &str| {
        vectors
            .iter()
            .filter(|v| v["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
            .count()
    };
    let (zk, redlock) = (count("zookeeper-"), count("redlock-"));
    let (pg, mysql) = (count("postgres-"), count("mysql-"));
    println!(
        "wrote {} vectors to {} ({} Redis, {zk} ZooKeeper, {redlock} Redlock, {pg} PostgreSQL, {mysql} MySQL)",
        vectors.len(),
        dir.display(),
        vectors.len() - zk - redlock - pg - mysql
    );
}
