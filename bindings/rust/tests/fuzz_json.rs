//! Fuzzing the JSON form of the engine contract (`dlock::json`, what Python's and Node's
//! `Engine` parse): every input and configuration of the checked-in vectors, mutated at
//! random — fields dropped, retyped, made negative, fractional or huge, types renamed — must
//! either decode or be refused with an error that names a field; never panic. Whatever
//! decodes must encode back to JSON that decodes to the same input.
//!
//! `cargo test` runs a smoke; `just fuzz` runs it long (`DLOCK_FUZZ_EXECS=N`).

use dlock::json::{config_from_json, input_from_json, input_to_json};
use dlock_testkit::Rng;
use serde_json::{Value as Json, json};

fn corpus() -> Vec<Json> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("tests/vectors") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("readable");
        let vector: Json = serde_json::from_str(&text).expect("JSON");
        out.push(json!({ "config": vector["config"] }));
        for step in vector["steps"].as_array().expect("steps") {
            if let Some(input) = step.get("input") {
                out.push(input.clone());
            }
        }
    }
    out
}

fn junk(rng: &mut Rng) -> Json {
    match rng.below(9) {
        0 => Json::Null,
        1 => json!(-1),
        2 => json!(1.5),
        3 => json!(u64::MAX),
        4 => json!("no"),
        5 => json!([]),
        6 => json!({}),
        7 => json!(true),
        _ => json!({ "hex": "zz" }),
    }
}

/// Mutates one node of `value`, somewhere in the tree.
fn mutate(rng: &mut Rng, value: &mut Json) {
    match value {
        Json::Object(map) if !map.is_empty() && rng.chance(700) => {
            let key = map
                .keys()
                .nth(rng.below(map.len() as u64) as usize)
                .cloned()
                .expect("key");
            match rng.below(4) {
                0 => {
                    map.remove(&key);
                }
                1 if key == "type" => {
                    map.insert(
                        key,
                        json!(["acquire", "reply", "zk", "created", "x"][rng.below(5) as usize]),
                    );
                }
                _ => mutate(rng, map.get_mut(&key).expect("present")),
            }
        }
        Json::Array(items) if !items.is_empty() && rng.chance(700) => {
            let i = rng.below(items.len() as u64) as usize;
            mutate(rng, &mut items[i]);
        }
        _ => *value = junk(rng),
    }
}

#[test]
fn fuzz_json_decoding() {
    let corpus = corpus();
    let execs: u64 = std::env::var("DLOCK_FUZZ_EXECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let (mut decoded, mut refused) = (0u64, 0u64);
    for seed in 0..execs {
        let mut rng = Rng(seed ^ 0x150A);
        let mut value = corpus[rng.below(corpus.len() as u64) as usize].clone();
        for _ in 0..rng.range(1, 4) {
            mutate(&mut rng, &mut value);
        }
        let result = match value.get("config") {
            Some(config) => config_from_json(config).map(|_| ()),
            None => input_from_json(&value).map(|input| {
                let again = input_from_json(&input_to_json(&input));
                assert_eq!(
                    again.as_ref(),
                    Ok(&input),
                    "seed {seed}: {value} does not round-trip"
                );
            }),
        };
        match result {
            Ok(()) => decoded += 1,
            Err(e) => {
                assert!(
                    e.at.starts_with("input") || e.at.starts_with("config"),
                    "seed {seed}: {e} names no field"
                );
                assert!(!e.why.is_empty());
                refused += 1;
            }
        }
    }
    println!(
        "fuzz JSON: {} seeds from {} vectors' inputs: {decoded} decoded, {refused} refused with the field named, 0 panics",
        execs,
        corpus.len()
    );
}
