//! A minimal Redis client for the `INCR` peer: one blocking connection speaking RESP over
//! loopback, unpipelined (one request, one reply), as a counter service is usually used.
//! `cargo xtask bench` starts the server and passes its address in `TUPLEKV_REDIS_URL`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

/// One connection.
pub struct Redis {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Redis {
    /// Connects to `redis://host:port`.
    pub fn connect(url: &str) -> Result<Redis, String> {
        let addr = url.strip_prefix("redis://").unwrap_or(url);
        let stream = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let writer = stream.try_clone().map_err(|e| e.to_string())?;
        Ok(Redis {
            reader: BufReader::new(stream),
            writer,
        })
    }

    /// The server named by `TUPLEKV_REDIS_URL`, or why there is none.
    pub fn from_env() -> Result<Redis, String> {
        match std::env::var("TUPLEKV_REDIS_URL") {
            Ok(url) => Redis::connect(&url),
            Err(_) => Err(std::env::var("TUPLEKV_REDIS_SKIPPED").unwrap_or_else(|_| {
                "TUPLEKV_REDIS_URL is not set (run through `cargo xtask bench`, which starts \
                 a redis-server)"
                    .to_owned()
            })),
        }
    }

    /// `INCR key`: the new value.
    pub fn incr(&mut self, key: &str) -> Result<i64, String> {
        let cmd = format!("*2\r\n$4\r\nINCR\r\n${}\r\n{key}\r\n", key.len());
        self.writer
            .write_all(cmd.as_bytes())
            .map_err(|e| e.to_string())?;
        let mut line = String::new();
        self.reader
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        line.trim_end()
            .strip_prefix(':')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("unexpected reply {line:?}"))
    }
}
