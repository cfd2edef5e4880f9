//! Replays the engine's fuzz targets' committed inputs (`engine_ops` and `recovery`): the seed
//! corpus (`fuzz/corpus/<target>/seed-*`) and every minimised failure saved by
//! `cargo xtask fuzz` (`fuzz/regressions/<target>/`), so a fixed bug stays fixed without
//! libFuzzer.

use std::fs;
use std::path::{Path, PathBuf};

fn inputs(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect();
    out.sort();
    out
}

/// The committed inputs of fuzz target `target` with their bytes: its seed corpus (which must
/// hold at least ten) and its saved regressions.
fn committed(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut files = inputs(&root.join("corpus").join(target), "seed-");
    let seeds = files.len();
    assert!(seeds >= 10, "{target} seed corpus missing: {seeds} inputs");
    files.extend(inputs(&root.join("regressions").join(target), ""));
    files
        .into_iter()
        .map(|file| {
            let data = fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            (file, data)
        })
        .collect()
}

#[test]
fn engine_ops_fuzz_corpus_replays_cleanly() {
    for (_, data) in committed("engine_ops") {
        tuplekv_testkit::fuzz::engine_ops_target(&data);
    }
}

#[test]
fn recovery_fuzz_corpus_replays_cleanly() {
    for (file, data) in committed("recovery") {
        // What recovery made of each input, for `-- --nocapture`: the body is the target's.
        let outcome = tuplekv_testkit::recovery::run(&data);
        println!("{}: {outcome:?}", file.display());
    }
}
