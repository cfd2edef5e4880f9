//! `tuplekv serve`: a KV Connect server over an in-memory or durable store, or over an etcd
//! cluster (`--etcd`), stopped gracefully by SIGINT or SIGTERM (then a local store is synced
//! and closed). With `--tls-cert` and `--tls-key` it serves `https://`, and SIGHUP re-reads
//! the certificate and key (new connections get them; open ones keep theirs).
//!
//! With `--etcd` the server keeps no state of its own: several `tuplekv serve --etcd` processes
//! given the same cluster and `--etcd-prefix` serve one store, and any of them may stop or
//! die without losing an acknowledged write.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use tuplekv_engine::{Database, Durability, Options};
use tuplekv_etcd::EtcdStore;
use tuplekv_server::metrics::{DEFAULT_DATABASE, Metrics, database_sampler};
use tuplekv_server::{
    AccessTokens, CommitMode, DatabaseHost, DatabaseName, Databases, ReadMode, ServeOptions,
    ServerConfig, Tls, read_tokens_file, router, router_with_databases, serve_with,
};

use crate::databases::{DirHost, MemoryHost};
use crate::logging::{LogFormat, LogLevel};

/// Where `serve` listens by default: loopback only.
const ADDR_DEFAULT: &str = "127.0.0.1:4512";
/// Time between background syncs with `--durability buffered`.
const BUFFERED_SYNC_INTERVAL: Duration = Duration::from_millis(100);
/// The key prefix of the store in etcd when `--etcd-prefix` is not given.
const ETCD_PREFIX_DEFAULT: &str = "tuplekv/";
/// Most `--etcd` endpoints (etcd clusters have a handful of members).
const ETCD_ENDPOINTS_MAX: usize = 16;

/// Arguments of `tuplekv serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Directory of a durable store (created if missing). Without it (or `--etcd`) the store
    /// is in memory and its data dies with the process.
    #[arg(long, conflicts_with = "etcd")]
    path: Option<PathBuf>,
    /// Serve the store kept on this etcd cluster: its members' client URLs, comma-separated
    /// (`http://127.0.0.1:2379,http://127.0.0.1:22379`). Several servers given the same
    /// cluster and prefix serve the same data.
    #[arg(long, value_name = "URL[,URL...]", value_delimiter = ',')]
    etcd: Vec<String>,
    /// The key prefix of the store in the etcd cluster (one cluster can hold several stores).
    #[arg(long, value_name = "P", default_value = ETCD_PREFIX_DEFAULT, requires = "etcd")]
    etcd_prefix: String,
    /// When a durable store acknowledges a commit: `sync` once it is on stable storage,
    /// `buffered` before (synced in the background every 100 ms).
    #[arg(long, value_enum, default_value_t = DurabilityArg::Sync, requires = "path")]
    durability: DurabilityArg,
    /// Address to listen on, `HOST:PORT` (`127.0.0.1:0` picks a free port; the bound address
    /// is printed). A host name (`localhost:4512`) is resolved, and the first of its
    /// addresses that can be bound is used.
    #[arg(long, default_value = ADDR_DEFAULT, value_name = "HOST:PORT")]
    addr: String,
    /// A token clients may present (at least 12 printable ASCII characters). Repeat it to
    /// accept several at once (a rotation's old and new token).
    #[arg(long, env = "TUPLEKV_ACCESS_TOKEN", hide_env_values = true)]
    access_token: Vec<String>,
    /// A file of tokens clients may present, one per line (`#` starts a comment line), in
    /// addition to any `--access-token`. Read again on SIGHUP: edit it and send SIGHUP to
    /// rotate tokens without a restart; a file that does not parse keeps the old tokens.
    #[arg(long, value_name = "FILE")]
    tokens_file: Option<PathBuf>,
    /// Also serve the databases under this data root, each at `http://HOST:PORT/NAME`
    /// (`Deno.openKv("http://HOST:PORT/NAME")`, or `DENO_KV_PATH_PREFIX`). Each is a
    /// directory `ROOT/NAME`, made by `tuplekv db create NAME --databases ROOT` (also while
    /// the server runs) or on first use with `--create-databases`.
    #[arg(long, value_name = "ROOT", conflicts_with = "etcd")]
    databases: Option<PathBuf>,
    /// Create a named database on its first request (one that carries a valid token):
    /// under `--databases ROOT` when given, else in memory (gone with the process), which
    /// suits test suites that want a fresh database per test.
    #[arg(long, conflicts_with = "etcd")]
    create_databases: bool,
    /// Serve over TLS (`https://`) with this PEM certificate chain: the server's certificate
    /// first, then any intermediates. Needs `--tls-key`. SIGHUP re-reads both files.
    #[arg(long, value_name = "CERT.pem", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key (PKCS#8, PKCS#1 or SEC1) of `--tls-cert`'s certificate.
    #[arg(long, value_name = "KEY.pem", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Also serve `GET /metrics` (Prometheus text) without the token on this address, for a
    /// scraper (keep it on loopback or a private network). `/metrics` on `--addr` needs the
    /// token.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// How log lines are written on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// The level logged when `RUST_LOG` is unset (`RUST_LOG`, when set, is the filter). The
    /// HTTP crates stay at info unless `RUST_LOG` names them.
    #[arg(long, value_enum, default_value_t = LogLevel::Info)]
    log_level: LogLevel,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum DurabilityArg {
    Sync,
    Buffered,
}

/// Runs the server until SIGINT or SIGTERM.
pub(crate) fn run(args: ServeArgs) -> Result<(), String> {
    crate::logging::init(args.log_format, args.log_level)?;
    let tokens = Arc::new(AccessTokens::new(initial_tokens(&args)?).map_err(|e| format!("{e}"))?);
    let config = ServerConfig::with_access_tokens(Arc::clone(&tokens));
    // Before anything is opened, created or bound: a bad file changes nothing.
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(Tls::from_pem_files(cert, key).map_err(|e| e.to_string())?),
        (None, None) => None,
        // clap's `requires` refuses one without the other.
        _ => return Err("--tls-cert and --tls-key go together: give both or neither".into()),
    };
    // Bound before any store is opened or created: a taken port leaves nothing behind.
    let listener = Listener {
        socket: bind(&args.addr)?,
        tls,
    };
    if args.etcd.is_empty() {
        run_local(&args, config, listener)
    } else {
        run_etcd(&args, config, listener)
    }
}

/// The tokens of `--access-token` and `--tokens-file`, together.
fn initial_tokens(args: &ServeArgs) -> Result<Vec<String>, String> {
    let mut tokens = args.access_token.clone();
    if let Some(file) = &args.tokens_file {
        tokens.extend(read_tokens_file(file).map_err(|e| e.to_string())?);
    }
    if tokens.is_empty() {
        return Err("an access token is required: pass --access-token, set \
                    TUPLEKV_ACCESS_TOKEN, or give --tokens-file"
            .into());
    }
    Ok(tokens)
}

/// Binds `addr` (`HOST:PORT`; a name is resolved and its first bindable address used).
fn bind(addr: &str) -> Result<std::net::TcpListener, String> {
    use std::net::ToSocketAddrs;
    let resolved: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| format!("--addr {addr}: not a HOST:PORT address that resolves: {e}"))?
        .collect();
    let mut last = None;
    for candidate in &resolved {
        match std::net::TcpListener::bind(candidate) {
            Ok(listener) => {
                listener
                    .set_nonblocking(true)
                    .map_err(|e| format!("cannot listen on {candidate}: {e}"))?;
                return Ok(listener);
            }
            Err(e) => last = Some(format!("cannot listen on {candidate}: {e}")),
        }
    }
    Err(last.unwrap_or_else(|| format!("--addr {addr} resolves to no address")))
}

/// The durability options of `--durability`.
fn store_options(args: &ServeArgs) -> Options {
    let durability = match args.durability {
        DurabilityArg::Sync => Durability::Sync,
        DurabilityArg::Buffered => Durability::Buffered {
            interval: BUFFERED_SYNC_INTERVAL,
        },
    };
    Options {
        durability,
        ..Options::default()
    }
}

/// The bound socket, and the TLS configuration it serves with, if any.
struct Listener {
    socket: std::net::TcpListener,
    tls: Option<Tls>,
}

/// The named databases `--databases` and `--create-databases` ask for, if any.
enum NamedHost {
    None,
    Dirs(Arc<DirHost>),
    Memory,
}

/// Serves an in-memory store, or the durable one at `--path`.
fn run_local(args: &ServeArgs, config: ServerConfig, listener: Listener) -> Result<(), String> {
    // A `Database`'s asynchronous commit never blocks the caller (a durable one waits for its
    // sync without holding a thread): await it on the request's task rather than hop to the
    // blocking pool and back for every write.
    let config = config.with_commit_mode(CommitMode::Inline);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let store = match &args.path {
        None => Database::in_memory(),
        Some(dir) => Database::open(dir, store_options(args))
            .map_err(|e| format!("cannot open the store at {}: {e}", dir.display()))?,
    };
    match store.recovery_report() {
        Some(r) => tracing::info!(
            checkpoint = %r.checkpoint.map_or_else(|| "none".to_owned(), |v| v.to_string()),
            checkpoint_entries = r.checkpoint_entries,
            segments = r.segments,
            records_replayed = r.records_replayed,
            bytes_read = r.bytes_read,
            torn_tail_cut = ?r.truncated.as_ref().map(|(path, offset, bytes)| format!("{} at {offset} ({bytes} bytes)", path.display())),
            last_versionstamp = %r.last_versionstamp,
            elapsed = ?r.elapsed,
            "recovered the store"
        ),
        None => tracing::warn!(
            "the store is in memory: its data dies with the process (pass --path DIR to keep it)"
        ),
    }
    let kind = match &args.path {
        None => "in memory: data dies with the process".to_owned(),
        Some(dir) => format!(
            "durable at {} ({:?} durability)",
            dir.display(),
            args.durability
        ),
    };
    let metrics = Metrics::new(Arc::clone(config.stats()));
    metrics
        .add_database(
            DEFAULT_DATABASE,
            Arc::clone(config.stats()),
            Some(database_sampler(&store)),
        )
        .map_err(|e| e.to_string())?;
    let named = match (&args.databases, args.create_databases) {
        (Some(root), _) => {
            std::fs::create_dir_all(root)
                .map_err(|e| format!("cannot create the data root {}: {e}", root.display()))?;
            NamedHost::Dirs(Arc::new(DirHost::new(
                root.clone(),
                store_options(args),
                config.clone(),
                metrics.clone(),
            )))
        }
        (None, true) => NamedHost::Memory,
        (None, false) => NamedHost::None,
    };
    let store = Arc::new(store);
    let root_router = router(Arc::clone(&store), config.clone());
    let app = match &named {
        NamedHost::None => root_router,
        NamedHost::Dirs(host) => {
            let databases = Databases::new(
                SharedHost(Arc::clone(host)),
                Arc::clone(config.access_tokens()),
            )
            .with_create_on_first_use(args.create_databases);
            router_with_databases(root_router, Arc::new(databases))
        }
        NamedHost::Memory => {
            let databases = Databases::new(
                MemoryHost::new(config.clone(), metrics.clone()),
                Arc::clone(config.access_tokens()),
            )
            .with_create_on_first_use(true);
            router_with_databases(root_router, Arc::new(databases))
        }
    };
    let kind = match (&named, &args.databases) {
        (NamedHost::Dirs(_), Some(root)) => {
            format!("{kind}; named databases under {}", root.display())
        }
        (NamedHost::Memory, _) => format!("{kind}; named databases in memory, made on first use"),
        _ => kind,
    };
    // SIGHUP also re-reads the named databases' own tokens files.
    let mut extra: Vec<Reloader> = Vec::new();
    if let NamedHost::Dirs(host) = &named {
        let host = Arc::clone(host);
        extra.push(Box::new(move || host.reload_tokens()));
    }
    let served = runtime.block_on(serve_until_signal(
        app, args, &kind, &config, listener, extra, &metrics,
    ));
    drop(runtime);
    if let NamedHost::Dirs(host) = &named {
        host.close_all()?;
    }
    served?;
    let store = Arc::into_inner(store).ok_or("the store is still in use after shutdown")?;
    if args.path.is_some() {
        store
            .sync()
            .map_err(|e| format!("syncing the store failed: {e}"))?;
    }
    // How many log syncs the commits shared (0 in memory): what group commit saved.
    let log_syncs = store.stats().log_syncs;
    store
        .close()
        .map_err(|e| format!("closing the store failed: {e}"))?;
    tracing::info!(log_syncs, "store closed");
    Ok(())
}

/// A [`DirHost`] the server shares with the shutdown path (which closes its databases).
struct SharedHost(Arc<DirHost>);

impl DatabaseHost for SharedHost {
    fn open(&self, name: &DatabaseName, create: bool) -> Result<Option<axum::Router>, String> {
        self.0.open(name, create)
    }
    fn list(&self) -> Result<Vec<DatabaseName>, String> {
        self.0.list()
    }
    fn drop_database(&self, name: &DatabaseName) -> Result<bool, String> {
        self.0.drop_database(name)
    }
}

/// Serves the store under `--etcd-prefix` on the etcd cluster at `--etcd`.
fn run_etcd(args: &ServeArgs, config: ServerConfig, listener: Listener) -> Result<(), String> {
    let endpoints = etcd_endpoints(&args.etcd)?;
    // `EtcdStore`'s commits and reads wait for the cluster on the calling thread: run them
    // on the blocking pool, never on a runtime worker.
    let config = config
        .with_commit_mode(CommitMode::BlockingPool)
        .with_read_mode(ReadMode::BlockingPool);
    // Connected before the server's runtime starts: the store runs its own runtime, and its
    // blocking methods must not be called from a runtime's task.
    let store = EtcdStore::connect(&endpoints, args.etcd_prefix.as_bytes()).map_err(|e| {
        format!(
            "cannot open the store in the etcd cluster at {}: {e}",
            endpoints.join(",")
        )
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let kind = format!(
        "etcd cluster at {} under prefix {:?}: replicated by the cluster",
        endpoints.join(","),
        args.etcd_prefix
    );
    let store = Arc::new(store);
    let metrics = Metrics::new(Arc::clone(config.stats()));
    metrics
        .add_database(DEFAULT_DATABASE, Arc::clone(config.stats()), None)
        .map_err(|e| e.to_string())?;
    let app = router(Arc::clone(&store), config.clone());
    runtime.block_on(serve_until_signal(
        app,
        args,
        &kind,
        &config,
        listener,
        Vec::new(),
        &metrics,
    ))?;
    drop(runtime);
    // Nothing to sync: every acknowledged commit is already on the cluster.
    drop(store);
    tracing::info!("etcd client closed");
    Ok(())
}

/// The `--etcd` endpoints, checked: each `http://HOST:PORT` or `https://HOST:PORT` (a
/// trailing `/` is dropped).
fn etcd_endpoints(given: &[String]) -> Result<Vec<String>, String> {
    if given.len() > ETCD_ENDPOINTS_MAX {
        return Err(format!(
            "--etcd names {} endpoints; at most {ETCD_ENDPOINTS_MAX} are allowed",
            given.len()
        ));
    }
    given
        .iter()
        .map(|url| {
            let url = url.trim().trim_end_matches('/');
            let host = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"));
            match host {
                Some(host) if !host.is_empty() && !host.contains('/') => Ok(url.to_owned()),
                _ => Err(format!(
                    "--etcd: `{url}` is not an etcd client URL (expected http://HOST:PORT or \
                     https://HOST:PORT, comma-separated)"
                )),
            }
        })
        .collect()
}

async fn serve_until_signal(
    app: axum::Router,
    args: &ServeArgs,
    kind: &str,
    config: &ServerConfig,
    listener: Listener,
    extra_reloaders: Vec<Reloader>,
    metrics: &Metrics,
) -> Result<(), String> {
    // Before the listening line: a signal sent as soon as a script reads it must be handled
    // (a graceful stop, a reload), not kill the process with the default disposition.
    let shutdown = shutdown_signal()?;
    let Listener { socket, tls } = listener;
    let mut all_reloaders = reloaders(
        tls.as_ref(),
        args.tokens_file.clone(),
        args.access_token.clone(),
        Arc::clone(config.access_tokens()),
    );
    all_reloaders.extend(extra_reloaders);
    let reload = reload_on_sighup(all_reloaders)?;
    let listener = tokio::net::TcpListener::from_std(socket)
        .map_err(|e| format!("cannot listen on {}: {e}", args.addr))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(
        %addr,
        url = %format!("{scheme}://{addr}"),
        tls = tls.is_some(),
        store = %kind,
        tokens = config.access_tokens().len(),
        "tuplekv serve: KV Connect server started"
    );
    let reload = tokio::spawn(reload);
    // The one line tests and scripts read to find the port.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on {addr}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("cannot write to stdout: {e}"))?;
    drop(stdout);
    let options = ServeOptions {
        tls,
        ..config.serve_options()
    };
    let (stopping, stopped) = tokio::sync::watch::channel(false);
    let metrics_server = match args.metrics_addr {
        None => None,
        Some(at) => Some(serve_metrics(at, metrics, stopped).await?),
    };
    let app = app.merge(metrics.router(Arc::clone(config.access_tokens())));
    let served = serve_with(listener, app, options, async move {
        shutdown.await;
        let _ = stopping.send(true);
    })
    .await
    .map_err(|e| format!("server failed: {e}"));
    reload.abort();
    if let Some(task) = metrics_server {
        task.await
            .map_err(|e| format!("the metrics server failed: {e}"))?
            .map_err(|e| format!("the metrics server failed: {e}"))?;
    }
    served
}

/// Serves `metrics` without a token on `at` until `stopped` turns true; prints
/// `metrics on ADDR` once listening.
async fn serve_metrics(
    at: SocketAddr,
    metrics: &Metrics,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<std::io::Result<()>>, String> {
    let listener = tokio::net::TcpListener::bind(at)
        .await
        .map_err(|e| format!("cannot listen on {at} (--metrics-addr): {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    tracing::info!(%addr, "serving /metrics without a token");
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "metrics on {addr}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("cannot write to stdout: {e}"))?;
    drop(stdout);
    // Its own connection counts: a scraper's connections are not the data path's.
    let app = metrics.open_router();
    Ok(tokio::spawn(serve_with(
        listener,
        app,
        ServeOptions::default(),
        async move {
            let _ = stopped.wait_for(|&stop| stop).await;
        },
    )))
}

/// A future that resolves on the first SIGINT or SIGTERM; the handlers are installed when
/// this returns, not when the future is first polled.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()> + Send, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    let mut int =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot watch SIGINT: {e}"))?;
    Ok(async move {
        let which = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(signal = which, "shutdown requested");
    })
}

/// One thing SIGHUP reloads: `Ok` with what it reloaded, or `Err` with why it could not
/// (and that the old one stays). Called on a blocking-pool thread.
type Reloader = Box<dyn Fn() -> Result<String, String> + Send + Sync>;

/// What SIGHUP reloads: the tokens file when given (swapping the whole token set; a file
/// that fails to parse keeps the old set), and the TLS certificate and key when serving TLS.
/// Connections stay open either way.
fn reloaders(
    tls: Option<&Tls>,
    tokens_file: Option<PathBuf>,
    fixed_tokens: Vec<String>,
    tokens: Arc<AccessTokens>,
) -> Vec<Reloader> {
    let mut reloaders: Vec<Reloader> = Vec::new();
    if let Some(file) = tokens_file {
        reloaders.push(Box::new(move || {
            read_tokens_file(&file)
                .and_then(|from_file| tokens.replace(fixed_tokens.iter().cloned().chain(from_file)))
                .map(|n| format!("access tokens reloaded: {n} valid, from {}", file.display()))
                .map_err(|e| format!("tokens file refused: {e}; the previous tokens stay valid"))
        }));
    }
    if let Some(tls) = tls {
        let tls = tls.clone();
        reloaders.push(Box::new(move || {
            let files = match tls.files() {
                Some((cert, key)) => format!("{} and {}", cert.display(), key.display()),
                None => "its parts".to_owned(),
            };
            tls.reload()
                .map(|()| format!("reloaded the TLS certificate and key from {files}"))
                .map_err(|e| {
                    format!(
                        "cannot reload the TLS certificate: {e}; the old certificate stays in use"
                    )
                })
        }));
    }
    reloaders
}

/// A future that runs every reloader on each SIGHUP and logs what each did; the handler is
/// installed when this returns, so SIGHUP no longer kills the process.
fn reload_on_sighup(
    reloaders: Vec<Reloader>,
) -> Result<impl std::future::Future<Output = ()> + Send, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup()).map_err(|e| format!("cannot watch SIGHUP: {e}"))?;
    let reloaders = Arc::new(reloaders);
    Ok(async move {
        while hup.recv().await.is_some() {
            if reloaders.is_empty() {
                tracing::info!("SIGHUP: nothing to reload (no --tokens-file or --tls-cert given)");
                continue;
            }
            // The reloaders read files: off the runtime's workers.
            let all = Arc::clone(&reloaders);
            let outcomes =
                tokio::task::spawn_blocking(move || all.iter().map(|r| r()).collect::<Vec<_>>())
                    .await;
            match outcomes {
                Ok(outcomes) => {
                    for outcome in outcomes {
                        match outcome {
                            Ok(done) => tracing::info!("SIGHUP: {done}"),
                            Err(e) => tracing::error!("SIGHUP: {e}"),
                        }
                    }
                }
                Err(e) => tracing::error!("SIGHUP: a reload failed: {e}"),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn etcd_endpoints_are_checked() {
        assert_eq!(
            etcd_endpoints(&urls(&["http://127.0.0.1:2379/", " https://h:1 "])),
            Ok(urls(&["http://127.0.0.1:2379", "https://h:1"]))
        );
        for bad in [
            "",
            "127.0.0.1:2379",
            "http://",
            "http://h:1/v3",
            "grpc://h:1",
        ] {
            let err = etcd_endpoints(&urls(&[bad])).expect_err(bad);
            assert!(err.contains("not an etcd client URL"), "{bad}: {err}");
        }
        let many = vec!["http://h:1".to_owned(); ETCD_ENDPOINTS_MAX + 1];
        assert!(etcd_endpoints(&many).is_err());
    }
}
