//! The body of the `recovery` fuzz target: a database directory built from the input bytes,
//! opened with [`Database::open`], and what recovery may make of it.
//!
//! The first byte picks how the directory is built:
//! - even: a real history, one of 256 chosen by the second byte, written through the public
//!   API and closed, or copied while open (as a process crash leaves it), or cut as a power
//!   cut leaves it; then the rest of the input is a list of edits to its files (overwrite,
//!   truncate, append, zero, flip, delete, insert, add a file; see `apply_edit`).
//! - odd: files made wholly from the input: log segments and checkpoints with right (or
//!   deliberately wrong) headers, holding frames whose checksums are computed here from
//!   payloads built field by field from the input (see `synthesize`). So inputs get past
//!   the checksums to the payload decoder and to recovery's checks of versions, counts and
//!   missing files, which random bytes would almost never reach.
//!
//! What must hold ([`check`]): opening never panics; it fails with [`Error::Corrupt`] or
//! [`Error::Io`], or it succeeds. For a history whose edits forged no frame (every frame with
//! valid checksums is where the history wrote it, byte for byte: see `forges_a_frame`), the
//! state it succeeds with is the state after some prefix of the history's commits, stamps
//! included. Whatever the input, a database that opened takes one more commit above every
//! stamp it recovered, and opening the directory again gives back the same state plus that
//! commit.
//!
//! The record format is written out again here rather than taken from the engine (which keeps
//! it private): it is the format the files on disk must have, so a test that spells it out
//! also notices when it changes.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tuplekv_engine::codec::encode_key;
use tuplekv_engine::durable::fs::Faults;
use tuplekv_engine::{Database, Durability, Error, Options, Value, Versionstamp, key};

use crate::db::{dump, options};
use crate::durable::{BUFFERED, faulty};
use crate::rng::SplitMix64;

/// A database's whole state: (key, value, stamp) in key order, as [`dump`] reads it.
pub type State = Vec<(Vec<u8>, Value, Versionstamp)>;

/// The files of a database directory (`LOCK` aside), by name.
pub type Files = Vec<(String, Vec<u8>)>;

const LOG_MAGIC: &[u8; 8] = b"TKVLOG01";
const CHECKPOINT_MAGIC: &[u8; 8] = b"TKVCKP01";
const FILE_HEADER_LEN: usize = 16;
const FRAME_HEADER_LEN: usize = 12;
/// The longest frame payload recovery accepts.
const FRAME_PAYLOAD_MAX: usize = 4 << 20;
const KIND_COMMIT: u8 = 1;
const KIND_ENTRIES: u8 = 2;
const KIND_END: u8 = 3;
const KIND_SYNCED: u8 = 4;

/// At most this many edits or synthesized files and frames are read from one input, so a
/// long input costs no more than a short one.
const EDITS_MAX: usize = 16;
const FILES_MAX: u8 = 4;
const FRAMES_MAX: u8 = 12;

/// Zeros kept after the last record of a segment copied while open: enough for recovery to
/// meet a zero tail, far fewer than the megabytes preallocated.
const ZERO_TAIL_KEPT: usize = 256;

/// Expiries in the histories: far enough ahead that a long fuzzing run never sees one pass.
const EXPIRE_IN: Duration = Duration::from_secs(10 * 365 * 86_400);

/// What recovery made of a directory that passed the checks.
#[derive(Debug)]
pub enum Outcome {
    /// Recovery refused the directory with this error (`Corrupt` or `Io`).
    Refused(Error),
    /// Recovery opened it, with the state after this many of the history's commits when it
    /// was checked against a history.
    Recovered {
        /// How many of the history's commits the recovered state holds.
        commits: Option<usize>,
    },
}

/// Runs the target on one input and says what recovery made of it.
///
/// # Panics
/// When recovery panics or a property in the module docs fails, which is how the fuzzer
/// reports it.
pub fn run(data: &[u8]) -> Outcome {
    let mut input = Input { bytes: data };
    if input.u8().is_multiple_of(2) {
        let history = history(input.u8());
        let mut files = history.files.clone();
        for _ in 0..EDITS_MAX {
            if input.bytes.is_empty() {
                break;
            }
            apply_edit(&mut files, &mut input);
        }
        let model = (!forges_a_frame(&history.files, &files)).then_some(&history.states[..]);
        check(&files, model)
    } else {
        check(&synthesize(&mut input), None)
    }
}

/// The input, read front to back; a read past its end gives zeros (or fewer bytes), so every
/// input decodes to something.
struct Input<'a> {
    bytes: &'a [u8],
}

impl<'a> Input<'a> {
    fn u8(&mut self) -> u8 {
        let (&first, rest) = self.bytes.split_first().unwrap_or((&0, &[]));
        self.bytes = rest;
        first
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// Up to `n` bytes.
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, tail) = self.bytes.split_at(n.min(self.bytes.len()));
        self.bytes = tail;
        head
    }
}

/// A history written through the public API: the files it left and every state it went
/// through, from the empty one to the last commit's.
#[derive(Debug)]
pub struct History {
    /// The directory's files as the history's ending left them.
    pub files: Files,
    /// The state after each acknowledged commit, after none first.
    pub states: Vec<State>,
}

/// History `id`, written on first use and kept for the rest of the process (a fuzzing run
/// reads the same 256 histories millions of times).
///
/// # Panics
/// If the history cannot be written (a scratch directory or a commit fails).
pub fn history(id: u8) -> Arc<History> {
    static HISTORIES: OnceLock<Mutex<HashMap<u8, Arc<History>>>> = OnceLock::new();
    let cache = HISTORIES.get_or_init(Mutex::default);
    if let Some(h) = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&id)
    {
        return Arc::clone(h);
    }
    let h = Arc::new(write_history(id));
    let mut cache = cache.lock().unwrap_or_else(PoisonError::into_inner);
    Arc::clone(cache.entry(id).or_insert(h))
}

/// How a history's files are taken.
#[derive(Debug, Clone, Copy)]
enum Ending {
    /// After a clean close.
    Close,
    /// Copied while the database is open: what a process crash leaves.
    Crash,
    /// What a power cut would leave: unsynced bytes read as zeros.
    PowerCut,
}

/// Writes history `id`: its ending, durability and number of commits come from `id`, its
/// commits (one to three mutations of six keys: sets of small and large values, sums and
/// maxima that a non-`U64` value refuses, deletes, expiries), checkpoints and syncs from a
/// generator seeded with it.
fn write_history(id: u8) -> History {
    let ending = match id % 3 {
        0 => Ending::Close,
        1 => Ending::Crash,
        _ => Ending::PowerCut,
    };
    let durability = if (id / 3).is_multiple_of(2) {
        Durability::Sync
    } else {
        BUFFERED
    };
    let commits = 1 + u64::from(id / 6) % 24;
    // Seeded with the id, so history `id` is the same on every machine.
    let mut rng = SplitMix64::new(u64::from(id));
    let dir = tempfile::tempdir().expect("a scratch directory");
    let faults = Faults::new();
    let opts = Options {
        checkpoint_after_bytes: u64::MAX,
        ..faulty(&faults, durability)
    };
    let db = Database::open(dir.path(), opts).expect("a new database opens");
    let mut states = vec![dump(&db)];
    for _ in 0..commits {
        let mut op = db.atomic();
        for _ in 0..=rng.below(3) {
            let k = key!["k", rng.below(6)];
            let n = rng.below(1000);
            op = match rng.below(10) {
                0..=3 => op.set(&k, vec![b'v'; (n % 24) as usize]),
                4 => op.set(&k, vec![b'V'; 200 + n as usize]),
                5 => op.sum(&k, n),
                6 => op.max(&k, n),
                7 => op.delete(&k),
                8 => op.set_with_expiry(&k, b"expiring", EXPIRE_IN),
                _ => op.set(&k, Value::U64(n)),
            };
        }
        // A sum or max meeting a value that is not a U64 is refused and writes nothing.
        if op.commit().is_ok_and(|r| r.is_committed()) {
            states.push(dump(&db));
        }
        if rng.below(7) == 0 {
            db.checkpoint().expect("a checkpoint is written");
        }
        if durability != Durability::Sync && rng.below(5) == 0 {
            db.sync().expect("the log syncs");
        }
    }
    let files = match ending {
        Ending::Close => {
            db.close().expect("the database closes");
            read_files(dir.path())
        }
        Ending::Crash => {
            let files = read_files(dir.path());
            db.close().expect("the database closes");
            files
        }
        Ending::PowerCut => {
            let image = tempfile::tempdir().expect("a scratch directory");
            faults
                .power_cut_image(dir.path(), image.path())
                .expect("a power-cut image is written");
            db.close().expect("the database closes");
            read_files(image.path())
        }
    };
    History { files, states }
}

/// The files of `dir` but `LOCK`, by name, each log segment's zero tail cut to
/// [`ZERO_TAIL_KEPT`] bytes.
fn read_files(dir: &Path) -> Files {
    let mut files: Files = fs::read_dir(dir)
        .expect("the database directory can be listed")
        .map(|e| e.expect("a directory entry can be read").path())
        .filter(|p| p.file_name().is_some_and(|n| n != "LOCK"))
        .map(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            let mut bytes = fs::read(&p).expect("a database file can be read");
            let used = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            bytes.truncate(bytes.len().min(used + ZERO_TAIL_KEPT));
            (name.unwrap_or_default(), bytes)
        })
        .collect();
    files.sort();
    files
}

/// Applies one edit read from `input` to `files`.
///
/// An edit is an op byte (its low three bits the kind, the rest the file, counted modulo the
/// files there are) and its operands: an offset is two bytes (modulo the file's length + 1),
/// data is a length byte and that many bytes.
///
/// | kind | edit |
/// |------|------|
/// | 0 | overwrite at offset with data |
/// | 1 | truncate at offset |
/// | 2 | append data |
/// | 3 | zero a length byte's worth from offset |
/// | 4 | flip the bits of a mask byte at offset |
/// | 5 | delete the file |
/// | 6 | insert data at offset |
/// | 7 | add a file: a byte for its kind (segment, checkpoint, temporary checkpoint), a byte for the version in its name ([`name_version`]), then data |
fn apply_edit(files: &mut Files, input: &mut Input<'_>) {
    let op = input.u8();
    if op % 8 == 7 {
        let (prefix, ext) = match input.u8() % 3 {
            0 => ("wal", "log"),
            1 => ("checkpoint", "ckpt"),
            _ => ("checkpoint", "tmp"),
        };
        let name = format!("{prefix}-{:020}.{ext}", name_version(input.u8()));
        let n = input.u8();
        let bytes = input.take(n.into()).to_vec();
        files.retain(|(existing, _)| *existing != name);
        files.push((name, bytes));
        files.sort();
        return;
    }
    if files.is_empty() {
        return;
    }
    let index = usize::from(op / 8) % files.len();
    if op % 8 == 5 {
        files.remove(index);
        return;
    }
    let file = &mut files[index].1;
    let offset = |input: &mut Input<'_>, file: &[u8]| usize::from(input.u16()) % (file.len() + 1);
    match op % 8 {
        0 => {
            let at = offset(input, file);
            let n = input.u8();
            let data = input.take(n.into());
            let end = (at + data.len()).min(file.len());
            file.splice(at..end, data.iter().copied());
        }
        1 => {
            let at = offset(input, file);
            file.truncate(at);
        }
        2 => {
            let n = input.u8();
            file.extend_from_slice(input.take(n.into()));
        }
        3 => {
            let at = offset(input, file);
            let end = (at + usize::from(input.u8())).min(file.len());
            file[at..end].fill(0);
        }
        4 => {
            let at = offset(input, file);
            let mask = input.u8();
            if let Some(b) = file.get_mut(at) {
                *b ^= mask;
            }
        }
        _ => {
            let at = offset(input, file);
            let n = input.u8();
            let data = input.take(n.into());
            file.splice(at..at, data.iter().copied());
        }
    }
}

/// Whether `edited` holds a frame with valid checksums that `original` does not hold at the
/// same place in the same file, byte for byte: a frame forged (or moved) by the edits, which
/// recovery cannot tell from a real one, so the state it leads to need not be a prefix of the
/// history.
fn forges_a_frame(original: &Files, edited: &Files) -> bool {
    edited.iter().any(|(name, bytes)| {
        let before = original
            .iter()
            .find(|(n, _)| n == name)
            .map_or(&[][..], |(_, b)| &b[..]);
        (0..bytes.len()).any(|at| {
            frame_len(&bytes[at..])
                .is_some_and(|len| before.get(at..at + len) != bytes.get(at..at + len))
        })
    })
}

/// The length of the frame at the start of `bytes`, if its checksums are valid.
fn frame_len(bytes: &[u8]) -> Option<usize> {
    let header = bytes.get(..FRAME_HEADER_LEN)?;
    let word = |i: usize| {
        header
            .get(i..i + 4)
            .and_then(|w| w.try_into().ok())
            .map(u32::from_le_bytes)
    };
    if crc32c::crc32c(header.get(..8)?) != word(8)? {
        return None;
    }
    let len = usize::try_from(word(0)?).ok()?;
    if len == 0 || len > FRAME_PAYLOAD_MAX {
        return None;
    }
    let payload = bytes.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + len)?;
    (crc32c::crc32c(payload) == word(4)?).then_some(FRAME_HEADER_LEN + len)
}

/// A frame holding `payload`, with its checksums.
fn frame(payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    let header_crc = crc32c::crc32c(&out);
    out.extend_from_slice(&header_crc.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// A log segment starting at `base` holding one commit with no writes at each of `versions`,
/// with valid checksums: for tests of what recovery makes of the versions a log claims.
///
/// # Examples
/// ```
/// let segment = tuplekv_testkit::recovery::log_segment(1, &[1, 2]);
/// assert!(segment.starts_with(b"TKVLOG01"));
/// ```
pub fn log_segment(base: u64, versions: &[u64]) -> Vec<u8> {
    let mut out = LOG_MAGIC.to_vec();
    out.extend_from_slice(&base.to_le_bytes());
    for v in versions {
        let mut payload = vec![KIND_COMMIT];
        payload.extend_from_slice(&v.to_le_bytes());
        payload.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&frame(&payload));
    }
    out
}

/// A checkpoint taken at `version` of a database with no entries, with valid checksums.
///
/// # Examples
/// ```
/// let checkpoint = tuplekv_testkit::recovery::empty_checkpoint(7);
/// assert!(checkpoint.starts_with(b"TKVCKP01"));
/// ```
pub fn empty_checkpoint(version: u64) -> Vec<u8> {
    let mut out = CHECKPOINT_MAGIC.to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    let mut payload = vec![KIND_END];
    payload.extend_from_slice(&version.to_le_bytes());
    payload.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&frame(&payload));
    out
}

/// The version in a file name added by an edit or synthesized: small, so that it meets the
/// versions of the files around it, or (from 0xF8 up) near `u64::MAX`.
fn name_version(b: u8) -> u64 {
    if b >= 0xF8 {
        u64::MAX - u64::from(0xFF - b)
    } else {
        u64::from(b)
    }
}

/// A version read from `b`, relative to `prev`: mostly the same or a little above it (so
/// commits follow each other, repeat a version or skip some), else a small absolute one
/// (below `prev`), one just above `prev`'s checkpoint, or one near `u64::MAX`.
fn version(b: u8, prev: u64) -> u64 {
    match b {
        0..=0xDF => prev.saturating_add(u64::from(b % 4)),
        0xE0..=0xEF => u64::from(b - 0xE0),
        0xF0..=0xF7 => prev.saturating_add(u64::from(b - 0xEF) * 1000),
        _ => u64::MAX - u64::from(0xFF - b),
    }
}

/// A deadline read from `b`: none, one long past (recovery drops the value), or one far in
/// the future; never one near now, which would pass between two opens of the same files.
fn deadline(b: u8) -> u64 {
    match b {
        0..=0x7F => 0,
        0x80..=0xBF => u64::from(b),
        0xC0..=0xFE => 10_000_000_000_000 + u64::from(b),
        0xFF => u64::MAX,
    }
}

/// Appends a key read from `input`: a u16 length and up to three bytes.
fn push_key(out: &mut Vec<u8>, input: &mut Input<'_>) {
    let n = input.u8() % 4;
    let key = input.take(n.into());
    out.extend_from_slice(&u16::try_from(key.len()).unwrap_or(0).to_le_bytes());
    out.extend_from_slice(key);
}

/// Appends a value read from `input`: a tag (bytes, `U64`, V8 or, rarely, an unknown one),
/// a deadline ([`deadline`]) and the value's bytes (eight for a `U64`, unless the tag byte
/// says to get that wrong).
fn push_value(out: &mut Vec<u8>, input: &mut Input<'_>) {
    let t = input.u8();
    let tag = match t % 8 {
        0..=2 => 0,
        3 | 4 => 1,
        5 | 6 => 2,
        _ => t,
    };
    out.push(tag);
    out.extend_from_slice(&deadline(input.u8()).to_le_bytes());
    let len = if tag == 1 && t < 0xC0 {
        8
    } else {
        usize::from(input.u8() % 16)
    };
    let bytes = input.take(len);
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(0).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Builds up to [`FILES_MAX`] files from `input`. Each is a kind byte (bit 0: checkpoint or
/// segment; bits 1-2: a right header, a right magic with another version, sixteen bytes of
/// input, or a header cut short), a byte for the version in its name ([`name_version`]), and
/// up to [`FRAMES_MAX`] frames, each a kind byte and its fields:
///
/// | kind | frame |
/// |------|-------|
/// | 0 | a commit: version, writes (delete, set, or an unknown op; key; value), sometimes a wrong count |
/// | 1 | checkpoint entries: count, then version, key and value of each |
/// | 2 | a checkpoint trailer: its version and entry count, right or from the input |
/// | 3 | a `synced` mark: how far the segment was durable |
/// | 4 | a payload of input bytes, with valid checksums |
/// | 5 | input bytes as they are: no frame |
/// | 6 | zeros |
/// | 7 | a commit frame cut short |
fn synthesize(input: &mut Input<'_>) -> Files {
    let mut files: Files = Vec::new();
    for _ in 0..=input.u8() % FILES_MAX {
        let kind = input.u8();
        let checkpoint = kind % 2 == 1;
        let named = name_version(input.u8());
        let (prefix, ext, magic) = if checkpoint {
            ("checkpoint", "ckpt", CHECKPOINT_MAGIC)
        } else {
            ("wal", "log", LOG_MAGIC)
        };
        let mut bytes = magic.to_vec();
        let mut prev = named;
        match (kind >> 1) % 4 {
            0 => bytes.extend_from_slice(&named.to_le_bytes()),
            1 => {
                prev = version(input.u8(), named);
                bytes.extend_from_slice(&prev.to_le_bytes());
            }
            2 => {
                bytes.clear();
                bytes.extend_from_slice(input.take(FILE_HEADER_LEN));
            }
            _ => {
                bytes.extend_from_slice(&named.to_le_bytes());
                bytes.truncate(usize::from(input.u8()) % FILE_HEADER_LEN);
            }
        }
        let header_version = prev;
        let mut entries = 0u64;
        for _ in 0..input.u8() % FRAMES_MAX {
            synthesize_frame(&mut bytes, input, header_version, &mut prev, &mut entries);
        }
        let name = format!("{prefix}-{named:020}.{ext}");
        files.retain(|(existing, _)| *existing != name);
        files.push((name, bytes));
    }
    files.sort();
    files
}

/// Appends one frame of [`synthesize`]'s table to `out`.
fn synthesize_frame(
    out: &mut Vec<u8>,
    input: &mut Input<'_>,
    header_version: u64,
    prev: &mut u64,
    entries: &mut u64,
) {
    let kind = input.u8();
    let mut payload = Vec::new();
    match kind % 8 {
        0 | 7 => {
            payload.push(KIND_COMMIT);
            *prev = version(input.u8(), *prev);
            payload.extend_from_slice(&prev.to_le_bytes());
            let c = input.u8();
            let count = c % 4;
            let declared = if c >= 0xF8 {
                u32::from(c) * 1000
            } else {
                u32::from(count)
            };
            payload.extend_from_slice(&declared.to_le_bytes());
            for _ in 0..count {
                let op = input.u8();
                payload.push(if op < 0xF0 { op % 2 } else { op });
                push_key(&mut payload, input);
                if op % 2 == 1 {
                    push_value(&mut payload, input);
                }
            }
        }
        1 => {
            payload.push(KIND_ENTRIES);
            let count = input.u8() % 4;
            payload.extend_from_slice(&u32::from(count).to_le_bytes());
            for _ in 0..count {
                let v = match input.u8() {
                    b @ 0..=0xEF => header_version.saturating_sub(u64::from(b % 4)),
                    b => version(b, header_version),
                };
                payload.extend_from_slice(&v.to_le_bytes());
                push_key(&mut payload, input);
                push_value(&mut payload, input);
                *entries += 1;
            }
        }
        2 => {
            payload.push(KIND_END);
            let how = input.u8();
            let v = if how.is_multiple_of(2) {
                header_version
            } else {
                version(input.u8(), header_version)
            };
            let n = if how & 2 == 0 {
                *entries
            } else {
                u64::from(input.u8())
            };
            payload.extend_from_slice(&v.to_le_bytes());
            payload.extend_from_slice(&n.to_le_bytes());
        }
        3 => {
            payload.push(KIND_SYNCED);
            payload.extend_from_slice(&u64::from(input.u16()).to_le_bytes());
        }
        4 => {
            let n = 1 + input.u8() % 24;
            payload.extend_from_slice(input.take(n.into()));
        }
        5 => {
            let n = 1 + input.u8() % 24;
            out.extend_from_slice(input.take(n.into()));
            return;
        }
        _ => {
            out.resize(out.len() + usize::from(input.u8() % 64) * 4, 0);
            return;
        }
    }
    if payload.is_empty() {
        return;
    }
    let mut framed = frame(&payload);
    if kind % 8 == 7 {
        let keep = usize::from(input.u8()) % framed.len();
        framed.truncate(keep);
    }
    out.extend_from_slice(&framed);
}

/// Options for opening the built directory: no background reclaimer or checkpoint, so nothing
/// runs beside the checks.
fn open_options() -> Options {
    Options {
        checkpoint_after_bytes: u64::MAX,
        ..options()
    }
}

/// Writes `files` to a fresh directory, opens it and checks the properties in the module
/// docs; with `model`, the recovered state must be one of its states.
///
/// # Panics
/// When a property fails, or recovery panics.
pub fn check(files: &[(String, Vec<u8>)], model: Option<&[State]>) -> Outcome {
    let dir = tempfile::tempdir().expect("a scratch directory");
    for (name, bytes) in files {
        fs::write(dir.path().join(name), bytes).expect("a database file is written");
    }
    let db = match Database::open(dir.path(), open_options()) {
        Ok(db) => db,
        Err(e @ (Error::Corrupt { .. } | Error::Io { .. })) => return Outcome::Refused(e),
        Err(e) => panic!("recovery failed with neither Corrupt nor Io: {e:?}"),
    };
    let recovered = dump(&db);
    let commits = model.map(|states| {
        states
            .iter()
            .position(|s| *s == recovered)
            .unwrap_or_else(|| {
                panic!("recovered a state no prefix of the history left: {recovered:?}")
            })
    });
    let last = db
        .recovery_report()
        .expect("a durable database has a recovery report")
        .last_versionstamp;
    let probe = key!["probe"];
    let stamp = db
        .set(&probe, b"probe")
        .expect("a database recovery accepted takes a commit");
    assert!(stamp > last, "stamp {stamp} not above the recovered {last}");
    db.close().expect("the database closes");
    let db = Database::open(dir.path(), open_options())
        .expect("a directory recovery accepted, then written to, opens again");
    let probe = encode_key(&probe);
    let mut want: State = recovered
        .into_iter()
        .filter(|(k, _, _)| *k != probe)
        .collect();
    want.push((probe, Value::from(b"probe"), stamp));
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(dump(&db), want, "reopened after one more commit");
    db.close().expect("the database closes");
    Outcome::Recovered { commits }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Histories 132 to 137 take every ending with both durabilities, 23 commits each.
    #[test]
    fn an_unedited_history_recovers_all_it_made_durable() {
        for id in 132..=137u8 {
            let states = history(id).states.len();
            let outcome = run(&[0, id]);
            let Outcome::Recovered {
                commits: Some(commits),
            } = outcome
            else {
                panic!("history {id}: {outcome:?}");
            };
            // Only a power cut in buffered mode (137) may lose the commits since a sync.
            if id != 137 {
                assert_eq!(commits, states - 1, "history {id}");
            }
        }
    }

    #[test]
    fn synthesized_frames_with_valid_checksums_are_recovered() {
        // One segment from version 1: a `synced` mark, a commit setting and deleting, a
        // commit setting a U64, a mark.
        let mut input = vec![1, 0, 0x00, 0x01, 4, 3, 0x10, 0x00];
        input.extend([0, 0x00, 0x02, 0x01, 0x02, b'a', b'b', 0x00, 0x00, 0x03]);
        input.extend(b"xyz");
        input.extend([
            0x00, 0x01, b'c', 0, 0x01, 0x01, 0x01, 0x01, b'a', 0x03, 0x00,
        ]);
        input.extend(7u64.to_le_bytes());
        input.extend([3, 0x00, 0x01]);
        let outcome = run(&input);
        assert!(
            matches!(outcome, Outcome::Recovered { commits: None }),
            "{outcome:?}"
        );
    }

    #[test]
    fn only_a_valid_frame_the_history_did_not_write_there_counts_as_forged() {
        let mut one = Vec::from(&b"TKVLOG01"[..]);
        one.extend(1u64.to_le_bytes());
        let framed = frame(&[KIND_SYNCED, 0, 0, 0, 0, 0, 0, 0, 0]);
        one.extend(&framed);
        let original: Files = vec![("wal-00000000000000000001.log".into(), one.clone())];
        let mut damaged = original.clone();
        damaged[0].1[20] ^= 1;
        assert!(!forges_a_frame(&original, &damaged));
        let mut moved = original.clone();
        moved[0].1.splice(16..16, [0]);
        assert!(forges_a_frame(&original, &moved));
        let mut added = original.clone();
        added.push(("wal-00000000000000000002.log".into(), one));
        assert!(forges_a_frame(&original, &added));
    }
}
