//! The on-disk record format shared by log segments and checkpoints.
//!
//! A file is a 16-byte header (8-byte magic, then a little-endian `u64`: the first version a
//! log segment may hold, or the version a checkpoint was taken at) followed by frames:
//!
//! ```text
//! frame   = len: u32 | payload_crc: u32 | header_crc: u32 | payload (len bytes)
//! ```
//!
//! All integers are little-endian; both checksums are CRC-32C (`header_crc` covers the first
//! eight bytes, so a damaged length is caught before it is trusted). A payload starts with a
//! kind byte:
//!
//! ```text
//! 1 commit      version: u64 | count: u32 | count × (op: u8 | key | [value])
//!               op 0 = delete, 1 = set (followed by a value)
//! 2 entries     count: u32 | count × (version: u64 | key | value)      (checkpoint body)
//! 3 end         version: u64 | entries: u64                            (checkpoint trailer)
//! 4 synced      upto: u64                    (log segment: starts every batch write; the
//!               segment's first `upto` bytes were on stable storage when it was written)
//! 5 reserved    upto: u64                    (log segment: versions up to `upto` may have
//!               been handed out; synced before any of them is, and written again at the
//!               start of every new segment)
//! key   = len: u16 | bytes
//! value = tag: u8 (0 bytes, 1 u64, 2 v8) | expires_at: u64 (Unix ms, 0 = never) |
//!         len: u32 | bytes          (a u64 is 8 little-endian bytes)
//! ```
//!
//! One commit is one frame, so recovery applies a commit entirely or not at all.
//!
//! The file header has no checksum of its own. A bad magic is reported at its first wrong
//! byte; a checkpoint's version is repeated in its checksummed trailer, so a header that
//! disagrees with it is reported at the first byte of the version field that differs.
//!
//! A `synced` mark tells a torn write from damage. A segment's zero-filled tail is overwritten
//! in place, so a write cut by a crash can leave a hole *before* frames that did reach the
//! disk. Bytes can only be missing if no sync covered them, and every mark after such bytes
//! says so (`upto` at or below their offset). A mark claiming them durable means they were
//! intact once, so damage there is real.

use bytes::Bytes;

use crate::key_bytes::KeyBytes;
use crate::value::Value;

/// Magic at the start of a log segment.
pub(crate) const LOG_MAGIC: &[u8; 8] = b"TKVLOG01";
/// Magic at the start of a checkpoint.
pub(crate) const CHECKPOINT_MAGIC: &[u8; 8] = b"TKVCKP01";
/// Bytes in a file header.
pub(crate) const FILE_HEADER_LEN: usize = 16;
/// Bytes in a frame header.
pub(crate) const FRAME_HEADER_LEN: usize = 12;
/// The largest payload a frame may declare. A commit is at most about 820 KB (the engine's
/// limits), a checkpoint frame is cut at [`CHECKPOINT_FRAME_BYTES`]; anything larger is
/// damage.
pub(crate) const FRAME_PAYLOAD_MAX: usize = 4 << 20;
/// Target size of one checkpoint frame.
pub(crate) const CHECKPOINT_FRAME_BYTES: usize = 256 << 10;

const KIND_COMMIT: u8 = 1;
const KIND_ENTRIES: u8 = 2;
const KIND_END: u8 = 3;
const KIND_SYNCED: u8 = 4;
const KIND_RESERVED: u8 = 5;

const OP_DELETE: u8 = 0;
const OP_SET: u8 = 1;

const TAG_BYTES: u8 = 0;
const TAG_U64: u8 = 1;
const TAG_V8: u8 = 2;

/// A value as stored: the value and its deadline.
pub(crate) type Stored = (Value, Option<u64>);

/// A decoded payload.
#[derive(Debug, PartialEq)]
pub(crate) enum Payload {
    /// One commit: its version and what it left at each key (`None`: deleted).
    Commit {
        version: u64,
        writes: Vec<(KeyBytes, Option<Stored>)>,
    },
    /// Checkpoint entries with their own versions.
    Entries(Vec<(KeyBytes, u64, Stored)>),
    /// The checkpoint trailer.
    End { version: u64, entries: u64 },
    /// A log segment's durable length when the frames after this one were written.
    Synced { upto: u64 },
    /// Versions up to `upto` may have been handed out: recovery numbers new commits above it.
    Reserved { upto: u64 },
}

/// The header of a file: magic and a version.
pub(crate) fn file_header(magic: &[u8; 8], version: u64) -> [u8; FILE_HEADER_LEN] {
    let mut h = [0; FILE_HEADER_LEN];
    h[..8].copy_from_slice(magic);
    h[8..].copy_from_slice(&version.to_le_bytes());
    h
}

/// Parses a file header, checking its magic.
pub(crate) fn parse_file_header(magic: &[u8; 8], bytes: &[u8]) -> Option<u64> {
    read_file_header(magic, bytes).ok()
}

/// Why a file header is not one: the offset of the first bad byte, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadHeader {
    pub(crate) offset: usize,
    pub(crate) reason: String,
}

/// Parses a file header, checking its magic; on failure, says where it goes wrong: at the
/// first byte that differs from `magic`, or at the end of a file shorter than a header.
pub(crate) fn read_file_header(magic: &[u8; 8], bytes: &[u8]) -> Result<u64, BadHeader> {
    let Some((found, version)) = bytes
        .get(..FILE_HEADER_LEN)
        .and_then(|h| h.split_first_chunk::<8>())
    else {
        return Err(BadHeader {
            offset: bytes.len(),
            reason: format!(
                "the file is {} bytes, shorter than its {FILE_HEADER_LEN}-byte header",
                bytes.len()
            ),
        });
    };
    if let Some(at) = found.iter().zip(magic).position(|(f, m)| f != m) {
        return Err(BadHeader {
            offset: at,
            reason: format!(
                "magic is {:?}, expected {:?}",
                found.escape_ascii().to_string(),
                magic.escape_ascii().to_string()
            ),
        });
    }
    let version = version.try_into().map_err(|_| BadHeader {
        offset: 8,
        reason: "the version field is not 8 bytes".to_owned(),
    })?;
    Ok(u64::from_le_bytes(version))
}

/// The offset of the first byte of a header's version field that differs between `header`
/// and `expected`: where a damaged version went wrong (the field itself if they are equal).
pub(crate) fn version_damage_offset(header: u64, expected: u64) -> usize {
    let differs = header
        .to_le_bytes()
        .iter()
        .zip(expected.to_le_bytes())
        .position(|(h, e)| *h != e);
    8 + differs.unwrap_or(0)
}

/// Builds frames into one buffer.
#[derive(Debug, Default)]
pub(crate) struct FrameWriter {
    pub(crate) buf: Vec<u8>,
    start: usize,
}

impl FrameWriter {
    /// Starts a frame; its payload is what is pushed until [`FrameWriter::finish`].
    fn begin(&mut self, kind: u8) {
        self.start = self.buf.len();
        self.buf.extend_from_slice(&[0; FRAME_HEADER_LEN]);
        self.buf.push(kind);
    }

    /// Fills in the header of the frame begun last.
    fn finish(&mut self) {
        let payload = &self.buf[self.start + FRAME_HEADER_LEN..];
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let crc = crc32c::crc32c(payload);
        let h = self.start;
        self.buf[h..h + 4].copy_from_slice(&len.to_le_bytes());
        self.buf[h + 4..h + 8].copy_from_slice(&crc.to_le_bytes());
        let header_crc = crc32c::crc32c(&self.buf[h..h + 8]);
        self.buf[h + 8..h + 12].copy_from_slice(&header_crc.to_le_bytes());
    }

    fn key(&mut self, key: &[u8]) {
        // Keys are at most 2048 bytes (the engine's write limit), so they fit a u16.
        let len = u16::try_from(key.len()).unwrap_or(u16::MAX);
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf.extend_from_slice(key);
    }

    fn value(&mut self, value: &Value, expires_at: Option<u64>) {
        let (tag, bytes): (u8, &[u8]) = match value {
            Value::Bytes(b) => (TAG_BYTES, b),
            Value::V8(b) => (TAG_V8, b),
            Value::U64(_) => (TAG_U64, &[]),
        };
        self.buf.push(tag);
        self.buf
            .extend_from_slice(&expires_at.unwrap_or(0).to_le_bytes());
        if let Value::U64(n) = value {
            self.buf.extend_from_slice(&8u32.to_le_bytes());
            self.buf.extend_from_slice(&n.to_le_bytes());
        } else {
            let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
            self.buf.extend_from_slice(&len.to_le_bytes());
            self.buf.extend_from_slice(bytes);
        }
    }

    /// Appends one commit frame.
    pub(crate) fn commit<'a>(
        &mut self,
        version: u64,
        writes: impl ExactSizeIterator<Item = (&'a [u8], Option<(&'a Value, Option<u64>)>)>,
    ) {
        self.begin(KIND_COMMIT);
        self.buf.extend_from_slice(&version.to_le_bytes());
        let count = u32::try_from(writes.len()).unwrap_or(u32::MAX);
        self.buf.extend_from_slice(&count.to_le_bytes());
        for (key, write) in writes {
            match write {
                None => {
                    self.buf.push(OP_DELETE);
                    self.key(key);
                }
                Some((value, expires_at)) => {
                    self.buf.push(OP_SET);
                    self.key(key);
                    self.value(value, expires_at);
                }
            }
        }
        self.finish();
    }

    /// Appends one checkpoint-entries frame.
    pub(crate) fn entries<'a>(
        &mut self,
        entries: impl ExactSizeIterator<Item = (&'a [u8], u64, &'a Value, Option<u64>)>,
    ) {
        self.begin(KIND_ENTRIES);
        let count = u32::try_from(entries.len()).unwrap_or(u32::MAX);
        self.buf.extend_from_slice(&count.to_le_bytes());
        for (key, version, value, expires_at) in entries {
            self.buf.extend_from_slice(&version.to_le_bytes());
            self.key(key);
            self.value(value, expires_at);
        }
        self.finish();
    }

    /// Appends a `synced` mark: the segment's first `upto` bytes are on stable storage.
    pub(crate) fn synced(&mut self, upto: u64) {
        self.begin(KIND_SYNCED);
        self.buf.extend_from_slice(&upto.to_le_bytes());
        self.finish();
    }

    /// Appends a `reserved` mark: versions up to `upto` may be handed out.
    pub(crate) fn reserved(&mut self, upto: u64) {
        self.begin(KIND_RESERVED);
        self.buf.extend_from_slice(&upto.to_le_bytes());
        self.finish();
    }

    /// Appends a checkpoint trailer.
    pub(crate) fn end(&mut self, version: u64, entries: u64) {
        self.begin(KIND_END);
        self.buf.extend_from_slice(&version.to_le_bytes());
        self.buf.extend_from_slice(&entries.to_le_bytes());
        self.finish();
    }
}

/// What is at some offset of a file.
#[derive(Debug, PartialEq)]
pub(crate) enum Frame<'a> {
    /// A whole, valid frame with its payload and total length.
    Valid { payload: &'a [u8], len: usize },
    /// The bytes end before the frame does (its header or payload is cut short).
    Truncated,
    /// The frame is damaged: a checksum does not match, or its length is impossible.
    Damaged(&'static str),
}

/// Reads the frame at the start of `bytes`.
pub(crate) fn read_frame(bytes: &[u8]) -> Frame<'_> {
    if bytes.len() < FRAME_HEADER_LEN {
        return Frame::Truncated;
    }
    let word = |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    if crc32c::crc32c(&bytes[..8]) != word(8) {
        return Frame::Damaged("frame header checksum mismatch");
    }
    let len = word(0) as usize;
    if len == 0 || len > FRAME_PAYLOAD_MAX {
        return Frame::Damaged("impossible frame length");
    }
    let Some(payload) = bytes.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + len) else {
        return Frame::Truncated;
    };
    if crc32c::crc32c(payload) != word(4) {
        return Frame::Damaged("frame payload checksum mismatch");
    }
    Frame::Valid {
        payload,
        len: FRAME_HEADER_LEN + len,
    }
}

/// Where, in `bytes` (a segment's bytes from offset `at` on, where a frame is damaged), a valid
/// `synced` mark says the segment was durable past `at`: proof that the damaged bytes were
/// once on stable storage whole, so the damage is not a torn write. `None`: every frame after
/// the damage was written while it could still have been lost in a crash.
pub(crate) fn durable_mark_after(bytes: &[u8], at: u64) -> Option<usize> {
    let mut i = 1;
    while i + FRAME_HEADER_LEN <= bytes.len() {
        if bytes[i..i + 4] != [0; 4]
            && let Frame::Valid { payload, len } = read_frame(&bytes[i..])
            && let Some(decoded) = decode_payload(payload)
        {
            if let Payload::Synced { upto } = decoded
                && upto > at
            {
                return Some(i);
            }
            i += len;
            continue;
        }
        i += 1;
    }
    None
}

/// Whether `bytes` are all zero: the unused end of a log segment (space preallocated, or
/// written but never synced before a power cut), which recovery stops at without a report.
pub(crate) fn all_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

/// A cursor over a payload; every read fails softly on short input.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn key(&mut self) -> Option<KeyBytes> {
        let len = usize::from(self.u16()?);
        Some(KeyBytes::from(self.take(len)?))
    }

    fn value(&mut self) -> Option<Stored> {
        let tag = self.u8()?;
        let expires_at = match self.u64()? {
            0 => None,
            t => Some(t),
        };
        let len = self.u32()? as usize;
        let bytes = self.take(len)?;
        let value = match tag {
            TAG_BYTES => Value::Bytes(Bytes::copy_from_slice(bytes)),
            TAG_V8 => Value::V8(Bytes::copy_from_slice(bytes)),
            TAG_U64 => Value::U64(u64::from_le_bytes(bytes.try_into().ok()?)),
            _ => return None,
        };
        Some((value, expires_at))
    }
}

/// Decodes a payload; `None` if it is malformed (which a valid checksum makes a bug or a
/// file from elsewhere, and recovery reports as damage).
pub(crate) fn decode_payload(payload: &[u8]) -> Option<Payload> {
    let mut r = Reader { bytes: payload };
    let decoded = match r.u8()? {
        KIND_COMMIT => {
            let version = r.u64()?;
            let count = r.u32()? as usize;
            let mut writes = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                let op = r.u8()?;
                let key = r.key()?;
                let write = match op {
                    OP_DELETE => None,
                    OP_SET => Some(r.value()?),
                    _ => return None,
                };
                writes.push((key, write));
            }
            Payload::Commit { version, writes }
        }
        KIND_ENTRIES => {
            let count = r.u32()? as usize;
            let mut entries = Vec::with_capacity(count.min(4096));
            for _ in 0..count {
                let version = r.u64()?;
                let key = r.key()?;
                entries.push((key, version, r.value()?));
            }
            Payload::Entries(entries)
        }
        KIND_END => Payload::End {
            version: r.u64()?,
            entries: r.u64()?,
        },
        KIND_SYNCED => Payload::Synced { upto: r.u64()? },
        KIND_RESERVED => Payload::Reserved { upto: r.u64()? },
        _ => return None,
    };
    r.bytes.is_empty().then_some(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit_frame() -> FrameWriter {
        let mut w = FrameWriter::default();
        let a = Value::Bytes(Bytes::from_static(b"ada"));
        let n = Value::U64(7);
        type Write<'a> = (&'a [u8], Option<(&'a Value, Option<u64>)>);
        let writes: Vec<Write<'_>> = vec![
            (b"\x02a\x00", Some((&a, None))),
            (b"\x02b\x00", Some((&n, Some(99)))),
            (b"\x02c\x00", None),
        ];
        w.commit(42, writes.into_iter());
        w
    }

    #[test]
    fn a_bad_header_is_reported_at_its_first_wrong_byte() {
        let good = file_header(CHECKPOINT_MAGIC, 300);
        assert_eq!(read_file_header(CHECKPOINT_MAGIC, &good), Ok(300));
        assert_eq!(parse_file_header(LOG_MAGIC, &good), None);
        let mut bad = good;
        bad[5] ^= 0x20;
        let err = read_file_header(CHECKPOINT_MAGIC, &bad).unwrap_err();
        assert_eq!(err.offset, 5);
        assert_eq!(err.reason, r#"magic is "TKVCKp01", expected "TKVCKP01""#);
        let short = read_file_header(CHECKPOINT_MAGIC, &good[..15]).unwrap_err();
        assert_eq!(short.offset, 15);
        assert_eq!(
            short.reason,
            "the file is 15 bytes, shorter than its 16-byte header"
        );
    }

    #[test]
    fn version_damage_is_placed_at_the_first_differing_byte() {
        assert_eq!(version_damage_offset(300, 300), 8);
        assert_eq!(version_damage_offset(300 ^ 1, 300), 8);
        assert_eq!(version_damage_offset(300 ^ (1 << 8), 300), 9);
        assert_eq!(version_damage_offset(300 ^ (1 << 63), 300), 15);
    }

    #[test]
    fn commit_frame_round_trips() {
        let w = commit_frame();
        let Frame::Valid { payload, len } = read_frame(&w.buf) else {
            panic!("frame should be valid");
        };
        assert_eq!(len, w.buf.len());
        let Some(Payload::Commit { version, writes }) = decode_payload(payload) else {
            panic!("payload should decode");
        };
        assert_eq!(version, 42);
        assert_eq!(writes.len(), 3);
        assert_eq!(writes[1].1, Some((Value::U64(7), Some(99))));
        assert_eq!(writes[2].1, None);
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let w = commit_frame();
        for bit in 0..w.buf.len() * 8 {
            let mut bytes = w.buf.clone();
            bytes[bit / 8] ^= 1 << (bit % 8);
            assert!(
                !matches!(read_frame(&bytes), Frame::Valid { .. }),
                "flip of bit {bit} went unnoticed"
            );
        }
    }

    #[test]
    fn every_cut_is_truncated_or_damaged_never_valid() {
        let w = commit_frame();
        for cut in 0..w.buf.len() {
            assert_eq!(read_frame(&w.buf[..cut]), Frame::Truncated, "cut at {cut}");
        }
    }

    /// Damage at offset 1000 of a segment, then a commit and a mark: the damage is real only
    /// if the mark says the segment was durable past 1000.
    #[test]
    fn a_synced_mark_after_damage_tells_real_damage_from_a_torn_write() {
        let after_damage = |upto: u64| {
            let mut bytes = vec![0xAB; 5];
            bytes.extend_from_slice(&[0; 7]);
            bytes.extend_from_slice(&commit_frame().buf);
            let mut mark = FrameWriter::default();
            mark.synced(upto);
            bytes.extend_from_slice(&mark.buf);
            bytes.extend_from_slice(&[0; 64]);
            bytes
        };
        let bytes = after_damage(1001);
        let mark_at = 12 + commit_frame().buf.len();
        assert_eq!(durable_mark_after(&bytes, 1000), Some(mark_at));
        assert_eq!(durable_mark_after(&after_damage(1000), 1000), None);
        assert_eq!(durable_mark_after(&after_damage(16), 1000), None);
        assert_eq!(durable_mark_after(&[0xAB; 40], 0), None);
        assert_eq!(
            decode_payload(match read_frame(&bytes[mark_at..]) {
                Frame::Valid { payload, .. } => payload,
                other => panic!("{other:?}"),
            }),
            Some(Payload::Synced { upto: 1001 })
        );
    }

    #[test]
    fn a_reserved_mark_round_trips_and_an_empty_commit_decodes() {
        let mut frames = FrameWriter::default();
        frames.reserved(1 << 40);
        frames.commit(7, std::iter::empty());
        let Frame::Valid { payload, len } = read_frame(&frames.buf) else {
            panic!("the mark is one whole frame")
        };
        assert_eq!(
            decode_payload(payload),
            Some(Payload::Reserved { upto: 1 << 40 })
        );
        let Frame::Valid { payload, .. } = read_frame(&frames.buf[len..]) else {
            panic!("the commit is one whole frame")
        };
        assert_eq!(
            decode_payload(payload),
            Some(Payload::Commit {
                version: 7,
                writes: Vec::new()
            })
        );
    }
}
