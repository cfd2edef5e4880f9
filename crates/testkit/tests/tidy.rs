//! Tidy: the structural rules ARCHITECTURE.md states, checked on the source tree so a change
//! that breaks one fails here, by name, instead of drifting:
//! - `crates/engine/src/durable/` imports nothing from the store above it (`db`, `pipeline`,
//!   `group_commit`);
//! - each contract suite's macro lists exactly the suite's property functions;
//! - `#[path]` does not reach across crates (a shrinking list of known ones, each a test
//!   support file still to move into the test kit; no new one may appear).
#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The workspace root (this crate is `crates/testkit`).
fn root() -> PathBuf {
    fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")).unwrap()
}

/// Every `.rs` file under `dir`, recursively, skipping build output and hidden folders.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// `path` relative to the workspace root, with `/` separators.
fn relative(path: &Path) -> String {
    let path = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    path.strip_prefix(root())
        .unwrap_or(&path)
        .to_string_lossy()
        .replace('\\', "/")
}

#[test]
fn the_durable_log_imports_nothing_from_the_store_above_it() {
    let forbidden = ["crate::db", "crate::pipeline", "crate::group_commit"];
    let mut found = Vec::new();
    for file in rust_files(&root().join("crates/engine/src/durable")) {
        let text = fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if forbidden.iter().any(|f| line.contains(f)) {
                found.push(format!("{}:{}: {}", relative(&file), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "durable/ must not import the store:\n{}",
        found.join("\n")
    );
}

/// The property functions a suite file defines: `pub fn NAME<B: Backend>(`.
fn suite_functions(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("pub fn "))
        .filter_map(|rest| rest.split_once("<B: Backend>("))
        .map(|(name, _)| name.to_string())
        .collect()
}

/// The names a suite's `macro_rules!` passes to `contract_tests!`.
fn macro_names(text: &str, macro_name: &str) -> BTreeSet<String> {
    let start = text
        .find(&format!("macro_rules! {macro_name}"))
        .unwrap_or_else(|| panic!("no macro {macro_name}"));
    let body = &text[start..];
    // `$crate::contract_tests!($backend; $suite; name, name, …);`: the names follow the
    // second `;`.
    let call = &body[body.find("$crate::contract_tests!(").unwrap()..];
    let call = &call[..call.find(");").unwrap()];
    let list = call.splitn(3, ';').nth(2).unwrap();
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn each_contract_macro_lists_exactly_its_suite_s_functions() {
    let suites = [
        ("crates/testkit/src/contract.rs", "store_contract_tests"),
        (
            "crates/testkit/src/contract/index.rs",
            "index_contract_tests",
        ),
        (
            "crates/testkit/src/contract/sequence.rs",
            "sequence_contract_tests",
        ),
    ];
    for (file, macro_name) in suites {
        let text = fs::read_to_string(root().join(file)).unwrap();
        let functions = suite_functions(&text);
        let listed = macro_names(&text, macro_name);
        assert!(!functions.is_empty(), "{file}: no suite functions found");
        let unlisted: Vec<_> = functions.difference(&listed).collect();
        let unknown: Vec<_> = listed.difference(&functions).collect();
        assert!(
            unlisted.is_empty() && unknown.is_empty(),
            "{file}: `{macro_name}!` misses {unlisted:?} and lists non-suite names {unknown:?}"
        );
    }
}

/// The crate folder a workspace-relative path lies in (`crates/NAME`, or its top folder).
fn crate_of(rel: &str) -> String {
    let mut parts = rel.split('/');
    match (parts.next(), parts.next()) {
        (Some("crates"), Some(name)) => format!("crates/{name}"),
        (Some(top), _) => top.to_string(),
        (None, _) => String::new(),
    }
}

#[test]
fn no_path_attribute_reaches_across_crates() {
    let mut crossing = BTreeSet::new();
    for dir in ["crates", "benches", "examples", "xtask"] {
        for file in rust_files(&root().join(dir)) {
            let text = fs::read_to_string(&file).unwrap();
            let rel = relative(&file);
            for line in text.lines() {
                let Some(rest) = line.trim().strip_prefix("#[path = \"") else {
                    continue;
                };
                let target = rest.split('"').next().unwrap();
                let resolved = relative(&file.parent().unwrap().join(target));
                if crate_of(&rel) != crate_of(&resolved) {
                    crossing.insert(rel.clone());
                }
            }
        }
    }
    assert!(
        crossing.is_empty(),
        "move shared test support into tuplekv-testkit instead: {crossing:?}"
    );
}

#[test]
fn crate_folders_are_told_apart_by_their_first_two_parts() {
    assert_eq!(crate_of("crates/cli/tests/serve.rs"), "crates/cli");
    assert_eq!(
        crate_of("crates/server/tests/common/mod.rs"),
        "crates/server"
    );
    assert_eq!(crate_of("xtask/src/main.rs"), "xtask");
}
