//! Recovery: opening a database directory. Locks it, loads the newest checkpoint, replays the
//! log segments above it, cuts a torn tail, numbers new commits above every version that may
//! have been handed out, and opens the newest segment for appending. Returns the live entries
//! for the store to load, and the [`Wal`]; it knows nothing of the in-memory store.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::fs::{FileSystem, WritableFile};
use super::record::{self, Frame, FrameWriter, Payload};
use super::wal::{Segment, Wal};
use super::{
    Durability, RecoveryReport, VERSIONS_RESERVED_AHEAD, checkpoint, corrupt, io_error, numbered,
    parse_numbered, read_file,
};
use crate::error::Error;
use crate::key_bytes::KeyBytes;
use crate::limits::VERSION_MAX;
use crate::value::Versionstamp;
use crate::version::{Version, now_ms};

/// How to open a log: what recovery needs of the database's options.
pub(crate) struct LogOptions {
    pub(crate) fs: Arc<dyn FileSystem>,
    pub(crate) durability: Durability,
    pub(crate) checkpoint_after: u64,
}

/// What [`recover`] hands to the database.
pub(crate) struct Recovered {
    /// The live entries, in key order.
    pub(crate) entries: Vec<(KeyBytes, Version)>,
    /// The version new commits number above.
    pub(crate) last: u64,
    pub(crate) wal: Wal,
    /// The directory lock, held while the database is open.
    pub(crate) lock: Box<dyn Send + Sync>,
    pub(crate) report: RecoveryReport,
}

/// The state being rebuilt by recovery: newest value per key.
#[derive(Default)]
struct Rebuilt {
    entries: HashMap<KeyBytes, Version>,
    last: u64,
    /// The highest reservation read: versions up to it may have been handed out.
    reserved: u64,
}

impl Rebuilt {
    /// Applies one log payload read at `offset` of `path`; `floor` is the checkpoint's
    /// version. Returns whether it was a commit above the floor.
    fn apply(
        &mut self,
        payload: Payload,
        path: &Path,
        offset: usize,
        floor: u64,
    ) -> Result<bool, Error> {
        match payload {
            Payload::Commit { version, .. } if version > VERSION_MAX => {
                let reason = format!("version {version} is above the last possible {VERSION_MAX}");
                Err(corrupt(path, offset, reason))
            }
            // A batch at `VERSION_MAX` reserves up to `VERSIONS_RESERVED_AHEAD` beyond it.
            Payload::Reserved { upto } if upto > VERSION_MAX + VERSIONS_RESERVED_AHEAD => {
                let reason = format!("a reservation up to {upto}, beyond any a log writes");
                Err(corrupt(path, offset, reason))
            }
            Payload::Commit { version, .. } if version <= floor => Ok(false),
            Payload::Commit { version, writes } => {
                if version <= self.last {
                    let reason = format!("commit version {version} does not follow {}", self.last);
                    return Err(corrupt(path, offset, reason));
                }
                self.last = version;
                for (key, write) in writes {
                    match write {
                        Some((value, expires_at)) => {
                            let value = Some(value);
                            let version = Version {
                                version,
                                value,
                                expires_at,
                            };
                            self.entries.insert(key, version);
                        }
                        None => {
                            self.entries.remove(&key);
                        }
                    }
                }
                Ok(true)
            }
            Payload::Synced { .. } => Ok(false),
            Payload::Reserved { upto } => {
                self.reserved = self.reserved.max(upto);
                Ok(false)
            }
            _ => Err(corrupt(path, offset, "checkpoint frame in a log segment")),
        }
    }
}

/// Opens (or creates) the database directory `dir`: locks it, loads the newest checkpoint,
/// replays the log, cuts a torn tail, and opens the newest segment for appending.
pub(crate) fn recover(dir: &Path, options: &LogOptions) -> Result<Recovered, Error> {
    let started = Instant::now();
    let fs = options.fs.as_ref();
    fs.create_dir_all(dir)
        .map_err(|e| io_error("creating directory", dir, &e))?;
    let lock = lock(fs, dir)?;
    let (checkpoints, segments) = list(fs, dir)?;
    let mut report = RecoveryReport::default();
    let mut state = Rebuilt::default();
    let floor = load_newest_checkpoint(fs, dir, &checkpoints, &mut state, &mut report)?;
    let replayed = replay(fs, dir, &segments, floor, &mut state, &mut report)?;
    let last = state
        .last
        .max(segments.last().map_or(0, |b| b.saturating_sub(1)));
    let (mut segment, last) = open_tail(fs, dir, &segments, replayed.tail_len, last)?;
    let last = number_above_reservation(&mut segment, state.reserved, last)?;
    segment.since_checkpoint = replayed.log_bytes;
    segment.older = segments
        .iter()
        .map(|&b| (b, dir.join(numbered("wal", b, "log"))))
        .filter(|(_, p)| *p != segment.path)
        .collect();
    let wal = Wal::new(
        dir,
        Arc::clone(&options.fs),
        options.durability,
        options.checkpoint_after,
        segment,
    );
    let now = now_ms();
    let mut entries: Vec<(KeyBytes, Version)> = state
        .entries
        .into_iter()
        .filter(|(_, v)| v.expires_at.is_none_or(|d| d > now))
        .collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    report.last_versionstamp = Versionstamp::from_version(last);
    report.elapsed = started.elapsed();
    Ok(Recovered {
        entries,
        last,
        wal,
        lock,
        report,
    })
}

/// How long opening waits for a directory lock that another handle holds before it reports
/// [`Error::Locked`]. The lock is an advisory lock on an open file, and a child process this
/// process starts holds a copy of that file from `fork` until its `exec` closes it: a handle
/// closed at that moment stays locked for that short while, so an open right after a close
/// (in a process that also starts processes) would fail now and then without this wait.
pub(crate) const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Takes the directory's advisory lock: one open handle per directory. Waits up to
/// [`LOCK_WAIT`] for a holder to let go.
fn lock(fs: &dyn FileSystem, dir: &Path) -> Result<Box<dyn Send + Sync>, Error> {
    let started = Instant::now();
    loop {
        match fs.lock_dir(dir) {
            Ok(lock) => return Ok(lock),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if started.elapsed() >= LOCK_WAIT {
                    return Err(Error::Locked {
                        path: dir.to_path_buf(),
                    });
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => return Err(io_error("locking", dir, &e)),
        }
    }
}

/// The versions of the checkpoints and the first versions of the segments in `dir`, each
/// sorted. Removes checkpoints a crash interrupted before they were published.
fn list(fs: &dyn FileSystem, dir: &Path) -> Result<(Vec<u64>, Vec<u64>), Error> {
    let names = fs.list(dir).map_err(|e| io_error("listing", dir, &e))?;
    let mut checkpoints = Vec::new();
    let mut segments = Vec::new();
    for name in &names {
        if let Some(v) = parse_numbered(name, "checkpoint", "ckpt") {
            checkpoints.push(v);
        } else if let Some(v) = parse_numbered(name, "wal", "log") {
            // Segments start at a published version + 1; version 0 is never one.
            if v == 0 || v > VERSION_MAX {
                let reason = format!(
                    "a log segment named as starting at version {v} (the first is 1, the last \
                     possible {VERSION_MAX})"
                );
                return Err(corrupt(&dir.join(name), 0, reason));
            }
            segments.push(v);
        } else if parse_numbered(name, "checkpoint", "tmp").is_some() {
            let path = dir.join(name);
            fs.remove(&path)
                .map_err(|e| io_error("removing", &path, &e))?;
        }
    }
    checkpoints.sort_unstable();
    segments.sort_unstable();
    Ok((checkpoints, segments))
}

/// Loads the newest of `checkpoints` into `state`; returns its version (0 without one).
fn load_newest_checkpoint(
    fs: &dyn FileSystem,
    dir: &Path,
    checkpoints: &[u64],
    state: &mut Rebuilt,
    report: &mut RecoveryReport,
) -> Result<u64, Error> {
    let Some(&named) = checkpoints.last() else {
        return Ok(0);
    };
    let path = dir.join(numbered("checkpoint", named, "ckpt"));
    if named > VERSION_MAX {
        let reason = format!("a checkpoint named as at version {named}, above {VERSION_MAX}");
        return Err(corrupt(&path, 0, reason));
    }
    let (version, count, bytes) = checkpoint::load(fs, &path, &mut state.entries)?;
    if version != named {
        return Err(corrupt(
            &path,
            8,
            "checkpoint version does not match its name",
        ));
    }
    state.last = version;
    report.checkpoint = Some(Versionstamp::from_version(version));
    report.checkpoint_entries = count;
    report.bytes_read += bytes;
    Ok(version)
}

/// What replaying the segments found.
struct Replayed {
    /// The good length of the newest segment (`None`: there is none, or it holds no
    /// records).
    tail_len: Option<usize>,
    /// Log bytes read.
    log_bytes: u64,
}

/// Replays every segment above the checkpoint at `floor` into `state`, checking that no
/// segment is missing.
fn replay(
    fs: &dyn FileSystem,
    dir: &Path,
    segments: &[u64],
    floor: u64,
    state: &mut Rebuilt,
    report: &mut RecoveryReport,
) -> Result<Replayed, Error> {
    // `covered`: every version ever published up to it is in the checkpoint or the segments
    // read so far. A segment's first version is the published version + 1 when it was
    // started, so a segment starting above `covered + 1` means a file is missing.
    let mut covered = floor;
    let mut replayed = Replayed {
        tail_len: None,
        log_bytes: 0,
    };
    for (i, &base) in segments.iter().enumerate() {
        let next = segments.get(i + 1).copied();
        let path = dir.join(numbered("wal", base, "log"));
        if next.is_some_and(|n| n <= floor + 1) {
            // Wholly below the checkpoint: left by a checkpoint interrupted before it deleted
            // it. Not read (it may hold the frames of a batch that failed).
            continue;
        }
        if base > covered + 1 {
            return Err(corrupt(
                &path,
                0,
                format!(
                    "the log segment starts at version {base} but the checkpoint and the \
                     segments before it end at version {covered}: a log segment or \
                     checkpoint is missing"
                ),
            ));
        }
        let bytes = read_file(fs, &path)?;
        report.bytes_read += bytes.len() as u64;
        replayed.log_bytes += bytes.len() as u64;
        report.segments += 1;
        covered = covered.max(base - 1);
        let good = replay_segment(&path, &bytes, base, next.is_none(), floor, state, report)?;
        covered = covered.max(state.last);
        if next.is_none() {
            replayed.tail_len = good;
        }
    }
    Ok(replayed)
}

/// Replays one segment's `bytes` (first version `base`; `newest`: the last segment) into
/// `state`. Returns the length of its good records, or `None` if it holds none (created but
/// its header not, or not wholly, on disk when the process died). In the newest segment a
/// torn tail is cut (reported); anything else damaged is [`Error::Corrupt`].
fn replay_segment(
    path: &Path,
    bytes: &[u8],
    base: u64,
    newest: bool,
    floor: u64,
    state: &mut Rebuilt,
    report: &mut RecoveryReport,
) -> Result<Option<usize>, Error> {
    let expected = record::file_header(record::LOG_MAGIC, base);
    if bytes.len() <= record::FILE_HEADER_LEN
        && (expected.starts_with(bytes) || record::all_zero(bytes))
    {
        return Ok(None);
    }
    if record::parse_file_header(record::LOG_MAGIC, bytes) != Some(base) {
        let reason = "not a log segment of this database (bad header)";
        return Err(corrupt(path, 0, reason));
    }
    let mut at = record::FILE_HEADER_LEN;
    while at < bytes.len() {
        let damage = match record::read_frame(&bytes[at..]) {
            Frame::Valid { payload, len } => match record::decode_payload(payload) {
                Some(p) => {
                    if let Payload::Commit { version, .. } = &p
                        && *version < base
                    {
                        let reason = format!(
                            "commit version {version} is below the segment's first version \
                             {base}"
                        );
                        return Err(corrupt(path, at, reason));
                    }
                    if state.apply(p, path, at, floor)? {
                        report.records_replayed += 1;
                    }
                    at += len;
                    continue;
                }
                None => "malformed commit record",
            },
            Frame::Truncated => "record cut short",
            Frame::Damaged(reason) => reason,
        };
        cut_or_refuse(path, bytes, at, damage, newest, report)?;
        break;
    }
    Ok(Some(at))
}

/// Decides what damage at `at` of a segment is. A tail of zeros is unused space (cut
/// silently). In the newest segment, records after the damage may be what reached the disk
/// of a write cut by a crash (an in-place write lands page by page, in any order): a torn
/// tail, cut and reported, unless a `synced` mark after the damage says the damaged bytes had
/// been on stable storage. Elsewhere, any damage is real: [`Error::Corrupt`].
fn cut_or_refuse(
    path: &Path,
    bytes: &[u8],
    at: usize,
    damage: &str,
    newest: bool,
    report: &mut RecoveryReport,
) -> Result<(), Error> {
    if record::all_zero(&bytes[at..]) {
        return Ok(());
    }
    let real = !newest || record::durable_mark_after(&bytes[at..], at as u64).is_some();
    if real {
        let reason = format!("{damage}, with valid records after it");
        return Err(corrupt(path, at, reason));
    }
    log::warn!(
        "tuplekv: {}: cutting a torn tail of {} bytes at offset {at} ({damage})",
        path.display(),
        bytes.len() - at
    );
    report.truncated = Some((path.to_path_buf(), at as u64, (bytes.len() - at) as u64));
    Ok(())
}

/// Opens the newest segment for appending, cut to its good length (`tail_len`), or starts
/// one at `last + 1` if there is none or it holds no records. Returns it with the version new
/// commits number above.
fn open_tail(
    fs: &dyn FileSystem,
    dir: &Path,
    segments: &[u64],
    tail_len: Option<usize>,
    last: u64,
) -> Result<(Segment, u64), Error> {
    let base = segments.last().copied().unwrap_or(last + 1);
    let path = dir.join(numbered("wal", base, "log"));
    let mut file = fs
        .open_append(&path, false)
        .map_err(|e| io_error("opening", &path, &e))?;
    let len = match tail_len {
        Some(len) if len >= record::FILE_HEADER_LEN => {
            let len = len as u64;
            if fs.len(&path).map_err(|e| io_error("reading", &path, &e))? != len {
                file.set_len(len)
                    .and_then(|()| file.sync_data())
                    .map_err(|e| io_error("cutting the torn tail of", &path, &e))?;
            }
            len
        }
        _ => {
            let created = file
                .set_len(0)
                .and_then(|()| file.write_all(&record::file_header(record::LOG_MAGIC, base)))
                .and_then(|()| file.sync_data())
                .and_then(|()| fs.sync_dir(dir));
            if let Err(e) = created {
                undo_write(file.as_mut(), 0, &path);
                return Err(io_error("creating log segment", &path, &e));
            }
            record::FILE_HEADER_LEN as u64
        }
    };
    Ok((new_segment(file, path, len), last))
}

/// A segment appended to from `len` on, all of it durable.
fn new_segment(file: Box<dyn WritableFile>, path: PathBuf, len: u64) -> Segment {
    Segment {
        file,
        path,
        len,
        synced: len,
        allocated: len,
        stopped: None,
        reserved: 0,
        since_checkpoint: 0,
        older: Vec::new(),
    }
}

/// Versions up to `reserved` may have been handed out by commits a power cut lost. If that
/// is above `last`, appends an empty commit at `reserved` (synced), so new commits number
/// above it and the log's versions stay without a gap across a segment started next.
/// Returns the version new commits number above.
fn number_above_reservation(segment: &mut Segment, reserved: u64, last: u64) -> Result<u64, Error> {
    segment.reserved = reserved;
    if reserved <= last {
        return Ok(last);
    }
    let mut frames = FrameWriter::default();
    frames.synced(segment.len);
    frames.commit(reserved, std::iter::empty());
    let written = segment
        .file
        .write_all(&frames.buf)
        .and_then(|()| segment.file.sync_data());
    if let Err(e) = written {
        // Not durable, and after a failed sync never to be trusted: cut it off, or the next
        // open would read it back from the page cache as if it were on disk.
        undo_write(segment.file.as_mut(), segment.len, &segment.path);
        return Err(io_error("appending to", &segment.path, &e));
    }
    segment.len += frames.buf.len() as u64;
    segment.synced = segment.len;
    segment.allocated = segment.len;
    Ok(reserved)
}

/// Cuts `file` back to `len` after a write or sync that failed during recovery. Best effort:
/// recovery reads a cut-off tail the same as one never written.
fn undo_write(file: &mut dyn WritableFile, len: u64, path: &Path) {
    if let Err(e) = file.set_len(len) {
        log::error!(
            "tuplekv: could not cut {} back after a failed write: {e}",
            path.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(payload: Payload) -> Result<bool, Error> {
        Rebuilt::default().apply(payload, Path::new("wal"), 16, 0)
    }

    #[test]
    fn versions_are_accepted_up_to_the_limit_and_refused_past_it() {
        let commit = |version| Payload::Commit {
            version,
            writes: Vec::new(),
        };
        assert!(apply(commit(VERSION_MAX)).is_ok());
        assert!(matches!(
            apply(commit(VERSION_MAX + 1)),
            Err(Error::Corrupt { .. })
        ));
        let most = VERSION_MAX + VERSIONS_RESERVED_AHEAD;
        assert!(apply(Payload::Reserved { upto: most }).is_ok());
        assert!(matches!(
            apply(Payload::Reserved { upto: most + 1 }),
            Err(Error::Corrupt { .. })
        ));
    }
}
