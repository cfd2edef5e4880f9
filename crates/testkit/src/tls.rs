//! Shared by the TLS tests (the server's and the CLI's): a test CA with a server certificate
//! for `localhost` and `127.0.0.1` made by rcgen, and a hyper client over tokio-rustls that
//! trusts only that CA and offers the ALPN protocol it is told to.
#![allow(clippy::unwrap_used, reason = "test support fails loudly")]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName,
};
use tokio_rustls::rustls::{self, RootCertStore};
use tokio_rustls::{TlsConnector, client::TlsStream};

use crate::kv_connect::Sender;

/// ALPN for HTTP/2.
pub const H2: &[u8] = b"h2";
/// ALPN for HTTP/1.1.
pub const H1: &[u8] = b"http/1.1";

/// A CA and the server certificates it signed.
pub struct TestCa {
    /// The CA certificate in PEM, for a client's trust store file.
    pub cert_pem: String,
    /// The CA certificate in DER.
    pub cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

/// A server certificate with its key, signed by a [`TestCa`].
pub struct ServerCert {
    /// The server certificate in PEM.
    pub cert_pem: String,
    /// The server certificate in DER.
    pub cert_der: CertificateDer<'static>,
    /// The server's private key in PEM.
    pub key_pem: String,
    /// The server's private key in DER (PKCS #8).
    pub key_der: Vec<u8>,
}

impl ServerCert {
    /// The server's private key, for rustls.
    pub fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }

    /// Writes `cert.pem` and `key.pem` into `dir`; their paths.
    pub fn write(&self, dir: &Path) -> (PathBuf, PathBuf) {
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert, &self.cert_pem).expect("write cert.pem");
        std::fs::write(&key, &self.key_pem).expect("write key.pem");
        (cert, key)
    }
}

impl TestCa {
    /// A new CA named `name`, with a server certificate for `localhost` and `127.0.0.1`.
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA certificate");
        TestCa {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate for `localhost` and `127.0.0.1`, its common name `name`.
    pub fn server_cert(&self, name: &str) -> ServerCert {
        let key = KeyPair::generate().expect("server key");
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("server params");
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("server certificate");
        ServerCert {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            key_pem: key.serialize_pem(),
            key_der: key.serialize_der(),
        }
    }

    /// Writes `ca.pem` into `dir`; its path.
    pub fn write(&self, dir: &Path) -> PathBuf {
        let path = dir.join("ca.pem");
        std::fs::write(&path, &self.cert_pem).expect("write ca.pem");
        path
    }
}

/// A client configuration trusting only `ca`, offering `alpn`, TLS 1.3 and 1.2.
pub fn client_config(ca: &CertificateDer<'static>, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    client_config_for(ca, alpn, rustls::ALL_VERSIONS)
}

/// A client configuration trusting only `ca`, offering `alpn` and the TLS `versions`.
pub fn client_config_for(
    ca: &CertificateDer<'static>,
    alpn: &[u8],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone()).expect("a CA certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

/// A TLS connection to `addr` checked against `ca` for the name `localhost`.
pub async fn connect(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    alpn: &[u8],
) -> std::io::Result<TlsStream<TcpStream>> {
    connect_with(addr, client_config(ca, alpn)).await
}

/// A TLS connection to `addr` with `config`, for the name `localhost`.
pub async fn connect_with(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").expect("a DNS name");
    TlsConnector::from(config).connect(name, tcp).await
}

/// One HTTP connection over TLS, HTTP/2 or HTTP/1.1 as ALPN chose.
pub struct TlsClient {
    sender: Sender,
    /// The server this client talks to.
    pub addr: SocketAddr,
    /// The protocol ALPN settled on.
    pub alpn: Vec<u8>,
    /// The certificate the server showed.
    pub server_cert: CertificateDer<'static>,
}

/// A reply with its whole body.
pub struct TlsReply {
    /// The reply's HTTP status.
    pub status: StatusCode,
    /// The HTTP version the reply came over (what ALPN chose).
    pub version: hyper::Version,
    /// The reply's body.
    pub body: Bytes,
}

impl TlsReply {
    /// The body parsed as JSON (panics if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("json body")
    }
}

impl TlsClient {
    /// Connects, offering only `alpn` (`H2` or `H1`), and speaks what was agreed.
    pub async fn connect(addr: SocketAddr, ca: &CertificateDer<'static>, alpn: &[u8]) -> TlsClient {
        let tls = connect(addr, ca, alpn).await.expect("TLS handshake");
        let (_, session) = tls.get_ref();
        let agreed = session
            .alpn_protocol()
            .expect("an ALPN protocol agreed")
            .to_vec();
        let server_cert = session
            .peer_certificates()
            .and_then(|c| c.first())
            .expect("a server certificate")
            .clone()
            .into_owned();
        let sender = Sender::handshake(TokioIo::new(tls), agreed == H2).await;
        TlsClient {
            sender,
            addr,
            alpn: agreed,
            server_cert,
        }
    }

    /// Sends `req` and reads the whole reply; `Err` when the connection failed.
    pub async fn try_call(&mut self, req: Request<Full<Bytes>>) -> hyper::Result<TlsReply> {
        let res = self.sender.send(req).await?;
        let version = res.version();
        let status = res.status();
        let body = res.into_body().collect().await?.to_bytes();
        Ok(TlsReply {
            status,
            version,
            body,
        })
    }

    /// `POST /` with `body` and the bearer `token`.
    pub async fn metadata(&mut self, token: &str, body: &str) -> TlsReply {
        let req = Request::post(format!("https://localhost:{}/", self.addr.port()))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_owned())))
            .expect("request");
        self.try_call(req).await.expect("metadata reply")
    }

    /// `POST /v2/METHOD` with Deno's headers and the bearer `token`.
    pub async fn data(&mut self, token: &str, method: &str, body: Vec<u8>) -> TlsReply {
        let req = Request::post(format!(
            "https://localhost:{}/v2/{method}",
            self.addr.port()
        ))
        .header("authorization", format!("Bearer {token}"))
        .header("x-denokv-version", "3")
        .header(
            "x-denokv-database-id",
            "00000000-0000-0000-0000-000000000000",
        )
        .header("user-agent", "tuplekv-test")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
        self.try_call(req).await.expect("data reply")
    }
}
