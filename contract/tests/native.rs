//! Every vector in tests/vectors, replayed on dlock-core's engine, natively.

use dlock_core::Engine;

#[test]
fn every_vector_replays_on_the_native_engine() {
    let files = dlock_contract::files();
    assert!(files.len() >= 40, "only {} vectors", files.len());
    let mut steps = 0;
    for file in &files {
        let vector = dlock_contract::load(file);
        steps += dlock_contract::replay(&vector, |config, now| {
            Box::new(Engine::new(config, now).expect("the vector's configuration is valid"))
        })
        .unwrap_or_else(|mismatch| panic!("{}:\n{mismatch}", file.display()));
    }
    println!(
        "native engine: {} vectors, {steps} steps, all identical",
        files.len()
    );
}

#[test]
fn protocol_doc_counts_the_vectors() {
    let files = dlock_contract::files();
    let zk = files
        .iter()
        .filter(|f| {
            f.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("zookeeper-"))
        })
        .count();
    let doc = std::fs::read_to_string(dlock_contract::dir().join("../../docs/PROTOCOL.md"))
        .expect("docs/PROTOCOL.md");
    let claim = format!(
        "are {} conversations of one engine ({} on Redis, {zk} on\nZooKeeper)",
        files.len(),
        files.len() - zk
    );
    assert!(
        doc.contains(&claim),
        "docs/PROTOCOL.md §11 should say: {claim}"
    );
}
