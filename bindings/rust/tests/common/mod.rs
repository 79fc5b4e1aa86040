//! What the integration tests share: clients that run the engine natively, or from its
//! WebAssembly component under `DLOCK_TEST_ENGINE=wasm`.

#![allow(dead_code)]

use dlock::{Client, Error};

/// A client builder running the engine natively, or from dlock.wasm under `DLOCK_TEST_ENGINE=wasm`.
pub(crate) fn builder(url: &str) -> dlock::ClientBuilder {
    let builder = Client::builder(url);
    match std::env::var("DLOCK_TEST_ENGINE").as_deref() {
        Ok("wasm") => {
            static COMPONENT: std::sync::OnceLock<dlock_wasmtime::WasmComponent> =
                std::sync::OnceLock::new();
            let component = COMPONENT.get_or_init(|| {
                dlock_wasmtime::WasmComponent::from_file(dlock_testkit::wasm_component())
                    .expect("dlock.wasm (just wasm)")
            });
            builder.machine(component.factory())
        }
        Ok("native") | Err(_) => builder,
        Ok(other) => panic!("DLOCK_TEST_ENGINE={other}: use native or wasm"),
    }
}

pub(crate) async fn connect(url: &str) -> Result<Client, Error> {
    builder(url).connect().await
}
