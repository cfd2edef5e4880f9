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
