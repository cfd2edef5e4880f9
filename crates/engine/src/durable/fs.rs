//! The file-system seam: every file operation of the write-ahead log, the checkpoints and
//! recovery goes through [`FileSystem`], so tests can put faults (short writes, `ENOSPC`,
//! failing `fsync`) between the engine and the disk. [`OsFs`] is the real thing and the
//! default; [`FaultyFs`] wraps it with programmable faults, counts and can hold syncs, and
//! models what a power cut would leave on disk ([`Faults::power_cut_image`]), including
//! Linux's behaviour after a failed `fsync` (the unsynced data is dropped, and a retried
//! `fsync` succeeds without it).

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// A file written front to back: the log's current segment, or a checkpoint being written.
/// Writes go to a write position, which starts at the end of the file and follows
/// [`WritableFile::set_len`].
pub trait WritableFile: Send {
    /// Writes all of `buf` at the write position, and moves it past them.
    ///
    /// # Errors
    /// Any I/O error; part of `buf` may have been written.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes everything written so far durable (`fdatasync`).
    ///
    /// # Errors
    /// Any I/O error; what was written since the last successful sync is then in doubt.
    fn sync_data(&mut self) -> io::Result<()>;
    /// Cuts the file to `len` bytes (used to drop a failed or torn tail, or unused
    /// preallocated space) and moves the write position there.
    ///
    /// # Errors
    /// Any I/O error.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// Writes zeros from byte `from` (the file's current length) up to `to`, without moving
    /// the write position, so that later writes there overwrite allocated blocks: syncing
    /// such a write changes no file metadata, and `fdatasync` is then much cheaper than after
    /// an append that grows the file. Not synced here. Where positioned writes are not
    /// available this does nothing.
    ///
    /// # Errors
    /// Any I/O error; some of the zeros may have been written.
    fn preallocate(&mut self, from: u64, to: u64) -> io::Result<()>;
    /// A second handle on the same file, so a background thread can sync it without holding
    /// up writers.
    ///
    /// # Errors
    /// Any I/O error.
    fn try_clone(&self) -> io::Result<Box<dyn WritableFile>>;
}

/// The operations the durable engine performs on its directory.
pub trait FileSystem: Send + Sync + fmt::Debug + 'static {
    /// Creates `dir` and its parents if they are missing.
    ///
    /// # Errors
    /// Any I/O error.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Takes an exclusive advisory lock on `dir`, held until the returned guard is dropped.
    ///
    /// # Errors
    /// [`io::ErrorKind::WouldBlock`] when another process (or handle) holds it.
    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn Send + Sync>>;
    /// The names of the files in `dir`.
    ///
    /// # Errors
    /// Any I/O error.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens `path` for reading.
    ///
    /// # Errors
    /// Any I/O error.
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>>;
    /// Opens `path` for writing at its end, creating it if needed, or emptying it first with
    /// `truncate`.
    ///
    /// # Errors
    /// Any I/O error.
    fn open_append(&self, path: &Path, truncate: bool) -> io::Result<Box<dyn WritableFile>>;
    /// The length of `path` in bytes.
    ///
    /// # Errors
    /// Any I/O error.
    fn len(&self, path: &Path) -> io::Result<u64>;
    /// Renames `from` to `to`, replacing `to`.
    ///
    /// # Errors
    /// Any I/O error.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Deletes `path`.
    ///
    /// # Errors
    /// Any I/O error.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    ///
    /// # Errors
    /// Any I/O error.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsFs;

/// A plain [`File`] as a [`WritableFile`].
struct OsFile(File);

impl WritableFile for OsFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)?;
        self.0.seek(SeekFrom::Start(len)).map(drop)
    }

    #[cfg(unix)]
    fn preallocate(&mut self, from: u64, to: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        const CHUNK: usize = 64 << 10;
        let zeros = [0u8; CHUNK];
        let mut at = from;
        while at < to {
            let n = usize::try_from(to - at).unwrap_or(CHUNK).min(CHUNK);
            self.0.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        Ok(())
    }

    #[cfg(not(unix))]
    fn preallocate(&mut self, _from: u64, _to: u64) -> io::Result<()> {
        Ok(())
    }

    fn try_clone(&self) -> io::Result<Box<dyn WritableFile>> {
        Ok(Box::new(OsFile(self.0.try_clone()?)))
    }
}

impl FileSystem for OsFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn Send + Sync>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(super::LOCK_FILE))?;
        match file.try_lock() {
            Ok(()) => Ok(Box::new(file)),
            Err(TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "the directory is locked by another open database",
            )),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(names)
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>> {
        Ok(Box::new(File::open(path)?))
    }

    fn open_append(&self, path: &Path, truncate: bool) -> io::Result<Box<dyn WritableFile>> {
        // Not `O_APPEND`: preallocated space past the write position must be overwritten,
        // not appended after.
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        if truncate {
            file.set_len(0)?;
        }
        file.seek(SeekFrom::End(0))?;
        Ok(Box::new(OsFile(file)))
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        Ok(fs::metadata(path)?.len())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// Faults [`FaultyFs`] injects; shared between the file system and the test that drives it.
#[derive(Debug, Default)]
pub struct Faults {
    /// Bytes that may still be written before writes fail with `ENOSPC` (`u64::MAX`: no
    /// limit). A write that crosses the limit writes the bytes up to it, then fails: a short
    /// write.
    write_budget: AtomicU64,
    /// When set, every `sync_data` fails.
    fail_sync: AtomicBool,
    /// When set, every `rename` fails (checkpoints cannot be published).
    fail_rename: AtomicBool,
    /// When set, every removal of an existing file fails.
    fail_remove: AtomicBool,
    /// When set, every `try_clone` fails as if out of file descriptors.
    fail_clone: AtomicBool,
    /// How many of the next `sync_data` calls fail.
    fail_syncs_next: AtomicU64,
    /// `sync_data` calls made (failed ones included).
    syncs: AtomicU64,
    /// Whether syncs are held, and how many are waiting at the gate.
    gate: Mutex<(bool, usize)>,
    gate_changed: Condvar,
    /// What is not yet on stable storage, per file written through [`FaultyFs`].
    disk: Mutex<HashMap<PathBuf, Unstable>>,
}

/// The byte ranges of one file a power cut would lose.
#[derive(Debug, Default)]
struct Unstable {
    len: u64,
    /// Written since the last successful sync.
    unsynced: Vec<(u64, u64)>,
    /// Written, then dropped by a failed sync: never durable, whatever later syncs say.
    dropped: Vec<(u64, u64)>,
}

impl Unstable {
    /// A sync made the first `len` bytes durable.
    fn synced(&mut self, len: u64) {
        self.unsynced.retain(|r| r.1 > len);
        for r in &mut self.unsynced {
            r.0 = r.0.max(len);
        }
    }

    fn cut(&mut self, len: u64) {
        self.len = len;
        for ranges in [&mut self.unsynced, &mut self.dropped] {
            ranges.retain(|r| r.0 < len);
            for r in ranges.iter_mut() {
                r.1 = r.1.min(len);
            }
        }
    }
}

impl Faults {
    /// No faults.
    pub fn new() -> Arc<Faults> {
        let faults = Faults::default();
        faults.write_budget.store(u64::MAX, Ordering::SeqCst);
        Arc::new(faults)
    }

    /// Lets `bytes` more bytes be written, then fails writes as a full disk does.
    pub fn disk_full_after(&self, bytes: u64) {
        self.write_budget.store(bytes, Ordering::SeqCst);
    }

    /// Space is back: writes succeed again.
    pub fn disk_has_space(&self) {
        self.write_budget.store(u64::MAX, Ordering::SeqCst);
    }

    /// Makes every `fsync` fail (`true`) or succeed (`false`).
    pub fn fail_sync(&self, fail: bool) {
        self.fail_sync.store(fail, Ordering::SeqCst);
    }

    /// Makes every rename fail (`true`) or succeed (`false`).
    pub fn fail_rename(&self, fail: bool) {
        self.fail_rename.store(fail, Ordering::SeqCst);
    }

    /// Makes every removal of an existing file fail (`true`) or succeed (`false`).
    pub fn fail_remove(&self, fail: bool) {
        self.fail_remove.store(fail, Ordering::SeqCst);
    }

    /// Makes every second handle on a file ([`WritableFile::try_clone`]) fail (`true`), as
    /// when out of file descriptors, or succeed (`false`).
    pub fn fail_clone(&self, fail: bool) {
        self.fail_clone.store(fail, Ordering::SeqCst);
    }

    /// Makes the next `n` syncs fail. Like Linux, a failed sync drops the data it was to
    /// make durable (see [`Faults::power_cut_image`]); later syncs succeed without it.
    pub fn fail_next_syncs(&self, n: u64) {
        self.fail_syncs_next.store(n, Ordering::SeqCst);
    }

    /// How many `sync_data` calls were made so far (failed ones included).
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::SeqCst)
    }

    /// Makes every `sync_data` wait at a gate until [`Faults::release_syncs`].
    pub fn hold_syncs(&self) {
        self.gate.lock().unwrap_or_else(PoisonError::into_inner).0 = true;
    }

    /// Waits until `n` syncs are waiting at the gate of [`Faults::hold_syncs`].
    pub fn wait_for_held_syncs(&self, n: usize) {
        let mut gate = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
        while gate.1 < n {
            gate = self
                .gate_changed
                .wait(gate)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Lets held syncs (and later ones) through.
    pub fn release_syncs(&self) {
        self.gate.lock().unwrap_or_else(PoisonError::into_inner).0 = false;
        self.gate_changed.notify_all();
    }

    /// Copies the files of `dir` into `into` as a power cut now would leave them: every byte
    /// written through this file system and not made durable by a successful sync (or dropped
    /// by a failed one) reads as zero. Renames and removals count as durable at once.
    ///
    /// # Errors
    /// Any I/O error reading `dir` or writing `into`.
    pub fn power_cut_image(&self, dir: &Path, into: &Path) -> io::Result<()> {
        let disk = self.disk.lock().unwrap_or_else(PoisonError::into_inner);
        fs::create_dir_all(into)?;
        for name in OsFs.list(dir)? {
            if name == super::LOCK_FILE {
                continue;
            }
            let path = dir.join(&name);
            let mut bytes = fs::read(&path)?;
            if let Some(state) = disk.get(&path) {
                for &(from, to) in state.unsynced.iter().chain(&state.dropped) {
                    let to = usize::try_from(to).unwrap_or(usize::MAX).min(bytes.len());
                    let from = usize::try_from(from).unwrap_or(usize::MAX).min(to);
                    bytes[from..to].fill(0);
                }
            }
            fs::write(into.join(&name), bytes)?;
        }
        Ok(())
    }

    fn file_state<T>(&self, path: &Path, f: impl FnOnce(&mut Unstable) -> T) -> T {
        let mut disk = self.disk.lock().unwrap_or_else(PoisonError::into_inner);
        f(disk.entry(path.to_path_buf()).or_default())
    }
}

/// [`OsFs`] with the faults of a shared [`Faults`] switched in, for tests.
#[derive(Debug, Clone)]
pub struct FaultyFs {
    faults: Arc<Faults>,
}

impl FaultyFs {
    /// A file system that injects `faults`.
    pub fn new(faults: Arc<Faults>) -> FaultyFs {
        FaultyFs { faults }
    }
}

fn enospc() -> io::Error {
    io::Error::new(
        io::ErrorKind::StorageFull,
        "no space left on device (injected)",
    )
}

/// A file whose writes and syncs obey [`Faults`].
struct FaultyFile {
    file: Box<dyn WritableFile>,
    faults: Arc<Faults>,
    path: PathBuf,
}

impl FaultyFile {
    /// Writes `buf` and records it as not yet durable.
    fn write_tracked(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.write_all(buf)?;
        let n = buf.len() as u64;
        self.faults.file_state(&self.path, |s| {
            s.unsynced.push((s.len, s.len + n));
            s.len += n;
        });
        Ok(())
    }
}

impl WritableFile for FaultyFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let len = buf.len() as u64;
        let budget = &self.faults.write_budget;
        let mut left = budget.load(Ordering::SeqCst);
        loop {
            if left == u64::MAX {
                return self.write_tracked(buf);
            }
            let take = left.min(len);
            match budget.compare_exchange(left, left - take, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => break,
                Err(now) => left = now,
            }
        }
        let take = left.min(len);
        let cut = usize::try_from(take).unwrap_or(buf.len());
        self.write_tracked(&buf[..cut])?;
        if take < len { Err(enospc()) } else { Ok(()) }
    }

    fn sync_data(&mut self) -> io::Result<()> {
        let faults = &*self.faults;
        // A sync is only known to cover what was written before it started: bytes written
        // while it is held or running stay unsynced, so a test catches an engine that
        // assumes more.
        let covers = faults.file_state(&self.path, |s| s.len);
        {
            let mut gate = faults.gate.lock().unwrap_or_else(PoisonError::into_inner);
            gate.1 += 1;
            faults.gate_changed.notify_all();
            while gate.0 {
                gate = faults
                    .gate_changed
                    .wait(gate)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            gate.1 -= 1;
        }
        faults.syncs.fetch_add(1, Ordering::SeqCst);
        let next = faults
            .fail_syncs_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if next || faults.fail_sync.load(Ordering::SeqCst) {
            // Linux marks the pages clean after a failed writeback: the data is gone.
            faults.file_state(&self.path, |s| {
                let unsynced = std::mem::take(&mut s.unsynced);
                s.dropped.extend(unsynced);
            });
            return Err(io::Error::other("fsync failed (injected)"));
        }
        self.file.sync_data()?;
        faults.file_state(&self.path, |s| s.synced(covers));
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)?;
        self.faults.file_state(&self.path, |s| s.cut(len));
        Ok(())
    }

    /// Does nothing: the power-cut model tracks a file that grows by its writes. (Recovery
    /// of a preallocated tail is tested on the real file system.)
    fn preallocate(&mut self, _from: u64, _to: u64) -> io::Result<()> {
        Ok(())
    }

    fn try_clone(&self) -> io::Result<Box<dyn WritableFile>> {
        if self.faults.fail_clone.load(Ordering::SeqCst) {
            return Err(io::Error::other("too many open files (injected)"));
        }
        Ok(Box::new(FaultyFile {
            file: self.file.try_clone()?,
            faults: Arc::clone(&self.faults),
            path: self.path.clone(),
        }))
    }
}

impl FileSystem for FaultyFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        OsFs.create_dir_all(dir)
    }

    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn Send + Sync>> {
        OsFs.lock_dir(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        OsFs.list(dir)
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>> {
        OsFs.open_read(path)
    }

    fn open_append(&self, path: &Path, truncate: bool) -> io::Result<Box<dyn WritableFile>> {
        let file = OsFs.open_append(path, truncate)?;
        let len = OsFs.len(path)?;
        self.faults.file_state(path, |s| {
            if truncate || s.len != len {
                *s = Unstable::default();
            }
            s.cut(len);
        });
        Ok(Box::new(FaultyFile {
            file,
            faults: Arc::clone(&self.faults),
            path: path.to_path_buf(),
        }))
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        OsFs.len(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if self.faults.fail_rename.load(Ordering::SeqCst) {
            return Err(io::Error::other("rename failed (injected)"));
        }
        OsFs.rename(from, to)?;
        let mut disk = self
            .faults
            .disk
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match disk.remove(from) {
            Some(state) => disk.insert(to.to_path_buf(), state),
            None => disk.remove(to),
        };
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        if self.faults.fail_remove.load(Ordering::SeqCst) && path.exists() {
            return Err(io::Error::other("remove failed (injected)"));
        }
        OsFs.remove(path)?;
        self.faults
            .disk
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(path);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        OsFs.sync_dir(dir)
    }
}

#[cfg(test)]
mod tests {
    //! The power-cut model itself: a sync once cleared every unsynced byte of its file,
    //! including bytes written while it was held, so tests could not catch an engine that
    //! counted on a sync covering writes made after it started.
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn a_sync_covers_only_what_was_written_before_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let faults = Faults::new();
        let faulty = FaultyFs::new(Arc::clone(&faults));
        let path = dir.path().join("f");
        let mut file = faulty.open_append(&path, true).unwrap();
        file.write_all(b"aaaa").unwrap();
        let mut second = file.try_clone().unwrap();
        faults.hold_syncs();
        std::thread::scope(|s| {
            let sync = s.spawn(move || second.sync_data());
            faults.wait_for_held_syncs(1);
            file.write_all(b"bbbb").unwrap();
            faults.release_syncs();
            sync.join().unwrap().unwrap();
        });
        let image = tempfile::tempdir().unwrap();
        faults.power_cut_image(dir.path(), image.path()).unwrap();
        assert_eq!(fs::read(image.path().join("f")).unwrap(), b"aaaa\0\0\0\0");
    }
}
