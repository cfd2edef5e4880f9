//! `Store::health` of an `EtcdStore`, and a tuplekv server's `/readyz` over one: ready while
//! the cluster answers, 503 naming the cluster once it cannot be reached.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

use tuplekv_engine::{Health, Store};
use tuplekv_etcd::EtcdStore;
use tuplekv_server::ReadMode;
use tuplekv_testkit::etcd::Cluster;
use tuplekv_testkit::server::TestServer;

/// `GET path` over HTTP/1.1: the status and the body.
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("read");
    let status = reply
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let body = reply
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn readyz_is_200_while_etcd_answers_and_503_once_it_is_unreachable() {
    let cluster = Cluster::start(1);
    let store = Arc::new(EtcdStore::connect(&cluster.client_urls(), b"health/").expect("connect"));
    assert_eq!(store.health(), Health::Ready);
    let server = TestServer::of(Arc::clone(&store))
        .config(|c| c.with_read_mode(ReadMode::BlockingPool))
        .start();
    let (status, body) = get(server.addr, "/readyz");
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    cluster.kill(0);
    // The answer found while the cluster was up may be reused for `HEALTH_CACHE_TTL`; the
    // probe is asked again until the cache has expired (no clock is read by the test).
    let (status, body) = loop {
        let (status, body) = get(server.addr, "/readyz");
        if status != 200 {
            break (status, body);
        }
        std::thread::sleep(tuplekv_etcd::HEALTH_CACHE_TTL / 4);
    };
    assert_eq!(status, 503, "{body}");
    assert!(body.starts_with("not ready: the etcd cluster"), "{body}");
    assert_eq!(body.lines().count(), 1, "one line: {body}");
    let (status, body) = get(server.addr, "/healthz");
    assert_eq!((status, body.as_str()), (200, "ok\n"), "alive all the same");
}
