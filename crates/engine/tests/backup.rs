//! Online backup (`Database::backup`) and whole-directory creation (`create_database`): a
//! backup taken while writers go on opens to exactly one committed state; in-memory databases
//! back up to a durable copy with deadlines and stamps kept; an existing target is refused and
//! nothing is left behind, whatever fails.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tuplekv_engine::codec::encode_key;
use tuplekv_engine::durable::create_database;
use tuplekv_engine::durable::fs::{Faults, FaultyFs};
use tuplekv_engine::{
    Database, Entry, Error, Key, KeyBytes, ListOptions, Selector, Value, Versionstamp, key,
};
use tuplekv_testkit::db::{dump, options};

const ACCOUNTS: u64 = 8;
const OPENING_BALANCE: u64 = 1000;
/// Commits made before the backup starts, and again while and after it runs.
const COMMITS_AROUND_BACKUP: u64 = 200;

fn balance(db: &Database, account: u64) -> u64 {
    db.get(&key!["balance", account])
        .unwrap()
        .and_then(|e| e.value.as_u64())
        .unwrap()
}

fn count_of(entry: Option<Entry>) -> u64 {
    entry.and_then(|e| e.value.as_u64()).unwrap_or(0)
}

/// One transfer of `amount` from `from` to `to`, logged as `["log", n]` with the new count
/// `n`, in one transaction.
fn transfer(db: &Database, from: u64, to: u64, amount: u64) -> Result<(), Error> {
    db.transaction(|tx| {
        let a = tx
            .get(&key!["balance", from])?
            .and_then(|e| e.value.as_u64());
        let b = tx.get(&key!["balance", to])?.and_then(|e| e.value.as_u64());
        let (a, b) = (a.unwrap_or(0), b.unwrap_or(0));
        let n = count_of(tx.get(&key!["count"])?) + 1;
        let amount = amount.min(a);
        tx.set(&key!["balance", from], a - amount);
        tx.set(&key!["balance", to], b + amount);
        tx.set(&key!["count"], n);
        let log = [from.to_be_bytes(), to.to_be_bytes(), amount.to_be_bytes()].concat();
        tx.set(&key!["log", n], log.as_slice());
        Ok::<_, Error>(())
    })
}

fn seed(db: &Database) {
    let mut atomic = db.atomic();
    for account in 0..ACCOUNTS {
        atomic = atomic.set(&key!["balance", account], OPENING_BALANCE);
    }
    assert!(atomic.commit().unwrap().is_committed());
}

/// Checks that `copy` is exactly the state after some number `n` of transfers: the count, the
/// `n` log records, the balances they produce; the count's stamp is that of the source's
/// `n`th transfer, and nothing in the copy is newer than `at`.
fn check_one_committed_state(copy: &Database, source: &Database, at: Versionstamp) {
    let count = copy.get(&key!["count"]).unwrap().expect("some transfers");
    let n = count.value.as_u64().unwrap();
    let mut balances = vec![OPENING_BALANCE; ACCOUNTS as usize];
    let logs: Vec<Entry> = copy
        .list(&Selector::prefix(&key!["log"]), ListOptions::default())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(logs.len() as u64, n, "one log record per transfer counted");
    for (i, entry) in logs.iter().enumerate() {
        assert_eq!(entry.key.decode().unwrap(), key!["log", i as u64 + 1]);
        let bytes = entry.value.as_bytes().unwrap();
        let word = |i: usize| u64::from_be_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        balances[word(0) as usize] -= word(2);
        balances[word(1) as usize] += word(2);
    }
    for account in 0..ACCOUNTS {
        assert_eq!(balance(copy, account), balances[account as usize]);
    }
    assert_eq!(balances.iter().sum::<u64>(), ACCOUNTS * OPENING_BALANCE);
    // Log records are never overwritten: the source's `["log", n]` carries the stamp of the
    // transfer that made the count `n`.
    let nth = source
        .get(&key!["log", n])
        .unwrap()
        .expect("every transfer is logged");
    assert_eq!(
        count.versionstamp, nth.versionstamp,
        "the copy is the state after transfer {n}"
    );
    assert!(dump(copy).iter().all(|(_, _, vs)| *vs <= at));
    assert_eq!(count.versionstamp, at, "every transfer writes the count");
}

/// Runs two writers doing transfers, takes a backup of `db` into `target` once
/// [`COMMITS_AROUND_BACKUP`] transfers are done, lets them do as many more, stops them.
fn backup_under_writers(db: &Database, target: &Path) -> Versionstamp {
    seed(db);
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let start = Barrier::new(3);
    std::thread::scope(|s| {
        for writer in 0..2u64 {
            let (done, stop, start) = (&done, &stop, &start);
            s.spawn(move || {
                start.wait();
                let mut i = writer;
                while !stop.load(Ordering::Acquire) {
                    i += 1;
                    let (from, to) = (i % ACCOUNTS, (i * 7 + 3) % ACCOUNTS);
                    match transfer(db, from, to, i % 13 + 1) {
                        Ok(()) => {
                            done.fetch_add(1, Ordering::AcqRel);
                        }
                        Err(Error::TransactionConflict { .. }) => {}
                        Err(e) => panic!("transfer failed: {e}"),
                    }
                }
            });
        }
        start.wait();
        while done.load(Ordering::Acquire) < COMMITS_AROUND_BACKUP {
            std::thread::yield_now();
        }
        let at = db.backup(target).unwrap();
        let after = done.load(Ordering::Acquire) + COMMITS_AROUND_BACKUP;
        while done.load(Ordering::Acquire) < after {
            std::thread::yield_now();
        }
        stop.store(true, Ordering::Release);
        at
    })
}

fn check_backup_of_live(db: &Database) {
    let parent = tempfile::tempdir().unwrap();
    let target = parent.path().join("copy");
    let at = backup_under_writers(db, &target);
    assert!(
        db.current_versionstamp() > at,
        "writers went on after the backup"
    );
    let copy = Database::open(&target, options()).unwrap();
    check_one_committed_state(&copy, db, at);
    let next = copy.set(&key!["after"], b"x").unwrap();
    assert!(next > at, "new commits number above the copied state");
    copy.close().unwrap();
    assert_eq!(leftovers(parent.path()), ["copy"]);
}

#[test]
fn a_backup_under_concurrent_writers_opens_to_one_committed_state() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    check_backup_of_live(&db);
    db.close().unwrap();
}

#[test]
fn a_backup_of_an_in_memory_database_under_writers_is_one_committed_state() {
    check_backup_of_live(&Database::with_options(options()));
}

#[test]
fn a_backup_of_an_in_memory_database_keeps_stamps_deadlines_and_value_kinds() {
    let db = Database::in_memory();
    db.set(&key!["bytes"], b"raw").unwrap();
    db.set(&key!["u64"], 42u64).unwrap();
    let v8 = Value::V8(vec![0xff, 0x0f, 0x22].into());
    assert!(
        db.atomic()
            .set(&key!["v8"], v8)
            .commit()
            .unwrap()
            .is_committed()
    );
    let hour = Duration::from_secs(3600);
    let later = db.atomic().set_with_expiry(&key!["later"], b"x", hour);
    assert!(later.commit().unwrap().is_committed());
    db.delete(&key!["bytes"]).unwrap();
    let deadline = db.get(&key!["later"]).unwrap().unwrap().expires_at;
    assert!(deadline.is_some());
    let parent = tempfile::tempdir().unwrap();
    let target = parent.path().join("copy");
    let at = db.backup(&target).unwrap();
    assert_eq!(at, db.current_versionstamp());

    let copy = Database::open(&target, options()).unwrap();
    assert_eq!(dump(&copy), dump(&db));
    assert_eq!(
        copy.get(&key!["later"]).unwrap().unwrap().expires_at,
        deadline
    );
    assert!(copy.set(&key!["n"], 1u64).unwrap() > at);
    copy.close().unwrap();
}

#[test]
fn a_backup_of_an_empty_database_opens_empty() {
    let parent = tempfile::tempdir().unwrap();
    let target = parent.path().join("copy");
    assert_eq!(
        Database::in_memory().backup(&target).unwrap(),
        Versionstamp::ZERO
    );
    let copy = Database::open(&target, options()).unwrap();
    assert!(dump(&copy).is_empty());
    copy.close().unwrap();
}

#[test]
fn a_backup_goes_into_an_empty_directory_or_a_missing_path_with_parents() {
    let db = Database::in_memory();
    db.set(&key!["k"], b"v").unwrap();
    let parent = tempfile::tempdir().unwrap();
    let empty = parent.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    db.backup(&empty).unwrap();
    let nested = parent.path().join("a").join("b").join("copy");
    db.backup(&nested).unwrap();
    for dir in [&empty, &nested] {
        let copy = Database::open(dir, options()).unwrap();
        assert_eq!(dump(&copy), dump(&db));
        copy.close().unwrap();
    }
}

/// The names in `dir`, sorted: a refused or failed backup leaves no temporary directory.
fn leftovers(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_backup_refuses_a_non_empty_directory_or_a_file_and_writes_nothing() {
    let db = Database::in_memory();
    db.set(&key!["k"], b"v").unwrap();
    let parent = tempfile::tempdir().unwrap();
    let full = parent.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("precious"), b"keep me").unwrap();
    let file = parent.path().join("file");
    std::fs::write(&file, b"a file").unwrap();

    for target in [&full, &file] {
        let err = db.backup(target).unwrap_err();
        assert!(
            matches!(&err, Error::TargetExists { path } if path == target),
            "{err}"
        );
        assert!(err.to_string().contains("already exists"), "{err}");
    }
    assert_eq!(std::fs::read(full.join("precious")).unwrap(), b"keep me");
    assert_eq!(std::fs::read(&file).unwrap(), b"a file");
    assert_eq!(leftovers(parent.path()), ["file", "full"]);
}

#[test]
fn a_backup_refuses_the_live_database_directory_itself() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    db.set(&key!["k"], b"v").unwrap();
    assert!(matches!(
        db.backup(dir.path()),
        Err(Error::TargetExists { .. })
    ));
    db.close().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    assert_eq!(
        db.get(&key!["k"]).unwrap().unwrap().value,
        Value::from(b"v")
    );
    db.close().unwrap();
}

#[test]
fn a_backup_of_a_restored_backup_is_the_same_state() {
    let db = Database::in_memory();
    for i in 0..100u64 {
        db.set(&key!["k", i], i).unwrap();
    }
    let parent = tempfile::tempdir().unwrap();
    db.backup(parent.path().join("one")).unwrap();
    let one = Database::open(parent.path().join("one"), options()).unwrap();
    one.backup(parent.path().join("two")).unwrap();
    let two = Database::open(parent.path().join("two"), options()).unwrap();
    assert_eq!(dump(&two), dump(&db));
    one.close().unwrap();
    two.close().unwrap();
}

fn entry(key: &Key, value: impl Into<Value>, version: u64) -> Entry {
    Entry {
        key: KeyBytes::from(encode_key(key).as_slice()),
        value: value.into(),
        versionstamp: Versionstamp::from_version(version),
        expires_at: None,
    }
}

#[test]
fn create_database_keeps_stamps_and_numbers_new_commits_above_last() {
    let parent = tempfile::tempdir().unwrap();
    let target = parent.path().join("made");
    let mut expired = entry(&key!["b", "expired"], b"gone", 3);
    expired.expires_at = Some(1);
    let entries = vec![
        entry(&key!["a"], 5u64, 2),
        expired,
        entry(&key!["c"], Value::V8(vec![0xff, 0x0f].into()), 4),
    ];
    create_database(&target, Versionstamp::from_version(40), entries).unwrap();
    let db = Database::open(&target, options()).unwrap();
    let got: Vec<_> = dump(&db).into_iter().map(|(_, v, vs)| (v, vs)).collect();
    assert_eq!(
        got,
        [
            (Value::U64(5), Versionstamp::from_version(2)),
            (
                Value::V8(vec![0xff, 0x0f].into()),
                Versionstamp::from_version(4)
            ),
        ]
    );
    assert!(db.set(&key!["d"], b"x").unwrap() > Versionstamp::from_version(40));
    db.close().unwrap();
}

#[test]
fn create_database_refuses_bad_entries_and_leaves_nothing() {
    let parent = tempfile::tempdir().unwrap();
    let target = parent.path().join("made");
    let last = Versionstamp::from_version(10);
    let mut odd_stamp = entry(&key!["a"], 1u64, 1);
    odd_stamp.versionstamp = Versionstamp::from_bytes([0, 0, 0, 0, 0, 0, 0, 1, 0, 1]);
    let cases: Vec<(Vec<Entry>, &str)> = vec![
        (
            vec![entry(&key!["b"], 1u64, 1), entry(&key!["a"], 1u64, 2)],
            "ascending",
        ),
        (
            vec![entry(&key!["a"], 1u64, 1), entry(&key!["a"], 1u64, 2)],
            "ascending",
        ),
        (vec![entry(&key!["a"], 1u64, 11)], "above the last"),
        (vec![entry(&key!["a"], 1u64, 0)], "zero"),
        (vec![odd_stamp], "last two bytes"),
        (
            vec![entry(&key!["a"], vec![0u8; 65_537].as_slice(), 1)],
            "Value too large",
        ),
    ];
    for (entries, expected) in cases {
        let err = create_database(&target, last, entries).unwrap_err();
        assert!(err.to_string().contains(expected), "{err}");
        assert!(!target.exists());
    }
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("x"), b"x").unwrap();
    assert!(matches!(
        create_database(&target, last, []),
        Err(Error::TargetExists { .. })
    ));
    assert_eq!(leftovers(parent.path()), ["made"]);
}

/// A durable database on a file system whose faults the test sets.
fn faulty_db(dir: &Path) -> (Database, std::sync::Arc<Faults>) {
    let faults = Faults::new();
    let options = tuplekv_engine::Options {
        fs: std::sync::Arc::new(FaultyFs::new(std::sync::Arc::clone(&faults))),
        ..options()
    };
    let db = Database::open(dir, options).unwrap();
    for i in 0..100u64 {
        db.set(&key!["k", i], vec![7u8; 200].as_slice()).unwrap();
    }
    (db, faults)
}

#[test]
fn a_backup_that_fails_midway_leaves_nothing_under_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let parent = tempfile::tempdir().unwrap();
    let target = parent.path().join("copy");
    let (db, faults) = faulty_db(dir.path());

    faults.disk_full_after(1000);
    assert!(matches!(db.backup(&target), Err(Error::Io(_))));
    faults.disk_has_space();
    faults.fail_rename(true);
    assert!(matches!(db.backup(&target), Err(Error::Io(_))));
    faults.fail_rename(false);
    assert!(!target.exists());
    assert!(
        leftovers(parent.path()).is_empty(),
        "no temporary directory"
    );

    db.backup(&target).unwrap();
    let copy = Database::open(&target, options()).unwrap();
    assert_eq!(dump(&copy), dump(&db));
    copy.close().unwrap();
    db.close().unwrap();
}
