//! A small HTTP/1.1 client for the server's own endpoints (the admin endpoints of
//! `tuplekv db … --url`): one request, the whole answer, a bounded wait.

use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::Request;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

/// How long one request may take, connection included.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer read, in bytes.
pub(crate) const RESPONSE_BODY_MAX: usize = 16 << 20;

/// Sends `method` to `base` (`http://HOST:PORT`, a trailing `/` allowed) + `path` with the
/// bearer `token`, and returns the status and the body text.
///
/// # Errors
/// When `base` is not an `http://` URL, the server cannot be reached, or the request takes
/// longer than [`REQUEST_TIMEOUT`].
pub(crate) fn request(
    method: &str,
    base: &str,
    path: &str,
    token: &str,
) -> Result<(u16, String), String> {
    let base = base.trim_end_matches('/');
    let authority = base
        .strip_prefix("http://")
        .filter(|a| !a.is_empty() && !a.contains('/'))
        .ok_or_else(|| format!("{base}: expected a server URL, http://HOST:PORT"))?
        .to_owned();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, &authority)
        .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Full::new(Bytes::new()))
        .map_err(|e| format!("cannot build the request: {e}"))?;
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(&authority)
            .await
            .map_err(|e| format!("cannot connect to {base}: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("cannot talk HTTP to {base}: {e}"))?;
        tokio::spawn(conn);
        let res = sender
            .send_request(req)
            .await
            .map_err(|e| format!("request to {base} failed: {e}"))?;
        let status = res.status().as_u16();
        let body = Limited::new(res.into_body(), RESPONSE_BODY_MAX)
            .collect()
            .await
            .map_err(|e| format!("reading the answer from {base} failed: {e}"))?
            .to_bytes();
        Ok::<_, String>((status, String::from_utf8_lossy(&body).into_owned()))
    };
    runtime.block_on(async {
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("{base} did not answer within {REQUEST_TIMEOUT:?}"))?
    })
}
