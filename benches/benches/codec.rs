//! Codec benches: encode and decode the fixed key mix with tuplekv and with Deno's own codec
//! (`denokv_proto`) in the same run. Run with `cargo bench -p tuplekv-benches --bench codec`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use denokv_proto::{Key as DenoKey, KeyPart as DenoPart};
use tuplekv_benches::workloads::codec_mix;
use tuplekv_codec::{Key, KeyPart, KeyPartRef, decode_key, decode_parts, encode_key, validate_key};

/// The same key in denokv_proto's types.
fn to_deno(key: &Key) -> DenoKey {
    DenoKey(
        key.parts()
            .iter()
            .map(|p| match p {
                KeyPart::Bytes(b) => DenoPart::Bytes(b.clone()),
                KeyPart::String(s) => DenoPart::String(s.clone()),
                KeyPart::Number(x) => DenoPart::Float(*x),
                KeyPart::BigInt(i) => DenoPart::Int(num_bigint_04::BigInt::from_signed_bytes_le(
                    &i.to_signed_bytes_le(),
                )),
                KeyPart::Bool(false) => DenoPart::False,
                KeyPart::Bool(true) => DenoPart::True,
            })
            .collect(),
    )
}

fn codec(c: &mut Criterion) {
    let keys = codec_mix();
    let deno_keys: Vec<DenoKey> = keys.iter().map(to_deno).collect();
    let encoded: Vec<Vec<u8>> = keys.iter().map(encode_key).collect();
    for (ours, theirs) in encoded.iter().zip(&deno_keys) {
        let theirs = denokv_proto::encode_key(theirs).expect("encodable");
        assert_eq!(ours, &theirs, "both codecs must produce the same bytes");
    }

    let mut g = c.benchmark_group("codec/encode/mix10");
    g.throughput(Throughput::Elements(keys.len() as u64));
    g.bench_function("tuplekv", |b| {
        b.iter(|| {
            for k in &keys {
                black_box(encode_key(black_box(k)));
            }
        })
    });
    g.bench_function("denokv_proto", |b| {
        b.iter(|| {
            for k in &deno_keys {
                black_box(denokv_proto::encode_key(black_box(k)).expect("encodable"));
            }
        })
    });
    g.finish();

    let mut g = c.benchmark_group("codec/decode/mix10");
    g.throughput(Throughput::Elements(keys.len() as u64));
    g.bench_function("tuplekv_owned", |b| {
        b.iter(|| {
            for bytes in &encoded {
                black_box(decode_key(black_box(bytes)).expect("valid"));
            }
        })
    });
    g.bench_function("tuplekv_borrowed", |b| {
        b.iter(|| {
            for bytes in &encoded {
                for part in decode_parts(black_box(bytes)) {
                    let part: KeyPartRef<'_> = part.expect("valid");
                    black_box(part);
                }
            }
        })
    });
    g.bench_function("tuplekv_validate", |b| {
        b.iter(|| {
            for bytes in &encoded {
                black_box(validate_key(black_box(bytes)).expect("valid"));
            }
        })
    });
    g.bench_function("denokv_proto", |b| {
        b.iter(|| {
            for bytes in &encoded {
                black_box(denokv_proto::decode_key(black_box(bytes)).expect("valid"));
            }
        })
    });
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
