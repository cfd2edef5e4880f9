//! `tuplekv dump` and `tuplekv load`: a store as newline-delimited JSON, one entry per line
//! in key order (the format is in `entry.rs`).
//!
//! `dump` reads one snapshot, so the file is one consistent state. `--output FILE` is
//! written beside the target and renamed over it at the end, so a failed dump leaves no
//! half-written file.
//!
//! `load` reads and checks the whole file before it writes anything: a malformed line, a key
//! or value over the store's limits, or a key given twice is refused with its line number
//! and nothing is written.
//!
//! Into a directory that does not exist yet (or is empty), `load` builds the database with
//! [`create_database`] (all or nothing: a temporary directory renamed into place), and every
//! entry keeps its dumped versionstamp and deadline, so dump → load → dump gives the same
//! file. Entries without a versionstamp get new ones above the highest in the file, in
//! batches of one commit's size. A versionstamp this engine could not have made (its last two
//! bytes not zero, as a server other than tuplekv may give) cannot be kept: then every entry
//! is renumbered in the order of its dumped versionstamp, as a load into an existing
//! database would, and a note on stderr says so.
//!
//! Into an existing database or a server the store assigns each commit its own versionstamp
//! and has no way to write an entry at a given one, so loaded entries get new stamps. What
//! `load` keeps is their order and grouping: entries are committed in the order of their
//! dumped stamps, and entries that shared a stamp (one atomic commit) share one again unless
//! the group is too large for one commit (`MUTATIONS_MAX` entries and the size limits). An
//! I/O failure part way leaves the commits made before it. `dump --omit-versionstamps`
//! writes files that compare equal across such a load. Deadlines (`expires_at`) are kept as
//! absolute times everywhere: an entry whose deadline has passed by load time is absent
//! afterwards, as it would have been.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use clap::Args;
use indicatif::ProgressBar;
use tuplekv_engine::durable::create_database;
use tuplekv_engine::limits::{
    MUTATIONS_MAX, TOTAL_KEY_SIZE_MAX, TOTAL_MUTATION_SIZE_MAX, VERSION_MAX,
};
use tuplekv_engine::{
    AtomicWrite, Entry, Error, Expiry, Key, KeyBytes, Mutation, MutationKind, ReadView, Selector,
    Store, Versionstamp,
};

use crate::data_dir::{Create, DirState, dir_state};
use crate::entry::{ParsedEntry, entry_from_json, entry_to_json};
use crate::keys::format_key;
use crate::progress;
use crate::target::{Opened, TargetArgs, with_store};

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
    /// Leave out the versionstamps, so dumps of the same entries compare equal whatever
    /// commits wrote them (a load into an existing database or a server gives new ones).
    #[arg(long)]
    omit_versionstamps: bool,
}

/// Arguments of `tuplekv load` (what it keeps where: the module's summary, and `load --help`).
#[derive(Debug, Args)]
pub(crate) struct LoadArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The newline-delimited JSON file `dump` wrote; `-` reads it from stdin
    /// (`tuplekv dump --path A | tuplekv load --path B -`).
    file: PathBuf,
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
    let bar = progress::counter("entries dumped");
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
    let stdin = file == Path::new("-");
    let shown = if stdin {
        "stdin".to_owned()
    } else {
        file.display().to_string()
    };
    let reader: Box<dyn BufRead> = if stdin {
        Box::new(BufReader::new(std::io::stdin().lock()))
    } else {
        Box::new(BufReader::new(
            File::open(file).map_err(|e| format!("cannot open {shown}: {e}"))?,
        ))
    };
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

/// How `load` groups entries into commits: in the order of their dumped versionstamps
/// (entries without one last, in file order), one group per stamp where it fits one commit's
/// limits.
fn plan_groups(mut entries: Vec<LoadEntry>) -> Vec<Vec<LoadEntry>> {
    entries.sort_by_key(|e| {
        (
            e.parsed.versionstamp.is_none(),
            e.parsed.versionstamp,
            e.line,
        )
    });
    let mut groups = Vec::new();
    let mut current: Vec<LoadEntry> = Vec::new();
    let (mut total, mut total_keys) = (0usize, 0usize);
    for entry in entries {
        let key_len = entry.key.len();
        // How the engine counts an operation's size (see `AtomicWrite::validate`).
        let adds = 2 * key_len + entry.parsed.value.size();
        // A new stamp starts a commit; so does the first entry without one (those are
        // batched together, never added to the last stamped group).
        let new_group = current
            .last()
            .is_some_and(|last| last.parsed.versionstamp != entry.parsed.versionstamp);
        let full = current.len() == MUTATIONS_MAX
            || total + adds > TOTAL_MUTATION_SIZE_MAX
            || total_keys + key_len > TOTAL_KEY_SIZE_MAX;
        if !current.is_empty() && (new_group || full) {
            groups.push(std::mem::take(&mut current));
            (total, total_keys) = (0, 0);
        }
        total += adds;
        total_keys += key_len;
        current.push(entry);
    }
    if !current.is_empty() {
        groups.push(current);
    }
    groups
}

/// The commits `load` makes into an existing database or a server: one per group.
fn plan_commits(entries: Vec<LoadEntry>) -> Vec<AtomicWrite> {
    plan_groups(entries)
        .into_iter()
        .map(|group| AtomicWrite {
            mutations: group
                .iter()
                .map(|e| set_mutation(&e.key, &e.parsed))
                .collect(),
            ..AtomicWrite::default()
        })
        .collect()
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
    match &args.target.path {
        Some(dir) if matches!(dir_state(dir)?, DirState::Missing | DirState::Empty) => {
            load_into_new_dir(dir, &args.file, entries)?;
        }
        _ => {
            let opened = args.target.open(Create::No)?;
            let bar = progress::bar(count as u64, "loading");
            with_store!(&opened, |s| commit_all(s, plan_commits(entries), &bar))?;
            bar.finish_and_clear();
            opened.close()?;
        }
    }
    crate::data::out_line(format!("loaded {count} entries"))
}

/// Builds a new database in `dir` (missing or empty) holding `entries` with their
/// versionstamps (see the module's summary); `file` names the lines in errors.
fn load_into_new_dir(dir: &Path, file: &Path, entries: Vec<LoadEntry>) -> Result<(), String> {
    let NewDir {
        lines,
        entries,
        last,
        renumbered,
    } = stamp_for_new_dir(entries);
    let spinner = progress::spinner("writing the database");
    let written = create_database(dir, last, entries);
    spinner.finish_and_clear();
    written.map_err(|e| match e {
        Error::InvalidEntry { index, reason } => {
            let line = usize::try_from(index)
                .ok()
                .and_then(|i| lines.get(i))
                .map_or_else(String::new, |n| format!(":{n}"));
            format!("{}{line}: {reason}", file.display())
        }
        e => format!("load into {} failed: {e}", dir.display()),
    })?;
    if let Some(note) = renumbered {
        eprintln!("tuplekv: note: {note}");
    }
    Ok(())
}

/// The entries of a new database, in key order, with the versionstamps they get.
struct NewDir {
    /// The file line of each entry.
    lines: Vec<usize>,
    entries: Vec<Entry>,
    /// The highest versionstamp given: new commits number above it.
    last: Versionstamp,
    /// Why the dumped versionstamps could not be kept, if they could not.
    renumbered: Option<String>,
}

/// Whether this engine could have made `stamp` (so a new database can hold it).
fn keepable(stamp: Versionstamp) -> bool {
    let version = stamp.version();
    version > 0 && version <= VERSION_MAX && stamp == Versionstamp::from_version(version)
}

/// Gives each entry its versionstamp in a new database: its own where every dumped stamp
/// can be kept (entries without one get new stamps above them, a batch at a time);
/// otherwise new ones for all, a commit's group at a time in the order of the dumped ones.
fn stamp_for_new_dir(entries: Vec<LoadEntry>) -> NewDir {
    let foreign = entries.iter().find_map(|e| {
        e.parsed
            .versionstamp
            .filter(|s| !keepable(*s))
            .map(|s| (e.line, s))
    });
    let (kept, renumber): (Vec<LoadEntry>, Vec<LoadEntry>) = match foreign {
        None => entries
            .into_iter()
            .partition(|e| e.parsed.versionstamp.is_some()),
        Some(_) => (Vec::new(), entries),
    };
    let mut last = kept
        .iter()
        .filter_map(|e| e.parsed.versionstamp)
        .map(|s| s.version())
        .max()
        .unwrap_or(0);
    let mut stamped: Vec<(usize, Entry)> = kept
        .into_iter()
        .map(|e| {
            let stamp = e.parsed.versionstamp.unwrap_or(Versionstamp::ZERO);
            (e.line, new_entry(e, stamp))
        })
        .collect();
    for group in plan_groups(renumber) {
        last += 1;
        let stamp = Versionstamp::from_version(last);
        stamped.extend(group.into_iter().map(|e| (e.line, new_entry(e, stamp))));
    }
    stamped.sort_by(|a, b| a.1.key.cmp(&b.1.key));
    let (lines, entries) = stamped.into_iter().unzip();
    NewDir {
        lines,
        entries,
        last: Versionstamp::from_version(last),
        renumbered: foreign.map(|(line, stamp)| {
            format!(
                "versionstamps were not kept: line {line}'s {stamp} is not one tuplekv makes \
                 (its last two bytes are not zero), so every entry got a new one, in the \
                 order of the dumped ones"
            )
        }),
    }
}

/// The entry `e` becomes in a new database, at `versionstamp`.
fn new_entry(e: LoadEntry, versionstamp: Versionstamp) -> Entry {
    Entry {
        key: e.key,
        value: e.parsed.value,
        versionstamp,
        expires_at: e.parsed.expires_at,
    }
}
