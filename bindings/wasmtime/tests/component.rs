//! The component: no imports, the same outputs as the native engine for the same inputs, and
//! limits that become typed errors.

use std::collections::VecDeque;
use std::time::Duration;

use dlock::Machine;
use dlock_core::redis::RedisOp;
use dlock_core::redis::reference::Store;
use dlock_core::{
    Acquire, ClientId, Command, Config, Engine, HoldId, Input, Instant, Kind, Notice, OpId, Output,
    Step, Wait,
};
use dlock_testkit::Rng;
use dlock_wasmtime::WasmComponent;

/// dlock.wasm, compiled once for all the tests here (a debug build takes seconds for it).
fn component() -> WasmComponent {
    static COMPONENT: std::sync::OnceLock<WasmComponent> = std::sync::OnceLock::new();
    COMPONENT
        .get_or_init(|| {
            WasmComponent::from_file(dlock_testkit::wasm_component())
                .unwrap_or_else(|e| panic!("{e} (build it with `just wasm`)"))
        })
        .clone()
}

#[test]
fn the_component_imports_nothing() {
    let c = component();
    assert_eq!(c.imports(), Vec::<String>::new());
    let size = std::fs::metadata(dlock_testkit::wasm_component())
        .unwrap()
        .len();
    println!("dlock.wasm: {size} bytes, imports: none");
}

/// A native engine and a Wasm engine fed the very same inputs.
struct Twin {
    native: Engine,
    wasm: dlock_wasmtime::WasmMachine,
    holds: Vec<HoldId>,
    next_op: u64,
}

impl Twin {
    /// One step of both (`None`: the timers due at `now`); they must agree output for output
    /// and on the next deadline.
    fn step(&mut self, now: Instant, input: Option<Input>, steps: &mut u64) -> Vec<Output> {
        let native = self.native.step(now, input.clone());
        let mut outputs = VecDeque::new();
        let timeout = self.wasm.step(now, input, &mut outputs).expect("wasm step");
        let wasm = Step {
            outputs: outputs.into(),
            timeout,
        };
        assert_eq!(
            native, wasm,
            "native and Wasm engines differ after {steps} outputs"
        );
        *steps += native.outputs.len() as u64;
        native.outputs
    }
}

#[test]
fn native_and_wasm_engines_give_identical_outputs() {
    let component = component();
    let mut store = Store::new();
    let mut rng = Rng(7);
    let mut now = Instant::from_nanos(1_000_000);
    let mut twins: Vec<Twin> = (0..3)
        .map(|i| {
            let mut config = Config::new(ClientId(0x5eed_0000 + i));
            config.waiter_lease = Duration::from_millis(300);
            Twin {
                native: Engine::new(config.clone(), now).unwrap(),
                wasm: component.start(config, now).unwrap(),
                holds: Vec::new(),
                next_op: 1,
            }
        })
        .collect();
    let mut steps = 0;
    let names = ["a", "b{c}"];
    for _ in 0..3000 {
        now = now + Duration::from_millis(rng.below(40));
        let c = rng.below(3) as usize;
        let t = &mut twins[c];
        let mut pending: Vec<(usize, Output)> = t
            .step(now, None, &mut steps)
            .into_iter()
            .map(|o| (c, o))
            .collect();
        let op = OpId(t.next_op);
        t.next_op += 1;
        let cmd = match rng.below(10) {
            0..=4 => Command::Acquire(Acquire {
                op,
                name: names[rng.below(2) as usize].into(),
                owner: rng.below(2),
                lease: Duration::from_millis([0, 50, 500][rng.below(3) as usize]),
                wait: [
                    Wait::No,
                    Wait::Forever,
                    Wait::Until(now + Duration::from_millis(200)),
                ][rng.below(3) as usize],
                max_hold: None,
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
            5..=7 if !t.holds.is_empty() => Command::Release {
                op,
                hold: t.holds.remove(rng.below(t.holds.len() as u64) as usize),
            },
            8 if !t.holds.is_empty() => Command::Extend {
                op,
                hold: t.holds[0],
                lease: Duration::from_millis(400),
            },
            _ => Command::Cancel {
                op: OpId(op.0.saturating_sub(1 + rng.below(3))),
            },
        };
        let outputs = t.step(now, Some(Input::Command(cmd)), &mut steps);
        pending.extend(outputs.into_iter().map(|o| (c, o)));
        // Serve every request at once; wake-ups go to whoever subscribed.
        while let Some((i, out)) = pending.pop() {
            match out {
                Output::Request(r) => {
                    let dlock_core::Op::Redis(op) = r.op else {
                        panic!("a Redis engine sent {:?}", r.op)
                    };
                    let reply = match op {
                        RedisOp::Subscribe { .. } => {
                            Ok(dlock_core::redis::Value::Status("OK".into()))
                        }
                        RedisOp::Eval { script, keys, args } => {
                            let outcome = store
                                .eval(
                                    1_764_000_000_000 + now.as_nanos() / 1_000_000,
                                    script,
                                    &keys,
                                    &args,
                                )
                                .unwrap();
                            for (channel, payload) in outcome.published {
                                let to = twins
                                    .iter()
                                    .position(|t| t.native.wake_channel() == channel)
                                    .unwrap();
                                let message = Input::Notice(Notice::Message { channel, payload });
                                let outputs = twins[to].step(now, Some(message), &mut steps);
                                pending.extend(outputs.into_iter().map(|o| (to, o)));
                            }
                            Ok(outcome.reply)
                        }
                    };
                    let reply = reply.map(dlock_core::Response::Redis);
                    let outputs =
                        twins[i].step(now, Some(Input::Reply { id: r.id, reply }), &mut steps);
                    pending.extend(outputs.into_iter().map(|o| (i, o)));
                }
                Output::Event(dlock_core::Event::Acquired { hold, .. }) => {
                    twins[i].holds.push(hold)
                }
                Output::Event(dlock_core::Event::Lost { hold, .. }) => {
                    twins[i].holds.retain(|h| *h != hold)
                }
                Output::Event(_) => {}
            }
        }
    }
    assert!(steps > 4000, "only {steps} outputs compared");
    println!("native and Wasm engines agreed on {steps} outputs");
}

#[test]
fn an_exhausted_fuel_budget_is_a_typed_error_not_a_crash() {
    let component = component();
    let mut machine = component
        .start(Config::new(ClientId(1)), Instant::from_nanos(0))
        .unwrap();
    // A reply of two million items is more than one call's fuel and memory allow.
    let big = dlock_core::redis::Value::Array(vec![
        dlock_core::redis::Value::Data(vec![b'x'; 16]);
        2_000_000
    ]);
    let mut outputs = VecDeque::new();
    let result = machine.step(
        Instant::from_nanos(1),
        Some(Input::Reply {
            id: dlock_core::RequestId(1),
            reply: Ok(dlock_core::Response::Redis(big)),
        }),
        &mut outputs,
    );
    let err = result.expect_err("a 2-million-item reply exceeds the per-call fuel or memory limit");
    assert!(err.0.contains("trapped"), "{err}");
    // The engine is unusable afterwards, but the host is fine and can start another.
    let mut fresh = component
        .start(Config::new(ClientId(2)), Instant::from_nanos(0))
        .unwrap();
    let mut first = VecDeque::new();
    fresh
        .step(Instant::from_nanos(1), None, &mut first)
        .unwrap();
    assert!(matches!(Vec::from(first).as_slice(), [Output::Request(_)]));
}
