//! A typed collection whose records carry their gapless code (`Invoice { code, .. }`, keyed by
//! the code, indexed by customer): inserted through `GaplessSequence::next_coded` with
//! `Collection::insert_write`, the store writes the number it assigns into the record's key,
//! its serialised `code` field and its index entries, from many threads and handles at once.
#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tuplekv::index::Collection;
use tuplekv::sequence::{Mode, SequenceOptions, Sequences};
use tuplekv::{Database, key};

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Invoice {
    code: String,
    customer: String,
    total: u64,
}

fn invoices(db: &Database) -> Collection<Invoice, Database> {
    Collection::<Invoice, _>::builder("invoices", |i| key![i.code.as_str()])
        .index("by_customer", |i| Some(key![i.customer.as_str()]))
        .open(db.clone())
        .unwrap()
}

#[test]
fn records_keyed_and_indexed_by_their_code_get_the_number_the_store_assigns() {
    let db = Database::in_memory();
    let seqs = Sequences::new(db.clone());
    let options = SequenceOptions {
        mode: Mode::Gapless,
        width: 5,
        ..SequenceOptions::default()
    };
    seqs.create("INV", options).unwrap();
    let coll = Arc::new(invoices(&db));
    let handles: Vec<_> = (0..3).map(|_| seqs.gapless("INV").unwrap()).collect();
    let (threads, each) = (6usize, 40usize);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (seq, coll) = (&handles[t % handles.len()], Arc::clone(&coll));
            s.spawn(move || {
                for i in 0..each {
                    let inserts = Arc::clone(&coll);
                    let customer = format!("c{}", (t * each + i) % 7);
                    let total = (t * each + i) as u64;
                    let issued = seq
                        .next_coded(move |code, record| {
                            let invoice = Invoice {
                                code: code.to_owned(),
                                customer: customer.clone(),
                                total,
                            };
                            record
                                .append(inserts.insert_write(&invoice).unwrap())
                                .unwrap();
                        })
                        .unwrap();
                    let stored = coll.get(&key![issued.code().as_str()]).unwrap().unwrap();
                    assert_eq!(stored.code, issued.code(), "the field holds the real code");
                    assert_eq!(stored.total, total);
                }
            });
        }
    });
    let n = (threads * each) as u64;
    let mut by_customer = 0;
    for c in 0..7 {
        let page = coll
            .list_by(
                "by_customer",
                &key![format!("c{c}").as_str()],
                Default::default(),
            )
            .unwrap();
        for (pk, invoice) in &page.items {
            assert_eq!(
                pk,
                &key![invoice.code.as_str()],
                "the entry points at its record"
            );
        }
        by_customer += page.items.len();
    }
    assert_eq!(by_customer as u64, n, "one index entry per invoice");
    for number in 1..=n {
        let code = format!("INV{number:05}");
        assert!(coll.get(&key![code.as_str()]).unwrap().is_some(), "{code}");
    }
    let report = coll.verify().unwrap();
    assert!(report.is_clean(), "{report:?}");
    let stats: Vec<_> = handles.iter().map(|h| h.stats()).collect();
    assert!(stats.iter().all(|s| s.counter_conflicts == 0), "{stats:?}");
    assert!(
        stats.iter().all(|s| s.store_numbered == s.commits),
        "{stats:?}"
    );
}

#[test]
fn a_code_taken_by_another_record_is_refused_and_takes_no_number() {
    let db = Database::in_memory();
    let seqs = Sequences::new(db.clone());
    let options = SequenceOptions {
        mode: Mode::Gapless,
        ..SequenceOptions::default()
    };
    seqs.create("INV", options).unwrap();
    let coll = Arc::new(invoices(&db));
    // An invoice inserted by hand under the code the sequence hands out next.
    let squatter = Invoice {
        code: "INV001".into(),
        customer: "x".into(),
        total: 0,
    };
    coll.insert(&squatter).unwrap();
    let seq = seqs.gapless("INV").unwrap();
    let build = |coll: Arc<Collection<Invoice, Database>>| {
        move |code: &str, record: &mut tuplekv::sequence::Record| {
            let invoice = Invoice {
                code: code.to_owned(),
                customer: "y".into(),
                total: 1,
            };
            record.append(coll.insert_write(&invoice).unwrap()).unwrap();
        }
    };
    let err = seq.next_coded(build(Arc::clone(&coll))).unwrap_err();
    assert!(
        matches!(err, tuplekv::sequence::Error::Rejected(_)),
        "{err:?}"
    );
    assert_eq!(coll.get(&key!["INV001"]).unwrap(), Some(squatter));
    coll.delete(&key!["INV001"]).unwrap();
    let issued = seq.next_coded(build(Arc::clone(&coll))).unwrap();
    assert_eq!(
        issued.code(),
        "INV001",
        "the refused request took no number"
    );
}
