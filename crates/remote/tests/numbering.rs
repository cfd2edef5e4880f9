//! Numbered commits (`AtomicWrite::numbering`) through `RemoteStore` against an in-process
//! tuplekv server: placeholders filled by the server under its commit lock, the first numbers
//! returned, contiguous numbers under concurrency, the engine's refusals as the same errors,
//! each limit at and past it, and `Unsupported` (nothing sent) from a server that does not
//! number commits.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Barrier};

use tuplekv_engine::codec::encode_key;
use tuplekv_engine::limits::{
    CHECKS_MAX, COUNTERS_PER_COMMIT_MAX, MUTATIONS_MAX, NUMBER_SLOTS_MAX,
};
use tuplekv_engine::numbering::{CounterClaim, NumberForm, NumberSlot, Numbering, SlotTarget};
use tuplekv_engine::{
    AtomicWrite, CommitResult, Database, Error, Key, KeyBytes, ReadView, Store, Value, key,
};
use tuplekv_remote::{EXTENSION_NEEDED, NUMBERING_NEEDED, RemoteStore};
use tuplekv_testkit::server::{TOKEN, TestServer};

fn served() -> (Arc<Database>, TestServer, RemoteStore) {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::start(Arc::clone(&db));
    let store = RemoteStore::connect(&server.url(), TOKEN).unwrap();
    (db, server, store)
}

fn raw(k: &Key) -> KeyBytes {
    KeyBytes::from(encode_key(k))
}

fn counter() -> KeyBytes {
    raw(&key!["next", "INV"])
}

fn claim(key: KeyBytes, start: u64, count: u32) -> CounterClaim {
    CounterClaim {
        key,
        start,
        count,
        max: u64::MAX,
    }
}

/// The offset of `"0000"` in `["inv", "INV0000"]`.
const INVOICE_DIGITS: u32 = 9;

fn digits(
    counter: u32,
    ordinal: u32,
    target: SlotTarget,
    offset: u32,
    width: u8,
    widen: bool,
) -> NumberSlot {
    NumberSlot {
        counter,
        ordinal,
        target,
        offset,
        form: NumberForm::Digits { width, widen },
    }
}

/// `["inv", "INV0000"]` set to `"no. 00000"`, numbered in its key (widening) and value (not)
/// by one number from [`counter`], which starts at `start` when absent.
fn invoice(store: &RemoteStore, start: u64) -> AtomicWrite {
    let mut write = store
        .atomic()
        .set(&key!["inv", "INV0000"], &b"no. 00000"[..])
        .as_write()
        .clone();
    write.numbering = Numbering {
        counters: vec![claim(counter(), start, 1)],
        slots: vec![
            digits(0, 0, SlotTarget::MutationKey(0), INVOICE_DIGITS, 4, true),
            digits(0, 0, SlotTarget::MutationValue(0), 4, 5, false),
        ],
    };
    write
}

fn numbers(result: CommitResult) -> Vec<u64> {
    match result {
        CommitResult::Committed { numbers, .. } => numbers,
        other => panic!("not committed: {other:?}"),
    }
}

fn u64_at(db: &Database, key: &[u8]) -> Option<u64> {
    db.snapshot()
        .get_raw(key)
        .unwrap()
        .and_then(|e| e.value.as_u64())
}

/// Asserts `db` holds nothing under `["inv"]` and no counter.
fn nothing_written(db: &Database) {
    assert_eq!(db.get_latest_raw(&counter()).unwrap(), None);
    let listed = tuplekv_engine::ListIter::new(
        db.snapshot(),
        tuplekv_engine::Selector::prefix(&key!["inv"]),
        tuplekv_engine::ListOptions::default(),
    )
    .unwrap()
    .read_all()
    .unwrap();
    assert!(listed.is_empty(), "{listed:?}");
}

#[test]
fn a_numbered_commit_fills_key_value_and_check_placeholders_and_returns_the_numbers() {
    let (db, _server, store) = served();
    let unique = raw(&key!["uniq"]);
    let end = u32::try_from(unique.len()).unwrap();
    let mut write = store
        .atomic()
        .check_raw(&unique, None)
        .set(&key!["inv", "INV0000"], &b"no. 00000"[..])
        .set(&key!["inv", "INV0000"], &b"second"[..])
        .set_raw(&unique, 1u64)
        .as_write()
        .clone();
    let key_part = |target| NumberSlot {
        counter: 1,
        ordinal: 0,
        target,
        offset: end,
        form: NumberForm::KeyPart,
    };
    write.numbering = Numbering {
        // 9999 and 10000 (which widens its key's four digits), and 41.
        counters: vec![
            claim(counter(), 9999, 2),
            claim(raw(&key!["next", "U"]), 41, 1),
        ],
        slots: vec![
            digits(0, 0, SlotTarget::MutationKey(0), INVOICE_DIGITS, 4, true),
            digits(0, 0, SlotTarget::MutationValue(0), 4, 5, false),
            digits(0, 1, SlotTarget::MutationKey(1), INVOICE_DIGITS, 4, true),
            key_part(SlotTarget::CheckKey(0)),
            key_part(SlotTarget::MutationKey(2)),
        ],
    };
    assert_eq!(numbers(store.commit(write).unwrap()), vec![9999, 41]);
    let first = db.get(&key!["inv", "INV9999"]).unwrap().unwrap();
    assert_eq!(first.value, Value::Bytes(b"no. 09999".to_vec().into()));
    let widened = db.get(&key!["inv", "INV10000"]).unwrap().unwrap();
    assert_eq!(widened.value, Value::Bytes(b"second".to_vec().into()));
    assert!(db.get(&key!["uniq", 41u64]).unwrap().is_some());
    assert!(db.get(&key!["inv", "INV0000"]).unwrap().is_none());
    // Each counter advanced by its count, and the next commit takes the next number.
    assert_eq!(u64_at(&db, &counter()), Some(10_001));
    assert_eq!(u64_at(&db, &raw(&key!["next", "U"])), Some(42));
    assert_eq!(
        numbers(store.commit(invoice(&store, 1)).unwrap()),
        vec![10_001]
    );
    assert_eq!(u64_at(&db, &counter()), Some(10_002));
}

#[test]
fn commit_async_returns_the_numbers_too() {
    let (db, _server, store) = served();
    let res = tuplekv_testkit::executor::block_on(store.commit_async(invoice(&store, 5))).unwrap();
    assert_eq!(numbers(res), vec![5]);
    assert!(db.get(&key!["inv", "INV0005"]).unwrap().is_some());
}

#[test]
fn concurrent_numbered_commits_never_conflict_and_take_contiguous_numbers() {
    let (db, server, _store) = served();
    const STORES: usize = 3;
    const THREADS_PER_STORE: usize = 3;
    const COMMITS: usize = 30;
    let stores: Vec<_> = (0..STORES)
        .map(|_| RemoteStore::connect(&server.url(), TOKEN).unwrap())
        .collect();
    let barrier = Arc::new(Barrier::new(STORES * THREADS_PER_STORE));
    let threads: Vec<_> = (0..STORES * THREADS_PER_STORE)
        .map(|t| {
            let store = stores[t % STORES].clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                (0..COMMITS)
                    .map(|i| {
                        // 1 to 3 numbers per commit, the first one in the record's key.
                        let count = u32::try_from(1 + (t + i) % 3).unwrap();
                        let mut write = store
                            .atomic()
                            .set(&key!["inv", "INV0000"], &b"x"[..])
                            .as_write()
                            .clone();
                        write.numbering = Numbering {
                            counters: vec![claim(counter(), 1, count)],
                            slots: vec![digits(
                                0,
                                0,
                                SlotTarget::MutationKey(0),
                                INVOICE_DIGITS,
                                4,
                                true,
                            )],
                        };
                        let result = store.commit(write).unwrap();
                        assert!(
                            result.is_committed(),
                            "a numbered commit conflicted: {result:?}"
                        );
                        (numbers(result)[0], u64::from(count))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut taken: Vec<(u64, u64)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    taken.sort_unstable();
    let mut next = 1;
    for &(first, count) in &taken {
        assert_eq!(first, next, "numbers not contiguous at {first}");
        next += count;
    }
    assert_eq!(taken.len(), STORES * THREADS_PER_STORE * COMMITS);
    assert_eq!(u64_at(&db, &counter()), Some(next));
    for &(first, _) in &taken {
        let code = format!("INV{first:04}");
        assert!(
            db.get(&key!["inv", code.as_str()]).unwrap().is_some(),
            "{code}"
        );
    }
}

#[test]
fn counter_refusals_reach_the_client_as_the_engines_errors_and_write_nothing() {
    let (db, _server, store) = served();
    // Two numbers from a counter whose max is its start.
    let mut exhausted = invoice(&store, 5);
    exhausted.numbering.counters[0] = CounterClaim {
        max: 5,
        ..claim(counter(), 5, 2)
    };
    assert_eq!(
        store.commit(exhausted).unwrap_err(),
        Error::CounterExhausted {
            key: counter(),
            next: 5,
            count: 2,
            max: 5,
        }
    );
    nothing_written(&db);
    // 123456 in the value's five digits, which may not widen.
    assert_eq!(
        store.commit(invoice(&store, 123_456)).unwrap_err(),
        Error::NumberTooWide {
            number: 123_456,
            width: 5,
        }
    );
    nothing_written(&db);
    // A counter that holds bytes.
    let _ = db
        .atomic()
        .set_raw(&counter(), &b"not a number"[..])
        .commit()
        .unwrap();
    let before = db.current_versionstamp();
    assert_eq!(
        store.commit(invoice(&store, 1)).unwrap_err(),
        Error::CounterNotU64 { key: counter() }
    );
    assert_eq!(db.current_versionstamp(), before);
}

#[test]
fn counters_and_slots_at_their_limits_commit_and_past_them_are_refused_before_sending() {
    let (db, server, store) = served();
    // Every counter the limit allows, two numbers each.
    let mut write = store.atomic().set(&key!["c"], 1u64).as_write().clone();
    write.numbering.counters = (0..COUNTERS_PER_COMMIT_MAX as u64)
        .map(|i| claim(raw(&key!["next", i]), 10, 2))
        .collect();
    assert_eq!(
        numbers(store.commit(write.clone()).unwrap()),
        vec![10; COUNTERS_PER_COMMIT_MAX]
    );
    assert_eq!(u64_at(&db, &raw(&key!["next", 0u64])), Some(12));
    // Every slot the limit allows: four one-digit placeholders in each check key, mutation
    // key and value, all of them the one number claimed.
    assert_eq!(NUMBER_SLOTS_MAX, 4 * (CHECKS_MAX + 2 * MUTATIONS_MAX));
    let placeholder = |tag: &str, i: usize| key![tag, i as u64, "0000"];
    let mut slots_write = (0..MUTATIONS_MAX)
        .fold(
            (0..CHECKS_MAX).fold(store.atomic(), |a, i| a.check(&placeholder("c", i), None)),
            |a, i| a.set(&placeholder("m", i), &b"0000"[..]),
        )
        .as_write()
        .clone();
    // The digits sit before the key's last byte (the string's terminator).
    let at = |k: &KeyBytes| u32::try_from(k.len() - 5).unwrap();
    let four = |target, from: u32| (0..4).map(move |d| digits(0, 0, target, from + d, 1, false));
    let mut slots = Vec::new();
    for (i, c) in slots_write.checks.iter().enumerate() {
        slots.extend(four(SlotTarget::CheckKey(i as u32), at(&c.key)));
    }
    for (i, m) in slots_write.mutations.iter().enumerate() {
        slots.extend(four(SlotTarget::MutationKey(i as u32), at(&m.key)));
        slots.extend(four(SlotTarget::MutationValue(i as u32), 0));
    }
    assert_eq!(slots.len(), NUMBER_SLOTS_MAX);
    slots_write.numbering = Numbering {
        counters: vec![claim(raw(&key!["slots"]), 7, 1)],
        slots,
    };
    assert_eq!(numbers(store.commit(slots_write.clone()).unwrap()), vec![7]);
    let last = db
        .get(&key!["m", (MUTATIONS_MAX - 1) as u64, "7777"])
        .unwrap()
        .unwrap();
    assert_eq!(last.value, Value::Bytes(b"7777".to_vec().into()));
    // One more of either is the engine's refusal, before anything is sent.
    let writes = server.stats.atomic_write_requests();
    write
        .numbering
        .counters
        .push(claim(raw(&key!["next", "past"]), 1, 1));
    let err = store.commit(write).unwrap_err();
    assert!(matches!(err, Error::InvalidNumbering { .. }), "{err:?}");
    let first = slots_write.numbering.slots[0];
    slots_write.numbering.slots.push(first);
    let err = store.commit(slots_write).unwrap_err();
    assert!(matches!(err, Error::InvalidNumbering { .. }), "{err:?}");
    assert_eq!(server.stats.atomic_write_requests(), writes);
}

#[test]
fn a_server_without_the_extension_gets_no_numbered_write_and_the_client_says_unsupported() {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::of(Arc::clone(&db))
        .config(|c| c.with_extension(false))
        .start();
    let store = RemoteStore::connect(&server.url(), TOKEN).unwrap();
    assert!(!store.has_extension().unwrap());
    let writes = server.stats.atomic_write_requests();
    assert_eq!(
        store.commit(invoice(&store, 1)).unwrap_err(),
        Error::Unsupported {
            operation: "numbers assigned at commit",
            needs: EXTENSION_NEEDED,
        }
    );
    assert_eq!(server.stats.atomic_write_requests(), writes, "it was sent");
    nothing_written(&db);
    // Plain commits still go through.
    assert!(
        store
            .atomic()
            .set(&key!["a"], 1u64)
            .commit()
            .unwrap()
            .is_committed()
    );
}

/// A tuplekv server that speaks the extension but not its numberings (an older one): the
/// metadata answer lists only `tuplekv.snapshots.v1`.
fn older_server(db: Arc<Database>) -> (std::net::SocketAddr, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let config = tuplekv_server::ServerConfig::new(TOKEN).unwrap();
    let options = config.serve_options();
    let router = tuplekv_server::router(db, config).layer(axum::middleware::map_response(
        |uri: axum::http::Uri, response: axum::response::Response| async move {
            if uri.path() != "/" {
                return response;
            }
            let (mut parts, body) = response.into_parts();
            let body = axum::body::to_bytes(body, 1 << 16).await.unwrap();
            let older = String::from_utf8(body.to_vec())
                .unwrap()
                .replace(r#","tuplekv.numbering.v1""#, "");
            parts.headers.remove(axum::http::header::CONTENT_LENGTH);
            axum::response::Response::from_parts(parts, axum::body::Body::from(older))
        },
    ));
    runtime.spawn(tuplekv_server::serve_with(
        listener,
        router,
        options,
        std::future::pending(),
    ));
    (addr, runtime)
}

#[test]
fn a_server_that_does_not_number_commits_gets_no_numbered_write() {
    let db = Arc::new(Database::in_memory());
    let (addr, _runtime) = older_server(Arc::clone(&db));
    let store = RemoteStore::connect(&format!("http://{addr}"), TOKEN).unwrap();
    assert!(store.has_extension().unwrap());
    assert_eq!(
        store.commit(invoice(&store, 1)).unwrap_err(),
        Error::Unsupported {
            operation: "numbers assigned at commit",
            needs: NUMBERING_NEEDED,
        }
    );
    nothing_written(&db);
    assert!(
        store
            .atomic()
            .set(&key!["a"], 1u64)
            .commit()
            .unwrap()
            .is_committed()
    );
}
