//! Every vector in tests/vectors, replayed on dlock-core's engine, natively.

use dlock_core::Engine;

#[test]
fn every_vector_replays_on_the_native_engine() {
    dlock_contract::replay_all("native engine", |config, now| {
        Box::new(Engine::new(config, now).expect("the vector's configuration is valid"))
    });
}

#[test]
fn protocol_doc_counts_the_vectors() {
    let files = dlock_contract::files();
    let count = |prefix: &str| {
        files
            .iter()
            .filter(|f| {
                f.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
            })
            .count()
    };
    let (zk, redlock) = (count("zookeeper-"), count("redlock-"));
    let (pg, mysql) = (count("postgres-"), count("mysql-"));
    let doc = std::fs::read_to_string(dlock_contract::dir().join("../../docs/PROTOCOL.md"))
        .expect("docs/PROTOCOL.md");
    let claim = format!(
        "are {} conversations of one engine ({} on Redis, {zk} on\nZooKeeper, {redlock} on Redlock over three nodes, {pg} on PostgreSQL, {mysql} on MySQL)",
        files.len(),
        files.len() - zk - redlock - pg - mysql
    );
    assert!(
        doc.contains(&claim),
        "docs/PROTOCOL.md §11 should say: {claim}"
    );
}
