//! Readable V8 values on the command line: `get`, `list`, `watch`, `--json` and `dump` show
//! the JavaScript literal; `set --js` and `--json-value` write what Deno writes; `@FILE`
//! values; `load -` from stdin; and `DENO_KV_ACCESS_TOKEN` for `--url`.

#![allow(clippy::unwrap_used)]

mod common_cli;

use std::io::Write;
use std::process::{Command, Stdio};

use common_cli::{BIN, Server, TOKEN, fails_with, names_in, rows_in, succeeds};
use tempfile::TempDir;
use tuplekv_engine::Value;

const ADA: &str =
    r#"{ name: "Ada", at: new Date("1970-01-01T00:00:00.000Z"), tags: new Set(["a"]), n: 1n }"#;

fn db_in(tmp: &TempDir) -> String {
    tmp.path().join("db").to_str().unwrap().to_owned()
}

#[test]
fn set_js_then_get_list_and_json_show_the_literal() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    succeeds(&[
        &"set",
        &"--path",
        &db,
        &r#"["u", 1]"#,
        &"--js",
        &"{ name: \"Ada\", at: new Date(0), tags: new Set([\"a\"]), n: 1n }",
    ]);
    let got = succeeds(&[&"get", &"--path", &db, &r#"["u", 1]"#]);
    assert!(
        got.starts_with(&format!(r#"["u", 1]  v8 {ADA}  versionstamp "#)),
        "{got}"
    );
    let listed = succeeds(&[&"list", &"--path", &db]);
    assert!(listed.contains(&format!("v8 {ADA}")), "{listed}");
    let json: serde_json::Value = serde_json::from_str(&succeeds(&[
        &"get",
        &"--path",
        &db,
        &r#"["u", 1]"#,
        &"--json",
    ]))
    .unwrap();
    assert_eq!(json["value"]["decoded"], ADA);
    let hex = json["value"]["v8"].as_str().unwrap();
    assert!(
        hex.starts_with("ff106f"),
        "Deno's header and an object: {hex}"
    );
}

#[test]
fn the_bytes_are_denos_for_the_same_value() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    // What Deno 2.9.6's kv.set wrote for `{ name: "Ada" }` and `[1.5, 2]`.
    succeeds(&[&"set", &"--path", &db, &"[1]", &"--js", &"{ name: 'Ada' }"]);
    succeeds(&[&"set", &"--path", &db, &"[2]", &"--json-value", &"[1.5, 2]"]);
    succeeds(&[
        &"set",
        &"--path",
        &db,
        &"[3]",
        &"--js",
        &"new Uint8Array([1, 2])",
    ]);
    let rows = rows_in(std::path::Path::new(&db));
    assert_eq!(
        rows[0].1,
        Value::V8(
            hex::decode("ff106f22046e616d6522034164617b01")
                .unwrap()
                .into()
        )
    );
    assert_eq!(
        rows[1].1,
        Value::V8(
            hex::decode("ff1041024e000000000000f83f4e0000000000000040240002")
                .unwrap()
                .into()
        )
    );
    // A Uint8Array is stored as bytes, as Deno's kv.set stores it.
    assert_eq!(rows[2].1, Value::from(vec![1u8, 2]));
}

#[test]
fn json_value_keeps_key_order_and_proto_as_a_property() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    succeeds(&[
        &"set",
        &"--path",
        &db,
        &"[1]",
        &"--json-value",
        &r#"{"url":"https://x","b":1,"a":[true,null],"__proto__":2}"#,
    ]);
    let got = succeeds(&[&"get", &"--path", &db, &"[1]"]);
    assert!(
        got.contains(r#"v8 { url: "https://x", b: 1, a: [true, null], ["__proto__"]: 2 }"#),
        "{got}"
    );
}

#[test]
fn a_bad_literal_is_one_line_and_writes_nothing() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    fails_with(
        &[&"set", &"--path", &db, &"[1]", &"--js", &"{ name: }"],
        "--js: at column 9",
    );
    fails_with(
        &[&"set", &"--path", &db, &"[1]", &"--js", &"*1"],
        "names no anchor",
    );
    fails_with(
        &[&"set", &"--path", &db, &"[1]", &"--json-value", &"{'a': 1}"],
        "--json-value: not JSON",
    );
    fails_with(
        &[
            &"set",
            &"--path",
            &db,
            &"[1]",
            &"--js",
            &"@/nonexistent/file",
        ],
        "cannot read",
    );
    assert!(!tmp.path().join("db").exists(), "no database was created");
}

#[test]
fn unreadable_v8_bytes_fall_back_to_hex() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    succeeds(&[&"set", &"--path", &db, &"[1]", &"--v8-hex", &"ff107c01"]);
    let got = succeeds(&[&"get", &"--path", &db, &"[1]"]);
    assert!(got.contains("v8 0xff107c01"), "{got}");
    let json: serde_json::Value =
        serde_json::from_str(&succeeds(&[&"get", &"--path", &db, &"[1]", &"--json"])).unwrap();
    assert_eq!(json["value"], serde_json::json!({ "v8": "ff107c01" }));
}

#[test]
fn at_file_values_take_64_kib() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    let bin = tmp.path().join("value.bin");
    let bytes: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&bin, &bytes).unwrap();
    let at = format!("@{}", bin.display());
    succeeds(&[&"set", &"--path", &db, &"[1]", &"--bytes", &at]);
    // A 64 KiB string, as a literal in a file (65530 characters serialise to 65536 bytes).
    let js = tmp.path().join("value.js");
    std::fs::write(&js, format!("\"{}\"", "x".repeat(65530))).unwrap();
    let at_js = format!("@{}", js.display());
    succeeds(&[&"set", &"--path", &db, &"[2]", &"--js", &at_js]);
    let rows = rows_in(std::path::Path::new(&db));
    assert_eq!(rows[0].1, Value::from(bytes));
    match &rows[1].1 {
        Value::V8(b) => assert_eq!(b.len(), 65536),
        other => panic!("{other:?}"),
    }
    // Past the store's value limit: refused, nothing written.
    std::fs::write(&bin, vec![0u8; 65537]).unwrap();
    fails_with(
        &[&"set", &"--path", &db, &"[3]", &"--bytes", &at],
        "set failed",
    );
    // Past the value file limit.
    std::fs::write(&js, vec![b' '; tuplekv_jsvalue::INPUT_MAX + 1]).unwrap();
    fails_with(
        &[&"set", &"--path", &db, &"[3]", &"--js", &at_js],
        "holds more than 4194304 bytes",
    );
    std::fs::write(
        &js,
        format!("{}1", " ".repeat(tuplekv_jsvalue::INPUT_MAX - 1)),
    )
    .unwrap();
    succeeds(&[&"set", &"--path", &db, &"[3]", &"--js", &at_js]);
    assert_eq!(rows_in(std::path::Path::new(&db)).len(), 3);
}

#[test]
fn dump_lines_carry_decoded_and_load_accepts_them_from_stdin() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    succeeds(&[
        &"set",
        &"--path",
        &db,
        &"[1]",
        &"--js",
        &"[&1 { x: 1 }, *1]",
    ]);
    succeeds(&[&"set", &"--path", &db, &"[2]", &"--u64", &"3"]);
    let dump = succeeds(&[&"dump", &"--path", &db]);
    let first: serde_json::Value = serde_json::from_str(dump.lines().next().unwrap()).unwrap();
    assert_eq!(first["value"]["decoded"], "[&1 { x: 1 }, *1]");
    // dump --path A | load --path B -
    let copy = tmp.path().join("copy");
    let mut load = Command::new(BIN)
        .args(["load", "--path", copy.to_str().unwrap(), "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    load.stdin
        .take()
        .unwrap()
        .write_all(dump.as_bytes())
        .unwrap();
    let out = load.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "loaded 2 entries\n");
    assert_eq!(rows_in(&copy), rows_in(std::path::Path::new(&db)));
    assert_eq!(succeeds(&[&"dump", &"--path", &copy]), dump);
    // A bad line from stdin names stdin and its line; nothing is written.
    let bad = tmp.path().join("bad");
    let mut load = Command::new(BIN)
        .args(["load", "--path", bad.to_str().unwrap(), "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    load.stdin
        .take()
        .unwrap()
        .write_all(b"{\"key\":\"[1]\",\"value\":{\"u64\":\"1\"}}\n{\n")
        .unwrap();
    let out = load.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("tuplekv: stdin:2: not JSON"));
    assert!(!bad.exists() || names_in(&bad).is_empty());
}

#[test]
fn url_commands_read_deno_kv_access_token_and_watch_shows_literals() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    succeeds(&[&"set", &"--path", &db, &"[1]", &"--js", &"{ n: 1 }"]);
    let server = Server::start(&db);
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .args(["--url", &server.url])
            .env_remove("TUPLEKV_ACCESS_TOKEN")
            .env_remove("DENO_KV_ACCESS_TOKEN");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let out = run(&["get", "[1]"], &[("DENO_KV_ACCESS_TOKEN", TOKEN)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("v8 { n: 1 }"));
    // TUPLEKV_ACCESS_TOKEN wins over DENO_KV_ACCESS_TOKEN.
    let out = run(
        &["get", "[1]"],
        &[
            ("DENO_KV_ACCESS_TOKEN", "wrong-token-wrong-token"),
            ("TUPLEKV_ACCESS_TOKEN", TOKEN),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(
        &["get", "[1]"],
        &[
            ("TUPLEKV_ACCESS_TOKEN", ""),
            ("DENO_KV_ACCESS_TOKEN", TOKEN),
        ],
    );
    assert!(
        out.status.success(),
        "an empty TUPLEKV_ACCESS_TOKEN counts as none"
    );
    let out = run(&["get", "[1]"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("DENO_KV_ACCESS_TOKEN"));
    // set --js over the server, then watch prints the literal.
    let out = run(
        &["set", "[2]", "--js", "new Map([[1, /x/g]])"],
        &[("DENO_KV_ACCESS_TOKEN", TOKEN)],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(
        &["watch", "[2]", "--count", "1"],
        &[("DENO_KV_ACCESS_TOKEN", TOKEN)],
    );
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("* [2]  v8 new Map([[1, /x/g]])"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
