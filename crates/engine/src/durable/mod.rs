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
//! # Commit path
//! A committer applies its operation to memory under the commit lock *without publishing it*
//! (readers keep reading the last published version; later committers see it, so commits
//! stay serial), appends its frame to the pending batch, releases the lock, and waits on its
//! own slot. A committer that queues while nobody leads becomes the leader: it takes the whole
//! pending batch, writes it with one `write`, syncs once ([`Durability::Sync`]), publishes it,
//! wakes exactly the committers of that batch, and hands the lead to the first committer that
//! queued meanwhile (no thundering herd: on a small machine, waking and re-sleeping idle
//! waiters cost more CPU than the commits). Commits keep being applied and batched while a
//! sync runs, so one `fdatasync` serves every committer that arrived meanwhile: throughput
//! grows with the number of committers. If the write or the sync fails, the batch and every
//! commit applied after it are removed from memory, and their committers get [`Error::Io`]: a
//! commit is acknowledged only once it is on disk, and readers never see one that is not.
//!
//! A commit whose checks fail (or whose mutation is refused) against versions not yet
//! published waits until they are published, then answers; if they are rolled back instead,
//! it runs again. So an answer never rests on a commit that did not happen, and a loser that
//! reads after its answer sees the winner.
//!
//! # Failures
//! - A failed *write* (a full disk) is cut back to the last whole frame (and the cut synced);
//!   the segment stays in use and commits resume when space returns.
//! - A failed *sync* poisons the segment for good: after a failed `fsync`, Linux may have
//!   dropped the unsynced pages and a retried `fsync` succeeds without them, so later commits
//!   could be durable while earlier ones are lost. Nothing is written to or synced on that
//!   file again. Before the next batch is written (and before the committers of the failed
//!   batch are answered), the log is *rebuilt from memory*: a checkpoint of everything
//!   published, then a fresh segment, then every other segment and older checkpoint is
//!   deleted. Until that succeeds, every commit fails with [`Error::Io`] naming the original
//!   failure, and [`Database::sync`](crate::Database::sync) returns it.
//! - A segment that cannot be started (its header cannot be written or synced) is removed
//!   again; if even that fails, the current segment is poisoned, so no record is ever
//!   appended below a newer segment. A checkpoint whose flush of pending commits fails
//!   returns that error and starts no segment.
//!
//! So in [`Durability::Buffered`], an operating-system crash or power cut loses at most the
//! commits acknowledged since the last successful background sync, checkpoint or rebuild
//! (a suffix of the history: never part of a commit, never one while keeping a later one),
//! and a failed background sync loses nothing if the rebuild succeeds. One residual case:
//! if a sync fails and the rebuild fails too, the failed batch's frames may still be in the
//! old segment, and an operating-system crash before a rebuild succeeds can bring such a
//! failed commit back.
//!
//! # Checkpoints
//! Once the log has grown by [`Options::checkpoint_after_bytes`] since the last checkpoint, a
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

pub mod fs;
pub(crate) mod record;

use std::collections::HashMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_epoch as epoch;
use parking_lot::{Condvar, Mutex};
use smallvec::SmallVec;

use crate::atomic::{AtomicWrite, CommitResult, MutationKind};
use crate::db::{Chain, Inner, Options, Slots, Version, now_ms, version_at};
use crate::error::{Error, IoError};
use crate::key_bytes::KeyBytes;
use crate::value::Versionstamp;
use fs::{FileSystem, WritableFile};
use record::{Frame, FrameWriter, Payload};

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
    /// later one). If a background sync fails, the log is rebuilt from memory before anything
    /// else is written, so nothing is lost; if that fails too, commits fail with
    /// [`Error::Io`] naming the sync failure until it succeeds (see the
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
fn numbered(prefix: &str, n: u64, ext: &str) -> String {
    format!("{prefix}-{n:020}.{ext}")
}

/// Parses a name made by [`numbered`].
fn parse_numbered(name: &str, prefix: &str, ext: &str) -> Option<u64> {
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
fn io_error(context: impl Into<String>, path: &Path, e: &io::Error) -> Error {
    let context = format!("{} {}", context.into(), path.display());
    Error::Io(IoError::copied(context, e))
}

/// The segment being appended to.
struct Segment {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    /// Bytes known to be in the file (everything written successfully).
    len: u64,
    /// Bytes known to be on stable storage (a sync covering them succeeded).
    synced: u64,
    /// The file's length: `len` plus zeros preallocated past it (see [`PREALLOCATE_STEP`]).
    allocated: u64,
    /// Why the file is no longer trusted, after a sync on it failed (or a failed write could
    /// not be cut back). Nothing is written to or synced on it again; the next flush repairs
    /// the log first (see [`Wal::repair`]).
    poisoned: Option<Error>,
    /// Log bytes written since the last checkpoint began.
    since_checkpoint: u64,
    /// Older segments, oldest first, by first version.
    older: Vec<(u64, PathBuf)>,
}

/// How far ahead of its records the current segment is filled with zeros. An append that
/// grows a file makes `fdatasync` commit file metadata too; overwriting zeros already on disk
/// does not, which on the machine the benchmarks ran on (ext4) cut the median sync from
/// 150–200 us to 100–125 us (`examples/wal_probe.rs` measures both). Recovery reads a tail of
/// zeros as the log's unused end.
pub const PREALLOCATE_STEP: u64 = 4 << 20;

/// Why a segment is started (see [`Wal::start_segment`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// A checkpoint moves on to a new segment: the current one must be sound.
    Rotate,
    /// A rebuild from memory replaces a poisoned segment.
    Rebuild,
}

/// Where a committer waiting for durability finds its outcome.
type Slot = Arc<Waiter>;

/// A committer waiting for durability: it sleeps on its own condition variable until its
/// outcome arrives or it is handed the lead (to flush the next batch), so a flush wakes
/// exactly the committers it carried, and one more to lead.
#[derive(Default)]
struct Waiter {
    state: Mutex<WaiterState>,
    wake: Condvar,
}

#[derive(Default)]
struct WaiterState {
    outcome: Option<Result<(), Error>>,
    lead: bool,
}

/// What wakes a [`Waiter`].
enum Woken {
    /// Its commit is durable and published (`Ok`), or failed and was rolled back.
    Outcome(Result<(), Error>),
    /// It now leads: it flushes the pending batch.
    Lead,
}

impl Waiter {
    fn finish(&self, outcome: Result<(), Error>) {
        self.state.lock().outcome = Some(outcome);
        self.wake.notify_one();
    }

    fn hand_lead(&self) {
        self.state.lock().lead = true;
        self.wake.notify_one();
    }

    fn wait(&self) -> Woken {
        let mut state = self.state.lock();
        loop {
            if let Some(outcome) = state.outcome.take() {
                return Woken::Outcome(outcome);
            }
            if std::mem::take(&mut state.lead) {
                return Woken::Lead;
            }
            self.wake.wait(&mut state);
        }
    }
}

/// Commits applied to memory (unpublished) whose frames are not yet handed to a flusher.
#[derive(Default)]
struct Pending {
    /// Their frames and the keys they wrote.
    sink: LogSink,
    /// Their versions and their committers' slots, in version order.
    waiters: Vec<(u64, Slot)>,
    /// Whether someone leads: gathers and writes a batch, or rotates the segment. A leader
    /// that finishes hands the lead straight to the first queued committer, if any.
    flushing: bool,
    /// Callers of [`Wal::exclusively`] waiting for the lead: while there are any, a leader
    /// that finishes releases the lead instead of handing it on, so they are not starved.
    exclusive_wanted: usize,
}

/// A batch taken from [`Pending`] by a flusher.
struct Batch {
    sink: LogSink,
    waiters: Vec<(u64, Slot)>,
}

#[derive(Default)]
struct Background {
    shutdown: bool,
    checkpoint_wanted: bool,
}

/// The write-ahead log of an open database directory.
pub(crate) struct Wal {
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    durability: Durability,
    checkpoint_after: u64,
    segment: Mutex<Segment>,
    /// Taken around every sync of the segment file, before `segment`: syncs of one file never
    /// overlap, so a sync that fails is seen (and poisons the file) before any other sync of
    /// it can report a success that no longer covers the dropped data.
    sync_lock: Mutex<()>,
    pending: Mutex<Pending>,
    flushed: Condvar,
    /// Bumped (under the commit lock) whenever a failed batch is rolled back.
    rollbacks: AtomicU64,
    /// The commit counter when a failed batch was last rolled back (written under the commit
    /// lock). Versions above the published one and at most this one were removed from
    /// memory, and will never be published: a commit checked against them waits for nothing.
    rolled_back_to: AtomicU64,
    /// Committers waiting for the unpublished versions their checks failed against.
    settling: AtomicUsize,
    background: Mutex<Background>,
    background_wake: Condvar,
    checkpoint_lock: Mutex<()>,
    /// Taken while a checkpoint file is written and what it replaces is deleted.
    checkpoint_write: Mutex<()>,
    /// The database, for repairs started outside a commit (a sync, or closing).
    inner: Mutex<Weak<Inner>>,
    /// Calls of `start_segment` so far, so a test can order a failing sync before one.
    #[cfg(test)]
    rotations_started: AtomicUsize,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal").field("dir", &self.dir).finish()
    }
}

/// Written into by [`Inner::apply_write`] when a commit is logged.
#[derive(Default)]
pub(crate) struct LogSink {
    pub(crate) frames: FrameWriter,
    pub(crate) touched: Vec<KeyBytes>,
}

/// Keeps a database directory open: the lock, and the background thread. Dropped with the
/// last [`Database`](crate::Database) handle; it stops the thread, syncs, and unlocks.
pub(crate) struct OpenDir {
    wal: Arc<Wal>,
    thread: Mutex<Option<JoinHandle<()>>>,
    _lock: Box<dyn Send + Sync>,
}

impl OpenDir {
    /// Stops the background thread and syncs the log.
    pub(crate) fn close(&self) -> Result<(), Error> {
        {
            let mut bg = self.wal.background.lock();
            bg.shutdown = true;
            self.wal.background_wake.notify_all();
        }
        if let Some(thread) = self.thread.lock().take()
            && thread.thread().id() != std::thread::current().id()
        {
            let _ = thread.join();
        }
        self.wal.sync_now()?;
        let mut seg = self.wal.segment.lock();
        if seg.poisoned.is_none() {
            seg.trim();
        }
        Ok(())
    }
}

impl Segment {
    /// Cuts the preallocated zeros off the file, so a segment no longer written to holds its
    /// records only. Best effort: recovery reads a tail of zeros as unused space anyway.
    fn trim(&mut self) {
        if self.allocated > self.len {
            match self.file.set_len(self.len) {
                Ok(()) => self.allocated = self.len,
                Err(e) => log::warn!("tuplekv: could not trim {}: {e}", self.path.display()),
            }
        }
    }
}

impl Drop for OpenDir {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::error!("tuplekv: closing {}: {e}", self.wal.dir.display());
        }
    }
}

/// The error of an operation refused because the log could not be repaired after `cause`.
fn unusable(cause: &Error, failure: &Error) -> Error {
    let context = format!(
        "writing to the log, unusable since an earlier failure ({cause}); repairing it failed"
    );
    Error::Io(match failure {
        Error::Io(io) => io.with_context(format!("{context}: {}", io.context())),
        other => IoError::new(context, io::Error::other(other.to_string())),
    })
}

/// Removes `path`; a file already gone is fine.
fn remove_if_present(fs: &dyn FileSystem, path: &Path) -> io::Result<()> {
    match fs.remove(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Whether the outcome of `write` depends on what it finds: checks, and mutations that read
/// the current value (and fail on a value of the wrong type).
fn depends_on_state(write: &AtomicWrite) -> bool {
    !write.checks.is_empty()
        || !write.range_checks.is_empty()
        || write
            .mutations
            .iter()
            .any(|m| !matches!(m.kind, MutationKind::Set { .. } | MutationKind::Delete))
}

/// The first version of the segment at `path`, from its name.
fn segment_base(path: &Path) -> u64 {
    parse_numbered(
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default(),
        "wal",
        "log",
    )
    .unwrap_or(0)
}

impl Wal {
    /// Commits one validated operation: applies it to memory unpublished under the commit
    /// lock, queues its frame, and waits until a flusher (possibly this thread) has made it
    /// durable and published it, or has failed it and rolled it back.
    ///
    /// A commit whose checks fail (or whose mutations are refused) against versions not yet
    /// published does not answer at once: those versions may still be rolled back. It waits
    /// until they are published (the answer is then final) or rolled back (it then runs
    /// again), so a loser never sees the old value after being told it lost, and is never
    /// blamed on a commit that did not happen.
    pub(crate) fn commit<'a>(
        &self,
        inner: &'a Inner,
        write: AtomicWrite,
        slots: &mut Slots<'a>,
    ) -> Result<CommitResult, Error> {
        let slot: Slot = Arc::default();
        let mut write = Some(write);
        let mut lead = false;
        loop {
            let Some(this) = write.take() else {
                unreachable!("a write is put back before every retry")
            };
            let (result, seen, rollbacks, retry) = {
                let mut last = inner.commit.lock();
                let seen = *last;
                let rollbacks = self.rollbacks.load(Ordering::Acquire);
                // Checked against unpublished versions: keep a copy to run again should they
                // be rolled back. Without contention nothing is unpublished and nothing is
                // copied, nor for blind writes, which cannot fail on what they find. Versions
                // already rolled back are not in memory and never will be published: waiting
                // for them would wait forever.
                let settled = inner
                    .visible_version()
                    .max(self.rolled_back_to.load(Ordering::Acquire));
                let retry = (seen > settled && depends_on_state(&this)).then(|| this.clone());
                let mut pending = self.pending.lock();
                let result = inner.apply_write(this, slots, &mut last, Some(&mut pending.sink));
                if let Ok(r) = &result
                    && r.is_committed()
                {
                    pending.waiters.push((*last, Arc::clone(&slot)));
                    // Nobody leads: this committer does, unless an exclusive writer (a
                    // checkpoint, an explicit sync) is waiting for the lead; it flushes this
                    // batch itself and hands the lead on after.
                    if !pending.flushing && pending.exclusive_wanted == 0 {
                        pending.flushing = true;
                        lead = true;
                    }
                }
                (result, seen, rollbacks, retry)
            };
            if result.as_ref().is_ok_and(CommitResult::is_committed) {
                self.await_durable(inner, &slot, lead)?;
                inner.reclaimer.wake_if_pending();
                return result;
            }
            // A conflict (or a refused mutation) wrote nothing.
            match retry {
                Some(again) if !self.settle(inner, seen, rollbacks) => write = Some(again),
                _ => return result,
            }
        }
    }

    /// Waits until every version up to `seen` is published (true: an answer computed against
    /// them is final) or a rollback since `rollbacks` removed some of them (false).
    fn settle(&self, inner: &Inner, seen: u64, rollbacks: u64) -> bool {
        let mut pending = self.pending.lock();
        self.settling.fetch_add(1, Ordering::AcqRel);
        let settled = loop {
            // Published versions are never rolled back, so this check comes first.
            if inner.visible_version() >= seen {
                break true;
            }
            if self.rollbacks.load(Ordering::Acquire) != rollbacks {
                break false;
            }
            // Committers of those versions are waiting for durability: one of them flushes,
            // and every flush ends with `flushed` notified under this lock.
            self.flushed.wait(&mut pending);
        };
        self.settling.fetch_sub(1, Ordering::AcqRel);
        settled
    }

    /// Waits for the outcome in `slot`; while this committer leads (`lead`, or handed the
    /// lead meanwhile), flushes the pending batch first, which carries its own commit.
    fn await_durable(&self, inner: &Inner, slot: &Slot, mut lead: bool) -> Result<(), Error> {
        loop {
            if lead {
                let batch = {
                    let mut pending = self.pending.lock();
                    Batch {
                        sink: std::mem::take(&mut pending.sink),
                        waiters: std::mem::take(&mut pending.waiters),
                    }
                };
                // The outcome reaches every committer of the batch through its slot.
                let _ = self.flush(inner, batch);
                self.pass_lead();
            }
            match slot.wait() {
                Woken::Outcome(outcome) => return outcome,
                Woken::Lead => lead = true,
            }
        }
    }

    /// Ends a lead: hands it to the first queued committer, or releases it if none is queued
    /// or an exclusive writer waits for it.
    fn pass_lead(&self) {
        let mut pending = self.pending.lock();
        match pending.waiters.first() {
            Some((_, next)) if pending.exclusive_wanted == 0 => next.hand_lead(),
            _ => pending.flushing = false,
        }
        self.flushed.notify_all();
    }

    /// Writes (and syncs) one batch, then publishes it; on failure rolls back the batch and
    /// every commit applied after it. Repairs a poisoned log first, and again after a sync of
    /// this batch fails, before any committer hears the outcome. Called with `flushing` set,
    /// so flushes never overlap.
    fn flush(&self, inner: &Inner, batch: Batch) -> Result<(), Error> {
        let Some(&(newest, _)) = batch.waiters.last() else {
            return Ok(());
        };
        let repaired = self.repair(inner);
        let written = match &repaired {
            Ok(_) => self.append(&batch.sink.frames.buf),
            Err(e) => Err(e.clone()),
        };
        let error = match written {
            Ok(()) => {
                inner.publish(newest);
                for (_, slot) in &batch.waiters {
                    slot.finish(Ok(()));
                }
                return Ok(());
            }
            Err(e) => e,
        };
        // Commits applied since this batch was taken were checked against its state, so they
        // fail with it. Stop new commits while memory is put back.
        let later = {
            let commit = inner.commit.lock();
            let mut pending = self.pending.lock();
            let published = inner.visible_version();
            inner.roll_back(&batch.sink.touched, published);
            inner.roll_back(&pending.sink.touched, published);
            self.rolled_back_to.store(*commit, Ordering::Release);
            self.rollbacks.fetch_add(1, Ordering::AcqRel);
            pending.sink = LogSink::default();
            std::mem::take(&mut pending.waiters)
        };
        // A failed sync poisoned the segment: replace it now, so the failed frames are gone
        // from the log before their committers are told they failed.
        let error = match repaired {
            Ok(_) => match self.repair(inner) {
                Ok(_) => error,
                Err(e) => e,
            },
            Err(_) => error,
        };
        for (_, slot) in batch.waiters.iter().chain(&later) {
            slot.finish(Err(error.clone()));
        }
        Err(error)
    }

    /// Runs `f` as the only writer of the log: waits for a running flush, flushes what is
    /// pending, then calls `f` before any later batch is written. If that flush fails, `f`
    /// does not run and its error is returned.
    fn exclusively<T>(
        &self,
        inner: &Inner,
        f: impl FnOnce() -> Result<T, Error>,
    ) -> Result<T, Error> {
        let mut pending = self.pending.lock();
        pending.exclusive_wanted += 1;
        while pending.flushing {
            self.flushed.wait(&mut pending);
        }
        pending.exclusive_wanted -= 1;
        pending.flushing = true;
        let batch = Batch {
            sink: std::mem::take(&mut pending.sink),
            waiters: std::mem::take(&mut pending.waiters),
        };
        drop(pending);
        let out = self.flush(inner, batch).and_then(|()| f());
        // Committers that queued meanwhile wait for a leader.
        self.pass_lead();
        out
    }

    /// Appends `buf` to the log (and syncs it, in [`Durability::Sync`]). A failed write is
    /// cut back to the previous length; a failed sync poisons the segment.
    fn append(&self, buf: &[u8]) -> Result<(), Error> {
        let sync = self.durability == Durability::Sync;
        // Buffered appends go on while a background sync runs (it covers what was written
        // before it started); only a sync made here must not overlap another.
        let _sync = sync.then(|| self.sync_lock.lock());
        let mut seg = self.segment.lock();
        let seg = &mut *seg;
        if let Some(cause) = &seg.poisoned {
            return Err(cause.clone());
        }
        // Each write starts with the segment's durable length, for recovery to tell a torn
        // write from damage (see `record`).
        let mut mark = FrameWriter::default();
        mark.synced(seg.synced);
        let end = seg.len + (mark.buf.len() + buf.len()) as u64;
        let n = end - seg.len;
        if end > seg.allocated {
            let to = end + PREALLOCATE_STEP;
            match seg.file.preallocate(seg.allocated.max(seg.len), to) {
                Ok(()) => seg.allocated = to,
                // Only an optimisation: append as usual (the zeros written are harmless).
                Err(e) => log::warn!("tuplekv: could not preallocate {}: {e}", seg.path.display()),
            }
        }
        // One write call for both (a copy costs less than a second system call).
        mark.buf.extend_from_slice(buf);
        if let Err(e) = seg.file.write_all(&mark.buf) {
            let error = io_error("appending to the log", &seg.path, &e);
            // A failed write drops no data already written: cut the partial frames off (and
            // make the cut durable) and the file is as good as before.
            seg.allocated = seg.len;
            if let Err(e2) = seg
                .file
                .set_len(seg.len)
                .and_then(|()| seg.file.sync_data())
            {
                log::error!(
                    "tuplekv: could not cut {} back after a failed write: {e2}",
                    seg.path.display()
                );
                seg.poisoned = Some(io_error("cutting back", &seg.path, &e2));
            } else if sync {
                seg.synced = seg.len;
            }
            return Err(error);
        }
        if sync && let Err(e) = seg.file.sync_data() {
            // After a failed fsync the kernel may have dropped the written pages and will not
            // report it again: never trust this file again. Cut the frames off anyway, so a
            // process crash before the repair cannot bring them back.
            let error = io_error("syncing the log", &seg.path, &e);
            log::error!("tuplekv: {error}; the segment is retired");
            let _ = seg.file.set_len(seg.len);
            seg.poisoned = Some(error.clone());
            return Err(error);
        }
        seg.len += n;
        if sync {
            seg.synced = seg.len;
        }
        seg.since_checkpoint += n;
        if seg.since_checkpoint >= self.checkpoint_after {
            let mut bg = self.background.lock();
            if !bg.checkpoint_wanted {
                bg.checkpoint_wanted = true;
                self.background_wake.notify_all();
            }
        }
        Ok(())
    }

    /// Makes everything acknowledged durable: syncs the log if anything written is not yet
    /// synced. The sync runs on a second handle of the file, outside the segment lock, so
    /// committers keep appending meanwhile. If it fails (or failed earlier), the log is
    /// repaired from memory (see [`Wal::repair`]); only if that fails too is it an error.
    pub(crate) fn sync_now(&self) -> Result<(), Error> {
        let Err(error) = self.sync_segment() else {
            return Ok(());
        };
        let Some(inner) = self.inner.lock().upgrade() else {
            return Err(error);
        };
        self.exclusively(&inner, || {
            if self.repair(&inner)?.is_some() {
                return Ok(());
            }
            // Nothing to repair: the sync failed without retiring the file (it could not
            // get a second handle, say), or someone rebuilt the log meanwhile. Either way
            // nothing is known to be durable yet: sync again, now as the only writer.
            match self.sync_segment() {
                Ok(()) => Ok(()),
                Err(again) => match self.repair(&inner)? {
                    Some(_) => Ok(()),
                    None => Err(again),
                },
            }
        })
    }

    fn sync_segment(&self) -> Result<(), Error> {
        let _sync = self.sync_lock.lock();
        let (mut handle, path, target) = {
            let seg = self.segment.lock();
            if let Some(cause) = &seg.poisoned {
                return Err(cause.clone());
            }
            if seg.synced >= seg.len {
                return Ok(());
            }
            let handle = seg
                .file
                .try_clone()
                .map_err(|e| io_error("syncing the log", &seg.path, &e))?;
            (handle, seg.path.clone(), seg.len)
        };
        let result = handle.sync_data();
        // `sync_lock` keeps the segment from being replaced meanwhile.
        let mut seg = self.segment.lock();
        debug_assert_eq!(seg.path, path);
        match result {
            Ok(()) => {
                seg.synced = seg.synced.max(target);
                Ok(())
            }
            Err(e) => {
                // Retrying would "succeed" on Linux after the dirty pages were dropped, and
                // later commits could then be durable while these are lost: a hole.
                let error = io_error("syncing the log", &path, &e);
                log::error!("tuplekv: {error}; the segment is retired");
                seg.poisoned = Some(error.clone());
                Err(error)
            }
        }
    }

    /// If the segment is poisoned, rebuilds the log from memory, so nothing depends on the
    /// poisoned file: writes a checkpoint of everything published (version `v`), starts the
    /// segment `wal-<v + 1>.log`, then deletes every other segment and older checkpoint.
    /// Until the new segment exists recovery still reads the old one; once it exists the old
    /// one is wholly below the checkpoint and is never read. Returns the checkpoint's version,
    /// or `None` when nothing was poisoned. Called as the log's only writer.
    ///
    /// # Errors
    /// [`Error::Io`] naming the original failure and the repair's.
    fn repair(&self, inner: &Inner) -> Result<Option<u64>, Error> {
        let Some(cause) = self.segment.lock().poisoned.clone() else {
            return Ok(None);
        };
        // Nothing is published while we are the log's only writer, and writers keep the
        // newest version at or below the published one of every key: no snapshot needed.
        let version = inner.visible_version();
        let _write = self.checkpoint_write.lock();
        self.write_checkpoint(inner, version)
            .and_then(|()| self.start_segment(version + 1, Start::Rebuild))
            .map_err(|e| unusable(&cause, &e))?;
        let current = self.segment.lock().path.clone();
        // The segments that could not be removed; all of them if the directory is unreadable.
        let mut left: Option<Vec<PathBuf>> = None;
        let removed = self.fs.list(&self.dir).and_then(|names| {
            let mut left_here = Vec::new();
            let mut failure = None;
            for name in names {
                let stale = parse_numbered(&name, "wal", "log").is_some()
                    || parse_numbered(&name, "checkpoint", "tmp").is_some()
                    || parse_numbered(&name, "checkpoint", "ckpt").is_some_and(|v| v < version);
                let path = self.dir.join(&name);
                if stale
                    && path != current
                    && let Err(e) = remove_if_present(self.fs.as_ref(), &path)
                {
                    left_here.push(path);
                    failure.get_or_insert(e);
                }
            }
            left = Some(left_here);
            match failure {
                Some(e) => Err(e),
                None => self.fs.sync_dir(&self.dir),
            }
        });
        // What is left is wholly below the checkpoint; the next checkpoint (which removes the
        // segments still listed as older) or open removes it.
        if let Err(e) = removed {
            log::warn!(
                "tuplekv: removing replaced files in {}: {e}",
                self.dir.display()
            );
        }
        {
            let mut seg = self.segment.lock();
            if let Some(left) = &left {
                seg.older.retain(|(_, p)| left.contains(p));
            }
            seg.since_checkpoint = 0;
        }
        log::warn!(
            "tuplekv: {}: rebuilt the log from memory after {cause}: checkpoint at version \
             {version}, new segment {}",
            self.dir.display(),
            current.display()
        );
        Ok(Some(version))
    }

    /// Makes `wal-<base>.log` the segment appended to: syncs the current one if needed,
    /// creates the new one with its header (synced, directory synced), and switches to it.
    /// Nothing to do if the current segment already is that one and is not poisoned. If the
    /// new file cannot be made whole it is removed again; if even that fails, the current
    /// segment is poisoned, so no record is ever appended below a newer segment. A poisoned
    /// segment is replaced only by a rebuild ([`Start::Rebuild`]); otherwise its poison is
    /// the error. Called as the log's only writer.
    fn start_segment(&self, base: u64, start: Start) -> Result<(), Error> {
        let path = self.dir.join(numbered("wal", base, "log"));
        #[cfg(test)]
        self.rotations_started.fetch_add(1, Ordering::AcqRel);
        let _sync = self.sync_lock.lock();
        let mut seg = self.segment.lock();
        let seg = &mut *seg;
        if let Some(cause) = &seg.poisoned {
            // A sync may have failed since the caller found the segment sound (it held
            // `sync_lock` while we waited for it): the segment's unsynced data may be gone,
            // so only a rebuild from memory may leave it behind.
            if start == Start::Rotate {
                return Err(cause.clone());
            }
        } else {
            if seg.path == path {
                return Ok(());
            }
            // The segments a checkpoint replaces must be whole on disk before a newer segment
            // can exist (buffered mode may not have synced yet).
            if seg.synced < seg.len {
                if let Err(e) = seg.file.sync_data() {
                    let error = io_error("syncing the log", &seg.path, &e);
                    log::error!("tuplekv: {error}; the segment is retired");
                    seg.poisoned = Some(error.clone());
                    return Err(error);
                }
                seg.synced = seg.len;
            }
        }
        let fs = self.fs.as_ref();
        // Never reuse a file: the poisoned segment may have this very name.
        let created = remove_if_present(fs, &path)
            .and_then(|()| fs.open_append(&path, true))
            .and_then(|mut file| {
                file.write_all(&record::file_header(record::LOG_MAGIC, base))
                    .and_then(|()| file.sync_data())
                    .and_then(|()| fs.sync_dir(&self.dir))
                    .map(|()| file)
            });
        let file = match created {
            Ok(file) => file,
            Err(e) => {
                let error = io_error("creating log segment", &path, &e);
                if let Err(e2) = remove_if_present(fs, &path).and_then(|()| fs.sync_dir(&self.dir))
                {
                    log::error!(
                        "tuplekv: could not remove the partial segment {}: {e2}",
                        path.display()
                    );
                    if seg.poisoned.is_none() {
                        seg.poisoned = Some(error.clone());
                    }
                }
                return Err(error);
            }
        };
        if seg.poisoned.is_none() {
            seg.trim();
        }
        drop(std::mem::replace(&mut seg.file, file));
        let old_path = std::mem::replace(&mut seg.path, path);
        if old_path != seg.path {
            seg.older.push((segment_base(&old_path), old_path));
        }
        seg.len = record::FILE_HEADER_LEN as u64;
        seg.synced = seg.len;
        seg.allocated = seg.len;
        seg.poisoned = None;
        Ok(())
    }

    /// Writes a checkpoint of the current state and deletes what it replaces. Waits for a
    /// checkpoint already running, then writes its own.
    pub(crate) fn checkpoint(&self, inner: &Arc<Inner>) -> Result<Versionstamp, Error> {
        let _one_at_a_time = self.checkpoint_lock.lock();
        self.checkpoint_inner(inner)
    }

    fn checkpoint_inner(&self, inner: &Arc<Inner>) -> Result<Versionstamp, Error> {
        // Start a new segment at a batch boundary, as the log's only writer: everything in the
        // older segments is then published, so a snapshot taken next covers all of it.
        let started = self.exclusively(inner, || {
            // A poisoned log is repaired instead, which writes a checkpoint itself; so is one
            // whose old segment fails to sync now.
            if let Some(version) = self.repair(inner)? {
                return Ok(Err(version));
            }
            // Everything written so far is published (flushes publish before they return).
            let version = inner.visible_version();
            if let Err(e) = self.start_segment(version + 1, Start::Rotate) {
                return match self.repair(inner)? {
                    Some(version) => Ok(Err(version)),
                    None => Err(e),
                };
            }
            let mut seg = self.segment.lock();
            seg.since_checkpoint = 0;
            let replaced: Vec<PathBuf> = seg.older.iter().map(|(_, p)| p.clone()).collect();
            Ok(Ok((crate::db::Snapshot::register(inner), replaced)))
        })?;
        {
            let mut bg = self.background.lock();
            bg.checkpoint_wanted = false;
        }
        let (snapshot, replaced) = match started {
            Ok(started) => started,
            Err(repaired) => return Ok(Versionstamp::from_version(repaired)),
        };
        let version = snapshot.versionstamp().version();
        let _write = self.checkpoint_write.lock();
        let written = self.write_checkpoint(inner, version);
        drop(snapshot);
        written?;

        // The checkpoint is durable: what it replaces can go.
        let names = self
            .fs
            .list(&self.dir)
            .map_err(|e| io_error("listing", &self.dir, &e))?;
        let mut removed = false;
        for name in names {
            if parse_numbered(&name, "checkpoint", "ckpt").is_some_and(|v| v < version) {
                let path = self.dir.join(&name);
                remove_if_present(self.fs.as_ref(), &path)
                    .map_err(|e| io_error("removing", &path, &e))?;
                removed = true;
            }
        }
        for path in &replaced {
            remove_if_present(self.fs.as_ref(), path)
                .map_err(|e| io_error("removing", path, &e))?;
            removed = true;
        }
        self.segment
            .lock()
            .older
            .retain(|(_, p)| !replaced.contains(p));
        if removed {
            self.fs
                .sync_dir(&self.dir)
                .map_err(|e| io_error("syncing", &self.dir, &e))?;
        }
        Ok(Versionstamp::from_version(version))
    }

    /// Writes `checkpoint-<version>.ckpt`: every live entry at `version`, to a temporary file
    /// that is synced and then renamed (directory synced). The caller keeps `version`
    /// readable (a snapshot, or being the log's only writer) and holds `checkpoint_write`.
    /// On any error the temporary file is removed.
    fn write_checkpoint(&self, inner: &Inner, version: u64) -> Result<(), Error> {
        let final_path = self.dir.join(numbered("checkpoint", version, "ckpt"));
        let tmp_path = self.dir.join(numbered("checkpoint", version, "tmp"));
        let result = self.write_checkpoint_file(inner, version, &tmp_path);
        let result = result.and_then(|()| {
            self.fs
                .rename(&tmp_path, &final_path)
                .and_then(|()| self.fs.sync_dir(&self.dir))
                .map_err(|e| io_error("publishing checkpoint", &final_path, &e))
        });
        if result.is_err()
            && let Err(e) = remove_if_present(self.fs.as_ref(), &tmp_path)
        {
            log::warn!("tuplekv: removing {}: {e}", tmp_path.display());
        }
        result
    }

    fn write_checkpoint_file(&self, inner: &Inner, version: u64, path: &Path) -> Result<(), Error> {
        let write_err = |e: io::Error| io_error("writing checkpoint", path, &e);
        let mut file = self
            .fs
            .open_append(path, true)
            .map_err(|e| io_error("creating checkpoint", path, &e))?;
        file.write_all(&record::file_header(record::CHECKPOINT_MAGIC, version))
            .map_err(write_err)?;
        let mut frames = FrameWriter::default();
        let mut batch: Vec<(KeyBytes, Version)> = Vec::new();
        let mut batch_bytes = 0;
        let mut count = 0u64;
        let now = now_ms();
        let flush = |batch: &mut Vec<(KeyBytes, Version)>,
                     frames: &mut FrameWriter,
                     file: &mut Box<dyn WritableFile>|
         -> Result<(), Error> {
            if !batch.is_empty() {
                frames.entries(
                    batch
                        .iter()
                        .filter_map(|(k, v)| {
                            Some((k.as_slice(), v.version, v.value.as_ref()?, v.expires_at))
                        })
                        .collect::<Vec<_>>()
                        .into_iter(),
                );
                batch.clear();
            }
            file.write_all(&frames.buf).map_err(write_err)?;
            frames.buf.clear();
            Ok(())
        };
        for slot in inner.map.iter() {
            let guard = epoch::pin();
            let Some(v) = version_at(slot.cell().load(&guard), version) else {
                continue;
            };
            if v.value.is_none() || v.expires_at.is_some_and(|d| d <= now) {
                continue;
            }
            batch_bytes += slot.key().len() + v.value.as_ref().map_or(0, |x| x.size()) + 32;
            batch.push((slot.key().clone(), v.clone()));
            count += 1;
            if batch_bytes >= record::CHECKPOINT_FRAME_BYTES {
                flush(&mut batch, &mut frames, &mut file)?;
                batch_bytes = 0;
            }
        }
        flush(&mut batch, &mut frames, &mut file)?;
        frames.end(version, count);
        file.write_all(&frames.buf).map_err(write_err)?;
        file.sync_data().map_err(write_err)
    }

    /// The background thread: periodic syncs (buffered mode) and checkpoints.
    fn run_background(self: &Arc<Wal>, inner: &Weak<Inner>) {
        let tick = match self.durability {
            Durability::Buffered { interval } => interval.max(Duration::from_millis(1)),
            Durability::Sync => Duration::from_secs(1),
        };
        // Set while an explicit checkpoint holds `checkpoint_lock`: the wanted checkpoint is
        // left to it, and the thread waits a tick as usual instead of spinning on the flag.
        let mut deferred = false;
        loop {
            let checkpoint = {
                let mut bg = self.background.lock();
                if !bg.shutdown && (!bg.checkpoint_wanted || deferred) {
                    self.background_wake.wait_for(&mut bg, tick);
                }
                if bg.shutdown {
                    return;
                }
                bg.checkpoint_wanted
            };
            if let Err(e) = self.sync_now() {
                log::error!("tuplekv: background sync failed: {e}");
            }
            if checkpoint {
                let Some(inner) = inner.upgrade() else { return };
                let one_at_a_time = self.checkpoint_lock.try_lock();
                deferred = one_at_a_time.is_none(); // an explicit one is running
                let result = match one_at_a_time {
                    Some(_one_at_a_time) => self.checkpoint_inner(&inner).map(|_| ()),
                    None => Ok(()),
                };
                if let Err(e) = result {
                    log::error!("tuplekv: checkpoint failed (will retry): {e}");
                    // Retry on a later tick, not in a tight loop.
                    let mut bg = self.background.lock();
                    bg.checkpoint_wanted = false;
                    drop(bg);
                    let mut seg = self.segment.lock();
                    seg.since_checkpoint = self.checkpoint_after / 2;
                }
            }
        }
    }
}

/// Reads a whole file through the seam.
fn read_file(fs: &dyn FileSystem, path: &Path) -> Result<Vec<u8>, Error> {
    let mut bytes = Vec::new();
    fs.open_read(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| io_error("reading", path, &e))?;
    Ok(bytes)
}

fn corrupt(path: &Path, offset: usize, reason: impl Into<String>) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        reason: reason.into(),
    }
}

/// The state being rebuilt by recovery: newest value per key.
#[derive(Default)]
struct Rebuilt {
    entries: HashMap<KeyBytes, Version>,
    last: u64,
}

impl Rebuilt {
    fn apply(
        &mut self,
        payload: Payload,
        path: &Path,
        offset: usize,
        floor: u64,
    ) -> Result<bool, Error> {
        match payload {
            Payload::Commit { version, writes } => {
                if version <= floor {
                    return Ok(false); // already in the checkpoint
                }
                if version <= self.last {
                    return Err(corrupt(
                        path,
                        offset,
                        format!("commit version {version} does not follow {}", self.last),
                    ));
                }
                self.last = version;
                for (key, write) in writes {
                    match write {
                        Some((value, expires_at)) => {
                            self.entries.insert(
                                key,
                                Version {
                                    version,
                                    value: Some(value),
                                    expires_at,
                                },
                            );
                        }
                        None => {
                            self.entries.remove(&key);
                        }
                    }
                }
                Ok(true)
            }
            Payload::Synced { .. } => Ok(false),
            _ => Err(corrupt(path, offset, "checkpoint frame in a log segment")),
        }
    }
}

/// Loads a checkpoint file into `state`; returns its version and entry count.
fn load_checkpoint(
    fs: &dyn FileSystem,
    path: &Path,
    state: &mut Rebuilt,
) -> Result<(u64, u64, u64), Error> {
    let bytes = read_file(fs, path)?;
    let version = record::read_file_header(record::CHECKPOINT_MAGIC, &bytes).map_err(|bad| {
        corrupt(
            path,
            bad.offset,
            format!("bad checkpoint header: {}", bad.reason),
        )
    })?;
    let mut at = record::FILE_HEADER_LEN;
    let mut count = 0u64;
    loop {
        let (payload, len) = match record::read_frame(&bytes[at..]) {
            Frame::Valid { payload, len } => (payload, len),
            Frame::Truncated => return Err(corrupt(path, at, "checkpoint ends early")),
            Frame::Damaged(reason) => return Err(corrupt(path, at, reason)),
        };
        match record::decode_payload(payload) {
            Some(Payload::Entries(entries)) => {
                for (key, v, (value, expires_at)) in entries {
                    state.entries.insert(
                        key,
                        Version {
                            version: v,
                            value: Some(value),
                            expires_at,
                        },
                    );
                    count += 1;
                }
            }
            Some(Payload::End {
                version: v,
                entries,
            }) => {
                // The trailer is checksummed and the header is not: if they disagree, the
                // header is what is damaged.
                if v != version {
                    let reason =
                        format!("checkpoint header says version {version}, its trailer {v}");
                    let offset = record::version_damage_offset(version, v);
                    return Err(corrupt(path, offset, reason));
                }
                if entries != count {
                    let reason = format!(
                        "checkpoint trailer counts {entries} entries, the file holds {count}"
                    );
                    return Err(corrupt(path, at, reason));
                }
                if at + len != bytes.len() {
                    let reason = format!(
                        "{} bytes after the checkpoint trailer",
                        bytes.len().saturating_sub(at + len)
                    );
                    return Err(corrupt(path, at + len, reason));
                }
                state.last = version;
                return Ok((version, count, bytes.len() as u64));
            }
            _ => return Err(corrupt(path, at, "malformed checkpoint frame")),
        }
        at += len;
    }
}

/// What [`recover`] hands to the database.
pub(crate) struct Recovered {
    pub(crate) entries: Vec<(KeyBytes, Version)>,
    pub(crate) last: u64,
    pub(crate) open: Arc<OpenDir>,
    pub(crate) wal: Arc<Wal>,
    pub(crate) report: RecoveryReport,
}

/// Opens (or creates) the database directory `dir`: locks it, loads the newest checkpoint,
/// replays the log, cuts a torn tail, and opens the newest segment for appending.
pub(crate) fn recover(dir: &Path, options: &Options) -> Result<Recovered, Error> {
    let started = Instant::now();
    let fs = Arc::clone(&options.fs);
    fs.create_dir_all(dir)
        .map_err(|e| io_error("creating directory", dir, &e))?;
    let lock = fs.lock_dir(dir).map_err(|e| {
        if e.kind() == io::ErrorKind::WouldBlock {
            Error::Locked {
                path: dir.to_path_buf(),
            }
        } else {
            io_error("locking", dir, &e)
        }
    })?;
    let names = fs.list(dir).map_err(|e| io_error("listing", dir, &e))?;
    let mut checkpoints = Vec::new();
    let mut segments = Vec::new();
    for name in &names {
        if let Some(v) = parse_numbered(name, "checkpoint", "ckpt") {
            checkpoints.push(v);
        } else if let Some(v) = parse_numbered(name, "wal", "log") {
            // Segments start at a published version + 1; version 0 is never one.
            if v == 0 {
                return Err(corrupt(
                    &dir.join(name),
                    0,
                    "a log segment named as starting at version 0 (the first is 1)",
                ));
            }
            segments.push(v);
        } else if parse_numbered(name, "checkpoint", "tmp").is_some() {
            // A checkpoint a crash interrupted before it was published.
            let path = dir.join(name);
            fs.remove(&path)
                .map_err(|e| io_error("removing", &path, &e))?;
        }
    }
    checkpoints.sort_unstable();
    segments.sort_unstable();

    let mut report = RecoveryReport::default();
    let mut state = Rebuilt::default();
    let mut floor = 0;
    if let Some(&v) = checkpoints.last() {
        let path = dir.join(numbered("checkpoint", v, "ckpt"));
        let (version, count, bytes) = load_checkpoint(fs.as_ref(), &path, &mut state)?;
        if version != v {
            return Err(corrupt(
                &path,
                8,
                "checkpoint version does not match its name",
            ));
        }
        floor = version;
        report.checkpoint = Some(Versionstamp::from_version(version));
        report.checkpoint_entries = count;
        report.bytes_read += bytes;
    }

    // `covered`: every version ever published up to it is in the checkpoint or the segments
    // read so far. A segment's first version is the published version + 1 when it was
    // started, so a segment starting above `covered + 1` means a file is missing.
    let mut covered = floor;
    let mut tail_len = None;
    let mut log_bytes = 0u64;
    for (i, &base) in segments.iter().enumerate() {
        let next = segments.get(i + 1).copied();
        let newest = next.is_none();
        let path = dir.join(numbered("wal", base, "log"));
        if next.is_some_and(|n| n <= floor + 1) {
            // Wholly below the checkpoint: left by a checkpoint or repair interrupted before
            // it deleted it. Not read (it may hold the frames of a batch that failed).
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
        let bytes = read_file(fs.as_ref(), &path)?;
        report.bytes_read += bytes.len() as u64;
        log_bytes += bytes.len() as u64;
        report.segments += 1;
        covered = covered.max(base - 1);
        let expected = record::file_header(record::LOG_MAGIC, base);
        if bytes.len() <= record::FILE_HEADER_LEN
            && (expected.starts_with(&bytes) || bytes.iter().all(|&b| b == 0))
        {
            // Created but its header not (or not wholly) on disk when the process died, or a
            // failed start whose file could not be removed: it holds no records.
            if newest {
                tail_len = Some(0);
            }
            continue;
        }
        if record::parse_file_header(record::LOG_MAGIC, &bytes) != Some(base) {
            return Err(corrupt(
                &path,
                0,
                "not a log segment of this database (bad header)",
            ));
        }
        let mut at = record::FILE_HEADER_LEN;
        while at < bytes.len() {
            let damage = match record::read_frame(&bytes[at..]) {
                Frame::Valid { payload, len } => match record::decode_payload(payload) {
                    Some(p) => {
                        if let Payload::Commit { version, .. } = &p
                            && *version < base
                        {
                            return Err(corrupt(
                                &path,
                                at,
                                format!(
                                    "commit version {version} is below the segment's first \
                                     version {base}"
                                ),
                            ));
                        }
                        if state.apply(p, &path, at, floor)? {
                            report.records_replayed += 1;
                        }
                        covered = covered.max(state.last);
                        at += len;
                        continue;
                    }
                    None => "malformed commit record",
                },
                Frame::Truncated => "record cut short",
                Frame::Damaged(reason) => reason,
            };
            if record::all_zero(&bytes[at..]) {
                // Unused space: preallocated, or never reached the disk. Not damage.
                break;
            }
            // In the newest segment, records after the damage may be what reached the disk of
            // a write cut by a crash (an in-place write lands page by page, in any order). They
            // are a torn tail unless a `synced` mark after the damage says the damaged bytes
            // had been on stable storage: then the damage is real. Elsewhere, any damage is.
            let real = if newest {
                record::durable_mark_after(&bytes[at..], at as u64).is_some()
            } else {
                true
            };
            if real {
                return Err(corrupt(
                    &path,
                    at,
                    format!("{damage}, with valid records after it"),
                ));
            }
            log::warn!(
                "tuplekv: {}: cutting a torn tail of {} bytes at offset {at} ({damage})",
                path.display(),
                bytes.len() - at
            );
            report.truncated = Some((path.clone(), at as u64, (bytes.len() - at) as u64));
            break;
        }
        if newest {
            tail_len = Some(at);
        }
    }

    // Open the newest segment for appending (cut to its good length), or start one.
    let last = state
        .last
        .max(segments.last().map_or(0, |b| b.saturating_sub(1)));
    let (path, len) = match (segments.last(), tail_len) {
        (Some(&base), Some(len)) if len >= record::FILE_HEADER_LEN => {
            (dir.join(numbered("wal", base, "log")), len as u64)
        }
        (Some(&base), _) => (dir.join(numbered("wal", base, "log")), 0),
        (None, _) => (dir.join(numbered("wal", last + 1, "log")), 0),
    };
    let mut file = fs
        .open_append(&path, false)
        .map_err(|e| io_error("opening", &path, &e))?;
    let len = if len == 0 {
        let base = parse_numbered(
            path.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default(),
            "wal",
            "log",
        )
        .unwrap_or(last + 1);
        file.set_len(0)
            .and_then(|()| file.write_all(&record::file_header(record::LOG_MAGIC, base)))
            .and_then(|()| file.sync_data())
            .and_then(|()| fs.sync_dir(dir))
            .map_err(|e| io_error("creating log segment", &path, &e))?;
        record::FILE_HEADER_LEN as u64
    } else {
        if fs.len(&path).map_err(|e| io_error("reading", &path, &e))? != len {
            file.set_len(len)
                .and_then(|()| file.sync_data())
                .map_err(|e| io_error("cutting the torn tail of", &path, &e))?;
        }
        len
    };
    let older = segments
        .iter()
        .filter(|b| dir.join(numbered("wal", **b, "log")) != path)
        .map(|&b| (b, dir.join(numbered("wal", b, "log"))))
        .collect();

    let since_checkpoint = log_bytes;
    let wal = Arc::new(Wal {
        dir: dir.to_path_buf(),
        fs,
        durability: options.durability,
        checkpoint_after: options.checkpoint_after_bytes.max(1),
        segment: Mutex::new(Segment {
            file,
            path,
            len,
            synced: len,
            allocated: len,
            poisoned: None,
            since_checkpoint,
            older,
        }),
        sync_lock: Mutex::new(()),
        pending: Mutex::new(Pending::default()),
        flushed: Condvar::new(),
        rollbacks: AtomicU64::new(0),
        rolled_back_to: AtomicU64::new(0),
        settling: AtomicUsize::new(0),
        background: Mutex::new(Background::default()),
        background_wake: Condvar::new(),
        checkpoint_lock: Mutex::new(()),
        checkpoint_write: Mutex::new(()),
        inner: Mutex::new(Weak::new()),
        #[cfg(test)]
        rotations_started: AtomicUsize::new(0),
    });
    let now = now_ms();
    let mut entries: Vec<(KeyBytes, Version)> = state
        .entries
        .into_iter()
        .filter(|(_, v)| v.expires_at.is_none_or(|d| d > now))
        .collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    report.last_versionstamp = Versionstamp::from_version(last);
    report.elapsed = started.elapsed();
    let open = Arc::new(OpenDir {
        wal: Arc::clone(&wal),
        thread: Mutex::new(None),
        _lock: lock,
    });
    Ok(Recovered {
        entries,
        last,
        open,
        wal,
        report,
    })
}

/// Starts the background thread of an open directory.
pub(crate) fn start_background(open: &OpenDir, inner: &Arc<Inner>) {
    let wal = Arc::clone(&open.wal);
    let weak = Arc::downgrade(inner);
    *wal.inner.lock() = Weak::clone(&weak);
    match std::thread::Builder::new()
        .name("tuplekv-wal".into())
        .spawn(move || wal.run_background(&weak))
    {
        Ok(handle) => *open.thread.lock() = Some(handle),
        Err(e) => log::error!("tuplekv: could not start the log thread: {e}"),
    }
}

/// A one-version chain, for recovered entries.
pub(crate) fn chain_of(version: Version) -> Chain {
    let mut versions = SmallVec::new();
    versions.push(version);
    Chain { versions }
}

#[cfg(test)]
mod tests {
    //! Orderings of the log's threads that need its internals to set up. A committer whose
    //! checks fail against a batch that is not yet durable must not answer before that batch
    //! is final (it once answered at once, and could then read the old value, or lose to a
    //! commit that was later rolled back). Each later test says what broke.
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::durable::fs::{Faults, FaultyFs};
    use crate::{Database, key};

    /// Holds the sync of a first commit setting `k`, runs a second commit that requires `k`
    /// absent until it waits for that batch, then lets the sync fail (`fail`) or succeed.
    /// Returns the second commit's result and what it read of `k` right after.
    fn race_with_unpublished(fail: bool) -> (CommitResult, Option<crate::Value>) {
        let dir = tempfile::tempdir().unwrap();
        let faults = Faults::new();
        let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
        let wal = Arc::clone(db.inner.wal.as_ref().unwrap());
        faults.hold_syncs();
        std::thread::scope(|s| {
            let first = s.spawn(|| db.set(&key!["k"], 1u64));
            faults.wait_for_held_syncs(1);
            let second = s.spawn(|| {
                let result = db
                    .atomic()
                    .check(&key!["k"], None)
                    .set(&key!["k"], 2u64)
                    .commit()
                    .unwrap();
                (result, db.get(&key!["k"]).unwrap().map(|e| e.value))
            });
            while wal.settling.load(Ordering::Acquire) == 0 {
                std::thread::yield_now();
            }
            if fail {
                faults.fail_next_syncs(1);
            }
            faults.release_syncs();
            assert_eq!(first.join().unwrap().is_err(), fail);
            second.join().unwrap()
        })
    }

    /// A checkpoint whose flush of the pending batch fails returns that error instead of
    /// going on to start a segment as if the log were fine.
    #[test]
    fn a_checkpoint_after_a_failed_flush_fails_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let faults = Faults::new();
        let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
        let inner = &db.inner;
        let wal = inner.wal.as_ref().unwrap();
        // A commit applied and queued, as a committer leaves it before it flushes.
        let slot: Slot = Arc::default();
        {
            let write = db.atomic().set(&key!["k"], 1u64).as_write().clone();
            let mut slots = inner.prepare(&write);
            let mut last = inner.commit.lock();
            let mut pending = wal.pending.lock();
            let result = inner
                .apply_write(write, &mut slots, &mut last, Some(&mut pending.sink))
                .unwrap();
            assert!(result.is_committed());
            pending.waiters.push((*last, Arc::clone(&slot)));
        }
        faults.fail_next_syncs(1);
        let err = wal.checkpoint(inner).unwrap_err();
        assert!(err.to_string().contains("fsync failed (injected)"), "{err}");
        assert!(matches!(slot.wait(), Woken::Outcome(Err(_))));
        assert_eq!(db.get(&key!["k"]).unwrap(), None);
    }

    fn faulty(faults: &Arc<Faults>, durability: Durability) -> Options {
        Options {
            fs: Arc::new(FaultyFs::new(Arc::clone(faults))),
            durability,
            background_reclaim: false,
            ..Options::default()
        }
    }

    const BUFFERED: Durability = Durability::Buffered {
        interval: Duration::from_secs(3600),
    };

    /// A sync failed while a checkpoint, having found the log sound, waited to rotate the
    /// segment. The rotation once dropped the poison with the old segment still needed, so
    /// the failed sync then found nothing to repair and reported success for commits whose
    /// pages the failed fsync had dropped.
    #[test]
    fn a_sync_failing_before_a_rotation_is_repaired_not_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let faults = Faults::new();
        let db = Database::open(dir.path(), faulty(&faults, BUFFERED)).unwrap();
        let wal = Arc::clone(db.inner.wal.as_ref().unwrap());
        db.set(&key!["a"], 1u64).unwrap();
        db.set(&key!["b"], 2u64).unwrap();
        // No checkpoint can be published, so nothing can rebuild the log for now.
        faults.fail_rename(true);
        faults.hold_syncs();
        let synced = std::thread::scope(|s| {
            let sync = s.spawn(|| db.sync());
            faults.wait_for_held_syncs(1);
            let checkpoint = s.spawn(|| db.checkpoint());
            // The checkpoint found nothing poisoned and waits for the held sync to rotate.
            while wal.rotations_started.load(Ordering::Acquire) == 0 {
                std::thread::yield_now();
            }
            faults.fail_next_syncs(1);
            faults.release_syncs();
            assert!(checkpoint.join().unwrap().is_err());
            sync.join().unwrap()
        });
        assert!(synced.is_err(), "a failed sync reported success");
        faults.fail_rename(false);
        db.sync().unwrap();
        let image = tempfile::tempdir().unwrap();
        faults.power_cut_image(dir.path(), image.path()).unwrap();
        let crashed = Database::open(image.path(), Options::default()).unwrap();
        assert_eq!(
            crashed.get(&key!["b"]).unwrap().map(|e| e.value),
            Some(crate::Value::U64(2))
        );
    }

    /// The background thread once spun (syncing each round) while an explicit checkpoint held
    /// the checkpoint lock and a background one was wanted. Commits go on for a while to give
    /// a spinning thread something to sync; a waiting one syncs once.
    #[test]
    fn the_background_thread_waits_while_an_explicit_checkpoint_runs() {
        let dir = tempfile::tempdir().unwrap();
        let faults = Faults::new();
        let options = Options {
            checkpoint_after_bytes: 1,
            ..faulty(&faults, BUFFERED)
        };
        let db = Database::open(dir.path(), options).unwrap();
        let wal = Arc::clone(db.inner.wal.as_ref().unwrap());
        let explicit = wal.checkpoint_lock.lock();
        let before = faults.syncs();
        let until = Instant::now() + Duration::from_millis(100);
        let mut i = 0u64;
        while Instant::now() < until {
            db.set(&key!["k", i], i).unwrap();
            i += 1;
            std::thread::yield_now();
        }
        let syncs = faults.syncs() - before;
        drop(explicit);
        assert!(syncs <= 1, "{syncs} background syncs during {i} commits");
    }

    /// A write that replaced (here: cancelled) a key's deadline was rolled back, and the
    /// restored value's deadline was no longer scheduled: the expired value stayed in memory.
    #[test]
    fn a_rolled_back_write_leaves_the_restored_deadline_scheduled() {
        let dir = tempfile::tempdir().unwrap();
        let faults = Faults::new();
        let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
        let expire_in = Duration::from_millis(300);
        let set = db
            .atomic()
            .set_with_expiry(&key!["k"], 1u64, expire_in)
            .commit()
            .unwrap();
        assert!(set.is_committed());
        faults.fail_next_syncs(1);
        db.set(&key!["k"], 2u64).unwrap_err();
        let k = key!["k"].encode();
        // The pass the failed write asked for: the value is live and stays.
        db.inner.reclaim_pass(false);
        assert!(db.inner.map.get(&k[..]).is_some());
        std::thread::sleep(expire_in + Duration::from_millis(50));
        db.inner.reclaim_pass(false);
        assert!(
            db.inner.map.get(&k[..]).is_none(),
            "the expired value was never reclaimed"
        );
    }

    #[test]
    fn a_loser_answers_only_once_the_winner_is_durable_and_then_reads_it() {
        let (result, read) = race_with_unpublished(false);
        assert!(!result.is_committed());
        assert_eq!(read, Some(crate::Value::U64(1)));
    }

    #[test]
    fn a_check_against_a_batch_that_rolls_back_is_evaluated_again() {
        let (result, read) = race_with_unpublished(true);
        assert!(result.is_committed(), "{result:?}");
        assert_eq!(read, Some(crate::Value::U64(2)));
    }
}
