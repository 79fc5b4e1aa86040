//! Every vector in tests/vectors, replayed on the engine compiled to a WebAssembly component
//! (target/dlock.wasm, built by `just wasm`) and run by dlock-wasmtime.

use dlock_wasmtime::WasmComponent;

#[test]
fn every_vector_replays_on_the_wasm_engine() {
    let path = dlock_testkit::wasm_component();
    let component = WasmComponent::from_file(&path)
        .unwrap_or_else(|e| panic!("{e} (build it with `just wasm`)"));
    let files = dlock_contract::files();
    assert!(files.len() >= 40, "only {} vectors", files.len());
    let mut steps = 0;
    for file in &files {
        let vector = dlock_contract::load(file);
        steps += dlock_contract::replay(&vector, |config, now| {
            Box::new(component.start(config, now).expect("the component starts"))
        })
        .unwrap_or_else(|mismatch| panic!("{}:\n{mismatch}", file.display()));
    }
    println!(
        "wasm engine: {} vectors, {steps} steps, all identical",
        files.len()
    );
}
