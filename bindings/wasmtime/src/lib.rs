//! Runs dlock's engine from its WebAssembly component (`dlock.wasm`, world `machine`) in
//! wasmtime, as a [`dlock::Machine`]:
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let component = dlock_wasmtime::WasmComponent::from_file("target/dlock.wasm")?;
//! let client = dlock::Client::builder("redis://127.0.0.1:6379").machine(component.factory()).connect().await?;
//! # Ok(())
//! # }
//! ```
//!
//! The component imports nothing, so the linker provides nothing: it cannot reach the
//! network, a clock or a file. Each call runs on a fuel budget and a memory limit; a trap or
//! an exhausted limit becomes a [`dlock::MachineError`], never a crash of the host.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;

use dlock::{Machine, MachineError, MachineFactory};
use wasmtime::component::{Component, Linker, ResourceAny};
use wasmtime::{Config, Store, StoreLimits, StoreLimitsBuilder};

mod bindings {
    wasmtime::component::bindgen!({ world: "machine", path: "wit" });
}

use bindings::exports::dlock::lock as wit;
use wit::engine::Config as WitConfig;

dlock_wit_convert::conversions!(wit);
use convert::cv;

/// Instructions one call may run (a call normally needs a few thousand).
pub const FUEL_PER_CALL: u64 = 50_000_000;
/// Linear memory one engine may use.
pub const MEMORY_LIMIT: usize = 64 << 20;

/// Why the component could not be loaded or started.
#[derive(Debug)]
pub struct WasmError(pub String);

impl std::fmt::Display for WasmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WasmError {}

fn fail(what: &str) -> impl Fn(wasmtime::Error) -> WasmError + '_ {
    move |e| WasmError(format!("{what}: {e:#}"))
}

/// The compiled component, ready to start any number of engines.
#[derive(Clone)]
pub struct WasmComponent {
    engine: wasmtime::Engine,
    component: Component,
    linker: Arc<Linker<StoreLimits>>,
}

impl std::fmt::Debug for WasmComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmComponent")
            .field("imports", &self.imports())
            .finish_non_exhaustive()
    }
}

impl WasmComponent {
    /// Compiles `dlock.wasm`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, WasmError> {
        let bytes = std::fs::read(path.as_ref())
            .map_err(|e| WasmError(format!("reading {}: {e}", path.as_ref().display())))?;
        Self::from_bytes(&bytes)
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WasmError> {
        let mut config = Config::new();
        config.consume_fuel(true);
        let engine = wasmtime::Engine::new(&config).map_err(fail("configuring wasmtime"))?;
        let component = Component::new(&engine, bytes).map_err(fail("compiling the component"))?;
        // The machine world imports nothing: an empty linker is all it gets.
        let linker = Arc::new(Linker::new(&engine));
        Ok(Self {
            engine,
            component,
            linker,
        })
    }

    /// The component's imports: none, for dlock.wasm.
    pub fn imports(&self) -> Vec<String> {
        self.component
            .component_type()
            .imports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect()
    }

    /// Starts one engine (what `dlock_core::Engine::new` does natively).
    pub fn start(
        &self,
        config: dlock_core::Config,
        now: dlock_core::Instant,
    ) -> Result<WasmMachine, WasmError> {
        let limits = StoreLimitsBuilder::new()
            .memory_size(MEMORY_LIMIT)
            .instances(16)
            .build();
        let mut store = Store::new(&self.engine, limits);
        store.limiter(|limits| limits);
        store
            .set_fuel(FUEL_PER_CALL)
            .map_err(fail("setting fuel"))?;
        let instance = bindings::Machine::instantiate(&mut store, &self.component, &self.linker)
            .map_err(fail("instantiating"))?;
        let wit: WitConfig = cv(config);
        let handle = instance
            .dlock_lock_engine()
            .machine()
            .call_create(&mut store, &wit, now.as_nanos())
            .map_err(fail("creating the engine"))?
            .map_err(|e| WasmError(format!("the engine refused its configuration: {e:?}")))?;
        Ok(WasmMachine {
            store,
            instance,
            handle,
        })
    }

    /// A factory for [`dlock::ClientBuilder::machine`].
    pub fn factory(&self) -> MachineFactory {
        let component = self.clone();
        std::sync::Arc::new(move |config, now| {
            let machine = component
                .start(config, now)
                .map_err(|e| dlock::Error::Machine(e.0))?;
            Ok(Box::new(machine) as Box<dyn Machine>)
        })
    }
}

/// One engine running inside the component.
pub struct WasmMachine {
    store: Store<StoreLimits>,
    instance: bindings::Machine,
    handle: ResourceAny,
}

impl std::fmt::Debug for WasmMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmMachine").finish_non_exhaustive()
    }
}

impl WasmMachine {
    /// Refills the fuel budget for one call and turns a trap into a typed error.
    fn call<T>(
        &mut self,
        f: impl FnOnce(
            &bindings::exports::dlock::lock::engine::GuestMachine,
            &mut Store<StoreLimits>,
            ResourceAny,
        ) -> wasmtime::Result<T>,
    ) -> Result<T, MachineError> {
        self.store
            .set_fuel(FUEL_PER_CALL)
            .map_err(|e| MachineError(format!("setting fuel: {e:#}")))?;
        let guest = self.instance.dlock_lock_engine().machine();
        f(&guest, &mut self.store, self.handle).map_err(|e| {
            let trap = e
                .downcast_ref::<wasmtime::Trap>()
                .map(|t| format!(" ({t})"))
                .unwrap_or_default();
            MachineError(format!("the Wasm engine trapped{trap}: {e:#}"))
        })
    }
}

impl Machine for WasmMachine {
    fn step(
        &mut self,
        now: dlock_core::Instant,
        input: Option<dlock_core::Input>,
        outputs: &mut VecDeque<dlock_core::Output>,
    ) -> Result<Option<dlock_core::Instant>, MachineError> {
        let input = input.map(cv);
        let stepped =
            self.call(|g, store, h| g.call_step(store, h, now.as_nanos(), input.as_ref()))?;
        if let Some(bad) = stepped.outputs.iter().find_map(malformed_words) {
            return Err(MachineError(format!(
                "the Wasm engine sent words whose ends {:?} do not split their {} bytes",
                bad.ends,
                bad.text.len()
            )));
        }
        outputs.extend(stepped.outputs.into_iter().map(cv));
        Ok(stepped.timeout.map(dlock_core::Instant::from_nanos))
    }

    fn stats(&mut self) -> Result<dlock_core::Stats, MachineError> {
        let locks = self.call(|g, store, h| g.call_stats(store, h))?;
        Ok(dlock_core::Stats { locks: cv(locks) })
    }
}

/// A script call's keys or arguments in `output` whose ends do not split their text: only a
/// faulty guest sends them, and they are refused before anything reaches a server.
fn malformed_words(output: &wit::engine::Output) -> Option<&wit::transport::Words> {
    use wit::transport::{NodeOp, Op, RedisOp, Request};
    let wit::engine::Output::Request(Request { op, .. }) = output else {
        return None;
    };
    let (Op::Redis(RedisOp::Eval(eval))
    | Op::Redlock(NodeOp {
        op: RedisOp::Eval(eval),
        ..
    })) = op
    else {
        return None;
    };
    [&eval.keys, &eval.args]
        .into_iter()
        .find(|w| !dlock_core::redis::Words::splits(&w.text, &w.ends))
}

#[cfg(test)]
mod tests {
    use super::convert::cv;
    use super::malformed_words;
    use super::wit::engine::Output;
    use super::wit::transport::{Eval, NodeOp, Op, RedisOp, Request, Script, Words};

    #[test]
    fn a_scripts_words_cross_whole_and_bad_ends_are_refused() {
        let words = dlock_core::redis::Words::from(["dlock:{a}:lock", "", "é"]);
        let wit: Words = cv(words.clone());
        assert_eq!(
            (wit.text.as_str(), &wit.ends[..]),
            ("dlock:{a}:locké", &[14, 14, 16][..])
        );
        assert_eq!(cv::<_, dlock_core::redis::Words>(wit), words);
        // A faulty guest's ends: inside the "é", past the text, falling, short of its end.
        // The host refuses its request (`WasmMachine::step`), whether in the keys or the
        // arguments, on one Redis or a Redlock node.
        for ends in [vec![14, 15], vec![17], vec![14, 3, 16], vec![14]] {
            let bad = Words {
                text: "dlock:{a}:locké".into(),
                ends,
            };
            let good: Words = cv(dlock_core::redis::Words::from(["x"]));
            let eval = |keys: &Words, args: &Words| Eval {
                script: Script::Acquire,
                keys: keys.clone(),
                args: args.clone(),
            };
            let requests = [
                Op::Redis(RedisOp::Eval(eval(&bad, &good))),
                Op::Redlock(NodeOp {
                    node: 2,
                    op: RedisOp::Eval(eval(&good, &bad)),
                }),
            ];
            for op in requests {
                let output = Output::Request(Request { id: 7, op });
                assert_eq!(malformed_words(&output).map(|w| &w.ends), Some(&bad.ends));
            }
            let fine = Output::Request(Request {
                id: 7,
                op: Op::Redis(RedisOp::Eval(eval(&good, &good))),
            });
            assert!(malformed_words(&fine).is_none());
            assert!(cv::<_, dlock_core::redis::Words>(bad).is_empty());
        }
    }
}
