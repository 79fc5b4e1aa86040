//! What the integration tests share: clients that run the engine natively, or from its
//! WebAssembly component under `DLOCK_TEST_ENGINE=wasm`.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

/// `clients` clients with `tasks` tasks each take lock "counter" `rounds` times and do a racy
/// read-modify-write of a counter under it: the count must come out exact, and fencing
/// tokens must grow in the order the holders got the lock.
pub(crate) async fn contend(url: &str, clients: usize, tasks: usize, rounds: usize) {
    let inside = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for _ in 0..clients {
        let client = connect(url).await.expect("connect");
        for _ in 0..tasks {
            let (client, inside, counter, tokens) = (
                client.clone(),
                inside.clone(),
                counter.clone(),
                tokens.clone(),
            );
            handles.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = client
                        .lock("counter")
                        .lease(std::time::Duration::from_secs(5))
                        .acquire()
                        .await
                        .expect("acquire");
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    tokens.lock().unwrap().push(guard.fencing_token());
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            }));
        }
    }
    for h in handles {
        h.await.expect("task");
    }
    let total = (clients * tasks * rounds) as u64;
    assert_eq!(counter.load(Ordering::SeqCst), total);
    let tokens = tokens.lock().unwrap().clone();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens not increasing: {tokens:?}"
    );
}
