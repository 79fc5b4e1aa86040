//! The engine a client runs. By default dlock-core's `Engine`, natively; a host may plug in
//! another implementation of the same sans-IO contract, such as the engine compiled to a
//! WebAssembly component (`dlock-wasmtime`).

use std::collections::VecDeque;

use dlock_core::{Config, Engine, Input, Instant, Observation, Output, Stats};

use crate::Error;

/// Why a pluggable engine could not run a call (a trap, a fuel or memory limit). Fatal: the
/// client stops, failing what was pending and reporting held locks lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineError(pub String);

impl std::fmt::Display for MachineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MachineError {}

/// The sans-IO engine contract of `dlock-core`, one call per event, with room for engines
/// that can fail.
pub trait Machine: Send + 'static {
    /// One event: `input`, or with `None` the timers due at `now`; then every output that
    /// follows, appended to `outputs`, and the next deadline, returned. The contract's
    /// `handle_input` (or `handle_timeout`), `poll_output` until `None` and `poll_timeout` in
    /// one call: an engine behind a boundary (a Wasm component) pays for each crossing.
    fn step(
        &mut self,
        now: Instant,
        input: Option<Input>,
        outputs: &mut VecDeque<Output>,
    ) -> Result<Option<Instant>, MachineError>;
    /// What the engine counted about its locks ([`Engine::stats`]).
    fn stats(&mut self) -> Result<Stats, MachineError>;
    /// Keep each observation for [`Machine::observations`] ([`Engine::keep_observations`]);
    /// an engine that cannot does nothing.
    fn keep_observations(&mut self) {}
    /// The observations kept since the last call ([`Engine::poll_observation`]).
    fn observations(&mut self) -> Vec<Observation> {
        Vec::new()
    }
}

impl Machine for Engine {
    fn step(
        &mut self,
        now: Instant,
        input: Option<Input>,
        outputs: &mut VecDeque<Output>,
    ) -> Result<Option<Instant>, MachineError> {
        Ok(self.step_into(now, input, outputs))
    }

    fn stats(&mut self) -> Result<Stats, MachineError> {
        Ok(Engine::stats(self))
    }

    fn keep_observations(&mut self) {
        Engine::keep_observations(self, true);
    }

    fn observations(&mut self) -> Vec<Observation> {
        std::iter::from_fn(|| Engine::poll_observation(self)).collect()
    }
}

/// Makes a client's engine from its configuration and start time (called again for the
/// Redisson-compatible companion of a client whose locks ask for it, [`crate::LockBuilder::redisson`]).
pub type MachineFactory =
    std::sync::Arc<dyn Fn(Config, Instant) -> Result<Box<dyn Machine>, Error> + Send + Sync>;

/// The default: dlock-core's engine, natively.
pub(crate) fn native(config: Config, now: Instant) -> Result<Box<dyn Machine>, Error> {
    Ok(Box::new(Engine::new(config, now)?))
}
