//! `./just demo`: five workers take turns on one lock, served by the in-memory reference
//! Redis — no server needed. Time is virtual (0.2 ms network latency each way), so the run
//! is instant and identical every time. Watch the fencing tokens grow by one per tenure and
//! the lock go round the queue in FIFO order, each hand-off made by the releasing script.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

use dlock_core::redis::reference::Store;
use dlock_core::redis::{RedisOp, Value};
use dlock_core::{
    Acquire, ClientId, Command, Config, Engine, Event, Input, Instant, Kind, Notice, Op, OpId,
    Output, Response, Wait,
};

const LOCK: &str = "nightly-report";
const WORKERS: usize = 5;
const ROUNDS: u32 = 3;
const LATENCY: Duration = Duration::from_micros(200);

enum Delivery {
    Server {
        worker: usize,
        request: dlock_core::Request,
    },
    Worker {
        worker: usize,
        input: Input,
    },
    Timer {
        worker: usize,
    },
}

struct Worker {
    engine: Engine,
    next_op: u64,
    rounds: u32,
    asked_at: Instant,
}

impl Worker {
    /// The worker asks for the lock at `at`, ready to wait as long as it takes.
    fn ask(&mut self, at: Instant) -> Input {
        self.asked_at = at;
        let op = self.op();
        Input::Command(Command::Acquire(Acquire {
            op,
            name: LOCK.into(),
            owner: 1,
            lease: Duration::from_secs(2),
            wait: Wait::Forever,
            max_hold: None,
            fair: true,
            kind: Kind::Mutex,
        }))
    }

    fn op(&mut self) -> OpId {
        self.next_op += 1;
        OpId(self.next_op)
    }
}

fn main() {
    let start = Instant::from_nanos(0);
    let mut workers: Vec<Worker> = (0..WORKERS)
        .map(|i| {
            let engine =
                Engine::new(Config::new(ClientId(0xd10c_0000 + i as u128)), start).expect("config");
            Worker {
                engine,
                next_op: 0,
                rounds: 0,
                asked_at: start,
            }
        })
        .collect();
    let mut store = Store::new();
    let mut subscribers: BTreeMap<String, usize> = BTreeMap::new();
    let mut net = Network::default();
    let mut tokens = Vec::new();

    println!(
        "{WORKERS} workers, one lock ({LOCK:?}), each taking it {ROUNDS} times; virtual time.\n"
    );
    for (i, w) in workers.iter_mut().enumerate() {
        // Everyone asks at (almost) the same moment.
        let at = start + Duration::from_micros(10 * i as u64);
        let input = w.ask(at);
        net.schedule(at, Delivery::Worker { worker: i, input });
    }

    let mut now = start;
    while let Some((at, delivery)) = net.next() {
        now = at;
        let worker = match delivery {
            Delivery::Server { worker, request } => {
                let Op::Redis(op) = request.op else {
                    unreachable!("a Redis engine asks only Redis ops")
                };
                let reply = match op {
                    RedisOp::Subscribe { channel } => {
                        subscribers.insert(channel, worker);
                        Ok(Value::Status("OK".into()))
                    }
                    RedisOp::Eval { script, keys, args } => {
                        let server_ms = 1_764_000_000_000 + now.as_nanos() / 1_000_000;
                        let outcome = store.eval(server_ms, script, &keys, &args).expect("script");
                        for (channel, payload) in outcome.published {
                            if let Some(&to) = subscribers.get(&channel) {
                                let input = Input::Notice(Notice::Message { channel, payload });
                                net.schedule(now + LATENCY, Delivery::Worker { worker: to, input });
                            }
                        }
                        Ok(outcome.reply)
                    }
                };
                let input = Input::Reply {
                    id: request.id,
                    reply: reply.map(Response::Redis),
                };
                net.schedule(now + LATENCY, Delivery::Worker { worker, input });
                continue;
            }
            Delivery::Worker { worker, input } => {
                workers[worker].engine.handle_input(now, input);
                worker
            }
            Delivery::Timer { worker } => {
                workers[worker].engine.handle_timeout(now);
                worker
            }
        };
        while let Some(out) = workers[worker].engine.poll_output() {
            match out {
                Output::Request(request) => {
                    net.schedule(now + LATENCY, Delivery::Server { worker, request });
                }
                Output::Event(Event::Acquired {
                    hold,
                    fencing_token,
                    ..
                }) => {
                    let w = &mut workers[worker];
                    let waited = now.saturating_duration_since(w.asked_at);
                    println!(
                        "{:>9.3} ms  worker {worker} acquired   fencing token {fencing_token:>2}  (waited {:.3} ms)",
                        ms(now),
                        waited.as_secs_f64() * 1e3
                    );
                    tokens.push(fencing_token);
                    // Work for a while, then release.
                    let work = Duration::from_millis(5 + 3 * worker as u64);
                    let op = w.op();
                    let input = Input::Command(Command::Release { op, hold });
                    net.schedule(now + work, Delivery::Worker { worker, input });
                }
                Output::Event(Event::Released { .. }) => {
                    println!("{:>9.3} ms  worker {worker} released", ms(now));
                    let w = &mut workers[worker];
                    w.rounds += 1;
                    if w.rounds < ROUNDS {
                        let input = w.ask(now);
                        net.schedule(now, Delivery::Worker { worker, input });
                    }
                }
                Output::Event(Event::Renewed { .. }) => {} // the watchdog at work
                Output::Event(other) => println!("{:>9.3} ms  worker {worker} {other:?}", ms(now)),
            }
        }
        // Only wake a worker for its timers while someone still wants the lock.
        if workers.iter().any(|w| w.rounds < ROUNDS)
            && let Some(at) = workers[worker].engine.poll_timeout()
        {
            net.schedule(at.max(now), Delivery::Timer { worker });
        }
        if workers.iter().all(|w| w.rounds == ROUNDS) {
            break;
        }
    }

    let increasing = tokens.windows(2).all(|w| w[0] < w[1]);
    println!(
        "\n{} tenures in {:.3} ms of virtual time; fencing tokens strictly increasing: {increasing}.",
        tokens.len(),
        ms(now)
    );
    assert!(increasing);
}

/// Deliveries in time order (ties in the order they were scheduled).
#[derive(Default)]
struct Network {
    queue: BinaryHeap<Reverse<(Instant, u64)>>,
    deliveries: BTreeMap<u64, Delivery>,
    seq: u64,
}

impl Network {
    fn schedule(&mut self, at: Instant, delivery: Delivery) {
        self.seq += 1;
        self.deliveries.insert(self.seq, delivery);
        self.queue.push(Reverse((at, self.seq)));
    }

    fn next(&mut self) -> Option<(Instant, Delivery)> {
        let Reverse((at, seq)) = self.queue.pop()?;
        Some((at, self.deliveries.remove(&seq)?))
    }
}

fn ms(t: Instant) -> f64 {
    t.as_nanos() as f64 / 1e6
}
