//! `CollectionBuilder::open_async` over a store whose async calls wait: it opens what `open`
//! opens, refuses what `open` refuses, and leaves the index states `open` leaves.

use serde::{Deserialize, Serialize};
use tuplekv_engine::{Database, key};
use tuplekv_index::{Collection, Error};
use tuplekv_testkit::contract::backends::Waiting;
use tuplekv_testkit::executor::block_on;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: u64,
    email: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Reordered {
    email: String,
    id: u64,
}

#[test]
fn open_async_reads_records_written_through_a_blocking_open() {
    let store = Waiting::new(Database::in_memory());
    let blocking = Collection::builder("users", |u: &User| key![u.id])
        .open(store.clone())
        .expect("open");
    let ada = User {
        id: 1,
        email: "ada@example.com".into(),
    };
    blocking.insert(&ada).expect("insert");
    let users = block_on(
        Collection::builder("users", |u: &User| key![u.id])
            .unique("email", |u| Some(key![u.email.clone()]))
            .open_async(store.clone()),
    )
    .expect("open_async");
    assert_eq!(block_on(users.get_async(&key![1])), Ok(Some(ada)));
    // The index added over existing records waits for its backfill, as after `open`.
    let by_email = block_on(users.get_by_async("email", &key!["ada@example.com"]));
    assert!(
        matches!(by_email, Err(Error::IndexNotReady { .. })),
        "{by_email:?}"
    );
    users.backfill(100, |_| {}).expect("backfill");
    let by_email = block_on(users.get_by_async("email", &key!["ada@example.com"]));
    assert_eq!(by_email.expect("ready").map(|(pk, _)| pk), Some(key![1]));
}

#[test]
fn open_async_refuses_a_reordered_struct_as_open_does_and_writes_nothing() {
    let store = Waiting::new(Database::in_memory());
    let users = Collection::builder("users", |u: &User| key![u.id])
        .open(store.clone())
        .expect("open");
    users
        .insert(&User {
            id: 1,
            email: "ada@example.com".into(),
        })
        .expect("insert");
    let commits = store.commits();
    let reordered = block_on(
        Collection::builder("users", |u: &Reordered| key![u.id]).open_async(store.clone()),
    );
    let blocking = Collection::builder("users", |u: &Reordered| key![u.id]).open(store.clone());
    assert!(
        matches!(reordered, Err(Error::Schema { .. })),
        "{:?}",
        reordered.err()
    );
    assert_eq!(
        reordered.err().map(|e| e.to_string()),
        blocking.err().map(|e| e.to_string())
    );
    assert_eq!(store.commits(), commits, "a refused open writes nothing");
}
