//! The engine's writes and reads as KV Connect messages, with tuplekv's extension fields when
//! the server speaks it.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use denokv_proto::datapath as pb;
use prost::Message;
use tuplekv_engine::numbering::{NumberForm, Numbering, SlotTarget};
use tuplekv_engine::{
    AtomicWrite, CommitResult, Conflict, Entry, Error, Expiry, FailedCheck, KeyBytes, MutationKind,
    Value, Versionstamp,
};

use crate::transport::versionstamp;

/// Unix time now, in milliseconds.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn le64(n: u64) -> Option<pb::KvValue> {
    Some(tuplekv_wire::kv_value(&Value::U64(n)))
}

/// The protocol's `expire_at_ms` for an expiry (0: none). A relative expiry counts from this
/// machine's clock now.
fn expire_at_ms(expiry: Option<&Expiry>) -> i64 {
    let at = match expiry {
        None => return 0,
        Some(Expiry::At(ms)) => *ms,
        Some(Expiry::In(d)) => {
            now_ms().saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        }
    };
    i64::try_from(at).unwrap_or(i64::MAX)
}

/// One mutation as the protocol's `Mutation`.
fn encode_mutation(m: &tuplekv_engine::Mutation) -> pb::Mutation {
    let mut out = pb::Mutation {
        key: m.key.to_vec(),
        ..Default::default()
    };
    let kind = match &m.kind {
        MutationKind::Set { value, expiry } => {
            out.value = Some(tuplekv_wire::kv_value(value));
            out.expire_at_ms = expire_at_ms(expiry.as_ref());
            pb::MutationType::MSet
        }
        MutationKind::SetSuffixVersionstampedKey { value, expiry } => {
            out.value = Some(tuplekv_wire::kv_value(value));
            out.expire_at_ms = expire_at_ms(expiry.as_ref());
            pb::MutationType::MSetSuffixVersionstampedKey
        }
        MutationKind::Delete => pb::MutationType::MDelete,
        MutationKind::Sum(n) => {
            out.value = le64(*n);
            pb::MutationType::MSum
        }
        MutationKind::SumBounded(sum) => {
            out.value = Some(tuplekv_wire::kv_value(&sum.operand));
            out.sum_min = sum.min.as_ref().map(|b| b.to_vec()).unwrap_or_default();
            out.sum_max = sum.max.as_ref().map(|b| b.to_vec()).unwrap_or_default();
            out.sum_clamp = sum.clamp;
            pb::MutationType::MSum
        }
        MutationKind::Min(n) => {
            out.value = le64(*n);
            pb::MutationType::MMin
        }
        MutationKind::Max(n) => {
            out.value = le64(*n);
            pb::MutationType::MMax
        }
    };
    out.mutation_type = kind.into();
    out
}

/// An `AtomicWrite` body, with the extension field (carrying the range checks and the
/// numbering) when `extension` is on. The write was validated by the caller, which sends a
/// numbering only to a server that applies it.
pub(crate) fn encode_write(write: &AtomicWrite, extension: bool) -> Bytes {
    let checks = write
        .checks
        .iter()
        .map(|c| pb::Check {
            key: c.key.to_vec(),
            versionstamp: c
                .versionstamp
                .map(|v| v.as_bytes().to_vec())
                .unwrap_or_default(),
        })
        .collect();
    let mutations = write.mutations.iter().map(encode_mutation).collect();
    let mut bytes = pb::AtomicWrite {
        checks,
        mutations,
        enqueues: Vec::new(),
    }
    .encode_to_vec();
    if extension {
        let ext = tuplekv_wire::AtomicWriteExtension {
            tuplekv: Some(tuplekv_wire::WriteExtension {
                range_checks: write
                    .range_checks
                    .iter()
                    .map(|rc| tuplekv_wire::RangeCheck {
                        start: rc.start.to_vec(),
                        end: rc.end.to_vec(),
                        since: rc.since.as_bytes().to_vec(),
                        expires_at_ms: rc.expires_at.unwrap_or(0),
                    })
                    .collect(),
                numbering: (!write.numbering.is_empty())
                    .then(|| encode_numbering(&write.numbering)),
            }),
        };
        ext.encode_raw(&mut bytes);
    }
    Bytes::from(bytes)
}

/// A numbering as the extension's message.
fn encode_numbering(n: &Numbering) -> tuplekv_wire::Numbering {
    use tuplekv_wire::{NumberFormKind, SlotTargetKind};
    let counters = n
        .counters
        .iter()
        .map(|c| tuplekv_wire::CounterClaim {
            key: c.key.to_vec(),
            start: c.start,
            count: u64::from(c.count),
            max: c.max,
        })
        .collect();
    let slots = n
        .slots
        .iter()
        .map(|s| {
            let (target, index) = match s.target {
                SlotTarget::CheckKey(i) => (SlotTargetKind::CheckKey, i),
                SlotTarget::MutationKey(i) => (SlotTargetKind::MutationKey, i),
                SlotTarget::MutationValue(i) => (SlotTargetKind::MutationValue, i),
            };
            let (form, width, widen) = match s.form {
                NumberForm::Digits { width, widen } => (NumberFormKind::Digits, width, widen),
                NumberForm::KeyPart => (NumberFormKind::KeyPart, 0, false),
            };
            tuplekv_wire::NumberSlot {
                counter: u64::from(s.counter),
                ordinal: u64::from(s.ordinal),
                target: target.into(),
                index: u64::from(index),
                offset: u64::from(s.offset),
                form: form.into(),
                width: u64::from(width),
                widen,
            }
        })
        .collect();
    tuplekv_wire::Numbering { counters, slots }
}

fn malformed(what: impl std::fmt::Display) -> Error {
    Error::Remote {
        status: 200,
        message: format!("the server's answer is malformed: {what}"),
    }
}

/// The result of a write from the server's answer.
pub(crate) fn decode_write_output(write: &AtomicWrite, body: &[u8]) -> Result<CommitResult, Error> {
    let out = pb::AtomicWriteOutput::decode(body).map_err(malformed)?;
    match pb::AtomicWriteStatus::try_from(out.status) {
        Ok(pb::AtomicWriteStatus::AwSuccess) => {
            let versionstamp = versionstamp(&out.versionstamp)?;
            let claims = write.numbering.counters.len();
            let numbers = match claims {
                0 => Vec::new(),
                _ => tuplekv_wire::AtomicWriteOutputExtension::decode(body)
                    .map_err(malformed)?
                    .tuplekv
                    .map(|e| e.numbers)
                    .unwrap_or_default(),
            };
            if numbers.len() != claims {
                return Err(malformed(format!(
                    "a commit that claimed {claims} counters reports {} numbers",
                    numbers.len()
                )));
            }
            Ok(CommitResult::Committed {
                versionstamp,
                numbers,
            })
        }
        Ok(pb::AtomicWriteStatus::AwCheckFailure) => {
            let ext = tuplekv_wire::AtomicWriteOutputExtension::decode(body)
                .map_err(malformed)?
                .tuplekv;
            let mut failed_checks = Vec::with_capacity(out.failed_checks.len());
            for (n, &index) in out.failed_checks.iter().enumerate() {
                let index = usize::try_from(index).map_err(malformed)?;
                let check = write
                    .checks
                    .get(index)
                    .ok_or_else(|| malformed(format!("failed check {index} does not exist")))?;
                let actual = match ext.as_ref().and_then(|e| e.actual.get(n)) {
                    Some(bytes) if !bytes.is_empty() => Some(versionstamp(bytes)?),
                    _ => None,
                };
                failed_checks.push(FailedCheck {
                    index,
                    key: check.key.clone(),
                    expected: check.versionstamp,
                    actual,
                });
            }
            Ok(CommitResult::Conflict(Conflict {
                failed_checks,
                range_changed: ext.is_some_and(|e| e.range_changed),
            }))
        }
        // A definite refusal (the status says nothing was applied): reported as a 400 would be.
        _ => Err(Error::Remote {
            status: 400,
            message: format!("the server did not apply the write (status {})", out.status),
        }),
    }
}

/// A `SnapshotRead` body.
pub(crate) fn encode_read(
    ranges: Vec<pb::ReadRange>,
    extension: Option<tuplekv_wire::ReadExtension>,
) -> Bytes {
    let mut bytes = pb::SnapshotRead { ranges }.encode_to_vec();
    if let Some(ext) = extension {
        tuplekv_wire::SnapshotReadExtension { tuplekv: Some(ext) }.encode_raw(&mut bytes);
    }
    Bytes::from(bytes)
}

/// What a snapshot read returned: each range's entries, and (with the extension) the
/// versionstamp it read at.
pub(crate) struct ReadOutput {
    pub(crate) ranges: Vec<Vec<Entry>>,
    pub(crate) versionstamp: Option<Versionstamp>,
}

/// Decodes a `SnapshotReadOutput`.
pub(crate) fn decode_read_output(body: &[u8]) -> Result<ReadOutput, Error> {
    let out = pb::SnapshotReadOutput::decode(body).map_err(malformed)?;
    if out.read_disabled {
        return Err(Error::unavailable("the server has reads disabled"));
    }
    let ext = tuplekv_wire::SnapshotReadOutputExtension::decode(body)
        .map_err(malformed)?
        .tuplekv;
    let read_at = ext
        .as_ref()
        .map(|e| versionstamp(&e.versionstamp))
        .transpose()?;
    let mut deadlines = ext.map(|e| e.expires_at_ms).unwrap_or_default().into_iter();
    let ranges = out
        .ranges
        .into_iter()
        .map(|r| {
            r.values
                .into_iter()
                .map(|e| {
                    Ok(Entry {
                        key: KeyBytes::from(e.key),
                        value: tuplekv_wire::decode_value(e.encoding, e.value)
                            .map_err(malformed)?,
                        versionstamp: versionstamp(&e.versionstamp)?,
                        expires_at: deadlines.next().filter(|&ms| ms != 0),
                    })
                })
                .collect::<Result<Vec<_>, Error>>()
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(ReadOutput {
        ranges,
        versionstamp: read_at,
    })
}

#[cfg(test)]
mod tests {
    use tuplekv_engine::{Check, Mutation, RangeCheck};

    use super::*;

    #[test]
    fn a_write_with_range_checks_is_a_plain_write_plus_the_extension() {
        let write = AtomicWrite {
            checks: vec![Check {
                key: KeyBytes::from(vec![2, b'a', 0]),
                versionstamp: None,
            }],
            range_checks: vec![RangeCheck {
                start: KeyBytes::from(vec![2]),
                end: KeyBytes::from(vec![3]),
                since: Versionstamp::from_version(7),
                expires_at: Some(99),
            }],
            mutations: vec![Mutation {
                key: KeyBytes::from(vec![2, b'a', 0]),
                kind: MutationKind::Sum(5),
            }],
            numbering: Default::default(),
        };
        let body = encode_write(&write, true);
        let plain = pb::AtomicWrite::decode(&body[..]).expect("plain decode");
        assert_eq!(plain.checks.len(), 1);
        assert_eq!(
            plain.mutations[0].mutation_type,
            pb::MutationType::MSum as i32
        );
        let ext = tuplekv_wire::AtomicWriteExtension::decode(&body[..])
            .expect("extension decode")
            .tuplekv
            .expect("extension present");
        assert_eq!(ext.range_checks.len(), 1);
        assert_eq!(ext.range_checks[0].expires_at_ms, 99);
        let without = encode_write(&write, false);
        let ext = tuplekv_wire::AtomicWriteExtension::decode(&without[..]).expect("decode");
        assert!(ext.tuplekv.is_none());
    }

    fn numbered() -> AtomicWrite {
        use tuplekv_engine::numbering::{CounterClaim, NumberSlot};
        let claim = |name: &[u8]| CounterClaim {
            key: KeyBytes::from([&[2], name, &[0]].concat()),
            start: 7,
            count: 4,
            max: u64::MAX,
        };
        let slot = |counter, target, offset, form| NumberSlot {
            counter,
            ordinal: counter * 3,
            target,
            offset,
            form,
        };
        AtomicWrite {
            checks: vec![Check {
                key: KeyBytes::from(vec![2, b'u', 0]),
                versionstamp: None,
            }],
            range_checks: Vec::new(),
            mutations: vec![Mutation {
                key: KeyBytes::from(b"\x02k00\x00".to_vec()),
                kind: MutationKind::Set {
                    value: Value::Bytes(b"000".to_vec().into()),
                    expiry: None,
                },
            }],
            numbering: Numbering {
                counters: vec![claim(b"a"), claim(b"b")],
                slots: vec![
                    slot(0, SlotTarget::CheckKey(0), 3, NumberForm::KeyPart),
                    slot(
                        1,
                        SlotTarget::MutationKey(0),
                        2,
                        NumberForm::Digits {
                            width: 2,
                            widen: true,
                        },
                    ),
                    slot(
                        1,
                        SlotTarget::MutationValue(0),
                        0,
                        NumberForm::Digits {
                            width: 3,
                            widen: false,
                        },
                    ),
                ],
            },
        }
    }

    #[test]
    fn a_numbered_write_reaches_the_servers_decoder_as_it_was() {
        let write = numbered();
        let body = encode_write(&write, true);
        let (decoded, extended) =
            tuplekv_server::protocol::decode_write(&body, true).expect("the server decodes it");
        assert!(extended);
        assert_eq!(decoded, write);
        // A plain write carries no numbering field at all.
        let mut plain = write.clone();
        plain.numbering = Numbering::default();
        let ext = tuplekv_wire::AtomicWriteExtension::decode(&encode_write(&plain, true)[..])
            .expect("decode")
            .tuplekv
            .expect("the extension");
        assert!(ext.numbering.is_none());
    }

    #[test]
    fn a_numbered_commits_output_gives_its_numbers_and_one_without_them_is_malformed() {
        let write = numbered();
        let committed = pb::AtomicWriteOutput {
            status: pb::AtomicWriteStatus::AwSuccess.into(),
            versionstamp: Versionstamp::from_version(3).as_bytes().to_vec(),
            failed_checks: Vec::new(),
        };
        let with = |numbers: Vec<u64>| {
            let mut body = committed.encode_to_vec();
            tuplekv_wire::AtomicWriteOutputExtension {
                tuplekv: Some(tuplekv_wire::WriteOutcome {
                    numbers,
                    ..Default::default()
                }),
            }
            .encode_raw(&mut body);
            body
        };
        assert_eq!(
            decode_write_output(&write, &with(vec![7, 9])).expect("decodes"),
            CommitResult::Committed {
                versionstamp: Versionstamp::from_version(3),
                numbers: vec![7, 9],
            }
        );
        for bad in [with(vec![7]), committed.encode_to_vec()] {
            let e = decode_write_output(&write, &bad).expect_err("malformed");
            assert!(matches!(e, Error::Remote { status: 200, .. }), "{e:?}");
        }
        let plain = AtomicWrite {
            numbering: Numbering::default(),
            ..write
        };
        assert_eq!(
            decode_write_output(&plain, &committed.encode_to_vec()).expect("decodes"),
            CommitResult::Committed {
                versionstamp: Versionstamp::from_version(3),
                numbers: Vec::new(),
            }
        );
    }
}
