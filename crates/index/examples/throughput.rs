//! A rough throughput driver (not a criterion bench): the same workload through a
//! `Collection` with one unique and one non-unique index, and through the hand-written
//! pattern of Deno's secondary-index guide on the bare engine (atomic commits with
//! versionstamp checks), in one run, one thread.
//!
//! `cargo run --release -p tuplekv-index --example throughput [records]`

use std::time::Instant;

use serde::{Deserialize, Serialize};
use tuplekv_engine::{Database, Key, ReadView, key};
use tuplekv_index::Collection;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: u64,
    name: String,
    email: String,
    color: String,
}

fn user(id: u64, color: u64) -> User {
    User {
        id,
        name: format!("user number {id}"),
        email: format!("user{id}@example.com"),
        color: format!("color{}", color % 8),
    }
}

type Failure = Box<dyn std::error::Error>;

/// The guide's pattern by hand: `["users", id]`, `["users_by_email", email] -> id`,
/// `["users_by_color", color, id] -> id`.
mod by_hand {
    use super::*;

    pub(crate) fn insert(db: &Database, u: &User) -> Result<(), Failure> {
        let pk = key!["users", u.id];
        let email = key!["users_by_email", u.email.clone()];
        let res = db
            .atomic()
            .check(&pk, None)
            .check(&email, None)
            .set(&pk, postcard::to_stdvec(u)?)
            .set(&email, tuplekv_engine::codec::encode_key(&key![u.id]))
            .set(&key!["users_by_color", u.color.clone(), u.id], vec![])
            .commit()?;
        if !res.is_committed() {
            return Err("exists".into());
        }
        Ok(())
    }

    pub(crate) fn get_by_email(db: &Database, email: &str) -> Result<Option<User>, Failure> {
        let Some(e) = db.get(&key!["users_by_email", email])? else {
            return Ok(None);
        };
        let id = tuplekv_engine::codec::decode_key(e.value.as_bytes().ok_or("bytes")?)?;
        let mut pk = vec!["users".into()];
        pk.extend(id.parts().iter().cloned());
        let Some(rec) = db.get(&Key::new(pk)?)? else {
            return Ok(None);
        };
        Ok(Some(postcard::from_bytes(
            rec.value.as_bytes().ok_or("bytes")?,
        )?))
    }

    /// The same two reads from one registered snapshot, as the collection (generic over
    /// `Store`, whose only reads are snapshots) has to do them.
    pub(crate) fn get_by_email_in_snapshot(
        db: &Database,
        email: &str,
    ) -> Result<Option<User>, Failure> {
        let view = db.snapshot();
        let Some(e) = view.get(&key!["users_by_email", email])? else {
            return Ok(None);
        };
        let id = tuplekv_engine::codec::decode_key(e.value.as_bytes().ok_or("bytes")?)?;
        let mut pk = vec!["users".into()];
        pk.extend(id.parts().iter().cloned());
        let Some(rec) = view.get(&Key::new(pk)?)? else {
            return Ok(None);
        };
        Ok(Some(postcard::from_bytes(
            rec.value.as_bytes().ok_or("bytes")?,
        )?))
    }

    pub(crate) fn recolor(db: &Database, id: u64, color: &str) -> Result<(), Failure> {
        loop {
            let pk = key!["users", id];
            let Some(e) = db.get(&pk)? else {
                return Ok(());
            };
            let old: User = postcard::from_bytes(e.value.as_bytes().ok_or("bytes")?)?;
            let mut new = old.clone();
            new.color = color.into();
            let res = db
                .atomic()
                .check(&pk, Some(e.versionstamp))
                .delete(&key!["users_by_color", old.color.clone(), id])
                .set(&key!["users_by_color", new.color.clone(), id], vec![])
                .set(&pk, postcard::to_stdvec(&new)?)
                .commit()?;
            if res.is_committed() {
                return Ok(());
            }
        }
    }

    pub(crate) fn delete(db: &Database, id: u64) -> Result<(), Failure> {
        loop {
            let pk = key!["users", id];
            let Some(e) = db.get(&pk)? else {
                return Ok(());
            };
            let old: User = postcard::from_bytes(e.value.as_bytes().ok_or("bytes")?)?;
            let res = db
                .atomic()
                .check(&pk, Some(e.versionstamp))
                .delete(&pk)
                .delete(&key!["users_by_email", old.email.clone()])
                .delete(&key!["users_by_color", old.color.clone(), id])
                .commit()?;
            if res.is_committed() {
                return Ok(());
            }
        }
    }
}

fn rate(n: u64, start: Instant) -> f64 {
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() -> Result<(), Failure> {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(20_000);

    let db = Database::in_memory();
    let start = Instant::now();
    for id in 0..n {
        by_hand::insert(&db, &user(id, id))?;
    }
    let hand_insert = rate(n, start);
    let start = Instant::now();
    for id in 0..n {
        assert!(by_hand::get_by_email(&db, &format!("user{id}@example.com"))?.is_some());
    }
    let hand_get = rate(n, start);
    let start = Instant::now();
    for id in 0..n {
        assert!(
            by_hand::get_by_email_in_snapshot(&db, &format!("user{id}@example.com"))?.is_some()
        );
    }
    let hand_get_snapshot = rate(n, start);
    let start = Instant::now();
    for id in 0..n {
        by_hand::recolor(&db, id, "color9")?;
    }
    let hand_update = rate(n, start);
    let start = Instant::now();
    for id in 0..n {
        by_hand::delete(&db, id)?;
    }
    let hand_delete = rate(n, start);

    let users = Collection::builder("users", |u: &User| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .index("color", |u| Some(key![u.color.clone()]))
        .open(Database::in_memory())?;
    let start = Instant::now();
    for id in 0..n {
        users.insert(&user(id, id))?;
    }
    let coll_insert = rate(n, start);
    let start = Instant::now();
    for id in 0..n {
        assert!(
            users
                .get_by("email", &key![format!("user{id}@example.com")])?
                .is_some()
        );
    }
    let coll_get = rate(n, start);
    let start = Instant::now();
    for id in 0..n {
        users.update(&key![id], |mut u| {
            u.color = "color9".into();
            u
        })?;
    }
    let coll_update = rate(n, start);
    let start = Instant::now();
    for id in 0..n {
        users.delete(&key![id])?;
    }
    let coll_delete = rate(n, start);

    println!("{n} records, 1 thread, ops/s (ratio = by hand / collection)");
    println!("| op | guide by hand | collection | ratio |");
    println!("|---|---:|---:|---:|");
    for (op, hand, coll) in [
        ("insert", hand_insert, coll_insert),
        ("get by unique", hand_get, coll_get),
        (
            "get by unique, by hand in a snapshot",
            hand_get_snapshot,
            coll_get,
        ),
        ("update (move non-unique)", hand_update, coll_update),
        ("delete", hand_delete, coll_delete),
    ] {
        println!("| {op} | {hand:.0} | {coll:.0} | {:.2}x |", hand / coll);
    }
    Ok(())
}
