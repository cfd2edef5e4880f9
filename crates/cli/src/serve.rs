//! `tuplekv serve`: a KV Connect server over an in-memory or durable store, stopped
//! gracefully by SIGINT or SIGTERM (then the store is synced and closed).

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use tuplekv_engine::{Database, Durability, Options};
use tuplekv_server::{CommitMode, ServerConfig, router, serve_with};

/// Where `serve` listens by default: loopback only.
const ADDR_DEFAULT: &str = "127.0.0.1:4512";
/// Time between background syncs with `--durability buffered`.
const BUFFERED_SYNC_INTERVAL: Duration = Duration::from_millis(100);

/// Arguments of `tuplekv serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Directory of a durable store (created if missing). Without it the store is in memory
    /// and its data dies with the process.
    #[arg(long)]
    path: Option<PathBuf>,
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
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum DurabilityArg {
    Sync,
    Buffered,
}

/// Runs the server until SIGINT or SIGTERM.
pub(crate) fn run(args: ServeArgs) -> Result<(), String> {
    init_logging();
    let token = args
        .access_token
        .as_deref()
        .ok_or("an access token is required: pass --access-token or set TUPLEKV_ACCESS_TOKEN")?;
    // A `Database`'s asynchronous commit never blocks the caller (a durable one waits for its
    // sync without holding a thread): await it on the request's task rather than hop to the
    // blocking pool and back for every write.
    let config = ServerConfig::new(token)
        .map_err(|e| e.to_string())?
        .with_commit_mode(CommitMode::Inline);
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
    let store = Arc::new(store);
    runtime.block_on(serve_until_signal(Arc::clone(&store), &args, config))?;
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

async fn serve_until_signal(
    store: Arc<Database>,
    args: &ServeArgs,
    config: ServerConfig,
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
    let kind = match &args.path {
        None => "in memory: data dies with the process".to_owned(),
        Some(dir) => format!(
            "durable at {} ({:?} durability)",
            dir.display(),
            args.durability
        ),
    };
    tracing::info!(%addr, store = %kind, "tuplekv serve: KV Connect server started");
    // The one line tests and scripts read to find the port.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on {addr}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("cannot write to stdout: {e}"))?;
    drop(stdout);
    let options = config.serve_options();
    let app = router(store, config);
    serve_with(listener, app, options, shutdown)
        .await
        .map_err(|e| format!("server failed: {e}"))
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

/// Logs to stderr; `RUST_LOG` filters (default `info`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
