//! Numbered writes in tuplekv's extension (`tuplekv_wire::Numbering`): agreed only when asked
//! for, applied whole with the first numbers in the output, refused (400, nothing written,
//! never a panic) when hostile, and refused on a counter's value with the engine's error in
//! `ERROR_HEADER`.

use tuplekv_testkit::kv_connect as common;
mod numbered;

use common::{Client, TOKEN, TestServer, bytes_value, check, key, key2, set, u64_value, write_of};
use denokv_proto::datapath as pb;
use numbered::{claim, digits, numbered_body, outcome};
use tuplekv_engine::{Error, KeyBytes};
use tuplekv_server::ServerConfig;
use tuplekv_server::limits::REQUEST_BODY_MAX;
use tuplekv_wire::{
    ERROR_HEADER, NumberFormKind, NumberSlot, Numbering, SlotTargetKind, error_from_header,
};

use SlotTargetKind::{CheckKey, MutationKey, MutationValue};

/// `["inv", "INV0000"]`: its four zeros (at byte 9) a placeholder.
fn invoice_key() -> Vec<u8> {
    key2("inv", "INV0000")
}

const INVOICE_DIGITS: u64 = 9;

fn counter() -> Vec<u8> {
    key2("next", "INV")
}

/// A write setting `["inv", "INV0000"]` to the bytes `"no. 0000"`, numbered by `numbering`.
fn invoice(numbering: Numbering) -> Vec<u8> {
    numbered_body(
        write_of(vec![], vec![set(&invoice_key(), bytes_value(b"no. 0000"))]),
        numbering,
    )
}

/// One claim of one number from [`counter`], starting at `start`, written in the key.
fn one_number(start: u64, slot: NumberSlot) -> Numbering {
    Numbering {
        counters: vec![claim(&counter(), start, 1)],
        slots: vec![slot],
    }
}

fn key_slot() -> NumberSlot {
    digits(0, 0, MutationKey, 0, INVOICE_DIGITS, 4, true)
}

/// Asserts nothing was written: no counter, no invoice under any number.
async fn nothing_written(c: &mut Client) {
    assert!(c.get(&counter()).await.is_none(), "the counter was written");
    let out: pb::SnapshotReadOutput = c
        .read(common::read_of(vec![common::prefix_range(
            &key("inv"),
            10,
            false,
        )]))
        .await
        .decode();
    assert!(
        out.ranges[0].values.is_empty(),
        "{:?}",
        out.ranges[0].values
    );
}

#[tokio::test]
async fn the_numbering_extension_is_agreed_only_with_a_client_that_asks_for_it() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let both = c
        .metadata(
            TOKEN,
            r#"{"supportedVersions":[3],"tuplekvExtensions":["tuplekv.snapshots.v1","tuplekv.numbering.v1"]}"#,
        )
        .await
        .json();
    assert_eq!(
        both["tuplekvExtensions"],
        serde_json::json!(["tuplekv.snapshots.v1", "tuplekv.numbering.v1"])
    );
    let older = c
        .metadata(
            TOKEN,
            r#"{"supportedVersions":[3],"tuplekvExtensions":["tuplekv.snapshots.v1"]}"#,
        )
        .await
        .json();
    assert_eq!(
        older["tuplekvExtensions"],
        serde_json::json!(["tuplekv.snapshots.v1"])
    );
    server.stop().await;
}

#[tokio::test]
async fn a_numbered_write_fills_key_value_and_check_placeholders_and_reports_the_first_numbers() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    // Two numbers from the invoice counter (9999 and 10000: the second widens its key), one
    // from a second counter, inserted as a key part into a check and a mutation key.
    let unique = key("uniq");
    let end = unique.len() as u64;
    let body = numbered_body(
        write_of(
            vec![check(&unique, None)],
            vec![
                set(&invoice_key(), bytes_value(b"no. 00000")),
                set(&invoice_key(), bytes_value(b"second")),
                set(&unique, u64_value(1)),
            ],
        ),
        Numbering {
            counters: vec![claim(&counter(), 9999, 2), claim(&key("other"), 7, 1)],
            slots: vec![
                digits(0, 0, MutationKey, 0, INVOICE_DIGITS, 4, true),
                digits(0, 0, MutationValue, 0, 4, 5, false),
                digits(0, 1, MutationKey, 1, INVOICE_DIGITS, 4, true),
                NumberSlot {
                    form: NumberFormKind::KeyPart.into(),
                    ..digits(1, 0, CheckKey, 0, end, 0, false)
                },
                NumberSlot {
                    form: NumberFormKind::KeyPart.into(),
                    ..digits(1, 0, MutationKey, 2, end, 0, false)
                },
            ],
        },
    );
    let reply = c.data("atomic_write", body).await;
    let out: pb::AtomicWriteOutput = reply.decode();
    assert_eq!(out.status, common::AW_SUCCESS);
    assert_eq!(outcome(&reply).expect("a report").numbers, vec![9999, 7]);
    let first = c.get(&key2("inv", "INV9999")).await.expect("INV9999");
    assert_eq!(first.value, b"no. 09999");
    assert!(c.get(&key2("inv", "INV10000")).await.is_some());
    let with_part = tuplekv_engine::codec::encode_key(&tuplekv_engine::key!["uniq", 7u64]);
    assert!(c.get(&with_part).await.is_some());
    // The counters advanced by their counts.
    let next = c.get(&counter()).await.expect("the counter");
    assert_eq!(next.value, 10_001u64.to_le_bytes());
    let other = c.get(&key("other")).await.expect("the other counter");
    assert_eq!(other.value, 8u64.to_le_bytes());
    // The next commit takes the next number.
    let reply = c
        .data("atomic_write", invoice(one_number(1, key_slot())))
        .await;
    assert_eq!(outcome(&reply).expect("a report").numbers, vec![10_001]);
    server.stop().await;
}

#[tokio::test]
async fn outputs_carry_numbers_only_for_numbered_writes_of_the_extension() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    // A plain client (Deno's) never sees the field.
    let reply = c
        .write(write_of(vec![], vec![set(&key("a"), u64_value(1))]))
        .await;
    assert_eq!(reply.status, 200);
    assert!(outcome(&reply).is_none());
    // An extended write with an empty numbering takes no number and reports none.
    let body = numbered_body(
        write_of(vec![], vec![set(&key("b"), u64_value(1))]),
        Numbering::default(),
    );
    let reply = c.data("atomic_write", body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(outcome(&reply).is_none());
    assert!(c.get(&key("b")).await.is_some());
    server.stop().await;
}

#[tokio::test]
async fn hostile_numberings_are_400_and_write_nothing() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let past_u32 = u64::from(u32::MAX) + 1;
    let cases = [
        (
            one_number(
                1,
                NumberSlot {
                    counter: 3,
                    ..key_slot()
                },
            ),
            "Invalid numbering: a slot names counter 3, but the commit claims 1.",
        ),
        (
            one_number(
                1,
                NumberSlot {
                    width: 300,
                    ..key_slot()
                },
            ),
            "Invalid numbering: slot 0's width 300 is out of range (max 255).",
        ),
        (
            one_number(
                1,
                NumberSlot {
                    offset: u64::from(u32::MAX),
                    ..key_slot()
                },
            ),
            "Invalid numbering: a placeholder at bytes 4294967295..4294967299 of MutationKey(0), \
             which has 14 bytes.",
        ),
        (
            one_number(
                1,
                NumberSlot {
                    offset: past_u32,
                    ..key_slot()
                },
            ),
            "Invalid numbering: slot 0's offset 4294967296 is out of range (max 4294967295).",
        ),
        (
            one_number(
                1,
                NumberSlot {
                    index: 1,
                    ..key_slot()
                },
            ),
            "Invalid numbering: a slot names mutation 1, but there are 1.",
        ),
        (
            one_number(
                1,
                NumberSlot {
                    target: 77,
                    ..key_slot()
                },
            ),
            "Invalid numbering: slot 0's target 77 is unknown.",
        ),
        (
            Numbering {
                counters: vec![claim(&counter(), 1, past_u32)],
                slots: vec![key_slot()],
            },
            "Invalid numbering: counter 0's count 4294967296 is out of range (max 4294967295).",
        ),
        (
            Numbering {
                counters: vec![claim(&counter(), 1, 1)],
                slots: vec![NumberSlot::default(); 400_000],
            },
            "Invalid numbering: 400000 number slots in one write (max 8400).",
        ),
    ];
    for (numbering, text) in cases {
        c.data("atomic_write", invoice(numbering))
            .await
            .assert_error(400, text);
        nothing_written(&mut c).await;
    }
    // A million slots do not fit a request body: refused before it is read whole.
    let huge = invoice(Numbering {
        counters: vec![claim(&counter(), 1, 1)],
        slots: vec![NumberSlot::default(); 1_000_000],
    });
    assert!(huge.len() > REQUEST_BODY_MAX);
    let reply = c.data("atomic_write", huge).await;
    assert_eq!(reply.status, 413, "{}", reply.text());
    nothing_written(&mut c).await;
    // The server is still serving.
    let reply = c
        .data("atomic_write", invoice(one_number(1, key_slot())))
        .await;
    assert_eq!(outcome(&reply).expect("a report").numbers, vec![1]);
    server.stop().await;
}

/// The engine error a refused write's [`ERROR_HEADER`] carries.
fn header_error(reply: &common::Reply) -> Error {
    assert_eq!(reply.status, 400, "{}", reply.text());
    let header = reply.headers[ERROR_HEADER].to_str().expect("ASCII");
    error_from_header(header).expect("an engine error")
}

#[tokio::test]
async fn numbering_refusals_carry_the_engines_error_and_write_nothing() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let counter_key = KeyBytes::from(counter());
    // Two numbers from a counter whose max is its start.
    let exhausted = Numbering {
        counters: vec![tuplekv_wire::CounterClaim {
            max: 5,
            ..claim(&counter(), 5, 2)
        }],
        slots: vec![key_slot()],
    };
    let reply = c.data("atomic_write", invoice(exhausted)).await;
    assert!(
        reply
            .text()
            .starts_with("The counter [\"next\", \"INV\"] is exhausted"),
        "{}",
        reply.text()
    );
    assert_eq!(
        header_error(&reply),
        Error::CounterExhausted {
            key: counter_key.clone(),
            next: 5,
            count: 2,
            max: 5,
        }
    );
    nothing_written(&mut c).await;
    // 12345 in a placeholder of 4 that may not widen.
    let wide = one_number(
        12_345,
        NumberSlot {
            widen: false,
            ..key_slot()
        },
    );
    let reply = c.data("atomic_write", invoice(wide)).await;
    assert_eq!(
        header_error(&reply),
        Error::NumberTooWide {
            number: 12_345,
            width: 4,
        }
    );
    nothing_written(&mut c).await;
    // A counter holding bytes.
    c.commit(write_of(vec![], vec![set(&counter(), bytes_value(b"x"))]))
        .await;
    let reply = c
        .data("atomic_write", invoice(one_number(1, key_slot())))
        .await;
    assert_eq!(
        header_error(&reply),
        Error::CounterNotU64 { key: counter_key }
    );
    let held = c.get(&counter()).await.expect("the counter");
    assert_eq!(held.value, b"x");
    server.stop().await;
}

#[tokio::test]
async fn a_server_without_the_extension_refuses_a_numbered_write_rather_than_drop_it() {
    let config = ServerConfig::new(TOKEN)
        .expect("token")
        .with_extension(false);
    let server = TestServer::in_memory().with_config(config).spawn().await;
    let mut c = server.h2().await;
    let reply = c
        .data("atomic_write", invoice(one_number(1, key_slot())))
        .await;
    assert_eq!(reply.status, 400);
    assert!(
        reply
            .text()
            .starts_with("This server does not offer tuplekv's extension"),
        "{}",
        reply.text()
    );
    nothing_written(&mut c).await;
    server.stop().await;
}
