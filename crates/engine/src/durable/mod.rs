//! Durability: a write-ahead log with group commit, background checkpoints, and recovery on
//! open. See [`Database::open`](crate::Database::open).
//!
//! # Layout of a database directory
//! - `LOCK`: held with an advisory lock while a process has the database open.
//! - `wal-<first version, 20 digits>.log`: log segments; one frame per commit (`record.rs`).
//!   The newest segment is the one being appended to.
//! - `checkpoint-<version, 20 digits>.ckpt`: every live entry at one version. Written to a
//!   `.tmp` file, synced, then renamed, so a checkpoint file is either whole or absent.
//!
//! # Commit path
//! A committer applies its operation to memory under the commit lock *without publishing it*
//! (readers keep reading the last published version; later committers see it, so commits
//! stay serial), appends its frame to the pending batch, releases the lock, and waits. Whoever
//! waits while no flush is running becomes the flusher: it takes the whole pending batch,
//! writes it with one `write`, syncs once ([`Durability::Sync`]), publishes it, and wakes
//! everyone. Commits keep being applied and batched while a sync runs, so one `fdatasync`
//! serves every committer that arrived meanwhile: throughput grows with the number of
//! committers. If the write or the sync fails, the file is cut back to its last good length,
//! the batch and every commit applied after it are removed from memory, and their committers
//! get [`Error::Io`]: a commit is acknowledged only once it is on disk, and readers never see
//! one that is not.
//!
//! # Checkpoints
//! Once the log has grown by [`Options::checkpoint_after_bytes`] since the last checkpoint, a
//! background thread pins a snapshot (MVCC: writers go on), starts a new segment, writes the
//! snapshot, and then deletes the segments and checkpoints it replaces. Disk use stays
//! proportional to live data plus at most about two checkpoints' worth of log.
//!
//! # Recovery
//! The newest checkpoint is loaded, then every record above its version is replayed. A frame
//! whose checksum fails at the end of the newest segment, with nothing valid after it, is a
//! torn write from a crash: it is cut off, and the cut is logged (`log::warn!`) and reported
//! in [`RecoveryReport::truncated`]. Damage anywhere else is [`Error::Corrupt`], naming the
//! file and offset: never silent data loss.

pub mod fs;
pub(crate) mod record;

use std::collections::HashMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use smallvec::SmallVec;

use crate::atomic::{AtomicWrite, CommitResult};
use crate::db::{Chain, Inner, Options, Version, now_ms};
use crate::error::Error;
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
    /// or power cut loses at most the commits of the last `interval` (never part of a commit,
    /// and never a commit while keeping a later one).
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

fn io_error(context: impl Into<String>, path: &Path, e: &io::Error) -> Error {
    Error::Io {
        context: format!("{} {}", context.into(), path.display()),
        kind: e.kind(),
        message: e.to_string(),
    }
}

/// The segment being appended to.
struct Segment {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    /// Bytes known to be in the file (everything written successfully).
    len: u64,
    /// Whether there are writes not yet synced (buffered mode).
    dirty: bool,
    /// Why the file is unusable until it is repaired, after a failed write or sync.
    broken: Option<Error>,
    /// Log bytes written since the last checkpoint began.
    since_checkpoint: u64,
    /// Older segments, oldest first, by first version.
    older: Vec<(u64, PathBuf)>,
}

/// How many times a flusher yields, at most, waiting for announced commits to queue.
const GATHER_ROUNDS_MAX: u32 = 64;

/// Decrements the count of announced commits when dropped (also on an early error return).
struct Arrived<'a>(&'a AtomicUsize);

impl Drop for Arrived<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Where a committer waiting for durability finds its outcome.
type Slot = Arc<Mutex<Option<Result<(), Error>>>>;

/// Commits applied to memory (unpublished) whose frames are not yet handed to a flusher.
#[derive(Default)]
struct Pending {
    /// Their frames and the keys they wrote.
    sink: LogSink,
    /// Their versions and their committers' slots, in version order.
    waiters: Vec<(u64, Slot)>,
    /// Whether someone is writing to the log (flushing a batch, or rotating the segment).
    flushing: bool,
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
    pending: Mutex<Pending>,
    flushed: Condvar,
    /// Commits that have announced themselves but not yet queued their frame.
    arriving: AtomicUsize,
    background: Mutex<Background>,
    background_wake: Condvar,
    checkpoint_lock: Mutex<()>,
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
        self.wal.sync_now()
    }
}

impl Drop for OpenDir {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::error!("tuplekv: closing {}: {e}", self.wal.dir.display());
        }
    }
}

impl Wal {
    /// Commits one validated operation: applies it to memory unpublished under the commit
    /// lock, queues its frame, and waits until a flusher (possibly this thread) has made it
    /// durable and published it, or has failed it and rolled it back.
    pub(crate) fn commit(&self, inner: &Inner, write: AtomicWrite) -> Result<CommitResult, Error> {
        let slot: Slot = Arc::new(Mutex::new(None));
        // Announce the commit before queueing on the commit lock, so a flusher knows more
        // frames are on their way (see `await_durable`).
        self.arriving.fetch_add(1, Ordering::AcqRel);
        let arrived = Arrived(&self.arriving);
        let result = {
            let mut last = inner.commit.lock();
            let mut pending = self.pending.lock();
            let result = inner.apply_write(write, &mut last, Some(&mut pending.sink))?;
            if result.is_committed() {
                pending.waiters.push((*last, Arc::clone(&slot)));
            }
            drop(arrived);
            result
        };
        if !result.is_committed() {
            return Ok(result); // a conflict wrote nothing
        }
        self.await_durable(inner, &slot)?;
        inner.reclaimer.wake_if_pending();
        Ok(result)
    }

    /// Waits for the outcome in `slot`, flushing the pending batch whenever nobody else is.
    fn await_durable(&self, inner: &Inner, slot: &Slot) -> Result<(), Error> {
        let mut pending = self.pending.lock();
        loop {
            if let Some(outcome) = slot.lock().take() {
                return outcome;
            }
            if !pending.flushing && !pending.waiters.is_empty() {
                // Commits announced but not yet queued are microseconds away: wait for them
                // (briefly, bounded) so one sync covers them too. This is what makes a batch
                // hold every active committer rather than those already queued.
                let mut waited = 0;
                while self.arriving.load(Ordering::Acquire) > 0 && waited < GATHER_ROUNDS_MAX {
                    drop(pending);
                    std::thread::yield_now();
                    waited += 1;
                    pending = self.pending.lock();
                    if pending.flushing {
                        break;
                    }
                }
                if pending.flushing {
                    continue;
                }
                pending.flushing = true;
                let batch = Batch {
                    sink: std::mem::take(&mut pending.sink),
                    waiters: std::mem::take(&mut pending.waiters),
                };
                drop(pending);
                self.flush(inner, batch);
                pending = self.pending.lock();
                pending.flushing = false;
                self.flushed.notify_all();
                continue;
            }
            self.flushed.wait(&mut pending);
        }
    }

    /// Writes (and syncs) one batch, then publishes it; on failure rolls back the batch and
    /// every commit applied after it. Called with `flushing` set, so flushes never overlap.
    fn flush(&self, inner: &Inner, batch: Batch) {
        let Some(&(newest, _)) = batch.waiters.last() else {
            return;
        };
        match self.append(&batch.sink.frames.buf) {
            Ok(()) => {
                inner.publish(newest);
                for (_, slot) in &batch.waiters {
                    *slot.lock() = Some(Ok(()));
                }
            }
            Err(e) => {
                // Commits applied since this batch was taken were checked against its state,
                // so they fail with it. Stop new commits while memory is put back.
                let _commit = inner.commit.lock();
                let mut pending = self.pending.lock();
                let published = inner.visible_version();
                inner.roll_back(&batch.sink.touched, published);
                inner.roll_back(&pending.sink.touched, published);
                pending.sink = LogSink::default();
                let later = std::mem::take(&mut pending.waiters);
                for (_, slot) in batch.waiters.iter().chain(&later) {
                    *slot.lock() = Some(Err(e.clone()));
                }
            }
        }
    }

    /// Runs `f` as the only writer of the log: waits for a running flush, flushes what is
    /// pending, then calls `f` before any later batch is written.
    fn exclusively<T>(&self, inner: &Inner, f: impl FnOnce() -> T) -> T {
        let mut pending = self.pending.lock();
        while pending.flushing {
            self.flushed.wait(&mut pending);
        }
        pending.flushing = true;
        let batch = Batch {
            sink: std::mem::take(&mut pending.sink),
            waiters: std::mem::take(&mut pending.waiters),
        };
        drop(pending);
        self.flush(inner, batch);
        let out = f();
        let mut pending = self.pending.lock();
        pending.flushing = false;
        self.flushed.notify_all();
        out
    }

    /// Appends `buf` to the log (and syncs it, in [`Durability::Sync`]). On failure the file
    /// is cut back to its previous length.
    fn append(&self, buf: &[u8]) -> Result<(), Error> {
        let mut seg = self.segment.lock();
        let seg = &mut *seg;
        if seg.broken.is_some() {
            // Try to put the file back to its last good state before writing again.
            match seg
                .file
                .set_len(seg.len)
                .and_then(|()| seg.file.sync_data())
            {
                Ok(()) => seg.broken = None,
                Err(e) => return Err(io_error("repairing the log", &seg.path, &e)),
            }
        }
        let sync = self.durability == Durability::Sync;
        let written = seg
            .file
            .write_all(buf)
            .and_then(|()| if sync { seg.file.sync_data() } else { Ok(()) });
        if let Err(e) = written {
            let error = io_error("appending to the log", &seg.path, &e);
            if let Err(e2) = seg
                .file
                .set_len(seg.len)
                .and_then(|()| seg.file.sync_data())
            {
                log::error!(
                    "tuplekv: could not cut {} back after a failed write: {e2}",
                    seg.path.display()
                );
                seg.broken = Some(error.clone());
            }
            return Err(error);
        }
        let n = buf.len() as u64;
        seg.len += n;
        seg.since_checkpoint += n;
        seg.dirty = !sync;
        if seg.since_checkpoint >= self.checkpoint_after {
            let mut bg = self.background.lock();
            if !bg.checkpoint_wanted {
                bg.checkpoint_wanted = true;
                self.background_wake.notify_all();
            }
        }
        Ok(())
    }

    /// Syncs the log if anything written is not yet synced. The sync runs on a second handle
    /// of the file, outside the segment lock, so committers keep appending meanwhile.
    pub(crate) fn sync_now(&self) -> Result<(), Error> {
        let (mut handle, path) = {
            let mut seg = self.segment.lock();
            if !seg.dirty {
                return Ok(());
            }
            let handle = seg
                .file
                .try_clone()
                .map_err(|e| io_error("syncing the log", &seg.path, &e))?;
            seg.dirty = false;
            (handle, seg.path.clone())
        };
        if let Err(e) = handle.sync_data() {
            // Still unsynced; the next tick (or close) tries again.
            let mut seg = self.segment.lock();
            if seg.path == path {
                seg.dirty = true;
            }
            return Err(io_error("syncing the log", &path, &e));
        }
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
        let (snapshot, replaced) = self.exclusively(inner, || {
            let mut seg = self.segment.lock();
            // The segments this checkpoint replaces must be whole on disk before a newer
            // segment can exist (buffered mode may not have synced yet).
            if seg.dirty {
                seg.file
                    .sync_data()
                    .map_err(|e| io_error("syncing the log", &seg.path, &e))?;
                seg.dirty = false;
            }
            // Everything written so far is published (flushes publish before they return).
            let version = inner.visible_version();
            let base = |p: &Path| {
                parse_numbered(
                    p.file_name().and_then(|n| n.to_str()).unwrap_or_default(),
                    "wal",
                    "log",
                )
                .unwrap_or(0)
            };
            // Start a new segment unless the current one is still empty of commits (it begins
            // right after `version`): the checkpoint then replaces every older segment.
            if base(&seg.path) != version + 1 {
                let path = self.dir.join(numbered("wal", version + 1, "log"));
                let mut file = self
                    .fs
                    .open_append(&path, true)
                    .map_err(|e| io_error("creating log segment", &path, &e))?;
                file.write_all(&record::file_header(record::LOG_MAGIC, version + 1))
                    .and_then(|()| file.sync_data())
                    .and_then(|()| self.fs.sync_dir(&self.dir))
                    .map_err(|e| io_error("creating log segment", &path, &e))?;
                drop(std::mem::replace(&mut seg.file, file));
                let old_path = std::mem::replace(&mut seg.path, path);
                seg.older.push((base(&old_path), old_path));
                seg.len = record::FILE_HEADER_LEN as u64;
                seg.broken = None;
            }
            seg.since_checkpoint = 0;
            let replaced: Vec<PathBuf> = seg.older.iter().map(|(_, p)| p.clone()).collect();
            Ok::<_, Error>((crate::db::Snapshot::register(inner), replaced))
        })?;
        {
            let mut bg = self.background.lock();
            bg.checkpoint_wanted = false;
        }
        let version = snapshot.versionstamp().version();

        // Write the snapshot to a temporary file, sync it, and publish it by renaming.
        let final_path = self.dir.join(numbered("checkpoint", version, "ckpt"));
        let tmp_path = self.dir.join(numbered("checkpoint", version, "tmp"));
        let mut file = self
            .fs
            .open_append(&tmp_path, true)
            .map_err(|e| io_error("creating checkpoint", &tmp_path, &e))?;
        let write_err = |e: io::Error| io_error("writing checkpoint", &tmp_path, &e);
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
            let chain = slot.value().load();
            let Some(v) = chain.at(version) else { continue };
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
        file.sync_data().map_err(write_err)?;
        drop(file);
        drop(snapshot);
        self.fs
            .rename(&tmp_path, &final_path)
            .and_then(|()| self.fs.sync_dir(&self.dir))
            .map_err(|e| io_error("publishing checkpoint", &final_path, &e))?;

        // The checkpoint is durable: what it replaces can go.
        let names = self
            .fs
            .list(&self.dir)
            .map_err(|e| io_error("listing", &self.dir, &e))?;
        let mut removed = false;
        for name in names {
            if parse_numbered(&name, "checkpoint", "ckpt").is_some_and(|v| v < version) {
                let path = self.dir.join(&name);
                self.fs
                    .remove(&path)
                    .map_err(|e| io_error("removing", &path, &e))?;
                removed = true;
            }
        }
        for path in &replaced {
            self.fs
                .remove(path)
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

    /// The background thread: periodic syncs (buffered mode) and checkpoints.
    fn run_background(self: &Arc<Wal>, inner: &Weak<Inner>) {
        let tick = match self.durability {
            Durability::Buffered { interval } => interval.max(Duration::from_millis(1)),
            Durability::Sync => Duration::from_secs(1),
        };
        loop {
            let checkpoint = {
                let mut bg = self.background.lock();
                if !bg.shutdown && !bg.checkpoint_wanted {
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
                let result = match self.checkpoint_lock.try_lock() {
                    Some(_one_at_a_time) => self.checkpoint_inner(&inner).map(|_| ()),
                    None => Ok(()), // an explicit one is running
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
    let version = record::parse_file_header(record::CHECKPOINT_MAGIC, &bytes)
        .ok_or_else(|| corrupt(path, 0, "not a checkpoint file (bad header)"))?;
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
                if v != version || entries != count || at + len != bytes.len() {
                    return Err(corrupt(
                        path,
                        at,
                        "checkpoint trailer does not match its contents",
                    ));
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

    let mut tail_len = None;
    let mut log_bytes = 0u64;
    for (i, &base) in segments.iter().enumerate() {
        let newest = i + 1 == segments.len();
        let path = dir.join(numbered("wal", base, "log"));
        let bytes = read_file(fs.as_ref(), &path)?;
        report.bytes_read += bytes.len() as u64;
        log_bytes += bytes.len() as u64;
        report.segments += 1;
        if bytes.len() < record::FILE_HEADER_LEN && newest {
            // Created but not yet written when the process died: start it again.
            tail_len = Some(0);
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
                        if state.apply(p, &path, at, floor)? {
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
            if !newest || record::valid_frame_after(&bytes[at..]).is_some() {
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
            dirty: false,
            broken: None,
            since_checkpoint,
            older,
        }),
        pending: Mutex::new(Pending::default()),
        flushed: Condvar::new(),
        arriving: AtomicUsize::new(0),
        background: Mutex::new(Background::default()),
        background_wake: Condvar::new(),
        checkpoint_lock: Mutex::new(()),
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
