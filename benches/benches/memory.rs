//! Resident memory per key: what one small record (an 11-byte key on average, `["users", n]`
//! for n below a million, and a 16-byte value) costs in ours and in each peer, allocator
//! overhead included, at [`KEYS`] keys.
//!
//! Each implementation is measured in a process of its own (this bench runs itself again with
//! `TUPLEKV_MEMORY_PEER` set): resident memory is the process's, and freed memory a first
//! implementation left to the allocator would otherwise make a second look cheaper. The child
//! reads `/proc/self/statm` before and after inserting the keys and prints one line; this
//! process prints the table and writes it to `target/bench-report/memory.md`, which the bench
//! report includes. Run: `cargo xtask bench memory` (Linux only: it reads `/proc`).
//!
//! The peers are the engine bench's: a `BTreeMap<Vec<u8>, Vec<u8>>` behind a
//! `parking_lot::RwLock`, crossbeam's `SkipMap<Vec<u8>, Vec<u8>>` and redb on its in-memory
//! backend (keys committed in batches of [`BATCH`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;

use crossbeam_skiplist::SkipMap;
use parking_lot::RwLock;
use tuplekv_codec::{encode_key, key};
use tuplekv_engine::{Database, Options};

/// Keys inserted per implementation (the shape: a million).
const KEYS: u64 = 1_000_000;
/// Each value's length in bytes.
const VALUE_LEN: usize = 16;
/// Keys per commit, where an implementation commits (ours and redb).
const BATCH: usize = 1000;
/// Linux's page size on the machines we run on (`/proc/self/statm` counts pages).
const PAGE: u64 = 4096;
/// The environment variable that makes this bench a child measuring one implementation.
const PEER_VAR: &str = "TUPLEKV_MEMORY_PEER";
/// The implementations, ours first (the report's convention).
const IMPLEMENTATIONS: [&str; 4] = ["tuplekv", "btreemap_rwlock", "crossbeam_skipmap", "redb"];
/// redb's table.
const REDB_TABLE: redb::TableDefinition<'static, &[u8], &[u8]> =
    redb::TableDefinition::new("memory");

/// The process's resident memory in bytes.
fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * PAGE
}

/// The `i`-th key, encoded.
fn key_of(i: u64) -> Vec<u8> {
    encode_key(&key!["users", i])
}

/// Inserts the keys into `peer` and returns the resident bytes they added, read while the
/// implementation is still alive.
fn measure(peer: &str) -> Result<u64, String> {
    let value = [7u8; VALUE_LEN];
    let batches = || {
        (0..KEYS)
            .step_by(BATCH)
            .map(|first| first..(first + BATCH as u64).min(KEYS))
    };
    match peer {
        "tuplekv" => {
            let db = Database::with_options(Options {
                background_reclaim: false,
                ..Options::default()
            });
            let before = resident();
            for batch in batches() {
                let mut a = db.atomic();
                for i in batch {
                    a = a.set_raw(&key_of(i), value.to_vec());
                }
                let done = a.commit().map_err(|e| e.to_string())?;
                if !done.is_committed() {
                    return Err("a commit without checks was refused".into());
                }
            }
            let after = resident();
            check_count(db.stats().keys)?;
            Ok(after.saturating_sub(before))
        }
        "btreemap_rwlock" => {
            let map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>> = RwLock::new(BTreeMap::new());
            let before = resident();
            for i in 0..KEYS {
                map.write().insert(key_of(i), value.to_vec());
            }
            let after = resident();
            check_count(map.read().len())?;
            Ok(after.saturating_sub(before))
        }
        "crossbeam_skipmap" => {
            let map = SkipMap::new();
            let before = resident();
            for i in 0..KEYS {
                map.insert(key_of(i), value.to_vec());
            }
            let after = resident();
            check_count(map.len())?;
            Ok(after.saturating_sub(before))
        }
        "redb" => {
            let redb_err = |e: redb::Error| e.to_string();
            let db = redb::Database::builder()
                .create_with_backend(redb::backends::InMemoryBackend::new())
                .map_err(|e| redb_err(e.into()))?;
            let before = resident();
            for batch in batches() {
                let w = db.begin_write().map_err(|e| redb_err(e.into()))?;
                {
                    let mut table = w.open_table(REDB_TABLE).map_err(|e| redb_err(e.into()))?;
                    for i in batch {
                        table
                            .insert(key_of(i).as_slice(), value.as_slice())
                            .map_err(|e| redb_err(e.into()))?;
                    }
                }
                w.commit().map_err(|e| redb_err(e.into()))?;
            }
            let after = resident();
            Ok(after.saturating_sub(before))
        }
        other => Err(format!("unknown implementation `{other}`")),
    }
}

/// Fails unless the implementation holds every key.
fn check_count(count: usize) -> Result<(), String> {
    if count == KEYS as usize {
        Ok(())
    } else {
        Err(format!("{count} keys stored, {KEYS} inserted"))
    }
}

/// Runs this bench again as a child measuring `peer`; its resident bytes per key.
fn per_key_of(peer: &str) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .env(PEER_VAR, peer)
        .output()
        .map_err(|e| format!("running the child: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("resident_bytes "));
    match (
        out.status.success(),
        line.and_then(|l| l.trim().parse::<u64>().ok()),
    ) {
        (true, Some(bytes)) => Ok(bytes as f64 / KEYS as f64),
        _ => Err(format!(
            "the child failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

fn main() {
    if let Ok(peer) = std::env::var(PEER_VAR) {
        match measure(&peer) {
            Ok(bytes) => println!("resident_bytes {bytes}"),
            Err(e) => {
                eprintln!("{peer}: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    // `cargo bench` passes `--bench`; a filter argument narrows the implementations.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let key_bytes: usize = (0..KEYS).map(|i| key_of(i).len()).sum();
    let mut table = format!(
        "## memory/per_key\n\nResident bytes per key at {KEYS} keys (mean key {:.1} bytes, \
         value {VALUE_LEN} bytes), each implementation in its own process.\n\n\
         | implementation | bytes per key | ratio to ours |\n|---|---|---|\n",
        key_bytes as f64 / KEYS as f64
    );
    let mut ours = None;
    for peer in IMPLEMENTATIONS {
        if !filter.is_empty() && !filter.iter().any(|f| peer.contains(f.as_str())) {
            continue;
        }
        match per_key_of(peer) {
            Ok(bytes) => {
                if peer == "tuplekv" {
                    ours = Some(bytes);
                }
                let ratio = ours.map_or("".to_owned(), |o| format!("{:.2}x", bytes / o));
                println!("memory/per_key/{peer}: {bytes:.1} resident bytes per key");
                let _ = writeln!(table, "| {peer} | {bytes:.1} | {ratio} |");
            }
            Err(e) => {
                tuplekv_benches::skip("memory/per_key", peer, &e);
                let _ = writeln!(table, "| {peer} | skipped: {e} | |");
            }
        }
    }
    // Cargo's scratch directory for benches is `<target>/tmp`.
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = target.parent().unwrap_or(target).join("bench-report");
    let written =
        std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join("memory.md"), &table));
    if let Err(e) = written {
        eprintln!("could not write {}: {e}", dir.join("memory.md").display());
    }
    print!("\n{table}");
}
