//! Numbers the store assigns at commit time: a commit names counters it takes numbers from
//! and where each number goes in its keys and values (a placeholder at an offset), and the
//! store fills them in under its commit lock, as it fills in versionstamped keys.
//!
//! A [`Numbering`] rides in [`AtomicWrite::numbering`]. At commit, for each
//! [`CounterClaim`] the store reads the counter (a `U64`: the next number to hand out; absent
//! means the claim's `start`), takes `count` numbers from it, writes the placeholders
//! ([`NumberSlot`]) and sets the counter past them, all in the commit. Commits that take
//! numbers from one counter therefore never conflict on it: the commit order numbers them.
//! A commit refused by its checks or by a limit takes no number.
//!
//! [`resolve`] is the whole transformation as a pure function of the counters' values, so
//! every backend resolves a numbering the same way; [`validate`] is what a commit checks
//! before it reads anything. Both are used by the in-memory and durable store, the etcd
//! store and the reference model; the durable log holds the resolved write, so recovery
//! replays the same numbers.

use bytes::Bytes;
use tuplekv_codec::{KeyPart, encode_part_into};

use crate::atomic::{AtomicWrite, Mutation, MutationKind};
use crate::error::Error;
use crate::key_bytes::KeyBytes;
use crate::limits::{
    COUNTERS_PER_COMMIT_MAX, KEY_SIZE_MAX_WRITE, NUMBER_SLOTS_MAX, NUMBER_WIDTH_MAX,
    NUMBERS_PER_COMMIT_MAX, TOTAL_KEY_SIZE_MAX, TOTAL_MUTATION_SIZE_MAX, VALUE_SIZE_MAX,
    VERSIONSTAMPED_KEY_SUFFIX_LEN,
};
use crate::value::Value;

/// The numbers one commit takes from counters the store keeps, and where they go.
///
/// ```
/// use tuplekv_engine::numbering::{CounterClaim, NumberForm, NumberSlot, Numbering, SlotTarget};
/// use tuplekv_engine::{Database, KeyBytes, Store, codec::encode_key, key};
///
/// let db = Database::in_memory();
/// let counter = KeyBytes::from(encode_key(&key!["next", "INV"]).as_slice());
/// // The record `["invoices", "INV00000"]`, its five zeros a placeholder.
/// let mut write = db.atomic().set(&key!["invoices", "INV00000"], b"100 EUR").as_write().clone();
/// write.numbering = Numbering {
///     counters: vec![CounterClaim { key: counter, start: 1, count: 1, max: 99_999 }],
///     slots: vec![NumberSlot {
///         counter: 0,
///         ordinal: 0,
///         target: SlotTarget::MutationKey(0),
///         offset: 14, // the key's bytes: 02 "invoices" 00 02 "INV", then the digits
///         form: NumberForm::Digits { width: 5, widen: true },
///     }],
/// };
/// let result = db.commit(write)?;
/// assert_eq!(result.numbers(), Some(&[1][..]));
/// assert!(db.get(&key!["invoices", "INV00001"])?.is_some());
/// # Ok::<(), tuplekv_engine::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Numbering {
    /// The counters, at most [`COUNTERS_PER_COMMIT_MAX`].
    pub counters: Vec<CounterClaim>,
    /// Where the numbers go, at most [`NUMBER_SLOTS_MAX`].
    pub slots: Vec<NumberSlot>,
}

impl Numbering {
    /// Whether the commit takes no number (every plain commit).
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty() && self.slots.is_empty()
    }
}

/// Numbers taken from one counter: `next, next + 1, …, next + count - 1`, where `next` is the
/// counter's value (a `U64`) or, if the key is absent, `start`. The counter is set to
/// `next + count` in the same commit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CounterClaim {
    /// The counter's encoded key. No check or mutation of the commit may name it.
    pub key: KeyBytes,
    /// The first number of a counter whose key is absent.
    pub start: u64,
    /// How many numbers the commit takes, 1 or more (at most [`NUMBERS_PER_COMMIT_MAX`] over
    /// all claims).
    pub count: u32,
    /// The largest number the counter may hand out: a commit that would take a larger one is
    /// refused with [`Error::CounterExhausted`] and takes none.
    pub max: u64,
}

/// Which bytes of the commit a [`NumberSlot`] writes into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SlotTarget {
    /// The key of check number `i` (a check of a key that holds a number, such as a
    /// uniqueness key that must be absent).
    CheckKey(u32),
    /// The key of mutation number `i`.
    MutationKey(u32),
    /// The value of mutation number `i`: a `Set` (or versionstamped set) of bytes or a V8
    /// value.
    MutationValue(u32),
}

/// How a number is written into its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NumberForm {
    /// Replaces `width` placeholder bytes, each an ASCII digit, with the number in decimal,
    /// zero-padded to `width` (1 to [`NUMBER_WIDTH_MAX`]). A number with more digits makes
    /// the bytes longer if `widen` (right for a key's string part or a raw code, which carry
    /// no length), and otherwise refuses the commit with [`Error::NumberTooWide`] (right
    /// inside a serialised value whose framing holds the length).
    Digits {
        /// The placeholder's length, and the width the number is padded to.
        width: u8,
        /// Whether a wider number may lengthen the bytes.
        widen: bool,
    },
    /// Inserts the number as an integer key part (the encoding of
    /// `KeyPart::from(number)`) at the offset, replacing nothing. Keys only.
    KeyPart,
}

impl NumberForm {
    /// How many placeholder bytes the slot replaces.
    fn replaced(self) -> usize {
        match self {
            NumberForm::Digits { width, .. } => usize::from(width),
            NumberForm::KeyPart => 0,
        }
    }

    /// The most bytes the slot can write.
    fn longest(self) -> usize {
        match self {
            NumberForm::Digits { width, widen } => {
                let width = usize::from(width);
                if widen { width.max(U64_DIGITS) } else { width }
            }
            NumberForm::KeyPart => INT_PART_LEN_MAX,
        }
    }
}

/// The digits of `u64::MAX`.
const U64_DIGITS: usize = 20;
/// The longest encoding of a `u64` as an integer key part (type byte and 8 bytes).
const INT_PART_LEN_MAX: usize = 9;

/// One number written into one place of the commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NumberSlot {
    /// The index of its counter in [`Numbering::counters`].
    pub counter: u32,
    /// Which of that counter's numbers: the claim's first number plus `ordinal` (below the
    /// claim's `count`).
    pub ordinal: u32,
    /// The bytes it goes into.
    pub target: SlotTarget,
    /// The byte offset of the placeholder in those bytes, as written in the operation
    /// (before any slot is filled).
    pub offset: u32,
    /// How the number is written.
    pub form: NumberForm,
}

fn invalid(reason: String) -> Error {
    Error::InvalidNumbering { reason }
}

/// The bytes a slot's target holds in `write`, if the target exists and can hold a number.
fn target_bytes(write: &AtomicWrite, target: SlotTarget) -> Result<&[u8], Error> {
    let index = |i: u32| usize::try_from(i).unwrap_or(usize::MAX);
    match target {
        SlotTarget::CheckKey(i) => write
            .checks
            .get(index(i))
            .map(|c| c.key.as_slice())
            .ok_or_else(|| {
                invalid(format!(
                    "a slot names check {i}, but there are {}",
                    write.checks.len()
                ))
            }),
        SlotTarget::MutationKey(i) => write
            .mutations
            .get(index(i))
            .map(|m| m.key.as_slice())
            .ok_or_else(|| {
                invalid(format!(
                    "a slot names mutation {i}, but there are {}",
                    write.mutations.len()
                ))
            }),
        SlotTarget::MutationValue(i) => {
            let m = write.mutations.get(index(i)).ok_or_else(|| {
                invalid(format!(
                    "a slot names mutation {i}, but there are {}",
                    write.mutations.len()
                ))
            })?;
            match &m.kind {
                MutationKind::Set { value, .. }
                | MutationKind::SetSuffixVersionstampedKey { value, .. } => match value {
                    Value::Bytes(b) | Value::V8(b) => Ok(b.as_ref()),
                    Value::U64(_) => Err(invalid(format!(
                        "mutation {i} sets a U64, which holds no placeholder"
                    ))),
                },
                _ => Err(invalid(format!(
                    "mutation {i} is not a set, so its value holds no placeholder"
                ))),
            }
        }
    }
}

/// Checks a numbering against its write and every limit, before anything is read: counters
/// and slots within their limits, every slot inside its target on a placeholder of digits,
/// slots of one target apart, no counter named by a check or mutation, and every key and
/// value within the engine's limits even with the widest numbers. An empty numbering passes.
///
/// # Errors
/// [`Error::InvalidNumbering`], naming the rule or limit and the numbers.
pub fn validate(write: &AtomicWrite) -> Result<(), Error> {
    let n = &write.numbering;
    if n.is_empty() {
        return Ok(());
    }
    if n.counters.len() > COUNTERS_PER_COMMIT_MAX {
        return Err(invalid(format!(
            "{} counters in one commit; at most {COUNTERS_PER_COMMIT_MAX} (COUNTERS_PER_COMMIT_MAX)",
            n.counters.len()
        )));
    }
    if n.slots.len() > NUMBER_SLOTS_MAX {
        return Err(invalid(format!(
            "{} number slots in one commit; at most {NUMBER_SLOTS_MAX} (NUMBER_SLOTS_MAX)",
            n.slots.len()
        )));
    }
    let mut numbers: u64 = 0;
    for (i, c) in n.counters.iter().enumerate() {
        crate::limits::check_write_key(&c.key)?;
        if c.count == 0 {
            return Err(invalid(format!("counter {i} takes no number (count 0)")));
        }
        numbers += u64::from(c.count);
        if c.start > c.max {
            return Err(invalid(format!(
                "counter {i} starts at {} above its max {}",
                c.start, c.max
            )));
        }
        if n.counters[..i].iter().any(|o| o.key == c.key) {
            return Err(invalid(format!(
                "counter {i} is claimed twice in one commit"
            )));
        }
        if write.checks.iter().any(|k| k.key == c.key)
            || write.mutations.iter().any(|m| m.key == c.key)
        {
            return Err(invalid(format!(
                "counter {i}'s key is also checked or written by the commit; the store writes it"
            )));
        }
    }
    if numbers > NUMBERS_PER_COMMIT_MAX as u64 {
        return Err(invalid(format!(
            "{numbers} numbers in one commit; at most {NUMBERS_PER_COMMIT_MAX} (NUMBERS_PER_COMMIT_MAX)"
        )));
    }
    // Slots sorted by target and offset, to find overlaps and each target's growth.
    let mut order: Vec<&NumberSlot> = n.slots.iter().collect();
    order.sort_by_key(|s| (s.target, s.offset));
    let mut growth: Vec<(SlotTarget, usize)> = Vec::new();
    for (k, s) in order.iter().enumerate() {
        let claim = n.counters.get(s.counter as usize).ok_or_else(|| {
            invalid(format!(
                "a slot names counter {}, but the commit claims {}",
                s.counter,
                n.counters.len()
            ))
        })?;
        if s.ordinal >= claim.count {
            return Err(invalid(format!(
                "a slot takes number {} of counter {}, which takes {}",
                s.ordinal, s.counter, claim.count
            )));
        }
        let bytes = target_bytes(write, s.target)?;
        let offset = s.offset as usize;
        if let NumberForm::Digits { width, .. } = s.form
            && !(1..=NUMBER_WIDTH_MAX).contains(&usize::from(width))
        {
            return Err(invalid(format!(
                "a placeholder of width {width}; widths are 1 to {NUMBER_WIDTH_MAX} (NUMBER_WIDTH_MAX)"
            )));
        }
        if matches!(s.form, NumberForm::KeyPart) && matches!(s.target, SlotTarget::MutationValue(_))
        {
            return Err(invalid(
                "a key part slot in a value; key parts go in keys".to_owned(),
            ));
        }
        let end = offset + s.form.replaced();
        let Some(placeholder) = bytes.get(offset..end) else {
            return Err(invalid(format!(
                "a placeholder at bytes {offset}..{end} of {:?}, which has {} bytes",
                s.target,
                bytes.len()
            )));
        };
        if !placeholder.iter().all(u8::is_ascii_digit) {
            return Err(invalid(format!(
                "the placeholder at bytes {offset}..{end} of {:?} is not all ASCII digits",
                s.target
            )));
        }
        if let Some(prev) = k.checked_sub(1).and_then(|p| order.get(p))
            && prev.target == s.target
            && (prev.offset == s.offset || (prev.offset as usize) + prev.form.replaced() > offset)
        {
            return Err(invalid(format!(
                "two slots overlap at byte {offset} of {:?}",
                s.target
            )));
        }
        let grows = s.form.longest() - s.form.replaced();
        match growth.last_mut() {
            Some((t, g)) if *t == s.target => *g += grows,
            _ => growth.push((s.target, grows)),
        }
    }
    // The widest numbers must still fit every limit the plain write was checked against.
    let mut total_growth = 0;
    let mut key_growth = 0;
    for (target, grows) in growth {
        let bytes = target_bytes(write, target)?;
        let longest = bytes.len() + grows;
        match target {
            SlotTarget::CheckKey(_) => {
                if longest > KEY_SIZE_MAX_WRITE {
                    return Err(Error::KeyTooLargeForWrite { size: longest });
                }
                total_growth += grows;
            }
            SlotTarget::MutationKey(i) => {
                let m = &write.mutations[i as usize];
                let suffix = if matches!(m.kind, MutationKind::SetSuffixVersionstampedKey { .. }) {
                    VERSIONSTAMPED_KEY_SUFFIX_LEN
                } else {
                    0
                };
                if longest + suffix > KEY_SIZE_MAX_WRITE {
                    return Err(Error::KeyTooLargeForWrite {
                        size: longest + suffix,
                    });
                }
                // A key with a value counts twice in the total, as in `validate`.
                let twice = if m.kind.value_size().is_some() { 2 } else { 1 };
                total_growth += grows * twice;
                if m.kind.value_size().is_some() {
                    key_growth += grows;
                }
            }
            SlotTarget::MutationValue(_) => {
                if longest > VALUE_SIZE_MAX {
                    return Err(Error::ValueTooLarge { size: longest });
                }
                total_growth += grows;
            }
        }
    }
    if total_growth > 0 || key_growth > 0 {
        let (mut total, mut total_keys) = (0, 0);
        for c in &write.checks {
            total += c.key.len();
        }
        for m in &write.mutations {
            total += m.key.len();
            if let Some(size) = m.kind.value_size() {
                total += m.key.len() + size;
                total_keys += m.key.len();
            }
        }
        if total + total_growth > TOTAL_MUTATION_SIZE_MAX {
            return Err(Error::TotalMutationSizeTooLarge {
                size: total + total_growth,
            });
        }
        if total_keys + key_growth > TOTAL_KEY_SIZE_MAX {
            return Err(Error::TotalKeySizeTooLarge {
                size: total_keys + key_growth,
            });
        }
    }
    Ok(())
}

/// The first number of each counter claim, given the counters' current values, in claim
/// order: a `U64` value is the next number, an absent one the claim's `start`.
///
/// # Errors
/// [`Error::CounterNotU64`] for a counter holding anything else; [`Error::CounterExhausted`]
/// for a claim that would pass its `max`.
pub fn first_numbers(numbering: &Numbering, current: &[Option<&Value>]) -> Result<Vec<u64>, Error> {
    numbering
        .counters
        .iter()
        .zip(current.iter().chain(std::iter::repeat(&None)))
        .map(|(claim, value)| {
            let next = match value {
                None => claim.start,
                Some(Value::U64(n)) => *n,
                Some(_) => {
                    return Err(Error::CounterNotU64 {
                        key: claim.key.clone(),
                    });
                }
            };
            let last = next.checked_add(u64::from(claim.count) - 1);
            match last {
                Some(last) if last <= claim.max => Ok(next),
                _ => Err(Error::CounterExhausted {
                    key: claim.key.clone(),
                    next,
                    count: claim.count,
                    max: claim.max,
                }),
            }
        })
        .collect()
}

/// Resolves `write`'s numbering with the counters' current values (in claim order): every
/// placeholder filled, the counters' new values appended as sets, and the numbering emptied.
/// Returns the first number of each claim. A write without numbering is returned as it is.
///
/// The checks keep their positions, so a conflict's check indexes mean the same in the
/// resolved write. `write` must have passed [`validate`].
///
/// # Errors
/// As [`first_numbers`], and [`Error::NumberTooWide`] for a number wider than a
/// placeholder that may not widen. Nothing is returned then: the commit takes no number.
pub fn resolve(
    mut write: AtomicWrite,
    current: &[Option<&Value>],
) -> Result<(AtomicWrite, Vec<u64>), Error> {
    if write.numbering.is_empty() {
        return Ok((write, Vec::new()));
    }
    let numbering = std::mem::take(&mut write.numbering);
    let firsts = first_numbers(&numbering, current)?;
    // Fill each target from its last slot back, so earlier offsets stay where they were.
    let mut order: Vec<&NumberSlot> = numbering.slots.iter().collect();
    order.sort_by_key(|s| (s.target, std::cmp::Reverse(s.offset)));
    let mut start = 0;
    while start < order.len() {
        let target = order[start].target;
        let end = start
            + order[start..]
                .iter()
                .take_while(|s| s.target == target)
                .count();
        let mut bytes = target_bytes(&write, target)?.to_vec();
        for s in &order[start..end] {
            let number = firsts[s.counter as usize] + u64::from(s.ordinal);
            let rendered = render(number, s.form)?;
            let at = s.offset as usize;
            bytes.splice(at..at + s.form.replaced(), rendered);
        }
        put_target(&mut write, target, bytes);
        start = end;
    }
    for (claim, first) in numbering.counters.iter().zip(&firsts) {
        write.mutations.push(Mutation {
            key: claim.key.clone(),
            kind: MutationKind::Set {
                value: Value::U64(first + u64::from(claim.count)),
                expiry: None,
            },
        });
    }
    Ok((write, firsts))
}

/// The bytes `form` writes for `number`.
fn render(number: u64, form: NumberForm) -> Result<Vec<u8>, Error> {
    match form {
        NumberForm::Digits { width, widen } => {
            let digits = format!("{number:0width$}", width = usize::from(width));
            if digits.len() > usize::from(width) && !widen {
                return Err(Error::NumberTooWide { number, width });
            }
            Ok(digits.into_bytes())
        }
        NumberForm::KeyPart => {
            let mut out = Vec::with_capacity(INT_PART_LEN_MAX);
            encode_part_into(&KeyPart::from(number), &mut out)
                .map_err(|e| invalid(format!("the number {number} as a key part: {e}")))?;
            Ok(out)
        }
    }
}

fn put_target(write: &mut AtomicWrite, target: SlotTarget, bytes: Vec<u8>) {
    match target {
        SlotTarget::CheckKey(i) => write.checks[i as usize].key = KeyBytes::from(bytes.as_slice()),
        SlotTarget::MutationKey(i) => {
            write.mutations[i as usize].key = KeyBytes::from(bytes.as_slice());
        }
        SlotTarget::MutationValue(i) => {
            if let MutationKind::Set { value, .. }
            | MutationKind::SetSuffixVersionstampedKey { value, .. } =
                &mut write.mutations[i as usize].kind
            {
                *value = match value {
                    Value::V8(_) => Value::V8(Bytes::from(bytes)),
                    _ => Value::Bytes(Bytes::from(bytes)),
                };
            }
        }
    }
}

/// Whether mutation `i`'s key holds a placeholder (its slot is found only once resolved).
pub(crate) fn numbered_key(numbering: &Numbering, target: SlotTarget) -> bool {
    numbering.slots.iter().any(|s| s.target == target)
}
