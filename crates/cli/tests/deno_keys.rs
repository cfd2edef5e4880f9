//! A key literal means what it means in Deno code: keys and values the command line writes
//! to a `tuplekv serve` are read by the real Deno client with the same literals, and the keys
//! Deno writes are printed by `list` as literals that `get` finds again.
//!
//! Needs the Deno binary `cargo xtask conformance` installs (under `$TUPLEKV_TOOLS_DIR`, or
//! `<workspace>/target/tools`); without it the test says so on stderr and checks nothing.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use tuplekv_harness::clients::DENO_VERSION;

const BIN: &str = env!("CARGO_BIN_EXE_tuplekv");
const TOKEN: &str = "a-long-enough-test-token";
/// The pinned Deno, if installed (`tuplekv_harness::clients`).
fn deno() -> Option<PathBuf> {
    tuplekv_harness::clients::installed_deno()
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cli(url: &str, args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .args(["--url", url])
        .env("TUPLEKV_ACCESS_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn literals_mean_the_same_keys_as_in_deno() {
    let Some(deno) = deno() else {
        eprintln!(
            "skipped: Deno {DENO_VERSION} is not installed (cargo xtask conformance installs it)"
        );
        return;
    };
    let dir = tempfile::TempDir::new().unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--addr", "127.0.0.1:0", "--path"])
        .arg(dir.path().join("db"))
        .env("TUPLEKV_ACCESS_TOKEN", TOKEN)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let server = Server(child);
    let url = format!(
        "http://{}",
        line.trim().strip_prefix("listening on ").unwrap()
    );

    cli(
        &url,
        &[
            "set",
            r#"["users", 1n, new Uint8Array([1, 2]), -0, true]"#,
            "--string",
            "Ada 😮",
        ],
    );
    cli(&url, &["set", "['n', 1.5, 'it\\'s']", "--u64", "42"]);
    cli(
        &url,
        &["set", r#"[b"\x00\xff", "\u{1F62E}"]"#, "--bytes", "0102"],
    );
    let script = dir.path().join("check.ts");
    std::fs::write(
        &script,
        format!(
            r#"
const kv = await Deno.openKv("{url}");
const a = await kv.get(["users", 1n, new Uint8Array([1, 2]), -0, true]);
const b = await kv.get(["n", 1.5, "it's"]);
const c = await kv.get([new Uint8Array([0, 255]), "😮"]);
console.log(JSON.stringify([a.value, String(b.value), b.value instanceof Deno.KvU64, Array.from(c.value)]));
await kv.set(["from deno", 7, 7n, -0, NaN, "q\"\\\n", new Uint8Array([0, 34, 92, 200])], 1);
await kv.set(["from deno", 1e21, -Infinity, 0.1, false], 2);
kv.close();
"#
        ),
    )
    .unwrap();
    let out = Command::new(deno)
        .args(["run", "-A", "--unstable-kv", "--quiet"])
        .arg(&script)
        .env("DENO_KV_ACCESS_TOKEN", TOKEN)
        .env("DENO_NO_UPDATE_CHECK", "1")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        r#"["Ada 😮","42",true,[1,2]]"#
    );
    let listed = cli(&url, &["list", r#"["from deno"]"#]);
    let keys: Vec<&str> = listed
        .lines()
        .map(|l| l.split("  ").next().unwrap())
        .collect();
    assert_eq!(keys.len(), 2, "{listed}");
    for key in keys {
        assert!(
            !cli(&url, &["get", key]).contains("(absent)"),
            "{key} not found again"
        );
    }
    assert!(
        listed.contains(r#"7, 7n, -0, NaN, "q\"\\\n", b"\x00\"\\\xc8""#),
        "{listed}"
    );
    drop(server);
}
