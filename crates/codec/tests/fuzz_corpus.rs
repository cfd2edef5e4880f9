//! Replays the fuzz target's committed inputs (the seed corpus and every minimised crash
//! saved by `cargo xtask fuzz`) through the same body the fuzzer runs, so a fixed crash stays
//! fixed.

use std::path::PathBuf;

use tuplekv_testkit::fuzz::decode_key_target;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut found = Vec::new();
    for dir in [
        root.join("corpus").join(target),
        root.join("regressions").join(target),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("readable corpus dir").path();
            let committed = path
                .parent()
                .is_some_and(|p| p.ends_with(format!("regressions/{target}")))
                || path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("seed-"));
            if path.is_file() && committed {
                found.push((
                    path.clone(),
                    std::fs::read(&path).expect("readable corpus file"),
                ));
            }
        }
    }
    found
}

#[test]
fn decode_key_fuzz_corpus_replays_cleanly() {
    let inputs = inputs("decode_key");
    assert!(
        inputs.len() >= 10,
        "seed corpus missing: {} inputs",
        inputs.len()
    );
    for (path, data) in inputs {
        let outcome = std::panic::catch_unwind(|| decode_key_target(&data));
        assert!(
            outcome.is_ok(),
            "{} fails the fuzz property",
            path.display()
        );
    }
}

#[test]
fn decode_key_survives_every_short_input() {
    // Exhaustive over every byte string of length <= 2 plus prefixes of type codes.
    decode_key_target(&[]);
    for a in 0..=255u8 {
        decode_key_target(&[a]);
        for b in 0..=255u8 {
            decode_key_target(&[a, b]);
        }
    }
}
