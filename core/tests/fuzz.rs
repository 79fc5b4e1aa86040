//! Fuzzing the engine with hostile input: random commands (bad names, bad leases, reused op
//! ids, unknown holds), random replies of every shape to real and unknown requests, random
//! notices and random time steps, on both protocols; and the reply decoders on random
//! values.
//!
//! Structured random generation, seeded and replayable (no coverage feedback: cargo-fuzz needs
//! a nightly toolchain). Inputs are biased towards plausible replies so that runs get past
//! the first parse. Checked: no panic; every command ends in exactly one terminal event, and
//! a final `closed` ends whatever is still under way; status decoding turns every reply that
//! does not follow the protocol into a typed error.
//!
//! `cargo test` runs a smoke of each target; `just fuzz` runs them long (release build):
//! `DLOCK_FUZZ_EXECS=N` inputs per target, `DLOCK_FUZZ_SEED=S` replays one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use dlock_core::ZkSettings;
use dlock_core::redis::{self, Value};
use dlock_core::zk::{self, ZkOp, ZkReply};
use dlock_core::{
    Acquire, AcquireMulti, ClientId, Command, Config, Engine, Error, Event, HoldId, Input, Instant,
    Kind, Notice, Op, OpId, Output, Protocol, RequestId, Response, TransportError, Wait,
};
use dlock_testkit::Rng;

const MS: u64 = 1_000_000;

fn execs(smoke: u64) -> std::ops::Range<u64> {
    if let Some(seed) = std::env::var("DLOCK_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return seed..seed + 1;
    }
    let n = std::env::var("DLOCK_FUZZ_EXECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(smoke);
    0..n
}

fn name(rng: &mut Rng) -> String {
    match rng.below(10) {
        0 => String::new(),
        1 => "x".repeat(1024 + rng.below(3) as usize),
        2 => "ü{%}/.\u{0}".into(),
        3 => "x".repeat(1024),
        _ => ["a", "b", "orders/42"][rng.below(3) as usize].into(),
    }
}

fn duration(rng: &mut Rng) -> Duration {
    match rng.below(8) {
        0 => Duration::ZERO,
        1 => Duration::from_millis(rng.below(12)),
        2 => Duration::from_secs(8 * 24 * 3600),
        3 => Duration::from_nanos(rng.next_u64()),
        _ => Duration::from_millis(rng.range(10, 20_000)),
    }
}

fn bytes(rng: &mut Rng) -> Vec<u8> {
    match rng.below(4) {
        0 => (0..rng.below(8)).map(|_| rng.below(256) as u8).collect(),
        1 => rng.range(0, 5).to_string().into_bytes(),
        2 => format!("{:032x}-{:x}", rng.below(3), rng.below(4)).into_bytes(),
        _ => b"OK".to_vec(),
    }
}

fn value(rng: &mut Rng, depth: u32) -> Value {
    match rng.below(if depth > 2 { 4 } else { 7 }) {
        0 => Value::Nil,
        1 => Value::Int(match rng.below(4) {
            0 => rng.next_u64() as i64,
            1 => -(rng.below(3) as i64),
            _ => rng.below(4) as i64,
        }),
        2 => Value::Data(bytes(rng)),
        3 => Value::Status(String::from_utf8_lossy(&bytes(rng)).into_owned()),
        // Arrays of small integers: the shape of most script replies.
        4 | 5 => Value::Array(
            (0..rng.range(1, 4))
                .map(|_| Value::Int(rng.below(4) as i64))
                .collect(),
        ),
        _ => Value::Array((0..rng.below(4)).map(|_| value(rng, depth + 1)).collect()),
    }
}

fn zk_reply(rng: &mut Rng, op: Option<&ZkOp>, seen: &[String]) -> ZkReply {
    let child = |rng: &mut Rng| -> String {
        match rng.below(4) {
            0 if !seen.is_empty() => seen[rng.below(seen.len() as u64) as usize]
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned(),
            1 => format!("other-lock-{:010}", rng.below(5)),
            2 => "junk".into(),
            _ => format!("{:032x}-{:x}-lock-{:010}", 1, rng.below(4), rng.below(5)),
        }
    };
    match (rng.below(7), op) {
        (0, _) => ZkReply::Done,
        (1, _) => ZkReply::NoNode,
        (2 | 3, Some(ZkOp::CreateSequential { prefix })) => {
            ZkReply::Created(format!("{prefix}{:010}", rng.below(5)))
        }
        (2 | 3, Some(ZkOp::CreateEphemeral { path })) => ZkReply::Created(path.clone()),
        (2, _) => ZkReply::Created(format!("/dlock/a/{}", child(rng))),
        (4, _) => ZkReply::NodeExists,
        _ => ZkReply::Children((0..rng.below(4)).map(|_| child(rng)).collect()),
    }
}

/// What the fuzzer remembers of one engine's conversation.
#[derive(Default)]
struct Ledger {
    /// Ops of the commands under way.
    open: BTreeSet<u64>,
    holds: Vec<u64>,
    requests: BTreeMap<RequestId, Op>,
    paths: Vec<String>,
    events: u64,
}

impl Ledger {
    fn drain(&mut self, engine: &mut Engine, seed: u64) {
        while let Some(out) = engine.poll_output() {
            match out {
                Output::Request(r) => {
                    if let Op::Zk(
                        ZkOp::Watch { path }
                        | ZkOp::Delete { path }
                        | ZkOp::Children { path }
                        | ZkOp::CreateEphemeral { path },
                    ) = &r.op
                    {
                        self.paths.push(path.clone());
                    }
                    self.requests.insert(r.id, r.op);
                }
                Output::Event(e) => {
                    self.events += 1;
                    if let Event::Acquired { hold, .. } | Event::AcquiredMulti { hold, .. } = e {
                        self.holds.push(hold.0);
                    }
                    if let Some(op) = e.terminal_op() {
                        let duplicate = matches!(
                            e,
                            Event::Failed {
                                error: Error::DuplicateOp { .. },
                                ..
                            }
                        );
                        assert!(
                            duplicate || self.open.remove(&op.0),
                            "seed {seed}: {e:?} ends op {} which was not under way",
                            op.0
                        );
                    }
                }
            }
        }
    }
}

/// Mostly a valid setting, sometimes anything.
fn setting(rng: &mut Rng) -> Duration {
    if rng.chance(50) {
        duration(rng)
    } else {
        Duration::from_millis(rng.range(10, 10_000))
    }
}

fn engine_config(rng: &mut Rng) -> Config {
    let protocol = if rng.chance(400) {
        Protocol::Redis
    } else if rng.chance(300) {
        // Mostly 3 or 5 nodes, sometimes none or too many.
        let nodes = [3, 5, 1, 0, 256][rng.below(5) as usize];
        Protocol::Redlock { nodes }
    } else {
        let mut zk = ZkSettings::new(setting(rng));
        if rng.chance(100) {
            zk.root = ["", "/", "dlock", "/a//b", "/a/.."][rng.below(5) as usize].into();
        }
        Protocol::ZooKeeper(zk)
    };
    Config {
        waiter_lease: setting(rng),
        request_timeout: setting(rng),
        max_batch: rng.below(4) as usize,
        lock_delay: if rng.chance(200) {
            setting(rng)
        } else {
            Duration::ZERO
        },
        protocol,
        ..Config::new(ClientId(1))
    }
}

#[test]
fn fuzz_engine_inputs() {
    let (mut runs, mut inputs, mut events, mut refused) = (0u64, 0u64, 0u64, 0u64);
    for seed in execs(3_000) {
        let mut rng = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0xF022);
        let config = engine_config(&mut rng);
        let is_redis = matches!(config.protocol, Protocol::Redis | Protocol::Redlock { .. });
        let mut now = Instant::from_nanos(rng.below(1 << 40));
        let mut engine = match Engine::new(config, now) {
            Ok(e) => e,
            Err(e) => {
                assert!(e.is_misuse(), "seed {seed}: Engine::new failed with {e:?}");
                refused += 1;
                continue;
            }
        };
        runs += 1;
        let mut ledger = Ledger::default();
        ledger.drain(&mut engine, seed);
        for _ in 0..rng.range(1, 200) {
            inputs += 1;
            let input = match rng.below(10) {
                0..=2 => {
                    let op = rng.below(12);
                    let cmd = match rng.below(6) {
                        0 | 1 => Command::Acquire(Acquire {
                            op: OpId(op),
                            name: name(&mut rng),
                            owner: rng.below(3),
                            lease: duration(&mut rng),
                            wait: match rng.below(3) {
                                0 => Wait::No,
                                1 => Wait::Forever,
                                _ => Wait::Until(now + duration(&mut rng)),
                            },
                            max_hold: rng.chance(200).then(|| duration(&mut rng)),
                            fair: rng.below(3) != 0,
                            kind: match rng.below(8) {
                                0 => Kind::Semaphore {
                                    permits: rng.below(4) as u32,
                                },
                                1 => Kind::Read,
                                2 => Kind::Write,
                                _ => Kind::Mutex,
                            },
                        }),
                        2 => Command::Release {
                            op: OpId(op),
                            hold: HoldId(pick_hold(&mut rng, &ledger)),
                        },
                        3 => Command::Extend {
                            op: OpId(op),
                            hold: HoldId(pick_hold(&mut rng, &ledger)),
                            lease: duration(&mut rng),
                        },
                        4 => Command::Cancel { op: OpId(op) },
                        // Multi-locks of 0 to 3 names (duplicates, empty and overlong names
                        // among them), and now and then an op id or owner the engine reserves.
                        _ => Command::AcquireMulti(AcquireMulti {
                            op: OpId(if rng.chance(50) {
                                dlock_core::RESERVED_IDS | op
                            } else {
                                op
                            }),
                            names: (0..rng.below(4)).map(|_| name(&mut rng)).collect(),
                            lease: duration(&mut rng),
                            wait: [Wait::No, Wait::Forever][rng.below(2) as usize],
                            max_hold: None,
                        }),
                    };
                    if !matches!(cmd, Command::Cancel { .. }) {
                        ledger.open.insert(cmd.op().0);
                    }
                    Input::Command(cmd)
                }
                3..=6 => {
                    let (id, op) = match ledger.requests.len() {
                        0 => (RequestId(rng.below(100)), None),
                        n => {
                            let (id, op) = ledger
                                .requests
                                .iter()
                                .nth(rng.below(n as u64) as usize)
                                .expect("in range");
                            (*id, Some(op.clone()))
                        }
                    };
                    ledger.requests.remove(&id);
                    let reply = match rng.below(8) {
                        0 => Err(TransportError::Unavailable("reset".into())),
                        1 => Err(TransportError::Server("ERR".into())),
                        _ if is_redis ^ rng.chance(50) => Ok(Response::Redis(value(&mut rng, 0))),
                        _ => {
                            let zk_op = match &op {
                                Some(Op::Zk(z)) => Some(z),
                                _ => None,
                            };
                            Ok(Response::Zk(zk_reply(&mut rng, zk_op, &ledger.paths)))
                        }
                    };
                    Input::Reply { id, reply }
                }
                7 => Input::Notice(match rng.below(12) {
                    0 => Notice::Connected,
                    1 => Notice::Disconnected,
                    2 => Notice::SessionExpired,
                    3 if rng.chance(300) => Notice::Closed,
                    4..=6 if !ledger.paths.is_empty() => Notice::Watch {
                        path: ledger.paths[rng.below(ledger.paths.len() as u64) as usize].clone(),
                    },
                    _ => Notice::Message {
                        channel: if rng.chance(700) {
                            engine.wake_channel()
                        } else {
                            "dlock:wake:x".into()
                        },
                        payload: if rng.chance(500) {
                            format!("{:032x}-{:x} {}", 1, rng.below(4), rng.below(5)).into_bytes()
                        } else {
                            bytes(&mut rng)
                        },
                    },
                }),
                _ => {
                    // Time: forward (often to the next timer), sometimes backwards.
                    now = match (rng.below(4), engine.poll_timeout()) {
                        (0, _) => {
                            Instant::from_nanos(now.as_nanos().saturating_sub(rng.below(MS * 1000)))
                        }
                        (1 | 2, Some(at)) => at.max(now),
                        _ => now + Duration::from_nanos(rng.below(3_000 * MS)),
                    };
                    engine.handle_timeout(now);
                    ledger.drain(&mut engine, seed);
                    continue;
                }
            };
            engine.handle_input(now, input);
            ledger.drain(&mut engine, seed);
        }
        // Closing ends everything that is still under way, at once.
        engine.handle_input(now, Input::Notice(Notice::Closed));
        ledger.drain(&mut engine, seed);
        assert!(
            ledger.open.is_empty(),
            "seed {seed}: ops {:?} never ended",
            ledger.open
        );
        events += ledger.events;
    }
    println!(
        "fuzz engine inputs: {runs} engines ({refused} configurations refused), {inputs} inputs, {events} events, 0 panics"
    );
}

fn pick_hold(rng: &mut Rng, ledger: &Ledger) -> u64 {
    match ledger.holds.len() {
        n if n > 0 && rng.chance(800) => ledger.holds[rng.below(n as u64) as usize],
        _ => rng.below(5),
    }
}

#[test]
fn fuzz_reply_decoding() {
    let zk = Protocol::ZooKeeper(ZkSettings::new(Duration::from_secs(6)));
    let redlock = Protocol::Redlock { nodes: 3 };
    let mut decoded = 0u64;
    for seed in execs(20_000) {
        let mut rng = Rng(seed ^ 0xDEC0DE);
        let v = value(&mut rng, 0);
        let _ = redis::parse_status(&v);
        for protocol in [&Protocol::Redis, &zk, &redlock] {
            let reply = match rng.below(3) {
                0 => Ok(Response::Redis(v.clone())),
                1 => Ok(Response::Zk(zk_reply(&mut rng, None, &[]))),
                _ => Err(TransportError::Unavailable("reset".into())),
            };
            if let Err(e) = protocol.parse_status(reply) {
                assert!(
                    matches!(
                        e,
                        Error::MalformedReply(_) | Error::Unavailable(_) | Error::Backend(_)
                    ),
                    "seed {seed}: status decoding failed with {e:?}"
                );
            }
        }
        let payload = bytes(&mut rng);
        let _ = redis::parse_wake(&payload);
        let text = String::from_utf8_lossy(&payload);
        let _ = zk::parse_child(&text);
        let _ = dlock_core::token_seq(ClientId(1), &text);
        let _ = redis::parse_raise(&v);
        decoded += 1;
    }
    println!("fuzz reply decoding: {decoded} inputs, 0 panics");
}
