//! `RemoteStore` against denokv, a KV Connect server without tuplekv's extension: the index
//! write path and both sequence modes must work on plain KV Connect, and every operation that
//! needs several reads of one snapshot must fail with `Error::Unsupported`, having written
//! nothing.
//!
//! Each test runs only when `TUPLEKV_DENOKV_URL` (and `TUPLEKV_DENOKV_TOKEN`) name a running
//! denokv; `cargo xtask remote-denokv` starts one and sets them. Without them each test prints
//! that it was skipped and passes, so `cargo test` needs no denokv. Every test writes under
//! its own fresh key prefix, so the tests share one server and may run again on the same data.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tuplekv_engine::{Error, ListOptions, ReadView, Selector, Store, key};
use tuplekv_index::Collection;
use tuplekv_remote::RemoteStore;
use tuplekv_sequence::{Mode, SequenceOptions, Sequences};

/// The variable naming the denokv server (`http://127.0.0.1:PORT`).
const URL_ENV: &str = "TUPLEKV_DENOKV_URL";
/// The variable holding its access token.
const TOKEN_ENV: &str = "TUPLEKV_DENOKV_TOKEN";
/// Threads writing at once in the concurrent tests.
const THREADS: usize = 4;

/// A store on the denokv the environment names, or `None` (with a printed notice) when it
/// names none.
fn denokv(test: &str) -> Option<RemoteStore> {
    let Ok(url) = std::env::var(URL_ENV) else {
        eprintln!(
            "skipped {test}: {URL_ENV} is not set (`cargo xtask remote-denokv` starts denokv \
             and sets it)"
        );
        return None;
    };
    let token =
        std::env::var(TOKEN_ENV).unwrap_or_else(|_| panic!("{URL_ENV} without {TOKEN_ENV}"));
    Some(RemoteStore::connect(&url, &token).expect("connects to denokv"))
}

/// A name no earlier run or other test used: `base` with this process's id, a counter and the
/// time.
fn fresh(base: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{base}_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Whether `err` is the engine's `Unsupported`.
fn is_unsupported(err: &Error) -> bool {
    matches!(err, Error::Unsupported { .. })
}

/// Whether `err` is the index layer's wrapping of `Unsupported`.
fn is_unsupported_index(err: &tuplekv_index::Error) -> bool {
    matches!(err, tuplekv_index::Error::Store(e) if is_unsupported(e))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: u64,
    email: String,
    team: String,
}

fn user(id: u64, email: &str) -> User {
    User {
        id,
        email: email.to_owned(),
        team: format!("team{}", id % 2),
    }
}

/// A users collection with a unique email and a team index, under a fresh name.
fn users(store: RemoteStore) -> Collection<User, RemoteStore> {
    Collection::builder(&fresh("users"), |u: &User| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .index("team", |u| Some(key![u.team.clone()]))
        .open(store)
        .expect("the collection opens on denokv")
}

#[test]
fn denokv_does_not_speak_the_extension() {
    let Some(store) = denokv("denokv_does_not_speak_the_extension") else {
        return;
    };
    assert!(!store.has_extension().unwrap());
}

#[test]
fn unique_emails_hold_under_concurrent_inserts() {
    let Some(store) = denokv("unique_emails_hold_under_concurrent_inserts") else {
        return;
    };
    let users = users(store);
    // Every thread tries every email, each under its own id: exactly one insert per email wins.
    let emails: Vec<String> = (0..8).map(|i| format!("u{i}@example.com")).collect();
    let winners: Vec<(u64, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS as u64)
            .map(|t| {
                let (users, emails) = (&users, &emails);
                scope.spawn(move || {
                    let mut won = Vec::new();
                    for (i, email) in emails.iter().enumerate() {
                        let id = t * 100 + i as u64;
                        match users.insert(&user(id, email)) {
                            Ok(()) => won.push((id, email.clone())),
                            Err(tuplekv_index::Error::UniqueViolation { .. }) => {}
                            Err(e) => panic!("insert of {email} by thread {t} failed: {e}"),
                        }
                    }
                    won
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(winners.len(), emails.len(), "{winners:?}");
    let won: BTreeSet<&String> = winners.iter().map(|(_, e)| e).collect();
    assert_eq!(
        won.len(),
        emails.len(),
        "an email was taken twice: {winners:?}"
    );
    for (id, email) in &winners {
        let (pk, found) = users
            .get_by("email", &key![email.clone()])
            .unwrap()
            .unwrap();
        assert_eq!((pk, found.id), (key![*id], *id));
    }

    // A duplicate is refused and writes nothing.
    let (holder, email) = winners[0].clone();
    let err = users.insert(&user(999, &email)).unwrap_err();
    assert!(
        matches!(err, tuplekv_index::Error::UniqueViolation { .. }),
        "{err}"
    );
    assert!(users.get(&key![999u64]).unwrap().is_none());

    // An update moves the unique entry: the old email is free, the new one taken.
    let updated = users
        .update(&key![holder], |mut u| {
            u.email = "moved@example.com".into();
            u
        })
        .unwrap();
    assert_eq!(updated.email, "moved@example.com");
    assert!(
        users
            .get_by("email", &key![email.clone()])
            .unwrap()
            .is_none()
    );
    let (pk, _) = users
        .get_by("email", &key!["moved@example.com"])
        .unwrap()
        .unwrap();
    assert_eq!(pk, key![holder]);
    users.insert(&user(1000, &email)).unwrap();

    // A delete frees its email.
    let deleted = users.delete(&key![holder]).unwrap().unwrap();
    assert_eq!(deleted.email, "moved@example.com");
    assert!(users.get(&key![holder]).unwrap().is_none());
    assert!(
        users
            .get_by("email", &key!["moved@example.com"])
            .unwrap()
            .is_none()
    );
    users.insert(&user(1001, "moved@example.com")).unwrap();
}

/// Draws `per_thread` numbers on each of [`THREADS`] threads with `next(thread)`.
fn draw(per_thread: usize, next: impl Fn(usize) -> u64 + Sync) -> Vec<u64> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let next = &next;
                scope.spawn(move || (0..per_thread).map(|_| next(t)).collect::<Vec<u64>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

#[test]
fn fast_codes_are_never_repeated_across_threads_and_handles() {
    let Some(store) = denokv("fast_codes_are_never_repeated_across_threads_and_handles") else {
        return;
    };
    let seqs = Sequences::with_root(store, &key![fresh("seq")]).unwrap();
    seqs.create("INFO", SequenceOptions::default()).unwrap();
    // Two handles, as two app servers would hold, each shared by half the threads.
    let (a, b) = (seqs.fast("INFO").unwrap(), seqs.fast("INFO").unwrap());
    let all = draw(200, |t| {
        let seq = if t % 2 == 0 { &a } else { &b };
        seq.next_number().unwrap()
    });
    let distinct: BTreeSet<u64> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "a number was handed out twice");
    assert!(a.reservations() >= 1 && b.reservations() >= 1);
}

#[test]
fn gapless_codes_are_dense_and_never_repeated() {
    let Some(store) = denokv("gapless_codes_are_dense_and_never_repeated") else {
        return;
    };
    let seqs = Sequences::with_root(store, &key![fresh("seq")]).unwrap();
    let options = SequenceOptions {
        mode: Mode::Gapless,
        ..SequenceOptions::default()
    };
    seqs.create("ERR", options).unwrap();
    let (a, b) = (seqs.gapless("ERR").unwrap(), seqs.gapless("ERR").unwrap());
    let per_thread = 25;
    let mut all = draw(per_thread, |t| {
        let seq = if t % 2 == 0 { &a } else { &b };
        seq.next().unwrap().number()
    });
    all.sort_unstable();
    let expected: Vec<u64> = (1..=(THREADS * per_thread) as u64).collect();
    assert_eq!(all, expected, "gapless numbers must be 1..=n, each once");
    assert_eq!(
        a.next().unwrap().code(),
        format!("ERR{:03}", expected.len() + 1)
    );
}

#[test]
fn a_second_read_of_one_snapshot_is_unsupported() {
    let Some(store) = denokv("a_second_read_of_one_snapshot_is_unsupported") else {
        return;
    };
    let ns = fresh("snap");
    let written = store.atomic().set(&key![ns.clone(), 1u64], 1u64).commit();
    assert!(written.unwrap().is_committed());
    let snapshot = store.snapshot();
    assert!(snapshot.get(&key![ns.clone(), 1u64]).unwrap().is_some());
    let err = snapshot.get(&key![ns.clone(), 2u64]).unwrap_err();
    assert!(is_unsupported(&err), "{err:?}");
    // A fresh snapshot reads again; so do the plain store reads.
    assert!(
        store
            .snapshot()
            .get(&key![ns.clone(), 1u64])
            .unwrap()
            .is_some()
    );
    assert_eq!(
        store
            .get_many(&[key![ns.clone(), 1u64], key![ns, 2u64]])
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn a_list_past_one_batch_is_unsupported_and_one_batch_works() {
    let Some(store) = denokv("a_list_past_one_batch_is_unsupported_and_one_batch_works") else {
        return;
    };
    let ns = fresh("list");
    let mut write = store.atomic();
    for i in 0..5u64 {
        write = write.set(&key![ns.clone(), i], i);
    }
    assert!(write.commit().unwrap().is_committed());
    let one_batch = store
        .list(&Selector::prefix(&key![ns.clone()]), ListOptions::default())
        .unwrap()
        .read_all()
        .unwrap();
    assert_eq!(one_batch.len(), 5);
    let small = ListOptions {
        batch_size: Some(2),
        ..ListOptions::default()
    };
    let err = store
        .list(&Selector::prefix(&key![ns]), small)
        .unwrap()
        .read_all()
        .unwrap_err();
    assert!(is_unsupported(&err), "{err:?}");
}

#[test]
fn a_transaction_that_lists_is_unsupported_and_writes_nothing() {
    let Some(store) = denokv("a_transaction_that_lists_is_unsupported_and_writes_nothing") else {
        return;
    };
    let ns = fresh("tx");
    let written = store
        .atomic()
        .set(&key![ns.clone(), "item", 1u64], 1u64)
        .commit();
    assert!(written.unwrap().is_committed());
    let result: Result<(), Error> = store.transaction(|tx| {
        let n = tx
            .list(
                &Selector::prefix(&key![ns.clone(), "item"]),
                ListOptions::default(),
            )?
            .len();
        tx.set(&key![ns.clone(), "count"], n as u64);
        Ok(())
    });
    let err = result.unwrap_err();
    assert!(is_unsupported(&err), "{err:?}");
    assert!(
        store
            .snapshot()
            .get(&key![ns.clone(), "count"])
            .unwrap()
            .is_none()
    );
    // A transaction that only gets keys commits.
    store
        .transaction(|tx| {
            let n = tx.get(&key![ns.clone(), "item", 1u64])?.map_or(0, |_| 1u64);
            tx.set(&key![ns.clone(), "count"], n);
            Ok::<_, Error>(())
        })
        .unwrap();
    assert!(store.snapshot().get(&key![ns, "count"]).unwrap().is_some());
}

#[test]
fn collection_operations_needing_one_snapshot_are_unsupported() {
    let Some(store) = denokv("collection_operations_needing_one_snapshot_are_unsupported") else {
        return;
    };
    let users = users(store);
    users.insert(&user(1, "a@example.com")).unwrap();
    users.insert(&user(3, "b@example.com")).unwrap();
    // verify and repair read the records and the entries from one snapshot.
    let err = users.verify().unwrap_err();
    assert!(is_unsupported_index(&err), "{err:?}");
    let err = users.repair().unwrap_err();
    assert!(is_unsupported_index(&err), "{err:?}");
    // Listing by a pointer index reads the entries, then each record, from one snapshot.
    let err = users
        .list_by("team", &key!["team1"], ListOptions::default())
        .unwrap_err();
    assert!(is_unsupported_index(&err), "{err:?}");
    // One read of one range works: listing the records, and a count.
    assert_eq!(users.list(ListOptions::default()).unwrap().items.len(), 2);
    assert_eq!(users.count("team", &key!["team1"]).unwrap(), 2);
}
