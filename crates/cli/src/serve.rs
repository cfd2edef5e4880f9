//! `tuplekv serve`: a KV Connect server over an in-memory or durable store, or over an etcd
//! cluster (`--etcd`), stopped gracefully by SIGINT or SIGTERM (then a local store is synced
//! and closed).
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
use tuplekv_engine::{Database, Durability, Options, Store};
use tuplekv_etcd::EtcdStore;
use tuplekv_server::metrics::{DEFAULT_DATABASE, Metrics, StoreSampler, database_sampler};
use tuplekv_server::{CommitMode, ReadMode, ServeOptions, ServerConfig, router, serve_with};

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
    /// Address to listen on (`127.0.0.1:0` picks a free port; the bound address is printed).
    #[arg(long, default_value = ADDR_DEFAULT)]
    addr: SocketAddr,
    /// The token clients must present (at least 12 characters).
    #[arg(long, env = "TUPLEKV_ACCESS_TOKEN", hide_env_values = true)]
    access_token: Option<String>,
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
    let token = args
        .access_token
        .as_deref()
        .ok_or("an access token is required: pass --access-token or set TUPLEKV_ACCESS_TOKEN")?;
    let config = ServerConfig::new(token).map_err(|e| e.to_string())?;
    if args.etcd.is_empty() {
        run_local(&args, config)
    } else {
        run_etcd(&args, config)
    }
}

/// Serves an in-memory store, or the durable one at `--path`.
fn run_local(args: &ServeArgs, config: ServerConfig) -> Result<(), String> {
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
        Some(dir) => {
            let durability = match args.durability {
                DurabilityArg::Sync => Durability::Sync,
                DurabilityArg::Buffered => Durability::Buffered {
                    interval: BUFFERED_SYNC_INTERVAL,
                },
            };
            let options = Options {
                durability,
                ..Options::default()
            };
            Database::open(dir, options)
                .map_err(|e| format!("cannot open the store at {}: {e}", dir.display()))?
        }
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
    let store = Arc::new(store);
    let sampler = database_sampler(&store);
    runtime.block_on(serve_until_signal(
        Arc::clone(&store),
        args,
        &kind,
        config,
        Some(sampler),
    ))?;
    drop(runtime);
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

/// Serves the store under `--etcd-prefix` on the etcd cluster at `--etcd`.
fn run_etcd(args: &ServeArgs, config: ServerConfig) -> Result<(), String> {
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
    runtime.block_on(serve_until_signal(
        Arc::clone(&store),
        args,
        &kind,
        config,
        None,
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

/// Serves `store` on `--addr` (and `/metrics` on `--metrics-addr`) until SIGINT or SIGTERM.
async fn serve_until_signal<S: Store + 'static>(
    store: Arc<S>,
    args: &ServeArgs,
    kind: &str,
    config: ServerConfig,
    sampler: Option<Arc<dyn StoreSampler>>,
) -> Result<(), String> {
    // Before the listening line: a signal sent as soon as a script reads it must be handled
    // (a graceful stop), not kill the process with the default disposition.
    let shutdown = shutdown_signal()?;
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.addr))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    tracing::info!(%addr, store = %kind, "tuplekv serve: KV Connect server started");
    // The one line tests and scripts read to find the port.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on {addr}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("cannot write to stdout: {e}"))?;
    drop(stdout);
    let options = config.serve_options();
    let metrics = Metrics::new(Arc::clone(&options.stats));
    metrics
        .add_database(DEFAULT_DATABASE, Arc::clone(config.stats()), sampler)
        .map_err(|e| e.to_string())?;
    let (stopping, stopped) = tokio::sync::watch::channel(false);
    let metrics_server = match args.metrics_addr {
        None => None,
        Some(at) => Some(serve_metrics(at, &metrics, stopped).await?),
    };
    let token = config.access_token().to_owned();
    let app = router(store, config).merge(metrics.router(token));
    let served = serve_with(listener, app, options, async move {
        shutdown.await;
        let _ = stopping.send(true);
    })
    .await
    .map_err(|e| format!("server failed: {e}"));
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
