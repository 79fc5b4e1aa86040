//! docs/PROTOCOL.md carries every script the core sends, byte for byte, and the least-privilege
//! Redis ACL for them.

use std::path::Path;

#[test]
fn protocol_doc_quotes_every_script_verbatim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("../docs/PROTOCOL.md")).expect("docs/PROTOCOL.md");
    let mut quoted = 0;
    for entry in std::fs::read_dir(root.join("src/redis/lua")).expect("src/redis/lua") {
        let path = entry.expect("entry").path();
        let lua = std::fs::read_to_string(&path).expect("script");
        let block = format!("```lua\n{}\n```", lua.trim_end());
        assert!(
            doc.contains(&block),
            "docs/PROTOCOL.md does not quote {} as it is in the core",
            path.display()
        );
        quoted += 1;
    }
    assert_eq!(
        quoted, 25,
        "the prelude, six lock scripts, the holders' helper, the permit and read-write helpers, three scripts of each, the fenced write, the ACL probe and the four Redisson-compatible scripts and the three of elections"
    );
    let version = format!(
        "# dlock protocol, version {}",
        dlock_core::redis::PROTOCOL_VERSION
    );
    assert!(doc.starts_with(&version));
}

#[test]
fn protocol_doc_gives_the_least_privilege_acl() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("../docs/PROTOCOL.md")).expect("docs/PROTOCOL.md");
    let line = format!(
        "ACL SETUSER locker on >password {}\n",
        dlock_core::redis::acl_rules()
    );
    assert!(doc.contains(&line), "docs/PROTOCOL.md must give: {line}");
}

#[test]
fn protocol_doc_quotes_the_sql_functions_verbatim() {
    use dlock_core::sql::{Dialect, SqlSettings, Statement};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("../docs/PROTOCOL.md")).expect("docs/PROTOCOL.md");
    for (file, dialect) in [
        ("postgres.sql", Dialect::Postgres),
        ("mysql.sql", Dialect::Mysql),
    ] {
        let sql = std::fs::read_to_string(root.join("src/sql").join(file)).expect(file);
        let block = format!("```sql\n{}\n```", sql.trim_end());
        assert!(
            doc.contains(&block),
            "docs/PROTOCOL.md §18 does not quote src/sql/{file}"
        );
        let settings = SqlSettings::new(dialect);
        for statement in [Statement::Acquire, Statement::Extend] {
            let text = settings.statement(statement);
            assert!(doc.contains(&format!("`{text}`")), "§18 lacks {text}");
        }
    }
    let settings = SqlSettings::new(Dialect::Postgres);
    for statement in Statement::ALL {
        let text = settings.statement(statement);
        assert!(doc.contains(&format!("`{text}`")), "§18 lacks {text}");
    }
}
