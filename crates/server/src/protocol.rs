//! The KV Connect data path's messages, decoded into the engine's types and encoded back.
//!
//! The schema is `denokv_proto::datapath` (the official generated code). Its own conversions
//! are not used: their limits are denokv's (10 checks, for one), and they panic on an LE64
//! payload that is not 8 bytes. The decoders here are pure functions of the request bytes, so
//! the fuzz target `server_request` calls them directly; every limit they enforce is a
//! constant of [`crate::limits`], and every refusal is an [`ApiError`] with denokv's text.

use bytes::Bytes;
use denokv_proto::datapath as pb;
use prost::Message;
use tuplekv_engine::numbering::{
    self, CounterClaim, NumberForm, NumberSlot, Numbering, SlotTarget,
};
use tuplekv_engine::{
    AtomicWrite, BoundedSum, ByteRange, Check, Error, Expiry, KeyBytes, Mutation, MutationKind,
    RangeCheck, Value, Versionstamp,
};
use tuplekv_wire::{
    EXTENSION_FIELD, NUMBERING_COUNTERS_FIELD, NUMBERING_FIELD, NUMBERING_SLOTS_FIELD,
    RANGE_CHECKS_FIELD,
};

use crate::error::{ApiError, text};
use crate::limits::{
    CHECKS_MAX, COUNTERS_PER_COMMIT_MAX, MUTATIONS_MAX, NUMBER_SLOTS_MAX, RANGE_CHECKS_MAX,
    READ_ENTRIES_MAX, READ_KEY_SIZE_MAX, READ_RANGES_MAX, RELEASES_PER_READ_MAX,
    TOTAL_MUTATION_SIZE_MAX, VALUE_SIZE_MAX, WATCHED_KEYS_MAX, WRITE_KEY_SIZE_MAX,
};

/// One range of a snapshot read: up to `limit` entries of `range`, from the end with `reverse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRange {
    /// The encoded keys `[start, end)`.
    pub range: ByteRange,
    /// Most entries to return (at least 1).
    pub limit: usize,
    /// Whether to read from the end of the range.
    pub reverse: bool,
}

/// Decodes a `SnapshotRead` request body.
///
/// # Errors
/// Invalid protobuf, more than [`READ_RANGES_MAX`] ranges, a limit below 1, limits adding up to
/// more than [`READ_ENTRIES_MAX`], or a bound over [`READ_KEY_SIZE_MAX`] bytes.
pub fn decode_snapshot_read(body: &[u8]) -> Result<Vec<ReadRange>, ApiError> {
    let read = pb::SnapshotRead::decode(body).map_err(|e| ApiError::invalid_protobuf(&e))?;
    if read.ranges.len() > READ_RANGES_MAX {
        return Err(ApiError::from_engine(&Error::TooManyRanges {
            count: read.ranges.len(),
        }));
    }
    let mut total = 0usize;
    let mut ranges = Vec::with_capacity(read.ranges.len());
    for r in read.ranges {
        let limit = match usize::try_from(r.limit) {
            Ok(0) => return Err(ApiError::from_engine(&Error::ZeroLimit)),
            Ok(limit) => limit,
            // A negative limit is the protocol's own error (the engine's limits are unsigned).
            Err(_) => return Err(ApiError::bad_request(text::INVALID_READ_RANGE_LIMIT)),
        };
        total = total.saturating_add(limit);
        if total > READ_ENTRIES_MAX {
            return Err(ApiError::from_engine(&Error::TooManyEntries {
                count: total,
            }));
        }
        check_read_key(&r.start)?;
        check_read_key(&r.end)?;
        ranges.push(ReadRange {
            range: ByteRange {
                start: r.start,
                end: r.end,
            },
            limit,
            reverse: r.reverse,
        });
    }
    Ok(ranges)
}

/// How a `snapshot_read` of tuplekv's extension reads (see [`tuplekv_wire`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtensionRead {
    /// Hold the state read for later reads.
    pub hold: bool,
    /// Read the held state at this versionstamp.
    pub at: Option<Versionstamp>,
    /// With `hold`: the hold's id.
    pub hold_id: u64,
    /// Holds the client is done with: (snapshot, hold id).
    pub release: Vec<(Versionstamp, u64)>,
}

/// Decodes the extension field of a `SnapshotRead` body: `None` for a plain read.
///
/// # Errors
/// Invalid protobuf, or an `at` that is not 10 bytes.
pub fn decode_read_mode(body: &[u8]) -> Result<Option<ExtensionRead>, ApiError> {
    let ext = tuplekv_wire::SnapshotReadExtension::decode(body)
        .map_err(|e| ApiError::invalid_protobuf(&e))?;
    let Some(ext) = ext.tuplekv else {
        return Ok(None);
    };
    let at = match ext.at.len() {
        0 => None,
        _ => Some(versionstamp(&ext.at)?),
    };
    if ext.release.len() > RELEASES_PER_READ_MAX {
        return Err(ApiError::bad_request(format!(
            "Too many snapshot releases (max {RELEASES_PER_READ_MAX})."
        )));
    }
    let release = ext
        .release
        .iter()
        .map(|h| Ok((versionstamp(&h.versionstamp)?, h.hold_id)))
        .collect::<Result<_, ApiError>>()?;
    Ok(Some(ExtensionRead {
        hold: ext.hold,
        hold_id: ext.hold_id,
        at,
        release,
    }))
}

/// What an `AtomicWrite` of tuplekv's extension adds to the plain write.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WriteExtension {
    /// Range checks, each against a snapshot the server must hold.
    pub range_checks: Vec<RangeCheck>,
    /// The numbers the write takes from counters (empty: none).
    pub numbering: Numbering,
}

/// Decodes the extension field of an `AtomicWrite` body: `None` for a plain write, else its
/// range checks and numbering (checked on their own here; against the write in
/// [`decode_write`]).
///
/// The counters and slots of the numbering are counted before the field is decoded, so a
/// body with too many is refused before anything is allocated for them.
///
/// # Errors
/// Invalid protobuf, more than [`RANGE_CHECKS_MAX`] range checks, a bound over
/// [`READ_KEY_SIZE_MAX`], a `since` that is not 10 bytes; more than
/// [`COUNTERS_PER_COMMIT_MAX`] counters or [`NUMBER_SLOTS_MAX`] slots, a counter key over
/// [`WRITE_KEY_SIZE_MAX`], a number out of the range of its engine type (a count, index or
/// offset past `u32::MAX`, a width past `u8::MAX`), or an unknown slot target or form.
pub fn decode_write_extension(body: &[u8]) -> Result<Option<WriteExtension>, ApiError> {
    let (counters, slots) = numbering_counts(body);
    check_numbering_counts(counters, slots)?;
    let ext = tuplekv_wire::AtomicWriteExtension::decode(body)
        .map_err(|e| ApiError::invalid_protobuf(&e))?;
    let Some(ext) = ext.tuplekv else {
        return Ok(None);
    };
    if ext.range_checks.len() > RANGE_CHECKS_MAX {
        return Err(ApiError::bad_request(format!(
            "Too many range checks (max {RANGE_CHECKS_MAX})."
        )));
    }
    let range_checks = ext
        .range_checks
        .into_iter()
        .map(|rc| {
            check_read_key(&rc.start)?;
            check_read_key(&rc.end)?;
            Ok(RangeCheck {
                start: KeyBytes::from(rc.start),
                end: KeyBytes::from(rc.end),
                since: versionstamp(&rc.since)?,
                expires_at: (rc.expires_at_ms != 0).then_some(rc.expires_at_ms),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let numbering = ext
        .numbering
        .map(decode_numbering)
        .transpose()?
        .unwrap_or_default();
    Ok(Some(WriteExtension {
        range_checks,
        numbering,
    }))
}

/// Decodes an `AtomicWrite` body whole, as the server runs it: the plain write and, when the
/// server offers tuplekv's extension (`extension`), the extension's range checks and
/// numbering, the numbering checked against the write by the engine's
/// [`numbering::validate`]. Returns the write and whether it carried the extension (so the
/// output carries it too).
///
/// A server that does not offer the extension refuses a write whose extension field carries
/// range checks or a numbering, rather than commit it without them (only a client holding
/// the agreement of an earlier server sends one).
///
/// # Errors
/// As [`decode_atomic_write`] and [`decode_write_extension`], and every rule of
/// [`numbering::validate`] (a slot naming a counter, check or mutation that does not exist,
/// outside its target or not on digits, a width outside 1 to 20, ...): all 400s.
pub fn decode_write(body: &[u8], extension: bool) -> Result<(AtomicWrite, bool), ApiError> {
    let mut write = decode_atomic_write(body)?;
    if !extension {
        if carries_extension_conditions(body) {
            return Err(ApiError::bad_request(text::EXTENSION_NOT_OFFERED));
        }
        return Ok((write, false));
    }
    let Some(ext) = decode_write_extension(body)? else {
        return Ok((write, false));
    };
    write.range_checks = ext.range_checks;
    write.numbering = ext.numbering;
    numbering::validate(&write).map_err(|e| ApiError::from_engine(&e))?;
    Ok((write, true))
}

fn check_numbering_counts(counters: usize, slots: usize) -> Result<(), ApiError> {
    if counters > COUNTERS_PER_COMMIT_MAX {
        return Err(ApiError::bad_request(format!(
            "Invalid numbering: {counters} counters in one write (max {COUNTERS_PER_COMMIT_MAX})."
        )));
    }
    if slots > NUMBER_SLOTS_MAX {
        return Err(ApiError::bad_request(format!(
            "Invalid numbering: {slots} number slots in one write (max {NUMBER_SLOTS_MAX})."
        )));
    }
    Ok(())
}

/// The wire's numbering as the engine's: every number in range of its engine type, every
/// enum known, nothing sent that the engine would not use.
fn decode_numbering(n: tuplekv_wire::Numbering) -> Result<Numbering, ApiError> {
    check_numbering_counts(n.counters.len(), n.slots.len())?;
    let counters = n
        .counters
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            check_write_key(&c.key)?;
            Ok(CounterClaim {
                key: KeyBytes::from(c.key),
                start: c.start,
                count: u32_field(c.count, || format!("counter {i}'s count"))?,
                max: c.max,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let slots = n
        .slots
        .iter()
        .enumerate()
        .map(|(i, s)| decode_slot(i, s))
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(Numbering { counters, slots })
}

fn decode_slot(i: usize, s: &tuplekv_wire::NumberSlot) -> Result<NumberSlot, ApiError> {
    use tuplekv_wire::{NumberFormKind, SlotTargetKind};
    let index = u32_field(s.index, || format!("slot {i}'s index"))?;
    let target = match SlotTargetKind::try_from(s.target) {
        Ok(SlotTargetKind::CheckKey) => SlotTarget::CheckKey(index),
        Ok(SlotTargetKind::MutationKey) => SlotTarget::MutationKey(index),
        Ok(SlotTargetKind::MutationValue) => SlotTarget::MutationValue(index),
        Ok(SlotTargetKind::Unspecified) | Err(_) => {
            return Err(ApiError::bad_request(format!(
                "Invalid numbering: slot {i}'s target {} is unknown.",
                s.target
            )));
        }
    };
    let form = match NumberFormKind::try_from(s.form) {
        Ok(NumberFormKind::Digits) => NumberForm::Digits {
            width: u8::try_from(s.width).map_err(|_| {
                ApiError::bad_request(format!(
                    "Invalid numbering: slot {i}'s width {} is out of range (max {}).",
                    s.width,
                    u8::MAX
                ))
            })?,
            widen: s.widen,
        },
        Ok(NumberFormKind::KeyPart) if s.width == 0 && !s.widen => NumberForm::KeyPart,
        Ok(NumberFormKind::KeyPart) => {
            return Err(ApiError::bad_request(format!(
                "Invalid numbering: slot {i} is a key part, which has no width and does not widen."
            )));
        }
        Ok(NumberFormKind::Unspecified) | Err(_) => {
            return Err(ApiError::bad_request(format!(
                "Invalid numbering: slot {i}'s form {} is unknown.",
                s.form
            )));
        }
    };
    Ok(NumberSlot {
        counter: u32_field(s.counter, || format!("slot {i}'s counter"))?,
        ordinal: u32_field(s.ordinal, || format!("slot {i}'s ordinal"))?,
        target,
        offset: u32_field(s.offset, || format!("slot {i}'s offset"))?,
        form,
    })
}

/// A wire `uint64` that is a `u32` in the engine: refused past `u32::MAX`, never cut.
fn u32_field(n: u64, what: impl FnOnce() -> String) -> Result<u32, ApiError> {
    u32::try_from(n).map_err(|_| {
        ApiError::bad_request(format!(
            "Invalid numbering: {} {n} is out of range (max {}).",
            what(),
            u32::MAX
        ))
    })
}

/// Calls `f` with the number and bytes of each length-delimited field of the protobuf
/// message `buf`, skipping the others. Stops at the first thing it cannot read (prost's
/// decoding reports it) and at groups (which prost skips, and counts are checked again after
/// decoding). Never allocates.
fn for_each_len_field(mut buf: &[u8], mut f: impl FnMut(u64, &[u8])) {
    use prost::encoding::decode_varint;
    while !buf.is_empty() {
        let Ok(key) = decode_varint(&mut buf) else {
            return;
        };
        let skip = match key & 7 {
            0 => match decode_varint(&mut buf) {
                Ok(_) => 0,
                Err(_) => return,
            },
            1 => 8,
            5 => 4,
            2 => {
                let Some(len) = decode_varint(&mut buf)
                    .ok()
                    .and_then(|l| usize::try_from(l).ok())
                else {
                    return;
                };
                let Some(field) = buf.get(..len) else {
                    return;
                };
                f(key >> 3, field);
                len
            }
            _ => return,
        };
        let Some(rest) = buf.get(skip..) else {
            return;
        };
        buf = rest;
    }
}

/// The extension fields of an `AtomicWrite` body, each as `f` sees them.
fn for_each_write_extension(body: &[u8], mut f: impl FnMut(u64, &[u8])) {
    for_each_len_field(body, |field, ext| {
        if field == u64::from(EXTENSION_FIELD) {
            for_each_len_field(ext, &mut f);
        }
    });
}

/// How many counters and slots the numbering of an `AtomicWrite` body's extension field
/// holds (over every occurrence of the fields, as protobuf merges them), counted without
/// decoding.
fn numbering_counts(body: &[u8]) -> (usize, usize) {
    let (mut counters, mut slots) = (0usize, 0usize);
    for_each_write_extension(body, |field, numbering| {
        if field == u64::from(NUMBERING_FIELD) {
            for_each_len_field(numbering, |field, _| match u32::try_from(field) {
                Ok(NUMBERING_COUNTERS_FIELD) => counters += 1,
                Ok(NUMBERING_SLOTS_FIELD) => slots += 1,
                _ => {}
            });
        }
    });
    (counters, slots)
}

/// Whether an `AtomicWrite` body's extension field carries range checks or a numbering:
/// conditions a server that does not offer the extension must not drop.
fn carries_extension_conditions(body: &[u8]) -> bool {
    let mut carries = false;
    for_each_write_extension(body, |field, _| {
        carries |= field == u64::from(RANGE_CHECKS_FIELD) || field == u64::from(NUMBERING_FIELD);
    });
    carries
}

fn versionstamp(bytes: &[u8]) -> Result<Versionstamp, ApiError> {
    let bytes: [u8; 10] = bytes
        .try_into()
        .map_err(|_| ApiError::bad_request(text::INVALID_VERSIONSTAMP))?;
    Ok(Versionstamp::from_bytes(bytes))
}

/// Decodes a `Watch` request body into the encoded keys to watch.
///
/// # Errors
/// Invalid protobuf, more than [`WATCHED_KEYS_MAX`] keys, or a key over
/// [`WRITE_KEY_SIZE_MAX`] bytes.
pub fn decode_watch(body: &[u8]) -> Result<Vec<KeyBytes>, ApiError> {
    let watch = pb::Watch::decode(body).map_err(|e| ApiError::invalid_protobuf(&e))?;
    if watch.keys.len() > WATCHED_KEYS_MAX {
        return Err(ApiError::from_engine(&Error::TooManyWatchedKeys {
            count: watch.keys.len(),
        }));
    }
    watch
        .keys
        .into_iter()
        .map(|k| {
            check_write_key(&k.key)?;
            Ok(KeyBytes::from(k.key))
        })
        .collect()
}

/// Decodes an `AtomicWrite` request body into the engine's [`AtomicWrite`].
///
/// `expire_at_ms` is an absolute Unix-millisecond deadline (0 and -1 mean none).
///
/// # Errors
/// Invalid protobuf; more than [`CHECKS_MAX`] checks or [`MUTATIONS_MAX`] mutations; any
/// enqueue (KV Connect clients never send them); a check versionstamp that is neither empty
/// nor 10 bytes; an unknown mutation type or one without the value it needs; an unknown value
/// encoding or an LE64 payload that is not 8 bytes; `min`/`max` with a non-LE64 operand; an
/// `expire_at_ms` below -1; a key or value over its limit; or a write larger than
/// [`TOTAL_MUTATION_SIZE_MAX`].
pub fn decode_atomic_write(body: &[u8]) -> Result<AtomicWrite, ApiError> {
    let write = pb::AtomicWrite::decode(body).map_err(|e| ApiError::invalid_protobuf(&e))?;
    if write.checks.len() > CHECKS_MAX {
        return Err(ApiError::from_engine(&Error::TooManyChecks {
            count: write.checks.len(),
        }));
    }
    if write.mutations.len() > MUTATIONS_MAX {
        return Err(ApiError::from_engine(&Error::TooManyMutations {
            count: write.mutations.len(),
        }));
    }
    if !write.enqueues.is_empty() {
        return Err(ApiError::bad_request(text::ENQUEUE_UNSUPPORTED));
    }
    let mut size = 0usize;
    let checks = write
        .checks
        .into_iter()
        .map(|c| {
            let check = decode_check(c)?;
            size = size.saturating_add(check.key.len());
            Ok(check)
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let mutations = write
        .mutations
        .into_iter()
        .map(|m| {
            let mutation = decode_mutation(m)?;
            size = size.saturating_add(mutation_size(&mutation));
            Ok(mutation)
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    if size > TOTAL_MUTATION_SIZE_MAX {
        return Err(ApiError::from_engine(&Error::TotalMutationSizeTooLarge {
            size,
        }));
    }
    Ok(AtomicWrite {
        checks,
        range_checks: Vec::new(),
        mutations,
        numbering: Default::default(),
    })
}

/// What a mutation counts for in [`TOTAL_MUTATION_SIZE_MAX`], as the engine counts it.
fn mutation_size(m: &Mutation) -> usize {
    let key = m.key.len();
    match m.kind.value_size() {
        Some(value) => key.saturating_mul(2).saturating_add(value),
        None => key,
    }
}

fn decode_check(c: pb::Check) -> Result<Check, ApiError> {
    let versionstamp = match c.versionstamp.len() {
        0 => None,
        _ => {
            let bytes: [u8; 10] = c
                .versionstamp
                .as_slice()
                .try_into()
                .map_err(|_| ApiError::bad_request(text::INVALID_VERSIONSTAMP))?;
            Some(Versionstamp::from_bytes(bytes))
        }
    };
    check_write_key(&c.key)?;
    Ok(Check {
        key: KeyBytes::from(c.key),
        versionstamp,
    })
}

/// A key a mutation, a check or a watch uses: at most [`WRITE_KEY_SIZE_MAX`] bytes, refused
/// as the engine refuses it (its text and its code).
///
/// Check keys take the write limit too: denokv allows them one byte more (the read limit),
/// but no stored key is that long, and the engine refuses it.
fn check_write_key(key: &[u8]) -> Result<(), ApiError> {
    if key.len() > WRITE_KEY_SIZE_MAX {
        return Err(ApiError::from_engine(&Error::KeyTooLargeForWrite {
            size: key.len(),
        }));
    }
    Ok(())
}

/// A bound of a read range or a range check: at most [`READ_KEY_SIZE_MAX`] bytes, refused as
/// the engine refuses it.
fn check_read_key(key: &[u8]) -> Result<(), ApiError> {
    if key.len() > READ_KEY_SIZE_MAX {
        return Err(ApiError::from_engine(&Error::KeyTooLargeForRead {
            size: key.len(),
        }));
    }
    Ok(())
}

/// `expire_at_ms`: 0 and -1 mean none; from 1 on, an absolute Unix-ms deadline.
fn decode_expire_at(ms: i64) -> Result<Option<u64>, ApiError> {
    match ms {
        -1 | 0 => Ok(None),
        ms if ms < -1 => Err(ApiError::bad_request(text::INVALID_MUTATION_EXPIRE_AT)),
        ms => Ok(u64::try_from(ms).ok()),
    }
}

fn decode_mutation(m: pb::Mutation) -> Result<Mutation, ApiError> {
    check_write_key(&m.key)?;
    let expire_at = decode_expire_at(m.expire_at_ms)?;
    let invalid = || ApiError::bad_request(text::INVALID_MUTATION_KIND);
    let value = m.value.map(decode_value).transpose()?;
    let kind = match pb::MutationType::try_from(m.mutation_type) {
        Ok(pb::MutationType::MSet) => set_kind(value.ok_or_else(invalid)?, expire_at),
        Ok(pb::MutationType::MDelete) => MutationKind::Delete,
        Ok(pb::MutationType::MSum) => {
            let value = value.ok_or_else(invalid)?;
            let plain = m.sum_min.is_empty() && m.sum_max.is_empty() && !m.sum_clamp;
            match value {
                Value::U64(n) if plain => MutationKind::Sum(n),
                operand => sum_bounded(operand, m.sum_min, m.sum_max, m.sum_clamp),
            }
        }
        Ok(pb::MutationType::MMin) => MutationKind::Min(u64_operand(value, "min")?),
        Ok(pb::MutationType::MMax) => MutationKind::Max(u64_operand(value, "max")?),
        Ok(pb::MutationType::MSetSuffixVersionstampedKey) => {
            versionstamped_kind(value.ok_or_else(invalid)?, expire_at)
        }
        Ok(pb::MutationType::MUnspecified) | Err(_) => return Err(invalid()),
    };
    Ok(Mutation {
        key: KeyBytes::from(m.key),
        kind,
    })
}

/// The operand of `min`/`max`, which must be an LE64.
fn u64_operand(value: Option<Value>, op: &str) -> Result<u64, ApiError> {
    match value {
        Some(Value::U64(n)) => Ok(n),
        Some(_) => Err(ApiError::bad_request(format!(
            "Failed to perform '{op}' mutation on a non-U64 operand"
        ))),
        None => Err(ApiError::bad_request(text::INVALID_MUTATION_KIND)),
    }
}

fn set_kind(value: Value, expire_at: Option<u64>) -> MutationKind {
    MutationKind::Set {
        value,
        expiry: expire_at.map(Expiry::At),
    }
}

fn versionstamped_kind(value: Value, expire_at: Option<u64>) -> MutationKind {
    MutationKind::SetSuffixVersionstampedKey {
        value,
        expiry: expire_at.map(Expiry::At),
    }
}

/// An `M_SUM` that is not a plain LE64 operand: a V8 number or bigint, or bounds, or
/// clamping. The engine checks the operand and bounds when it applies it.
fn sum_bounded(operand: Value, min: Vec<u8>, max: Vec<u8>, clamp: bool) -> MutationKind {
    let bound = |b: Vec<u8>| (!b.is_empty()).then(|| Bytes::from(b));
    MutationKind::SumBounded(Box::new(BoundedSum {
        operand,
        min: bound(min),
        max: bound(max),
        clamp,
    }))
}

/// Decodes a `KvValue`: its encoding and payload.
fn decode_value(v: pb::KvValue) -> Result<Value, ApiError> {
    if v.data.len() > VALUE_SIZE_MAX {
        return Err(ApiError::from_engine(&Error::ValueTooLarge {
            size: v.data.len(),
        }));
    }
    tuplekv_wire::decode_value(v.encoding, v.data).map_err(|e| ApiError::bad_request(e.to_string()))
}

pub use tuplekv_wire::encode_entry;

#[cfg(test)]
mod tests {
    use super::*;

    fn le64(n: u64) -> pb::KvValue {
        pb::KvValue {
            data: n.to_le_bytes().to_vec(),
            encoding: pb::ValueEncoding::VeLe64.into(),
        }
    }

    fn write_of(mutations: Vec<pb::Mutation>) -> Vec<u8> {
        pb::AtomicWrite {
            mutations,
            ..Default::default()
        }
        .encode_to_vec()
    }

    fn mutation(kind: pb::MutationType, value: Option<pb::KvValue>) -> pb::Mutation {
        pb::Mutation {
            key: b"\x02k\x00".to_vec(),
            value,
            mutation_type: kind.into(),
            ..Default::default()
        }
    }

    fn refused(body: &[u8]) -> String {
        decode_atomic_write(body)
            .expect_err("refused")
            .message()
            .to_owned()
    }

    #[test]
    fn min_and_max_keep_their_protocol_numbers() {
        let w = decode_atomic_write(&write_of(vec![
            mutation(pb::MutationType::MMax, Some(le64(4))),
            mutation(pb::MutationType::MMin, Some(le64(5))),
        ]))
        .expect("valid");
        assert_eq!(w.mutations[0].kind, MutationKind::Max(4));
        assert_eq!(w.mutations[1].kind, MutationKind::Min(5));
    }

    #[test]
    fn a_short_le64_payload_is_refused_not_a_panic() {
        let bad = pb::KvValue {
            data: vec![1, 2, 3],
            encoding: pb::ValueEncoding::VeLe64.into(),
        };
        let msg = refused(&write_of(vec![mutation(pb::MutationType::MSet, Some(bad))]));
        assert!(msg.contains("8 bytes"), "{msg}");
    }

    #[test]
    fn an_unknown_value_encoding_is_named() {
        let bad = pb::KvValue {
            data: vec![],
            encoding: 7,
        };
        let msg = refused(&write_of(vec![mutation(pb::MutationType::MSet, Some(bad))]));
        assert_eq!(msg, "The value encoding 7 is unknown.");
    }

    #[test]
    fn set_without_value_and_unknown_kinds_are_invalid() {
        assert_eq!(
            refused(&write_of(vec![mutation(pb::MutationType::MSet, None)])),
            text::INVALID_MUTATION_KIND
        );
        let mut m = mutation(pb::MutationType::MSet, Some(le64(1)));
        m.mutation_type = 6;
        assert_eq!(refused(&write_of(vec![m])), text::INVALID_MUTATION_KIND);
    }

    #[test]
    fn min_with_a_v8_operand_names_the_operand() {
        let v8 = pb::KvValue {
            data: vec![0xff, 0x0f, 0x49, 0x02],
            encoding: pb::ValueEncoding::VeV8.into(),
        };
        assert_eq!(
            refused(&write_of(vec![mutation(pb::MutationType::MMin, Some(v8))])),
            "Failed to perform 'min' mutation on a non-U64 operand"
        );
    }

    #[test]
    fn expire_at_below_minus_one_is_invalid_and_zero_means_none() {
        let mut m = mutation(pb::MutationType::MSet, Some(le64(1)));
        m.expire_at_ms = -2;
        assert_eq!(
            refused(&write_of(vec![m.clone()])),
            text::INVALID_MUTATION_EXPIRE_AT
        );
        m.expire_at_ms = 0;
        let w = decode_atomic_write(&write_of(vec![m])).expect("valid");
        assert!(matches!(
            w.mutations[0].kind,
            MutationKind::Set { expiry: None, .. }
        ));
    }

    #[test]
    fn check_versionstamps_are_empty_or_ten_bytes() {
        let body = |vs: Vec<u8>| {
            pb::AtomicWrite {
                checks: vec![pb::Check {
                    key: b"\x02k\x00".to_vec(),
                    versionstamp: vs,
                }],
                ..Default::default()
            }
            .encode_to_vec()
        };
        assert!(decode_atomic_write(&body(vec![])).is_ok());
        assert!(decode_atomic_write(&body(vec![0; 10])).is_ok());
        assert_eq!(refused(&body(vec![0; 9])), text::INVALID_VERSIONSTAMP);
        assert_eq!(refused(&body(vec![0; 11])), text::INVALID_VERSIONSTAMP);
    }

    fn numbered_body(numbering: tuplekv_wire::Numbering) -> Vec<u8> {
        let mut body = pb::AtomicWrite {
            mutations: vec![pb::Mutation {
                key: b"\x02k000\x00".to_vec(),
                value: Some(pb::KvValue {
                    data: b"000".to_vec(),
                    encoding: pb::ValueEncoding::VeBytes.into(),
                }),
                mutation_type: pb::MutationType::MSet.into(),
                ..Default::default()
            }],
            ..Default::default()
        }
        .encode_to_vec();
        tuplekv_wire::AtomicWriteExtension {
            tuplekv: Some(tuplekv_wire::WriteExtension {
                range_checks: Vec::new(),
                numbering: Some(numbering),
            }),
        }
        .encode_raw(&mut body);
        body
    }

    fn claim() -> tuplekv_wire::CounterClaim {
        tuplekv_wire::CounterClaim {
            key: b"\x02n\x00".to_vec(),
            start: 1,
            count: 1,
            max: u64::MAX,
        }
    }

    fn slot() -> tuplekv_wire::NumberSlot {
        tuplekv_wire::NumberSlot {
            counter: 0,
            ordinal: 0,
            target: tuplekv_wire::SlotTargetKind::MutationKey.into(),
            index: 0,
            offset: 2,
            form: tuplekv_wire::NumberFormKind::Digits.into(),
            width: 3,
            widen: true,
        }
    }

    fn numbering(slots: Vec<tuplekv_wire::NumberSlot>) -> tuplekv_wire::Numbering {
        tuplekv_wire::Numbering {
            counters: vec![claim()],
            slots,
        }
    }

    fn refused_numbering(body: &[u8]) -> String {
        decode_write(body, true)
            .expect_err("refused")
            .message()
            .to_owned()
    }

    #[test]
    fn a_numbering_decodes_into_the_engines() {
        let (write, extended) =
            decode_write(&numbered_body(numbering(vec![slot()])), true).expect("valid");
        assert!(extended);
        assert_eq!(
            write.numbering,
            Numbering {
                counters: vec![CounterClaim {
                    key: KeyBytes::from(&b"\x02n\x00"[..]),
                    start: 1,
                    count: 1,
                    max: u64::MAX,
                }],
                slots: vec![NumberSlot {
                    counter: 0,
                    ordinal: 0,
                    target: SlotTarget::MutationKey(0),
                    offset: 2,
                    form: NumberForm::Digits {
                        width: 3,
                        widen: true,
                    },
                }],
            }
        );
    }

    #[test]
    fn numbers_out_of_their_engine_types_range_are_refused_not_cut() {
        let past = u64::from(u32::MAX) + 1;
        let cases: Vec<(tuplekv_wire::NumberSlot, &str)> = vec![
            (
                tuplekv_wire::NumberSlot {
                    offset: past,
                    ..slot()
                },
                "slot 0's offset 4294967296 is out of range",
            ),
            (
                tuplekv_wire::NumberSlot {
                    counter: past,
                    ..slot()
                },
                "slot 0's counter 4294967296",
            ),
            (
                tuplekv_wire::NumberSlot {
                    ordinal: past,
                    ..slot()
                },
                "slot 0's ordinal 4294967296",
            ),
            (
                tuplekv_wire::NumberSlot {
                    index: past,
                    ..slot()
                },
                "slot 0's index 4294967296",
            ),
            (
                tuplekv_wire::NumberSlot {
                    width: 300,
                    ..slot()
                },
                "slot 0's width 300 is out of range (max 255)",
            ),
            (
                tuplekv_wire::NumberSlot {
                    target: 9,
                    ..slot()
                },
                "slot 0's target 9 is unknown",
            ),
            (
                tuplekv_wire::NumberSlot {
                    target: 0,
                    ..slot()
                },
                "slot 0's target 0 is unknown",
            ),
            (
                tuplekv_wire::NumberSlot { form: 0, ..slot() },
                "slot 0's form 0 is unknown",
            ),
            (
                tuplekv_wire::NumberSlot {
                    form: tuplekv_wire::NumberFormKind::KeyPart.into(),
                    ..slot()
                },
                "slot 0 is a key part, which has no width",
            ),
            // In range of the engine's types, refused by its rules.
            (
                tuplekv_wire::NumberSlot {
                    offset: u64::from(u32::MAX),
                    ..slot()
                },
                "Invalid numbering: a placeholder at bytes 4294967295..",
            ),
            (
                tuplekv_wire::NumberSlot {
                    counter: 1,
                    ..slot()
                },
                "Invalid numbering: a slot names counter 1, but the commit claims 1",
            ),
            (
                tuplekv_wire::NumberSlot {
                    width: 21,
                    ..slot()
                },
                "Invalid numbering: a placeholder of width 21",
            ),
        ];
        for (slot, expected) in cases {
            let msg = refused_numbering(&numbered_body(numbering(vec![slot])));
            assert!(msg.contains(expected), "{msg:?} should say {expected:?}");
            assert!(msg.starts_with("Invalid numbering: "), "{msg}");
        }
        let count = tuplekv_wire::Numbering {
            counters: vec![tuplekv_wire::CounterClaim {
                count: past,
                ..claim()
            }],
            slots: Vec::new(),
        };
        let msg = refused_numbering(&numbered_body(count));
        assert!(msg.contains("counter 0's count 4294967296"), "{msg}");
    }

    #[test]
    fn a_million_slots_are_refused_before_they_are_decoded() {
        let body = numbered_body(numbering(vec![
            tuplekv_wire::NumberSlot::default();
            1_000_000
        ]));
        assert_eq!(numbering_counts(&body), (1, 1_000_000));
        let msg = refused_numbering(&body);
        assert_eq!(
            msg,
            format!(
                "Invalid numbering: 1000000 number slots in one write (max {NUMBER_SLOTS_MAX})."
            )
        );
        let counters = tuplekv_wire::Numbering {
            counters: vec![claim(); COUNTERS_PER_COMMIT_MAX + 1],
            slots: Vec::new(),
        };
        assert!(
            refused_numbering(&numbered_body(counters)).contains(&format!(
                "{} counters in one write (max {COUNTERS_PER_COMMIT_MAX})",
                COUNTERS_PER_COMMIT_MAX + 1
            ))
        );
    }

    #[test]
    fn numbering_counts_add_up_every_occurrence_of_the_fields() {
        // Protobuf merges a message field sent twice: the counts are over both.
        let mut body = numbered_body(numbering(vec![slot(); 3]));
        tuplekv_wire::AtomicWriteExtension {
            tuplekv: Some(tuplekv_wire::WriteExtension {
                range_checks: Vec::new(),
                numbering: Some(numbering(vec![slot(); 2])),
            }),
        }
        .encode_raw(&mut body);
        assert_eq!(numbering_counts(&body), (2, 5));
        let ext = decode_write_extension(&body)
            .expect("decodes")
            .expect("present");
        assert_eq!(
            (ext.numbering.counters.len(), ext.numbering.slots.len()),
            (2, 5)
        );
        // Truncated or garbage input counts what it can and never panics.
        for end in 0..body.len() {
            let _ = numbering_counts(&body[..end]);
        }
        assert_eq!(numbering_counts(&[0xff; 11]), (0, 0));
    }

    #[test]
    fn a_server_without_the_extension_refuses_a_numbering_it_would_drop() {
        let body = numbered_body(numbering(vec![slot()]));
        assert_eq!(
            decode_write(&body, false).expect_err("refused").message(),
            text::EXTENSION_NOT_OFFERED
        );
        // A plain write, or an empty extension, is the plain write.
        let mut plain = write_of(vec![mutation(pb::MutationType::MSet, Some(le64(1)))]);
        assert_eq!(decode_write(&plain, false).map(|(_, e)| e), Ok(false));
        tuplekv_wire::AtomicWriteExtension {
            tuplekv: Some(tuplekv_wire::WriteExtension::default()),
        }
        .encode_raw(&mut plain);
        assert_eq!(decode_write(&plain, false).map(|(_, e)| e), Ok(false));
        assert_eq!(decode_write(&plain, true).map(|(_, e)| e), Ok(true));
    }

    #[test]
    fn truncated_protobuf_is_invalid() {
        let body = write_of(vec![mutation(pb::MutationType::MSet, Some(le64(1)))]);
        let msg = refused(&body[..body.len() - 3]);
        assert!(msg.starts_with("Request protobuf is invalid: "), "{msg}");
    }
}
