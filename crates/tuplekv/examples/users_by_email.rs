//! Deno's secondary-index guide, first example, with `tuplekv::index`: users stored by id and
//! found by email through a unique index that lives in the same commit as the user.
//!
//! `cargo run -p tuplekv --example users_by_email`

use anyhow::Result;
use serde::{Deserialize, Serialize};
use tuplekv::index::{Collection, Error};
use tuplekv::{Database, key};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: u64,
    name: String,
    email: String,
}

fn main() -> Result<()> {
    let users = Collection::builder("users", |u: &User| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .open(Database::in_memory())?;

    for (id, name, email) in [
        (1, "Ada", "ada@example.com"),
        (2, "Grace", "grace@example.org"),
    ] {
        users.insert(&User {
            id,
            name: name.into(),
            email: email.into(),
        })?;
        println!("inserted user {id} <{email}>");
    }

    // Another user with Ada's email is refused, naming who has it; nothing is written.
    let imposter = User {
        id: 3,
        name: "Imposter".into(),
        email: "ada@example.com".into(),
    };
    match users.insert(&imposter) {
        Err(e @ Error::UniqueViolation { .. }) => println!("insert user 3: {e}"),
        other => anyhow::bail!("expected a unique violation, got {other:?}"),
    }
    anyhow::ensure!(users.get(&key![3])?.is_none());

    // Look a user up by email.
    if let Some((id, user)) = users.get_by("email", &key!["grace@example.org"])? {
        println!("grace@example.org is user {id}: {}", user.name);
    }

    // Changing an email moves the index entry in the same commit: the old address is free.
    users.update(&key![1], |mut u| {
        u.email = "ada@lovelace.example".into();
        u
    })?;
    println!(
        "after the change: ada@example.com -> {:?}, ada@lovelace.example -> {:?}",
        users
            .get_by("email", &key!["ada@example.com"])?
            .map(|(id, _)| id.to_string()),
        users
            .get_by("email", &key!["ada@lovelace.example"])?
            .map(|(id, _)| id.to_string()),
    );

    let report = users.verify()?;
    println!(
        "verify: {} records, {} entries, clean: {}",
        report.records,
        report.entries,
        report.is_clean()
    );
    Ok(())
}
