//! One version for every package (`scripts/set-version` sets it): the workspace's, which the
//! crates inherit and Python's wheel takes (maturin reads it: `dynamic = ["version"]`), and
//! the copies that cannot inherit it — the workspace's dependencies on its own crates, the
//! npm package and its platform packages — agree with it; CHANGELOG.md has its section.

use std::path::Path;

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn read(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every `"version": "…"` value of the text, in order.
fn json_versions(text: &str) -> Vec<&str> {
    text.split("\"version\": \"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap())
        .collect()
}

#[test]
fn every_package_has_the_workspace_version() {
    let cargo = read("Cargo.toml");
    let pinned: Vec<&str> = cargo
        .lines()
        .filter(|l| l.starts_with("dlock") && l.contains("path = "))
        .filter_map(|l| l.split("version = \"").nth(1))
        .map(|v| v.split('"').next().unwrap())
        .collect();
    assert!(
        !pinned.is_empty(),
        "the workspace pins its crates' versions"
    );
    assert!(
        pinned.iter().all(|v| *v == VERSION),
        "Cargo.toml: {pinned:?}"
    );

    let package = read("node/package.json");
    assert_eq!(json_versions(&package)[0], VERSION, "node/package.json");
    let lock = read("node/package-lock.json");
    assert_eq!(
        json_versions(&lock)[..2],
        [VERSION, VERSION],
        "node/package-lock.json"
    );

    let platforms = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../node/npm"))
        .expect("node/npm: the platform packages")
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect::<Vec<_>>();
    assert!(!platforms.is_empty(), "node/npm has no platform package");
    for platform in platforms {
        let path = format!("node/npm/{platform}/package.json");
        assert_eq!(json_versions(&read(&path))[0], VERSION, "{path}");
    }

    let pyproject = read("python/pyproject.toml");
    assert!(
        pyproject.contains("dynamic = [\"version\"]")
            && !pyproject.lines().any(|l| l.starts_with("version")),
        "python/pyproject.toml takes the workspace's version"
    );

    let changelog = read("CHANGELOG.md");
    assert!(
        changelog.contains(&format!("## [{VERSION}]")),
        "CHANGELOG.md has no section for {VERSION}"
    );
}
