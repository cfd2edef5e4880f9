//! Deno's secondary-index guide, second example, with `tuplekv::index`: users found by their
//! favourite colour through a non-unique index (`[..., color, user id]`), paged with cursors.
//!
//! `cargo run -p tuplekv --example users_by_color`

use anyhow::Result;
use serde::{Deserialize, Serialize};
use tuplekv::index::Collection;
use tuplekv::{Database, ListOptions, key};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: u64,
    name: String,
    favorite_color: String,
}

fn main() -> Result<()> {
    let users = Collection::builder("users", |u: &User| key![u.id])
        .index("favorite_color", |u| Some(key![u.favorite_color.clone()]))
        .open(Database::in_memory())?;

    let people = [
        (1, "Ada", "green"),
        (2, "Grace", "blue"),
        (3, "Linus", "green"),
        (4, "Margaret", "green"),
        (5, "Barbara", "red"),
    ];
    for (id, name, color) in people {
        users.insert(&User {
            id,
            name: name.into(),
            favorite_color: color.into(),
        })?;
    }

    // Page through everyone who likes green, two at a time.
    let mut cursor = None;
    let mut page_no = 1;
    loop {
        let page = users.list_by(
            "favorite_color",
            &key!["green"],
            ListOptions {
                limit: Some(2),
                cursor: cursor.take(),
                ..ListOptions::default()
            },
        )?;
        let names: Vec<&str> = page.items.iter().map(|(_, u)| u.name.as_str()).collect();
        println!("green, page {page_no}: {names:?}");
        match page.cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
        page_no += 1;
    }

    // Linus changes his mind: the entry moves from green to red in the same commit.
    users.update(&key![3], |mut u| {
        u.favorite_color = "red".into();
        u
    })?;
    for color in ["green", "blue", "red"] {
        println!(
            "{color}: {} users",
            users.count("favorite_color", &key![color])?
        );
    }
    anyhow::ensure!(users.verify()?.is_clean(), "index out of step");
    Ok(())
}
