//! Every vector in tests/vectors, replayed on the engine compiled to a WebAssembly component
//! (target/dlock.wasm, built by `just wasm`) and run by dlock-wasmtime.

use dlock_wasmtime::WasmComponent;

#[test]
fn every_vector_replays_on_the_wasm_engine() {
    let path = dlock_testkit::wasm_component();
    let component = WasmComponent::from_file(&path)
        .unwrap_or_else(|e| panic!("{e} (build it with `just wasm`)"));
    dlock_contract::replay_all("wasm engine", |config, now| {
        Box::new(component.start(config, now).expect("the component starts"))
    });
}
