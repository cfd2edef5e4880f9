//! The probes and the metrics: `/healthz` and `/readyz` without the token (503 with the
//! reason after the engine's fail-stop), `GET /metrics` behind it, and series that move with
//! the requests and commits they count.

use tuplekv_testkit::kv_connect as common;

use std::sync::Arc;

use bytes::Bytes;
use denokv_proto::datapath as pb;
use http_body_util::Full;
use hyper::{Request, StatusCode};
use tokio::net::TcpListener;
use tuplekv_engine::durable::fs::Faults;
use tuplekv_engine::{Database, Durability, key};
use tuplekv_server::metrics::{DEFAULT_DATABASE, Metrics, database_sampler, parse_text};
use tuplekv_server::{router, serve_with};

use common::{Client, TOKEN, TestServer, bytes_value, config, key as kv_key, set, write_of};

/// `method path` with no body, and a bearer `token` if given.
fn request(
    method: &str,
    addr: std::net::SocketAddr,
    path: &str,
    token: Option<&str>,
) -> Request<Full<Bytes>> {
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    req.body(Full::new(Bytes::new())).expect("request")
}

/// The value of the series `key` (name and labels, as the text writes them).
fn series(text: &str, key: &str) -> Option<f64> {
    parse_text(text)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

#[tokio::test]
async fn healthz_answers_200_without_a_token_on_both_protocols_and_to_head() {
    let server = TestServer::in_memory().spawn().await;
    for mut client in [server.h1().await, server.h2().await] {
        let reply = client
            .call(request("GET", server.addr, "/healthz", None))
            .await;
        assert_eq!(
            (reply.status, reply.text().as_str()),
            (StatusCode::OK, "ok\n")
        );
        let reply = client
            .call(request("HEAD", server.addr, "/healthz", None))
            .await;
        assert_eq!(reply.status, StatusCode::OK);
        assert!(reply.body.is_empty(), "HEAD has no body");
        let reply = client
            .call(request("GET", server.addr, "/readyz", None))
            .await;
        assert_eq!(
            (reply.status, reply.text().as_str()),
            (StatusCode::OK, "ready\n")
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn readyz_is_503_with_the_reason_after_a_failed_log_sync() {
    let dir = tempfile::tempdir().expect("tempdir");
    let faults = Faults::new();
    let db = Database::open(
        dir.path(),
        tuplekv_testkit::durable::faulty(&faults, Durability::Sync),
    )
    .expect("open");
    let db = Arc::new(db);
    let server = TestServer::of(Arc::clone(&db)).spawn().await;
    let mut client = server.h1().await;
    let reply = client
        .call(request("GET", server.addr, "/readyz", None))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    faults.fail_sync(true);
    let reply = client
        .write(write_of(vec![], vec![set(&kv_key("a"), bytes_value(b"1"))]))
        .await;
    assert_eq!(
        reply.status.as_u16(),
        500,
        "the failed sync fails the write"
    );
    faults.fail_sync(false);
    let reply = client
        .call(request("GET", server.addr, "/readyz", None))
        .await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    let text = reply.text();
    assert!(text.starts_with("not ready: "), "{text}");
    assert!(text.contains("stopped accepting writes"), "{text}");
    assert_eq!(text.lines().count(), 1, "one line: {text}");
    let reply = client
        .call(request("GET", server.addr, "/healthz", None))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "alive all the same");
    server.stop().await;
}

#[tokio::test]
async fn metrics_need_the_token_and_show_requests_and_commits_that_move_after_a_write() {
    let db = Database::in_memory();
    let config = config();
    let options = config.serve_options();
    let metrics = Metrics::new(Arc::clone(&options.stats));
    metrics
        .add_database(
            DEFAULT_DATABASE,
            Arc::clone(config.stats()),
            Some(database_sampler(&db)),
        )
        .expect("a new name");
    db.set(&key!["before"], b"12345").expect("set");
    let tokens = Arc::clone(config.access_tokens());
    let app = router(Arc::new(db), config).merge(metrics.router(tokens));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve_with(listener, app, options, async move {
        let _ = stopped.await;
    }));
    let mut client = Client::h2(addr).await;
    let reply = client.call(request("GET", addr, "/metrics", None)).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "no token");
    let reply = client
        .call(request(
            "GET",
            addr,
            "/metrics",
            Some("not-the-token-at-all"),
        ))
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "a wrong token");
    let reply = client
        .call(request("GET", addr, "/metrics", Some(TOKEN)))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(
        reply.headers["content-type"]
            .to_str()
            .is_ok_and(|c| c.starts_with("text/plain; version=0.0.4")),
        "{:?}",
        reply.headers
    );
    let before = reply.text();
    let commits = "tuplekv_commits_total{database=\"default\"}";
    let writes_ok =
        "tuplekv_requests_total{database=\"default\",endpoint=\"atomic_write\",status=\"200\"}";
    assert_eq!(series(&before, commits), Some(0.0));
    assert_eq!(series(&before, writes_ok), None, "no write answered yet");
    assert_eq!(
        series(&before, "tuplekv_keys{database=\"default\"}"),
        Some(1.0)
    );
    assert_eq!(series(&before, "tuplekv_databases"), Some(1.0));
    assert_eq!(series(&before, "tuplekv_open_connections"), Some(1.0));

    let out: pb::AtomicWriteOutput = client
        .commit(write_of(vec![], vec![set(&kv_key("a"), bytes_value(b"1"))]))
        .await;
    assert_eq!(out.status, i32::from(pb::AtomicWriteStatus::AwSuccess));
    let after = client
        .call(request("GET", addr, "/metrics", Some(TOKEN)))
        .await
        .text();
    assert_eq!(series(&after, commits), Some(1.0));
    assert_eq!(series(&after, writes_ok), Some(1.0));
    assert_eq!(
        series(
            &after,
            "tuplekv_request_duration_seconds_count{database=\"default\",endpoint=\"atomic_write\"}"
        ),
        Some(1.0)
    );
    assert!(
        series(&after, "tuplekv_request_bytes_total{database=\"default\"}")
            .is_some_and(|b| b > 0.0)
    );
    assert!(
        series(&after, "tuplekv_response_bytes_total{database=\"default\"}")
            .is_some_and(|b| b > 0.0)
    );
    drop(client);
    let _ = stop.send(());
    task.await.expect("serve task").expect("serve result");
}
