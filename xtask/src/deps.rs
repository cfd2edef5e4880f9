//! `deps-embedded`, a CI step: the facade with its default features (the embedded store) must
//! not build an async runtime or a network client. It runs `cargo tree` for it and fails
//! naming any crate of [`DENIED`] it finds.

use anyhow::{Result, bail};

use crate::cmd;

/// Crates the embedded facade must not build: the remote client's and the etcd store's
/// runtime, HTTP, TLS and protobuf stacks, and those clients themselves.
pub(crate) const DENIED: &[&str] = &[
    "tokio",
    "hyper",
    "hyper-util",
    "h2",
    "rustls",
    "tokio-rustls",
    "prost",
    "denokv_proto",
    "tonic",
    "etcd-client",
    "tuplekv-remote",
    "tuplekv-etcd",
];

/// The `cargo tree` command listing every crate the facade's default build compiles (normal
/// dependencies, build scripts' and proc macros' included), one `name vX.Y.Z` per line.
pub(crate) fn tree_command() -> std::process::Command {
    let mut tree = cmd::cargo();
    tree.args([
        "tree",
        "-p",
        "tuplekv",
        "-e",
        "normal,build",
        "--prefix",
        "none",
    ]);
    tree
}

/// The crates of [`DENIED`] that `tree` (what [`tree_command`] prints) lists, each once.
pub(crate) fn denied_in(tree: &str) -> Vec<&str> {
    let mut found: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| DENIED.contains(name))
        .collect();
    found.sort_unstable();
    found.dedup();
    found
}

/// Runs the check: fails if the embedded facade builds a denied crate.
pub(crate) fn check_embedded() -> Result<()> {
    let tree = cmd::output(&mut tree_command())?;
    let found = denied_in(&tree);
    if !found.is_empty() {
        bail!(
            "the facade's default features build {}: put what needs them behind a feature \
             (see crates/tuplekv/Cargo.toml)",
            found.join(", ")
        );
    }
    let count = {
        let mut names: Vec<&str> = tree.lines().filter(|l| !l.trim().is_empty()).collect();
        names.sort_unstable();
        names.dedup();
        names.len()
    };
    eprintln!("the embedded facade builds {count} crates, none of the denied ones");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denied_crates_are_found_by_name_once_and_lookalikes_are_not() {
        let tree = "tuplekv v0.1.0 (/w/crates/tuplekv)\n\
                    tokio v1.48.0\n\
                    tokio-macros v2.6.0 (proc-macro)\n\
                    hyper v1.8.1 (*)\n\
                    tokio v1.48.0 (*)\n\
                    prost-derive v0.14.1 (proc-macro)\n\
                    \n";
        assert_eq!(denied_in(tree), ["hyper", "tokio"]);
        assert!(denied_in("tuplekv v0.1.0\nthiserror v2.0.0\n").is_empty());
    }

    #[test]
    fn the_tree_command_lists_the_default_build_without_indentation() {
        assert_eq!(
            cmd::display(&tree_command()),
            "cargo tree -p tuplekv -e normal,build --prefix none"
        );
    }

    /// The check itself, on this workspace: `cargo test` keeps the embedded facade lean
    /// between CI runs too.
    #[test]
    fn the_embedded_facade_builds_no_runtime_or_network_crate() {
        let out = tree_command().output().expect("cargo tree runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tree = String::from_utf8_lossy(&out.stdout);
        assert!(tree.contains("tuplekv-engine"), "{tree}");
        assert_eq!(denied_in(&tree), Vec::<&str>::new());
    }
}
