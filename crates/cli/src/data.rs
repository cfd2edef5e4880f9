//! The key-value subcommands: `get`, `set`, `delete`, `list`, `watch` and `stats`, each on
//! `--path DIR` or `--url URL` (`stats --url` reads the server's `/metrics`, `remote_stats.rs`). Keys are Deno literals
//! (`keys.rs`); output is one line per entry for people, JSON objects with `--json`.

use std::io::Write;
use std::time::Duration;

use clap::{ArgGroup, Args};
use serde_json::json;
use tuplekv_engine::{
    Entry, Key, KeyWatch, ListOptions, ReadView, Selector, Store, Value, WatchUpdate,
};

use crate::data_dir::{Create, open_database};
use crate::entry::{entry_for_people, entry_to_json};
use crate::keys::{format_key, parse_key};
use crate::target::{TargetArgs, with_store};

/// Arguments of `tuplekv get` and `tuplekv delete`: where, which key, and how to print.
#[derive(Debug, Args)]
pub(crate) struct KeyArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The key, as Deno writes it: '["users", 1n]'.
    #[arg(long_help = KEY_HELP)]
    key: String,
    /// Print the result as a JSON object (`get`: the entry, `null` when absent).
    #[arg(long)]
    json: bool,
}

/// Arguments of `tuplekv set`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("value").required(true)))]
pub(crate) struct SetArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The key, as Deno writes it: '["users", 1n]'.
    #[arg(long_help = KEY_HELP)]
    key: String,
    /// Store raw bytes (a `Uint8Array` in Deno), given in hex, or `@FILE` for the file's
    /// bytes as they are (`@-`: stdin).
    #[arg(long, group = "value", value_name = "HEX|@FILE")]
    bytes: Option<String>,
    /// Store a `Deno.KvU64`.
    #[arg(long, group = "value", value_name = "N")]
    u64: Option<u64>,
    /// Store a JavaScript string (V8-serialised, as `kv.set(key, "text")` stores it).
    #[arg(long, group = "value", value_name = "TEXT")]
    string: Option<String>,
    /// Store V8-serialised bytes as they are (what Deno writes for any other JS value); `@FILE`
    /// reads the hex from a file.
    #[arg(long, group = "value", value_name = "HEX|@FILE")]
    v8_hex: Option<String>,
    /// Store a JavaScript value written as the literal `get` prints, e.g.
    /// `{ name: "Ada", at: new Date(0), tags: new Set(["a"]) }`, serialised exactly as Deno's
    /// `kv.set` would (a top-level `Uint8Array` is stored as bytes, as Deno does); `@FILE`
    /// reads the literal from a file (`@-`: stdin).
    #[arg(long, group = "value", value_name = "LITERAL|@FILE")]
    js: Option<String>,
    /// Store the value of JSON text, as `kv.set(key, JSON.parse(text))` would; `@FILE` reads
    /// it from a file (`@-`: stdin).
    #[arg(long, group = "value", value_name = "JSON|@FILE")]
    json_value: Option<String>,
    /// Expire the value this many milliseconds after the commit.
    #[arg(long, value_name = "MS")]
    expire_in: Option<u64>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// Arguments of `tuplekv list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// List the keys under this prefix (default: every key, `[]`).
    prefix: Option<String>,
    /// First key (inclusive).
    #[arg(long, value_name = "KEY")]
    start: Option<String>,
    /// Key to stop before (exclusive).
    #[arg(long, value_name = "KEY")]
    end: Option<String>,
    /// At most this many entries.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// From the last key backwards.
    #[arg(long)]
    reverse: bool,
    /// One JSON object per line (the `dump` format).
    #[arg(long)]
    json: bool,
}

/// Arguments of `tuplekv watch`.
///
/// On `--path` this process holds the directory, so no other process can change it while
/// the watch runs: watch a server (`--url`) to see other clients' writes.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The keys to watch (at most 10), as Deno writes them.
    #[arg(required = true)]
    keys: Vec<String>,
    /// One JSON object per update.
    #[arg(long)]
    json: bool,
    /// Stop after this many updates (the first is the current state); default: until Ctrl-C.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
}

/// Arguments of `tuplekv stats`.
#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Print the counts as a JSON object.
    #[arg(long)]
    json: bool,
}

/// The long help of a key argument: the literal syntax of `keys.rs`.
const KEY_HELP: &str = "The key, as Deno writes it, e.g. '[\"users\", 1n]' (quote it for the shell).\n\
Parts: strings in double or single quotes with JavaScript escapes; numbers (1, -2.5, 1e21, \
NaN, -0, Infinity, 0x1f); bigints (1n, -42n); true and false; bytes as \
new Uint8Array([1, 2]) or the short form b\"\\x01\\x02ab\".";

fn key_arg(text: &str) -> Result<Key, String> {
    parse_key(text).map_err(|e| e.to_string())
}

/// Writes a line to stdout; a closed pipe (`| head`) is an error, not a panic.
pub(crate) fn out_line(text: impl std::fmt::Display) -> Result<(), String> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("cannot write to stdout: {e}"))
}

fn decoded(entry: &Entry) -> Result<Key, String> {
    entry
        .decoded_key()
        .map_err(|e| format!("a stored key is not a valid tuple: {e}"))
}

/// Runs `tuplekv get`.
pub(crate) fn get(args: KeyArgs) -> Result<(), String> {
    let key = key_arg(&args.key)?;
    let opened = args.target.open(Create::No)?;
    let found = with_store!(&opened, |s| s
        .get_latest_raw(&tuplekv_engine::codec::encode_key(&key)))
    .map_err(|e| format!("get failed: {e}"))?;
    match (&found, args.json) {
        (Some(entry), true) => out_line(entry_to_json(&key, entry))?,
        (None, true) => out_line("null")?,
        (Some(entry), false) => out_line(entry_for_people(&key, entry))?,
        (None, false) => out_line(format!("{}  (absent)", format_key(&key)))?,
    }
    opened.close()
}

/// Runs `tuplekv set`.
pub(crate) fn set(args: SetArgs) -> Result<(), String> {
    let key = key_arg(&args.key)?;
    let hex_arg = |flag: &str, text: &str| {
        hex::decode(text.trim_start_matches("0x")).map_err(|e| format!("{flag}: bad hex: {e}"))
    };
    let value = match (&args.bytes, args.u64, &args.string, &args.v8_hex) {
        (Some(h), ..) => match h.strip_prefix('@') {
            Some(path) => Value::from(read_value_file("--bytes", path)?),
            None => Value::from(hex_arg("--bytes", h)?),
        },
        (_, Some(n), ..) => Value::U64(n),
        (_, _, Some(s), _) => Value::V8(crate::v8::write_string(s).into()),
        (_, _, _, Some(h)) => {
            let text = text_arg("--v8-hex", h)?;
            Value::V8(hex_arg("--v8-hex", text.trim())?.into())
        }
        _ => match (&args.js, &args.json_value) {
            (Some(text), _) => {
                let text = text_arg("--js", text)?;
                js_value(tuplekv_jsvalue::parse(&text).map_err(|e| format!("--js: {e}"))?)?
            }
            (_, Some(text)) => {
                let text = text_arg("--json-value", text)?;
                serde_json::from_str::<serde_json::Value>(&text)
                    .map_err(|e| format!("--json-value: not JSON: {e}"))?;
                let value =
                    tuplekv_jsvalue::parse_json(&text).map_err(|e| format!("--json-value: {e}"))?;
                js_value(value)?
            }
            _ => {
                return Err(
                    "give the value with --bytes, --u64, --string, --v8-hex, --js or --json-value"
                        .into(),
                );
            }
        },
    };
    let opened = args.target.open(Create::IfMissing)?;
    let result = with_store!(&opened, |s| {
        let mut op = s.atomic();
        op = match args.expire_in {
            Some(ms) => op.set_with_expiry(&key, value, Duration::from_millis(ms)),
            None => op.set(&key, value),
        };
        op.commit()
    })
    .map_err(|e| format!("set failed: {e}"))?;
    let stamp = result
        .versionstamp()
        .ok_or("set failed: the commit conflicted")?;
    if args.json {
        out_line(json!({ "ok": true, "versionstamp": stamp.to_string() }))?;
    } else {
        out_line(format!("set {}  versionstamp {stamp}", format_key(&key)))?;
    }
    opened.close()
}

/// The most bytes a value file (`--js @FILE`, `--bytes @FILE`, …) may hold: the longest
/// literal the parser reads, far above any stored value (64 KiB).
pub(crate) const VALUE_FILE_MAX: usize = tuplekv_jsvalue::INPUT_MAX;

/// The bytes of `path` (`-`: stdin), at most [`VALUE_FILE_MAX`].
fn read_value_file(flag: &str, path: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let limit = VALUE_FILE_MAX as u64 + 1;
    let mut bytes = Vec::new();
    let read = if path == "-" {
        std::io::stdin().lock().take(limit).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(limit).read_to_end(&mut bytes))
    };
    read.map_err(|e| format!("{flag}: cannot read {path}: {e}"))?;
    if bytes.len() > VALUE_FILE_MAX {
        return Err(format!(
            "{flag}: {path} holds more than {VALUE_FILE_MAX} bytes"
        ));
    }
    Ok(bytes)
}

/// The text of a value argument: itself, or the UTF-8 contents of `@FILE`.
fn text_arg(flag: &str, arg: &str) -> Result<String, String> {
    match arg.strip_prefix('@') {
        Some(path) => String::from_utf8(read_value_file(flag, path)?)
            .map_err(|_| format!("{flag}: {path} is not UTF-8 text")),
        None => Ok(arg.to_owned()),
    }
}

/// What Deno's `kv.set` stores for a JavaScript value: a `Uint8Array` as raw bytes, anything
/// else V8-serialised.
fn js_value(value: tuplekv_jsvalue::Value) -> Result<Value, String> {
    use tuplekv_jsvalue::{Value as Js, ViewKind};
    if let Js::View {
        kind: ViewKind::Uint8Array,
        buffer,
        byte_offset,
        byte_length,
    } = &value
        && let Js::ArrayBuffer(bytes) = &**buffer
        && let Some(range) = bytes.get(*byte_offset..*byte_offset + *byte_length)
    {
        return Ok(Value::from(range.to_vec()));
    }
    let bytes = tuplekv_jsvalue::encode(&value).map_err(|e| format!("--js: {e}"))?;
    Ok(Value::V8(bytes.into()))
}

/// Runs `tuplekv delete`.
pub(crate) fn delete(args: KeyArgs) -> Result<(), String> {
    let key = key_arg(&args.key)?;
    let opened = args.target.open(Create::No)?;
    let result = with_store!(&opened, |s| s.atomic().delete(&key).commit())
        .map_err(|e| format!("delete failed: {e}"))?;
    let stamp = result
        .versionstamp()
        .ok_or("delete failed: the commit conflicted")?;
    if args.json {
        out_line(json!({ "ok": true, "versionstamp": stamp.to_string() }))?;
    } else {
        out_line(format!(
            "deleted {}  versionstamp {stamp}",
            format_key(&key)
        ))?;
    }
    opened.close()
}

/// The selector of `list`: a prefix (default `[]`), a start and/or an end.
fn selector_of(args: &ListArgs) -> Result<Selector, String> {
    let prefix = args.prefix.as_deref().map(key_arg).transpose()?;
    let start = args.start.as_deref().map(key_arg).transpose()?;
    let end = args.end.as_deref().map(key_arg).transpose()?;
    let prefix = match (&prefix, &start, &end) {
        (None, Some(_), Some(_)) => None,
        (None, _, _) => Some(Key::empty()),
        (Some(p), _, _) => Some(p.clone()),
    };
    let selector = Selector::from_options(prefix.as_ref(), start.as_ref(), end.as_ref())
        .map_err(|e| format!("bad list range: {e}"))?;
    selector
        .byte_range()
        .map_err(|e| format!("bad list range: {e}"))?;
    Ok(selector)
}

/// Runs `tuplekv list`.
pub(crate) fn list(args: ListArgs) -> Result<(), String> {
    let selector = selector_of(&args)?;
    if args.limit == Some(0) {
        return Err("--limit must be at least 1".into());
    }
    let options = ListOptions {
        limit: args.limit,
        reverse: args.reverse,
        ..ListOptions::default()
    };
    let opened = args.target.open(Create::No)?;
    with_store!(&opened, |s| {
        let entries = s
            .list(&selector, options)
            .map_err(|e| format!("list failed: {e}"))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("list failed: {e}"))?;
            let key = decoded(&entry)?;
            if args.json {
                out_line(entry_to_json(&key, &entry))?;
            } else {
                out_line(entry_for_people(&key, &entry))?;
            }
        }
        Ok::<(), String>(())
    })?;
    opened.close()
}

/// Runs `tuplekv watch`: prints the current state, then each update, until Ctrl-C (or
/// `--count` updates).
pub(crate) fn watch(args: WatchArgs) -> Result<(), String> {
    let keys = args
        .keys
        .iter()
        .map(|k| key_arg(k))
        .collect::<Result<Vec<_>, _>>()?;
    let opened = args.target.open(Create::No)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let encoded = keys
        .iter()
        .map(|k| tuplekv_engine::codec::encode_key(k).into())
        .collect();
    with_store!(&opened, |s| {
        let watch = s
            .watch_raw(encoded)
            .map_err(|e| format!("watch failed: {e}"))?;
        runtime.block_on(print_updates(watch, &keys, &args))
    })?;
    drop(runtime);
    opened.close()
}

async fn print_updates(
    mut watch: impl KeyWatch,
    keys: &[Key],
    args: &WatchArgs,
) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    // Installed before the first line is printed, so a Ctrl-C sent as soon as a script sees
    // output ends the watch cleanly rather than killing the process.
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot watch SIGINT: {e}"))?;
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    let mut printed = 0u64;
    while args.count.is_none_or(|n| printed < n) {
        let update = tokio::select! {
            update = watch.next() => update,
            _ = interrupt.recv() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
        };
        let Some(update) = update else {
            return Err("the store closed the watch".into());
        };
        print_update(&update, keys, args.json)?;
        printed += 1;
    }
    Ok(())
}

fn print_update(update: &WatchUpdate, keys: &[Key], json: bool) -> Result<(), String> {
    if json {
        let entries: Vec<_> = keys
            .iter()
            .zip(&update.entries)
            .map(|(key, entry)| match entry {
                Some(e) => entry_to_json(key, e),
                None => json!({ "key": format_key(key), "value": null }),
            })
            .collect();
        return out_line(json!({
            "versionstamp": update.versionstamp.to_string(),
            "changed": update.changed,
            "entries": entries,
        }));
    }
    out_line(format!("update at versionstamp {}", update.versionstamp))?;
    for ((key, entry), changed) in keys.iter().zip(&update.entries).zip(&update.changed) {
        let mark = if *changed { "*" } else { " " };
        match entry {
            Some(e) => out_line(format!("{mark} {}", entry_for_people(key, e)))?,
            None => out_line(format!("{mark} {}  (absent)", format_key(key)))?,
        }
    }
    Ok(())
}

/// Runs `tuplekv stats`: live entries and their sizes, and the engine's memory counts; with
/// `--url`, the server's metrics (`remote_stats.rs`).
pub(crate) fn stats(args: StatsArgs) -> Result<(), String> {
    if let (None, Some(url)) = (&args.target.path, &args.target.url) {
        return crate::remote_stats::run(url, args.target.access_token.as_deref(), args.json);
    }
    let dir = args.target.require_path("stats")?.to_owned();
    let db = open_database(&dir, Create::No)?;
    let snapshot = db.snapshot();
    let range = Selector::prefix(&Key::empty())
        .byte_range()
        .map_err(|e| e.to_string())?;
    let (mut live, mut key_bytes, mut value_bytes, mut expiring) = (0u64, 0u64, 0u64, 0u64);
    let mut from = range;
    loop {
        let batch = snapshot
            .scan(&from, false, STATS_SCAN_BATCH)
            .map_err(|e| format!("stats failed: {e}"))?;
        for entry in &batch {
            live += 1;
            key_bytes += entry.key.len() as u64;
            value_bytes += entry.value.size() as u64;
            expiring += u64::from(entry.expires_at.is_some());
        }
        match batch.last() {
            Some(last) if batch.len() == STATS_SCAN_BATCH => {
                let mut next = last.key.to_vec();
                next.push(0);
                from = tuplekv_engine::ByteRange {
                    start: next,
                    end: from.end,
                };
            }
            _ => break,
        }
    }
    drop(snapshot);
    let engine = db.stats();
    let version = db.current_versionstamp();
    if args.json {
        out_line(json!({
            "entries": live,
            "key_bytes": key_bytes,
            "value_bytes": value_bytes,
            "expiring": expiring,
            "versionstamp": version.to_string(),
            "map_keys": engine.keys,
            "versions": engine.versions,
        }))?;
    } else {
        out_line(format!("entries       {live}"))?;
        out_line(format!("key bytes     {key_bytes}"))?;
        out_line(format!("value bytes   {value_bytes}"))?;
        out_line(format!("expiring      {expiring}"))?;
        out_line(format!("versionstamp  {version}"))?;
        out_line(format!(
            "map keys      {} (with deleted ones not yet reclaimed)",
            engine.keys
        ))?;
        out_line(format!("versions      {}", engine.versions))?;
    }
    db.close()
        .map_err(|e| format!("closing the database failed: {e}"))
}

/// Entries `stats` reads per scan of its snapshot.
const STATS_SCAN_BATCH: usize = 1000;
