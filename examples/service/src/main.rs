//! `tuplekv-example-service`: the example service on one store, until Ctrl-C.
//!
//! ```text
//! tuplekv-example-service [--store memory | --store dir PATH | --store remote URL --token T]
//!                         [--mode blocking|async] [--addr 127.0.0.1:0] [--retry-for SECONDS]
//! ```
//! Prints `listening on ADDR` once it accepts requests.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use tuplekv_example_service::{AnyStore, App, Mode, ServiceStore, StoreChoice, serve};
use tuplekv_remote::{RemoteOptions, RemoteStore};

const USAGE: &str = "usage: tuplekv-example-service [--store memory | --store dir PATH | \
    --store remote URL --token TOKEN] [--mode blocking|async] [--addr 127.0.0.1:0] \
    [--retry-for SECONDS]";

struct Args {
    store: StoreChoice,
    mode: Mode,
    addr: SocketAddr,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut store = None;
    let mut mode = Mode::Async;
    let mut addr: SocketAddr = ([127, 0, 0, 1], 0).into();
    let mut token = None;
    let mut retry_for = tuplekv_remote::RETRY_FOR_DEFAULT;
    let mut it = args.iter();
    let value = |it: &mut std::slice::Iter<'_, String>, flag: &str| {
        it.next().cloned().ok_or(format!("{flag} needs a value"))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--store" => {
                store = Some(match value(&mut it, "--store")?.as_str() {
                    "memory" => (StoreChoice::Memory, None),
                    "dir" => (
                        StoreChoice::Dir(value(&mut it, "--store dir")?.into()),
                        None,
                    ),
                    "remote" => (StoreChoice::Memory, Some(value(&mut it, "--store remote")?)),
                    other => return Err(format!("unknown store `{other}`")),
                });
            }
            "--token" => token = Some(value(&mut it, "--token")?),
            "--mode" => mode = value(&mut it, "--mode")?.parse()?,
            "--addr" => {
                addr = value(&mut it, "--addr")?
                    .parse()
                    .map_err(|e| format!("--addr: {e}"))?;
            }
            "--retry-for" => {
                let secs: f64 = value(&mut it, "--retry-for")?
                    .parse()
                    .map_err(|e| format!("--retry-for: {e}"))?;
                retry_for =
                    Duration::try_from_secs_f64(secs).map_err(|e| format!("--retry-for: {e}"))?;
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    let store = match store {
        None => StoreChoice::Memory,
        Some((_, Some(url))) => StoreChoice::Remote {
            url,
            token: token.ok_or("--store remote needs --token")?,
            retry_for,
        },
        Some((store, None)) => store,
    };
    Ok(Args { store, mode, addr })
}

async fn run<S: ServiceStore>(store: S, mode: Mode, addr: SocketAddr) -> Result<(), String> {
    let app = tokio::task::spawn_blocking(move || App::open(store, mode))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("binding {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on {bound} ({} mode)", mode.name());
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    serve(app, listener, shutdown)
        .await
        .map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&args) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match (&args.store, args.mode) {
            // Async handlers: the remote store's connection runs on this runtime's workers.
            (
                StoreChoice::Remote {
                    url,
                    token,
                    retry_for,
                },
                Mode::Async,
            ) => {
                let options = RemoteOptions {
                    retry_for: *retry_for,
                    ..RemoteOptions::default()
                };
                let store = RemoteStore::connect_async(url, token, options)
                    .await
                    .map_err(|e| e.to_string())?;
                run(store, args.mode, args.addr).await
            }
            // The blocking store opens on a blocking thread (a remote one runs its own runtime).
            (choice, _) => {
                let choice = choice.clone();
                let store = tokio::task::spawn_blocking(move || choice.open())
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?;
                match store {
                    AnyStore::Database(db) => run(db, args.mode, args.addr).await,
                    AnyStore::Remote(remote) => run(remote, args.mode, args.addr).await,
                }
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
