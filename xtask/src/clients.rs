//! The external clients and peers xtask runs (the Deno binary, Node's `@deno/kv`, denokv),
//! installed when missing into the shared tools directory.
//!
//! Placeholder with the agreed API so `bench server` compiles on its own branch; the
//! conformance branch owns the real file and replaces this one at merge.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::cmd;

/// The directory holding the tools: `$TUPLEKV_TOOLS_DIR`, else `<workspace root>/target/tools`.
pub(crate) fn tools_dir() -> PathBuf {
    std::env::var_os("TUPLEKV_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| cmd::workspace_root().join("target").join("tools"))
}

/// The Deno 2.9.6 binary from npm `@deno/linux-x64-glibc@2.9.6`.
pub(crate) fn deno() -> Result<PathBuf> {
    let dir = tools_dir().join("deno-2.9.6");
    let bin = dir.join("package").join("deno");
    if !bin.exists() {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        cmd::run(
            std::process::Command::new("npm")
                .args(["pack", "@deno/linux-x64-glibc@2.9.6"])
                .current_dir(&dir),
        )?;
        cmd::run(
            std::process::Command::new("sh")
                .args([
                    "-c",
                    "tar xzf deno-linux-x64-glibc-2.9.6.tgz && chmod +x package/deno",
                ])
                .current_dir(&dir),
        )?;
    }
    Ok(bin)
}

/// A directory with `node_modules/@deno/kv` (0.14.0) installed.
#[allow(dead_code, reason = "the conformance command uses it")]
pub(crate) fn node_kv_dir() -> Result<PathBuf> {
    let dir = tools_dir().join("node-kv-0.14.0");
    if !dir.join("node_modules").join("@deno").join("kv").exists() {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        cmd::run(
            std::process::Command::new("npm")
                .args(["install", "--no-save", "@deno/kv@0.14.0"])
                .current_dir(&dir),
        )?;
    }
    Ok(dir)
}

/// denokv 0.14.0, installed with `cargo install` into `<tools>/denokv` when missing.
pub(crate) fn denokv() -> Result<PathBuf> {
    let root = tools_dir().join("denokv");
    let bin = root.join("bin").join("denokv");
    if !bin.exists() {
        eprintln!("building denokv 0.14.0 (several minutes)");
        cmd::run(
            cmd::cargo()
                .args(["install", "denokv", "--version", "0.14.0", "--locked"])
                .arg("--root")
                .arg(&root),
        )?;
    }
    if !bin.exists() {
        bail!("denokv is not at {} after installing it", bin.display());
    }
    Ok(bin)
}
