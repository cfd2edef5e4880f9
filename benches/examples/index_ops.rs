//! Runs `N` of one collection operation on an in-memory store preloaded with 10k users (the
//! index bench's records: a unique email and a colour index), for instruction counts that do
//! not drift with the machine:
//!
//! ```text
//! cargo build --release -p tuplekv-benches --example index_ops
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/index_ops update 10000
//! ```
//!
//! Subtract the count of `N = 0` (the preload) and divide by `N`. The engine's key map draws
//! random tower heights, so counts differ by a few percent from run to run: compare medians.
//! Operations: `insert` (fresh ids), `update` (a colour moves), `get` (by unique email),
//! `read` (by primary key), `delete`, and the async twins `insert_async`, `update_async`,
//! `get_async`.

use std::process::ExitCode;

use serde::{Deserialize, Serialize};
use tuplekv_codec::key;
use tuplekv_engine::Database;
use tuplekv_index::{Collection, Error};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: u64,
    name: String,
    email: String,
    color: String,
}

const COLORS: [&str; 4] = ["green", "blue", "red", "black"];
const PRELOADED: u64 = 10_000;

fn user(id: u64) -> User {
    User {
        id,
        name: format!("user {id}"),
        email: format!("user{id}@example.com"),
        color: COLORS[(id % 4) as usize].to_owned(),
    }
}

fn run(op: &str, n: u64) -> Result<(), Error> {
    let c = Collection::builder("users", |u: &User| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .index("color", |u| Some(key![u.color.clone()]))
        .open(Database::in_memory())?;
    for id in 0..PRELOADED {
        c.insert(&user(id))?;
    }
    for i in 0..n {
        match op {
            "insert" => c.insert(&user(100_000 + i))?,
            "update" => {
                c.update(&key![i % PRELOADED], |mut u| {
                    u.color = COLORS[(i as usize + 1) % 4].into();
                    u
                })?;
            }
            "get" => {
                let email = format!("user{}@example.com", i % PRELOADED);
                std::hint::black_box(c.get_by("email", &key![email])?);
            }
            "read" => {
                std::hint::black_box(c.get(&key![i % PRELOADED])?);
            }
            "delete" => {
                c.delete(&key![i % PRELOADED])?;
            }
            // The async twins, awaited with the smallest executor: what `replay::run` adds.
            "insert_async" => pollster::block_on(c.insert_async(&user(100_000 + i)))?,
            "update_async" => {
                let pk = key![i % PRELOADED];
                pollster::block_on(c.update_async(&pk, |mut u| {
                    u.color = COLORS[(i as usize + 1) % 4].into();
                    u
                }))?;
            }
            "get_async" => {
                let email = key![format!("user{}@example.com", i % PRELOADED)];
                std::hint::black_box(pollster::block_on(c.get_by_async("email", &email))?);
            }
            _ => return Err(Error::Definition(format!("no operation `{op}`"))),
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(op), Some(Ok(n))) = (args.get(1), args.get(2).map(|n| n.parse::<u64>())) else {
        eprintln!(
            "usage: index_ops insert|update|get|read|delete|insert_async|update_async|get_async N"
        );
        return ExitCode::FAILURE;
    };
    match run(op, n) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
