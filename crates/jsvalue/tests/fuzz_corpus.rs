//! Replays the `decode_v8` fuzz corpus (`fuzz/corpus/decode_v8/seed-*`) through the target's
//! body, without libFuzzer.

#[test]
fn the_decode_v8_corpus_replays_without_a_failure() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus/decode_v8");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).expect("the corpus directory") {
        let path = entry.expect("an entry").path();
        let bytes = std::fs::read(&path).expect("a seed");
        tuplekv_jsvalue::fuzz_decode_target(&bytes);
        seen += 1;
    }
    assert!(seen >= 7, "the committed seeds are there ({seen})");
}
