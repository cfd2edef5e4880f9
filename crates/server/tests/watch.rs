//! `watch` streams: a ping at once, the current state first, a frame per change, pings while
//! idle, a slot freed when the client goes, a bounded number of streams, and the end of every
//! stream at shutdown.

use tuplekv_testkit::kv_connect as common;

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use common::*;
use denokv_proto::datapath as pb;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use prost::Message;
use tuplekv_server::ServerConfig;

/// Reads `u32 LE length ++ WatchOutput` frames off a watch response.
struct Frames {
    body: Incoming,
    buf: BytesMut,
}

/// One frame: `None` for a ping.
type Frame = Option<pb::WatchOutput>;

impl Frames {
    async fn open(c: &mut Client, keys: &[Vec<u8>]) -> Frames {
        let watch = pb::Watch {
            keys: keys
                .iter()
                .map(|k| pb::WatchKey { key: k.clone() })
                .collect(),
        };
        let req = data_request(c.addr, "watch", watch.encode_to_vec()).body_bytes();
        let res = c.send(req).await.expect("watch response");
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-type"], "application/octet-stream");
        Frames {
            body: res.into_body(),
            buf: BytesMut::new(),
        }
    }

    /// The next frame, or `None` at the end of the stream.
    async fn next(&mut self) -> Option<Frame> {
        loop {
            if self.buf.len() >= 4 {
                let len = u32::from_le_bytes(self.buf[..4].try_into().expect("4 bytes")) as usize;
                if self.buf.len() >= 4 + len {
                    self.buf.advance(4);
                    let msg = self.buf.split_to(len);
                    if len == 0 {
                        return Some(None);
                    }
                    return Some(Some(
                        pb::WatchOutput::decode(msg.freeze()).expect("WatchOutput"),
                    ));
                }
            }
            match self.body.frame().await {
                None => return None,
                Some(Err(_)) => return None,
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The next data frame, skipping pings.
    async fn next_data(&mut self) -> pb::WatchOutput {
        loop {
            match self.next().await.expect("stream open") {
                Some(out) => return out,
                None => continue,
            }
        }
    }
}

fn value_of(k: &pb::WatchKeyOutput) -> Option<Vec<u8>> {
    k.entry_if_changed.as_ref().map(|e| e.value.clone())
}

#[tokio::test]
async fn watch_sends_a_ping_then_the_current_state_then_each_change() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    c.commit(write_of(vec![], vec![set(&key("a"), bytes_value(b"1"))]))
        .await;
    let mut w = Frames::open(&mut server.h2().await, &[key("a"), key("b")]).await;
    assert_eq!(w.next().await, Some(None), "a ping comes first, at once");
    let first = w.next_data().await;
    assert_eq!(first.status, pb::SnapshotReadStatus::SrSuccess as i32);
    assert_eq!(first.keys.len(), 2);
    assert!(
        first.keys.iter().all(|k| k.changed),
        "every key counts as changed at first"
    );
    assert_eq!(value_of(&first.keys[0]), Some(b"1".to_vec()));
    assert_eq!(value_of(&first.keys[1]), None, "a missing key has no entry");
    c.commit(write_of(vec![], vec![set(&key("b"), u64_value(5))]))
        .await;
    let update = w.next_data().await;
    // Every frame carries every key (Deno's client needs it): `a` is unchanged but present.
    assert!(update.keys.iter().all(|k| k.changed));
    assert_eq!(value_of(&update.keys[0]), Some(b"1".to_vec()));
    let b = update.keys[1].entry_if_changed.as_ref().expect("b's entry");
    assert_eq!(
        (b.key.clone(), b.value.clone()),
        (key("b"), 5u64.to_le_bytes().to_vec())
    );
    assert_eq!(b.versionstamp.len(), 10);
    c.commit(write_of(
        vec![],
        vec![mutation(&key("a"), pb::MutationType::MDelete, None)],
    ))
    .await;
    let deleted = w.next_data().await;
    assert!(deleted.keys[0].changed && deleted.keys[0].entry_if_changed.is_none());
    server.stop().await;
}

#[tokio::test]
async fn a_watch_of_no_keys_sends_its_empty_first_state() {
    let server = TestServer::in_memory().spawn().await;
    let mut w = Frames::open(&mut server.h2().await, &[]).await;
    assert_eq!(w.next().await, Some(None), "the ping");
    let first = w.next_data().await;
    assert!(first.keys.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn an_idle_watch_gets_pings() {
    let config = ServerConfig::new(TOKEN)
        .expect("a long enough token")
        .with_watch_ping_interval(Duration::from_millis(20));
    let server = TestServer::in_memory().with_config(config).spawn().await;
    let mut w = Frames::open(&mut server.h1().await, &[key("idle")]).await;
    assert_eq!(w.next().await, Some(None));
    w.next_data().await;
    for _ in 0..3 {
        assert_eq!(w.next().await, Some(None), "a ping while nothing changes");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_zero_ping_interval_is_raised_to_the_minimum_instead_of_panicking() {
    let config = ServerConfig::new(TOKEN)
        .expect("a long enough token")
        .with_watch_ping_interval(Duration::ZERO);
    let server = TestServer::in_memory().with_config(config).spawn().await;
    let mut w = Frames::open(&mut server.h2().await, &[key("idle")]).await;
    assert_eq!(w.next().await, Some(None));
    w.next_data().await;
    assert_eq!(w.next().await, Some(None), "a ping while nothing changes");
    server.stop().await;
}

#[tokio::test]
async fn a_client_that_disconnects_mid_watch_frees_its_stream() {
    let config = ServerConfig::new(TOKEN)
        .expect("a long enough token")
        .with_watch_ping_interval(Duration::from_millis(20));
    let server = TestServer::in_memory().with_config(config).spawn().await;
    for h2 in [true, false] {
        let mut c = if h2 {
            server.h2().await
        } else {
            server.h1().await
        };
        let mut w = Frames::open(&mut c, &[key("k")]).await;
        w.next_data().await;
        assert_eq!(server.stats.open_watch_streams(), 1);
        drop(w);
        drop(c);
        wait_until("the watch stream to be freed", || {
            server.stats.open_watch_streams() == 0
        })
        .await;
    }
    assert_eq!(server.stats.watch_requests(), 2);
    server.stop().await;
}

#[tokio::test]
async fn watch_streams_at_the_limit_open_and_one_more_is_429() {
    let config = ServerConfig::new(TOKEN)
        .expect("a long enough token")
        .with_watch_streams_max(2);
    let server = TestServer::in_memory().with_config(config).spawn().await;
    let mut c = server.h2().await;
    let first = Frames::open(&mut c, &[key("x")]).await;
    let _second = Frames::open(&mut c, &[key("y")]).await;
    let req = data_request(server.addr, "watch", pb::Watch::default().encode_to_vec()).body_bytes();
    let third = c.call(req).await;
    assert_eq!(third.status, 429, "{}", third.text());
    assert!(third.text().contains("Too many watch streams"));
    drop(first);
    wait_until("a slot to be freed", || {
        server.stats.open_watch_streams() == 1
    })
    .await;
    let _again = Frames::open(&mut c, &[key("z")]).await;
    server.stop().await;
}

#[tokio::test]
async fn shutdown_ends_open_watch_streams() {
    let server = TestServer::in_memory().spawn().await;
    let mut w = Frames::open(&mut server.h2().await, &[key("k")]).await;
    w.next_data().await;
    let stats = Arc::clone(&server.stats);
    server.stop().await;
    tokio::time::timeout(WAIT_MAX, async { while w.next().await.is_some() {} })
        .await
        .expect("the watch stream ends at shutdown");
    assert_eq!(stats.open_watch_streams(), 0);
}
