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

#[test]
fn engine_ops_fuzz_corpus_replays_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut files = inputs(&root.join("corpus/engine_ops"), "seed-");
    let seeds = files.len();
    files.extend(inputs(&root.join("regressions/engine_ops"), ""));
    assert!(seeds >= 10, "seed corpus missing: {seeds} inputs");
    for file in files {
        let data = fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        tuplekv_testkit::fuzz::engine_ops_target(&data);
    }
}

#[test]
fn recovery_fuzz_corpus_replays_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut files = inputs(&root.join("corpus/recovery"), "seed-");
    let seeds = files.len();
    files.extend(inputs(&root.join("regressions/recovery"), ""));
    assert!(seeds >= 10, "seed corpus missing: {seeds} inputs");
    for file in files {
        let data = fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        // What recovery made of each input, for `-- --nocapture`: the body is the target's.
        let outcome = tuplekv_testkit::recovery::run(&data);
        println!("{}: {outcome:?}", file.display());
    }
}
