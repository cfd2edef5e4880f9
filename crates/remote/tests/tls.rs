//! `RemoteStore` over `https://` against an in-process tuplekv server serving TLS with a
//! certificate from a CA made here: the store's operations with the CA trusted, and a clear
//! error (never a hang or a panic) for an untrusted certificate, a host name the certificate
//! does not carry, a server that does not speak TLS, and a CA file that cannot be used.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tuplekv_engine::{CommitResult, Database, Error, ListOptions, ReadView, Selector, Store, key};
use tuplekv_remote::{ConnectError, DENO_CERT_ENV, RemoteOptions, RemoteStore};
use tuplekv_server::{CommitMode, ServeOptions, ServerConfig, Tls};
use tuplekv_testkit::server::{TOKEN, TestServer};

/// A CA that signs server certificates.
struct TestCa {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate and key (PEM) for `names` (DNS names or IP addresses).
    fn server_cert(&self, names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let names = names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        let mut params = CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "tuplekv test server");
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// Writes the CA certificate to `dir/ca.pem`; its path.
    fn write(&self, dir: &Path) -> PathBuf {
        let path = dir.join("ca.pem");
        std::fs::write(&path, &self.cert_pem).unwrap();
        path
    }
}

/// A tuplekv server over TLS on `127.0.0.1`, on a free port; stopped when dropped.
struct TlsServer {
    addr: SocketAddr,
    stats: Arc<tuplekv_server::ServerStats>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TlsServer {
    /// Serves `db` with a certificate for `names` signed by `ca`, its files in `dir`.
    fn start(db: Arc<Database>, ca: &TestCa, names: &[&str], dir: &Path) -> TlsServer {
        TlsServer::start_at(db, ca, names, dir, None)
    }

    /// [`TlsServer::start`] on `at` (where a stopped server listened), retrying the bind
    /// while the port is briefly still held.
    fn start_at(
        db: Arc<Database>,
        ca: &TestCa,
        names: &[&str],
        dir: &Path,
        at: Option<SocketAddr>,
    ) -> TlsServer {
        let config = ServerConfig::new(TOKEN)
            .unwrap()
            .with_commit_mode(CommitMode::BlockingPool);
        let options = config.serve_options();
        TlsServer::start_router(
            tuplekv_server::router(db, config),
            options,
            ca,
            names,
            dir,
            at,
        )
    }

    /// Serves `router` with `options` over TLS, with a certificate for `names` signed by
    /// `ca`, its files in `dir`, on `at` or a free port.
    fn start_router(
        router: axum::Router,
        options: ServeOptions,
        ca: &TestCa,
        names: &[&str],
        dir: &Path,
        at: Option<SocketAddr>,
    ) -> TlsServer {
        let (cert_pem, key_pem) = ca.server_cert(names);
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert, cert_pem).unwrap();
        std::fs::write(&key, key_pem).unwrap();
        let tls = Tls::from_pem_files(&cert, &key).unwrap();
        let options = ServeOptions {
            tls: Some(tls),
            ..options
        };
        let stats = Arc::clone(&options.stats);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(async {
                let Some(addr) = at else {
                    return tokio::net::TcpListener::bind("127.0.0.1:0").await;
                };
                let mut tries = 0;
                loop {
                    match tokio::net::TcpListener::bind(addr).await {
                        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 100 => {
                            tries += 1;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        other => return other,
                    }
                }
            })
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let shutdown = async move {
                    let _ = stopped.await;
                };
                let _ = tuplekv_server::serve_with(listener, router, options, shutdown).await;
            });
        });
        TlsServer {
            addr,
            stats,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn url(&self, host: &str) -> String {
        format!("https://{host}:{}", self.addr.port())
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Options trusting the CA certificates in `ca_certs`, with a short retry budget (so that an
/// error that were wrongly retried would still end).
fn trusting(ca_certs: Vec<PathBuf>) -> RemoteOptions {
    RemoteOptions {
        ca_certs,
        retry_for: Duration::from_secs(2),
        ..RemoteOptions::default()
    }
}

/// A served database with a CA and a certificate for `localhost` and `127.0.0.1`.
fn served(dir: &Path) -> (Arc<Database>, TestCa, TlsServer) {
    let db = Arc::new(Database::in_memory());
    let ca = TestCa::new("tuplekv remote test CA");
    let server = TlsServer::start(Arc::clone(&db), &ca, &["localhost", "127.0.0.1"], dir);
    (db, ca, server)
}

/// The entry at `k`, read now.
fn latest(
    store: &RemoteStore,
    k: &tuplekv_engine::Key,
) -> Result<Option<tuplekv_engine::Entry>, Error> {
    Ok(store.get_many(std::slice::from_ref(k))?.remove(0))
}

/// The TLS error of a failed connect, or a panic naming what came instead.
fn tls_reason(result: Result<RemoteStore, ConnectError>) -> String {
    match result {
        Err(ConnectError::Tls { reason, .. }) => reason,
        Err(other) => panic!("not a TLS error: {other:?}"),
        Ok(store) => panic!("connected: {store:?}"),
    }
}

#[test]
fn a_store_trusting_the_ca_sets_gets_lists_checks_and_watches_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let (db, ca, server) = served(dir.path());
    let ca_file = ca.write(dir.path());
    let store = RemoteStore::connect_with(&server.url("localhost"), TOKEN, trusting(vec![ca_file]))
        .unwrap();
    assert!(store.has_extension().unwrap(), "the extension over TLS too");

    // set and get
    let res = store.atomic().set(&key!["a"], 7u64).commit().unwrap();
    let CommitResult::Committed { versionstamp, .. } = res else {
        panic!("{res:?}")
    };
    let got = store.snapshot().get(&key!["a"]).unwrap().unwrap();
    assert_eq!(got.value.as_u64(), Some(7));
    assert_eq!(got.versionstamp, versionstamp);
    assert_eq!(
        db.get(&key!["a"]).unwrap().unwrap(),
        got,
        "it is in the server's store"
    );

    // list, in batches of two (several reads of one held snapshot)
    for i in 0..5u64 {
        let _ = store
            .atomic()
            .set(&key!["items", i], i * 10)
            .commit()
            .unwrap();
    }
    let listed = store
        .list(
            &Selector::prefix(&key!["items"]),
            ListOptions {
                batch_size: Some(2),
                ..ListOptions::default()
            },
        )
        .unwrap()
        .read_all()
        .unwrap();
    let values: Vec<_> = listed.iter().map(|e| e.value.as_u64().unwrap()).collect();
    assert_eq!(values, vec![0, 10, 20, 30, 40]);

    // an atomic check: passes at the current versionstamp, fails at a stale one
    let passed = store
        .atomic()
        .check(&key!["a"], Some(versionstamp))
        .set(&key!["a"], 8u64)
        .commit()
        .unwrap();
    assert!(passed.is_committed(), "{passed:?}");
    let failed = store
        .atomic()
        .check(&key!["a"], Some(versionstamp))
        .set(&key!["a"], 9u64)
        .commit()
        .unwrap();
    assert!(!failed.is_committed(), "a stale check fails: {failed:?}");
    let a = latest(&store, &key!["a"]).unwrap().unwrap();
    assert_eq!(a.value.as_u64(), Some(8));

    // watch: the current state, then a change made by another writer
    let k = tuplekv_engine::codec::encode_key(&key!["w"]);
    let mut watch = store.watch_raw(vec![k.into()]).unwrap();
    assert_eq!(watch.next_blocking().unwrap().entries, vec![None]);
    let _ = db.atomic().set(&key!["w"], 5u64).commit().unwrap();
    let next = watch.next_blocking().unwrap();
    assert_eq!(next.entries[0].as_ref().unwrap().value.as_u64(), Some(5));
    assert_eq!(next.changed, vec![true]);
}

#[test]
fn an_ip_address_url_is_checked_against_the_certificates_ip_address() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, ca, server) = served(dir.path());
    let ca_file = ca.write(dir.path());
    let store = RemoteStore::connect_with(&server.url("127.0.0.1"), TOKEN, trusting(vec![ca_file]))
        .unwrap();
    let _ = store.atomic().set(&key!["ip"], 1u64).commit().unwrap();
    assert_eq!(
        latest(&store, &key!["ip"]).unwrap().unwrap().value.as_u64(),
        Some(1)
    );
}

#[test]
fn a_ca_file_may_hold_several_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, ca, server) = served(dir.path());
    let other = TestCa::new("another CA");
    let bundle = dir.path().join("bundle.pem");
    std::fs::write(&bundle, format!("{}{}", other.cert_pem, ca.cert_pem)).unwrap();
    let store =
        RemoteStore::connect_with(&server.url("localhost"), TOKEN, trusting(vec![bundle])).unwrap();
    assert!(store.has_extension().unwrap());
}

#[test]
fn without_the_ca_the_connect_fails_naming_an_untrusted_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, _ca, server) = served(dir.path());
    // Mozilla's roots alone, then another CA: neither signed the server's certificate.
    let other = TestCa::new("not the server's CA");
    let other_file = dir.path().join("other.pem");
    std::fs::write(&other_file, &other.cert_pem).unwrap();
    for ca_certs in [vec![], vec![other_file]] {
        let url = server.url("localhost");
        let err = RemoteStore::connect_with(&url, TOKEN, trusting(ca_certs)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&url), "{text}");
        let reason = tls_reason(Err(err));
        assert!(reason.contains("not signed by a trusted CA"), "{reason}");
        assert!(reason.contains("RemoteOptions::ca_certs"), "{reason}");
    }
    assert_eq!(
        server.stats.metadata_requests(),
        0,
        "the token was never sent"
    );
}

#[test]
fn a_host_name_the_certificate_does_not_carry_fails_naming_the_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Database::in_memory());
    let ca = TestCa::new("tuplekv remote test CA");
    // A certificate for another name only: 127.0.0.1 and localhost are not on it.
    let server = TlsServer::start(db, &ca, &["kv.example.com"], dir.path());
    let ca_file = ca.write(dir.path());
    for host in ["localhost", "127.0.0.1"] {
        let reason = tls_reason(RemoteStore::connect_with(
            &server.url(host),
            TOKEN,
            trusting(vec![ca_file.clone()]),
        ));
        assert!(
            reason.contains(&format!("not valid for the name \"{host}\"")),
            "{reason}"
        );
    }
    assert_eq!(server.stats.metadata_requests(), 0);
}

#[test]
fn https_to_a_plain_http_server_fails_saying_it_does_not_answer_tls() {
    let server = TestServer::start(Arc::new(Database::in_memory()));
    let url = format!("https://{}", server.addr);
    let result = RemoteStore::connect_with(&url, TOKEN, trusting(vec![]));
    let reason = tls_reason(result);
    assert!(reason.contains("did not answer in TLS"), "{reason}");
    assert_eq!(server.stats.metadata_requests(), 0);
}

#[test]
fn a_ca_file_that_cannot_be_used_fails_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, ca, server) = served(dir.path());
    let ca_file = ca.write(dir.path());
    let missing = dir.path().join("missing.pem");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let key_only = dir.path().join("key.pem");
    std::fs::write(&key_only, KeyPair::generate().unwrap().serialize_pem()).unwrap();
    let not_base64 = dir.path().join("not-base64.pem");
    std::fs::write(
        &not_base64,
        "-----BEGIN CERTIFICATE-----\n!!!! not base64 !!!!\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let not_der = dir.path().join("not-der.pem");
    std::fs::write(
        &not_der,
        "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    for (bad, says) in [
        (&missing, "cannot read it"),
        (&empty, "holds no PEM certificate"),
        (&key_only, "holds no PEM certificate"),
        (&not_base64, "not valid PEM"),
        (&not_der, "not a usable CA certificate"),
    ] {
        // The good CA first: one bad file fails the whole list.
        let err = RemoteStore::connect_with(
            &server.url("localhost"),
            TOKEN,
            trusting(vec![ca_file.clone(), bad.clone()]),
        )
        .unwrap_err();
        let ConnectError::CaCerts { path, reason } = &err else {
            panic!("{bad:?}: not a CA file error: {err:?}")
        };
        assert_eq!(path, bad);
        assert!(reason.contains(says), "{bad:?}: {reason}");
        let text = err.to_string();
        assert!(text.contains(&bad.display().to_string()), "{text}");
    }
    assert_eq!(server.stats.metadata_requests(), 0, "nothing was sent");
}

#[test]
fn ca_certs_are_not_read_for_a_plain_http_url() {
    let server = TestServer::start(Arc::new(Database::in_memory()));
    let options = trusting(vec![PathBuf::from("/nonexistent/ca.pem")]);
    let store = RemoteStore::connect_with(&server.url(), TOKEN, options).unwrap();
    assert!(store.has_extension().unwrap());
}

#[test]
fn a_url_that_is_neither_http_nor_https_is_refused() {
    for url in ["ftp://127.0.0.1:1", "127.0.0.1:4512", "https:///v2"] {
        let err = RemoteStore::connect(url, TOKEN).unwrap_err();
        assert!(
            matches!(err, ConnectError::InvalidUrl { .. }),
            "{url}: {err}"
        );
    }
}

/// The variable the parent test sets for [`deno_cert_child`], naming the URL to reach.
const CHILD_URL_ENV: &str = "TUPLEKV_REMOTE_TLS_TEST_URL";

#[test]
fn with_deno_cert_env_trusts_the_ca_deno_cert_names_and_only_then() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, ca, server) = served(dir.path());
    let ca_file = ca.write(dir.path());
    // The environment is the process's: the check runs in a child, this test binary again.
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "deno_cert_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DENO_CERT_ENV, &ca_file)
        .env(CHILD_URL_ENV, server.url("localhost"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(out.contains("deno_cert_child: connected"), "{out}");
}

/// Run by [`with_deno_cert_env_trusts_the_ca_deno_cert_names_and_only_then`] with
/// `DENO_CERT` set; does nothing in a plain test run.
#[test]
fn deno_cert_child() {
    let Some(url) = std::env::var_os(CHILD_URL_ENV) else {
        return;
    };
    let url = url.into_string().unwrap();
    let deno_cert = PathBuf::from(std::env::var_os(DENO_CERT_ENV).unwrap());
    // The library does not read DENO_CERT by itself.
    let reason = tls_reason(RemoteStore::connect_with(&url, TOKEN, trusting(vec![])));
    assert!(reason.contains("not signed by a trusted CA"), "{reason}");
    let options = trusting(vec![]).with_deno_cert_env();
    assert_eq!(options.ca_certs, vec![deno_cert]);
    let store = RemoteStore::connect_with(&url, TOKEN, options).unwrap();
    let _ = store.atomic().set(&key!["deno"], 1u64).commit().unwrap();
    assert!(latest(&store, &key!["deno"]).unwrap().is_some());
    println!("deno_cert_child: connected");
}

#[test]
fn with_deno_cert_env_adds_nothing_when_the_variable_is_unset() {
    if std::env::var_os(DENO_CERT_ENV).is_some() {
        // Set in this test run's environment: the child test above covers the set case.
        return;
    }
    let options = RemoteOptions::default().with_deno_cert_env();
    assert!(options.ca_certs.is_empty());
}

/// A store keeps working after the server restarts behind the same certificate: its next
/// connection shakes hands again.
#[test]
fn a_tls_connection_is_made_again_after_a_server_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Database::in_memory());
    let ca = TestCa::new("tuplekv remote test CA");
    let ca_file = ca.write(dir.path());
    let server = TlsServer::start(Arc::clone(&db), &ca, &["localhost"], dir.path());
    let store = RemoteStore::connect_with(&server.url("localhost"), TOKEN, trusting(vec![ca_file]))
        .unwrap();
    let _ = store.atomic().set(&key!["r"], 1u64).commit().unwrap();
    let addr = server.addr;
    drop(server);
    let _server = TlsServer::start_at(Arc::clone(&db), &ca, &["localhost"], dir.path(), Some(addr));
    let got = latest(&store, &key!["r"]).unwrap().unwrap();
    assert_eq!(got.value.as_u64(), Some(1));
    let _ = store.atomic().set(&key!["r"], 2u64).commit().unwrap();
    assert_eq!(db.get(&key!["r"]).unwrap().unwrap().value.as_u64(), Some(2));
}

#[test]
fn an_https_store_never_follows_the_metadata_to_a_plain_http_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("tuplekv remote test CA");
    let ca_file = ca.write(dir.path());
    // A metadata answer naming a plain http:// data path endpoint.
    let metadata = r#"{"version":3,"databaseId":"00000000-0000-0000-0000-000000000000",
        "endpoints":[{"url":"http://127.0.0.1:1/v2","consistency":"strong"}],
        "token":"a-data-path-token","expiresAt":"2999-01-01T00:00:00Z"}"#;
    let router = axum::Router::new().route(
        "/",
        axum::routing::post(move || async move {
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                metadata,
            )
        }),
    );
    let server = TlsServer::start_router(
        router,
        ServeOptions::default(),
        &ca,
        &["localhost"],
        dir.path(),
        None,
    );
    let err = RemoteStore::connect_with(&server.url("localhost"), TOKEN, trusting(vec![ca_file]))
        .unwrap_err();
    let ConnectError::Store(Error::Remote { message, .. }) = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains("http://127.0.0.1:1/v2"), "{message}");
    assert!(message.contains("does not change schemes"), "{message}");
}

#[test]
fn a_server_back_with_an_untrusted_certificate_makes_requests_unavailable_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Database::in_memory());
    let ca = TestCa::new("tuplekv remote test CA");
    let ca_file = ca.write(dir.path());
    let server = TlsServer::start(Arc::clone(&db), &ca, &["localhost"], dir.path());
    let store = RemoteStore::connect_with(&server.url("localhost"), TOKEN, trusting(vec![ca_file]))
        .unwrap();
    let _ = store.atomic().set(&key!["u"], 1u64).commit().unwrap();
    let addr = server.addr;
    drop(server);
    let other = TestCa::new("not the trusted CA");
    let server = TlsServer::start_at(
        Arc::clone(&db),
        &other,
        &["localhost"],
        dir.path(),
        Some(addr),
    );
    let err = latest(&store, &key!["u"]).unwrap_err();
    let Error::Unavailable { reason, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(reason.contains("not signed by a trusted CA"), "{reason}");
    // A write meets the same refusal before anything is sent: not an unknown outcome.
    let err = store.atomic().set(&key!["u"], 2u64).commit().unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert_eq!(server.stats.atomic_write_requests(), 0);
    assert_eq!(db.get(&key!["u"]).unwrap().unwrap().value.as_u64(), Some(1));
}
