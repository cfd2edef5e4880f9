//! TLS for [`serve_with`](crate::serve_with): a certificate chain and its private key, held
//! as a rustls configuration that can be swapped while the server runs.
//!
//! [`Tls`] offers ALPN `h2` and `http/1.1` (Deno speaks HTTP/2 over TLS, Node's `@deno/kv`
//! HTTP/1.1), TLS 1.3 and 1.2, on rustls with the `ring` provider. [`Tls::reload`] re-reads
//! the PEM files and swaps the configuration in one step: new connections get the new
//! certificate, connections already open keep the one they shook hands with. A reload that
//! fails changes nothing.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::conn::QuickAck;

/// The ALPN protocols offered, most preferred first.
const ALPN_PROTOCOLS: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// A server certificate chain with its key, for serving KV Connect over TLS
/// ([`ServeOptions::tls`](crate::ServeOptions::tls)).
///
/// Clones share one configuration: a [`Tls::reload`] through any clone (the one a signal
/// handler keeps, say) is seen by the server that holds another.
///
/// # Examples
/// ```no_run
/// use tuplekv_server::{ServeOptions, Tls};
///
/// # fn run() -> Result<(), tuplekv_server::TlsError> {
/// let tls = Tls::from_pem_files("cert.pem", "key.pem")?;
/// let options = ServeOptions {
///     tls: Some(tls.clone()),
///     ..ServeOptions::default()
/// };
/// // Later, after the files were replaced (on SIGHUP, say):
/// tls.reload()?;
/// # let _ = options;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Tls {
    inner: Arc<Inner>,
}

/// What every clone of a [`Tls`] shares.
struct Inner {
    /// Where the certificate and key were read from; `None` when built from parts.
    files: Option<(PathBuf, PathBuf)>,
    /// The configuration new connections shake hands with.
    current: RwLock<Arc<rustls::ServerConfig>>,
}

impl Tls {
    /// Reads a PEM certificate chain (the server's certificate first, then any
    /// intermediates) and a PEM private key (PKCS#8, PKCS#1 or SEC1).
    ///
    /// # Errors
    /// When a file cannot be read, holds no certificate or no key, is not valid PEM, or the
    /// key is not the certificate's.
    pub fn from_pem_files(cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<Tls, TlsError> {
        let (cert, key) = (cert.as_ref().to_path_buf(), key.as_ref().to_path_buf());
        let config = config_from_files(&cert, &key)?;
        Ok(Tls::with(Some((cert, key)), config))
    }

    /// A certificate chain (the server's certificate first) and its private key, already
    /// decoded. [`Tls::reload`] has no files to re-read; [`Tls::replace`] swaps the parts.
    ///
    /// # Errors
    /// When the chain is empty, the key is not usable, or it is not the certificate's.
    pub fn from_parts(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<Tls, TlsError> {
        Ok(Tls::with(None, config_from_parts(chain, key)?))
    }

    fn with(files: Option<(PathBuf, PathBuf)>, config: rustls::ServerConfig) -> Tls {
        Tls {
            inner: Arc::new(Inner {
                files,
                current: RwLock::new(Arc::new(config)),
            }),
        }
    }

    /// Re-reads the PEM files this was built from and, if they hold a good certificate and
    /// key, makes them the ones new connections get (open connections are left alone).
    ///
    /// # Errors
    /// As [`Tls::from_pem_files`], and [`TlsError::NoFiles`] for one built from parts; on
    /// any error the configuration in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let (cert, key) = self.inner.files.as_ref().ok_or(TlsError::NoFiles)?;
        let config = config_from_files(cert, key)?;
        self.swap(config);
        Ok(())
    }

    /// Makes `chain` and `key` the ones new connections get (open connections are left
    /// alone).
    ///
    /// # Errors
    /// As [`Tls::from_parts`]; on an error the configuration in use stays.
    pub fn replace(
        &self,
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<(), TlsError> {
        self.swap(config_from_parts(chain, key)?);
        Ok(())
    }

    /// The certificate and key files, if this was built from them.
    pub fn files(&self) -> Option<(&Path, &Path)> {
        self.inner
            .files
            .as_ref()
            .map(|(c, k)| (c.as_path(), k.as_path()))
    }

    fn swap(&self, config: rustls::ServerConfig) {
        // A poisoned lock still holds a whole `Arc`: the write replaces it.
        *self
            .inner
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
    }

    /// The acceptor for a new connection: the configuration in use now.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        let config = Arc::clone(
            &self
                .inner
                .current
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        );
        TlsAcceptor::from(config)
    }
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("Tls")
            .field("files", &self.inner.files)
            .finish_non_exhaustive()
    }
}

/// Put in the extensions of every request that came over TLS, so that a reply that names
/// the server's URL (the version-1 metadata reply) says `https://`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OverTls;

/// Why a certificate or key could not be used.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    Read {
        /// What the file was to hold: `certificate` or `private key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A file is not valid PEM, or holds no item of the kind needed.
    Pem {
        /// What the file was to hold: `certificate` or `private key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The chain is empty.
    NoCertificate,
    /// rustls refused the certificate and key: a key that is not the certificate's, an
    /// unsupported key type, a certificate that cannot be parsed.
    Refused(String),
    /// [`Tls::reload`] of one built from parts: there are no files to re-read.
    NoFiles,
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Read { what, path, source } => {
                write!(f, "cannot read the TLS {what} {}: {source}", path.display())
            }
            TlsError::Pem { what, path, reason } => {
                write!(f, "the TLS {what} file {}: {reason}", path.display())
            }
            TlsError::NoCertificate => f.write_str("the TLS certificate chain is empty"),
            TlsError::Refused(reason) => {
                write!(f, "the TLS certificate and key cannot be used: {reason}")
            }
            TlsError::NoFiles => f.write_str("this TLS configuration has no files to re-read"),
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsError::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The configuration from the PEM files at `cert` and `key`.
fn config_from_files(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, TlsError> {
    const CERT: &str = "certificate";
    const KEY: &str = "private key";
    let read = |what, path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            what,
            path: path.to_path_buf(),
            source,
        })
    };
    let pem_error = |what, path: &Path, reason: String| TlsError::Pem {
        what,
        path: path.to_path_buf(),
        reason,
    };
    let cert_pem = read(CERT, cert)?;
    let key_pem = read(KEY, key)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(CERT, cert, pem_reason(&e)))?;
    if chain.is_empty() {
        return Err(pem_error(
            CERT,
            cert,
            "holds no `BEGIN CERTIFICATE` section".into(),
        ));
    }
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        pem::Error::NoItemsFound => pem_error(
            KEY,
            key,
            "holds no private key (`BEGIN PRIVATE KEY`, `BEGIN RSA PRIVATE KEY` or \
             `BEGIN EC PRIVATE KEY` section)"
                .into(),
        ),
        other => pem_error(KEY, key, pem_reason(&other)),
    })?;
    config_from_parts(chain, key_der)
}

/// What is wrong with a PEM file, in words.
fn pem_reason(e: &pem::Error) -> String {
    match e {
        pem::Error::NoItemsFound => "holds no PEM section of the kind needed".into(),
        other => format!("not valid PEM ({other:?})"),
    }
}

/// The server configuration: ring, TLS 1.3 and 1.2, no client certificates, ALPN `h2` then
/// `http/1.1`, and `chain` with `key` (checked to match).
fn config_from_parts(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<rustls::ServerConfig, TlsError> {
    if chain.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Refused(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Refused(refusal(&e)))?;
    config.alpn_protocols = ALPN_PROTOCOLS.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// rustls's refusal, in words.
fn refusal(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
            "the private key does not match the certificate".into()
        }
        other => other.to_string(),
    }
}

/// A served connection: plain TCP, or TLS over it. Both keep [`QuickAck`] underneath.
#[derive(Debug)]
pub(crate) enum Stream {
    /// HTTP/1.1 or h2c straight on TCP.
    Plain(QuickAck),
    /// HTTP/1.1 or HTTP/2 inside TLS (boxed: the TLS state is large).
    Tls(Box<tokio_rustls::server::TlsStream<QuickAck>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
