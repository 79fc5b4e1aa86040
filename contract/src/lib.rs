//! The engine test vectors in `tests/vectors/*.json`, and the replay every host's runner does.
//!
//! A vector is one engine's conversation: its configuration, the instant it starts, and
//! steps. Each step feeds the engine at `now` — the `input` if there is one
//! (`handle_input`), otherwise nothing (`handle_timeout`) — then drains every output and
//! reads `poll_timeout`. The outputs and the timeout must equal `outputs` and `timeout`
//! exactly. Inputs, outputs and the configuration use the JSON form of [`dlock::json`].
//!
//! The vectors are written by `just vectors` (`src/bin/generate.rs`, which runs the native
//! engine against the reference Redis and ZooKeeper of `dlock-core`) and checked in; runners
//! only read them.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use dlock::Machine;
use dlock::json::{config_from_json, input_from_json, output_to_json};
use dlock_core::{Config, Instant};
use serde_json::Value as Json;

/// Where the vectors live, from this crate.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors")
}

/// Every vector file, sorted by name.
pub fn files() -> Vec<PathBuf> {
    files_in(&dir())
}

/// Every vector file in `dir`, sorted by name.
pub fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the vectors' directory exists")
        .map(|e| e.expect("readable directory").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

/// Reads one vector file.
pub fn load(path: &Path) -> Json {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Replays `vector` on the engine `start` makes; `Err` names the scenario, the step and the
/// first output that differs. `Ok` gives the number of steps.
pub fn replay<M: Machine + ?Sized>(
    vector: &Json,
    start: impl FnOnce(Config, Instant) -> Box<M>,
) -> Result<usize, String> {
    let name = vector["name"].as_str().unwrap_or("?");
    let config = config_from_json(&vector["config"]).map_err(|e| format!("{name}: {e}"))?;
    let at = |v: &Json| Instant::from_nanos(v.as_u64().unwrap_or_default());
    let mut engine = start(config, at(&vector["start"]));
    let steps = vector["steps"].as_array().map_or(&[][..], Vec::as_slice);
    for (i, step) in steps.iter().enumerate() {
        let now = at(&step["now"]);
        let input = match step.get("input") {
            Some(input) => {
                Some(input_from_json(input).map_err(|e| format!("{name} step {i}: {e}"))?)
            }
            None => None,
        };
        let mut stepped = VecDeque::new();
        let timeout = engine
            .step(now, input, &mut stepped)
            .map_err(|e| format!("{name} step {i}: the engine failed: {e}"))?
            .map(Instant::as_nanos);
        let outputs: Vec<Json> = stepped.iter().map(output_to_json).collect();
        let expected = step["outputs"].as_array().map_or(&[][..], Vec::as_slice);
        let feeding = step
            .get("input")
            .map_or("a timeout".to_owned(), Json::to_string);
        if let Some(j) =
            (0..outputs.len().max(expected.len())).find(|&j| outputs.get(j) != expected.get(j))
        {
            let show = |o: Option<&Json>| o.map_or("nothing".to_owned(), Json::to_string);
            return Err(format!(
                "{name} step {i} (now {}, fed {feeding}): output {j} differs\n  expected {}\n  got      {}",
                now.as_nanos(),
                show(expected.get(j)),
                show(outputs.get(j)),
            ));
        }
        if step["timeout"].as_u64() != timeout {
            return Err(format!(
                "{name} step {i} (now {}, fed {feeding}): timeout differs: expected {} got {timeout:?}",
                now.as_nanos(),
                step["timeout"],
            ));
        }
    }
    Ok(steps.len())
}

/// Replays every vector on engines `start` makes, panicking at the first mismatch; prints and
/// returns how many vectors and steps ran.
pub fn replay_all<M: Machine + ?Sized>(
    host: &str,
    start: impl Fn(Config, Instant) -> Box<M>,
) -> (usize, usize) {
    let files = files();
    assert!(files.len() >= 40, "only {} vectors", files.len());
    let mut steps = 0;
    for file in &files {
        steps += replay(&load(file), &start)
            .unwrap_or_else(|mismatch| panic!("{}:\n{mismatch}", file.display()));
    }
    println!(
        "{host}: {} vectors, {steps} steps, all identical",
        files.len()
    );
    (files.len(), steps)
}
