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
use tuplekv_engine::{
    AtomicWrite, BoundedSum, ByteRange, Check, Expiry, KeyBytes, Mutation, MutationKind,
    RangeCheck, Value, Versionstamp,
};

use crate::error::{ApiError, text};
use crate::limits::{
    CHECKS_MAX, MUTATIONS_MAX, RANGE_CHECKS_MAX, READ_ENTRIES_MAX, READ_KEY_SIZE_MAX,
    READ_RANGES_MAX, RELEASES_PER_READ_MAX, TOTAL_MUTATION_SIZE_MAX, VALUE_SIZE_MAX,
    WATCHED_KEYS_MAX, WRITE_KEY_SIZE_MAX,
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
        return Err(ApiError::bad_request(text::TOO_MANY_READ_RANGES));
    }
    let mut total = 0usize;
    let mut ranges = Vec::with_capacity(read.ranges.len());
    for r in read.ranges {
        let limit = usize::try_from(r.limit)
            .ok()
            .filter(|&l| l >= 1)
            .ok_or_else(|| ApiError::bad_request(text::INVALID_READ_RANGE_LIMIT))?;
        total = total.saturating_add(limit);
        if total > READ_ENTRIES_MAX {
            return Err(ApiError::bad_request(text::READ_RANGE_TOO_LARGE));
        }
        if r.start.len() > READ_KEY_SIZE_MAX || r.end.len() > READ_KEY_SIZE_MAX {
            return Err(ApiError::bad_request(text::KEY_TOO_LONG));
        }
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

/// Decodes the extension field of an `AtomicWrite` body: `None` for a plain write, else its
/// range checks.
///
/// # Errors
/// Invalid protobuf, more than [`RANGE_CHECKS_MAX`] range checks, a bound over
/// [`READ_KEY_SIZE_MAX`], or a `since` that is not 10 bytes.
pub fn decode_range_checks(body: &[u8]) -> Result<Option<Vec<RangeCheck>>, ApiError> {
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
    ext.range_checks
        .into_iter()
        .map(|rc| {
            if rc.start.len() > READ_KEY_SIZE_MAX || rc.end.len() > READ_KEY_SIZE_MAX {
                return Err(ApiError::bad_request(text::KEY_TOO_LONG));
            }
            Ok(RangeCheck {
                start: KeyBytes::from(rc.start),
                end: KeyBytes::from(rc.end),
                since: versionstamp(&rc.since)?,
                expires_at: (rc.expires_at_ms != 0).then_some(rc.expires_at_ms),
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
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
        return Err(ApiError::bad_request(text::TOO_MANY_WATCHED_KEYS));
    }
    watch
        .keys
        .into_iter()
        .map(|k| {
            if k.key.len() > WRITE_KEY_SIZE_MAX {
                return Err(ApiError::bad_request(text::KEY_TOO_LONG));
            }
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
        return Err(ApiError::bad_request(text::TOO_MANY_CHECKS));
    }
    if write.mutations.len() > MUTATIONS_MAX {
        return Err(ApiError::bad_request(text::TOO_MANY_MUTATIONS));
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
        return Err(ApiError::bad_request(text::ATOMIC_WRITE_TOO_LARGE));
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

/// Mutation, watch and check keys use the write limit. denokv allows check keys one byte
/// longer (the read limit), but no stored key is that long, and the engine refuses it.
fn check_write_key(key: &[u8]) -> Result<(), ApiError> {
    if key.len() > WRITE_KEY_SIZE_MAX {
        return Err(ApiError::bad_request(text::KEY_TOO_LONG));
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
        return Err(ApiError::bad_request(text::VALUE_TOO_LONG));
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

    #[test]
    fn truncated_protobuf_is_invalid() {
        let body = write_of(vec![mutation(pb::MutationType::MSet, Some(le64(1)))]);
        let msg = refused(&body[..body.len() - 3]);
        assert!(msg.starts_with("Request protobuf is invalid: "), "{msg}");
    }
}
