//! Shared by the server's tests of numbered writes (`numbering.rs`, `limits.rs`): bodies of
//! tuplekv's extension carrying a numbering, and the report of a write's output. Kept apart
//! from `common` because the CLI's tests use that module, without `tuplekv_wire`.
#![allow(dead_code, unreachable_pub)]

use denokv_proto::datapath as pb;
use prost::Message;

use crate::common::Reply;

/// `write`'s body with tuplekv's extension field carrying `numbering`.
pub fn numbered_body(write: pb::AtomicWrite, numbering: tuplekv_wire::Numbering) -> Vec<u8> {
    let mut body = write.encode_to_vec();
    tuplekv_wire::AtomicWriteExtension {
        tuplekv: Some(tuplekv_wire::WriteExtension {
            range_checks: Vec::new(),
            numbering: Some(numbering),
        }),
    }
    .encode_raw(&mut body);
    body
}

/// A claim of `count` numbers from the counter at `key`, from `start` when it is absent, up
/// to `u64::MAX`.
pub fn claim(key: &[u8], start: u64, count: u64) -> tuplekv_wire::CounterClaim {
    tuplekv_wire::CounterClaim {
        key: key.to_vec(),
        start,
        count,
        max: u64::MAX,
    }
}

/// A digit placeholder of `width` at `offset` of `target` number `index`, taking number
/// `ordinal` of counter `counter`.
pub fn digits(
    counter: u64,
    ordinal: u64,
    target: tuplekv_wire::SlotTargetKind,
    index: u64,
    offset: u64,
    width: u64,
    widen: bool,
) -> tuplekv_wire::NumberSlot {
    tuplekv_wire::NumberSlot {
        counter,
        ordinal,
        target: target.into(),
        index,
        offset,
        form: tuplekv_wire::NumberFormKind::Digits.into(),
        width,
        widen,
    }
}

/// The output extension's report of a write (`None`: the output carries none).
pub fn outcome(reply: &Reply) -> Option<tuplekv_wire::WriteOutcome> {
    tuplekv_wire::AtomicWriteOutputExtension::decode(reply.body.clone())
        .expect("an output")
        .tuplekv
}
