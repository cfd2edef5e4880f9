//! Replays the `server_request` fuzz target's committed inputs (the seed corpus and every
//! minimised crash saved by `cargo xtask fuzz`) through the body the fuzzer runs, so a fixed
//! crash stays fixed.

use std::path::PathBuf;

use tuplekv_testkit::fuzz::server_request_target;

const TARGET: &str = "server_request";

fn inputs() -> Vec<(PathBuf, Vec<u8>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut found = Vec::new();
    for (dir, seeds_only) in [
        (root.join("corpus").join(TARGET), true),
        (root.join("regressions").join(TARGET), false),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("readable corpus dir").path();
            let seed = path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("seed-"));
            if path.is_file() && (seed || !seeds_only) {
                found.push((path.clone(), std::fs::read(&path).expect("readable input")));
            }
        }
    }
    found
}

#[test]
fn server_request_fuzz_corpus_replays_cleanly() {
    let inputs = inputs();
    assert!(
        inputs.len() >= 10,
        "seed corpus missing: {} inputs",
        inputs.len()
    );
    for (path, data) in inputs {
        let outcome = std::panic::catch_unwind(|| server_request_target(&data));
        assert!(
            outcome.is_ok(),
            "{} fails the fuzz property",
            path.display()
        );
    }
}

#[test]
fn server_request_target_survives_truncations_of_every_seed() {
    for (_, data) in inputs() {
        for end in 0..data.len() {
            server_request_target(&data[..end]);
        }
    }
}
