//! docs/PROTOCOL.md carries every script the core sends, byte for byte.

use std::path::Path;

#[test]
fn protocol_doc_quotes_every_script_verbatim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("../docs/PROTOCOL.md")).expect("docs/PROTOCOL.md");
    for file in [
        "prelude",
        "acquire",
        "release",
        "dequeue",
        "extend",
        "status",
        "fenced_write",
    ] {
        let lua = std::fs::read_to_string(root.join(format!("src/redis/lua/{file}.lua")))
            .expect("script");
        let block = format!("```lua\n{}\n```", lua.trim_end());
        assert!(
            doc.contains(&block),
            "docs/PROTOCOL.md does not quote {file}.lua as it is in the core"
        );
    }
    let version = format!(
        "# dlock protocol, version {}",
        dlock_core::redis::PROTOCOL_VERSION
    );
    assert!(doc.starts_with(&version));
}
