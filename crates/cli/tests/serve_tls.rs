//! `tuplekv serve --tls-cert --tls-key` as a process: it serves KV Connect over TLS (HTTP/2
//! and HTTP/1.1 by ALPN), SIGHUP swaps the certificate for new connections while open ones
//! keep working (and a bad file on SIGHUP keeps the old one), SIGHUP without TLS is logged
//! and changes nothing, and bad flags or files are refused before anything is created.

use tuplekv_testkit::kv_connect as common;
use tuplekv_testkit::tls as tls_support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use common::{Client, TOKEN, WAIT_MAX};
use denokv_proto::datapath as pb;
use tls_support::*;

const BIN: &str = env!("CARGO_BIN_EXE_tuplekv");
const METADATA_V3: &str = r#"{"supportedVersions":[2,3]}"#;

/// A running `tuplekv serve`, killed when dropped; its stderr lines arrive on a channel.
struct Serve {
    child: Child,
    addr: SocketAddr,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Serve {
    fn start(args: &[&std::ffi::OsStr]) -> Serve {
        let mut child = Command::new(BIN)
            .arg("serve")
            .args(["--addr", "127.0.0.1:0"])
            .args(args)
            .env("TUPLEKV_ACCESS_TOKEN", TOKEN)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tuplekv serve");
        let err = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the listening line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .expect("an address");
        Serve {
            child,
            addr,
            lines,
            seen: Vec::new(),
        }
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
    }

    /// Waits (off the async runtime) for a stderr line containing `text`; returns it.
    async fn wait_for_line(mut self, text: &'static str) -> (Serve, String) {
        tokio::task::spawn_blocking(move || {
            loop {
                match self.lines.recv_timeout(WAIT_MAX) {
                    Ok(line) => {
                        self.seen.push(line.clone());
                        if line.contains(text) {
                            return (self, line);
                        }
                    }
                    Err(e) => panic!(
                        "no line with {text:?} ({e}); seen:\n{}",
                        self.seen.join("\n")
                    ),
                }
            }
        })
        .await
        .expect("wait task")
    }

    /// SIGTERM, then the exit status.
    async fn stop(mut self) -> bool {
        self.signal("TERM");
        tokio::task::spawn_blocking(move || self.child.wait().expect("wait").success())
            .await
            .expect("wait task")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A write and a read of it over `client`.
async fn round_trip(client: &mut TlsClient, name: &str) {
    let k = common::key2("tls-cli", name);
    let write = common::write_of(vec![], vec![common::set(&k, common::u64_value(3))]);
    let reply = client
        .data(TOKEN, "atomic_write", prost::Message::encode_to_vec(&write))
        .await;
    assert_eq!(reply.status, 200);
    let read = common::read_of(vec![common::get_range(&k)]);
    let reply = client
        .data(TOKEN, "snapshot_read", prost::Message::encode_to_vec(&read))
        .await;
    let out: pb::SnapshotReadOutput = prost::Message::decode(reply.body).expect("read output");
    assert_eq!(out.ranges[0].values[0].value, common::u64_value(3).data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_over_tls_swaps_the_certificate_on_sighup_for_new_connections_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("cli test CA");
    let first = ca.server_cert("first");
    let (cert, key) = first.write(dir.path());
    let server = Serve::start(&[
        "--tls-cert".as_ref(),
        cert.as_os_str(),
        "--tls-key".as_ref(),
        key.as_os_str(),
    ]);
    let addr = server.addr;
    let (server, started) = server.wait_for_line("KV Connect server started").await;
    assert!(started.contains(&format!("https://{addr}")), "{started}");

    let mut old_h2 = TlsClient::connect(addr, &ca.cert_der, H2).await;
    let mut old_h1 = TlsClient::connect(addr, &ca.cert_der, H1).await;
    for c in [&mut old_h2, &mut old_h1] {
        assert_eq!(c.metadata(TOKEN, METADATA_V3).await.status, 200);
        assert_eq!(c.server_cert, first.cert_der);
    }

    let second = ca.server_cert("second");
    second.write(dir.path());
    server.signal("HUP");
    let (server, line) = server.wait_for_line("SIGHUP:").await;
    assert!(
        line.contains("reloaded the TLS certificate and key"),
        "{line}"
    );
    let mut new = TlsClient::connect(addr, &ca.cert_der, H2).await;
    assert_eq!(
        new.server_cert, second.cert_der,
        "a new connection sees the new certificate"
    );
    round_trip(&mut new, "new").await;
    round_trip(&mut old_h2, "old-h2").await;
    round_trip(&mut old_h1, "old-h1").await;

    // A key that is not the certificate's: refused, and the second certificate stays.
    std::fs::write(&key, &first.key_pem).expect("write the wrong key");
    server.signal("HUP");
    let (server, line) = server.wait_for_line("SIGHUP:").await;
    assert!(
        line.contains("cannot reload")
            && line.contains("does not match")
            && line.contains("old certificate stays"),
        "{line}"
    );
    let after = TlsClient::connect(addr, &ca.cert_der, H1).await;
    assert_eq!(after.server_cert, second.cert_der);
    drop((old_h2, old_h1, new, after));
    assert!(server.stop().await, "exits 0 on SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_without_tls_logs_that_there_is_nothing_to_reload_and_keeps_serving() {
    let server = Serve::start(&[]);
    let (server, started) = server.wait_for_line("KV Connect server started").await;
    assert!(started.contains("http://"), "{started}");
    server.signal("HUP");
    let (server, line) = server.wait_for_line("SIGHUP:").await;
    assert!(line.contains("nothing to reload"), "{line}");
    let mut c = Client::h2(server.addr).await;
    assert_eq!(c.metadata(TOKEN, METADATA_V3).await.status, 200);
    drop(c);
    assert!(server.stop().await, "exits 0 on SIGTERM");
}

/// `tuplekv serve` with `args` and a durable store at `dir/db`: its stderr, after checking
/// that it failed and created no store.
fn refused(dir: &Path, args: &[&std::ffi::OsStr]) -> String {
    let db = dir.join("db");
    let out = Command::new(BIN)
        .arg("serve")
        .args(["--addr", "127.0.0.1:0"])
        .arg("--path")
        .arg(&db)
        .args(args)
        .env("TUPLEKV_ACCESS_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .output()
        .expect("run tuplekv serve");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "started with {args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "nothing listened: {:?}", out.stdout);
    assert!(!db.exists(), "created the store with {args:?}");
    stderr
}

#[test]
fn serve_refuses_bad_tls_flags_and_files_before_creating_anything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("refusals CA");
    let (a, b) = (ca.server_cert("a"), ca.server_cert("b"));
    let (cert, key) = a.write(dir.path());
    let other_key = dir.path().join("other.key");
    std::fs::write(&other_key, &b.key_pem).expect("write");
    let missing = dir.path().join("missing.pem");
    let flag = |s: &'static str| std::ffi::OsStr::new(s);

    let only_cert = refused(dir.path(), &[flag("--tls-cert"), cert.as_os_str()]);
    assert!(only_cert.contains("--tls-key"), "{only_cert}");
    let only_key = refused(dir.path(), &[flag("--tls-key"), key.as_os_str()]);
    assert!(only_key.contains("--tls-cert"), "{only_key}");
    let no_cert = refused(
        dir.path(),
        &[
            flag("--tls-cert"),
            missing.as_os_str(),
            flag("--tls-key"),
            key.as_os_str(),
        ],
    );
    assert!(
        no_cert.contains("cannot read the TLS certificate") && no_cert.contains("missing.pem"),
        "{no_cert}"
    );
    let key_as_cert = refused(
        dir.path(),
        &[
            flag("--tls-cert"),
            key.as_os_str(),
            flag("--tls-key"),
            key.as_os_str(),
        ],
    );
    assert!(
        key_as_cert.contains("no `BEGIN CERTIFICATE`"),
        "{key_as_cert}"
    );
    let mismatch = refused(
        dir.path(),
        &[
            flag("--tls-cert"),
            cert.as_os_str(),
            flag("--tls-key"),
            other_key.as_os_str(),
        ],
    );
    assert!(
        mismatch.contains("the private key does not match the certificate"),
        "{mismatch}"
    );
}
