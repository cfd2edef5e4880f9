//! What the KV Connect server's per-read `TCP_QUICKACK` re-arm costs, beside one 100-byte
//! request/response round trip over loopback TCP (the least a KV Connect request costs): the
//! server re-arms once per read that returns data, one to three times per request. Run with
//! `cargo bench -p tuplekv-benches --bench net` (Linux; elsewhere the server does not re-arm and
//! this bench measures only the round trip).

use std::hint::black_box;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

use criterion::{Criterion, criterion_group, criterion_main};

/// A connected loopback pair, with an echo thread on the far end answering `len`-byte
/// messages with `len` bytes.
fn echo_pair(len: usize) -> TcpStream {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let (mut far, _) = listener.accept().expect("accept");
        far.set_nodelay(true).expect("nodelay");
        let mut buf = vec![0u8; len];
        while far.read_exact(&mut buf).is_ok() {
            if far.write_all(&buf).is_err() {
                return;
            }
        }
    });
    let near = TcpStream::connect(addr).expect("connect");
    near.set_nodelay(true).expect("nodelay");
    near
}

fn net(c: &mut Criterion) {
    const LEN: usize = 100;
    let mut g = c.benchmark_group("net/quickack");
    let mut near = echo_pair(LEN);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let sock = socket2::SockRef::from(&near);
        g.bench_function("tuplekv: re-arm TCP_QUICKACK", |b| {
            b.iter(|| black_box(sock.set_tcp_quickack(true)))
        });
    }
    let (msg, mut reply) = (vec![7u8; LEN], vec![0u8; LEN]);
    g.bench_function("one 100-byte loopback round trip", |b| {
        b.iter(|| {
            near.write_all(&msg).expect("send");
            near.read_exact(&mut reply).expect("reply");
        })
    });
    g.finish();
}

criterion_group!(benches, net);
criterion_main!(benches);
