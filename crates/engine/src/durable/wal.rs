//! [`Wal`]: the log's files. It appends batches of frames to the current segment, syncs,
//! reserves versions, starts new segments, and stops for good after a failed sync. It knows
//! nothing of the in-memory store: callers hand it bytes and versions.
//!
//! Locks: `sync_lock` before `segment`, and neither is held while taking any other lock.

use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use super::fs::{FileSystem, WritableFile};
use super::record::{self, FrameWriter};
use super::{
    Durability, PREALLOCATE_STEP, VERSIONS_RESERVED_AHEAD, io_error, numbered, remove_if_present,
    segment_base,
};
use crate::error::Error;

/// The segment being appended to.
pub(crate) struct Segment {
    pub(crate) file: Box<dyn WritableFile>,
    pub(crate) path: PathBuf,
    /// Bytes known to be in the file (everything written successfully).
    pub(crate) len: u64,
    /// Bytes known to be on stable storage (a sync covering them succeeded).
    pub(crate) synced: u64,
    /// The file's length: `len` plus zeros preallocated past it (see [`PREALLOCATE_STEP`]).
    pub(crate) allocated: u64,
    /// Why the log stopped: a sync on this file failed (or a failed write could not be cut
    /// back, or a new segment could not be removed again). Nothing is written to or synced on
    /// it again, and every later write fails with this error until the database is reopened.
    pub(crate) stopped: Option<Error>,
    /// Versions up to this one may be handed out: a `reserved` mark saying so is on stable
    /// storage, in this segment.
    pub(crate) reserved: u64,
    /// Log bytes written since the last checkpoint began.
    pub(crate) since_checkpoint: u64,
    /// Older segments, oldest first, by first version.
    pub(crate) older: Vec<(u64, PathBuf)>,
}

impl Segment {
    /// Asserts (in debug builds and tests) the segment's length marks: what is synced was
    /// written.
    fn debug_assert_marks(&self) {
        debug_assert!(
            self.synced <= self.len,
            "{}: synced {} past the written {}",
            self.path.display(),
            self.synced,
            self.len
        );
    }

    /// Stops the log after a failed sync: nothing is written to or synced on this file again.
    /// The file is cut back to what is known durable, so a reopen (without a power cut)
    /// recovers what a power cut would: the pages the failed sync covered may be gone, and a
    /// reopen that read them from the page cache could then make later commits durable
    /// around them, a hole.
    fn stop(&mut self, error: Error) {
        log::error!("tuplekv: {error}; the log stops accepting writes");
        if let Err(e) = self.file.set_len(self.synced) {
            log::error!(
                "tuplekv: could not cut {} back to its durable length: {e}",
                self.path.display()
            );
        }
        self.len = self.synced;
        self.allocated = self.synced;
        self.stopped = Some(error);
    }

    /// The error a write gets if the log has stopped.
    fn check_running(&self) -> Result<(), Error> {
        match &self.stopped {
            Some(cause) => Err(stopped(cause)),
            None => Ok(()),
        }
    }

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

    /// Grows the zero-filled space ahead of the records to cover `end` and more, so a sync
    /// overwrites allocated blocks instead of growing the file. Only an optimisation.
    fn preallocate(&mut self, end: u64) {
        if end > self.allocated {
            let to = end + PREALLOCATE_STEP;
            match self.file.preallocate(self.allocated.max(self.len), to) {
                Ok(()) => self.allocated = to,
                Err(e) => log::warn!(
                    "tuplekv: could not preallocate {}: {e}",
                    self.path.display()
                ),
            }
        }
    }

    /// Undoes a failed write: cuts the partial frames off (and makes the cut durable), so the
    /// file is as good as before. If even that fails, the log stops.
    fn cut_back(&mut self, synced_before: bool) {
        self.allocated = self.len;
        match self
            .file
            .set_len(self.len)
            .and_then(|()| self.file.sync_data())
        {
            Ok(()) if synced_before => self.synced = self.len,
            Ok(()) => {}
            Err(e) => {
                log::error!(
                    "tuplekv: could not cut {} back after a failed write: {e}",
                    self.path.display()
                );
                self.stopped = Some(io_error("cutting back", &self.path, &e));
            }
        }
    }
}

/// The error every write gets once the log has stopped because of `cause`.
pub(crate) fn stopped(cause: &Error) -> Error {
    match cause {
        Error::Io(io) => Error::Io(io.with_context(format!(
            "the log stopped accepting writes after {} failed (reads go on; reopen the \
             database to recover what is durable)",
            io.context()
        ))),
        other => other.clone(),
    }
}

/// The write-ahead log of an open database directory: its files only.
pub(crate) struct Wal {
    pub(crate) dir: PathBuf,
    pub(crate) fs: std::sync::Arc<dyn FileSystem>,
    durability: Durability,
    checkpoint_after: u64,
    /// Taken around every sync of the segment file, before `segment`: syncs of one file never
    /// overlap, so a sync that fails is seen (and stops the log) before any other sync of it
    /// can report a success that no longer covers the dropped data.
    sync_lock: Mutex<()>,
    segment: Mutex<Segment>,
    /// Successful syncs of segment data so far (see `Stats::log_syncs`).
    syncs: std::sync::atomic::AtomicU64,
    /// Calls of `start_segment` so far, so a test can order a failing sync before one.
    #[cfg(test)]
    pub(crate) rotations_started: std::sync::atomic::AtomicUsize,
}

impl Wal {
    /// The log appending to `segment`.
    pub(crate) fn new(
        dir: &Path,
        fs: std::sync::Arc<dyn FileSystem>,
        durability: Durability,
        checkpoint_after: u64,
        segment: Segment,
    ) -> Wal {
        Wal {
            dir: dir.to_path_buf(),
            fs,
            durability,
            checkpoint_after: checkpoint_after.max(1),
            sync_lock: Mutex::new(()),
            segment: Mutex::new(segment),
            syncs: std::sync::atomic::AtomicU64::new(0),
            #[cfg(test)]
            rotations_started: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Why the log stopped accepting writes (see [`Segment::stopped`]), as the error later
    /// writes get; `None` while it runs. Waits for an append's sync that holds the segment.
    pub(crate) fn stopped(&self) -> Option<Error> {
        self.segment.lock().stopped.as_ref().map(stopped)
    }

    /// The durability the log was opened with.
    pub(crate) fn durability(&self) -> Durability {
        self.durability
    }

    /// Appends `buf`, frames up to version `newest`, and syncs it in [`Durability::Sync`]; in
    /// [`Durability::Buffered`] also when `newest` is above the durable reservation, which the
    /// same write then raises (in `Sync` every acknowledged version is durable, so none is
    /// ever handed out again). A failed write is cut back to the previous length; a failed
    /// sync stops the log. Returns whether a checkpoint is due. Called by one flusher at a
    /// time.
    pub(crate) fn append(&self, buf: &[u8], newest: u64) -> Result<bool, Error> {
        // Only flushes and rotations (never at once) change `reserved`.
        let reserve = self.durability != Durability::Sync && newest > self.segment.lock().reserved;
        let sync = self.durability == Durability::Sync || reserve;
        // Buffered appends go on while a background sync runs (it covers what was written
        // before it started); only a sync made here must not overlap another.
        let _sync = sync.then(|| self.sync_lock.lock());
        let mut seg = self.segment.lock();
        let seg = &mut *seg;
        seg.check_running()?;
        // Each write starts with the segment's durable length, for recovery to tell a torn
        // write from damage (see `record`), then any new reservation. One write call for all
        // (a copy costs less than a second system call).
        let synced_before = seg.synced;
        let mut out = FrameWriter::default();
        out.synced(seg.synced);
        let reserved = newest + VERSIONS_RESERVED_AHEAD;
        if reserve {
            out.reserved(reserved);
        }
        out.buf.extend_from_slice(buf);
        let n = out.buf.len() as u64;
        seg.preallocate(seg.len + n);
        if let Err(e) = seg.file.write_all(&out.buf) {
            let error = io_error("appending to the log", &seg.path, &e);
            seg.cut_back(sync);
            return Err(error);
        }
        if sync && let Err(e) = seg.file.sync_data() {
            // After a failed fsync the kernel may have dropped the written pages and will not
            // report it again: never trust this file again.
            let error = io_error("syncing the log", &seg.path, &e);
            seg.stop(error.clone());
            return Err(error);
        }
        seg.len += n;
        if sync {
            seg.synced = seg.len;
            self.count_sync();
        }
        if reserve {
            seg.reserved = reserved;
        }
        seg.since_checkpoint += n;
        debug_assert!(
            seg.synced >= synced_before,
            "the synced mark never moves back"
        );
        debug_assert!(
            self.durability == Durability::Sync || newest <= seg.reserved,
            "version {newest} was handed out past the durable reservation {}",
            seg.reserved
        );
        seg.debug_assert_marks();
        Ok(seg.since_checkpoint >= self.checkpoint_after)
    }

    /// Counts a successful sync of appended commits.
    fn count_sync(&self) {
        self.syncs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Successful syncs of appended commits so far.
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Makes everything written durable: syncs the segment if anything written is not yet
    /// synced. The sync runs on a second handle of the file, outside the segment lock, so
    /// appends go on meanwhile. A failed sync stops the log.
    pub(crate) fn sync(&self) -> Result<(), Error> {
        let _sync = self.sync_lock.lock();
        let (mut handle, target) = {
            let seg = self.segment.lock();
            seg.check_running()?;
            if seg.synced >= seg.len {
                return Ok(());
            }
            let handle = seg
                .file
                .try_clone()
                .map_err(|e| io_error("syncing the log", &seg.path, &e))?;
            (handle, seg.len)
        };
        let result = handle.sync_data();
        // `sync_lock` keeps the segment from being replaced meanwhile.
        let mut seg = self.segment.lock();
        match result {
            Ok(()) => {
                seg.synced = seg.synced.max(target);
                seg.debug_assert_marks();
                self.count_sync();
                Ok(())
            }
            Err(e) => {
                // Retrying would "succeed" on Linux after the dirty pages were dropped, and
                // later commits could then be durable while these are lost: a hole.
                let error = io_error("syncing the log", &seg.path, &e);
                seg.stop(error.clone());
                Err(error)
            }
        }
    }

    /// Makes `wal-<base>.log` the segment appended to: syncs the current one if needed,
    /// creates the new one with its header and the current reservation (synced, directory
    /// synced), and switches to it. Nothing to do if the current segment already is that one.
    /// If the new file cannot be made whole it is removed again; if even that fails, the log
    /// stops, so no record is ever appended below a newer segment. Returns the older
    /// segments, which a checkpoint at `base - 1` replaces. Called as the log's only writer.
    pub(crate) fn start_segment(&self, base: u64) -> Result<Vec<PathBuf>, Error> {
        let path = self.dir.join(numbered("wal", base, "log"));
        #[cfg(test)]
        self.rotations_started
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let _sync = self.sync_lock.lock();
        let mut seg = self.segment.lock();
        let seg = &mut *seg;
        // A sync may have failed since the caller found the log running.
        seg.check_running()?;
        if seg.path != path {
            // The segments a checkpoint replaces must be whole on disk before a newer one can
            // exist (buffered mode may not have synced yet).
            if seg.synced < seg.len {
                if let Err(e) = seg.file.sync_data() {
                    let error = io_error("syncing the log", &seg.path, &e);
                    seg.stop(error.clone());
                    return Err(error);
                }
                seg.synced = seg.len;
            }
            let (file, len) = self.create_segment(&path, base, seg)?;
            seg.trim();
            drop(std::mem::replace(&mut seg.file, file));
            let old_path = std::mem::replace(&mut seg.path, path);
            seg.older.push((segment_base(&old_path), old_path));
            seg.len = len;
            seg.synced = len;
            seg.allocated = len;
        }
        seg.since_checkpoint = 0;
        Ok(seg.older.iter().map(|(_, p)| p.clone()).collect())
    }

    /// Creates the segment file `path` starting at `base`, with the reservation moved into
    /// it (the segments holding it are about to go), synced with its directory. Removes it
    /// again on failure; if even that fails, stops the log.
    fn create_segment(
        &self,
        path: &Path,
        base: u64,
        seg: &mut Segment,
    ) -> Result<(Box<dyn WritableFile>, u64), Error> {
        let fs = self.fs.as_ref();
        let mut head = record::file_header(record::LOG_MAGIC, base).to_vec();
        let mut mark = FrameWriter::default();
        mark.reserved(seg.reserved);
        head.extend_from_slice(&mark.buf);
        let created = remove_if_present(fs, path)
            .and_then(|()| fs.open_append(path, true))
            .and_then(|mut file| {
                file.write_all(&head)
                    .and_then(|()| file.sync_data())
                    .and_then(|()| fs.sync_dir(&self.dir))
                    .map(|()| file)
            });
        match created {
            Ok(file) => Ok((file, head.len() as u64)),
            Err(e) => {
                let error = io_error("creating log segment", path, &e);
                if let Err(e2) = remove_if_present(fs, path).and_then(|()| fs.sync_dir(&self.dir)) {
                    log::error!(
                        "tuplekv: could not remove the partial segment {}: {e2}",
                        path.display()
                    );
                    seg.stopped = Some(error.clone());
                }
                Err(error)
            }
        }
    }

    /// Forgets the older segments in `removed` (a checkpoint deleted them).
    pub(crate) fn forget_older(&self, removed: &[PathBuf]) {
        self.segment
            .lock()
            .older
            .retain(|(_, p)| !removed.contains(p));
    }

    /// Makes the next checkpoint due only after half the usual growth (a failed one is
    /// retried later, not at once).
    pub(crate) fn postpone_checkpoint(&self) {
        self.segment.lock().since_checkpoint = self.checkpoint_after / 2;
    }

    /// Syncs what is written and trims the segment's preallocated zeros: the log is being
    /// closed.
    pub(crate) fn close(&self) -> Result<(), Error> {
        self.sync()?;
        let mut seg = self.segment.lock();
        if seg.stopped.is_none() {
            seg.trim();
        }
        Ok(())
    }
}
