//! The README's Rust example, run against a real redis-server; and the README quotes it.

use std::time::Duration;

use dlock_testkit::RedisServer;

#[tokio::test]
async fn quickstart() -> Result<(), dlock::Error> {
    let server = RedisServer::start();
    let url = server.url();
    // README:begin
    let client = dlock::Client::connect(&url).await?;
    let guard = client
        .lock("orders/42")
        .lease(Duration::from_secs(10))
        .wait(Duration::from_secs(5))
        .acquire()
        .await?;
    let token = guard.fencing_token(); // pass it to the resource; it refuses smaller ones
    println!("holding orders/42 with fencing token {token}");
    tokio::select! {
        reason = guard.lost() => panic!("lock lost: {reason:?}"), // stop touching the resource
        () = tokio::time::sleep(Duration::from_millis(100)) => {} // the work, fenced by the token
    }
    guard.release().await?;
    // README:end
    Ok(())
}

#[test]
fn the_readme_quotes_the_quickstart() {
    let source = include_str!("readme.rs");
    let begin = source.find("// README:begin\n").expect("begin") + "// README:begin\n".len();
    let end = source.find("    // README:end").expect("end");
    let example: String = source[begin..end]
        .lines()
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    let readme = include_str!("../../../README.md");
    assert!(
        readme.contains(&example),
        "README.md does not contain the quickstart as in bindings/rust/tests/readme.rs:\n{example}"
    );
}

#[test]
fn the_readme_lists_every_backend() {
    let readme = include_str!("../../../README.md");
    for scheme in dlock::BACKENDS {
        assert!(
            readme.contains(&format!("`{}`", scheme.form)),
            "README.md does not list {}",
            scheme.form
        );
    }
}
