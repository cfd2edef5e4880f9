//! `Store::commit_async` on a durable database: the caller only applies and queues its write
//! (it returns while a sync is held), the future resolves once the batch is durable, queued
//! asynchronous commits share one sync led by the flusher thread, a failed sync fails them
//! and every later write, and a loser checked against an unpublished winner answers only once
//! the winner is durable.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::task::Poll;

use tuplekv_engine::durable::fs::Faults;
use tuplekv_engine::{AtomicWrite, CommitResult, Database, Durability, Error, Store, Value, key};
use tuplekv_testkit::db::keys;
use tuplekv_testkit::durable::faulty;
use tuplekv_testkit::executor::{block_on, poll_once};

fn set_of(db: &Database, i: u64) -> AtomicWrite {
    db.atomic().set(&key!["t", i], i).as_write().clone()
}

#[test]
fn async_commits_queued_behind_a_sync_share_the_next_one_and_are_durable() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
    db.set(&key!["first"], 0u64).unwrap();
    let before = faults.syncs();
    faults.hold_syncs();
    std::thread::scope(|s| {
        let first = s.spawn(|| db.set(&key!["t", 0u64], 0u64).unwrap());
        faults.wait_for_held_syncs(1);
        // Each call returns while the sync is held: the caller never waits for the disk.
        let mut futures: Vec<_> = (1..8u64)
            .map(|i| Box::pin(db.commit_async(set_of(&db, i))))
            .collect();
        for f in &mut futures {
            assert!(
                poll_once(f).is_pending(),
                "acknowledged before it was durable"
            );
        }
        faults.release_syncs();
        first.join().unwrap();
        for f in futures {
            assert!(block_on(f).unwrap().is_committed());
        }
    });
    assert_eq!(
        faults.syncs() - before,
        2,
        "one for the first, one for the seven"
    );
    drop(db);
    let reopened = Database::open(dir.path(), tuplekv_testkit::db::options()).unwrap();
    for i in 0..8u64 {
        let got = reopened.get(&key!["t", i]).unwrap().map(|e| e.value);
        assert_eq!(
            got,
            Some(Value::U64(i)),
            "commit {i} was acknowledged, not durable"
        );
    }
}

#[test]
fn async_commits_alone_are_flushed_by_the_flusher_thread() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
    for round in 0..50u64 {
        let futures: Vec<_> = (0..4u64)
            .map(|i| db.commit_async(set_of(&db, round * 4 + i)))
            .collect();
        for f in futures {
            assert!(block_on(f).unwrap().is_committed());
        }
    }
    assert_eq!(keys(&db).len(), 200);
}

#[test]
fn a_failed_sync_fails_the_async_commits_of_its_batch_and_every_later_write() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
    assert!(
        block_on(db.commit_async(set_of(&db, 0)))
            .unwrap()
            .is_committed()
    );
    faults.fail_next_syncs(1);
    let failed: Result<CommitResult, Error> = block_on(db.commit_async(set_of(&db, 1)));
    assert!(failed.is_err());
    assert_eq!(db.get(&key!["t", 1u64]).unwrap(), None, "rolled back");
    let later = block_on(db.commit_async(set_of(&db, 2))).unwrap_err();
    assert!(
        later.to_string().contains("stopped accepting writes"),
        "{later}"
    );
    drop(db);
    let reopened = Database::open(dir.path(), tuplekv_testkit::db::options()).unwrap();
    assert!(reopened.get(&key!["t", 0u64]).unwrap().is_some());
    assert_eq!(reopened.get(&key!["t", 1u64]).unwrap(), None);
}

/// The write that loses to a concurrent `set` of `["k"]`: `["k"]` set to `n` if absent.
fn set_if_absent(db: &Database, n: u64) -> tuplekv_engine::AtomicWrite {
    db.atomic()
        .check(&key!["k"], None)
        .set(&key!["k"], n)
        .as_write()
        .clone()
}

#[test]
fn an_async_loser_answers_only_once_the_winner_is_durable_and_then_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
    faults.hold_syncs();
    std::thread::scope(|s| {
        let winner = s.spawn(|| db.set(&key!["k"], 1u64).unwrap());
        faults.wait_for_held_syncs(1);
        let write = set_if_absent(&db, 2);
        let mut loser = Box::pin(db.commit_async(write));
        assert!(
            poll_once(&mut loser).is_pending(),
            "answered against an unsynced winner"
        );
        faults.release_syncs();
        winner.join().unwrap();
        assert!(!block_on(loser).unwrap().is_committed());
    });
    let got = db.get(&key!["k"]).unwrap().map(|e| e.value);
    assert_eq!(got, Some(Value::U64(1)));
}

#[test]
fn an_async_loser_against_a_batch_whose_sync_fails_gets_the_stop_not_a_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
    faults.hold_syncs();
    std::thread::scope(|s| {
        let winner = s.spawn(|| db.set(&key!["k"], 1u64));
        faults.wait_for_held_syncs(1);
        let write = set_if_absent(&db, 2);
        let mut loser = Box::pin(db.commit_async(write));
        assert!(poll_once(&mut loser).is_pending());
        faults.fail_next_syncs(1);
        faults.release_syncs();
        assert!(winner.join().unwrap().is_err());
        let err = block_on(loser).unwrap_err();
        assert!(
            err.to_string().contains("stopped accepting writes"),
            "{err}"
        );
    });
    assert_eq!(db.get(&key!["k"]).unwrap(), None);
}

#[test]
fn an_async_commit_in_memory_is_done_when_returned() {
    let db = Database::in_memory();
    let mut f = Box::pin(db.commit_async(set_of(&db, 1)));
    assert!(matches!(poll_once(&mut f), Poll::Ready(Ok(r)) if r.is_committed()));
}

/// A set of `["k"]` to `n`, blind.
fn set_k(n: u64) -> AtomicWrite {
    let db = Database::in_memory();
    db.atomic().set(&key!["k"], n).as_write().clone()
}

#[test]
fn an_async_loser_runs_again_when_its_winner_is_rolled_back_even_after_a_later_publish() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
    faults.hold_syncs();
    std::thread::scope(|s| {
        let leader = s.spawn(|| db.set(&key!["x"], 0u64).unwrap());
        faults.wait_for_held_syncs(1);
        // Applied (unpublished) before `commit_async` returns, queued behind the held sync.
        let winner = db.commit_async(set_k(1));
        let mut loser = Box::pin(db.commit_async(set_if_absent(&db, 2)));
        assert!(
            poll_once(&mut loser).is_pending(),
            "it lost to an unsynced winner"
        );
        faults.disk_full_after(0);
        faults.release_syncs();
        leader.join().unwrap();
        assert!(
            block_on(winner).is_err(),
            "the winner's batch met a full disk"
        );
        faults.disk_has_space();
        // A later commit publishes a version above the one the loser lost against.
        db.set(&key!["y"], 3u64).unwrap();
        let result = block_on(loser).unwrap();
        assert!(
            result.is_committed(),
            "it lost to a write that never happened"
        );
    });
    assert_eq!(
        db.get(&key!["k"]).unwrap().map(|e| e.value),
        Some(Value::U64(2))
    );
}

#[test]
fn an_async_commit_retried_after_the_database_closed_fails_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
    faults.hold_syncs();
    let leader = {
        let db = db.clone();
        std::thread::spawn(move || db.set(&key!["x"], 0u64).unwrap())
    };
    faults.wait_for_held_syncs(1);
    let winner = db.commit_async(set_k(1));
    let mut loser = Box::pin(db.commit_async(set_if_absent(&db, 2)));
    assert!(poll_once(&mut loser).is_pending());
    // The leader's thread holds the last handle: the database closes when it ends.
    drop(db);
    faults.disk_full_after(0);
    faults.release_syncs();
    leader.join().unwrap();
    assert!(block_on(winner).is_err());
    faults.disk_has_space();
    // The directory is released: another handle may open it meanwhile.
    let reopened = Database::open(dir.path(), Default::default()).unwrap();
    assert_eq!(block_on(loser).unwrap_err(), Error::Closed);
    assert_eq!(reopened.get(&key!["k"]).unwrap(), None, "nothing written");
    drop(reopened);
    let again = Database::open(dir.path(), Default::default()).unwrap();
    assert_eq!(again.get(&key!["k"]).unwrap(), None);
}
