//! The borrowed decoder and the validator do not allocate: the engine runs them on every key
//! it reads. (Counted with a thread-local counting allocator, so parallel tests do not
//! interfere.)

use tuplekv_codec::{KeyPartRef, decode_parts, encode_key, key, validate_key};

#[test]
fn borrowed_decoder_and_validator_make_zero_allocations() {
    let keys = [
        key!["users_by_email", "ada@example.com"],
        key!["orders", 1_234_567, 99.5, true, false],
        key![
            -(num_bigint::BigInt::from(3u8) << 200u32),
            vec![1u8, 2, 0xff],
            f64::NAN
        ],
        key!["a string with a NUL \0 inside", 7],
    ];
    let encoded: Vec<Vec<u8>> = keys.iter().map(encode_key).collect();
    let mut seen = 0;
    let info = allocation_counter::measure(|| {
        for (i, bytes) in encoded.iter().enumerate() {
            assert!(validate_key(bytes).is_ok());
            for part in decode_parts(bytes) {
                match part {
                    // The one documented exception: an escaped NUL must be unescaped.
                    Ok(KeyPartRef::String(s)) if s.contains('\0') => {
                        assert_eq!(i, 3);
                    }
                    Ok(KeyPartRef::BigInt(b)) => seen += b.magnitude_len(),
                    Ok(_) => seen += 1,
                    Err(e) => panic!("{e}"),
                }
            }
        }
    });
    assert!(seen > 0);
    assert_eq!(info.count_total, 1, "only the escaped string allocates");

    let info = allocation_counter::measure(|| {
        for bytes in &encoded {
            assert!(validate_key(bytes).is_ok());
        }
    });
    assert_eq!(info.count_total, 0, "validation never allocates");
}
