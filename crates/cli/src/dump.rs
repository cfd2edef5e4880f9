//! `tuplekv dump` and `tuplekv load`: a store as newline-delimited JSON, one entry per line
//! in key order (the format is in `entry.rs`).
//!
//! `dump` reads one snapshot, so the file is one consistent state. `--output FILE` is
//! written beside the target and renamed over it at the end, so a failed dump leaves no
//! half-written file.
//!
//! `load` reads and checks the whole file before it writes anything: a malformed line, a key
//! or value over the store's limits, or a key given twice is refused with its line number
//! and nothing is written. Into a directory that does not exist yet (or is empty) it loads
//! into a fresh directory beside it and renames that into place once everything is
//! committed and synced, so a failure never leaves a half-loaded database there. Into an
//! existing database or a server it writes commits of up to `MUTATIONS_MAX` entries; an
//! I/O failure part way leaves the commits made before it.
//!
//! Versionstamps: the store assigns each commit its own versionstamp and has no way to
//! write an entry at a given one, so a loaded entry gets a new stamp. What `load` keeps is
//! their order and grouping: entries are committed in the order of their dumped stamps, and
//! entries that shared a stamp (one atomic commit) share one again unless the group is too
//! large for one commit. `dump --omit-versionstamps` writes files that compare equal across
//! a dump → load → dump round trip. Deadlines (`expires_at`) are kept as absolute times: an
//! entry whose deadline has passed by load time is absent afterwards, as it would have been.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tuplekv_engine::limits::{MUTATIONS_MAX, TOTAL_KEY_SIZE_MAX, TOTAL_MUTATION_SIZE_MAX};
use tuplekv_engine::{
    AtomicWrite, Expiry, Key, KeyBytes, Mutation, MutationKind, ReadView, Selector, Store,
    Versionstamp,
};

use crate::entry::{ParsedEntry, entry_from_json, entry_to_json};
use crate::keys::format_key;
use crate::target::{Create, Opened, TargetArgs, check_database_dir, open_dir, with_store};

/// Entries `dump` reads from its snapshot per scan.
const DUMP_SCAN_BATCH: usize = 1000;

/// Arguments of `tuplekv dump`.
#[derive(Debug, Args)]
pub(crate) struct DumpArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Write to this file instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Leave out the versionstamps (`load` assigns new ones anyway), so dumps of the same
    /// data compare equal.
    #[arg(long)]
    omit_versionstamps: bool,
}

/// Arguments of `tuplekv load`.
#[derive(Debug, Args)]
pub(crate) struct LoadArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The newline-delimited JSON file `dump` wrote.
    file: PathBuf,
}

/// A progress bar on stderr when it is a terminal; hidden in a pipe.
fn progress(total: Option<u64>, what: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    match total {
        Some(n) => {
            let bar = ProgressBar::new(n);
            if let Ok(style) =
                ProgressStyle::with_template("{msg} {wide_bar} {pos}/{len} entries ({eta})")
            {
                bar.set_style(style);
            }
            bar.set_message(what);
            bar
        }
        None => {
            let bar = ProgressBar::new_spinner();
            if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {pos} entries") {
                bar.set_style(style);
            }
            bar.set_message(what);
            bar
        }
    }
}

/// Runs `tuplekv dump`.
pub(crate) fn dump(args: DumpArgs) -> Result<(), String> {
    let opened = args.target.open(Create::No)?;
    match &args.output {
        None => {
            let stdout = std::io::stdout().lock();
            let mut out = BufWriter::new(stdout);
            write_dump(&opened, &mut out, args.omit_versionstamps)?;
            out.flush()
                .map_err(|e| format!("cannot write to stdout: {e}"))?;
        }
        Some(path) => {
            let tmp = sibling(path, "dump");
            let result = File::create(&tmp)
                .map_err(|e| format!("cannot create {}: {e}", tmp.display()))
                .and_then(|file| {
                    let mut out = BufWriter::new(file);
                    write_dump(&opened, &mut out, args.omit_versionstamps)?;
                    let file = out
                        .into_inner()
                        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
                    file.sync_all()
                        .map_err(|e| format!("cannot sync {}: {e}", tmp.display()))
                })
                .and_then(|()| {
                    std::fs::rename(&tmp, path)
                        .map_err(|e| format!("cannot move the dump to {}: {e}", path.display()))
                });
            if result.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            result?;
        }
    }
    opened.close()
}

/// Writes every entry of one snapshot of `opened`, in key order.
fn write_dump(
    opened: &Opened,
    out: &mut impl Write,
    omit_versionstamps: bool,
) -> Result<(), String> {
    let bar = progress(None, "dumping");
    let range = Selector::prefix(&Key::empty())
        .byte_range()
        .map_err(|e| e.to_string())?;
    with_store!(opened, |s| {
        let snapshot = s.snapshot();
        let mut from = range;
        loop {
            let batch = snapshot
                .scan(&from, false, DUMP_SCAN_BATCH)
                .map_err(|e| format!("dump failed: {e}"))?;
            for entry in &batch {
                let key = entry
                    .decoded_key()
                    .map_err(|e| format!("a stored key is not a valid tuple: {e}"))?;
                let mut json = entry_to_json(&key, entry);
                if let Some(object) = json.as_object_mut().filter(|_| omit_versionstamps) {
                    object.remove("versionstamp");
                }
                writeln!(out, "{json}").map_err(|e| format!("cannot write the dump: {e}"))?;
                bar.inc(1);
            }
            match batch.last() {
                Some(last) if batch.len() == DUMP_SCAN_BATCH => {
                    let mut next = last.key.to_vec();
                    next.push(0);
                    from.start = next;
                }
                _ => break,
            }
        }
        Ok::<(), String>(())
    })?;
    bar.finish_and_clear();
    Ok(())
}

/// A path beside `path` for a temporary copy.
fn sibling(path: &Path, what: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "tuplekv".into());
    path.with_file_name(format!(".{name}.{what}-{}.tmp", std::process::id()))
}

/// One checked line of a load file.
struct LoadEntry {
    line: usize,
    key: KeyBytes,
    parsed: ParsedEntry,
}

/// Reads and checks every line of `file`: nothing is written before this succeeds.
fn read_load_file(file: &Path) -> Result<Vec<LoadEntry>, String> {
    let shown = file.display();
    let reader = BufReader::new(File::open(file).map_err(|e| format!("cannot open {shown}: {e}"))?);
    let mut entries = Vec::new();
    let mut seen: HashMap<KeyBytes, usize> = HashMap::new();
    for (i, line) in reader.lines().enumerate() {
        let number = i + 1;
        let line = line.map_err(|e| format!("{shown}:{number}: cannot read: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let parsed = entry_from_json(&line).map_err(|e| format!("{shown}:{number}: {e}"))?;
        let key: KeyBytes = tuplekv_engine::codec::encode_key(&parsed.key).into();
        let single = AtomicWrite {
            mutations: vec![set_mutation(&key, &parsed)],
            ..AtomicWrite::default()
        };
        if parsed.key.is_empty() {
            return Err(format!(
                "{shown}:{number}: the empty key [] cannot be written"
            ));
        }
        single
            .validate()
            .map_err(|e| format!("{shown}:{number}: {}: {e}", format_key(&parsed.key)))?;
        if let Some(first) = seen.insert(key.clone(), number) {
            return Err(format!(
                "{shown}:{number}: key {} is already on line {first}",
                format_key(&parsed.key)
            ));
        }
        entries.push(LoadEntry {
            line: number,
            key,
            parsed,
        });
    }
    Ok(entries)
}

fn set_mutation(key: &KeyBytes, parsed: &ParsedEntry) -> Mutation {
    Mutation {
        key: key.clone(),
        kind: MutationKind::Set {
            value: parsed.value.clone(),
            expiry: parsed.expires_at.map(Expiry::At),
        },
    }
}

/// The commits `load` makes: entries in the order of their dumped versionstamps (entries
/// without one last, in file order), one commit per stamp where it fits the limits.
fn plan_commits(mut entries: Vec<LoadEntry>) -> Vec<AtomicWrite> {
    entries.sort_by_key(|e| {
        (
            e.parsed.versionstamp.is_none(),
            e.parsed.versionstamp,
            e.line,
        )
    });
    let mut writes = Vec::new();
    let mut current = AtomicWrite::default();
    let (mut total, mut total_keys) = (0usize, 0usize);
    let mut stamp: Option<Option<Versionstamp>> = None;
    for entry in entries {
        let m = set_mutation(&entry.key, &entry.parsed);
        let size = m.kind.value_size().unwrap_or(0);
        // How the engine counts an operation's size (see `AtomicWrite::validate`).
        let adds = 2 * m.key.len() + size;
        // A new stamp starts a commit; so does the first entry without one (those are
        // batched together, never added to the last stamped group).
        let new_group = stamp.is_some_and(|s| s != entry.parsed.versionstamp);
        let full = current.mutations.len() == MUTATIONS_MAX
            || total + adds > TOTAL_MUTATION_SIZE_MAX
            || total_keys + m.key.len() > TOTAL_KEY_SIZE_MAX;
        if !current.mutations.is_empty() && (new_group || full) {
            writes.push(std::mem::take(&mut current));
            (total, total_keys) = (0, 0);
        }
        stamp = Some(entry.parsed.versionstamp);
        total += adds;
        total_keys += m.key.len();
        current.mutations.push(m);
    }
    if !current.mutations.is_empty() {
        writes.push(current);
    }
    writes
}

/// Commits `writes` to `store`, advancing `bar` by entries.
fn commit_all<S: Store>(
    store: &S,
    writes: Vec<AtomicWrite>,
    bar: &ProgressBar,
) -> Result<(), String> {
    let count = writes.len();
    for (i, write) in writes.into_iter().enumerate() {
        let n = write.mutations.len() as u64;
        let result = store
            .commit(write)
            .map_err(|e| format!("load failed at commit {} of {count}: {e}", i + 1))?;
        if !result.is_committed() {
            return Err(format!(
                "load failed at commit {} of {count}: it conflicted",
                i + 1
            ));
        }
        bar.inc(n);
    }
    Ok(())
}

/// Runs `tuplekv load`.
pub(crate) fn load(args: LoadArgs) -> Result<(), String> {
    let entries = read_load_file(&args.file)?;
    let count = entries.len();
    let writes = plan_commits(entries);
    let bar = progress(Some(count as u64), "loading");
    match &args.target.path {
        Some(dir) if is_new_dir(dir)? => load_into_new_dir(dir, writes, &bar)?,
        _ => {
            let opened = args.target.open(Create::No)?;
            with_store!(&opened, |s| commit_all(s, writes, &bar))?;
            opened.close()?;
        }
    }
    bar.finish_and_clear();
    crate::data::out_line(format!("loaded {count} entries"))
}

/// Whether `dir` is missing or an empty directory (so `load` builds it aside and moves it
/// in); an error if it is neither that nor a database.
fn is_new_dir(dir: &Path) -> Result<bool, String> {
    check_database_dir(dir, Create::IfMissing)?;
    Ok(check_database_dir(dir, Create::No).is_err())
}

fn load_into_new_dir(
    dir: &Path,
    writes: Vec<AtomicWrite>,
    bar: &ProgressBar,
) -> Result<(), String> {
    let tmp = sibling(dir, "load");
    let built = open_dir(&tmp, Create::IfMissing).and_then(|db| {
        commit_all(&db, writes, bar)?;
        db.close()
            .map_err(|e| format!("closing the loaded database failed: {e}"))
    });
    let moved = built.and_then(|()| {
        if dir.exists() {
            // Empty (checked before): make room for the rename.
            std::fs::remove_dir(dir)
                .map_err(|e| format!("cannot replace {}: {e}", dir.display()))?;
        }
        std::fs::rename(&tmp, dir)
            .map_err(|e| format!("cannot move the loaded database to {}: {e}", dir.display()))
    });
    if moved.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    moved
}
