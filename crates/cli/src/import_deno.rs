//! `tuplekv import-deno FILE.sqlite --path DIR`: moves a Deno app's local KV data (the SQLite
//! file `Deno.openKv(path)` keeps) into a new tuplekv database, unchanged: keys are already in
//! the same encoding, every value keeps its encoding and bytes (V8-serialized, raw bytes,
//! `Deno.KvU64`), and versionstamps and expiry deadlines are kept; new commits number above
//! Deno's last version. Written through
//! [`create_database`](tuplekv_engine::durable::create_database): into a temporary directory,
//! renamed into place once whole.
//!
//! Deno's file (as of Deno 2.x, `denokv_sqlite`): a table `kv (k blob primary key, v blob,
//! v_encoding integer, version integer, seq integer, expiration_ms integer)` without rowid,
//! where `v_encoding` is 1 for V8, 2 for a little-endian u64 and 3 for bytes, a versionstamp
//! is `version` as 8 big-endian bytes then two zero bytes, and `expiration_ms` is -1 for none;
//! `data_version (k = 0)` holds the last version. The `queue` tables are not imported (tuplekv
//! has no queue); their size is reported.

use std::path::{Path, PathBuf};

use clap::Args;
use rusqlite::{Connection, OpenFlags};
use tuplekv_engine::codec::decode_key;
use tuplekv_engine::durable::create_database;
use tuplekv_engine::{Entry, KeyBytes, Value, Versionstamp};

use crate::data_dir::check_new_target;
use crate::progress;

/// Deno's `v_encoding` for a V8-serialized value.
const ENCODING_V8: i64 = 1;
/// Deno's `v_encoding` for a `Deno.KvU64`, 8 bytes little-endian.
const ENCODING_LE64: i64 = 2;
/// Deno's `v_encoding` for a `Uint8Array`.
const ENCODING_BYTES: i64 = 3;
/// The columns of Deno's `kv` table this import reads.
const KV_COLUMNS: [&str; 5] = ["k", "v", "v_encoding", "version", "expiration_ms"];

/// Arguments of `tuplekv import-deno`.
#[derive(Debug, Args)]
pub(crate) struct ImportDenoArgs {
    /// Deno's KV SQLite file (the path given to `Deno.openKv`).
    file: PathBuf,
    /// The database directory to create (missing, or an empty directory).
    #[arg(long)]
    path: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// What was read from Deno's file.
struct DenoData {
    entries: Vec<Entry>,
    /// Deno's last version: new commits number above it.
    last: u64,
    /// Rows past their deadline, left out.
    expired: u64,
    /// Messages in Deno's queue tables, not imported.
    queued: u64,
}

/// Imports and prints how many entries moved over.
pub(crate) fn run(args: ImportDenoArgs) -> Result<(), String> {
    if !args.file.is_file() {
        return Err(format!("no such file: {}", args.file.display()));
    }
    check_new_target(&args.path)?;
    let data = read_deno(&args.file)?;
    let count = data.entries.len();
    let last = Versionstamp::from_version(data.last);
    let spinner = progress::spinner("writing the database");
    let written = create_database(&args.path, last, data.entries);
    spinner.finish_and_clear();
    written.map_err(|e| format!("cannot import {}: {e}", args.file.display()))?;
    if data.queued > 0 {
        eprintln!(
            "tuplekv: note: {} queued messages (kv.enqueue) were not imported: tuplekv has no \
             queue",
            data.queued
        );
    }
    if args.json {
        let line = serde_json::json!({
            "imported": count,
            "expired_skipped": data.expired,
            "queued_not_imported": data.queued,
            "last_versionstamp": last.to_string(),
            "path": args.path.display().to_string(),
        });
        println!("{line}");
    } else {
        println!(
            "imported {count} entries from {} into {} ({} expired skipped); new commits \
             number above {last}",
            args.file.display(),
            args.path.display(),
            data.expired
        );
    }
    Ok(())
}

/// Reads every live row of Deno's file.
fn read_deno(file: &Path) -> Result<DenoData, String> {
    let not_sqlite =
        |e: rusqlite::Error| format!("{} is not a readable SQLite file: {e}", file.display());
    let conn = open_read_only(file).map_err(not_sqlite)?;
    check_schema(&conn, file).map_err(|e| match e {
        Schema::Sqlite(e) => not_sqlite(e),
        Schema::NotDeno(message) => message,
    })?;
    let sql_err = |e: rusqlite::Error| format!("reading {}: {e}", file.display());
    // One read transaction: a Deno process writing meanwhile cannot mix two states.
    let snapshot = conn.unchecked_transaction().map_err(sql_err)?;
    let rows: u64 = snapshot
        .query_row("SELECT count(*) FROM kv", [], |r| r.get(0))
        .map_err(sql_err)?;
    let data_version: u64 = snapshot
        .query_row("SELECT version FROM data_version WHERE k = 0", [], |r| {
            r.get::<_, i64>(0)
        })
        .map_or(0, |v| u64::try_from(v).unwrap_or(0));
    let queued = count_queued(&snapshot);
    let bar = progress::bar(rows, "reading");
    let mut statement = snapshot
        .prepare("SELECT k, v, v_encoding, version, expiration_ms FROM kv ORDER BY k")
        .map_err(sql_err)?;
    let mut query = statement.query([]).map_err(sql_err)?;
    let now = now_ms();
    let mut data = DenoData {
        entries: Vec::new(),
        last: data_version,
        expired: 0,
        queued,
    };
    while let Some(row) = query.next().map_err(sql_err)? {
        bar.inc(1);
        let raw = RawRow {
            key: row.get(0).map_err(sql_err)?,
            value: row.get(1).map_err(sql_err)?,
            encoding: row.get(2).map_err(sql_err)?,
            version: row.get(3).map_err(sql_err)?,
            expiration_ms: row.get(4).map_err(sql_err)?,
        };
        let entry = raw
            .into_entry()
            .map_err(|e| format!("{}: {e}", file.display()))?;
        data.last = data.last.max(entry.versionstamp.version());
        if entry.expires_at.is_some_and(|d| d <= now) {
            data.expired += 1;
            continue;
        }
        data.entries.push(entry);
    }
    bar.finish_and_clear();
    Ok(data)
}

/// Opens `file` read-only. Deno keeps its file in WAL mode, and SQLite's WAL mode makes even
/// a read-only reader create `FILE-wal` and `FILE-shm` beside it (and leave them). Without a
/// `FILE-wal` no process has the file open (a clean close removes it) and it holds no commits
/// outside the main file, so it is opened `immutable`: no side files, no locks. With one, a
/// Deno process may be writing (or one stopped without a checkpoint): it is opened as a
/// normal reader, which reads the log too.
fn open_read_only(file: &Path) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut wal = file.as_os_str().to_owned();
    wal.push("-wal");
    if Path::new(&wal).exists() {
        return Connection::open_with_flags(file, flags);
    }
    let uri = format!("file:{}?immutable=1", uri_path(file));
    Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)
}

/// `path` escaped for a SQLite `file:` URI: every byte but unreserved ones and `/` as `%XX`.
fn uri_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = String::new();
    for &b in absolute.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Why a file's schema was refused.
enum Schema {
    /// SQLite could not read it (not a database file, say).
    Sqlite(rusqlite::Error),
    /// It is SQLite but not Deno KV: the message says what is missing.
    NotDeno(String),
}

/// Checks that `conn` has Deno's `kv` table with the columns read.
fn check_schema(conn: &Connection, file: &Path) -> Result<(), Schema> {
    let mut statement = conn
        .prepare("SELECT name FROM pragma_table_info('kv')")
        .map_err(Schema::Sqlite)?;
    let columns: Vec<String> = statement
        .query_map([], |r| r.get(0))
        .and_then(Iterator::collect)
        .map_err(Schema::Sqlite)?;
    let missing: Vec<&str> = KV_COLUMNS
        .into_iter()
        .filter(|c| !columns.iter().any(|have| have == c))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let what = if columns.is_empty() {
        "it has no `kv` table".to_owned()
    } else {
        format!("its `kv` table lacks {}", missing.join(", "))
    };
    Err(Schema::NotDeno(format!(
        "{} is a SQLite file but not a Deno KV database: {what}",
        file.display()
    )))
}

/// Messages in Deno's queue tables (0 if there are none, or no such tables).
fn count_queued(conn: &Connection) -> u64 {
    ["queue", "queue_running"]
        .iter()
        .map(|table| {
            conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
                r.get::<_, i64>(0)
            })
            .map_or(0, |n| u64::try_from(n).unwrap_or(0))
        })
        .sum()
}

/// One row of Deno's `kv` table, as stored.
struct RawRow {
    key: Vec<u8>,
    value: Vec<u8>,
    encoding: i64,
    version: i64,
    expiration_ms: i64,
}

impl RawRow {
    /// The entry this row is; an error naming the key if any column is not what Deno writes.
    fn into_entry(self) -> Result<Entry, String> {
        let key = decode_key(&self.key)
            .map_err(|e| format!("a key that does not decode ({e}): {}", hex(&self.key)))?;
        let at = |what: String| format!("key {key}: {what}");
        let value = match self.encoding {
            ENCODING_V8 => Value::V8(self.value.into()),
            ENCODING_BYTES => Value::Bytes(self.value.into()),
            ENCODING_LE64 => {
                let bytes: [u8; 8] =
                    self.value.as_slice().try_into().map_err(|_| {
                        at(format!("a u64 value of {} bytes, not 8", self.value.len()))
                    })?;
                Value::U64(u64::from_le_bytes(bytes))
            }
            other => return Err(at(format!("unknown value encoding {other}"))),
        };
        let version = u64::try_from(self.version)
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| at(format!("version {} is not a commit's", self.version)))?;
        // Deno writes -1 for no deadline.
        let expires_at = u64::try_from(self.expiration_ms).ok().filter(|&d| d > 0);
        Ok(Entry {
            key: KeyBytes::from(self.key),
            value,
            versionstamp: Versionstamp::from_version(version),
            expires_at,
        })
    }
}

/// `bytes` as `0x` and hex digits, for a key that cannot be shown as a tuple.
fn hex(bytes: &[u8]) -> String {
    let digits: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("0x{digits}")
}

/// The time now, in Unix milliseconds (0 if the clock is before 1970).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
