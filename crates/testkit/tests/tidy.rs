//! Tidy: the structural rules ARCHITECTURE.md states, checked on the source tree so a change
//! that breaks one fails here, by name, instead of drifting:
//! - `crates/engine/src/durable/` imports nothing from the store above it (`db`, `pipeline`,
//!   `group_commit`);
//! - each contract suite's macro lists exactly the suite's property functions;
//! - `#[path]` does not reach across crates (shared test support lives in the test kit);
//! - each measured figure (a latency, a rate, bytes per key) appears in one file of the docs
//!   and the crates' doc comments, so a new measurement changes it in one place;
//! - xtask links no crate of the workspace but `tuplekv-harness`, which links none: automation
//!   builds in seconds, and what needs the store (the bench orchestrator) lives in a crate
//!   that may link it.
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

/// Units that mark a figure as a measurement of ours.
const MEASURED_UNITS: [&str; 11] = [
    "B/key",
    "bytes per key",
    "resident bytes per key",
    "k/s",
    "ops/s",
    "codes/s",
    "commits/s",
    "µs",
    "ns",
    "MB/s",
    "GB/s",
];

/// The measured figures in `text`: each number (digits, with `.` or `,` inside) followed,
/// after at most one space, by one of [`MEASURED_UNITS`], as `"NUMBER UNIT"`.
fn measured_figures(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts_number = bytes[i].is_ascii_digit()
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'.'));
        if !starts_number {
            i += 1;
            continue;
        }
        let mut end = i;
        while end < bytes.len()
            && (bytes[end].is_ascii_digit()
                || (matches!(bytes[end], b'.' | b',')
                    && bytes.get(end + 1).is_some_and(u8::is_ascii_digit)))
        {
            end += 1;
        }
        let number = &text[i..end];
        let after = &text[end..];
        let after = after.strip_prefix(' ').unwrap_or(after);
        if let Some(unit) = MEASURED_UNITS.iter().find(|u| {
            after.starts_with(*u)
                && !after[u.len()..]
                    .chars()
                    .next()
                    .is_some_and(char::is_alphanumeric)
        }) {
            out.insert(format!("{number} {unit}"));
        }
        i = end.max(i + 1);
    }
    out
}

/// The text the figure rule reads: the top-level Markdown files, `docs/`, and the doc
/// comments (`//!`, `///`) of every crate's sources, by file.
fn documented_texts() -> Vec<(String, String)> {
    let root = root();
    let mut out = Vec::new();
    let mut markdown: Vec<PathBuf> = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    for entry in fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            markdown.push(path);
        }
    }
    markdown.sort();
    for path in markdown {
        out.push((relative(&path), fs::read_to_string(&path).unwrap()));
    }
    for file in rust_files(&root.join("crates")) {
        let docs: String = fs::read_to_string(&file)
            .unwrap()
            .lines()
            .filter(|l| {
                let l = l.trim_start();
                l.starts_with("//!") || l.starts_with("///")
            })
            .map(|l| format!("{l}\n"))
            .collect();
        out.push((relative(&file), docs));
    }
    out
}

#[test]
fn measured_figures_are_found_with_their_unit_and_nothing_else_is() {
    let found = measured_figures(
        "get: 1.41x, 101.1 B/key; 3.5–3.8 µs and 225 ns; 19.4 k/s; v2 ns; 1,234 ops/s; 30 ms; \
         12nsx; 5 µsecs",
    );
    let expected: BTreeSet<String> = ["101.1 B/key", "3.8 µs", "225 ns", "19.4 k/s", "1,234 ops/s"]
        .map(String::from)
        .into();
    assert_eq!(found, expected);
}

#[test]
fn each_measured_figure_is_written_in_one_file() {
    let mut homes: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
    for (file, text) in documented_texts() {
        for figure in measured_figures(&text) {
            homes.entry(figure).or_default().insert(file.clone());
        }
    }
    let copied: Vec<String> = homes
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|(figure, files)| format!("{figure}: {files:?}"))
        .collect();
    assert!(
        copied.is_empty(),
        "a measured figure in more than one file: keep it in one (docs/performance.md, or \
         the guide that owns it) and link there:\n{}",
        copied.join("\n")
    );
}

/// The names in every dependency table of the manifest at `rel` (relative to the root):
/// `[dependencies]`, `[dev-dependencies]`, `[build-dependencies]` and their per-target forms.
fn dependencies(rel: &str) -> BTreeSet<String> {
    let text = fs::read_to_string(root().join(rel)).unwrap();
    let mut in_table = false;
    let mut names = BTreeSet::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_table = line.trim_end_matches(']').ends_with("dependencies");
        } else if in_table && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', '.', ' ']).next().unwrap_or_default();
            names.insert(name.trim().to_owned());
        }
    }
    names
}

#[test]
fn xtask_links_no_workspace_crate_but_the_harness_and_the_harness_links_none() {
    let ours = |deps: BTreeSet<String>| -> Vec<String> {
        deps.into_iter()
            .filter(|d| d.starts_with("tuplekv"))
            .collect()
    };
    assert_eq!(ours(dependencies("xtask/Cargo.toml")), ["tuplekv-harness"]);
    assert_eq!(
        dependencies("crates/harness/Cargo.toml"),
        BTreeSet::from(["anyhow".to_owned(), "serde_json".to_owned()]),
        "the harness must stay buildable in seconds, without the store"
    );
    assert!(
        dependencies("benches/Cargo.toml").contains("tuplekv-harness"),
        "the bench orchestrator starts its processes through the harness"
    );
}
