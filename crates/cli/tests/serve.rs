//! `tuplekv serve` as a process: it refuses to start without a good token, says where it
//! listens and what it serves, exits 0 on SIGTERM, and a durable server killed with SIGKILL
//! during acknowledged writes from several clients has every acknowledged write after a
//! restart. With `--etcd`, two servers fronting one etcd cluster serve the same data, and a
//! backup over one of them copies it.

use tuplekv_testkit::kv_connect as common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use denokv_proto::datapath as pb;

const BIN: &str = env!("CARGO_BIN_EXE_tuplekv");

/// A running `tuplekv serve` child, killed when dropped.
struct ServeProcess {
    child: Child,
    addr: SocketAddr,
    /// Drains the child's stderr as it is written (a full pipe would block the server), and
    /// returns everything once the child closes it.
    stderr: Option<std::thread::JoinHandle<String>>,
    /// What the child has written to stderr so far.
    stderr_so_far: Arc<std::sync::Mutex<String>>,
}

impl ServeProcess {
    fn start(args: &[&str]) -> ServeProcess {
        Self::start_with_env(args, &[])
    }

    fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> ServeProcess {
        let mut child = Command::new(BIN)
            .arg("serve")
            .args(["--addr", "127.0.0.1:0"])
            .args(args)
            .env("TUPLEKV_ACCESS_TOKEN", TOKEN)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tuplekv serve");
        let err = child.stderr.take().expect("stderr");
        let stderr_so_far = Arc::new(std::sync::Mutex::new(String::new()));
        let so_far = Arc::clone(&stderr_so_far);
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                text.push_str(&line);
                text.push('\n');
                let mut shared = so_far.lock().expect("lock");
                shared.push_str(&line);
                shared.push('\n');
            }
            text
        });
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the listening line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .expect("an address");
        ServeProcess {
            child,
            addr,
            stderr: Some(stderr),
            stderr_so_far,
        }
    }

    /// Waits until the child has logged a line containing `text` (at most [`WAIT_MAX`]).
    async fn wait_for_log(&self, text: &str) {
        let started = std::time::Instant::now();
        while !self.stderr_so_far.lock().expect("lock").contains(text) {
            assert!(
                started.elapsed() < WAIT_MAX,
                "no {text:?} in the log: {}",
                self.stderr_so_far.lock().expect("lock")
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
    }

    /// Kills the process with SIGKILL and reaps it.
    fn sigkill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    /// Waits for the exit without blocking the async runtime (the test's client connections
    /// must go on answering the server's shutdown).
    async fn exit(self) -> (bool, String) {
        tokio::task::spawn_blocking(move || self.wait())
            .await
            .expect("wait task")
    }

    /// Waits for the exit; returns whether it succeeded and what it wrote to stderr.
    fn wait(mut self) -> (bool, String) {
        let status = self.child.wait().expect("wait");
        let stderr = self
            .stderr
            .take()
            .map(|t| t.join().expect("stderr thread"))
            .unwrap_or_default();
        (status.success(), stderr)
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run_serve(args: &[&str], token: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("serve").args(["--addr", "127.0.0.1:0"]).args(args);
    cmd.env_remove("TUPLEKV_ACCESS_TOKEN");
    if let Some(t) = token {
        cmd.env("TUPLEKV_ACCESS_TOKEN", t);
    }
    cmd.output().expect("run tuplekv serve")
}

#[test]
fn serve_refuses_to_start_without_a_token_or_with_a_short_one() {
    let none = run_serve(&[], None);
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("access token is required"));
    let short = run_serve(&[], Some("elevenchars"));
    assert!(!short.status.success());
    assert!(
        String::from_utf8_lossy(&short.stderr)
            .contains("the access token is 11 characters; it must have at least 12"),
        "{}",
        String::from_utf8_lossy(&short.stderr)
    );
    let flag = run_serve(&["--access-token", "short"], None);
    assert!(!flag.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_starts_with_a_token_of_exactly_12_characters() {
    let server = ServeProcess::start_with_env(&[], &[("TUPLEKV_ACCESS_TOKEN", "twelve-chars")]);
    let mut c = Client::h2(server.addr).await;
    assert_eq!(
        c.metadata("twelve-chars", r#"{"supportedVersions":[2,3]}"#)
            .await
            .status,
        200
    );
    drop(c);
    server.signal("TERM");
    let (ok, stderr) = server.exit().await;
    assert!(ok, "{stderr}");
}

#[test]
fn serve_handles_a_signal_sent_right_after_the_listening_line() {
    for signal in ["TERM", "INT"] {
        let server = ServeProcess::start(&[]);
        server.signal(signal);
        let (ok, stderr) = server.wait();
        assert!(
            ok,
            "SIG{signal} right after the line: not a clean exit; stderr:\n{stderr}"
        );
        assert!(stderr.contains("shutdown requested"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_tokens_are_logged_once_per_interval_with_the_peer() {
    let server = ServeProcess::start_with_env(&[], &[("RUST_LOG", "info")]);
    let mut c = Client::h2(server.addr).await;
    for _ in 0..3 {
        let reply = c
            .metadata("not-the-token!", r#"{"supportedVersions":[2,3]}"#)
            .await;
        assert_eq!(reply.status, 401);
    }
    drop(c);
    server.signal("TERM");
    let (ok, stderr) = server.exit().await;
    assert!(ok, "{stderr}");
    assert!(stderr.contains("refused=3"), "counted: {stderr}");
    let lines: Vec<_> = stderr
        .lines()
        .filter(|l| l.contains("refused a request: wrong access token (401)"))
        .collect();
    assert_eq!(lines.len(), 1, "one line for the burst: {stderr}");
    assert!(lines[0].contains("peer=127.0.0.1:"), "{}", lines[0]);
}

#[test]
fn serve_refuses_a_durability_without_a_path() {
    let out = run_serve(&["--durability", "buffered"], Some(TOKEN));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--path"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_serve_says_data_dies_and_exits_zero_on_sigterm_and_sigint() {
    for signal in ["TERM", "INT"] {
        let server = ServeProcess::start(&[]);
        let mut c = Client::h2(server.addr).await;
        assert_eq!(
            c.metadata(TOKEN, r#"{"supportedVersions":[2,3]}"#)
                .await
                .status,
            200
        );
        drop(c);
        server.signal(signal);
        let (ok, stderr) = server.exit().await;
        assert!(ok, "SIG{signal}: exit status not 0; stderr:\n{stderr}");
        assert!(
            stderr.contains("in memory: data dies with the process"),
            "{stderr}"
        );
        assert!(
            stderr.contains("metadata=1"),
            "request counts at shutdown: {stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_serve_keeps_every_acknowledged_write_across_sigkill() {
    const CLIENTS: usize = 6;
    const KILL_AFTER: usize = 300;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_str().expect("utf-8 path");
    let server = ServeProcess::start(&["--path", path, "--durability", "sync"]);
    let addr = server.addr;
    let acked = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let acked = Arc::clone(&acked);
            tokio::spawn(async move {
                // Each client writes its own keys in order and records what was acknowledged.
                let mut c = if client % 2 == 0 {
                    Client::h2(addr).await
                } else {
                    Client::h1(addr).await
                };
                let mut done = Vec::new();
                for n in 0u64.. {
                    let k = key2(&format!("c{client}"), &format!("{n:08}"));
                    let write = write_of(vec![check(&k, None)], vec![set(&k, u64_value(n))]);
                    let req =
                        data_request(addr, "atomic_write", prost::Message::encode_to_vec(&write))
                            .body_bytes();
                    let Ok(res) = c.send(req).await else { break };
                    if res.status() != 200 {
                        break;
                    }
                    let Ok(body) = http_body_util::BodyExt::collect(res.into_body()).await else {
                        break;
                    };
                    let out: pb::AtomicWriteOutput =
                        prost::Message::decode(body.to_bytes()).expect("AtomicWriteOutput");
                    assert_eq!(out.status, AW_SUCCESS);
                    done.push(k);
                    acked.fetch_add(1, Ordering::Relaxed);
                }
                done
            })
        })
        .collect();
    while acked.load(Ordering::Relaxed) < KILL_AFTER {
        tokio::task::yield_now().await;
    }
    // SIGKILL while the writers are still going.
    tokio::task::spawn_blocking(move || server.sigkill())
        .await
        .expect("kill");
    let mut acknowledged = Vec::new();
    for w in writers {
        acknowledged.extend(w.await.expect("writer"));
    }
    assert!(acknowledged.len() >= KILL_AFTER);
    check_all_present(Path::new(path), &acknowledged).await;
}

async fn check_all_present(dir: &Path, keys: &[Vec<u8>]) {
    let server = ServeProcess::start(&["--path", dir.to_str().expect("path")]);
    let mut c = Client::h2(server.addr).await;
    for chunk in keys.chunks(10) {
        let out: pb::SnapshotReadOutput = c
            .read(read_of(chunk.iter().map(|k| get_range(k)).collect()))
            .await
            .decode();
        for (k, r) in chunk.iter().zip(&out.ranges) {
            assert_eq!(r.values.len(), 1, "acknowledged write of {k:?} lost");
        }
    }
    drop(c);
    server.signal("TERM");
    let (ok, stderr) = server.exit().await;
    assert!(ok, "{stderr}");
}

#[test]
fn serve_refuses_etcd_with_a_path_and_bad_etcd_urls() {
    let both = run_serve(
        &["--etcd", "http://127.0.0.1:1", "--path", "x"],
        Some(TOKEN),
    );
    assert!(!both.status.success());
    let stderr = String::from_utf8_lossy(&both.stderr);
    assert!(
        stderr.contains("--path") && stderr.contains("--etcd"),
        "{stderr}"
    );
    let prefix_alone = run_serve(&["--etcd-prefix", "p/"], Some(TOKEN));
    assert!(!prefix_alone.status.success());
    assert!(String::from_utf8_lossy(&prefix_alone.stderr).contains("--etcd"));
    let bad = run_serve(&["--etcd", "127.0.0.1:2379"], Some(TOKEN));
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("is not an etcd client URL"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn serve_says_when_the_etcd_cluster_cannot_be_reached() {
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let out = run_serve(
        &["--etcd", &format!("http://127.0.0.1:{port}")],
        Some(TOKEN),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot open the store in the etcd cluster"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_etcd_servers_on_one_cluster_serve_the_same_data() {
    let cluster = tuplekv_testkit::etcd::Cluster::start(3);
    let urls = cluster.client_urls().join(",");
    let etcd = ["--etcd", urls.as_str(), "--etcd-prefix", "serve-test/"];
    let a = ServeProcess::start(&etcd);
    let b = ServeProcess::start(&etcd);
    // A server on another prefix of the same cluster is another store.
    let other = ServeProcess::start(&["--etcd", urls.as_str(), "--etcd-prefix", "other/"]);
    let (mut ca, mut cb, mut co) = (
        Client::h2(a.addr).await,
        Client::h1(b.addr).await,
        Client::h2(other.addr).await,
    );
    let k = key2("shared", "n");

    // Written through a, read through b with a's versionstamp.
    let first = ca
        .commit(write_of(vec![check(&k, None)], vec![set(&k, u64_value(7))]))
        .await;
    assert_eq!(first.status, AW_SUCCESS);
    let got = cb.get(&k).await.expect("a's write, read through b");
    assert_eq!(got.versionstamp, first.versionstamp);
    assert_eq!(got.value, u64_value(7).data);
    assert!(co.get(&k).await.is_none(), "another prefix sees nothing");

    // A check through b on a's versionstamp passes; the same check through a then fails,
    // because b's write moved the key on.
    let second = cb
        .commit(write_of(
            vec![check(&k, Some(&first.versionstamp))],
            vec![set(&k, u64_value(8))],
        ))
        .await;
    assert_eq!(second.status, AW_SUCCESS);
    assert!(second.versionstamp > first.versionstamp);
    let stale = ca
        .commit(write_of(
            vec![check(&k, Some(&first.versionstamp))],
            vec![set(&k, u64_value(9))],
        ))
        .await;
    assert_eq!(stale.status, AW_CHECK_FAILURE);
    let got = ca.get(&k).await.expect("b's write, read through a");
    assert_eq!(
        (got.value, got.versionstamp),
        (u64_value(8).data, second.versionstamp)
    );

    // A versionstamped key through b: a stamp between two revisions, read through a; a
    // backup over a's URL renumbers the stamps this engine does not make, keeping order.
    let log = key2("shared", "log");
    let stamped = cb
        .commit(write_of(
            vec![],
            vec![mutation(
                &log,
                pb::MutationType::MSetSuffixVersionstampedKey,
                Some(u64_value(1)),
            )],
        ))
        .await;
    assert_eq!(stamped.status, AW_SUCCESS);
    assert_eq!(stamped.versionstamp[8..], [0, 1], "a claimed stamp");
    let tmp = tempfile::tempdir().expect("a temp dir");
    let copy = tmp.path().join("copy");
    let out = Command::new(BIN)
        .args(["backup", "--url", &format!("http://{}", a.addr)])
        .arg(&copy)
        .env("TUPLEKV_ACCESS_TOKEN", TOKEN)
        .output()
        .expect("run tuplekv backup");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("renumbered"), "{stderr}");
    let db = tuplekv_engine::Database::open(&copy, tuplekv_engine::Options::default())
        .expect("the copy opens");
    let n = db
        .get(&tuplekv_engine::key!["shared", "n"])
        .expect("a read")
        .expect("copied");
    let logged: Vec<_> = db
        .list(
            &tuplekv_engine::Selector::prefix(&tuplekv_engine::key!["shared", "log"]),
            tuplekv_engine::ListOptions::default(),
        )
        .expect("a list")
        .map(|e| e.expect("an entry"))
        .collect();
    assert_eq!(logged.len(), 1);
    assert!(
        logged[0].versionstamp > n.versionstamp,
        "the later commit keeps the larger stamp"
    );
    db.close().expect("close");

    drop((ca, cb, co));
    for server in [a, b, other] {
        server.signal("TERM");
        let (ok, stderr) = server.exit().await;
        assert!(ok, "{stderr}");
        assert!(stderr.contains("etcd cluster at"), "{stderr}");
    }
    drop(cluster);
}

/// Runs `tuplekv ARGS` with `TUPLEKV_ACCESS_TOKEN` set to `token`; (success, stdout, stderr).
fn run_cli(args: &[&str], token: &str) -> (bool, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("TUPLEKV_ACCESS_TOKEN", token)
        .output()
        .expect("run tuplekv");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Polls the metadata exchange with `token` on `c` until its status is `want`.
async fn wait_for_token_status(c: &mut Client, token: &str, want: u16) {
    let started = std::time::Instant::now();
    loop {
        let status = c
            .metadata(token, r#"{"supportedVersions":[2,3]}"#)
            .await
            .status
            .as_u16();
        if status == want {
            return;
        }
        assert!(
            started.elapsed() < WAIT_MAX,
            "token {token}: still {status}, not {want}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tokens_work_at_once_and_sighup_swaps_the_tokens_file_on_open_connections() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("tokens");
    std::fs::write(&file, "# app tokens\nold-app-token-0001\n").expect("write");
    let file_arg = file.to_str().expect("utf-8 path");
    let server = ServeProcess::start(&["--tokens-file", file_arg]);
    let mut c = Client::h2(server.addr).await;
    wait_for_token_status(&mut c, TOKEN, 200).await;
    wait_for_token_status(&mut c, "old-app-token-0001", 200).await;
    wait_for_token_status(&mut c, "new-app-token-0002", 401).await;

    std::fs::write(&file, "new-app-token-0002\n").expect("write");
    server.signal("HUP");
    // The same connection: reloading drops none.
    wait_for_token_status(&mut c, "new-app-token-0002", 200).await;
    wait_for_token_status(&mut c, "old-app-token-0001", 401).await;
    wait_for_token_status(&mut c, TOKEN, 200).await;

    // A file that does not parse keeps the tokens there are.
    std::fs::write(&file, "newest-app-token-3\nshort\n").expect("write");
    server.signal("HUP");
    server.wait_for_log("tokens file refused").await;
    wait_for_token_status(&mut c, "newest-app-token-3", 401).await;
    wait_for_token_status(&mut c, "new-app-token-0002", 200).await;
    std::fs::write(&file, "newest-app-token-3\n").expect("write");
    server.signal("HUP");
    wait_for_token_status(&mut c, "newest-app-token-3", 200).await;
    drop(c);
    server.signal("TERM");
    let (ok, stderr) = server.exit().await;
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("SIGHUP: access tokens reloaded"),
        "{stderr}"
    );
    assert!(stderr.contains("tokens file refused"), "{stderr}");
    assert!(
        stderr.contains("refused a request: wrong access token (401)"),
        "the refused tokens are logged: {stderr}"
    );
}

#[test]
fn serve_refuses_a_bad_tokens_file_before_starting() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("tokens");
    std::fs::write(&file, "fine-token-000001\nwith-a-tab\tin-it\n").expect("write");
    let out = run_serve(&["--tokens-file", file.to_str().expect("utf-8")], None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 2"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_databases_under_a_root_are_made_by_db_create_and_survive_a_restart() {
    let root = tempfile::tempdir().expect("temp dir");
    let root_arg = root.path().to_str().expect("utf-8 path");
    let (ok, out, err) = run_cli(&["db", "create", "db2", "--databases", root_arg], TOKEN);
    assert!(ok && out.contains("created database db2"), "{out}{err}");
    let server = ServeProcess::start(&["--databases", root_arg]);
    let url = format!("http://{}/db2", server.addr);
    let (ok, _, err) = run_cli(
        &["set", "--url", &url, r#"["k"]"#, "--string", "in db2"],
        TOKEN,
    );
    assert!(ok, "{err}");
    // Made while the server runs: found on its first request.
    let (ok, _, err) = run_cli(&["db", "create", "db3", "--databases", root_arg], TOKEN);
    assert!(ok, "{err}");
    let db3 = format!("http://{}/db3", server.addr);
    let (ok, out, err) = run_cli(&["get", "--url", &db3, r#"["k"]"#], TOKEN);
    assert!(ok && out.contains("(absent)"), "{out}{err}");
    let root_url = format!("http://{}", server.addr);
    let (ok, out, err) = run_cli(&["get", "--url", &root_url, r#"["k"]"#], TOKEN);
    assert!(
        ok && out.contains("(absent)"),
        "the root is another store: {out}{err}"
    );
    // Not made on first use without --create-databases.
    let nope = format!("http://{}/nope", server.addr);
    let (ok, _, err) = run_cli(&["get", "--url", &nope, r#"["k"]"#], TOKEN);
    assert!(!ok && err.contains("not found"), "{err}");
    assert!(!root.path().join("nope").exists());
    // An open database cannot be dropped behind the server's back.
    let (ok, _, err) = run_cli(
        &["db", "drop", "db2", "--yes", "--databases", root_arg],
        TOKEN,
    );
    assert!(!ok && err.contains("running server"), "{err}");
    server.signal("TERM");
    let (ok, stderr) = server.exit().await;
    assert!(ok, "{stderr}");

    let server = ServeProcess::start(&["--databases", root_arg]);
    let url = format!("http://{}/db2", server.addr);
    let (ok, out, err) = run_cli(&["get", "--url", &url, r#"["k"]"#], TOKEN);
    assert!(
        ok && out.contains("in db2"),
        "kept across the restart: {out}{err}"
    );
    let root_url = format!("http://{}", server.addr);
    let (ok, out, err) = run_cli(&["db", "list", "--url", &root_url], TOKEN);
    assert!(ok, "{err}");
    assert_eq!(out, "db2\topen\ndb3\n");
    let (ok, _, err) = run_cli(&["db", "drop", "db2", "--url", &root_url], TOKEN);
    assert!(!ok && err.contains("--yes"), "{err}");
    let (ok, out, err) = run_cli(&["db", "drop", "db2", "--yes", "--url", &root_url], TOKEN);
    assert!(ok && out.contains("dropped"), "{out}{err}");
    assert!(!root.path().join("db2").exists(), "its directory is gone");
    let (ok, out, _) = run_cli(&["db", "list", "--databases", root_arg], TOKEN);
    assert!(ok);
    assert_eq!(out, "db3\n");
    server.signal("TERM");
    let (ok, stderr) = server.exit().await;
    assert!(ok, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_databases_makes_fresh_in_memory_databases_per_path() {
    let server = ServeProcess::start(&["--create-databases"]);
    for name in ["test-1", "test-2"] {
        let url = format!("http://{}/{name}", server.addr);
        let (ok, out, err) = run_cli(&["get", "--url", &url, r#"["k"]"#], TOKEN);
        assert!(ok && out.contains("(absent)"), "{out}{err}");
        let (ok, _, err) = run_cli(&["set", "--url", &url, r#"["k"]"#, "--string", name], TOKEN);
        assert!(ok, "{err}");
    }
    let url = format!("http://{}/test-1", server.addr);
    let (ok, out, _) = run_cli(&["get", "--url", &url, r#"["k"]"#], TOKEN);
    assert!(
        ok && out.contains("test-1") && !out.contains("test-2"),
        "{out}"
    );
    let (ok, out, err) = run_cli(
        &["db", "list", "--url", &format!("http://{}", server.addr)],
        TOKEN,
    );
    assert!(ok, "{err}");
    assert_eq!(out, "test-1\topen\ntest-2\topen\n");
    // Each has its own series in the metrics, labelled with its name.
    let (ok, out, err) = run_cli(
        &[
            "stats",
            "--url",
            &format!("http://{}", server.addr),
            "--json",
        ],
        TOKEN,
    );
    assert!(ok, "{err}");
    for name in ["default", "test-1", "test-2"] {
        assert!(
            out.contains(&format!("\"{name}\"")),
            "{name} missing: {out}"
        );
    }
}

#[test]
fn serve_listens_on_a_host_name_and_a_taken_port_creates_no_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("store");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = Command::new(BIN)
        .args(["serve", "--addr", &addr, "--path"])
        .arg(&store)
        .env("TUPLEKV_ACCESS_TOKEN", TOKEN)
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot listen"));
    assert!(
        !store.exists(),
        "nothing created for a server that did not start"
    );

    let mut child = Command::new(BIN)
        .args(["serve", "--addr", "localhost:0"])
        .env("TUPLEKV_ACCESS_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("line");
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.starts_with("listening on "), "{line:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_database_with_its_own_tokens_file_accepts_only_those_and_reloads_them() {
    let root = tempfile::tempdir().expect("temp dir");
    let root_arg = root.path().to_str().expect("utf-8 path");
    let (ok, _, err) = run_cli(&["db", "create", "tenant", "--databases", root_arg], TOKEN);
    assert!(ok, "{err}");
    let tokens = root.path().join("tenant").join("tokens");
    std::fs::write(&tokens, "tenant-token-0001\n").expect("write");
    let server = ServeProcess::start(&["--databases", root_arg]);
    let url = format!("http://{}/tenant", server.addr);
    let (ok, _, err) = run_cli(&["get", "--url", &url, r#"["k"]"#], TOKEN);
    assert!(!ok, "the server's token does not open it");
    assert!(err.contains("401") || err.contains("token"), "{err}");
    let (ok, out, err) = run_cli(&["get", "--url", &url, r#"["k"]"#], "tenant-token-0001");
    assert!(ok && out.contains("(absent)"), "{out}{err}");
    let root_url = format!("http://{}", server.addr);
    let (ok, _, _) = run_cli(
        &["get", "--url", &root_url, r#"["k"]"#],
        "tenant-token-0001",
    );
    assert!(!ok, "nor does its token open the root database");

    std::fs::write(&tokens, "tenant-token-0002\n").expect("write");
    server.signal("HUP");
    let started = std::time::Instant::now();
    loop {
        let (ok, _, _) = run_cli(&["get", "--url", &url, r#"["k"]"#], "tenant-token-0002");
        if ok {
            break;
        }
        assert!(
            started.elapsed() < WAIT_MAX,
            "the new tenant token never worked"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (ok, _, _) = run_cli(&["get", "--url", &url, r#"["k"]"#], "tenant-token-0001");
    assert!(!ok, "the old tenant token is gone");
    server.signal("TERM");
    let (ok, stderr) = server.exit().await;
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("reloaded the own tokens of 1 named database(s)"),
        "{stderr}"
    );
}
