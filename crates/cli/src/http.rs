//! A small HTTP/1.1 client for the server's own endpoints (`stats --url`'s `GET /metrics`,
//! `db --url`'s admin endpoints): one request, the whole answer up to a size limit, a
//! bounded wait.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::rt::TokioIo;

/// How long one request may take, connection and whole answer included.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read, in bytes (a server with many databases writes a few hundred metrics
/// lines for each).
pub(crate) const RESPONSE_BODY_MAX: usize = 16 << 20;

/// `HOST:PORT` of an `http://HOST:PORT[/...]` URL.
///
/// # Errors
/// When `url` is not `http://` or names no host.
pub(crate) fn authority_of(url: &str) -> Result<String, String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        format!("--url `{url}`: this command talks to the server over http://HOST:PORT")
    })?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err(format!("--url `{url}` names no host"));
    }
    Ok(authority.to_owned())
}

/// Sends `method` to `path` on the server of `url` (`http://HOST:PORT`; a path in it is
/// ignored) with the bearer `token`, and returns the status and the body text.
///
/// # Errors
/// When `url` is not an `http://` URL, the server cannot be reached, the answer is larger than
/// [`RESPONSE_BODY_MAX`], or it all takes longer than [`REQUEST_TIMEOUT`].
pub(crate) fn request(
    method: &str,
    url: &str,
    path: &str,
    token: &str,
) -> Result<(u16, String), String> {
    let authority = authority_of(url)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, &authority)
        .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("cannot build the request: {e}"))?;
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(&authority)
            .await
            .map_err(|e| format!("cannot connect to {authority}: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("cannot talk HTTP to {authority}: {e}"))?;
        let driver = tokio::spawn(conn);
        let res = sender
            .send_request(req)
            .await
            .map_err(|e| format!("{authority} did not answer {path}: {e}"))?;
        let status = res.status().as_u16();
        let body = collect_limited(res.into_body(), RESPONSE_BODY_MAX)
            .await
            .map_err(|e| format!("cannot read {path} from {authority}: {e}"))?;
        driver.abort();
        Ok::<_, String>((status, String::from_utf8_lossy(&body).into_owned()))
    };
    runtime.block_on(async {
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("{authority} did not answer {path} within {REQUEST_TIMEOUT:?}"))?
    })
}

/// `body` whole, or an error once it passes `max` bytes.
async fn collect_limited<B>(body: B, max: usize) -> Result<Bytes, String>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    http_body_util::Limited::new(body, max)
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_with_a_host_are_taken() {
        assert_eq!(
            authority_of("http://127.0.0.1:4512/db"),
            Ok("127.0.0.1:4512".to_owned())
        );
        assert!(authority_of("https://h:1").is_err());
        assert!(authority_of("http://").is_err());
    }

    #[tokio::test]
    async fn an_answer_of_the_largest_size_is_read_and_one_past_it_refused() {
        let body = |n: usize| http_body_util::Full::new(Bytes::from(vec![b'a'; n]));
        let max = RESPONSE_BODY_MAX;
        assert_eq!(
            collect_limited(body(max), max).await.map(|b| b.len()),
            Ok(max)
        );
        let err = collect_limited(body(max + 1), max)
            .await
            .expect_err("past the limit");
        assert!(err.contains("length limit"), "{err}");
    }
}
