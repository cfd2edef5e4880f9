//! What tuplekv's KV Connect server (`tuplekv-server`) and client (`tuplekv-remote`) share on
//! the wire: engine values and entries as the protocol's protobuf messages, and the messages
//! of **tuplekv's extension** to the protocol.
//!
//! # The extension
//! Plain KV Connect reads the latest state on every request and checks single keys. A
//! [`Store`](tuplekv_engine::Store) also needs snapshots that stay put across several reads,
//! and range checks for transactions that list. The extension adds them without changing what
//! Deno and Node clients see:
//!
//! - **Agreed in the metadata exchange.** A client that speaks it adds
//!   `"tuplekvExtensions": [EXTENSION]` to the metadata request; a server that speaks it answers
//!   with the same field. A client that does not ask is never sent the field, and a server that
//!   does not know it (denokv) ignores it and answers without it, so the client knows.
//! - **Carried in protobuf fields of their own** ([`EXTENSION_FIELD`] of `SnapshotRead`,
//!   `SnapshotReadOutput`, `AtomicWrite` and `AtomicWriteOutput`). A message with the field
//!   appended is still a valid message of the plain protocol: decoders that do not know the
//!   field skip it.
//! - **Snapshots.** A read with [`ReadExtension::hold`] reads the latest state, and the server
//!   holds that state for later reads that name its versionstamp in [`ReadExtension::at`], as
//!   long as they keep coming (an idle snapshot is dropped after a while, and all of them when
//!   the server restarts; a read of a dropped one fails with HTTP 410 Gone). A client releases
//!   the snapshots it is done with ([`ReadExtension::release`], sent with its next read), so
//!   the server drops them at once. The output says which versionstamp a read saw
//!   ([`ReadOutputExtension`]).
//! - **Range checks.** An `AtomicWrite` may carry [`RangeCheck`]s: "no key of `[start, end)`
//!   changed after `since`", where `since` is a snapshot the server still holds.
//! - **Numbered commits.** An `AtomicWrite` may carry a [`Numbering`] (the engine's
//!   [`tuplekv_engine::numbering`]): counters the server takes numbers from under its commit
//!   lock, and placeholders it fills with them. The output reports the first number of each
//!   claim ([`WriteOutcome::numbers`]). A server lists
//!   [`NUMBERING_EXTENSION`] as well when it applies numberings: a client sends one only to
//!   such a server, so an older server of the extension never commits unfilled placeholders.
//! - **Errors by code.** A refusal carries, beside denokv's text, [`ERROR_HEADER`]: the engine
//!   error it stands for, by a stable code with its fields ([`error_header`]), so a client
//!   gives the same [`Error`](tuplekv_engine::Error) a local store gives without reading the
//!   text.

mod error;

pub use error::{ERROR_HEADER, error_from_header, error_header};

use denokv_proto::datapath as pb;
use tuplekv_engine::{Entry, Value};

/// The extension's name, as the metadata exchange lists it.
pub const EXTENSION: &str = "tuplekv.snapshots.v1";

/// The name a server lists, with [`EXTENSION`], when it applies the numberings of
/// [`WriteExtension::numbering`]; a client sends a numbering only to a server that listed it.
pub const NUMBERING_EXTENSION: &str = "tuplekv.numbering.v1";

/// The JSON field of the metadata request and response that lists extensions.
pub const EXTENSIONS_JSON_FIELD: &str = "tuplekvExtensions";

/// The protobuf field number the extension uses in every message it extends: far above the
/// protocol's own fields, so it never meets one.
pub const EXTENSION_FIELD: u32 = 1000;

/// Most snapshot releases one read carries ([`ReadExtension::release`]).
pub const RELEASES_PER_READ_MAX: usize = 1024;

/// The HTTP status of a read or write that names a snapshot the server no longer holds.
pub const SNAPSHOT_GONE_STATUS: u16 = 410;

/// `SnapshotRead`'s extension field, decoded on its own (every other field is skipped).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SnapshotReadExtension {
    /// The extension's options, if the client sent them.
    #[prost(message, optional, tag = "1000")]
    pub tuplekv: Option<ReadExtension>,
}

/// How a snapshot read reads.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadExtension {
    /// Read the latest state and hold it for later reads at its versionstamp.
    #[prost(bool, tag = "1")]
    pub hold: bool,
    /// Read the held state at this versionstamp (10 bytes) instead of the latest.
    #[prost(bytes = "vec", tag = "2")]
    pub at: Vec<u8>,
    /// Holds the client no longer needs: each removes one hold, and the server drops a
    /// snapshot no hold is left on. Removing a hold twice (a retried request) does nothing.
    #[prost(message, repeated, tag = "3")]
    pub release: Vec<Hold>,
    /// With `hold`: the hold's id, random per client snapshot, so a retried request does not
    /// hold twice and a release removes exactly this hold.
    #[prost(uint64, tag = "4")]
    pub hold_id: u64,
}

/// One hold on a held snapshot.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Hold {
    /// The snapshot's versionstamp (10 bytes).
    #[prost(bytes = "vec", tag = "1")]
    pub versionstamp: Vec<u8>,
    /// The id the hold was made with.
    #[prost(uint64, tag = "2")]
    pub hold_id: u64,
}

/// `SnapshotReadOutput`'s extension field.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SnapshotReadOutputExtension {
    /// What the server says about the read.
    #[prost(message, optional, tag = "1000")]
    pub tuplekv: Option<ReadOutputExtension>,
}

/// What a snapshot read saw.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadOutputExtension {
    /// The versionstamp of the state every range was read from (10 bytes).
    #[prost(bytes = "vec", tag = "1")]
    pub versionstamp: Vec<u8>,
    /// Each returned entry's expiry deadline (Unix ms; 0 for none), in output order across
    /// the ranges: plain KV Connect entries do not carry it, and a transaction's range check
    /// needs it.
    #[prost(uint64, repeated, tag = "2")]
    pub expires_at_ms: Vec<u64>,
}

/// `AtomicWrite`'s extension field. A client of the extension always sends it (empty when
/// the write has no range checks), so the server knows to report failures in full.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AtomicWriteExtension {
    /// The extension's part of the write.
    #[prost(message, optional, tag = "1000")]
    pub tuplekv: Option<WriteExtension>,
}

/// What a write of the extension adds.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteExtension {
    /// Range conditions, all of which must hold for the write to commit.
    #[prost(message, repeated, tag = "1")]
    pub range_checks: Vec<RangeCheck>,
    /// The numbers the write takes from counters, and where they go (absent: none). Sent
    /// only to a server that listed [`NUMBERING_EXTENSION`].
    #[prost(message, optional, tag = "2")]
    pub numbering: Option<Numbering>,
}

/// The field number of [`WriteExtension::range_checks`].
pub const RANGE_CHECKS_FIELD: u32 = 1;
/// The field number of [`WriteExtension::numbering`].
pub const NUMBERING_FIELD: u32 = 2;
/// The field number of [`Numbering::counters`].
pub const NUMBERING_COUNTERS_FIELD: u32 = 1;
/// The field number of [`Numbering::slots`].
pub const NUMBERING_SLOTS_FIELD: u32 = 2;

/// A write's numbering (see [`tuplekv_engine::numbering::Numbering`]). Every number that is a
/// `u32` or `u8` in the engine is a `uint64` here, so that a value out of range is refused,
/// never cut to fit.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Numbering {
    /// The counters the write takes numbers from, in claim order.
    #[prost(message, repeated, tag = "1")]
    pub counters: Vec<CounterClaim>,
    /// Where the numbers go.
    #[prost(message, repeated, tag = "2")]
    pub slots: Vec<NumberSlot>,
}

/// Numbers taken from one counter (see [`tuplekv_engine::numbering::CounterClaim`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CounterClaim {
    /// The counter's encoded key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// The first number of a counter whose key is absent.
    #[prost(uint64, tag = "2")]
    pub start: u64,
    /// How many numbers the write takes (a `u32`).
    #[prost(uint64, tag = "3")]
    pub count: u64,
    /// The largest number the counter may hand out.
    #[prost(uint64, tag = "4")]
    pub max: u64,
}

/// One number written into one place of the write (see
/// [`tuplekv_engine::numbering::NumberSlot`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NumberSlot {
    /// The index of its counter in [`Numbering::counters`] (a `u32`).
    #[prost(uint64, tag = "1")]
    pub counter: u64,
    /// Which of that counter's numbers (a `u32`).
    #[prost(uint64, tag = "2")]
    pub ordinal: u64,
    /// What kind of bytes it goes into.
    #[prost(enumeration = "SlotTargetKind", tag = "3")]
    pub target: i32,
    /// The index of the check or mutation it goes into (a `u32`).
    #[prost(uint64, tag = "4")]
    pub index: u64,
    /// The byte offset of the placeholder (a `u32`).
    #[prost(uint64, tag = "5")]
    pub offset: u64,
    /// How the number is written.
    #[prost(enumeration = "NumberFormKind", tag = "6")]
    pub form: i32,
    /// For [`NumberFormKind::Digits`]: the placeholder's width (a `u8`); 0 for a key part.
    #[prost(uint64, tag = "7")]
    pub width: u64,
    /// For [`NumberFormKind::Digits`]: whether a wider number may lengthen the bytes.
    #[prost(bool, tag = "8")]
    pub widen: bool,
}

/// Which bytes a [`NumberSlot`] writes into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum SlotTargetKind {
    /// Not set: refused.
    Unspecified = 0,
    /// The key of check [`NumberSlot::index`].
    CheckKey = 1,
    /// The key of mutation [`NumberSlot::index`].
    MutationKey = 2,
    /// The value of mutation [`NumberSlot::index`].
    MutationValue = 3,
}

/// How a [`NumberSlot`] writes its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum NumberFormKind {
    /// Not set: refused.
    Unspecified = 0,
    /// Decimal digits over a placeholder of [`NumberSlot::width`] ASCII digits.
    Digits = 1,
    /// An integer key part inserted at the offset.
    KeyPart = 2,
}

/// "No key of `[start, end)` changed after `since`" (see
/// [`tuplekv_engine::RangeCheck`]). A failed range check fails the write like a failed key
/// check; its index in `failed_checks` counts after the key checks.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeCheck {
    /// First key of the range.
    #[prost(bytes = "vec", tag = "1")]
    pub start: Vec<u8>,
    /// End of the range (exclusive).
    #[prost(bytes = "vec", tag = "2")]
    pub end: Vec<u8>,
    /// The versionstamp of a held snapshot the range was read at (10 bytes).
    #[prost(bytes = "vec", tag = "3")]
    pub since: Vec<u8>,
    /// The earliest expiry (Unix ms) of the values the read returned; 0 for none.
    #[prost(uint64, tag = "4")]
    pub expires_at_ms: u64,
}

/// `AtomicWriteOutput`'s extension field: what the plain output leaves out of a failure, and
/// the numbers a numbered commit took.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AtomicWriteOutputExtension {
    /// The outcome's details, when the write carried the extension (absent for a commit that
    /// took no numbers).
    #[prost(message, optional, tag = "1000")]
    pub tuplekv: Option<WriteOutcome>,
}

/// A write's outcome in full: why it did not commit, or the numbers a numbered commit took.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteOutcome {
    /// For each failed key check (in the order of the plain output's `failed_checks`), the
    /// versionstamp the key had (empty: absent).
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub actual: Vec<Vec<u8>>,
    /// Whether a range check failed.
    #[prost(bool, tag = "2")]
    pub range_changed: bool,
    /// For a numbered commit, the first number of each counter claim, in claim order.
    #[prost(uint64, repeated, tag = "3")]
    pub numbers: Vec<u64>,
}

/// A value as the protocol's (encoding, payload).
pub fn encode_value(value: &Value) -> (pb::ValueEncoding, Vec<u8>) {
    match value {
        Value::V8(b) => (pb::ValueEncoding::VeV8, b.to_vec()),
        Value::Bytes(b) => (pb::ValueEncoding::VeBytes, b.to_vec()),
        Value::U64(n) => (pb::ValueEncoding::VeLe64, n.to_le_bytes().to_vec()),
    }
}

/// A value as the protocol's `KvValue`.
pub fn kv_value(value: &Value) -> pb::KvValue {
    let (encoding, data) = encode_value(value);
    pb::KvValue {
        data,
        encoding: encoding.into(),
    }
}

/// An entry as the protocol's `KvEntry`.
pub fn encode_entry(entry: &Entry) -> pb::KvEntry {
    let (encoding, value) = encode_value(&entry.value);
    pb::KvEntry {
        key: entry.key.to_vec(),
        value,
        encoding: encoding.into(),
        versionstamp: entry.versionstamp.as_bytes().to_vec(),
    }
}

/// Why a payload is not a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueError {
    /// An LE64 payload that is not 8 bytes.
    Le64Length(usize),
    /// An encoding the protocol does not define.
    UnknownEncoding(i32),
}

impl std::fmt::Display for ValueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueError::Le64Length(n) => {
                write!(
                    f,
                    "An LE64 value must be exactly 8 bytes; this one is {n} bytes."
                )
            }
            ValueError::UnknownEncoding(e) => write!(f, "The value encoding {e} is unknown."),
        }
    }
}

impl std::error::Error for ValueError {}

/// A value from the protocol's (encoding, payload).
///
/// # Errors
/// An unknown encoding, or an LE64 payload that is not 8 bytes.
pub fn decode_value(encoding: i32, data: Vec<u8>) -> Result<Value, ValueError> {
    match pb::ValueEncoding::try_from(encoding) {
        Ok(pb::ValueEncoding::VeV8) => Ok(Value::V8(data.into())),
        Ok(pb::ValueEncoding::VeBytes) => Ok(Value::Bytes(data.into())),
        Ok(pb::ValueEncoding::VeLe64) => {
            let bytes: [u8; 8] = data
                .as_slice()
                .try_into()
                .map_err(|_| ValueError::Le64Length(data.len()))?;
            Ok(Value::U64(u64::from_le_bytes(bytes)))
        }
        Ok(pb::ValueEncoding::VeUnspecified) | Err(_) => Err(ValueError::UnknownEncoding(encoding)),
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn an_extended_read_is_still_a_plain_read_and_keeps_its_extension() {
        let plain = pb::SnapshotRead {
            ranges: vec![pb::ReadRange {
                start: vec![1],
                end: vec![2],
                limit: 5,
                reverse: true,
            }],
        };
        let ext = SnapshotReadExtension {
            tuplekv: Some(ReadExtension {
                hold: true,
                at: vec![7; 10],
                release: vec![Hold {
                    versionstamp: vec![1; 10],
                    hold_id: 9,
                }],
                hold_id: 3,
            }),
        };
        let mut body = plain.encode_to_vec();
        body.extend(ext.encode_to_vec());
        assert_eq!(
            pb::SnapshotRead::decode(&body[..]).ok(),
            Some(plain.clone())
        );
        assert_eq!(SnapshotReadExtension::decode(&body[..]).ok(), Some(ext));
        // And a plain read decodes with no extension.
        let none = SnapshotReadExtension::decode(&plain.encode_to_vec()[..]).ok();
        assert_eq!(none, Some(SnapshotReadExtension { tuplekv: None }));
    }

    #[test]
    fn a_numbered_write_is_still_a_plain_write_and_keeps_its_numbering() {
        let plain = pb::AtomicWrite {
            mutations: vec![pb::Mutation {
                key: vec![2, b'0', 0],
                value: Some(kv_value(&Value::Bytes(vec![b'0'].into()))),
                mutation_type: pb::MutationType::MSet.into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let ext = AtomicWriteExtension {
            tuplekv: Some(WriteExtension {
                range_checks: Vec::new(),
                numbering: Some(Numbering {
                    counters: vec![CounterClaim {
                        key: vec![2, b'n', 0],
                        start: 1,
                        count: u64::from(u32::MAX) + 1,
                        max: u64::MAX,
                    }],
                    slots: vec![NumberSlot {
                        counter: 0,
                        ordinal: 0,
                        target: SlotTargetKind::MutationKey.into(),
                        index: 0,
                        offset: 1,
                        form: NumberFormKind::Digits.into(),
                        width: 300,
                        widen: true,
                    }],
                }),
            }),
        };
        let mut body = plain.encode_to_vec();
        ext.encode_raw(&mut body);
        assert_eq!(pb::AtomicWrite::decode(&body[..]).ok(), Some(plain));
        // Out-of-range numbers arrive as sent, for the server to refuse.
        assert_eq!(AtomicWriteExtension::decode(&body[..]).ok(), Some(ext));
    }

    #[test]
    fn values_round_trip_and_bad_payloads_are_named() {
        for v in [
            Value::U64(u64::MAX),
            Value::Bytes(vec![1, 2].into()),
            Value::V8(vec![0xff, 0x0f, 0x49, 0x02].into()),
        ] {
            let (enc, data) = encode_value(&v);
            assert_eq!(decode_value(enc.into(), data), Ok(v));
        }
        assert_eq!(
            decode_value(pb::ValueEncoding::VeLe64.into(), vec![1, 2, 3]),
            Err(ValueError::Le64Length(3))
        );
        assert_eq!(
            decode_value(99, vec![]),
            Err(ValueError::UnknownEncoding(99))
        );
    }
}
