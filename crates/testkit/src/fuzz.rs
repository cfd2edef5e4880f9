//! Bodies of the cargo-fuzz targets. `fuzz/fuzz_targets/*.rs` only call these, and the codec's
//! and the engine's tests replay the committed corpus through them.

use tuplekv_codec::{decode_key, decode_parts, encode_key, validate_key};

/// Target `decode_key`: arbitrary bytes never panic the decoder; an accepted input is
/// canonical (re-encodes to the same bytes), and all three decoders agree.
///
/// # Panics
/// When a property fails, which is how the fuzzer reports it.
pub fn decode_key_target(data: &[u8]) {
    let owned = decode_key(data);
    let validated = validate_key(data);
    let borrowed: Result<Vec<_>, _> = decode_parts(data).collect();
    match owned {
        Ok(key) => {
            assert_eq!(encode_key(&key), data, "accepted input must be canonical");
            assert_eq!(validated, Ok(key.len()), "validator must accept it too");
            let borrowed = borrowed.expect("borrowed decoder must accept it too");
            let parts: Vec<_> = borrowed.into_iter().map(|p| p.into_owned()).collect();
            assert_eq!(parts, key.parts(), "borrowed decoder must agree");
            assert_eq!(decode_key(&encode_key(&key)), Ok(key));
        }
        Err(e) => {
            assert!(e.offset() < data.len(), "error offset {e} out of input");
            assert_eq!(
                validated,
                Err(e.clone()),
                "validator must fail the same way"
            );
            assert_eq!(
                borrowed.err(),
                Some(e),
                "borrowed decoder must fail the same way"
            );
        }
    }
}

/// Body of the `engine_ops` fuzz target: the input bytes are decoded into operations
/// ([`crate::engine_ops::ops_from_bytes`]) and run on the engine and the reference model; any
/// disagreement or panic is a bug.
pub fn engine_ops_target(data: &[u8]) {
    let ops = crate::engine_ops::ops_from_bytes(data);
    if let Err(disagreement) = crate::engine_ops::run_ops(&ops) {
        panic!("engine and model disagree: {disagreement}");
    }
}

/// Body of the `recovery` fuzz target: a database directory is built from the input (a real
/// history with its files edited, or files made from the input with valid checksums) and
/// opened; recovery must not panic, must fail with `Corrupt` or `Io` or recover a prefix of
/// the history, and what it recovers must take a commit and open again. See
/// [`crate::recovery`].
pub fn recovery_target(data: &[u8]) {
    crate::recovery::run(data);
}

/// Body of the `server_request` fuzz target: the first byte picks a KV Connect request kind
/// and the rest is its protobuf body, decoded by `tuplekv_server::protocol` as the server
/// does. Decoding never panics; what it accepts is within the server's limits; and running it
/// on an in-memory store never fails with a server-side (5xx) error, never panics, and a
/// refused write changes nothing.
///
/// # Panics
/// When a property fails, which is how the fuzzer reports it.
pub fn server_request_target(data: &[u8]) {
    use tuplekv_engine::{Database, ReadView, Store};
    use tuplekv_server::ApiError;
    use tuplekv_server::limits::*;
    use tuplekv_server::protocol::{
        decode_read_mode, decode_snapshot_read, decode_watch, decode_write, decode_write_extension,
    };

    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    let refused = |e: &ApiError| {
        assert!(
            e.status().is_client_error(),
            "a bad request must be the client's error: {e}"
        );
    };
    let db = Database::in_memory();
    // tuplekv's extension fields: decoded (or refused) without a panic, within their limits.
    match decode_read_mode(body) {
        Ok(_) => {} // typed: an `at` is a versionstamp, a flag a bool
        Err(e) => refused(&e),
    }
    match decode_write_extension(body) {
        Ok(ext) => assert!(ext.is_none_or(|e| {
            e.range_checks.len() <= RANGE_CHECKS_MAX
                && e.numbering.counters.len() <= COUNTERS_PER_COMMIT_MAX
                && e.numbering.slots.len() <= NUMBER_SLOTS_MAX
        })),
        Err(e) => refused(&e),
    }
    // A server without the extension reads the plain write, or refuses extension conditions.
    if let Err(e) = decode_write(body, false) {
        refused(&e);
    }
    match kind % 3 {
        0 => match decode_snapshot_read(body) {
            Ok(ranges) => {
                assert!(ranges.len() <= READ_RANGES_MAX);
                assert!(ranges.iter().all(|r| r.limit >= 1));
                assert!(ranges.iter().map(|r| r.limit).sum::<usize>() <= READ_ENTRIES_MAX);
                let snapshot = db.snapshot();
                for r in &ranges {
                    assert!(r.range.start.len() <= READ_KEY_SIZE_MAX);
                    assert!(r.range.end.len() <= READ_KEY_SIZE_MAX);
                    snapshot
                        .scan(&r.range, r.reverse, r.limit)
                        .expect("a decoded range reads");
                }
            }
            Err(e) => refused(&e),
        },
        // As the server decodes it, the numbering included; the range checks need snapshots
        // the server holds, which this store has none of.
        1 => match decode_write(body, true) {
            Ok((mut write, _)) => {
                write.range_checks.clear();
                assert!(write.checks.len() <= CHECKS_MAX);
                assert!(write.mutations.len() <= MUTATIONS_MAX);
                let before = db.current_versionstamp();
                match db.commit(write) {
                    Ok(_) => {}
                    Err(e) => {
                        refused(&ApiError::from_engine(&e));
                        assert_eq!(db.current_versionstamp(), before, "a refused write wrote");
                        // Every key the write could have made sorts below this bound.
                        let everything = tuplekv_engine::ByteRange {
                            start: Vec::new(),
                            end: vec![0xff; READ_KEY_SIZE_MAX],
                        };
                        let left = db.snapshot().scan(&everything, false, 1).expect("scan");
                        assert!(left.is_empty(), "a refused write wrote {left:?}");
                    }
                }
            }
            Err(e) => refused(&e),
        },
        _ => match decode_watch(body) {
            Ok(keys) => {
                assert!(keys.len() <= WATCHED_KEYS_MAX);
                assert!(keys.iter().all(|k| k.len() <= WRITE_KEY_SIZE_MAX));
                let mut watch = db.watch_raw(keys).expect("a decoded watch opens");
                assert!(
                    watch.try_next().is_some(),
                    "the first state is ready at once"
                );
            }
            Err(e) => refused(&e),
        },
    }
}
