//! Durability: a write-ahead log with group commit, background checkpoints, and recovery on
//! open. See [`Database::open`](crate::Database::open).
//!
//! # Layout of a database directory
//! - `LOCK`: held with an advisory lock while a process has the database open.
//! - `wal-<first version, 20 digits>.log`: log segments; one frame per commit (`record.rs`).
//!   The newest segment is the one being appended to. A segment is started at the published
//!   version + 1, after the one before it is synced, so the segments and the newest
//!   checkpoint cover every published version without a gap.
//! - `checkpoint-<version, 20 digits>.ckpt`: every live entry at one version. Written to a
//!   `.tmp` file, synced, then renamed, so a checkpoint file is either whole or absent; a
//!   `.tmp` file is removed as soon as its checkpoint fails.
//!
//! # The parts
//! - `wal.rs`: the log's files: appends a batch of frames, syncs, reserves versions, starts
//!   new segments, and stops for good after a failed sync.
//! - `checkpoint.rs`: writes a checkpoint from an iterator of live entries, loads one.
//! - `recover.rs`: opens a directory: checkpoint, replay, torn tail, reservation.
//! - `backup.rs`: new directories written whole: backups, imports (and why copying a live
//!   directory by hand is not safe).
//! - `record.rs`: the frame format; `fs.rs`: the file-system seam and its fault-injecting
//!   twin.
//!
//! None of them knows the in-memory store: the store's group commit (`group_commit.rs`)
//! applies commits to memory unpublished, hands their frames to the log in batches (one
//! `write` and one `fdatasync` per batch, shared by every committer that arrived meanwhile),
//! publishes a batch once the log has it, and rolls it back from memory if it failed: a
//! commit is acknowledged only once it is on disk, and readers never see one that is not.
//!
//! Versions are reserved on disk before they are handed out: a batch whose newest version is
//! above the durable reservation first writes a `reserved` mark [`VERSIONS_RESERVED_AHEAD`]
//! further on and syncs it with the batch (also in [`Durability::Buffered`], once per that
//! many versions). Recovery numbers new commits above the reservation, so a commit lost in a
//! power cut never has its versionstamp given to a later one.
//!
//! # Failures
//! - A failed *write* (a full disk) is cut back to the last whole frame (and the cut synced);
//!   the segment stays in use and commits resume when space returns.
//! - A failed *sync* stops the log for good (fail-stop, as PostgreSQL does): after a failed
//!   `fsync`, Linux may have dropped the unsynced pages and a retried `fsync` succeeds without
//!   them, so later commits could be durable while earlier ones are lost. The failed batch's
//!   frames are cut off the file, its committers (and those applied after it) get the error,
//!   and from then on every write fails with [`Error::Io`] naming the failed sync, as do
//!   [`Database::sync`](crate::Database::sync), checkpoints and closing. Reads go on.
//!   Reopening the directory recovers what is durable.
//! - A segment that cannot be started (its header cannot be written or synced) is removed
//!   again; if even that fails, the log stops, so no record is ever appended below a newer
//!   segment. A checkpoint whose flush of pending commits fails returns that error and
//!   starts no segment.
//!
//! So in [`Durability::Buffered`], an operating-system crash or power cut loses at most the
//! commits acknowledged since the last successful sync or checkpoint (a suffix of the
//! history: never part of a commit, never one while keeping a later one). One residual case:
//! if a sync fails and cutting the failed batch's frames off fails too, they may still be in
//! the file, and a reopen can bring such a failed commit back.
//!
//! # Checkpoints
//! Once the log has grown by [`Options::checkpoint_after_bytes`](crate::Options::checkpoint_after_bytes) since the last checkpoint, a
//! background thread pins a snapshot (MVCC: writers go on), starts a new segment, writes the
//! snapshot, and then deletes the segments and checkpoints it replaces. Disk use stays
//! proportional to live data plus at most about two checkpoints' worth of log.
//!
//! # Recovery
//! The newest checkpoint is loaded, then every record above its version is replayed. A tail
//! of zero bytes ends a segment without a report: the current segment is filled with zeros
//! [`PREALLOCATE_STEP`] ahead of its records (so a sync overwrites allocated blocks rather
//! than growing the file), and closing, or moving on to a new segment, trims them. A
//! segment wholly below the checkpoint (the next one starts at or below its version + 1) is
//! a leftover of an interrupted deletion and is not read. A frame whose checksum fails in the
//! newest segment is a torn write from a crash, cut off with everything after it, unless a
//! later `synced` mark shows the damaged bytes had been durable (a mark starts every batch
//! write and records how much of the segment was on stable storage then): a write over
//! preallocated space can reach the disk page by page, leaving a hole before records that
//! did. The cut is logged (`log::warn!`) and reported in [`RecoveryReport::truncated`]. A
//! newest segment with a partial header is started again. Other damage is
//! [`Error::Corrupt`], naming the file and offset, and so is a missing file: a first segment
//! starting above the checkpoint's version + 1 (or above version 1 without a checkpoint), or
//! a segment starting above the last version of the one before it + 1. Versions may
//! legitimately skip inside a segment (a rolled-back batch consumes its versions), but never
//! across a segment boundary. Never silent data loss.
//!
//! # Backups and copying a live directory by hand
//! [`Database::backup`](crate::Database::backup) writes a consistent copy of a live database
//! (one snapshot, as one checkpoint, synced) into a new directory while writers go on;
//! [`create_database`] builds a directory from entries (importers use it). Both write into a
//! temporary directory beside the target and rename it into place.
//!
//! Copying the directory of a database that is open (`cp -r`, `rsync`) is **not** safe: the
//! copy may be refused when opened, or lose the newest commits. Use
//! [`Database::backup`](crate::Database::backup), or close the database first (a closed
//! directory is a set of ordinary files, and any copy of it opens to the same state). An
//! atomic file-system snapshot of the whole directory (LVM, ZFS, btrfs) is safe: it is what a
//! power cut would leave, and recovery handles that (see *Recovery* above).
//!
//! A file-by-file copy reads each file, and each part of a file, at a different moment, and
//! recovery then meets:
//! - *A log tail being appended.* Commits land in preallocated space in the newest segment,
//!   in place. A copy that read a part of it before a batch was written and a later part
//!   after the next one was holds zeros where the first batch is and frames after them.
//!   Recovery cuts that tail as torn and reports it
//!   ([`RecoveryReport::truncated`](crate::RecoveryReport::truncated)), dropping every commit
//!   after the hole; or, when a later batch's `synced` mark says the hole had been on stable
//!   storage, refuses the copy as [`Error::Corrupt`].
//! - *A checkpoint while the copy runs.* A checkpoint starts a new segment, publishes
//!   `checkpoint-<v>.ckpt` (a `.tmp` file renamed whole, so a copy never holds half of one
//!   under that name; a copied `.tmp` is removed on open), then deletes the older checkpoint
//!   and segments. A copy that listed the directory before the deletion and reads after it
//!   misses files; one that copied an older segment before its last batches and the new
//!   segment after holds a gap. Recovery checks that the checkpoint and the segments cover
//!   every version (a segment must start at most one above what precedes it) and refuses
//!   such a copy as [`Error::Corrupt`] ("a log segment or checkpoint
//!   is missing").
//!
//! So a hand copy that opens holds a prefix of the committed history (a state the database
//! was really in), never one with a gap; but whether it opens, and how much it keeps, depends
//! on timing. [`Database::backup`](crate::Database::backup) writes one snapshot, whole.

pub(crate) mod backup;
pub(crate) mod checkpoint;
pub mod fs;
pub(crate) mod record;
pub(crate) mod recover;
pub(crate) mod wal;

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use backup::create_database;

use crate::error::{Error, IoError};
use crate::value::Versionstamp;
use fs::FileSystem;

/// The name of the lock file in a database directory.
pub(crate) const LOCK_FILE: &str = "LOCK";

/// How a commit reaches stable storage before [`commit`](crate::Atomic::commit) returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// A commit returns once its log record is on stable storage (`fdatasync`). Nothing
    /// acknowledged is ever lost, by a process crash or a power cut. Concurrent committers
    /// share syncs (group commit).
    #[default]
    Sync,
    /// A commit returns once its log record is written to the operating system; a background
    /// thread syncs every `interval`. A process crash loses nothing; an operating-system crash
    /// or power cut loses at most the commits acknowledged since the last successful sync
    /// (about one `interval`; never part of a commit, and never a commit while keeping a
    /// later one), and their versionstamps are never handed out again. If a background sync
    /// fails, the database stops accepting writes (reads go on) until it is reopened (see the
    /// [module docs](crate::durable)).
    Buffered {
        /// Time between background syncs.
        interval: Duration,
    },
}

/// What recovery found when a database was opened; see [`Database::recovery_report`].
///
/// [`Database::recovery_report`]: crate::Database::recovery_report
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The version of the checkpoint loaded, if any.
    pub checkpoint: Option<Versionstamp>,
    /// Entries loaded from the checkpoint.
    pub checkpoint_entries: u64,
    /// Log segments read.
    pub segments: usize,
    /// Commit records applied from the log (records at or below the checkpoint are skipped).
    pub records_replayed: u64,
    /// Bytes of log and checkpoint read.
    pub bytes_read: u64,
    /// A torn tail that was cut off: the file, the offset of the first bad byte, and how many
    /// bytes were dropped.
    pub truncated: Option<(PathBuf, u64, u64)>,
    /// The last versionstamp recovered; new commits get larger ones.
    pub last_versionstamp: Versionstamp,
    /// How long recovery took.
    pub elapsed: Duration,
}

/// A file-name helper: `prefix-<20 digits>.ext`.
pub(crate) fn numbered(prefix: &str, n: u64, ext: &str) -> String {
    format!("{prefix}-{n:020}.{ext}")
}

/// Parses a name made by [`numbered`].
pub(crate) fn parse_numbered(name: &str, prefix: &str, ext: &str) -> Option<u64> {
    let digits = name
        .strip_prefix(prefix)?
        .strip_prefix('-')?
        .strip_suffix(ext)?
        .strip_suffix('.')?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The error of a file operation on `path`. The callers lend `e`, so it is copied (an
/// operating system error exactly, by its code; see `IoError::copied`).
pub(crate) fn io_error(context: impl Into<String>, path: &Path, e: &io::Error) -> Error {
    let context = format!("{} {}", context.into(), path.display());
    Error::Io(IoError::copied(context, e))
}

/// How far ahead of its records the current segment is filled with zeros. An append that
/// grows a file makes `fdatasync` commit file metadata too; overwriting zeros already on disk
/// does not, so a sync costs less (`examples/wal_probe.rs` measures both). Recovery reads a
/// tail of zeros as the log's unused end.
pub const PREALLOCATE_STEP: u64 = 4 << 20;

/// How many versions a `reserved` mark reserves beyond the batch that writes it. Versions are
/// plentiful (a reopen skips at most this many); each reservation costs one `fdatasync` in
/// [`Durability::Buffered`] (none in [`Durability::Sync`], which syncs every batch anyway).
pub const VERSIONS_RESERVED_AHEAD: u64 = 1 << 20;

/// Removes `path`; a file already gone is fine.
pub(crate) fn remove_if_present(fs: &dyn FileSystem, path: &Path) -> io::Result<()> {
    match fs.remove(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The first version of the segment at `path`, from its name.
pub(crate) fn segment_base(path: &Path) -> u64 {
    parse_numbered(
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default(),
        "wal",
        "log",
    )
    .unwrap_or(0)
}

/// Reads a whole file through the seam.
pub(crate) fn read_file(fs: &dyn FileSystem, path: &Path) -> Result<Vec<u8>, Error> {
    let mut bytes = Vec::new();
    fs.open_read(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| io_error("reading", path, &e))?;
    Ok(bytes)
}

/// An [`Error::Corrupt`] at `offset` of `path`.
pub(crate) fn corrupt(path: &Path, offset: usize, reason: impl Into<String>) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        reason: reason.into(),
    }
}
