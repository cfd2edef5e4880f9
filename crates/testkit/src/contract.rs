//! The contract every [`Store`] backend keeps, written once as generic checks and run on each
//! backend: the in-memory and durable [`Database`](tuplekv_engine::Database), and remote
//! stores speaking KV Connect.
//!
//! A backend is a [`Backend`]: a way to open fresh, empty stores. Each property is a `pub fn`
//! generic over it that panics when the store breaks the contract, and
//! [`store_contract_tests!`](crate::store_contract_tests) turns all of them into one `#[test]`
//! each, so a backend's test file is a few lines:
//!
//! ```text
//! use tuplekv_testkit::contract::backends::InMemory;
//! tuplekv_testkit::store_contract_tests!(InMemory);
//! ```
//!
//! The layers above the engine have their suites too: [`index`] (collections and their
//! indexes, [`index_contract_tests!`](crate::index_contract_tests)) and [`sequence`] (code
//! sequences, [`sequence_contract_tests!`](crate::sequence_contract_tests)).
//!
//! Every loop is sized for a remote store, where each operation is a network round trip:
//! hundreds of operations per test, not hundred thousands. The index and sequence suites
//! run larger on in-process stores ([`Backend::cost`]), as large as those layers' own tests
//! were before the suites replaced them. Nothing asserts how long something
//! took: a test that needs time to pass (expiry) waits until a deadline has passed by the
//! wall clock, then checks.
//!
//! A backend without snapshots ([`Backend::has_snapshots`] is `false`, a plain KV Connect
//! server) cannot give one state to several reads: there, the snapshot properties check that
//! the second read of one [`Store::snapshot`] fails with [`Error::Unsupported`] rather than
//! answering from another state, and that a transaction's range check is refused the same
//! way, while transactions that only read keys still work.

pub mod backends;
pub mod index;
pub mod sequence;

use std::collections::{BTreeMap, HashSet};
use std::sync::Barrier;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tuplekv_engine::codec::encode_key;
use tuplekv_engine::limits::{
    CHECKS_MAX, EXPIRE_IN_MAX_MS, GET_MANY_KEYS_MAX, KEY_SIZE_MAX_READ, KEY_SIZE_MAX_WRITE,
    LIST_BATCH_SIZE_MAX, MUTATIONS_MAX, TOTAL_KEY_SIZE_MAX, TOTAL_MUTATION_SIZE_MAX,
    TRANSACTION_ATTEMPTS_MAX, VALUE_SIZE_MAX, VERSIONSTAMPED_KEY_SUFFIX_LEN, WATCH_KEYS_MAX,
};
use tuplekv_engine::{
    Atomic, BoundedSum, ByteRange, CommitResult, Entry, Error, Expiry, Key, KeyBytes, KeyWatch,
    ListOptions, MutationKind, ReadView, Selector, Store, SumError, TransactionOptions, Value,
    Versionstamp, key, versionstamped_key,
};

use crate::executor::block_on;

/// A kind of store the contract runs on.
pub trait Backend: Sync {
    /// The store it opens.
    type Store: Store + 'static;

    /// A short name for messages (`"in-memory"`, `"durable"`, `"remote"`).
    fn name(&self) -> &str;

    /// A fresh, empty store. Stores opened by one backend may share nothing.
    fn open(&self) -> Self::Store;

    /// Whether one [`Store::snapshot`] reads one state however many reads it serves. A plain
    /// KV Connect server has no such snapshots: its store answers the second read of one
    /// snapshot with [`Error::Unsupported`].
    fn has_snapshots(&self) -> bool {
        true
    }

    /// What one operation costs on this backend, which sizes the suites' loops: a store in
    /// this process runs them in full, a remote one at their `_REMOTE` sizes.
    fn cost(&self) -> Cost {
        Cost::InProcess
    }
}

/// What one store operation costs on a [`Backend`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cost {
    /// A call into this process (the engine's databases): the suites run their full sizes,
    /// as many cases and operations as the layers' own tests ran before the suites.
    InProcess,
    /// A call into this process whose commits sync a log (the durable database): the full
    /// sizes, but not the longer runs a soak asks for through the environment (each gapless
    /// number there is an fsync).
    Disk,
    /// A network round trip, about 100 times an in-process call: the suites run their
    /// `_REMOTE` sizes, hundreds of operations per test.
    RoundTrip,
}

impl Cost {
    /// `in_process` on an in-process backend, `round_trip` on a remote one.
    pub fn pick<T>(self, in_process: T, round_trip: T) -> T {
        match self {
            Cost::InProcess | Cost::Disk => in_process,
            Cost::RoundTrip => round_trip,
        }
    }
}

/// Most entries a [`dump`] reads: far more than any property writes, in one read.
pub const DUMP_MAX: usize = 1000;

/// Threads of the contention properties.
pub const CONTENTION_THREADS: usize = 4;

/// Transactions each contention thread commits.
pub const CONTENTION_ROUNDS: usize = 50;

/// How long an expiring value of the expiry property lives.
pub const SHORT_EXPIRY: Duration = Duration::from_millis(40);

/// Every range a property writes keys in: all tuple keys and the raw keys of the limits.
fn everything() -> ByteRange {
    ByteRange {
        start: vec![],
        end: vec![0xff],
    }
}

/// Every entry of `store` (up to [`DUMP_MAX`]) in key order, read in one read of a fresh
/// snapshot: (key, value, versionstamp).
///
/// # Panics
/// If the read fails.
pub fn dump<S: Store>(store: &S) -> Vec<(KeyBytes, Value, Versionstamp)> {
    store
        .snapshot()
        .scan(&everything(), false, DUMP_MAX)
        .expect("one read of every key")
        .into_iter()
        .map(|e| (e.key, e.value, e.versionstamp))
        .collect()
}

/// A key whose encoding is exactly `len` bytes (one bytes part: tag, payload, terminator).
///
/// # Panics
/// If `len < 2`.
pub fn key_of_len(len: usize) -> Key {
    assert!(len >= 2, "a bytes part takes at least 2 bytes");
    key![vec![b'k'; len - 2]]
}

/// `n` distinct raw keys of exactly `len` bytes (`len >= 3`), all starting with `tag`.
fn raw_keys(tag: u8, n: usize, len: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut k = vec![tag; len];
            let [.., hi, lo] = (i as u64).to_be_bytes();
            k[len - 2] = hi;
            k[len - 1] = lo;
            k
        })
        .collect()
}

/// Commits `op`, which must fail with `expected`, and checks that the store holds exactly
/// what it held before.
fn assert_rejected<S: Store>(store: &S, op: Atomic<'_, S>, expected: Error, what: &str) {
    let before = dump(store);
    match op.commit() {
        Err(e) => assert_eq!(e, expected, "{what}: the wrong error"),
        Ok(r) => panic!("{what}: committed ({r:?}) instead of failing with {expected}"),
    }
    assert_eq!(
        dump(store),
        before,
        "{what}: a rejected write changed the store"
    );
}

/// Commits `op`, which must commit, and returns its versionstamp.
fn assert_commits<S: Store>(op: Atomic<'_, S>, what: &str) -> Versionstamp {
    match op.commit() {
        Ok(CommitResult::Committed { versionstamp, .. }) => versionstamp,
        other => panic!("{what}: expected a commit, got {other:?}"),
    }
}

/// The entries of a prefix as (key, value) pairs, from `entries`.
fn pairs(entries: &[Entry]) -> Vec<(KeyBytes, Value)> {
    entries
        .iter()
        .map(|e| (e.key.clone(), e.value.clone()))
        .collect()
}

/// Now, as Unix milliseconds.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Sleeps until the wall clock is past `deadline_ms` (Unix milliseconds).
fn wait_until_past(deadline_ms: u64) {
    loop {
        let now = now_ms();
        if now > deadline_ms {
            return;
        }
        std::thread::sleep(Duration::from_millis(deadline_ms - now + 1));
    }
}

/// The error a store without snapshots must give for the second read of one snapshot.
fn assert_unsupported<T: std::fmt::Debug>(result: Result<T, Error>, what: &str) {
    match result {
        Err(Error::Unsupported { .. }) => {}
        other => {
            panic!("{what}: a store without snapshots must refuse with Unsupported: {other:?}")
        }
    }
}

/// A snapshot keeps reading the state it was taken at while commits follow: `get`, `scan`
/// both ways, and a [`Store::list`] iterator that reads several batches across commits.
///
/// Without snapshots: the first read of a snapshot answers, the second fails with
/// [`Error::Unsupported`], and so does a list's second batch.
pub fn snapshot_stays_put_while_commits_follow<B: Backend>(backend: &B) {
    let store = backend.open();
    let prefix = key!["snap"];
    let range = Selector::prefix(&prefix)
        .byte_range()
        .expect("a short prefix");
    let write = (0..20i64).fold(store.atomic(), |a, i| {
        a.set(&key!["snap", i * 2], format!("v{i}").as_str())
    });
    assert_commits(write, "the initial keys");
    let before = store
        .snapshot()
        .scan(&range, false, DUMP_MAX)
        .expect("one scan");
    assert_eq!(before.len(), 20);

    let snapshot = store.snapshot();
    let first = snapshot.get(&key!["snap", 0]);
    let first = first.expect("the first read of a snapshot answers");
    assert_eq!(first.map(|e| e.value), Some(Value::from("v0")));
    let change = store
        .atomic()
        .set(&key!["snap", 0], "changed")
        .delete(&key!["snap", 2])
        .set(&key!["snap", 3], "inserted")
        .set(&key!["snap", 1000], "appended");
    assert_commits(change, "the changes after the snapshot");

    if !backend.has_snapshots() {
        assert_unsupported(snapshot.get(&key!["snap", 2]), "a second get");
        let mut list = store
            .list(
                &Selector::prefix(&prefix),
                ListOptions {
                    batch_size: Some(3),
                    ..ListOptions::default()
                },
            )
            .expect("a list starts");
        let mut read = 0;
        let last = loop {
            match list.next() {
                Some(Ok(_)) => read += 1,
                other => break other,
            }
        };
        assert_eq!(read, 3, "the first batch answers");
        match last {
            Some(Err(Error::Unsupported { .. })) => {}
            other => panic!("a list's second batch must fail with Unsupported: {other:?}"),
        }
        return;
    }

    let get = |k: Key| {
        snapshot
            .get(&k)
            .expect("a snapshot read")
            .map(|e| (e.value, e.versionstamp))
    };
    let old = |i: usize| Some((before[i].value.clone(), before[i].versionstamp));
    assert_eq!(get(key!["snap", 0]), old(0), "an overwritten key");
    assert_eq!(get(key!["snap", 2]), old(1), "a deleted key");
    assert_eq!(get(key!["snap", 3]), None, "a key inserted later");
    assert_eq!(get(key!["snap", 1000]), None, "a key appended later");
    let scanned = snapshot.scan(&range, false, DUMP_MAX).expect("a scan");
    assert_eq!(scanned, before, "a snapshot's scan");
    let mut reversed = snapshot.scan(&range, true, DUMP_MAX).expect("a scan");
    reversed.reverse();
    assert_eq!(reversed, before, "a snapshot's reverse scan");
    let head = snapshot.scan(&range, true, 5).expect("a scan");
    let want: Vec<Entry> = before.iter().rev().take(5).cloned().collect();
    assert_eq!(head, want, "a reverse scan with a limit");

    // A list reads batches of 3 from one snapshot, with commits between the batches.
    let now = store
        .snapshot()
        .scan(&range, false, DUMP_MAX)
        .expect("a scan");
    let key_20 = encode_key(&key!["snap", 20]);
    let value_of_20 = now
        .iter()
        .find(|e| e.key.as_slice() == key_20.as_slice())
        .map(|e| e.value.clone())
        .expect("key 20 is listed");
    for reverse in [false, true] {
        let mut list = store
            .list(
                &Selector::prefix(&prefix),
                ListOptions {
                    batch_size: Some(3),
                    reverse,
                    ..ListOptions::default()
                },
            )
            .expect("a list starts");
        let mut got: Vec<Entry> = list.by_ref().take(4).map(|e| e.expect("a batch")).collect();
        let more = store
            .atomic()
            .delete(&key!["snap", 20])
            .set(&key!["snap", 21], "new")
            .set(&key!["snap", 1], "new")
            .set(&key!["snap", 998], "new")
            .set(&key!["snap", 0], "again");
        assert_commits(more, "a commit in the middle of a list");
        got.extend(list.map(|e| e.expect("a later batch")));
        let mut want = now.clone();
        if reverse {
            want.reverse();
        }
        assert_eq!(
            pairs(&got),
            pairs(&want),
            "a list across commits (reverse: {reverse})"
        );
        // The next round lists the state this one wrote.
        let undo = store
            .atomic()
            .set(&key!["snap", 20], value_of_20.clone())
            .delete(&key!["snap", 21])
            .delete(&key!["snap", 1])
            .delete(&key!["snap", 998])
            .set(&key!["snap", 0], "changed");
        assert_commits(undo, "restoring the listed state");
    }
}

/// Checks hold or fail at commit: present with its versionstamp, absent, changed since. A
/// failed commit writes nothing and reports every failed check with its index, key, and the
/// versionstamps expected and found (what it found only on a backend with snapshots: a plain
/// KV Connect server does not say).
pub fn checks_pass_or_fail_with_their_index<B: Backend>(backend: &B) {
    let store = backend.open();
    let (a, b, c) = (key!["chk", "a"], key!["chk", "b"], key!["chk", "c"]);
    let va = assert_commits(store.atomic().set(&a, "1"), "setting a");
    let vb = assert_commits(store.atomic().set(&b, "1"), "setting b");
    // Present with its stamp, absent: the commit goes through.
    let ok = store
        .atomic()
        .check(&a, Some(va))
        .check(&c, None)
        .set(&key!["chk", "written"], "yes");
    assert_commits(ok, "checks that hold");
    // Change b: a check of its old stamp now fails.
    let vb2 = assert_commits(store.atomic().set(&b, "2"), "changing b");
    assert!(vb2 > vb);
    let before = dump(&store);
    let failing = store
        .atomic()
        .check(&a, Some(va)) // holds
        .check(&b, Some(vb)) // changed
        .check(&a, None) // present, not absent
        .check(&c, Some(vb2)) // absent, not present
        .set(&key!["chk", "never"], "x")
        .delete(&a);
    let result = failing.commit().expect("a valid operation");
    let conflict = result.conflict().expect("failed checks conflict").clone();
    assert_eq!(result.versionstamp(), None);
    assert!(!conflict.range_changed);
    // A plain KV Connect server says which checks failed, not what it found.
    let snapshots = backend.has_snapshots();
    let failed: Vec<(usize, KeyBytes, Option<Versionstamp>, Option<Versionstamp>)> = conflict
        .failed_checks
        .iter()
        .map(|f| {
            (
                f.index,
                f.key.clone(),
                f.expected,
                f.actual.filter(|_| snapshots),
            )
        })
        .collect();
    let found = |vs: Versionstamp| Some(vs).filter(|_| snapshots);
    let kb = |k: &Key| KeyBytes::from(encode_key(k));
    assert_eq!(
        failed,
        vec![
            (1, kb(&b), Some(vb), found(vb2)),
            (2, kb(&a), None, found(va)),
            (3, kb(&c), Some(vb2), None),
        ],
        "every failed check, by index"
    );
    assert_eq!(dump(&store), before, "a failed check writes nothing");
    // A deleted key checks as absent.
    assert_commits(store.atomic().delete(&b), "deleting b");
    assert_commits(store.atomic().check(&b, None).set(&b, "3"), "b absent");
}

/// Versionstamps increase from commit to commit, a commit's mutations share one, two commits
/// never share one (also from several threads at once), and entries carry their commit's.
pub fn versionstamps_increase_and_are_never_shared<B: Backend>(backend: &B) {
    let store = backend.open();
    let mut last = Versionstamp::ZERO;
    for i in 0..20u64 {
        let vs = assert_commits(
            store
                .atomic()
                .set(&key!["vs", "seq"], i)
                .sum(&key!["vs", "n"], 1),
            "a commit",
        );
        assert!(vs > last, "{vs} after {last}");
        last = vs;
        for k in [key!["vs", "seq"], key!["vs", "n"]] {
            let e = store.snapshot().get(&k).expect("a read").expect("written");
            assert_eq!(e.versionstamp, vs, "the entry carries its commit's stamp");
        }
    }
    let stamped = assert_commits(
        store
            .atomic()
            .set_versionstamped(&key!["vs", "log"], "entry"),
        "a versionstamped key",
    );
    let written = versionstamped_key(&encode_key(&key!["vs", "log"]), stamped);
    let e = store
        .snapshot()
        .get_raw(&written)
        .expect("a read")
        .expect("the versionstamped key holds the value");
    assert_eq!(e.versionstamp, stamped);
    assert_eq!(
        e.key.as_slice(),
        encode_key(&key!["vs", "log", stamped.to_string().as_str()]).as_slice()
    );

    // Threads committing at once: every stamp is new, each thread's increase.
    let threads = CONTENTION_THREADS;
    let barrier = Barrier::new(threads);
    let stamps: Vec<Vec<Versionstamp>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (store, barrier) = (&store, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    (0..CONTENTION_ROUNDS)
                        .map(|i| {
                            assert_commits(
                                store.atomic().set(&key!["vs", "t", t as u64], i as u64),
                                "a concurrent commit",
                            )
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a committer thread"))
            .collect()
    });
    let mut seen = HashSet::new();
    for (t, mine) in stamps.iter().enumerate() {
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "thread {t} went back");
        assert!(mine.iter().all(|vs| *vs > stamped));
        for vs in mine {
            assert!(seen.insert(*vs), "{vs} given to two commits");
        }
        let e = store
            .snapshot()
            .get(&key!["vs", "t", t as u64])
            .expect("a read")
            .expect("written");
        assert_eq!(Some(e.versionstamp), mine.last().copied());
    }
}

/// Lists `prefix` in a transaction, appending the next entry, and returns how often the
/// closure ran. `interfere` runs on the first attempt between the list and the commit.
fn list_then_write<S: Store>(
    store: &S,
    prefix: &Key,
    interfere: impl Fn(&S),
) -> Result<u32, Error> {
    let mut runs = 0u32;
    store.transaction(|tx| {
        runs += 1;
        let entries = tx.list(&Selector::prefix(prefix), ListOptions::default())?;
        let mut next = prefix.clone();
        next.push(entries.len() as u64).expect("a short key");
        tx.set(&next, "appended");
        if runs == 1 {
            interfere(store);
        }
        Ok::<(), Error>(())
    })?;
    Ok(runs)
}

/// A transaction that lists a range conflicts when another commit inserts into the range or
/// deletes from it before it commits, and its closure runs again on the new state; a commit
/// outside the range does not disturb it.
///
/// Without snapshots: a transaction that lists is refused with [`Error::Unsupported`] and
/// writes nothing (its range check cannot be sent).
pub fn range_checks_rerun_transactions_that_listed_a_changed_range<B: Backend>(backend: &B) {
    let store = backend.open();
    let prefix = key!["rc", "items"];
    let write = (0..3u64).fold(store.atomic(), |a, i| a.set(&key!["rc", "items", i], "x"));
    assert_commits(write, "the initial items");
    if !backend.has_snapshots() {
        let before = dump(&store);
        assert_unsupported(
            list_then_write(&store, &prefix, |_| {}),
            "a listing transaction",
        );
        assert_eq!(dump(&store), before, "a refused transaction writes nothing");
        return;
    }
    // Undisturbed, and disturbed outside the range: one run.
    let runs = list_then_write(&store, &prefix, |_| {}).expect("commits");
    assert_eq!(runs, 1);
    let outside = |s: &S2<B>| {
        assert_commits(s.atomic().set(&key!["rc", "other"], "x"), "outside");
    };
    assert_eq!(
        list_then_write(&store, &prefix, outside).expect("commits"),
        1
    );
    // Four items now. An insert into the range: the first run's append of 4 would overwrite
    // it; the second run sees five and appends 5.
    let insert = |s: &S2<B>| {
        assert_commits(
            s.atomic().set(&key!["rc", "items", 4u64], "rival"),
            "insert",
        );
    };
    assert_eq!(
        list_then_write(&store, &prefix, insert).expect("commits"),
        2
    );
    let value = |i: u64| {
        store
            .snapshot()
            .get(&key!["rc", "items", i])
            .expect("a read")
            .map(|e| e.value)
    };
    assert_eq!(value(4), Some(Value::from("rival")), "the insert survives");
    assert_eq!(value(5), Some(Value::from("appended")));
    // A delete from the range: the second run sees five items and appends 5 again.
    let delete = |s: &S2<B>| {
        assert_commits(s.atomic().delete(&key!["rc", "items", 0u64]), "delete");
    };
    assert_eq!(
        list_then_write(&store, &prefix, delete).expect("commits"),
        2
    );
    assert_eq!(value(0), None);
    assert_eq!(value(6), None, "the first run's append was not committed");
    // A delete of a key past a limited list's last entry is outside what it read.
    let mut runs = 0;
    store
        .transaction(|tx| {
            runs += 1;
            let first = tx.list(
                &Selector::prefix(&prefix),
                ListOptions {
                    limit: Some(1),
                    ..ListOptions::default()
                },
            )?;
            assert_eq!(first.len(), 1);
            tx.set(&key!["rc", "seen"], first[0].value.clone());
            if runs == 1 {
                assert_commits(store.atomic().delete(&key!["rc", "items", 5u64]), "delete");
            }
            Ok::<(), Error>(())
        })
        .expect("commits");
    assert_eq!(runs, 1, "a change past the limit is outside the range read");
}

/// Shorthand for a backend's store type.
type S2<B> = <B as Backend>::Store;

/// A write key of [`KEY_SIZE_MAX_WRITE`] bytes is fine, one more is refused in a set, a
/// check, a delete, a sum and a versionstamped set's prefix; the empty key cannot be written.
pub fn write_key_size_limit_holds_at_and_past_the_limit<B: Backend>(backend: &B) {
    let store = backend.open();
    let at = key_of_len(KEY_SIZE_MAX_WRITE);
    let past = key_of_len(KEY_SIZE_MAX_WRITE + 1);
    assert_commits(
        store.atomic().set(&at, "v").check(&at, None),
        "a key at the write limit",
    );
    let too_large = Error::KeyTooLargeForWrite {
        size: KEY_SIZE_MAX_WRITE + 1,
    };
    type AddKey<S> = for<'s, 'k> fn(Atomic<'s, S>, &'k Key) -> Atomic<'s, S>;
    let cases: [(&str, AddKey<S2<B>>); 5] = [
        ("set", |a, k| a.set(k, "v")),
        ("check", |a, k| a.check(k, None)),
        ("delete", |a, k| a.delete(k)),
        ("sum", |a, k| a.sum(k, 1)),
        ("versionstamped set", |a, k| a.set_versionstamped(k, "v")),
    ];
    for (what, add) in cases {
        let op = add(store.atomic().set(&key!["ks", "ok"], "v"), &past);
        assert_rejected(&store, op, too_large.clone(), what);
    }
    assert_rejected(
        &store,
        store.atomic().set(&key![], "v"),
        Error::EmptyKey,
        "the empty key",
    );
    // A versionstamped set writes its prefix plus the stamp: that key must fit the limit
    // too, so that a get can name it.
    let prefix_at = key_of_len(KEY_SIZE_MAX_WRITE - VERSIONSTAMPED_KEY_SUFFIX_LEN);
    let stamped = assert_commits(
        store.atomic().set_versionstamped(&prefix_at, "at"),
        "a versionstamped set whose written key is at the write limit",
    );
    let written = versionstamped_key(&encode_key(&prefix_at), stamped);
    assert_eq!(written.len(), KEY_SIZE_MAX_WRITE);
    assert!(
        store
            .snapshot()
            .get_raw(&written)
            .expect("a get of the written key")
            .is_some(),
        "the written key can be read back by its key"
    );
    let prefix_past = key_of_len(KEY_SIZE_MAX_WRITE - VERSIONSTAMPED_KEY_SUFFIX_LEN + 1);
    assert_rejected(
        &store,
        store
            .atomic()
            .set(&key!["ks", "ok"], "v")
            .set_versionstamped(&prefix_past, "past"),
        Error::KeyTooLargeForWrite {
            size: KEY_SIZE_MAX_WRITE + 1,
        },
        "a versionstamped set whose written key is one byte past the write limit",
    );
}

/// A read key of [`KEY_SIZE_MAX_READ`] bytes is fine in `get`, `get_many` and list bounds
/// (the store's documented read limit, though Deno's own `get` fails at it); one more is
/// refused with [`Error::KeyTooLargeForRead`].
pub fn read_key_size_limit_holds_at_and_past_the_limit<B: Backend>(backend: &B) {
    let store = backend.open();
    let at = key_of_len(KEY_SIZE_MAX_WRITE);
    assert_commits(store.atomic().set(&at, "v"), "a key at the write limit");

    let read_at = key_of_len(KEY_SIZE_MAX_READ);
    let read_past = key_of_len(KEY_SIZE_MAX_READ + 1);
    let read_too_large = Error::KeyTooLargeForRead {
        size: KEY_SIZE_MAX_READ + 1,
    };
    assert_eq!(
        store.snapshot().get(&read_at).expect("at the read limit"),
        None
    );
    assert_eq!(
        store
            .snapshot()
            .get(&read_past)
            .expect_err("past the read limit"),
        read_too_large
    );
    assert_eq!(
        store
            .get_many(&[read_at.clone(), key!["x"]])
            .expect("at the limit"),
        vec![None, None]
    );
    assert_eq!(
        store
            .get_many(&[key!["x"], read_past.clone()])
            .expect_err("past"),
        read_too_large
    );
    let start = key![vec![b'a']];
    let listed = store
        .list(&Selector::range(&start, &read_at), ListOptions::default())
        .expect("a list bound at the read limit")
        .count();
    assert_eq!(
        listed, 1,
        "the key at the write limit sorts before the bound"
    );
    let err = store
        .list(&Selector::range(&start, &read_past), ListOptions::default())
        .err()
        .expect("a list bound past the read limit");
    assert_eq!(err, read_too_large);
    // A prefix list's bounds are one byte longer than the prefix.
    let prefix_past = key_of_len(KEY_SIZE_MAX_READ);
    let err = store
        .list(&Selector::prefix(&prefix_past), ListOptions::default())
        .err()
        .expect("a prefix past the read limit");
    assert_eq!(err, read_too_large);
}

/// A value of [`VALUE_SIZE_MAX`] bytes is written; one more byte is refused.
pub fn value_size_limit_holds_at_and_past_the_limit<B: Backend>(backend: &B) {
    let store = backend.open();
    assert_commits(
        store.atomic().set(&key!["v"], vec![7u8; VALUE_SIZE_MAX]),
        "a value at the limit",
    );
    let e = store
        .snapshot()
        .get(&key!["v"])
        .expect("a read")
        .expect("written");
    assert_eq!(e.value.size(), VALUE_SIZE_MAX);
    let op = store
        .atomic()
        .set(&key!["ok"], "v")
        .set(&key!["w"], vec![7u8; VALUE_SIZE_MAX + 1]);
    assert_rejected(
        &store,
        op,
        Error::ValueTooLarge {
            size: VALUE_SIZE_MAX + 1,
        },
        "a value past the limit",
    );
}

/// [`CHECKS_MAX`] checks commit; one more is refused.
pub fn check_count_limit_holds_at_and_past_the_limit<B: Backend>(backend: &B) {
    let store = backend.open();
    let with_checks = |n: usize| {
        (0..n).fold(store.atomic().set(&key!["ok"], "v"), |a, i| {
            a.check(&key!["c", i as u64], None)
        })
    };
    assert_commits(with_checks(CHECKS_MAX), "checks at the limit");
    assert_rejected(
        &store,
        with_checks(CHECKS_MAX + 1),
        Error::TooManyChecks {
            count: CHECKS_MAX + 1,
        },
        "checks past the limit",
    );
}

/// [`MUTATIONS_MAX`] mutations commit; one more is refused.
pub fn mutation_count_limit_holds_at_and_past_the_limit<B: Backend>(backend: &B) {
    let store = backend.open();
    let with_sets = |n: usize| (0..n).fold(store.atomic(), |a, i| a.set(&key!["m", i as u64], "v"));
    assert_rejected(
        &store,
        with_sets(MUTATIONS_MAX + 1),
        Error::TooManyMutations {
            count: MUTATIONS_MAX + 1,
        },
        "mutations past the limit",
    );
    assert_commits(with_sets(MUTATIONS_MAX), "mutations at the limit");
    let stored = store
        .snapshot()
        .scan(&everything(), false, MUTATIONS_MAX)
        .expect("a scan");
    assert_eq!(stored.len(), MUTATIONS_MAX);
}

/// An operation carrying exactly [`TOTAL_MUTATION_SIZE_MAX`] bytes commits (sets count twice
/// their key plus their value); one byte more is refused.
pub fn total_mutation_size_limit_holds_at_and_past_the_limit<B: Backend>(backend: &B) {
    let store = backend.open();
    // Twelve 64 KiB values on 12-byte keys, and one value that fills the rest exactly.
    let big = |i: u64| key!["s", i as f64];
    assert_eq!(encode_key(&big(1)).len(), 12);
    let fixed = 12 * (2 * 12 + VALUE_SIZE_MAX) + 2 * 12;
    let op = |x: usize| {
        (0..12u64)
            .fold(store.atomic(), |a, i| {
                a.set(&big(i), vec![0u8; VALUE_SIZE_MAX])
            })
            .set(&big(99), vec![0u8; x])
    };
    let fits = TOTAL_MUTATION_SIZE_MAX - fixed;
    assert_rejected(
        &store,
        op(fits + 1),
        Error::TotalMutationSizeTooLarge {
            size: TOTAL_MUTATION_SIZE_MAX + 1,
        },
        "one byte past the total size",
    );
    assert_commits(op(fits), "exactly the total size");
    // Checks count their key too.
    let with_check = op(fits - 12).check(&big(200), None);
    assert_commits(with_check, "a check's key counts");
    let over = op(fits - 11).check(&big(200), None);
    assert_rejected(
        &store,
        over,
        Error::TotalMutationSizeTooLarge {
            size: TOTAL_MUTATION_SIZE_MAX + 1,
        },
        "a check's key past the total size",
    );
}

/// The keys of value-carrying mutations add up to at most [`TOTAL_KEY_SIZE_MAX`] bytes; one
/// byte more is refused. Checks and deletes do not count.
pub fn total_key_size_limit_holds_at_and_past_the_limit<B: Backend>(backend: &B) {
    let store = backend.open();
    let n = TOTAL_KEY_SIZE_MAX / KEY_SIZE_MAX_WRITE;
    let keys = raw_keys(b'k', n, KEY_SIZE_MAX_WRITE);
    assert_eq!(keys.iter().map(Vec::len).sum::<usize>(), TOTAL_KEY_SIZE_MAX);
    let sets = |keys: &[Vec<u8>]| keys.iter().fold(store.atomic(), |a, k| a.set_raw(k, ""));
    let mut over = keys.clone();
    over.push(vec![b'z']);
    let too_large = Error::TotalKeySizeTooLarge {
        size: TOTAL_KEY_SIZE_MAX + 1,
    };
    assert_rejected(
        &store,
        sets(&over),
        too_large.clone(),
        "set keys past the limit",
    );
    assert_commits(sets(&keys), "set keys at the limit");
    let sums = |keys: &[Vec<u8>]| keys.iter().fold(store.atomic(), |a, k| a.sum_raw(k, 1));
    let sum_keys = raw_keys(b's', n, KEY_SIZE_MAX_WRITE);
    let mut over = sum_keys.clone();
    over.push(vec![b'z']);
    assert_rejected(&store, sums(&over), too_large, "sum keys past the limit");
    assert_commits(sums(&sum_keys), "sum keys at the limit");
    let many = raw_keys(b'c', n + 5, KEY_SIZE_MAX_WRITE);
    let checks = many
        .iter()
        .fold(store.atomic(), |a, k| a.check_raw(k, None));
    assert_commits(checks, "checks do not count");
    let deletes = many.iter().fold(store.atomic(), |a, k| a.delete_raw(k));
    assert_commits(deletes, "deletes do not count");
}

/// `get_many` reads [`GET_MANY_KEYS_MAX`] keys, in request order; one more is refused.
pub fn get_many_limit_holds_at_and_past_the_limit<B: Backend>(backend: &B) {
    let store = backend.open();
    let keys: Vec<Key> = (0..=GET_MANY_KEYS_MAX as u64)
        .map(|i| key!["g", i])
        .collect();
    assert_commits(store.atomic().set(&keys[3], "three"), "a key");
    let got = store
        .get_many(&keys[..GET_MANY_KEYS_MAX])
        .expect("at the limit");
    assert_eq!(got.len(), GET_MANY_KEYS_MAX);
    for (i, e) in got.iter().enumerate() {
        assert_eq!(e.is_some(), i == 3, "entry {i}");
    }
    assert_eq!(
        store.get_many(&keys).expect_err("past the limit"),
        Error::TooManyRanges {
            count: GET_MANY_KEYS_MAX + 1
        }
    );
}

/// A watch takes [`WATCH_KEYS_MAX`] keys; one more, or a key over the write limit, is
/// refused.
pub fn watch_key_limits_hold_at_and_past_the_limit<B: Backend>(backend: &B) {
    let store = backend.open();
    let keys = |n: usize| -> Vec<KeyBytes> {
        (0..n as u64)
            .map(|i| KeyBytes::from(encode_key(&key!["w", i])))
            .collect()
    };
    let mut watch = store.watch_raw(keys(WATCH_KEYS_MAX)).expect("at the limit");
    let first = block_on(watch.next()).expect("the first state");
    assert_eq!(first.entries.len(), WATCH_KEYS_MAX);
    match store.watch_raw(keys(WATCH_KEYS_MAX + 1)) {
        Err(e) => assert_eq!(
            e,
            Error::TooManyWatchedKeys {
                count: WATCH_KEYS_MAX + 1
            }
        ),
        Ok(_) => panic!("a watch of {} keys", WATCH_KEYS_MAX + 1),
    }
    let long = KeyBytes::from(encode_key(&key_of_len(KEY_SIZE_MAX_WRITE + 1)));
    match store.watch_raw(vec![long]) {
        Err(e) => assert_eq!(
            e,
            Error::KeyTooLargeForWrite {
                size: KEY_SIZE_MAX_WRITE + 1
            }
        ),
        Ok(_) => panic!("a watch of a key over the write limit"),
    }
}

/// List options: a limit and a batch size must be positive, a batch is at most
/// [`LIST_BATCH_SIZE_MAX`]; a limit stops the list and its cursor resumes it.
pub fn list_limits_hold_at_and_past_the_limit<B: Backend>(backend: &B) {
    let store = backend.open();
    let write = (0..30u64).fold(store.atomic(), |a, i| a.set(&key!["l", i], i));
    assert_commits(write, "the listed keys");
    let selector = Selector::prefix(&key!["l"]);
    let list = |options: ListOptions| store.list(&selector, options).map(|it| it.count());
    let with = |limit: Option<usize>, batch_size: Option<usize>| ListOptions {
        limit,
        batch_size,
        ..ListOptions::default()
    };
    assert_eq!(list(with(Some(0), None)).err(), Some(Error::ZeroLimit));
    assert_eq!(list(with(None, Some(0))).err(), Some(Error::ZeroBatchSize));
    assert_eq!(
        list(with(None, Some(LIST_BATCH_SIZE_MAX + 1))).err(),
        Some(Error::TooManyEntries {
            count: LIST_BATCH_SIZE_MAX + 1
        })
    );
    assert_eq!(list(with(None, Some(LIST_BATCH_SIZE_MAX))).ok(), Some(30));
    assert_eq!(list(with(Some(7), None)).ok(), Some(7));
    assert_eq!(list(with(Some(1), Some(1))).ok(), Some(1));
    // Pages of 7 resume from their cursors and cover the range once each way.
    for reverse in [false, true] {
        let mut seen = Vec::new();
        let mut cursor = None;
        for _ in 0..10 {
            let mut page = store
                .list(
                    &selector,
                    ListOptions {
                        limit: Some(7),
                        reverse,
                        cursor: cursor.clone(),
                        ..ListOptions::default()
                    },
                )
                .expect("a page");
            let entries = page.read_all().expect("a page reads");
            seen.extend(entries.iter().map(|e| e.value.as_u64().unwrap_or(u64::MAX)));
            match page.cursor() {
                tuplekv_engine::ListCursor::After(c) if entries.len() == 7 => cursor = Some(c),
                _ => break,
            }
        }
        let mut want: Vec<u64> = (0..30).collect();
        if reverse {
            want.reverse();
        }
        assert_eq!(seen, want, "paging (reverse: {reverse})");
    }
}

/// An expiry longer than [`EXPIRE_IN_MAX_MS`] is refused; the longest is accepted.
pub fn expiry_limit_holds_at_and_past_the_limit<B: Backend>(backend: &B) {
    let store = backend.open();
    let at = Duration::from_millis(EXPIRE_IN_MAX_MS);
    assert_commits(
        store.atomic().set_with_expiry(&key!["e"], "v", at),
        "the longest expiry",
    );
    let op = store.atomic().set(&key!["ok"], "v").set_with_expiry(
        &key!["f"],
        "v",
        at + Duration::from_millis(1),
    );
    assert_rejected(
        &store,
        op,
        Error::ExpireInTooLarge {
            ms: u128::from(EXPIRE_IN_MAX_MS) + 1,
        },
        "an expiry past the limit",
    );
}

/// A transaction that conflicts on every attempt gives up after its options' attempts
/// ([`TRANSACTION_ATTEMPTS_MAX`] by default) with [`Error::TransactionConflict`], and writes
/// nothing.
pub fn transaction_attempts_limit_ends_a_transaction_that_always_conflicts<B: Backend>(
    backend: &B,
) {
    let store = backend.open();
    let k = key!["tx", "hot"];
    let options = TransactionOptions {
        initial_backoff: Duration::from_micros(10),
        max_backoff: Duration::from_micros(100),
        ..TransactionOptions::default()
    };
    for max_attempts in [3, TRANSACTION_ATTEMPTS_MAX] {
        let mut runs = 0;
        let result = store.transaction_with(
            &TransactionOptions {
                max_attempts,
                ..options.clone()
            },
            |tx| {
                runs += 1;
                tx.get(&k)?;
                tx.set(&key!["tx", "never"], "x");
                assert_commits(store.atomic().sum(&k, 1), "a rival");
                Ok::<(), Error>(())
            },
        );
        assert_eq!(
            result,
            Err(Error::TransactionConflict {
                attempts: max_attempts
            })
        );
        assert_eq!(runs, max_attempts);
        assert_eq!(
            store.snapshot().get(&key!["tx", "never"]).expect("a read"),
            None
        );
    }
}

/// `sum` adds (wrapping at 2^64), `min` and `max` keep the smaller and larger, an absent key
/// takes the operand, and the mutations of one operation apply in order.
pub fn sum_min_max_apply_in_order<B: Backend>(backend: &B) {
    let store = backend.open();
    let n = key!["num", "n"];
    let read = |k: &Key| store.snapshot().get(k).expect("a read").map(|e| e.value);
    assert_commits(store.atomic().sum(&n, 5), "sum on absent");
    assert_eq!(read(&n), Some(Value::U64(5)));
    assert_commits(store.atomic().sum(&n, u64::MAX), "a wrapping sum");
    assert_eq!(read(&n), Some(Value::U64(4)));
    assert_commits(store.atomic().min(&n, 9).min(&key!["num", "min"], 9), "min");
    assert_eq!(read(&n), Some(Value::U64(4)));
    assert_eq!(read(&key!["num", "min"]), Some(Value::U64(9)));
    assert_commits(store.atomic().min(&n, 2), "a smaller min");
    assert_eq!(read(&n), Some(Value::U64(2)));
    assert_commits(store.atomic().max(&n, 1).max(&key!["num", "max"], 3), "max");
    assert_eq!(read(&n), Some(Value::U64(2)));
    assert_eq!(read(&key!["num", "max"]), Some(Value::U64(3)));
    assert_commits(store.atomic().max(&n, 10), "a larger max");
    assert_eq!(read(&n), Some(Value::U64(10)));
    // Mutations of one operation apply in order.
    assert_commits(
        store.atomic().set(&n, 1u64).sum(&n, 2).max(&n, 2),
        "in order",
    );
    assert_eq!(read(&n), Some(Value::U64(3)));
}

/// `sum`, `min` and `max` on a value that is not a `U64` fail with [`Error::NotU64`] naming
/// the mutation's index and its key (also when an earlier mutation of the operation made the
/// value), and the whole operation writes nothing.
pub fn sum_min_max_refuse_non_u64_values<B: Backend>(backend: &B) {
    let store = backend.open();
    let n = key!["num", "n"];
    assert_commits(store.atomic().sum(&n, 5), "a U64");
    let text = key!["num", "text"];
    assert_commits(store.atomic().set(&text, "not a number"), "a bytes value");
    let kinds: [(&'static str, MutationKind); 3] = [
        ("sum", MutationKind::Sum(1)),
        ("min", MutationKind::Min(1)),
        ("max", MutationKind::Max(1)),
    ];
    for (op, kind) in kinds {
        let write = store
            .atomic()
            .set(&key!["num", "new"], "x")
            .sum(&n, 1)
            .mutate_raw(&encode_key(&text), kind);
        assert_rejected(
            &store,
            write,
            Error::NotU64 {
                op,
                index: 2,
                key: KeyBytes::from(encode_key(&text)),
            },
            op,
        );
    }
    // A sum on a value an earlier mutation of the operation made a non-U64 fails too.
    let write = store.atomic().set(&n, "bytes").sum(&n, 1);
    assert_rejected(
        &store,
        write,
        Error::NotU64 {
            op: "sum",
            index: 1,
            key: KeyBytes::from(encode_key(&n)),
        },
        "a sum after a set of bytes",
    );
}

/// A bounded sum (Deno's sum of V8 numbers) that cannot apply fails with the engine's own
/// [`SumError`] on every store, a remote one included (its server names the error by code),
/// and the operation writes nothing.
pub fn bounded_sums_that_cannot_apply_fail_with_the_sum_error<B: Backend>(backend: &B) {
    let store = backend.open();
    let u = key!["sum", "u"];
    let f = key!["sum", "f"];
    // A V8 double: `FF 0F`, tag `N`, 8 bytes little-endian.
    let number = |x: f64| {
        let mut v = vec![0xff, 0x0f, b'N'];
        v.extend_from_slice(&x.to_le_bytes());
        Value::V8(v.into())
    };
    assert_commits(
        store.atomic().sum(&u, 5).set(&f, number(1.5)),
        "a U64 and a Number",
    );
    let bounded = |operand: Value, max: Option<Value>| {
        MutationKind::SumBounded(Box::new(BoundedSum {
            operand,
            min: None,
            max: max.map(|m| match m {
                Value::V8(bytes) => bytes,
                other => panic!("a V8 bound, not {other:?}"),
            }),
            clamp: false,
        }))
    };
    let cases = [
        (
            u.clone(),
            bounded(number(1.0), None),
            SumError::KindMismatch {
                stored: "KvU64",
                operand: "Number",
            },
        ),
        (
            f.clone(),
            bounded(number(2.0), Some(number(3.0))),
            SumError::OutOfRange,
        ),
    ];
    for (at, kind, expected) in cases {
        let write = store
            .atomic()
            .set(&key!["sum", "beside"], "x")
            .mutate_raw(&encode_key(&at), kind);
        assert_rejected(
            &store,
            write,
            Error::Sum(expected.clone()),
            &expected.to_string(),
        );
    }
}

/// [`CONTENTION_THREADS`] threads each commit [`CONTENTION_ROUNDS`] read-modify-write
/// increments of one counter through `store.transaction`: the final value is exact, so no
/// increment was lost or applied twice.
pub fn transactions_under_contention_lose_no_increment<B: Backend>(backend: &B) {
    let store = backend.open();
    let counter = key!["contention", "counter"];
    let options = TransactionOptions {
        max_attempts: 1000,
        ..TransactionOptions::default()
    };
    let barrier = Barrier::new(CONTENTION_THREADS);
    std::thread::scope(|s| {
        for _ in 0..CONTENTION_THREADS {
            let (store, barrier, counter, options) = (&store, &barrier, &counter, &options);
            s.spawn(move || {
                barrier.wait();
                for _ in 0..CONTENTION_ROUNDS {
                    store
                        .transaction_with(options, |tx| {
                            let n = tx.get(counter)?.and_then(|e| e.value.as_u64()).unwrap_or(0);
                            tx.set(counter, n + 1);
                            Ok::<(), Error>(())
                        })
                        .expect("an increment commits");
                }
            });
        }
    });
    let total = store
        .snapshot()
        .get(&counter)
        .expect("a read")
        .and_then(|e| e.value.as_u64());
    assert_eq!(total, Some((CONTENTION_THREADS * CONTENTION_ROUNDS) as u64));
}

/// Read-modify-writes over a listed range from several threads at once: each transaction
/// lists a log and appends the entry after its last one. Serializable transactions never
/// write two entries at one position, so the log ends with exactly one entry per
/// transaction, at positions `0..n`. And the classic write skew: each transaction of a
/// rota lists who is on call and takes itself off only if another stays; at least one must
/// stay.
///
/// Without snapshots: each such transaction is refused with [`Error::Unsupported`].
pub fn read_modify_writes_over_a_listed_range_are_serializable<B: Backend>(backend: &B) {
    let store = backend.open();
    let log = key!["rmw", "log"];
    let options = TransactionOptions {
        max_attempts: 1000,
        ..TransactionOptions::default()
    };
    let append = |store: &S2<B>, who: u64| {
        store.transaction_with(&options, |tx| {
            let last = tx.list(
                &Selector::prefix(&log),
                ListOptions {
                    limit: Some(1),
                    reverse: true,
                    ..ListOptions::default()
                },
            )?;
            let next = match last.first() {
                None => 0,
                Some(e) => e.value.as_u64().map_or(0, |v| (v & 0xffff_ffff) + 1),
            };
            let mut k = log.clone();
            k.push(next).expect("a short key");
            tx.set(&k, Value::U64((who << 32) | next));
            Ok::<(), Error>(())
        })
    };
    if !backend.has_snapshots() {
        assert_unsupported(append(&store, 0), "a listing transaction");
        assert_eq!(dump(&store), vec![], "a refused transaction writes nothing");
        return;
    }
    let rounds = CONTENTION_ROUNDS / 2;
    let barrier = Barrier::new(CONTENTION_THREADS);
    std::thread::scope(|s| {
        for t in 0..CONTENTION_THREADS as u64 {
            let (store, barrier, append) = (&store, &barrier, &append);
            s.spawn(move || {
                barrier.wait();
                for _ in 0..rounds {
                    append(store, t).expect("an append commits");
                }
            });
        }
    });
    let entries = store
        .snapshot()
        .scan(
            &Selector::prefix(&log).byte_range().expect("a short prefix"),
            false,
            DUMP_MAX,
        )
        .expect("a scan");
    let n = CONTENTION_THREADS * rounds;
    assert_eq!(entries.len(), n, "one entry per transaction");
    let mut per_thread: BTreeMap<u64, usize> = BTreeMap::new();
    for (pos, e) in entries.iter().enumerate() {
        let mut want = log.clone();
        want.push(pos as u64).expect("a short key");
        assert_eq!(e.key.as_slice(), encode_key(&want).as_slice());
        let v = e.value.as_u64().expect("a U64");
        assert_eq!(
            v & 0xffff_ffff,
            pos as u64,
            "the entry read its predecessor"
        );
        *per_thread.entry(v >> 32).or_default() += 1;
    }
    assert!(per_thread.values().all(|c| *c == rounds), "{per_thread:?}");

    // Write skew: everyone on call tries to go off at once; one must stay.
    let rota = key!["rmw", "oncall"];
    for round in 0..10u64 {
        let write = (0..CONTENTION_THREADS as u64).fold(store.atomic(), |a, t| {
            a.set(&key!["rmw", "oncall", t], round)
        });
        assert_commits(write, "everyone on call");
        let barrier = Barrier::new(CONTENTION_THREADS);
        std::thread::scope(|s| {
            for t in 0..CONTENTION_THREADS as u64 {
                let (store, barrier, rota, options) = (&store, &barrier, &rota, &options);
                s.spawn(move || {
                    barrier.wait();
                    store
                        .transaction_with(options, |tx| {
                            let on = tx.list(&Selector::prefix(rota), ListOptions::default())?;
                            let me = encode_key(&key!["rmw", "oncall", t]);
                            if on.len() > 1 && on.iter().any(|e| e.key.as_slice() == me.as_slice())
                            {
                                tx.delete(&key!["rmw", "oncall", t]);
                            }
                            Ok::<(), Error>(())
                        })
                        .expect("a rota change commits");
                });
            }
        });
        let left = store
            .snapshot()
            .scan(
                &Selector::prefix(&rota)
                    .byte_range()
                    .expect("a short prefix"),
                false,
                DUMP_MAX,
            )
            .expect("a scan");
        assert_eq!(left.len(), 1, "round {round}: exactly one stays on call");
    }
}

/// A value set with a short [`Expiry::In`] is gone from `get`, `get_many`, lists and scans
/// once its deadline has passed, a check sees it absent, and a transaction reads it as
/// absent; a value with a long expiry and one without stay. An [`Expiry::At`] in the past
/// leaves the key absent at once.
pub fn expired_values_vanish_from_reads_and_checks<B: Backend>(backend: &B) {
    let store = backend.open();
    let (short, long, kept) = (
        key!["exp", "short"],
        key!["exp", "long"],
        key!["exp", "kept"],
    );
    let start = now_ms();
    let vs = assert_commits(
        store
            .atomic()
            .set_with_expiry(&short, "soon gone", SHORT_EXPIRY)
            .set_with_expiry(&long, "stays", Duration::from_secs(3600))
            .set(&kept, "stays"),
        "values with expiries",
    );
    let after_commit = now_ms();
    let e = store
        .snapshot()
        .get(&long)
        .expect("a read")
        .expect("far from its deadline");
    // A plain KV Connect server does not say when a value expires; one that does must be right.
    if let Some(deadline) = e.expires_at {
        assert!(
            deadline >= start + 3_600_000 && deadline <= after_commit + 3_600_000,
            "the deadline {deadline} is an hour after the commit ({start}..{after_commit})"
        );
    }
    let past = assert_commits(
        store.atomic().mutate_raw(
            &encode_key(&key!["exp", "past"]),
            MutationKind::Set {
                value: Value::from("never seen"),
                expiry: Some(Expiry::At(start.saturating_sub(1000))),
            },
        ),
        "a deadline in the past",
    );
    assert!(past > vs);
    assert_eq!(
        store.snapshot().get(&key!["exp", "past"]).expect("a read"),
        None
    );

    let short_ms = u64::try_from(SHORT_EXPIRY.as_millis()).unwrap_or(u64::MAX);
    wait_until_past(after_commit + short_ms);
    let snapshot = store.snapshot();
    assert_eq!(
        snapshot.get(&short).expect("a read"),
        None,
        "get after the deadline"
    );
    let got = store
        .get_many(&[short.clone(), long.clone(), kept.clone()])
        .expect("get_many");
    assert_eq!(
        got.iter().map(Option::is_some).collect::<Vec<_>>(),
        [false, true, true]
    );
    let listed: Vec<Vec<u8>> = store
        .list(&Selector::prefix(&key!["exp"]), ListOptions::default())
        .expect("a list")
        .map(|e| e.expect("an entry").key.to_vec())
        .collect();
    assert_eq!(listed, vec![encode_key(&kept), encode_key(&long)]);
    // Checks see it absent.
    let result = store
        .atomic()
        .check(&short, Some(vs))
        .set(&key!["exp", "x"], "x")
        .commit()
        .expect("a valid operation");
    let conflict = result.conflict().expect("its versionstamp is gone");
    assert_eq!(conflict.failed_checks.len(), 1);
    assert_eq!(conflict.failed_checks[0].actual, None);
    assert_commits(
        store.atomic().check(&short, None),
        "absent after the deadline",
    );
    // A transaction reads it as absent and can write it again.
    store
        .transaction(|tx| {
            assert_eq!(tx.get(&short)?, None);
            tx.set(&short, "again");
            Ok::<(), Error>(())
        })
        .expect("a transaction");
    let again = store
        .snapshot()
        .get(&short)
        .expect("a read")
        .expect("set again");
    assert_eq!(again.value, Value::from("again"));
    assert_eq!(again.expires_at, None);
}

/// A watch yields the current state at once, then a new state once a watched key changes
/// (a commit on this thread before waiting, and one from another thread while it waits).
pub fn watch_yields_at_once_then_wakes_on_a_commit<B: Backend>(backend: &B) {
    let store = backend.open();
    let (a, b) = (key!["watch", "a"], key!["watch", "b"]);
    let vb = assert_commits(store.atomic().set(&b, "b"), "b");
    let keys = vec![
        KeyBytes::from(encode_key(&a)),
        KeyBytes::from(encode_key(&b)),
    ];
    let mut watch = store.watch_raw(keys).expect("a watch");
    let first = block_on(watch.next()).expect("the first state at once");
    assert_eq!(first.changed, vec![true, true]);
    assert_eq!(first.entries[0], None);
    assert_eq!(first.entries[1].as_ref().map(|e| e.versionstamp), Some(vb));

    // Waits for a state where `a` has stamp `want` (states in between may be collapsed).
    let mut wait_for = |want: Versionstamp| {
        for _ in 0..100 {
            let update = block_on(watch.next()).expect("the store is open");
            let stamp = update.entries[0].as_ref().map(|e| e.versionstamp);
            if stamp == Some(want) {
                assert!(update.changed[0]);
                return update;
            }
        }
        panic!("the watch never showed a at {want}");
    };
    let va = assert_commits(store.atomic().set(&a, "1"), "a commit before waiting");
    let update = wait_for(va);
    assert_eq!(update.entries[1].as_ref().map(|e| e.versionstamp), Some(vb));
    std::thread::scope(|s| {
        let committer = s.spawn(|| assert_commits(store.atomic().set(&a, "2"), "a from elsewhere"));
        let va2 = committer.join().expect("the committer");
        let update = wait_for(va2);
        assert_eq!(
            update.entries[0].as_ref().map(|e| e.value.clone()),
            Some(Value::from("2"))
        );
    });
}

/// One `#[test]` per property of the [`Store`] contract, run on the backend `$backend` (an
/// expression, evaluated once per test).
///
/// ```text
/// tuplekv_testkit::store_contract_tests!(tuplekv_testkit::contract::backends::InMemory);
/// ```
#[macro_export]
macro_rules! store_contract_tests {
    ($backend:expr) => {
        $crate::contract_tests!(
            $backend;
            $crate::contract;
            snapshot_stays_put_while_commits_follow,
            checks_pass_or_fail_with_their_index,
            versionstamps_increase_and_are_never_shared,
            range_checks_rerun_transactions_that_listed_a_changed_range,
            write_key_size_limit_holds_at_and_past_the_limit,
            read_key_size_limit_holds_at_and_past_the_limit,
            value_size_limit_holds_at_and_past_the_limit,
            check_count_limit_holds_at_and_past_the_limit,
            mutation_count_limit_holds_at_and_past_the_limit,
            total_mutation_size_limit_holds_at_and_past_the_limit,
            total_key_size_limit_holds_at_and_past_the_limit,
            get_many_limit_holds_at_and_past_the_limit,
            watch_key_limits_hold_at_and_past_the_limit,
            list_limits_hold_at_and_past_the_limit,
            expiry_limit_holds_at_and_past_the_limit,
            transaction_attempts_limit_ends_a_transaction_that_always_conflicts,
            sum_min_max_apply_in_order,
            sum_min_max_refuse_non_u64_values,
            bounded_sums_that_cannot_apply_fail_with_the_sum_error,
            transactions_under_contention_lose_no_increment,
            read_modify_writes_over_a_listed_range_are_serializable,
            expired_values_vanish_from_reads_and_checks,
            watch_yields_at_once_then_wakes_on_a_commit,
        );
    };
}

/// One `#[test]` per named function of the module `$suite` (a path), each calling it with
/// `&$backend`. The building block of the suites' macros.
#[macro_export]
macro_rules! contract_tests {
    ($backend:expr; $suite:path; $($name:ident),+ $(,)?) => {
        $(
            #[test]
            fn $name() {
                use $suite as suite;
                let backend = $backend;
                suite::$name(&backend);
            }
        )+
    };
}
