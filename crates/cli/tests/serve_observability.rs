//! What `tuplekv serve` tells its operators: `/metrics` without a token on `--metrics-addr`
//! (and behind it on `--addr`), `tuplekv stats --url`, `--log-format json`, HTTP/2 frames kept
//! out of debug logs, the recovery summary of a durable restart, and the in-memory warning at
//! `RUST_LOG=warn`.

use tuplekv_testkit::kv_connect as common;

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use bytes::Bytes;
use common::{Client, TOKEN};
use http_body_util::Full;
use hyper::{Request, StatusCode};

const BIN: &str = env!("CARGO_BIN_EXE_tuplekv");

/// A running `tuplekv serve`, killed when dropped; `lines` are its first stdout lines.
struct Serve {
    child: Child,
    lines: Vec<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
    /// Kept open so that the server's later stdout writes do not fail.
    _stdout: BufReader<std::process::ChildStdout>,
}

impl Serve {
    /// Starts `tuplekv serve --addr 127.0.0.1:0 ARGS` with `env`, reading `lines` lines.
    fn start(args: &[&str], env: &[(&str, &str)], lines: usize) -> Serve {
        let mut child = Command::new(BIN)
            .arg("serve")
            .args(["--addr", "127.0.0.1:0"])
            .args(args)
            .env("TUPLEKV_ACCESS_TOKEN", TOKEN)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tuplekv serve");
        let mut err = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        });
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let lines = (0..lines)
            .map(|_| {
                let mut line = String::new();
                stdout.read_line(&mut line).expect("a line");
                line.trim().to_owned()
            })
            .collect();
        Serve {
            child,
            lines,
            stderr: Some(stderr),
            _stdout: stdout,
        }
    }

    /// The address printed on the line starting with `prefix`.
    fn addr(&self, prefix: &str) -> SocketAddr {
        self.lines
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in {:?}", self.lines))
            .parse()
            .expect("an address")
    }

    /// Sends SIGTERM and waits off the runtime: whether it exited 0, and its stderr.
    async fn stop(mut self) -> (bool, String) {
        let pid = self.child.id().to_string();
        tokio::task::spawn_blocking(move || {
            let killed = Command::new("kill").args(["-TERM", &pid]).status();
            assert!(killed.is_ok_and(|s| s.success()));
            let status = self.child.wait().expect("wait");
            let stderr = self
                .stderr
                .take()
                .map(|t| t.join().expect("stderr thread"))
                .unwrap_or_default();
            (status.success(), stderr)
        })
        .await
        .expect("stop task")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /metrics` on `addr`, with a bearer `token` if given.
async fn get_metrics(addr: SocketAddr, token: Option<&str>) -> (StatusCode, String) {
    let mut req = Request::get(format!("http://{addr}/metrics"));
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let reply = Client::h1(addr)
        .await
        .call(req.body(Full::new(Bytes::new())).expect("request"))
        .await;
    (reply.status, reply.text())
}

/// Writes `["k"] = "v"` through `tuplekv set --url`.
fn set_over_url(addr: SocketAddr) {
    let out = Command::new(BIN)
        .args([
            "set",
            "--url",
            &format!("http://{addr}"),
            r#"["k"]"#,
            "--string",
            "v",
        ])
        .env("TUPLEKV_ACCESS_TOKEN", TOKEN)
        .output()
        .expect("run tuplekv set");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_addr_serves_metrics_without_a_token_and_addr_only_with_it() {
    let server = Serve::start(&["--metrics-addr", "127.0.0.1:0"], &[], 2);
    let (main, open) = (server.addr("listening on "), server.addr("metrics on "));
    let (status, text) = get_metrics(open, None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.contains("tuplekv_databases 1\n"), "{text}");
    assert!(
        text.contains("tuplekv_commits_total{database=\"default\"} 0\n"),
        "{text}"
    );
    assert_eq!(get_metrics(main, None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(get_metrics(main, Some(TOKEN)).await.0, StatusCode::OK);
    let (ok, stderr) = server.stop().await;
    assert!(ok, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_url_prints_a_summary_of_the_servers_metrics() {
    let server = Serve::start(&[], &[], 1);
    let addr = server.addr("listening on ");
    set_over_url(addr);
    let url = format!("http://{addr}");
    let stats = |args: &[&str], env: &[(&str, &str)]| {
        Command::new(BIN)
            .args(["stats", "--url", &url])
            .args(args)
            .env_remove("TUPLEKV_ACCESS_TOKEN")
            .env_remove("DENO_KV_ACCESS_TOKEN")
            .envs(env.iter().copied())
            .output()
            .expect("run tuplekv stats")
    };
    let out = stats(&[], &[("TUPLEKV_ACCESS_TOKEN", TOKEN)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("database default\n"), "{text}");
    assert!(text.contains("  keys          1\n"), "{text}");
    assert!(text.contains("  commits       1 (0 conflicts)\n"), "{text}");
    assert!(text.contains("atomic_write 1 (0 errors)"), "{text}");

    let out = stats(&["--json"], &[("DENO_KV_ACCESS_TOKEN", TOKEN)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(json["databases"]["default"]["commits"], 1);

    let out = stats(&[], &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--url needs an access token"), "{err}");
    let out = stats(&["--access-token", "not-the-token-at-all"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("401"), "{err}");
    let (ok, stderr) = server.stop().await;
    assert!(ok, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_format_json_writes_json_lines_and_debug_keeps_http2_frames_out() {
    let server = Serve::start(&["--log-format", "json", "--log-level", "debug"], &[], 1);
    let addr = server.addr("listening on ");
    let mut client = Client::h2(addr).await;
    let reply = client
        .metadata(TOKEN, r#"{"supportedVersions":[2,3]}"#)
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    drop(client);
    // A connection that sends nothing and closes: the server logs it at debug.
    drop(std::net::TcpStream::connect(addr).expect("connect"));
    // Polled until only the poll's own connection is open (the empty one was handled).
    let deadline = tokio::time::Instant::now() + common::WAIT_MAX;
    while !get_metrics(addr, Some(TOKEN))
        .await
        .1
        .contains("tuplekv_open_connections 1\n")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the empty connection stays open"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (ok, stderr) = server.stop().await;
    assert!(ok, "{stderr}");
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["level"] == "WARN"
            && l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("data dies with the process"))),
        "{stderr}"
    );
    assert!(
        lines.iter().any(|l| l["level"] == "DEBUG"),
        "debug is on: {stderr}"
    );
    assert!(
        !lines.iter().any(|l| l["target"]
            .as_str()
            .is_some_and(|t| t.starts_with("h2") || t.starts_with("hyper"))),
        "no HTTP/2 frame logs: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_memory_warning_shows_at_rust_log_warn() {
    let server = Serve::start(&[], &[("RUST_LOG", "warn")], 1);
    let (ok, stderr) = server.stop().await;
    assert!(ok, "{stderr}");
    assert!(stderr.contains("WARN"), "{stderr}");
    assert!(stderr.contains("data dies with the process"), "{stderr}");
    assert!(!stderr.contains("INFO"), "warn filters info out: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_durable_server_logs_what_recovery_replayed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let path = path.to_str().expect("utf-8");
    let server = Serve::start(&["--path", path], &[], 1);
    set_over_url(server.addr("listening on "));
    let (ok, stderr) = server.stop().await;
    assert!(ok, "{stderr}");
    let server = Serve::start(&["--path", path, "--log-format", "json"], &[], 1);
    let (ok, stderr) = server.stop().await;
    assert!(ok, "{stderr}");
    let summary: serde_json::Value = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("recovered the store"))
        })
        .unwrap_or_else(|| panic!("no recovery summary: {stderr}"));
    let fields = &summary["fields"];
    assert_eq!(summary["level"], "INFO");
    assert!(fields["records_replayed"].as_u64().is_some(), "{summary}");
    assert!(
        fields["bytes_read"].as_u64().is_some_and(|b| b > 0),
        "{summary}"
    );
    assert!(fields["elapsed"].is_string(), "{summary}");
    assert!(fields["last_versionstamp"].is_string(), "{summary}");
    assert!(!stderr.contains("data dies with the process"), "{stderr}");
}
