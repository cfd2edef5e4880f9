//! Numbers the store assigns at commit time (`AtomicWrite::numbering`): placeholders in keys
//! and values filled from counters under the commit lock, every rule and limit refused
//! before anything is written, and the same numbers after a reopen.
#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use tuplekv_engine::limits::{
    COUNTERS_PER_COMMIT_MAX, KEY_SIZE_MAX_WRITE, NUMBER_SLOTS_MAX, NUMBER_WIDTH_MAX,
    NUMBERS_PER_COMMIT_MAX,
};
use tuplekv_engine::numbering::{CounterClaim, NumberForm, NumberSlot, Numbering, SlotTarget};
use tuplekv_engine::{
    AtomicWrite, CommitResult, Database, Durability, Error, Key, KeyBytes, KeyPart, Options, Store,
    Value, codec::encode_key, key,
};
use tuplekv_testkit::db::options;

fn counter(name: &str) -> KeyBytes {
    KeyBytes::from(encode_key(&key!["next", name]).as_slice())
}

fn claim(name: &str, count: u32) -> CounterClaim {
    CounterClaim {
        key: counter(name),
        start: 1,
        count,
        max: u64::MAX >> 12,
    }
}

/// Where `needle` starts in `hay`.
fn at(hay: &[u8], needle: &[u8]) -> u32 {
    let i = hay
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("placeholder present");
    u32::try_from(i).unwrap()
}

fn digits(width: u8, widen: bool) -> NumberForm {
    NumberForm::Digits { width, widen }
}

/// One record `[invoices, INV<number>]` = `{"code":"INV<number>"}` with the uniqueness key
/// `[used, <number>]` checked absent and set: the shape a gapless code takes.
fn invoice(db: &Database, counter_name: &str, width: u8) -> AtomicWrite {
    let zeros = "0".repeat(usize::from(width));
    let code = format!("INV{zeros}");
    let record = key!["invoices", code.as_str()];
    let value = format!("{{\"code\":\"{code}\"}}");
    let mut write = db
        .atomic()
        .check(&key!["used"], None)
        .set(&record, value.as_bytes())
        .set(&key!["used"], b"taken")
        .as_write()
        .clone();
    let record_bytes = encode_key(&record);
    let used_len = u32::try_from(encode_key(&key!["used"]).len()).unwrap();
    write.numbering = Numbering {
        counters: vec![claim(counter_name, 1)],
        slots: vec![
            NumberSlot {
                counter: 0,
                ordinal: 0,
                target: SlotTarget::MutationKey(0),
                offset: at(&record_bytes, zeros.as_bytes()),
                form: digits(width, true),
            },
            NumberSlot {
                counter: 0,
                ordinal: 0,
                target: SlotTarget::MutationValue(0),
                offset: at(value.as_bytes(), zeros.as_bytes()),
                form: digits(width, false),
            },
            NumberSlot {
                counter: 0,
                ordinal: 0,
                target: SlotTarget::CheckKey(0),
                offset: used_len,
                form: NumberForm::KeyPart,
            },
            NumberSlot {
                counter: 0,
                ordinal: 0,
                target: SlotTarget::MutationKey(1),
                offset: used_len,
                form: NumberForm::KeyPart,
            },
        ],
    };
    write
}

fn used(n: u64) -> Key {
    key!["used", n]
}

fn numbers(result: &CommitResult) -> Vec<u64> {
    result.numbers().expect("committed").to_vec()
}

#[test]
fn a_numbered_commit_fills_its_key_value_and_check_key_and_moves_the_counter() {
    let db = Database::in_memory();
    let r = db.commit(invoice(&db, "INV", 5)).unwrap();
    assert_eq!(numbers(&r), vec![1]);
    let entry = db.get(&key!["invoices", "INV00001"]).unwrap().unwrap();
    assert_eq!(entry.value, Value::from(&b"{\"code\":\"INV00001\"}"[..]));
    assert!(db.get(&used(1)).unwrap().is_some());
    let c = db.get(&key!["next", "INV"]).unwrap().unwrap();
    assert_eq!(c.value, Value::U64(2), "the counter holds the next number");
    assert_eq!(c.versionstamp, r.versionstamp().unwrap());
    let r = db.commit(invoice(&db, "INV", 5)).unwrap();
    assert_eq!(numbers(&r), vec![2]);
    assert!(db.get(&key!["invoices", "INV00002"]).unwrap().is_some());
    assert_eq!(
        db.get(&key!["invoices", "INV00000"]).unwrap(),
        None,
        "no placeholder key is ever written"
    );
}

#[test]
fn an_absent_counter_starts_at_the_claims_start() {
    let db = Database::in_memory();
    let mut w = invoice(&db, "S", 3);
    w.numbering.counters[0].start = 700;
    let r = db.commit(w).unwrap();
    assert_eq!(numbers(&r), vec![700]);
    assert!(db.get(&key!["invoices", "INV700"]).unwrap().is_some());
}

#[test]
fn several_numbers_of_one_claim_and_two_counters_in_one_commit() {
    let db = Database::in_memory();
    let mut write = db
        .atomic()
        .set(&key!["a", "000"], b"x")
        .set(&key!["b", "000"], b"y")
        .set(&key!["c", "00"], b"z")
        .as_write()
        .clone();
    let off = |k: &Key, z: &str| at(&encode_key(k), z.as_bytes());
    write.numbering = Numbering {
        counters: vec![claim("A", 2), claim("B", 1)],
        slots: vec![
            NumberSlot {
                counter: 0,
                ordinal: 0,
                target: SlotTarget::MutationKey(0),
                offset: off(&key!["a", "000"], "000"),
                form: digits(3, true),
            },
            NumberSlot {
                counter: 0,
                ordinal: 1,
                target: SlotTarget::MutationKey(1),
                offset: off(&key!["b", "000"], "000"),
                form: digits(3, true),
            },
            NumberSlot {
                counter: 1,
                ordinal: 0,
                target: SlotTarget::MutationKey(2),
                offset: off(&key!["c", "00"], "00"),
                form: digits(2, true),
            },
        ],
    };
    let r = db.commit(write).unwrap();
    assert_eq!(numbers(&r), vec![1, 1]);
    assert!(db.get(&key!["a", "001"]).unwrap().is_some());
    assert!(db.get(&key!["b", "002"]).unwrap().is_some());
    assert!(db.get(&key!["c", "01"]).unwrap().is_some());
    assert_eq!(
        db.get(&key!["next", "A"]).unwrap().unwrap().value,
        Value::U64(3)
    );
    assert_eq!(
        db.get(&key!["next", "B"]).unwrap().unwrap().value,
        Value::U64(2)
    );
}

#[test]
fn a_key_placeholder_widens_past_its_width_and_a_value_one_refuses() {
    let db = Database::in_memory();
    db.set(&key!["next", "W"], 1000u64).unwrap();
    // The record's value holds the code too (not widening): refused, nothing taken.
    let refused = db.commit(invoice(&db, "W", 3)).unwrap_err();
    assert!(
        matches!(
            refused,
            Error::NumberTooWide {
                number: 1000,
                width: 3
            }
        ),
        "{refused:?}"
    );
    assert_eq!(
        db.get(&key!["next", "W"]).unwrap().unwrap().value,
        Value::U64(1000)
    );
    // Keys only: the key part grows.
    let mut w = invoice(&db, "W", 3);
    w.numbering
        .slots
        .retain(|s| !matches!(s.target, SlotTarget::MutationValue(_)));
    let r = db.commit(w).unwrap();
    assert_eq!(numbers(&r), vec![1000]);
    assert!(db.get(&key!["invoices", "INV1000"]).unwrap().is_some());
}

#[test]
fn a_failed_check_takes_no_number() {
    let db = Database::in_memory();
    db.set(&used(1), b"restored from a stale backup").unwrap();
    let r = db.commit(invoice(&db, "INV", 5)).unwrap();
    let conflict = r.conflict().expect("the uniqueness check fails");
    assert_eq!(conflict.failed_checks.len(), 1);
    assert_eq!(conflict.failed_checks[0].index, 0);
    assert_eq!(
        conflict.failed_checks[0].key.as_slice(),
        encode_key(&used(1)).as_slice(),
        "the failed check names the resolved key"
    );
    assert_eq!(db.get(&key!["next", "INV"]).unwrap(), None);
    assert_eq!(db.get(&key!["invoices", "INV00001"]).unwrap(), None);
}

#[test]
fn concurrent_numbered_commits_never_conflict_and_take_contiguous_numbers() {
    let db = Database::in_memory();
    let threads = 8;
    let each = 200;
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..each {
                    let r = db.commit(invoice(&db, "INV", 5)).unwrap();
                    assert!(r.is_committed(), "never refused: {r:?}");
                }
            });
        }
    });
    let total = threads * each;
    for n in 1..=total {
        assert!(db.get(&used(n)).unwrap().is_some(), "number {n}");
        let code = format!("INV{n:05}");
        let e = db.get(&key!["invoices", code.as_str()]).unwrap().unwrap();
        assert_eq!(
            e.value,
            Value::from(format!("{{\"code\":\"{code}\"}}").into_bytes())
        );
    }
    assert_eq!(db.get(&used(total + 1)).unwrap(), None);
    assert_eq!(
        db.get(&key!["next", "INV"]).unwrap().unwrap().value,
        Value::U64(total + 1)
    );
}

#[test]
fn a_counter_at_its_max_commits_and_past_it_refuses_without_writing() {
    let db = Database::in_memory();
    let mut w = invoice(&db, "M", 5);
    w.numbering.counters[0].max = 2;
    w.numbering.counters[0].count = 2;
    w.numbering.slots.retain(|s| s.ordinal == 0);
    assert_eq!(
        numbers(&db.commit(w.clone()).unwrap()),
        vec![1],
        "1 and 2: at the max"
    );
    let err = db.commit(w).unwrap_err();
    assert!(
        matches!(
            err,
            Error::CounterExhausted {
                next: 3,
                count: 2,
                max: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        db.get(&key!["next", "M"]).unwrap().unwrap().value,
        Value::U64(3)
    );
    assert_eq!(db.get(&used(3)).unwrap(), None);
}

#[test]
fn a_counter_that_is_not_a_u64_refuses_the_commit() {
    let db = Database::in_memory();
    db.set(&key!["next", "INV"], b"seven").unwrap();
    let err = db.commit(invoice(&db, "INV", 5)).unwrap_err();
    assert!(matches!(err, Error::CounterNotU64 { .. }), "{err:?}");
    assert_eq!(db.get(&used(1)).unwrap(), None);
}

/// The reason of an `InvalidNumbering`, after checking nothing was written.
fn refused(db: &Database, write: AtomicWrite) -> String {
    let before = db.snapshot_versionstamp_now();
    match db.commit(write) {
        Err(Error::InvalidNumbering { reason }) => {
            assert_eq!(db.snapshot_versionstamp_now(), before, "nothing written");
            reason
        }
        other => panic!("expected InvalidNumbering, got {other:?}"),
    }
}

trait Now {
    fn snapshot_versionstamp_now(&self) -> tuplekv_engine::Versionstamp;
}
impl Now for Database {
    fn snapshot_versionstamp_now(&self) -> tuplekv_engine::Versionstamp {
        Database::snapshot_versionstamp(&self.snapshot())
    }
}

#[test]
fn bad_slots_are_refused_with_a_reason_and_write_nothing() {
    let db = Database::in_memory();
    let base = invoice(&db, "INV", 5);
    let edit = |f: &dyn Fn(&mut AtomicWrite)| {
        let mut w = base.clone();
        f(&mut w);
        refused(&db, w)
    };
    let r = edit(&|w| w.numbering.slots[0].offset = 10_000);
    assert!(r.contains("placeholder at bytes"), "{r}");
    let r = edit(&|w| w.numbering.slots[0].offset -= 1);
    assert!(r.contains("not all ASCII digits"), "{r}");
    let r = edit(&|w| w.numbering.slots[0].counter = 3);
    assert!(r.contains("names counter 3"), "{r}");
    let r = edit(&|w| w.numbering.slots[0].ordinal = 1);
    assert!(r.contains("takes number 1 of counter 0"), "{r}");
    let r = edit(&|w| w.numbering.slots[0].target = SlotTarget::MutationKey(9));
    assert!(r.contains("names mutation 9"), "{r}");
    let r = edit(&|w| w.numbering.slots[0].target = SlotTarget::CheckKey(9));
    assert!(r.contains("names check 9"), "{r}");
    let r = edit(&|w| w.numbering.slots[1].form = NumberForm::KeyPart);
    assert!(r.contains("key part slot in a value"), "{r}");
    let r = edit(&|w| {
        let again = w.numbering.slots[0];
        w.numbering.slots.push(again);
    });
    assert!(r.contains("overlap"), "{r}");
    let r = edit(&|w| {
        let mut shifted = w.numbering.slots[0];
        shifted.offset += 2;
        shifted.form = digits(2, true);
        w.numbering.slots.push(shifted);
    });
    assert!(r.contains("overlap"), "{r}");
    let r = edit(&|w| w.numbering.counters[0].count = 0);
    assert!(r.contains("count 0"), "{r}");
    let r = edit(&|w| {
        w.numbering.counters[0].start = 10;
        w.numbering.counters[0].max = 9;
    });
    assert!(r.contains("above its max"), "{r}");
    let r = edit(&|w| {
        let again = w.numbering.counters[0].clone();
        w.numbering.counters.push(again);
    });
    assert!(r.contains("claimed twice"), "{r}");
    let r = edit(&|w| w.mutations[1].key = counter("INV"));
    assert!(r.contains("also checked or written"), "{r}");
    // A U64 value and a delete hold no placeholder.
    let mut w = db
        .atomic()
        .set(&key!["a"], 5u64)
        .delete(&key!["b"])
        .as_write()
        .clone();
    w.numbering = Numbering {
        counters: vec![claim("X", 1)],
        slots: vec![NumberSlot {
            counter: 0,
            ordinal: 0,
            target: SlotTarget::MutationValue(0),
            offset: 0,
            form: digits(1, false),
        }],
    };
    assert!(refused(&db, w.clone()).contains("sets a U64"));
    w.numbering.slots[0].target = SlotTarget::MutationValue(1);
    assert!(refused(&db, w).contains("is not a set"));
}

#[test]
fn the_width_limit_holds_at_and_past_number_width_max() {
    let db = Database::in_memory();
    let width = u8::try_from(NUMBER_WIDTH_MAX).unwrap();
    let r = db.commit(invoice(&db, "W", width)).unwrap();
    assert_eq!(numbers(&r), vec![1]);
    let code = format!("INV{:0w$}", 1, w = NUMBER_WIDTH_MAX);
    assert!(db.get(&key!["invoices", code.as_str()]).unwrap().is_some());
    let r = refused(&db, invoice(&db, "W2", width + 1));
    assert!(r.contains("NUMBER_WIDTH_MAX"), "{r}");
}

/// A commit of `n` sets each with one placeholder digit, taking `numbers` numbers from
/// `counters` counters (slots spread over them).
fn many(db: &Database, sets: usize, counters: usize, per_counter: u32) -> AtomicWrite {
    let mut atomic = db.atomic();
    for i in 0..sets {
        atomic = atomic.set(&key!["m", i as u64, "0"], b"v");
    }
    let mut w = atomic.as_write().clone();
    let counters: Vec<CounterClaim> = (0..counters)
        .map(|c| claim(&format!("C{c}"), per_counter))
        .collect();
    let slots = (0..sets)
        .map(|i| {
            let k = encode_key(&key!["m", i as u64, "0"]);
            NumberSlot {
                counter: u32::try_from(i % counters.len()).unwrap(),
                ordinal: 0,
                target: SlotTarget::MutationKey(u32::try_from(i).unwrap()),
                offset: u32::try_from(k.len() - 2).unwrap(),
                form: digits(1, true),
            }
        })
        .collect();
    w.numbering = Numbering { counters, slots };
    w
}

#[test]
fn the_counter_limit_holds_at_and_past_counters_per_commit_max() {
    let db = Database::in_memory();
    let n = COUNTERS_PER_COMMIT_MAX;
    let r = db.commit(many(&db, n, n, 1)).unwrap();
    assert_eq!(numbers(&r), vec![1; n]);
    let r = refused(&db, many(&db, n + 1, n + 1, 1));
    assert!(r.contains("COUNTERS_PER_COMMIT_MAX"), "{r}");
}

#[test]
fn the_number_limit_holds_at_and_past_numbers_per_commit_max() {
    let db = Database::in_memory();
    let per = u32::try_from(NUMBERS_PER_COMMIT_MAX / 2).unwrap();
    let r = db.commit(many(&db, 2, 2, per)).unwrap();
    assert_eq!(numbers(&r), vec![1, 1]);
    assert_eq!(
        db.get(&key!["next", "C0"]).unwrap().unwrap().value,
        Value::U64(u64::from(per) + 1)
    );
    let r = refused(&db, many(&db, 2, 2, per + 1));
    assert!(r.contains("NUMBERS_PER_COMMIT_MAX"), "{r}");
}

#[test]
fn the_slot_limit_holds_at_and_past_number_slots_max() {
    let db = Database::in_memory();
    // One value of NUMBER_SLOTS_MAX one-digit placeholders.
    let value = vec![b'0'; NUMBER_SLOTS_MAX + 1];
    let build = |slots: usize| {
        let mut w = db
            .atomic()
            .set(&key!["v"], value.clone())
            .as_write()
            .clone();
        w.numbering = Numbering {
            counters: vec![claim("S", 1)],
            slots: (0..slots)
                .map(|i| NumberSlot {
                    counter: 0,
                    ordinal: 0,
                    target: SlotTarget::MutationValue(0),
                    offset: u32::try_from(i).unwrap(),
                    form: digits(1, false),
                })
                .collect(),
        };
        w
    };
    assert!(db.commit(build(NUMBER_SLOTS_MAX)).unwrap().is_committed());
    let v = db.get(&key!["v"]).unwrap().unwrap().value;
    let bytes = v.as_bytes().unwrap();
    assert!(bytes[..NUMBER_SLOTS_MAX].iter().all(|b| *b == b'1'));
    assert_eq!(
        bytes[NUMBER_SLOTS_MAX], b'0',
        "the byte without a slot is kept"
    );
    let r = refused(&db, build(NUMBER_SLOTS_MAX + 1));
    assert!(r.contains("NUMBER_SLOTS_MAX"), "{r}");
}

#[test]
fn a_key_that_could_widen_past_the_write_limit_is_refused_before_any_number_is_taken() {
    let db = Database::in_memory();
    // A key whose widest number (20 digits) lands exactly at the limit is fine; one byte
    // longer is refused, although its placeholder fits today.
    let key_at = |len: usize| {
        let head = "x".repeat(len);
        let k = key![head.as_str(), "0"];
        (k.clone(), encode_key(&k))
    };
    let fixed = encode_key(&key!["", "0"]).len(); // 02 00 02 '0' 00
    let longest_head = KEY_SIZE_MAX_WRITE - (fixed - 1 + 20);
    for (len, ok) in [(longest_head, true), (longest_head + 1, false)] {
        let (k, bytes) = key_at(len);
        let mut w = db.atomic().set(&k, b"v").as_write().clone();
        w.numbering = Numbering {
            counters: vec![claim("K", 1)],
            slots: vec![NumberSlot {
                counter: 0,
                ordinal: 0,
                target: SlotTarget::MutationKey(0),
                offset: u32::try_from(bytes.len() - 2).unwrap(),
                form: digits(1, true),
            }],
        };
        let r = db.commit(w);
        if ok {
            assert!(r.unwrap().is_committed());
        } else {
            assert!(
                matches!(r, Err(Error::KeyTooLargeForWrite { size }) if size == KEY_SIZE_MAX_WRITE + 1),
                "{r:?}"
            );
        }
    }
    assert_eq!(
        db.get(&key!["next", "K"]).unwrap().unwrap().value,
        Value::U64(2),
        "only the commit within the limit took a number"
    );
}

#[test]
fn a_numbered_key_can_also_be_versionstamped() {
    let db = Database::in_memory();
    let mut w = db
        .atomic()
        .set_versionstamped(&key!["log", "000"], b"entry")
        .as_write()
        .clone();
    let k = encode_key(&key!["log", "000"]);
    w.numbering = Numbering {
        counters: vec![claim("L", 1)],
        slots: vec![NumberSlot {
            counter: 0,
            ordinal: 0,
            target: SlotTarget::MutationKey(0),
            offset: at(&k, b"000"),
            form: digits(3, true),
        }],
    };
    let r = db.commit(w).unwrap();
    let vs = r.versionstamp().unwrap();
    let mut written = key!["log", "001"];
    written.push(KeyPart::String(vs.to_string())).unwrap();
    assert!(db.get(&written).unwrap().is_some());
}

#[test]
fn numbers_survive_a_reopen_in_both_durabilities() {
    let buffered = Durability::Buffered {
        interval: std::time::Duration::from_millis(5),
    };
    for durability in [Durability::Sync, buffered] {
        let dir = tempfile::tempdir().unwrap();
        let opts = || Options {
            durability,
            ..options()
        };
        {
            let db = Database::open(dir.path(), opts()).unwrap();
            std::thread::scope(|s| {
                for _ in 0..4 {
                    let db = db.clone();
                    s.spawn(move || {
                        for _ in 0..50 {
                            assert!(db.commit(invoice(&db, "INV", 5)).unwrap().is_committed());
                        }
                    });
                }
            });
            db.close().unwrap();
        }
        let db = Database::open(dir.path(), opts()).unwrap();
        for n in 1..=200u64 {
            let code = format!("INV{n:05}");
            assert!(
                db.get(&key!["invoices", code.as_str()]).unwrap().is_some(),
                "{durability:?}: {code} after the reopen"
            );
            assert!(db.get(&used(n)).unwrap().is_some());
        }
        assert_eq!(
            db.get(&key!["next", "INV"]).unwrap().unwrap().value,
            Value::U64(201)
        );
        let r = db.commit(invoice(&db, "INV", 5)).unwrap();
        assert_eq!(numbers(&r), vec![201], "the log held the resolved numbers");
    }
}

#[test]
fn commit_async_takes_numbers_too() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    let futures: Vec<_> = (0..20)
        .map(|_| db.commit_async(invoice(&db, "INV", 5)))
        .collect();
    let mut got: Vec<u64> = futures
        .into_iter()
        .flat_map(|f| numbers(&futures_lite(f).unwrap()))
        .collect();
    got.sort_unstable();
    assert_eq!(got, (1..=20).collect::<Vec<_>>());
}

/// Polls a future to completion on this thread.
fn futures_lite<F: std::future::Future>(f: F) -> F::Output {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let std::task::Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}
