//! The WIT package in `wit/` parses, and its `machine` world imports nothing and exports the
//! engine with the methods the sans-IO contract names.

use std::path::Path;

use wit_parser::{Resolve, WorldItem, WorldKey};

#[test]
fn machine_world_exports_the_engine_and_imports_nothing() {
    let mut resolve = Resolve::default();
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    let (package, _) = resolve.push_dir(&wit).expect("wit/ parses");
    assert_eq!(
        resolve.packages[package].name.to_string(),
        "dlock:lock@0.15.0"
    );

    let world = resolve
        .select_world(&[package], Some("machine"))
        .expect("world machine");
    let world = &resolve.worlds[world];
    assert!(
        world.imports.is_empty(),
        "machine imports {:?}",
        world.imports.keys().collect::<Vec<_>>()
    );

    let exported: Vec<String> = world
        .exports
        .keys()
        .map(|k| match k {
            WorldKey::Name(n) => n.clone(),
            WorldKey::Interface(id) => resolve.interfaces[*id].name.clone().unwrap_or_default(),
        })
        .collect();
    assert_eq!(exported, ["types", "transport", "engine"]);

    let engine = world
        .exports
        .values()
        .find_map(|item| match item {
            WorldItem::Interface { id, .. }
                if resolve.interfaces[*id].name.as_deref() == Some("engine") =>
            {
                Some(*id)
            }
            _ => None,
        })
        .expect("engine interface");
    let functions: Vec<&str> = resolve.interfaces[engine]
        .functions
        .keys()
        .map(String::as_str)
        .collect();
    for name in [
        "[static]machine.create",
        "[method]machine.handle-input",
        "[method]machine.handle-timeout",
        "[method]machine.poll-output",
        "[method]machine.drain",
        "[method]machine.poll-timeout",
        "[method]machine.step",
        "script-source",
    ] {
        assert!(
            functions.contains(&name),
            "engine lacks {name}: has {functions:?}"
        );
    }
}

#[test]
fn wit_scripts_match_the_core() {
    let wit =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit/dlock.wit"))
            .expect("read");
    let body = wit
        .split("enum script {")
        .nth(1)
        .and_then(|s| s.split('}').next())
        .expect("enum script");
    let names: Vec<&str> = body
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let core: Vec<&str> = dlock_core::redis::Script::ALL
        .iter()
        .map(|s| s.name())
        .collect();
    assert_eq!(names, core);
}
