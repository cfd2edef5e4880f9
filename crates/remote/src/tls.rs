//! `https://`: the rustls client configuration (Mozilla's roots plus the CA certificates of
//! [`RemoteOptions::ca_certs`](crate::RemoteOptions::ca_certs), ALPN `h2`, the `ring`
//! provider) and the connector that shakes hands over the TCP stream hyper-util's
//! [`HttpConnector`] makes. The plain `http://` path never comes here.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, CertificateError, ClientConfig, RootCertStore};
use tower_service::Service;

use crate::ConnectError;

/// The one ALPN protocol offered: KV Connect clients speak HTTP/2.
const H2: &[u8] = b"h2";

/// The client configuration for `https://`: Mozilla's roots and the certificates in each
/// of `ca_certs` (PEM files) trusted, TLS 1.3 and 1.2, ALPN `h2`.
///
/// # Errors
/// [`ConnectError::CaCerts`] naming the first file that cannot be read, is not PEM, holds no
/// certificate, or holds one that is not a usable CA certificate.
pub(crate) fn client_config(
    url: &str,
    ca_certs: &[PathBuf],
) -> Result<Arc<ClientConfig>, ConnectError> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for path in ca_certs {
        add_pem_file(&mut roots, path).map_err(|reason| ConnectError::CaCerts {
            path: path.clone(),
            reason,
        })?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConnectError::Tls {
            url: url.to_owned(),
            reason: format!("the TLS configuration cannot be built: {e}"),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![H2.to_vec()];
    Ok(Arc::new(config))
}

/// Adds every certificate in the PEM file at `path` to `roots`; on an error, why.
fn add_pem_file(roots: &mut RootCertStore, path: &Path) -> Result<(), String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read it: {}", pem_error(&e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("it is not valid PEM: {}", pem_error(&e)))?;
    if certs.is_empty() {
        return Err("it holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
    }
    for (i, cert) in certs.into_iter().enumerate() {
        roots.add(cert).map_err(|e| {
            format!(
                "its certificate number {} is not a usable CA certificate: {e}",
                i + 1
            )
        })?;
    }
    Ok(())
}

/// A PEM error, with the I/O error inside it spelled out.
fn pem_error(e: &rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    }
}

/// Why an `https://` connection could not be made, as the connector's error.
#[derive(Debug)]
pub(crate) struct TlsFailure {
    /// What went wrong, for people.
    pub(crate) reason: String,
    /// Whether retrying cannot help (an untrusted certificate, a name mismatch, a server
    /// that does not speak TLS or HTTP/2), as opposed to a stalled or cut handshake.
    pub(crate) definite: bool,
}

impl std::fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for TlsFailure {}

impl TlsFailure {
    fn definite(reason: String) -> Box<dyn std::error::Error + Send + Sync> {
        Box::new(TlsFailure {
            reason,
            definite: true,
        })
    }

    fn transient(reason: String) -> Box<dyn std::error::Error + Send + Sync> {
        Box::new(TlsFailure {
            reason,
            definite: false,
        })
    }
}

/// hyper-util's TCP connector with a TLS handshake on top, for `https://` destinations.
#[derive(Clone)]
pub(crate) struct HttpsConnector {
    /// Makes the TCP connection (`enforce_http` off, so it takes `https://` URIs).
    http: HttpConnector,
    tls: TlsConnector,
    /// Longest wait for the handshake once the TCP connection is made.
    handshake_timeout: Duration,
}

impl HttpsConnector {
    /// `http` makes the TCP connections (with its timeouts and options); each is then
    /// wrapped in TLS with `config`, within `handshake_timeout`.
    pub(crate) fn new(
        mut http: HttpConnector,
        config: Arc<ClientConfig>,
        handshake_timeout: Duration,
    ) -> Self {
        http.enforce_http(false);
        HttpsConnector {
            http,
            tls: TlsConnector::from(config),
            handshake_timeout,
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Service<Uri> for HttpsConnector {
    type Response = TokioIo<TlsConn>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        // `HttpConnector` is always ready (its `poll_ready` does nothing): a clone may be
        // called straight away.
        let mut http = self.http.clone();
        let tls = self.tls.clone();
        let handshake_timeout = self.handshake_timeout;
        Box::pin(async move {
            if dst.scheme_str() != Some("https") {
                return Err(TlsFailure::definite(format!(
                    "{dst} is not an https:// URL: this store sends its token over TLS only"
                )));
            }
            let host = dst
                .host()
                .ok_or_else(|| TlsFailure::definite(format!("{dst} has no host")))?;
            // An IPv6 address comes bracketed; the certificate names it bare.
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let name = ServerName::try_from(host.clone()).map_err(|e| {
                TlsFailure::definite(format!(
                    "{host:?} is not a name a certificate can carry: {e}"
                ))
            })?;
            let tcp = http.call(dst).await?.into_inner();
            let stream = tokio::time::timeout(handshake_timeout, tls.connect(name, tcp))
                .await
                .map_err(|_| {
                    TlsFailure::transient(format!(
                        "no TLS handshake within {} ms",
                        handshake_timeout.as_millis()
                    ))
                })?
                .map_err(|e| handshake_failure(&e, &host))?;
            Ok(TokioIo::new(TlsConn(stream)))
        })
    }
}

/// What a failed handshake means, and whether retrying could help.
fn handshake_failure(e: &io::Error, host: &str) -> BoxError {
    let Some(tls) = e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) else {
        // Cut off mid-handshake (a server restarting, a proxy dropping it): try again.
        return TlsFailure::transient(format!("the TLS handshake failed: {e}"));
    };
    let reason = match tls {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
            "the server's certificate is not signed by a trusted CA ({tls}); to trust a \
             private CA, name its PEM file in RemoteOptions::ca_certs (or DENO_CERT, with \
             RemoteOptions::with_deno_cert_env)"
        ),
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!("the server's certificate is not valid for the name {host:?} ({tls})"),
        rustls::Error::InvalidCertificate(_) => {
            format!("the server's certificate is not accepted ({tls})")
        }
        rustls::Error::InvalidMessage(_)
        | rustls::Error::InappropriateMessage { .. }
        | rustls::Error::InappropriateHandshakeMessage { .. } => {
            format!("the server did not answer in TLS (is it a plain http:// server?): {tls}")
        }
        rustls::Error::NoApplicationProtocol
        | rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol) => {
            format!("the server does not offer HTTP/2 over TLS (ALPN h2): {tls}")
        }
        rustls::Error::AlertReceived(_) => format!("the server refused the handshake: {tls}"),
        _ => format!("the TLS handshake failed: {tls}"),
    };
    TlsFailure::definite(reason)
}

/// A TLS connection as hyper-util's client takes it: the stream, and whether ALPN agreed
/// on HTTP/2 (a server that agreed on nothing is spoken to in HTTP/2 all the same, as the
/// client speaks nothing else).
pub(crate) struct TlsConn(TlsStream<TcpStream>);

impl Connection for TlsConn {
    fn connected(&self) -> Connected {
        let connected = Connected::new();
        if self.0.get_ref().1.alpn_protocol() == Some(H2) {
            connected.negotiated_h2()
        } else {
            connected
        }
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}
