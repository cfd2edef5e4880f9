//! Finding where a record holds its code, so the store can write the number in at commit.
//!
//! A coded record closure (`GaplessSequence::next_coded`) is called twice with two
//! placeholder codes of the same length, one with every digit `0`, one with every digit `9`.
//! The two writes must have the same shape; the bytes where they differ are exactly where the
//! closure put the code's digits. Every such run must be the whole digit run (`0…0` against
//! `9…9`): then the code went in verbatim (in a key's string part, a raw value, a serialised
//! string), and the store can fill it. Anything else (the number parsed back and stored as an
//! integer, a hash of the code, a branch on it) is not a placeholder the store can fill, and
//! the request is numbered by the checked path instead, where the closure sees its real code.

use tuplekv_engine::numbering::SlotTarget;
use tuplekv_engine::{AtomicWrite, MutationKind, Value};

/// One place of a record's write where the code's digits sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hole {
    /// The bytes (indexes within the record's own write).
    pub(crate) target: SlotTarget,
    /// Where the digits start.
    pub(crate) offset: u32,
}

/// The starts of the digit runs where `zeros` and `nines` differ, if every difference is one
/// whole run of `digits` bytes, `0`s in `zeros` and `9`s in `nines`.
fn runs(zeros: &[u8], nines: &[u8], digits: usize) -> Option<Vec<u32>> {
    if zeros.len() != nines.len() {
        return None;
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < zeros.len() {
        if zeros[i] == nines[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i < zeros.len() && zeros[i] != nines[i] {
            i += 1;
        }
        let whole = i - start == digits
            && zeros[start..i].iter().all(|b| *b == b'0')
            && nines[start..i].iter().all(|b| *b == b'9');
        if !whole {
            return None;
        }
        out.push(u32::try_from(start).ok()?);
    }
    Some(out)
}

/// The bytes of a value that can hold digits, and whether it is V8.
fn value_bytes(kind: &MutationKind) -> Option<(&[u8], bool)> {
    match kind {
        MutationKind::Set { value, .. }
        | MutationKind::SetSuffixVersionstampedKey { value, .. } => match value {
            Value::Bytes(b) => Some((b.as_ref(), false)),
            Value::V8(b) => Some((b.as_ref(), true)),
            Value::U64(_) => None,
        },
        _ => None,
    }
}

/// Whether two mutation kinds are the same apart from their values' bytes.
fn same_kind(a: &MutationKind, b: &MutationKind) -> bool {
    match (a, b) {
        (MutationKind::Set { expiry: ea, .. }, MutationKind::Set { expiry: eb, .. })
        | (
            MutationKind::SetSuffixVersionstampedKey { expiry: ea, .. },
            MutationKind::SetSuffixVersionstampedKey { expiry: eb, .. },
        ) => ea == eb,
        _ => false,
    }
}

/// Where the code's digits sit in a record, from its writes for the all-`0` and all-`9`
/// placeholder codes of `digits` digits; `None` if the record does not hold the code verbatim
/// (see the module docs).
pub(crate) fn holes(zeros: &AtomicWrite, nines: &AtomicWrite, digits: usize) -> Option<Vec<Hole>> {
    if zeros.checks.len() != nines.checks.len()
        || zeros.mutations.len() != nines.mutations.len()
        || zeros.range_checks != nines.range_checks
        || !zeros.numbering.is_empty()
        || !nines.numbering.is_empty()
    {
        return None;
    }
    let mut out = Vec::new();
    let mut add = |target: SlotTarget, offsets: Vec<u32>| {
        out.extend(offsets.into_iter().map(|offset| Hole { target, offset }));
    };
    for (i, (a, b)) in zeros.checks.iter().zip(&nines.checks).enumerate() {
        if a.versionstamp != b.versionstamp {
            return None;
        }
        let i = u32::try_from(i).ok()?;
        add(SlotTarget::CheckKey(i), runs(&a.key, &b.key, digits)?);
    }
    for (i, (a, b)) in zeros.mutations.iter().zip(&nines.mutations).enumerate() {
        let i = u32::try_from(i).ok()?;
        add(SlotTarget::MutationKey(i), runs(&a.key, &b.key, digits)?);
        if a.kind == b.kind {
            continue;
        }
        let (Some((va, v8a)), Some((vb, v8b))) = (value_bytes(&a.kind), value_bytes(&b.kind))
        else {
            return None;
        };
        if v8a != v8b || !same_kind(&a.kind, &b.kind) {
            return None;
        }
        add(SlotTarget::MutationValue(i), runs(va, vb, digits)?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tuplekv_engine::{Database, key};

    fn write(code: &str, db: &Database) -> AtomicWrite {
        db.atomic()
            .check(&key!["invoices", code], None)
            .set(
                &key!["invoices", code],
                format!("{{\"code\":\"{code}\"}}").into_bytes(),
            )
            .set(&key!["totals"], b"100")
            .as_write()
            .clone()
    }

    #[test]
    fn a_verbatim_code_is_found_in_every_key_and_value_and_only_there() {
        let db = Database::in_memory();
        let h = holes(&write("INV000", &db), &write("INV999", &db), 3).unwrap();
        let targets: Vec<_> = h.iter().map(|h| h.target).collect();
        assert_eq!(
            targets,
            vec![
                SlotTarget::CheckKey(0),
                SlotTarget::MutationKey(0),
                SlotTarget::MutationValue(0)
            ]
        );
        assert_eq!(h[2].offset, 12, "after {{\"code\":\"INV");
    }

    #[test]
    fn a_number_stored_in_another_form_is_not_a_hole() {
        let db = Database::in_memory();
        let as_u64 = |n: u64| {
            db.atomic()
                .set(&key!["n"], n.to_be_bytes().to_vec())
                .as_write()
                .clone()
        };
        assert_eq!(holes(&as_u64(0), &as_u64(999), 3), None);
        let lengths = |s: &str| db.atomic().set(&key!["n"], s.as_bytes()).as_write().clone();
        assert_eq!(holes(&lengths("0"), &lengths("999"), 3), None);
        // Half a run: the code's digits transformed.
        assert_eq!(holes(&lengths("x00"), &lengths("x99"), 3), None);
    }

    #[test]
    fn a_record_that_ignores_the_code_has_no_holes() {
        let db = Database::in_memory();
        let w = db.atomic().set(&key!["k"], b"v").as_write().clone();
        assert_eq!(holes(&w, &w, 5), Some(Vec::new()));
    }

    #[test]
    fn records_of_different_shapes_are_not_templates() {
        let db = Database::in_memory();
        let one = db.atomic().set(&key!["k"], b"v").as_write().clone();
        let two = db
            .atomic()
            .set(&key!["k"], b"v")
            .set(&key!["l"], b"v")
            .as_write()
            .clone();
        assert_eq!(holes(&one, &two, 3), None);
        let sum = db.atomic().sum(&key!["k"], 1).as_write().clone();
        let sum2 = db.atomic().sum(&key!["k"], 2).as_write().clone();
        assert_eq!(holes(&sum, &sum2, 3), None);
    }
}
