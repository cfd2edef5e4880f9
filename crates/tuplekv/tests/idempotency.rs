//! The idempotency-key pattern of `docs/async.md`, run against a store whose async calls
//! wait and that can really commit and then lose the answer: the client's request id is a unique index of the invoice,
//! written in the gapless request's own commit, so a retry (or a handler that met an unknown
//! outcome) finds the first attempt instead of creating a second invoice, and the numbers
//! stay exactly `1..=n`.

use serde::{Deserialize, Serialize};
use tuplekv::index::Collection;
use tuplekv::sequence::{GaplessSequence, Mode, SequenceOptions, Sequences};
use tuplekv::{Database, ListOptions, Store, key};
use tuplekv_testkit::contract::backends::Waiting;
use tuplekv_testkit::executor::block_on;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Invoice {
    number: u64,
    request: String,
    amount: u64,
}

/// What answered the request.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    /// This call committed the invoice.
    Created,
    /// This call's commit had an unknown outcome, and the invoice under its request id
    /// settled it; the error had named this code.
    Settled { reported: Option<String> },
    /// An earlier attempt (or a concurrent duplicate) had already created it.
    Found,
}

/// The handler: look the request id up; if absent, take the next gapless number with the
/// invoice (and its unique request entry) in the same commit; if that commit's outcome is
/// unknown or it lost to a duplicate, the request id says what happened.
async fn create_invoice<S: Store + Clone + 'static>(
    invoices: &Collection<Invoice, S>,
    numbers: &GaplessSequence<S>,
    request: &str,
    amount: u64,
) -> Result<(Invoice, Answer), Box<dyn std::error::Error + Send + Sync>> {
    let by_request = key![request];
    if let Some((_, invoice)) = invoices.get_by_async("request", &by_request).await? {
        return Ok((invoice, Answer::Found));
    }
    let (collection, id) = (invoices.clone(), request.to_owned());
    let issued = numbers
        .next_with_async(move |issued, record| {
            let invoice = Invoice {
                number: issued.number(),
                request: id.clone(),
                amount,
            };
            if let Ok(write) = collection.insert_write(&invoice) {
                let _ = record.append(write);
            }
        })
        .await;
    match issued {
        Ok(issued) => {
            let number = issued.number();
            let invoice = invoices.get_async(&key![number]).await?;
            Ok((
                invoice.ok_or("the committed invoice is missing")?,
                Answer::Created,
            ))
        }
        Err(e) if e.is_outcome_unknown() || e.is_conflict() => {
            let reported = match &e {
                tuplekv::sequence::Error::OutcomeUnknown { code, .. } => code.clone(),
                _ => None,
            };
            match invoices.get_by_async("request", &by_request).await? {
                Some((_, invoice)) if e.is_outcome_unknown() => {
                    Ok((invoice, Answer::Settled { reported }))
                }
                Some((_, invoice)) => Ok((invoice, Answer::Found)),
                // Not committed: nothing of it was written, and retrying is safe.
                None => Err(e.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

fn setup() -> (
    Waiting,
    Collection<Invoice, Waiting>,
    GaplessSequence<Waiting>,
) {
    let store = Waiting::new(Database::in_memory());
    let invoices = Collection::builder("invoices", |i: &Invoice| key![i.number])
        .unique("request", |i| Some(key![i.request.clone()]))
        .open(store.clone())
        .expect("open");
    let seqs = Sequences::new(store.clone());
    let options = SequenceOptions {
        mode: Mode::Gapless,
        width: 5,
        ..SequenceOptions::default()
    };
    seqs.create("INV", options).expect("create");
    (store, invoices, seqs.gapless("INV").expect("handle"))
}

fn numbers(invoices: &Collection<Invoice, Waiting>) -> Vec<u64> {
    let page = invoices.list(ListOptions::default()).expect("list");
    page.items.iter().map(|(_, i)| i.number).collect()
}

#[test]
fn a_request_whose_answer_was_lost_is_settled_by_its_request_id_and_a_retry_creates_nothing() {
    let (store, invoices, seq) = setup();
    store.lose_next_answer();
    let (first, answer) = block_on(create_invoice(&invoices, &seq, "req-1", 100)).expect("settled");
    assert_eq!(first.number, 1);
    assert_eq!(
        answer,
        Answer::Settled {
            reported: Some("INV00001".into())
        },
        "the lost request named the code its invoice has"
    );

    // The client never saw an answer, so it sends the request again.
    let (again, answer) = block_on(create_invoice(&invoices, &seq, "req-1", 100)).expect("found");
    assert_eq!((again, answer), (first, Answer::Found));

    let (next, answer) = block_on(create_invoice(&invoices, &seq, "req-2", 250)).expect("new");
    assert_eq!((next.number, answer), (2, Answer::Created));
    assert_eq!(
        numbers(&invoices),
        [1, 2],
        "one invoice per request, no gap"
    );
}

#[test]
fn two_concurrent_requests_with_one_id_create_one_invoice() {
    let (_store, invoices, seq) = setup();
    let answers: Vec<(Invoice, Answer)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| block_on(create_invoice(&invoices, &seq, "req-dup", 10)).expect("ok"))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("joined"))
            .collect()
    });
    assert_eq!(answers[0].0, answers[1].0, "both answer the same invoice");
    let created = answers
        .iter()
        .filter(|(_, a)| *a == Answer::Created)
        .count();
    assert_eq!(created, 1, "{answers:?}");
    let (third, _) = block_on(create_invoice(&invoices, &seq, "req-3", 10)).expect("new");
    assert_eq!(third.number, 2, "the losing duplicate used no number");
    assert_eq!(numbers(&invoices), [1, 2]);
}
