//! Checkpoint files: `checkpoint-<version>.ckpt` holds every live entry at one version, fed by
//! an iterator (the store's snapshot at that version). Written to a temporary file that is
//! synced and then renamed, so a checkpoint file is either whole or absent. Knows nothing of
//! the in-memory store.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use super::fs::{FileSystem, WritableFile};
use super::record::{self, Frame, FrameWriter, Payload};
use super::{corrupt, io_error, numbered, parse_numbered, read_file, remove_if_present};
use crate::error::Error;
use crate::key_bytes::KeyBytes;
use crate::version::Version;

/// Writes `checkpoint-<version>.ckpt` in `dir` from `entries` (the live entries at `version`,
/// in key order), through a temporary file that is synced, renamed and its directory synced.
/// On any error the temporary file is removed.
pub(crate) fn write(
    fs: &dyn FileSystem,
    dir: &Path,
    version: u64,
    entries: impl Iterator<Item = (KeyBytes, Version)>,
) -> Result<(), Error> {
    let final_path = dir.join(numbered("checkpoint", version, "ckpt"));
    let tmp_path = dir.join(numbered("checkpoint", version, "tmp"));
    let result = write_file(fs, &tmp_path, version, entries).and_then(|()| {
        fs.rename(&tmp_path, &final_path)
            .and_then(|()| fs.sync_dir(dir))
            .map_err(|e| io_error("publishing checkpoint", &final_path, &e))
    });
    if result.is_err()
        && let Err(e) = remove_if_present(fs, &tmp_path)
    {
        log::warn!("tuplekv: removing {}: {e}", tmp_path.display());
    }
    result
}

/// Writes the checkpoint body to `path`: header, entries frames of about
/// [`record::CHECKPOINT_FRAME_BYTES`] each, and the trailer; then syncs it.
fn write_file(
    fs: &dyn FileSystem,
    path: &Path,
    version: u64,
    entries: impl Iterator<Item = (KeyBytes, Version)>,
) -> Result<(), Error> {
    let write_err = |e: io::Error| io_error("writing checkpoint", path, &e);
    let mut file = fs
        .open_append(path, true)
        .map_err(|e| io_error("creating checkpoint", path, &e))?;
    file.write_all(&record::file_header(record::CHECKPOINT_MAGIC, version))
        .map_err(write_err)?;
    let mut frames = FrameWriter::default();
    let mut batch: Vec<(KeyBytes, Version)> = Vec::new();
    let mut batch_bytes = 0;
    let mut count = 0u64;
    for (key, v) in entries {
        let Some(value) = &v.value else { continue };
        batch_bytes += key.len() + value.size() + 32;
        batch.push((key, v));
        count += 1;
        if batch_bytes >= record::CHECKPOINT_FRAME_BYTES {
            write_frame(&mut batch, &mut frames, &mut file).map_err(write_err)?;
            batch_bytes = 0;
        }
    }
    write_frame(&mut batch, &mut frames, &mut file).map_err(write_err)?;
    frames.end(version, count);
    file.write_all(&frames.buf).map_err(write_err)?;
    file.sync_data().map_err(write_err)
}

/// Writes `batch` (entries with values) as one entries frame, and empties it.
fn write_frame(
    batch: &mut Vec<(KeyBytes, Version)>,
    frames: &mut FrameWriter,
    file: &mut Box<dyn WritableFile>,
) -> io::Result<()> {
    if !batch.is_empty() {
        let entries: Vec<_> = batch
            .iter()
            .filter_map(|(k, v)| Some((k.as_slice(), v.version, v.value.as_ref()?, v.expires_at)))
            .collect();
        frames.entries(entries.into_iter());
        batch.clear();
    }
    file.write_all(&frames.buf)?;
    frames.buf.clear();
    Ok(())
}

/// Deletes what a durable checkpoint at `version` replaces: older checkpoints and the
/// segments in `replaced`; then syncs the directory. Returns the segments deleted.
pub(crate) fn remove_replaced(
    fs: &dyn FileSystem,
    dir: &Path,
    version: u64,
    replaced: &[PathBuf],
) -> Result<(), Error> {
    let names = fs.list(dir).map_err(|e| io_error("listing", dir, &e))?;
    let older_checkpoints = names
        .iter()
        .filter(|name| parse_numbered(name, "checkpoint", "ckpt").is_some_and(|v| v < version))
        .map(|name| dir.join(name));
    let mut removed = false;
    for path in older_checkpoints.chain(replaced.iter().cloned()) {
        remove_if_present(fs, &path).map_err(|e| io_error("removing", &path, &e))?;
        removed = true;
    }
    if removed {
        fs.sync_dir(dir).map_err(|e| io_error("syncing", dir, &e))?;
    }
    Ok(())
}

/// Loads the checkpoint file at `path` into `entries`; returns its version, its entry count
/// and its size in bytes.
pub(crate) fn load(
    fs: &dyn FileSystem,
    path: &Path,
    entries: &mut HashMap<KeyBytes, Version>,
) -> Result<(u64, u64, u64), Error> {
    let bytes = read_file(fs, path)?;
    let version = record::read_file_header(record::CHECKPOINT_MAGIC, &bytes).map_err(|bad| {
        let reason = format!("bad checkpoint header: {}", bad.reason);
        corrupt(path, bad.offset, reason)
    })?;
    let mut at = record::FILE_HEADER_LEN;
    let mut count = 0u64;
    // The first entry above the checkpoint's version, and the offset of its frame.
    let mut above: Option<(usize, u64)> = None;
    loop {
        let (payload, len) = match record::read_frame(&bytes[at..]) {
            Frame::Valid { payload, len } => (payload, len),
            Frame::Truncated => return Err(corrupt(path, at, "checkpoint ends early")),
            Frame::Damaged(reason) => return Err(corrupt(path, at, reason)),
        };
        match record::decode_payload(payload) {
            Some(Payload::Entries(batch)) => {
                if let Some((_, v, _)) = batch.iter().find(|(_, v, _)| *v > version) {
                    // Checked once the trailer has vouched for the header's version.
                    above.get_or_insert((at, *v));
                }
                for (key, v, (value, expires_at)) in batch {
                    let version = Version {
                        version: v,
                        value: Some(value),
                        expires_at,
                    };
                    entries.insert(key, version);
                    count += 1;
                }
            }
            Some(Payload::End {
                version: v,
                entries: n,
            }) => {
                check_trailer(path, &bytes, (at, at + len), (version, count), (v, n))?;
                if let Some((offset, v)) = above {
                    let reason = format!("an entry at version {v}, above the checkpoint's");
                    return Err(corrupt(path, offset, reason));
                }
                return Ok((version, count, bytes.len() as u64));
            }
            _ => return Err(corrupt(path, at, "malformed checkpoint frame")),
        }
        at += len;
    }
}

/// Checks a checkpoint's trailer (`trailer`: its version and entry count, at `at..end`)
/// against the header's version and the entries read (`read`). The trailer is checksummed and
/// the header is not: if they disagree, the header is what is damaged.
fn check_trailer(
    path: &Path,
    bytes: &[u8],
    (at, end): (usize, usize),
    read: (u64, u64),
    trailer: (u64, u64),
) -> Result<(), Error> {
    let ((version, count), (v, entries)) = (read, trailer);
    if v != version {
        let reason = format!("checkpoint header says version {version}, its trailer {v}");
        return Err(corrupt(
            path,
            record::version_damage_offset(version, v),
            reason,
        ));
    }
    if entries != count {
        let reason = format!("checkpoint trailer counts {entries} entries, the file holds {count}");
        return Err(corrupt(path, at, reason));
    }
    if end != bytes.len() {
        let reason = format!("{} bytes after the checkpoint trailer", bytes.len() - end);
        return Err(corrupt(path, end, reason));
    }
    Ok(())
}
