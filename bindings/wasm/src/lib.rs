//! dlock's engine as a WebAssembly component. It exports the `machine` world of `wit/` and
//! imports nothing: no network, clock or file. The host feeds inputs and drains outputs
//! exactly as it would with `dlock_core::Engine`; this crate only translates between the
//! WIT types and the engine's.
//!
//! Build: `cargo build -p dlock-component --target wasm32-unknown-unknown --profile wasm-release`, then
//! turn the core module into a component (`just wasm` does both and writes
//! `target/dlock.wasm`).

use std::cell::RefCell;

use dlock_core as core_;

/// The generated bindings and ABI glue: the only unsafe code in the crate, none of it written
/// by hand.
#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({ world: "machine", path: "../../wit" });

    use super::Component;
    export!(Component);
}

use bindings::exports::dlock::lock as wit;
use wit::engine::{
    Config, Guest, GuestMachine, Input, LockStats, Machine as MachineHandle, Output, Stepped,
};
use wit::transport::Script;
use wit::types::Error;

dlock_wit_convert::conversions!(wit);
use convert::cv;

struct Component;

impl Guest for Component {
    type Machine = Machine;

    fn script_source(script: Script) -> String {
        cv::<_, core_::redis::Script>(script).source()
    }
}

/// One engine instance; the component model hands out `&self`, so it lives in a RefCell.
struct Machine {
    engine: RefCell<core_::Engine>,
}

impl GuestMachine for Machine {
    fn create(config: Config, now: u64) -> Result<MachineHandle, Error> {
        let engine = core_::Engine::new(cv(config), core_::Instant::from_nanos(now)).map_err(cv)?;
        Ok(MachineHandle::new(Machine {
            engine: RefCell::new(engine),
        }))
    }

    fn handle_input(&self, now: u64, input: Input) {
        self.engine
            .borrow_mut()
            .handle_input(core_::Instant::from_nanos(now), cv(input));
    }

    fn handle_timeout(&self, now: u64) {
        self.engine
            .borrow_mut()
            .handle_timeout(core_::Instant::from_nanos(now));
    }

    fn poll_output(&self) -> Option<Output> {
        self.engine.borrow_mut().poll_output().map(cv)
    }

    fn drain(&self) -> Vec<Output> {
        std::iter::from_fn(|| self.poll_output()).collect()
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.engine
            .borrow()
            .poll_timeout()
            .map(core_::Instant::as_nanos)
    }

    fn step(&self, now: u64, input: Option<Input>) -> Stepped {
        let step = self
            .engine
            .borrow_mut()
            .step(core_::Instant::from_nanos(now), input.map(cv));
        Stepped {
            outputs: step.outputs.into_iter().map(cv).collect(),
            timeout: step.timeout.map(core_::Instant::as_nanos),
        }
    }

    fn stats(&self) -> Vec<LockStats> {
        cv(self.engine.borrow().stats().locks)
    }
}
