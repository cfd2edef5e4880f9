//! [`RemoteStore`]: a tuplekv [`Store`] on a server reached over KV Connect (the protocol of
//! `Deno.openKv("http://…")` and `Deno.openKv("https://…")`), so typed collections
//! (`tuplekv-index`) and code sequences (`tuplekv-sequence`) run unchanged on many app
//! servers sharing one database.
//!
//! ```no_run
//! use tuplekv_engine::{Store, key};
//! use tuplekv_remote::RemoteStore;
//!
//! let store = RemoteStore::connect("http://127.0.0.1:4512", "a-long-secret-token")?;
//! store.atomic().set(&key!["greeting"], 1u64).commit()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What each server offers
//! Plain KV Connect reads the latest state per request and checks single keys. Against a
//! tuplekv server the client and server agree on **tuplekv's extension** in the metadata
//! exchange (Deno and Node clients never see it; see `tuplekv_wire`), which adds what a
//! [`Store`] needs beyond that:
//!
//! | operation | tuplekv server | plain KV Connect (denokv) |
//! |---|---|---|
//! | `get`, `get_many`, `get_latest_raw`, one `scan`/`list` batch | yes | yes |
//! | atomic writes with key checks, sum/min/max, expiry, versionstamped keys | yes | yes |
//! | transactions that read keys (the index write path, both sequence modes) | yes | yes |
//! | several reads of one `snapshot()` (lists past one batch, `verify`) | yes | [`Error::Unsupported`] |
//! | transactions that list (range checks) | yes | [`Error::Unsupported`] at commit |
//! | numbers assigned at commit (`AtomicWrite::numbering`) | yes | [`Error::Unsupported`] at commit |
//! | watch | yes | yes |
//!
//! Without snapshots, a transaction reads the latest state on each read; its commit checks
//! every key it read, so a committed transaction is still serializable, and a closure that
//! gives up after reading has its reads checked before its error is reported.
//!
//! # Network faults are not data faults
//! - Reads are retried on transport errors, timeouts and 503s, with backoff, for up to
//!   [`RemoteOptions::retry_for`]; then [`Error::Unavailable`].
//! - A write is resent only when it cannot have reached the server (the connection could not
//!   be made, a 503, a 401 before a token renewal). When the connection fails after the write
//!   was sent, whether it committed is unknown: [`Error::OutcomeUnknown`], never a resend.
//!   The layers above handle it: a sequence skips the block it was reserving, a collection
//!   re-reads the record.
//! - Each request has a timeout ([`RemoteOptions::request_timeout`], 10 s by default).
//! - A held snapshot the server dropped (idle, or a restart) gives [`Error::SnapshotExpired`];
//!   a transaction meeting it runs again.
//!
//! # How it talks
//! One HTTP/2 connection carries every request as its own stream, so concurrent threads
//! and tasks share it; it is re-established after a fault. For an `http://` URL it is h2c
//! (HTTP/2 in clear text, with prior knowledge); for `https://` it is HTTP/2 over TLS (see
//! below). The metadata exchange is renewed a minute before its token expires, and again
//! after a 401.
//!
//! The connection and every request run on a tokio runtime, **the store's runtime**:
//! - [`RemoteStore::connect`] / [`RemoteStore::connect_with`] start the store's own small
//!   runtime ([`RemoteOptions::io_threads`] threads), whatever thread they are called on;
//! - [`RemoteStore::connect_async`] runs the store on the runtime it is awaited on (the
//!   application's), starting no thread: the connection, its keep-alive and any watch are
//!   tasks of that runtime.
//!
//! Either way the last handle (with the store's snapshots, watches and futures, which hold
//! one) stops what the store spawned: its own runtime is shut down, or its tasks on the
//! caller's runtime are aborted. Retries and their backoff wait on tokio timers.
//!
//! # Async use
//! Every read and commit of the [`Store`] trait has a future that waits without holding a
//! thread: [`Store::get_raw_async`], [`Store::scan_async`],
//! [`Store::snapshot_versionstamp_async`], [`Store::get_latest_raw_async`] and
//! [`Store::commit_async`], so the engine's async operations ([`Store::get_async`],
//! [`Store::list_async`], [`Store::transaction_async`], `tuplekv_engine::replay::run`) never
//! block the task that awaits them. Each future is `Send + 'static`: awaited on the store's
//! runtime it runs in place; awaited anywhere else (another runtime, another executor) it
//! runs as a task of the store's runtime and its caller waits for the answer. A snapshot's
//! first read fixes its state whether it is async or blocking, and concurrent first reads
//! wait for one of them, so every read of one snapshot sees one state.
//!
//! ```no_run
//! use tuplekv_engine::{Error, Store, key};
//! use tuplekv_remote::{RemoteOptions, RemoteStore};
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let options = RemoteOptions::default();
//!     let store = RemoteStore::connect_async("http://127.0.0.1:4512", "a-long-secret-token", options)
//!         .await?;
//!     // The same closure a blocking transaction takes; it runs again if it must.
//!     let visits = store
//!         .transaction_async(|tx| {
//!             let n = tx.get(&key!["visits"])?.and_then(|e| e.value.as_u64()).unwrap_or(0);
//!             tx.set(&key!["visits"], n + 1);
//!             Ok::<_, Error>(n + 1)
//!         })
//!         .await?;
//!     println!("visit {visits}");
//!     Ok(())
//! }
//! ```
//!
//! The blocking methods wait for the store's runtime, so where they are called decides
//! what they do:
//! - **on a thread outside the store's runtime** (no runtime, another runtime, a plain
//!   thread): they wait on a channel for the answer, as with the store's own runtime;
//! - **on a worker of the store's runtime when it is multi-thread**: they wait inside
//!   [`tokio::task::block_in_place`], which hands the worker's other tasks to another
//!   thread first, so the connection keeps running;
//! - **on the thread that drives the store's runtime when it is current-thread** (its
//!   `block_on` and its tasks): waiting there would wait for the thread itself, so they
//!   fail at once with [`Error::Unsupported`], doing nothing. Use the async methods there,
//!   or call the blocking ones from [`tokio::task::spawn_blocking`] (that runtime's
//!   blocking threads wait on a channel, as above). The store knows that thread as the one
//!   it has seen running its futures (from `connect_async` on).
//!
//! [`RemoteWatch::next_blocking`] always waits on this thread: call it outside the store's
//! runtime, and [`KeyWatch::next`](tuplekv_engine::KeyWatch::next) on it.
//!
//! # TLS
//! An `https://HOST:PORT` URL (`tuplekv serve --tls-cert … --tls-key …`, or a TLS proxy in
//! front of any KV Connect server) is reached over TLS 1.3 or 1.2 (rustls, `ring`
//! provider), offering ALPN `h2`. The server's certificate must be valid for `HOST` (a DNS
//! name or an IP address, as in the URL) and signed by a trusted CA: Mozilla's roots (those
//! of the `webpki-roots` crate, which Deno trusts by default too), plus the PEM files of
//! [`RemoteOptions::ca_certs`] for a private CA. [`RemoteOptions::with_deno_cert_env`] adds
//! the file Deno's `DENO_CERT` variable names; the library reads no environment variable
//! unless asked to.
//!
//! ```no_run
//! use tuplekv_remote::{RemoteOptions, RemoteStore};
//!
//! let options = RemoteOptions {
//!     ca_certs: vec!["/etc/tuplekv/ca.pem".into()],
//!     ..RemoteOptions::default()
//! };
//! let store = RemoteStore::connect_with(
//!     "https://kv.internal:4512",
//!     "a-long-secret-token",
//!     options,
//! )?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What retrying cannot fix fails at once, naming the cause: a CA file that cannot be used
//! ([`ConnectError::CaCerts`]), a certificate that is not trusted or not valid for the host,
//! or a server that does not speak TLS ([`ConnectError::Tls`] at connect; after it,
//! [`Error::Unavailable`] with the reason, the request never sent). A handshake cut off or
//! stalled is retried like a refused connection. The endpoint the metadata exchange names
//! must have the URL's scheme: an `https://` store never follows the server to `http://`.

mod codec;
mod reason;
mod runtime;
mod snapshot;
mod tls;
mod transport;
mod watch;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::Uri;
use tuplekv_engine::limits::{
    GET_MANY_KEYS_MAX, KEY_SIZE_MAX_READ, KEY_SIZE_MAX_WRITE, WATCH_KEYS_MAX,
};
use tuplekv_engine::{AtomicWrite, CommitResult, Entry, Error, Key, KeyBytes, Store, Versionstamp};

pub use snapshot::RemoteSnapshot;
pub use watch::{RemoteWatch, WATCH_SILENCE_MAX};

use crate::codec::{decode_write_output, encode_write};
use crate::runtime::{Caller, Spawner, Tasks, blocking_on_driver};
use crate::snapshot::{Purpose, get_many_raw};
use crate::transport::{Kind, SessionError, Transport};

/// What an operation that needs tuplekv's extension names as missing.
pub const EXTENSION_NEEDED: &str =
    "tuplekv's KV Connect extension (tuplekv.snapshots.v1), which this server does not speak";

/// What a numbered commit names as missing from a server that speaks tuplekv's extension but
/// not its numberings (an older tuplekv server).
pub const NUMBERING_NEEDED: &str = "tuplekv's KV Connect extension for numbered commits \
    (tuplekv.numbering.v1), which this server does not speak";

/// How a [`RemoteStore`] connects and retries.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Longest wait for one request's answer (and its body). A write that times out has an
    /// unknown outcome. Default [`REQUEST_TIMEOUT_DEFAULT`].
    pub request_timeout: Duration,
    /// Longest wait for a TCP connection, and (for `https://`) again for its TLS handshake.
    /// Default [`CONNECT_TIMEOUT_DEFAULT`].
    pub connect_timeout: Duration,
    /// How long a request that did not reach the store is retried before
    /// [`Error::Unavailable`] (a server restart takes about a second); the metadata exchange
    /// a request may need first has a budget of its own. Default [`RETRY_FOR_DEFAULT`], 5 s.
    ///
    /// During an outage every request waits this long (plus up to one
    /// [`connect_timeout`](Self::connect_timeout) or [`request_timeout`](Self::request_timeout)
    /// for its last attempt) before it fails, so choose it from what waits on the request:
    /// - a service answering HTTP: below its own deadline, less the time the handler needs to
    ///   answer 503 (a load balancer that gives up on a request after 10 s, or a client that
    ///   does, gets nothing useful from a store that retries for 30 s). The default, 5 s, rides
    ///   out a server restart and a brief network fault, and fails fast enough to answer
    ///   within the usual proxy and client timeouts;
    /// - a readiness probe that reads the store: give it a store of its own whose
    ///   `retry_for` is below the probe's timeout, so the probe fails instead of timing out;
    /// - a batch job or a worker with no one waiting: longer (a minute) waits out a failover
    ///   instead of failing the job.
    pub retry_for: Duration,
    /// How often an idle connection is pinged, to find a dead server. Default
    /// [`KEEP_ALIVE_INTERVAL_DEFAULT`].
    pub keep_alive_interval: Duration,
    /// Threads of the client's own runtime (at most [`IO_THREADS_MAX`]); unused by
    /// [`RemoteStore::connect_async`], which runs on the caller's. Default
    /// [`IO_THREADS_DEFAULT`].
    pub io_threads: usize,
    /// PEM files of CA certificates an `https://` server's certificate may be signed by,
    /// trusted besides Mozilla's roots (which are always trusted; the ones the
    /// `webpki-roots` crate compiles in, as Deno trusts by default). Each file may hold
    /// several certificates. They are read when the store is opened: a file that cannot be
    /// read, is not PEM, or holds no usable certificate fails [`RemoteStore::connect_with`]
    /// with [`ConnectError::CaCerts`]. Not read for an `http://` URL. Default: none;
    /// [`RemoteOptions::with_deno_cert_env`] adds the file `DENO_CERT` names.
    pub ca_certs: Vec<PathBuf>,
}

/// [`RemoteOptions::request_timeout`]'s default.
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// [`RemoteOptions::connect_timeout`]'s default.
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(3);
/// [`RemoteOptions::retry_for`]'s default.
/// Five seconds: see that field for why, and how to choose another.
pub const RETRY_FOR_DEFAULT: Duration = Duration::from_secs(5);
/// [`RemoteOptions::keep_alive_interval`]'s default.
pub const KEEP_ALIVE_INTERVAL_DEFAULT: Duration = Duration::from_secs(10);
/// [`RemoteOptions::io_threads`]'s default.
pub const IO_THREADS_DEFAULT: usize = 2;
/// The most threads a client's runtime may have; more are lowered to it.
pub const IO_THREADS_MAX: usize = 64;
/// The least any of [`RemoteOptions`]' durations may be; shorter ones are raised to it.
pub const DURATION_MIN: Duration = Duration::from_millis(1);

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            request_timeout: REQUEST_TIMEOUT_DEFAULT,
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            retry_for: RETRY_FOR_DEFAULT,
            keep_alive_interval: KEEP_ALIVE_INTERVAL_DEFAULT,
            io_threads: IO_THREADS_DEFAULT,
            ca_certs: Vec::new(),
        }
    }
}

/// The environment variable Deno reads a PEM file of extra CA certificates from, which
/// [`RemoteOptions::with_deno_cert_env`] honours.
pub const DENO_CERT_ENV: &str = "DENO_CERT";

impl RemoteOptions {
    /// The options with every duration at least [`DURATION_MIN`] and the threads within
    /// `1..=IO_THREADS_MAX` (a zero timeout would fail every request; hyper refuses a zero
    /// keep-alive interval).
    fn bounded(self) -> Self {
        RemoteOptions {
            request_timeout: self.request_timeout.max(DURATION_MIN),
            connect_timeout: self.connect_timeout.max(DURATION_MIN),
            retry_for: self.retry_for.max(DURATION_MIN),
            keep_alive_interval: self.keep_alive_interval.max(DURATION_MIN),
            io_threads: self.io_threads.clamp(1, IO_THREADS_MAX),
            ca_certs: self.ca_certs,
        }
    }

    /// These options with the PEM file that the `DENO_CERT` environment variable names (if
    /// it is set and not empty) added to [`RemoteOptions::ca_certs`], so that a private CA
    /// trusted by Deno (`DENO_CERT=ca.pem deno run …`) is trusted here too. The library
    /// never reads the variable on its own: a program opts in by calling this, as the
    /// `tuplekv` command does. The file is read when the store is opened, with the errors
    /// [`RemoteOptions::ca_certs`] describes.
    ///
    /// ```no_run
    /// use tuplekv_remote::{RemoteOptions, RemoteStore};
    ///
    /// let options = RemoteOptions::default().with_deno_cert_env();
    /// let token = std::env::var("TUPLEKV_ACCESS_TOKEN")?;
    /// let store = RemoteStore::connect_with("https://kv.internal:4512", &token, options)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_deno_cert_env(mut self) -> Self {
        if let Some(path) = std::env::var_os(DENO_CERT_ENV).filter(|p| !p.is_empty()) {
            self.ca_certs.push(PathBuf::from(path));
        }
        self
    }
}

/// Why [`RemoteStore::connect`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL is not an `http://` or `https://` URL with a host.
    #[error("invalid server URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A file of [`RemoteOptions::ca_certs`] cannot be used: it cannot be read, is not PEM,
    /// holds no certificate, or holds one that is not a usable CA certificate. Nothing was
    /// sent.
    #[error("cannot use the CA certificates in {}: {reason}", path.display())]
    CaCerts {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The TLS handshake with an `https://` server failed in a way retrying cannot fix: its
    /// certificate is not signed by a trusted CA, is not valid for the URL's host, or the
    /// server does not speak TLS or HTTP/2 over it. Nothing was sent.
    #[error("TLS with {url} failed: {reason}")]
    Tls {
        /// The URL given.
        url: String,
        /// Why, naming the cause.
        reason: String,
    },
    /// The client's runtime could not start.
    #[error("could not start the client's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// [`RemoteStore::connect_async`] was polled outside a tokio runtime: it runs the store
    /// on the runtime it is awaited on.
    #[error("RemoteStore::connect_async must be awaited on a tokio runtime")]
    NoRuntime,
    /// The metadata exchange failed (the server is unreachable, or refused the token).
    #[error(transparent)]
    Store(#[from] Error),
}

/// Owns the runtime (the store's own, or its tasks on the caller's); dropped with the last
/// handle, snapshot, watch or future (each holds a handle). The tasks it spawns hold the
/// transport, never this.
struct Inner {
    /// The store's own runtime; `None` on the caller's ([`RemoteStore::connect_async`]).
    runtime: Option<tokio::runtime::Runtime>,
    /// The tasks spawned on the runtime, aborted when this goes.
    tasks: Arc<Tasks>,
    transport: Arc<Transport>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Never blocks, so the last handle may be dropped anywhere (even on a runtime).
        self.tasks.close();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// A [`Store`] on a KV Connect server: cheap to clone (clones share one connection).
#[derive(Clone)]
pub struct RemoteStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteStore")
            .field("url", &self.inner.transport.url())
            .finish_non_exhaustive()
    }
}

impl RemoteStore {
    /// Connects to the server at `url` (its metadata endpoint, e.g. `http://127.0.0.1:4512`,
    /// or `https://kv.example.com:4512` over TLS; see the crate docs) with `access_token`,
    /// with the default [`RemoteOptions`]. Runs the metadata exchange now, so a wrong URL or
    /// token, or a certificate that is not trusted, fails here.
    ///
    /// # Errors
    /// [`ConnectError`].
    pub fn connect(url: &str, access_token: &str) -> Result<RemoteStore, ConnectError> {
        RemoteStore::connect_with(url, access_token, RemoteOptions::default())
    }

    /// [`RemoteStore::connect`] with explicit options.
    ///
    /// # Errors
    /// [`ConnectError`].
    pub fn connect_with(
        url: &str,
        access_token: &str,
        options: RemoteOptions,
    ) -> Result<RemoteStore, ConnectError> {
        let (uri, options, tls) = RemoteStore::prepare(url, options)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(options.io_threads)
            .thread_name("tuplekv-remote")
            .enable_all()
            .build()
            .map_err(ConnectError::Runtime)?;
        let handle = runtime.handle().clone();
        let store = RemoteStore::on(Some(runtime), handle, uri, access_token, options, tls);
        let establish = store.establish(url);
        store.block_on(establish)??;
        Ok(store)
    }

    /// [`RemoteStore::connect_with`] on the runtime it is awaited on: the store starts no
    /// thread, its connection and every request run as tasks of that runtime (which must
    /// have IO and time enabled), and [`RemoteOptions::io_threads`] is unused. The tasks
    /// stop when the last handle (and the last snapshot, watch or future of the store) is
    /// dropped. See "Async use" in the crate docs for what blocking calls do on such a
    /// store.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use tuplekv_remote::{RemoteOptions, RemoteStore};
    ///
    /// let store =
    ///     RemoteStore::connect_async("http://127.0.0.1:4512", "a-long-secret-token", RemoteOptions::default())
    ///         .await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ConnectError`]; [`ConnectError::NoRuntime`] outside a tokio runtime.
    pub async fn connect_async(
        url: &str,
        access_token: &str,
        options: RemoteOptions,
    ) -> Result<RemoteStore, ConnectError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| ConnectError::NoRuntime)?;
        let (uri, options, tls) = RemoteStore::prepare(url, options)?;
        let store = RemoteStore::on(None, handle, uri, access_token, options, tls);
        store.inner.tasks.note_driver();
        store.run_async(store.establish(url)).await??;
        Ok(store)
    }

    /// The URL and options checked, with the TLS configuration an `https://` URL needs.
    #[allow(clippy::type_complexity)]
    fn prepare(
        url: &str,
        options: RemoteOptions,
    ) -> Result<
        (
            Uri,
            RemoteOptions,
            Option<Arc<tokio_rustls::rustls::ClientConfig>>,
        ),
        ConnectError,
    > {
        let invalid = |reason| ConnectError::InvalidUrl {
            url: url.to_owned(),
            reason,
        };
        let uri: Uri = url.parse().map_err(|_| invalid("not a URL"))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(invalid("the scheme must be http:// or https://")),
        };
        if uri.host().is_none() {
            return Err(invalid("no host"));
        }
        let options = options.bounded();
        let tls = if https {
            Some(tls::client_config(url, &options.ca_certs)?)
        } else {
            None
        };
        Ok((uri, options, tls))
    }

    /// A store whose work runs on `handle`'s runtime (`runtime`, when it is the store's own).
    fn on(
        runtime: Option<tokio::runtime::Runtime>,
        handle: tokio::runtime::Handle,
        uri: Uri,
        access_token: &str,
        options: RemoteOptions,
        tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
    ) -> RemoteStore {
        let tasks = Arc::new(Tasks::new(handle));
        let spawner = Spawner(Arc::clone(&tasks));
        let transport = Arc::new(Transport::new(
            uri,
            access_token.to_owned(),
            options,
            tls,
            spawner,
        ));
        RemoteStore {
            inner: Arc::new(Inner {
                runtime,
                tasks,
                transport,
            }),
        }
    }

    /// The first metadata exchange, a definite TLS failure told apart (as
    /// [`ConnectError::Tls`]).
    fn establish(
        &self,
        url: &str,
    ) -> impl Future<Output = Result<Result<(), ConnectError>, Error>> + Send + 'static {
        let transport = Arc::clone(&self.inner.transport);
        let url = url.to_owned();
        async move {
            match transport.establish().await {
                Ok(_) => Ok(Ok(())),
                Err(SessionError::Tls(reason)) => Ok(Err(ConnectError::Tls { url, reason })),
                Err(SessionError::Store(e)) => Err(e),
            }
        }
    }

    /// Whether the server speaks tuplekv's extension (as of the last metadata exchange).
    ///
    /// # Errors
    /// If the server cannot be reached for a metadata exchange.
    pub fn has_extension(&self) -> Result<bool, Error> {
        self.extension()
    }

    /// Runs `fut` on the client's runtime and waits for it on this thread.
    fn block_on<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T, Error>> + Send + 'static,
    ) -> Result<T, Error> {
        self.block_on_or(fut, || Error::unavailable("the client's runtime stopped"))
    }

    /// [`RemoteStore::block_on`] with the error to give if the task is lost before it
    /// answers (for a write: its outcome is unknown). Where the calling thread stands to the
    /// store's runtime decides how it waits (see "Async use" in the crate docs): in place
    /// on a multi-thread runtime's worker, not at all on the thread that drives its
    /// current-thread runtime, on a channel elsewhere.
    fn block_on_or<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T, Error>> + Send + 'static,
        lost: impl FnOnce() -> Error,
    ) -> Result<T, Error> {
        let wait = || {
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            let _ = self.inner.tasks.spawn(async move {
                let _ = tx.send(fut.await);
            });
            rx.recv().unwrap_or_else(|_| Err(lost()))
        };
        match self.inner.tasks.caller() {
            Caller::Driver => Err(blocking_on_driver()),
            Caller::MultiThread => tokio::task::block_in_place(wait),
            Caller::Outside | Caller::Beside => wait(),
        }
    }

    /// `fut` as a future that runs on the store's runtime and waits there without holding a
    /// thread: awaited in place when it is polled on that runtime, else spawned there.
    /// Holds the store while it runs.
    pub(crate) fn run_async<T, F>(
        &self,
        fut: F,
    ) -> impl Future<Output = Result<T, Error>> + Send + 'static + use<T, F>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Error>> + Send + 'static,
    {
        self.run_async_or(fut, || Error::unavailable("the client's runtime stopped"))
    }

    /// [`RemoteStore::run_async`] with the error to give if the task is lost before it
    /// answers.
    fn run_async_or<T, F, L>(
        &self,
        fut: F,
        lost: L,
    ) -> impl Future<Output = Result<T, Error>> + Send + 'static + use<T, F, L>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Error>> + Send + 'static,
        L: FnOnce() -> Error + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        async move {
            let out = match inner.tasks.caller() {
                Caller::Outside => inner
                    .tasks
                    .spawn_joined(fut)
                    .await
                    .unwrap_or_else(|| Err(lost())),
                Caller::Driver | Caller::Beside => {
                    inner.tasks.note_driver();
                    fut.await
                }
                Caller::MultiThread => fut.await,
            };
            // Dropped here, off the store's runtime when it is its own (see `Inner`).
            drop(inner);
            out
        }
    }

    fn snapshot_with(&self, purpose: Purpose) -> RemoteSnapshot {
        RemoteSnapshot::new(self.clone(), purpose)
    }

    /// Whether the server speaks the extension: from the current session, or a metadata
    /// exchange (whose failure is passed on, not taken for "no").
    pub(crate) fn extension(&self) -> Result<bool, Error> {
        if let Some(session) = self.inner.transport.cached() {
            return Ok(session.extension);
        }
        let transport = Arc::clone(&self.inner.transport);
        self.block_on(async move { transport.session().await.map(|s| s.extension) })
    }

    /// The commit as a future on the client's runtime.
    fn commit_task(
        &self,
        write: AtomicWrite,
    ) -> impl Future<Output = Result<CommitResult, Error>> + Send + 'static {
        let transport = Arc::clone(&self.inner.transport);
        async move {
            write.validate()?;
            let session = transport.session().await?;
            if !write.range_checks.is_empty() && !session.extension {
                return Err(Error::Unsupported {
                    operation: "a range check (a transaction that lists)",
                    needs: EXTENSION_NEEDED,
                });
            }
            if !write.numbering.is_empty() && !session.numbering {
                // Never sent to a server that would commit the placeholders unfilled.
                return Err(Error::Unsupported {
                    operation: "numbers assigned at commit",
                    needs: if session.extension {
                        NUMBERING_NEEDED
                    } else {
                        EXTENSION_NEEDED
                    },
                });
            }
            let body: Bytes = encode_write(&write, session.extension);
            let reply = match transport.call("atomic_write", body, Kind::Write).await {
                Ok((_, reply)) => reply,
                Err(Error::NotU64 { op, index, .. }) => {
                    let key = write
                        .mutations
                        .get(index)
                        .map(|m| m.key.clone())
                        .unwrap_or_default();
                    return Err(Error::NotU64 { op, index, key });
                }
                Err(e) => return Err(e),
            };
            // A success status with an answer that does not decode may be a commit.
            decode_write_output(&write, &reply.body).map_err(|e| match e {
                Error::Remote {
                    status: 200,
                    message,
                } => Error::outcome_unknown(message),
                e => e,
            })
        }
    }
}

impl Store for RemoteStore {
    type Snapshot = RemoteSnapshot;
    type Watch = RemoteWatch;

    fn snapshot(&self) -> RemoteSnapshot {
        self.snapshot_with(Purpose::Snapshot)
    }

    fn transaction_snapshot(&self) -> RemoteSnapshot {
        self.snapshot_with(Purpose::Transaction)
    }

    fn watch_raw(&self, keys: Vec<KeyBytes>) -> Result<RemoteWatch, Error> {
        if keys.len() > WATCH_KEYS_MAX {
            return Err(Error::TooManyWatchedKeys { count: keys.len() });
        }
        if let Some(k) = keys.iter().find(|k| k.len() > KEY_SIZE_MAX_WRITE) {
            return Err(Error::KeyTooLargeForWrite { size: k.len() });
        }
        Ok(RemoteWatch::start(self, keys))
    }

    fn snapshot_versionstamp(snapshot: &RemoteSnapshot) -> Versionstamp {
        snapshot.versionstamp_or_fix()
    }

    fn try_snapshot_versionstamp(snapshot: &RemoteSnapshot) -> Result<Versionstamp, Error> {
        snapshot.try_versionstamp()
    }

    fn get_latest_raw(&self, key: &[u8]) -> Result<Option<Entry>, Error> {
        // One plain read: no snapshot is held for it.
        let view = self.snapshot_with(Purpose::Latest);
        tuplekv_engine::ReadView::get_raw(&view, key)
    }

    fn get_raw_async(
        snapshot: &RemoteSnapshot,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Entry>, Error>> + Send + 'static + use<> {
        snapshot.get_raw_async(key)
    }

    fn scan_async(
        snapshot: &RemoteSnapshot,
        range: &tuplekv_engine::ByteRange,
        reverse: bool,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Entry>, Error>> + Send + 'static + use<> {
        snapshot.scan_async(range, reverse, limit)
    }

    fn snapshot_versionstamp_async(
        snapshot: &RemoteSnapshot,
    ) -> impl Future<Output = Result<Versionstamp, Error>> + Send + 'static + use<> {
        snapshot.try_versionstamp_async()
    }

    fn get_latest_raw_async(
        &self,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Entry>, Error>> + Send + 'static + use<> {
        // One plain read: no snapshot is held for it.
        self.snapshot_with(Purpose::Latest).get_raw_async(key)
    }

    fn commit(&self, write: AtomicWrite) -> Result<CommitResult, Error> {
        self.block_on_or(self.commit_task(write), || {
            Error::outcome_unknown("the client's runtime stopped during the commit")
        })
    }

    fn commit_async(
        &self,
        write: AtomicWrite,
    ) -> impl Future<Output = Result<CommitResult, Error>> + Send + 'static {
        self.run_async_or(self.commit_task(write), || {
            Error::outcome_unknown("the commit task stopped")
        })
    }

    fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Entry>>, Error> {
        if keys.len() > GET_MANY_KEYS_MAX {
            return Err(Error::TooManyRanges { count: keys.len() });
        }
        let encoded: Vec<Vec<u8>> = keys.iter().map(tuplekv_engine::codec::encode_key).collect();
        if let Some(k) = encoded.iter().find(|k| k.len() > KEY_SIZE_MAX_READ) {
            return Err(Error::KeyTooLargeForRead { size: k.len() });
        }
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        get_many_raw(&self.snapshot_with(Purpose::Latest), &encoded)
    }
}
