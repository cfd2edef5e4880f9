//! KV Connect over TLS (`ServeOptions::tls`): the metadata exchange and the data path over
//! HTTP/2 and HTTP/1.1 as ALPN chose, an `https://` version-1 endpoint, plain text and
//! stalled handshakes that leave the other clients served, a reload that new connections
//! see and open ones survive, and clear errors for files that cannot be used.

use tuplekv_testkit::kv_connect as common;
use tuplekv_testkit::tls as tls_support;

use std::time::Duration;

use common::*;
use denokv_proto::datapath as pb;
use tls_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tuplekv_server::{ServeOptions, Tls, TlsError};

const METADATA_V3: &str = r#"{"supportedVersions":[2,3]}"#;

/// A TLS server on a free port with a fresh CA's certificate, as files in `dir`.
async fn tls_server(
    dir: &std::path::Path,
    opts: impl FnOnce(ServeOptions) -> ServeOptions + 'static,
) -> (TestServer, TestCa, Tls) {
    let ca = TestCa::new("tuplekv test CA");
    let (cert, key) = ca.server_cert("first").write(dir);
    let tls = Tls::from_pem_files(&cert, &key).expect("a good certificate and key");
    let server = TestServer::in_memory()
        .options({
            let tls = tls.clone();
            move |o| {
                opts(ServeOptions {
                    tls: Some(tls),
                    ..o
                })
            }
        })
        .spawn()
        .await;
    (server, ca, tls)
}

/// A write then a read of it over `client`; the read's reply.
async fn write_and_read(client: &mut TlsClient, name: &str) -> TlsReply {
    let k = key2("tls", name);
    let write = write_of(vec![check(&k, None)], vec![set(&k, u64_value(7))]);
    let reply = client
        .data(TOKEN, "atomic_write", prost::Message::encode_to_vec(&write))
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let out: pb::AtomicWriteOutput = prost::Message::decode(reply.body).expect("write output");
    assert_eq!(out.status, AW_SUCCESS);
    let read = read_of(vec![get_range(&k)]);
    let reply = client
        .data(TOKEN, "snapshot_read", prost::Message::encode_to_vec(&read))
        .await;
    assert_eq!(reply.status, 200);
    let out: pb::SnapshotReadOutput =
        prost::Message::decode(reply.body.clone()).expect("read output");
    assert_eq!(out.ranges[0].values.len(), 1, "the write is read back");
    assert_eq!(out.ranges[0].values[0].value, u64_value(7).data);
    reply
}

#[tokio::test]
async fn metadata_and_data_path_work_over_tls_with_h2_and_http1_by_alpn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, ca, _tls) = tls_server(dir.path(), |o| o).await;
    for (alpn, version, name) in [
        (H2, hyper::Version::HTTP_2, "h2"),
        (H1, hyper::Version::HTTP_11, "h1"),
    ] {
        let mut client = TlsClient::connect(server.addr, &ca.cert_der, alpn).await;
        assert_eq!(client.alpn, alpn, "ALPN agreed on what the client offered");
        let reply = client.metadata(TOKEN, METADATA_V3).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.version, version);
        assert_eq!(reply.json()["version"], 3);
        assert_eq!(reply.json()["endpoints"][0]["url"], "/v2");
        let wrong = client.metadata("not-the-token!", METADATA_V3).await;
        assert_eq!(wrong.status, 401, "the token is still checked");
        let read = write_and_read(&mut client, name).await;
        assert_eq!(read.version, version);
    }
    server.stop().await;
}

#[tokio::test]
async fn tls_1_2_and_1_3_are_both_accepted() {
    use tokio_rustls::rustls::{ProtocolVersion, version};
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, ca, _tls) = tls_server(dir.path(), |o| o).await;
    for (offered, agreed) in [
        (&version::TLS12, ProtocolVersion::TLSv1_2),
        (&version::TLS13, ProtocolVersion::TLSv1_3),
    ] {
        let config = client_config_for(&ca.cert_der, H2, &[offered]);
        let tls = connect_with(server.addr, config).await.expect("handshake");
        assert_eq!(tls.get_ref().1.protocol_version(), Some(agreed));
    }
    server.stop().await;
}

#[tokio::test]
async fn version_1_metadata_over_tls_names_an_https_endpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, ca, _tls) = tls_server(dir.path(), |o| o).await;
    for alpn in [H2, H1] {
        let mut client = TlsClient::connect(server.addr, &ca.cert_der, alpn).await;
        let reply = client.metadata(TOKEN, r#"{"supportedVersions":[1]}"#).await;
        assert_eq!(reply.json()["version"], 1);
        assert_eq!(
            reply.json()["endpoints"][0]["url"],
            format!("https://localhost:{}/v2", server.addr.port())
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn a_plain_text_request_to_a_tls_port_fails_and_the_next_client_is_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, ca, _tls) = tls_server(dir.path(), |o| o).await;
    let mut plain = Client::h1(server.addr).await;
    let req = hyper::Request::post(format!("http://{}/", server.addr))
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(http_body_util::Full::new(bytes::Bytes::from(METADATA_V3)))
        .expect("request");
    assert!(
        plain.send(req).await.is_err(),
        "plain HTTP gets no HTTP response from a TLS port"
    );
    // Raw bytes too: the server closes the connection, it does not hang or answer.
    let mut raw = TcpStream::connect(server.addr).await.expect("connect");
    raw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut buf = Vec::new();
    let _ = raw.read_to_end(&mut buf).await;
    assert!(
        !buf.starts_with(b"HTTP/"),
        "no HTTP reply in clear text: {buf:?}"
    );
    let mut client = TlsClient::connect(server.addr, &ca.cert_der, H2).await;
    assert_eq!(client.metadata(TOKEN, METADATA_V3).await.status, 200);
    server.stop().await;
}

/// A connection that sent the first bytes of a TLS record and then nothing.
async fn half_open(addr: std::net::SocketAddr) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    // A handshake record header announcing 512 bytes, and three of them.
    tcp.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01])
        .await
        .expect("write");
    tcp
}

#[tokio::test]
async fn a_half_open_handshake_does_not_block_other_clients_and_is_closed_after_its_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, ca, _tls) = tls_server(dir.path(), |o| ServeOptions {
        tls_handshake_timeout: Duration::from_millis(200),
        ..o
    })
    .await;
    let mut stalled = half_open(server.addr).await;
    for alpn in [H2, H1] {
        let mut client = TlsClient::connect(server.addr, &ca.cert_der, alpn).await;
        assert_eq!(client.metadata(TOKEN, METADATA_V3).await.status, 200);
    }
    // The server gives up on it: end of stream (or a reset), never a hang.
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(WAIT_MAX, stalled.read(&mut buf))
        .await
        .expect("the server closes a stalled handshake");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    server.stop().await;
}

#[tokio::test]
async fn at_the_connection_limit_a_stalled_handshake_gives_its_slot_to_a_new_client() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The handshake timeout (the default, 10 s) is not what frees the slot here.
    let (server, ca, _tls) = tls_server(dir.path(), |o| ServeOptions {
        connections_max: 1,
        ..o
    })
    .await;
    let mut stalled = half_open(server.addr).await;
    wait_until("the stalled connection holds the slot", || {
        server.stats.open_connections() == 1
    })
    .await;
    let mut client = TlsClient::connect(server.addr, &ca.cert_der, H2).await;
    assert_eq!(client.metadata(TOKEN, METADATA_V3).await.status, 200);
    let mut buf = [0u8; 64];
    let read = stalled.read(&mut buf).await;
    assert!(matches!(read, Ok(0) | Err(_)), "closed: {read:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_reload_reaches_new_connections_while_open_ones_keep_working() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, ca, tls) = tls_server(dir.path(), |o| o).await;
    let mut old = TlsClient::connect(server.addr, &ca.cert_der, H2).await;
    let mut old_h1 = TlsClient::connect(server.addr, &ca.cert_der, H1).await;
    let first = old.server_cert.clone();

    let second = ca.server_cert("second");
    second.write(dir.path());
    tls.reload().expect("the new files load");
    let mut new = TlsClient::connect(server.addr, &ca.cert_der, H2).await;
    assert_eq!(
        new.server_cert, second.cert_der,
        "a new connection sees the new certificate"
    );
    assert_ne!(new.server_cert, first);
    assert_eq!(new.metadata(TOKEN, METADATA_V3).await.status, 200);
    write_and_read(&mut old, "old-h2").await;
    write_and_read(&mut old_h1, "old-h1").await;
    assert_eq!(old.server_cert, first, "open connections keep theirs");

    // A failed reload keeps the certificate in use.
    std::fs::write(dir.path().join("cert.pem"), "not a certificate").expect("write");
    let err = tls.reload().expect_err("garbage does not load");
    assert!(err.to_string().contains("cert.pem"), "{err}");
    let after = TlsClient::connect(server.addr, &ca.cert_der, H1).await;
    assert_eq!(after.server_cert, second.cert_der, "the old config stays");
    server.stop().await;
}

#[tokio::test]
async fn certificates_from_parts_can_be_replaced_but_not_reloaded() {
    let ca = TestCa::new("parts CA");
    let (a, b) = (ca.server_cert("a"), ca.server_cert("b"));
    let tls = Tls::from_parts(vec![a.cert_der.clone()], a.key()).expect("good parts");
    assert!(tls.files().is_none());
    assert!(matches!(tls.reload(), Err(TlsError::NoFiles)));
    let server = TestServer::in_memory()
        .options({
            let tls = tls.clone();
            move |o| ServeOptions {
                tls: Some(tls),
                ..o
            }
        })
        .spawn()
        .await;
    let first = TlsClient::connect(server.addr, &ca.cert_der, H2).await;
    assert_eq!(first.server_cert, a.cert_der);
    let mismatch = tls.replace(vec![b.cert_der.clone()], a.key());
    assert!(
        mismatch
            .expect_err("a key that is not the certificate's")
            .to_string()
            .contains("does not match"),
    );
    tls.replace(vec![b.cert_der.clone()], b.key())
        .expect("b's parts");
    let second = TlsClient::connect(server.addr, &ca.cert_der, H2).await;
    assert_eq!(second.server_cert, b.cert_der);
    server.stop().await;
}

#[test]
fn unusable_certificate_or_key_files_give_errors_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("errors CA");
    let (a, b) = (ca.server_cert("a"), ca.server_cert("b"));
    let path = |name: &str| dir.path().join(name);
    let write = |name: &str, text: &str| std::fs::write(path(name), text).expect("write");
    write("a.crt", &a.cert_pem);
    write("a.key", &a.key_pem);
    write("b.key", &b.key_pem);
    write("empty", "");
    write(
        "garbage",
        "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n",
    );
    let err = |cert: &str, key: &str| {
        Tls::from_pem_files(path(cert), path(key))
            .expect_err("unusable")
            .to_string()
    };
    Tls::from_pem_files(path("a.crt"), path("a.key")).expect("the good pair loads");

    let missing = err("missing.crt", "a.key");
    assert!(
        missing.contains("cannot read the TLS certificate") && missing.contains("missing.crt"),
        "{missing}"
    );
    let missing_key = err("a.crt", "missing.key");
    assert!(
        missing_key.contains("cannot read the TLS private key")
            && missing_key.contains("missing.key"),
        "{missing_key}"
    );
    let no_cert = err("empty", "a.key");
    assert!(no_cert.contains("no `BEGIN CERTIFICATE`"), "{no_cert}");
    let bad_pem = err("garbage", "a.key");
    assert!(
        bad_pem.contains("garbage") && bad_pem.contains("not valid PEM"),
        "{bad_pem}"
    );
    let cert_as_key = err("a.crt", "a.crt");
    assert!(
        cert_as_key.contains("holds no private key"),
        "{cert_as_key}"
    );
    let mismatch = err("a.crt", "b.key");
    assert!(
        mismatch.contains("the private key does not match the certificate"),
        "{mismatch}"
    );
    let dir_as_cert = err(".", "a.key");
    assert!(dir_as_cert.contains("cannot read"), "{dir_as_cert}");
}
