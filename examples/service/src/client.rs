//! A minimal HTTP/1.1 keep-alive client (hyper's connection API on one TCP stream), for the
//! test and the load generator: one [`Client`] is one connection, one request at a time.

use std::io;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// One kept-alive connection to the service.
#[derive(Debug)]
pub struct Client {
    addr: SocketAddr,
    sender: SendRequest<Full<Bytes>>,
    connection: tokio::task::JoinHandle<()>,
}

/// A response: its status and whole body.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status.
    pub status: StatusCode,
    /// The body.
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON.
    ///
    /// # Errors
    /// When it is not the JSON of `T`.
    pub fn json<T: DeserializeOwned>(&self) -> io::Result<T> {
        serde_json::from_slice(&self.body).map_err(|e| {
            io::Error::other(format!(
                "{e} in a {} body {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            ))
        })
    }
}

impl Client {
    /// Opens a connection to `addr`.
    ///
    /// # Errors
    /// If it cannot connect or the handshake fails.
    pub async fn connect(addr: SocketAddr) -> io::Result<Client> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(io::Error::other)?;
        let connection = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Client {
            addr,
            sender,
            connection,
        })
    }

    /// `GET path`.
    ///
    /// # Errors
    /// If the connection fails.
    pub async fn get(&mut self, path: &str) -> io::Result<Reply> {
        self.send(Method::GET, path, Bytes::new()).await
    }

    /// `POST path` with `body` as JSON.
    ///
    /// # Errors
    /// If the connection fails.
    pub async fn post(&mut self, path: &str, body: &impl Serialize) -> io::Result<Reply> {
        let body = serde_json::to_vec(body).map_err(io::Error::other)?;
        self.send(Method::POST, path, Bytes::from(body)).await
    }

    async fn send(&mut self, method: Method, path: &str, body: Bytes) -> io::Result<Reply> {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, self.addr.to_string());
        if !body.is_empty() {
            request = request.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let request = request.body(Full::new(body)).map_err(io::Error::other)?;
        self.sender.ready().await.map_err(io::Error::other)?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(io::Error::other)?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(io::Error::other)?
            .to_bytes();
        Ok(Reply { status, body })
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.connection.abort();
    }
}
