//! `Engine`: the sans-IO engine itself, for Node hosts that bring their own I/O (an existing
//! ioredis connection). Inputs, outputs and the configuration cross the boundary as JSON text
//! in the form of `dlock::json` (docs/PROTOCOL.md §11); `index.js` parses and stringifies, so
//! JavaScript sees plain objects with numbers (never BigInts). Times are nanoseconds.

use dlock::json::JsonEngine;
use napi::Result;
use napi_derive::napi;

use crate::coded;

fn invalid(e: impl std::fmt::Display) -> napi::Error {
    coded("DLOCK_INVALID_ARGUMENT", e)
}

fn parse(what: &str, text: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| invalid(format!("{what} is not JSON: {e}")))
}

/// Nanoseconds from JS: a finite number >= 0 (exact up to 2^53).
fn nanos(now: f64) -> Result<u64> {
    if !now.is_finite() || now < 0.0 {
        return Err(invalid(format!("now must be nanoseconds >= 0, got {now}")));
    }
    Ok(now as u64)
}

#[napi]
#[derive(Debug)]
pub struct NativeEngine {
    inner: JsonEngine,
}

#[napi]
impl NativeEngine {
    #[napi(constructor)]
    pub fn new(config: String, now: f64) -> Result<Self> {
        let inner = JsonEngine::new(&parse("config", &config)?, nanos(now)?).map_err(invalid)?;
        Ok(Self { inner })
    }

    #[napi(getter)]
    pub fn config(&self) -> String {
        self.inner.config().to_string()
    }

    #[napi(getter)]
    pub fn wake_channel(&self) -> String {
        self.inner.wake_channel()
    }

    #[napi]
    pub fn handle_input(&mut self, now: f64, input: String) -> Result<()> {
        let input = parse("input", &input)?;
        self.inner
            .handle_input(nanos(now)?, &input)
            .map_err(invalid)
    }

    #[napi]
    pub fn handle_timeout(&mut self, now: f64) -> Result<()> {
        self.inner.handle_timeout(nanos(now)?);
        Ok(())
    }

    #[napi]
    pub fn poll_output(&mut self) -> Option<String> {
        self.inner.poll_output().map(|o| o.to_string())
    }

    #[napi]
    pub fn poll_timeout(&self) -> Option<f64> {
        self.inner.poll_timeout().map(|t| t as f64)
    }

    #[napi]
    pub fn hold(&self, hold: f64) -> Result<Option<String>> {
        Ok(self.inner.hold(nanos(hold)?).map(|h| h.to_string()))
    }

    /// What the engine counted, as JSON (`dlock::json::stats_to_json`).
    #[napi]
    pub fn stats(&self) -> String {
        self.inner.stats().to_string()
    }

    #[napi]
    pub fn script_source(name: String) -> Result<String> {
        dlock::json::script_source(&name)
            .ok_or_else(|| invalid(format!("no script named {name:?}")))
    }
}
