//! Numbered commits on etcd (`AtomicWrite::numbering`, module `commit`): the store takes the
//! numbers from its counters inside the commit's one etcd transaction. Placeholders are
//! filled and the numbers returned; threads of one store and several stores (app servers)
//! take exactly `1..=total`, every record present; a failed check or a refused numbering
//! takes no number and writes nothing; a counter moved by another client is guessed past or
//! read again, never surfaced as a conflict; and the counts of the store's retries show it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tuplekv_engine::codec::encode_key;
use tuplekv_engine::numbering::{CounterClaim, NumberForm, NumberSlot, Numbering, SlotTarget};
use tuplekv_engine::{
    AtomicWrite, ByteRange, CommitResult, Entry, Error, Key, KeyBytes, ListOptions, ReadView,
    Selector, Store, Value, Versionstamp, key,
};
use tuplekv_etcd::{EtcdStore, NumberingStats};
use tuplekv_testkit::etcd::Cluster;

fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| Cluster::start(3))
}

/// A prefix no other test uses.
fn prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "numbered/{}/{}/",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A handle on the store under `prefix` (each call a separate client, as an app server).
fn connect(prefix: &str) -> EtcdStore {
    EtcdStore::connect(&cluster().client_urls(), prefix.as_bytes()).expect("a store")
}

fn open() -> EtcdStore {
    connect(&prefix())
}

/// The counter `["next", name]`.
fn counter_key(name: &str) -> Key {
    key!["next", name]
}

/// Where `needle` starts in `hay`.
fn at(hay: &[u8], needle: &[u8]) -> u32 {
    let i = hay
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("placeholder present");
    u32::try_from(i).expect("a small offset")
}

/// The record `["invoices", "INV<5 digits>"]` = `{"code":"INV<5 digits>"}`, with the
/// uniqueness key `["used", <number>]` checked absent and set: a gapless code's shape. The
/// number comes from counter `name`, at most `max`.
fn invoice(store: &EtcdStore, name: &str, max: u64) -> AtomicWrite {
    let record = key!["invoices", "INV00000"];
    let value = b"{\"code\":\"INV00000\"}";
    let mut write = store
        .atomic()
        .check(&key!["used"], None)
        .set(&record, &value[..])
        .set(&key!["used"], b"taken")
        .as_write()
        .clone();
    let record_bytes = encode_key(&record);
    let used_len = u32::try_from(encode_key(&key!["used"]).len()).expect("short");
    let slot = |target, offset, form| NumberSlot {
        counter: 0,
        ordinal: 0,
        target,
        offset,
        form,
    };
    let digits = |widen| NumberForm::Digits { width: 5, widen };
    write.numbering = Numbering {
        counters: vec![CounterClaim {
            key: KeyBytes::from(encode_key(&counter_key(name)).as_slice()),
            start: 1,
            count: 1,
            max,
        }],
        slots: vec![
            slot(
                SlotTarget::MutationKey(0),
                at(&record_bytes, b"00000"),
                digits(true),
            ),
            slot(
                SlotTarget::MutationValue(0),
                at(value, b"00000"),
                digits(false),
            ),
            slot(SlotTarget::CheckKey(0), used_len, NumberForm::KeyPart),
            slot(SlotTarget::MutationKey(1), used_len, NumberForm::KeyPart),
        ],
    };
    write
}

/// The record key of number `n`.
fn record(n: u64) -> Key {
    let code = format!("INV{n:05}");
    key!["invoices", code.as_str()]
}

fn committed(result: Result<CommitResult, Error>) -> (Versionstamp, Vec<u64>) {
    match result.expect("an answer") {
        CommitResult::Committed {
            versionstamp,
            numbers,
        } => (versionstamp, numbers),
        other => panic!("expected a commit: {other:?}"),
    }
}

/// The one number a committed invoice took.
fn number(result: Result<CommitResult, Error>) -> u64 {
    let (_, numbers) = committed(result);
    assert_eq!(numbers.len(), 1, "{numbers:?}");
    numbers[0]
}

fn get(store: &EtcdStore, k: &Key) -> Option<Entry> {
    store.snapshot().get(k).expect("a read")
}

/// Every entry of the store: keys, values and stamps.
fn everything(store: &EtcdStore) -> Vec<Entry> {
    let all = ByteRange {
        start: vec![0x00],
        end: vec![0xff],
    };
    store.snapshot().scan(&all, false, 100_000).expect("a scan")
}

/// Every invoice's number, in key order, checking each record names its own code and has
/// its uniqueness key.
fn invoices(store: &EtcdStore) -> Vec<u64> {
    let entries: Vec<Entry> = store
        .list(&Selector::prefix(&key!["invoices"]), ListOptions::default())
        .expect("a list")
        .map(|e| e.expect("an entry"))
        .collect();
    entries
        .iter()
        .map(|e| {
            let k = e.decoded_key().expect("a tuple key");
            let code = match k.parts().get(1) {
                Some(tuplekv_engine::KeyPart::String(code)) => code.clone(),
                other => panic!("an invoice key {other:?}"),
            };
            let n: u64 = code.trim_start_matches("INV").parse().expect("digits");
            let value = format!("{{\"code\":\"{code}\"}}");
            assert_eq!(e.value, Value::from(value.as_bytes()), "{code}");
            assert!(get(store, &key!["used", n]).is_some(), "used {n}");
            n
        })
        .collect()
}

/// `numbers` sorted are exactly `1..=n`.
fn assert_one_to(mut numbers: Vec<u64>, n: u64) {
    numbers.sort_unstable();
    let want: Vec<u64> = (1..=n).collect();
    assert_eq!(numbers, want, "numbers must be 1..={n}, each once");
}

#[test]
fn a_numbered_commit_fills_key_value_and_check_key_placeholders_and_returns_its_numbers() {
    let store = open();
    let (stamp, numbers) = committed(store.commit(invoice(&store, "INV", 99_999)));
    assert_eq!(numbers, [1]);
    let entry = get(&store, &record(1)).expect("the record");
    assert_eq!(entry.value, Value::from(&b"{\"code\":\"INV00001\"}"[..]));
    assert_eq!(entry.versionstamp, stamp);
    assert!(get(&store, &key!["used", 1u64]).is_some());
    let c = get(&store, &counter_key("INV")).expect("the counter");
    assert_eq!(c.value, Value::U64(2), "the counter holds the next number");
    assert_eq!(c.versionstamp, stamp, "the counter moved in the commit");
    assert_eq!(number(store.commit(invoice(&store, "INV", 99_999))), 2);
    assert!(get(&store, &record(2)).is_some());
    assert_eq!(
        get(&store, &key!["invoices", "INV00000"]),
        None,
        "no placeholder key is ever written"
    );
    let stats = store.numbering_stats();
    assert_eq!((stats.commits, stats.counter_retries), (2, 0), "{stats:?}");
}

#[test]
fn threads_of_one_store_take_exactly_one_to_total_and_never_refuse_each_other() {
    const THREADS: usize = 8;
    const EACH: usize = 25;
    let store = open();
    let numbers: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let store = store.clone();
                s.spawn(move || {
                    (0..EACH)
                        .map(|_| number(store.commit(invoice(&store, "INV", 99_999))))
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a thread"))
            .collect()
    });
    let total = (THREADS * EACH) as u64;
    assert_one_to(numbers, total);
    assert_one_to(invoices(&store), total);
    let c = get(&store, &counter_key("INV")).expect("the counter");
    assert_eq!(c.value, Value::U64(total + 1));
    let stats = store.numbering_stats();
    eprintln!("{THREADS} threads x {EACH} on one store: {stats:?}");
    assert_eq!(stats.commits, total);
    assert_eq!(
        stats.counter_retries, 0,
        "one store's commits queue in their counter's lane: none refuses another"
    );
    assert!(stats.transactions <= total, "{stats:?}");
}

#[test]
fn several_stores_as_app_servers_take_exactly_one_to_total_with_no_duplicates() {
    const STORES: usize = 4;
    const THREADS: usize = 3;
    const EACH: usize = 15;
    let prefix = prefix();
    let stores: Vec<EtcdStore> = (0..STORES).map(|_| connect(&prefix)).collect();
    let numbers: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = stores
            .iter()
            .flat_map(|store| (0..THREADS).map(move |_| store))
            .map(|store| {
                s.spawn(move || {
                    (0..EACH)
                        .map(|_| number(store.commit(invoice(store, "INV", 99_999))))
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a thread"))
            .collect()
    });
    let total = (STORES * THREADS * EACH) as u64;
    assert_one_to(numbers, total);
    assert_one_to(invoices(&stores[0]), total);
    let mut sum = NumberingStats::default();
    for store in &stores {
        let s = store.numbering_stats();
        sum.commits += s.commits;
        sum.transactions += s.transactions;
        sum.counter_retries += s.counter_retries;
        sum.later_guesses += s.later_guesses;
        sum.guesses += s.guesses;
        sum.combined += s.combined;
    }
    eprintln!("{STORES} stores x {THREADS} threads x {EACH}: {sum:?}");
    assert_eq!(sum.commits, total);
}

#[test]
fn a_failed_caller_check_is_a_conflict_with_its_index_and_takes_no_number() {
    let store = open();
    assert_eq!(number(store.commit(invoice(&store, "INV", 99_999))), 1);
    let _ = store
        .atomic()
        .set(&key!["closed"], 1u64)
        .commit()
        .expect("a commit");
    // The caller's own check (after the uniqueness check): the books must be open.
    let mut write = invoice(&store, "INV", 99_999);
    write.checks.push(tuplekv_engine::Check {
        key: KeyBytes::from(encode_key(&key!["closed"]).as_slice()),
        versionstamp: None,
    });
    let before = everything(&store);
    match store.commit(write).expect("an answer") {
        CommitResult::Conflict(c) => {
            assert_eq!(c.failed_checks.len(), 1, "{c:?}");
            assert_eq!(c.failed_checks[0].index, 1, "the caller's index");
            assert_eq!(c.failed_checks[0].key().expect("a key"), key!["closed"]);
        }
        other => panic!("a failed check committed: {other:?}"),
    }
    assert_eq!(everything(&store), before, "nothing written");
    assert_eq!(
        number(store.commit(invoice(&store, "INV", 99_999))),
        2,
        "the next commit gets the next number"
    );
    assert_eq!(store.numbering_stats().counter_retries, 0);
}

#[test]
fn a_refused_numbering_writes_nothing_counter_exhausted_number_too_wide_not_u64() {
    let store = open();
    assert_eq!(number(store.commit(invoice(&store, "INV", 2))), 1);
    assert_eq!(number(store.commit(invoice(&store, "INV", 2))), 2);
    let before = everything(&store);
    match store.commit(invoice(&store, "INV", 2)) {
        Err(Error::CounterExhausted {
            next: 3,
            count: 1,
            max: 2,
            ..
        }) => {}
        other => panic!("past its max: {other:?}"),
    }
    assert_eq!(everything(&store), before, "nothing written");

    // A number too wide for a placeholder that may not widen (the value's).
    let _ = store
        .atomic()
        .set(&counter_key("W"), 100_000u64)
        .commit()
        .expect("a commit");
    let before = everything(&store);
    match store.commit(invoice(&store, "W", u64::MAX)) {
        Err(Error::NumberTooWide {
            number: 100_000,
            width: 5,
        }) => {}
        other => panic!("a number too wide: {other:?}"),
    }
    assert_eq!(everything(&store), before, "nothing written");

    let _ = store
        .atomic()
        .set(&counter_key("B"), &b"not a number"[..])
        .commit()
        .expect("a commit");
    let before = everything(&store);
    match store.commit(invoice(&store, "B", u64::MAX)) {
        Err(Error::CounterNotU64 { .. }) => {}
        other => panic!("a counter holding bytes: {other:?}"),
    }
    assert_eq!(everything(&store), before, "nothing written");
}

#[test]
fn a_refusal_comes_only_from_a_counter_read_during_the_commit_never_a_remembered_one() {
    let prefix = prefix();
    let (a, b) = (connect(&prefix), connect(&prefix));
    for n in 1..=3 {
        assert_eq!(number(a.commit(invoice(&a, "INV", 99_999))), n);
    }
    // Another client sets the counter back: `a` still remembers 4.
    let _ = b
        .atomic()
        .set(&counter_key("INV"), 2u64)
        .delete(&record(2))
        .delete(&key!["used", 2u64])
        .delete(&record(3))
        .delete(&key!["used", 3u64])
        .commit()
        .expect("a commit");
    assert_eq!(
        number(a.commit(invoice(&a, "INV", 3))),
        2,
        "a max of 3 refuses the remembered 4, not the counter's 2"
    );
}

#[test]
fn a_commit_after_another_client_moved_the_counter_gets_fresh_numbers_by_a_guard_retry() {
    let prefix = prefix();
    let (a, b) = (connect(&prefix), connect(&prefix));
    assert_eq!(number(a.commit(invoice(&a, "INV", 99_999))), 1);
    for n in 2..=6 {
        assert_eq!(number(b.commit(invoice(&b, "INV", 99_999))), n);
    }
    let before = a.numbering_stats();
    assert_eq!(number(a.commit(invoice(&a, "INV", 99_999))), 7);
    let after = a.numbering_stats();
    assert_eq!(
        after.counter_retries - before.counter_retries,
        1,
        "one transaction refused by the moved counter, resent without a conflict: {after:?}"
    );
    assert_eq!(after.transactions - before.transactions, 2);
    // `a` saw the counter move by 5: its next transaction guesses such a move again.
    for n in 8..=12 {
        assert_eq!(number(b.commit(invoice(&b, "INV", 99_999))), n);
    }
    let before = a.numbering_stats();
    let mut write = invoice(&a, "INV", 99_999);
    // A key without a number, put in every branch of the transaction.
    write.mutations.push(tuplekv_engine::Mutation {
        key: KeyBytes::from(encode_key(&key!["last writer"]).as_slice()),
        kind: tuplekv_engine::MutationKind::Set {
            value: Value::from(&b"a"[..]),
            expiry: None,
        },
    });
    assert_eq!(number(a.commit(write)), 13);
    let after = a.numbering_stats();
    assert_eq!(
        (
            after.transactions - before.transactions,
            after.counter_retries - before.counter_retries,
            after.later_guesses - before.later_guesses
        ),
        (1, 0, 1),
        "one transaction, landing on a later guess: {after:?}"
    );
    assert_one_to(invoices(&a), 13);
    assert_eq!(
        get(&a, &key!["last writer"]).map(|e| e.value),
        Some(Value::from(&b"a"[..]))
    );
    // A move `a` never saw (3) is not guessed: one retry, after which `a` guesses it too.
    for round in 0..2 {
        for _ in 0..3 {
            number(b.commit(invoice(&b, "INV", 99_999)));
        }
        let before = a.numbering_stats();
        assert_eq!(number(a.commit(invoice(&a, "INV", 99_999))), 17 + 4 * round);
        let after = a.numbering_stats();
        let retries = after.counter_retries - before.counter_retries;
        assert_eq!(retries, 1 - round, "round {round}: {after:?}");
    }
    assert_one_to(invoices(&a), 21);
}

/// The record of [`invoice`] alone, numbered, after a check that `closed` is absent: no
/// check key holds a number.
fn record_if_open(name: &str) -> AtomicWrite {
    let mut write = AtomicWrite::default();
    write.checks.push(tuplekv_engine::Check {
        key: KeyBytes::from(encode_key(&key!["closed"]).as_slice()),
        versionstamp: None,
    });
    let record = encode_key(&key!["invoices", "INV00000"]);
    let value = b"{\"code\":\"INV00000\"}";
    write.mutations.push(tuplekv_engine::Mutation {
        key: KeyBytes::from(record.as_slice()),
        kind: tuplekv_engine::MutationKind::Set {
            value: Value::from(&value[..]),
            expiry: None,
        },
    });
    let slot = |target, offset, widen| NumberSlot {
        counter: 0,
        ordinal: 0,
        target,
        offset,
        form: NumberForm::Digits { width: 5, widen },
    };
    write.numbering = Numbering {
        counters: vec![CounterClaim {
            key: KeyBytes::from(encode_key(&counter_key(name)).as_slice()),
            start: 1,
            count: 1,
            max: 99_999,
        }],
        slots: vec![
            slot(SlotTarget::MutationKey(0), at(&record, b"00000"), true),
            slot(SlotTarget::MutationValue(0), at(value, b"00000"), false),
        ],
    };
    write
}

#[test]
fn numbered_commits_combined_in_one_transaction_each_get_their_own_result_and_stamp() {
    const COMMITS: usize = 16;
    let store = open();
    let _ = store
        .atomic()
        .set(&key!["closed"], 1u64)
        .commit()
        .expect("a commit");
    let closed = KeyBytes::from(encode_key(&key!["closed"]).as_slice());
    // Sent at once: the first goes, the others queue in the lane behind it and share the
    // next transactions. Of every four, two are invoices, one an invoice that also checks
    // `closed` absent (after its numbered check: it conflicts, once alone), one a record
    // checking `closed` absent with no numbered check key (it conflicts in the group); two
    // write the same key `shared` (so they cannot share a transaction).
    let futures: Vec<_> = (0..COMMITS)
        .map(|i| {
            let mut write = invoice(&store, "INV", 99_999);
            match i % 4 {
                2 => write.checks.push(tuplekv_engine::Check {
                    key: closed.clone(),
                    versionstamp: None,
                }),
                3 => write = record_if_open("INV"),
                _ => {}
            }
            if i == 4 || i == 9 {
                write.mutations.push(tuplekv_engine::Mutation {
                    key: KeyBytes::from(encode_key(&key!["shared"]).as_slice()),
                    kind: tuplekv_engine::MutationKind::Set {
                        value: Value::U64(i as u64),
                        expiry: None,
                    },
                });
            }
            store.commit_async(write)
        })
        .collect();
    let results: Vec<_> = futures
        .into_iter()
        .map(tuplekv_testkit::executor::block_on)
        .collect();
    let mut committed_ones = Vec::new();
    for (i, result) in results.into_iter().enumerate() {
        match result.expect("an answer") {
            CommitResult::Committed {
                versionstamp,
                numbers,
            } => {
                assert!(i % 4 < 2, "commit {i} checked a key that exists");
                committed_ones.push((numbers[0], versionstamp));
            }
            CommitResult::Conflict(c) => {
                let index = match i % 4 {
                    2 => 1,
                    3 => 0,
                    _ => panic!("commit {i} conflicted: {c:?}"),
                };
                assert_eq!(c.failed_checks.len(), 1, "{c:?}");
                assert_eq!(c.failed_checks[0].index, index, "commit {i}: {c:?}");
                assert_eq!(c.failed_checks[0].key, closed);
            }
        }
    }
    let total = committed_ones.len() as u64;
    assert_eq!(total, COMMITS as u64 / 2);
    assert_one_to(committed_ones.iter().map(|(n, _)| *n).collect(), total);
    assert_one_to(invoices(&store), total);
    // Stamps grow with the numbers, none shared, and each record carries its commit's.
    committed_ones.sort_unstable();
    assert!(
        committed_ones.windows(2).all(|w| w[0].1 < w[1].1),
        "{committed_ones:?}"
    );
    for (n, stamp) in &committed_ones {
        assert_eq!(
            get(&store, &record(*n)).expect("a record").versionstamp,
            *stamp
        );
    }
    let last = committed_ones.last().map(|(_, s)| *s);
    let c = get(&store, &counter_key("INV")).expect("the counter");
    assert_eq!(
        (c.value, Some(c.versionstamp)),
        (Value::U64(total + 1), last)
    );
    let shared = get(&store, &key!["shared"]).expect("written").value;
    assert!(matches!(shared, Value::U64(4 | 9)), "{shared:?}");
    let stats = store.numbering_stats();
    eprintln!("{COMMITS} commits sent at once: {stats:?}");
    assert!(
        stats.combined > 0,
        "commits queued behind one in flight share a transaction: {stats:?}"
    );
    assert_eq!(stats.counter_retries, 0);
    // A claimed stamp after a combined transaction lies above all of its stamps.
    let claimed = store
        .atomic()
        .set_versionstamped(&key!["log"], 1u64)
        .commit()
        .expect("a commit")
        .versionstamp()
        .expect("committed");
    assert!(
        last.is_some_and(|l| claimed > l),
        "{claimed} after {last:?}"
    );
}

#[test]
fn a_numbered_commit_with_a_versionstamped_key_and_a_sum_carries_one_stamp() {
    let store = open();
    let counter = KeyBytes::from(encode_key(&counter_key("L")).as_slice());
    let log = encode_key(&key!["log", "000"]);
    let mut write = store
        .atomic()
        .set_versionstamped(&key!["log", "000"], b"entry")
        .sum(&key!["total"], 5)
        .as_write()
        .clone();
    write.numbering = Numbering {
        counters: vec![CounterClaim {
            key: counter,
            start: 1,
            count: 2,
            max: 999,
        }],
        slots: vec![NumberSlot {
            counter: 0,
            ordinal: 1,
            target: SlotTarget::MutationKey(0),
            offset: at(&log, b"000"),
            form: NumberForm::Digits {
                width: 3,
                widen: true,
            },
        }],
    };
    for round in 0..2u64 {
        let (stamp, numbers) = committed(store.commit(write.clone()));
        assert_eq!(numbers, [1 + 2 * round]);
        let mut written = key!["log", format!("{:03}", 2 + 2 * round).as_str()];
        written
            .push(tuplekv_engine::KeyPart::String(stamp.to_string()))
            .expect("a key");
        assert_eq!(get(&store, &written).expect("the log").versionstamp, stamp);
        let total = get(&store, &key!["total"]).expect("the sum");
        assert_eq!(
            (total.value, total.versionstamp),
            (Value::U64(5 * (round + 1)), stamp)
        );
        let c = get(&store, &counter_key("L")).expect("the counter");
        assert_eq!(
            (c.value, c.versionstamp),
            (Value::U64(3 + 2 * round), stamp)
        );
    }
}
