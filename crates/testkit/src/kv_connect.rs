//! For the server's and the command's tests: a raw hyper client speaking HTTP/1.1 or h2c with
//! prior knowledge, and builders for KV Connect's protobuf messages. The test server itself
//! lives in [`crate::server`] and is re-exported here with its token and configuration.
#![allow(clippy::unwrap_used, reason = "test support fails loudly")]

use std::net::SocketAddr;

use bytes::Bytes;
use denokv_proto::datapath as pb;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use tokio::net::TcpStream;

/// The database id a server of one store reports (the nil UUID).
pub const NIL_ID: &str = "00000000-0000-0000-0000-000000000000";

pub use crate::server::{TOKEN, TestServer, config};

/// One connection's request sender, HTTP/1.1 or HTTP/2: what the plain [`Client`] and the
/// TLS client (`crate::tls::TlsClient`) send through.
pub(crate) enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

impl Sender {
    /// Shakes hands over `io`, HTTP/2 with prior knowledge when `h2`, else HTTP/1.1, and
    /// drives the connection on a task.
    pub(crate) async fn handshake<T>(io: T, h2: bool) -> Sender
    where
        T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        if h2 {
            let (sender, conn) = http2::handshake(TokioExecutor::new(), io)
                .await
                .expect("h2 handshake");
            tokio::spawn(conn);
            Sender::H2(sender)
        } else {
            let (sender, conn) = http1::handshake(io).await.expect("h1 handshake");
            tokio::spawn(conn);
            Sender::H1(sender)
        }
    }

    /// Sends `req` once the connection is ready, returning the response head.
    pub(crate) async fn send(
        &mut self,
        req: Request<Full<Bytes>>,
    ) -> hyper::Result<Response<hyper::body::Incoming>> {
        match self {
            Sender::H1(s) => {
                s.ready().await?;
                s.send_request(req).await
            }
            Sender::H2(s) => {
                s.ready().await?;
                s.send_request(req).await
            }
        }
    }
}

/// One connection.
pub struct Client {
    sender: Sender,
    /// The server this client talks to.
    pub addr: SocketAddr,
}

/// A response with its whole body.
#[derive(Debug)]
pub struct Reply {
    /// The reply's HTTP status.
    pub status: StatusCode,
    /// The reply's headers.
    pub headers: hyper::HeaderMap,
    /// The reply's body.
    pub body: Bytes,
}

impl Reply {
    /// The body as (lossy) UTF-8 text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON (panics if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("json body")
    }

    /// Asserts the status and the exact body text.
    pub fn assert_error(&self, status: u16, text: &str) {
        assert_eq!(
            (self.status.as_u16(), self.text().as_str()),
            (status, text),
            "unexpected reply"
        );
    }

    /// Asserts the reply is `status` with `text`, and names `error` by code as the engine
    /// would: the refusal a local store gives, rebuilt whole by tuplekv's client.
    pub fn assert_engine_error(&self, status: u16, text: &str, error: &tuplekv_engine::Error) {
        self.assert_error(status, text);
        assert_eq!(
            format!("{:?}", self.engine_error()),
            format!("{:?}", Some(error)),
            "the reply's {} header",
            tuplekv_wire::ERROR_HEADER
        );
    }

    /// The engine error a tuplekv server named by code (`tuplekv_wire::ERROR_HEADER`), if
    /// the reply carries one it can read.
    pub fn engine_error(&self) -> Option<tuplekv_engine::Error> {
        let value = self
            .headers
            .get(tuplekv_wire::ERROR_HEADER)?
            .to_str()
            .ok()?;
        tuplekv_wire::error_from_header(value)
    }

    /// The body decoded as the protobuf message `M` (panics if it is not one).
    pub fn decode<M: Message + Default>(&self) -> M {
        assert_eq!(self.status, StatusCode::OK, "body: {}", self.text());
        M::decode(self.body.clone()).expect("protobuf reply")
    }
}

impl Client {
    /// A client speaking h2c (HTTP/2 with prior knowledge) to `addr`.
    pub async fn h2(addr: SocketAddr) -> Client {
        Client::connect(addr, true).await
    }

    /// A client speaking HTTP/1.1 to `addr`.
    pub async fn h1(addr: SocketAddr) -> Client {
        Client::connect(addr, false).await
    }

    async fn connect(addr: SocketAddr, h2: bool) -> Client {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        Client {
            sender: Sender::handshake(TokioIo::new(tcp), h2).await,
            addr,
        }
    }

    /// Sends `req`, returning the response head with a streaming body.
    pub async fn send(
        &mut self,
        req: Request<Full<Bytes>>,
    ) -> hyper::Result<Response<hyper::body::Incoming>> {
        self.sender.send(req).await
    }

    /// Sends `req` and reads the whole reply.
    pub async fn call(&mut self, req: Request<Full<Bytes>>) -> Reply {
        let res = self.send(req).await.expect("response");
        let (parts, body) = res.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    /// `POST /` with a JSON body and a bearer token.
    pub async fn metadata(&mut self, token: &str, body: &str) -> Reply {
        let req = Request::post(format!("http://{}/", self.addr))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_owned())))
            .expect("request");
        self.call(req).await
    }

    /// A data path request with the headers Deno's client sends (no content type).
    pub async fn data(&mut self, method: &str, body: Vec<u8>) -> Reply {
        let req = data_request(self.addr, method, body).body_bytes();
        self.call(req).await
    }

    /// Sends a snapshot read with the test token and returns the reply.
    pub async fn read(&mut self, read: pb::SnapshotRead) -> Reply {
        self.data("snapshot_read", read.encode_to_vec()).await
    }

    /// Sends an atomic write with the test token and returns the reply.
    pub async fn write(&mut self, write: pb::AtomicWrite) -> Reply {
        self.data("atomic_write", write.encode_to_vec()).await
    }

    /// Commits `write`, expecting a 200 reply.
    pub async fn commit(&mut self, write: pb::AtomicWrite) -> pb::AtomicWriteOutput {
        self.write(write).await.decode()
    }

    /// The entry at `key`, read as `get` does (one range `[key, key ++ 00)`, limit 1).
    pub async fn get(&mut self, key: &[u8]) -> Option<pb::KvEntry> {
        let out: pb::SnapshotReadOutput = self.read(read_of(vec![get_range(key)])).await.decode();
        out.ranges
            .into_iter()
            .next()
            .expect("one range")
            .values
            .into_iter()
            .next()
    }
}

/// A data path request builder with Deno's headers set.
pub struct DataRequest {
    builder: hyper::http::request::Builder,
    body: Vec<u8>,
}

/// A data-path POST to `/v2/{method}` on `addr` with `body`, carrying the test token and the
/// protocol headers; adjust it with the builder methods.
pub fn data_request(addr: SocketAddr, method: &str, body: Vec<u8>) -> DataRequest {
    DataRequest {
        builder: Request::post(format!("http://{addr}/v2/{method}"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("x-denokv-version", "3")
            .header("x-denokv-database-id", NIL_ID)
            .header("user-agent", "tuplekv-test"),
        body,
    }
}

impl DataRequest {
    /// Sets header `name` to `value`.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        let headers = self.builder.headers_mut().expect("headers");
        headers.insert(
            hyper::header::HeaderName::from_bytes(name.as_bytes()).expect("name"),
            value.parse().expect("value"),
        );
        self
    }

    /// Leaves header `name` out.
    pub fn without(mut self, name: &str) -> Self {
        self.builder.headers_mut().expect("headers").remove(name);
        self
    }

    /// The request, ready to send.
    pub fn body_bytes(self) -> Request<Full<Bytes>> {
        self.builder
            .body(Full::new(Bytes::from(self.body)))
            .expect("request")
    }
}

/// The encoded tuple key `[s]` for a string `s` (no 0x00 inside).
pub fn key(s: &str) -> Vec<u8> {
    tuplekv_engine::codec::encode_key(&tuplekv_engine::key![s])
}

/// The encoded tuple key `[a, b]`.
pub fn key2(a: &str, b: &str) -> Vec<u8> {
    tuplekv_engine::codec::encode_key(&tuplekv_engine::key![a, b])
}

/// A read range holding exactly `key`.
pub fn get_range(key: &[u8]) -> pb::ReadRange {
    let mut end = key.to_vec();
    end.push(0);
    pb::ReadRange {
        start: key.to_vec(),
        end,
        limit: 1,
        reverse: false,
    }
}

/// A read range over the keys under `prefix`, at most `limit`, in the order `reverse` says.
pub fn prefix_range(prefix: &[u8], limit: i32, reverse: bool) -> pb::ReadRange {
    let mut start = prefix.to_vec();
    start.push(0);
    let mut end = prefix.to_vec();
    end.push(0xff);
    pb::ReadRange {
        start,
        end,
        limit,
        reverse,
    }
}

/// A snapshot read of `ranges`.
pub fn read_of(ranges: Vec<pb::ReadRange>) -> pb::SnapshotRead {
    pb::SnapshotRead { ranges }
}

/// A value of raw bytes.
pub fn bytes_value(data: &[u8]) -> pb::KvValue {
    pb::KvValue {
        data: data.to_vec(),
        encoding: pb::ValueEncoding::VeBytes.into(),
    }
}

/// A value in V8 serialisation (`data` already encoded).
pub fn v8_value(data: &[u8]) -> pb::KvValue {
    pb::KvValue {
        data: data.to_vec(),
        encoding: pb::ValueEncoding::VeV8.into(),
    }
}

/// A `KvU64` value.
pub fn u64_value(n: u64) -> pb::KvValue {
    pb::KvValue {
        data: n.to_le_bytes().to_vec(),
        encoding: pb::ValueEncoding::VeLe64.into(),
    }
}

/// A mutation of `kind` on `key`, with `value` if it has one.
pub fn mutation(key: &[u8], kind: pb::MutationType, value: Option<pb::KvValue>) -> pb::Mutation {
    pb::Mutation {
        key: key.to_vec(),
        value,
        mutation_type: kind.into(),
        ..Default::default()
    }
}

/// A set of `key` to `value`.
pub fn set(key: &[u8], value: pb::KvValue) -> pb::Mutation {
    mutation(key, pb::MutationType::MSet, Some(value))
}

/// A check that `key` has `versionstamp` (`None`: that it is absent).
pub fn check(key: &[u8], versionstamp: Option<&[u8]>) -> pb::Check {
    pb::Check {
        key: key.to_vec(),
        versionstamp: versionstamp.map(<[u8]>::to_vec).unwrap_or_default(),
    }
}

/// An atomic write of `checks` and `mutations`.
pub fn write_of(checks: Vec<pb::Check>, mutations: Vec<pb::Mutation>) -> pb::AtomicWrite {
    pb::AtomicWrite {
        checks,
        mutations,
        enqueues: Vec::new(),
    }
}

/// The status code of a committed write.
pub const AW_SUCCESS: i32 = pb::AtomicWriteStatus::AwSuccess as i32;
/// The status code of a write refused by a failed check.
pub const AW_CHECK_FAILURE: i32 = pb::AtomicWriteStatus::AwCheckFailure as i32;

/// A request body the test feeds frame by frame through the paired sender; it ends when the
/// sender is dropped.
pub type ChannelBody = http_body_util::StreamBody<
    std::pin::Pin<
        Box<
            dyn futures_util::Stream<
                    Item = Result<hyper::body::Frame<Bytes>, std::convert::Infallible>,
                > + Send
                + Sync,
        >,
    >,
>;

/// The sending half of a [`ChannelBody`].
pub type BodySender =
    tokio::sync::mpsc::Sender<Result<hyper::body::Frame<Bytes>, std::convert::Infallible>>;

/// A body whose frames the test sends while the request is in flight.
pub fn channel_body() -> (BodySender, ChannelBody) {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|frame| (frame, rx))
    });
    (tx, http_body_util::StreamBody::new(Box::pin(stream)))
}

/// Sends `bytes` as one data frame of a [`ChannelBody`].
pub async fn send_frame(tx: &BodySender, bytes: Vec<u8>) {
    tx.send(Ok(hyper::body::Frame::data(Bytes::from(bytes))))
        .await
        .expect("the body is still being read");
}

/// A raw h2c connection whose streams the test drives itself (clone the sender for more).
pub async fn h2_sender<B>(addr: SocketAddr) -> http2::SendRequest<B>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
        .await
        .expect("h2 handshake");
    tokio::spawn(conn);
    sender
}

/// A data path request whose body is `body`.
pub fn channel_request(addr: SocketAddr, method: &str, body: ChannelBody) -> Request<ChannelBody> {
    data_request(addr, method, Vec::new())
        .body_bytes()
        .map(|_| body)
}

/// A generous bound for anything a test waits for: a regression fails instead of hanging.
pub const WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits (at most [`WAIT_MAX`]) until `cond` holds.
pub async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
