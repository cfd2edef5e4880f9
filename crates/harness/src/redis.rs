//! A throw-away `redis-server` on a free loopback port, the peer of the benches that compare
//! with Redis (the criterion groups' Redis rows, the remote and etcd comparisons).

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How many times a starting redis-server is polled for a connection.
const START_POLLS: u32 = 100;
/// The pause between two polls.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A `redis-server` started for the run; stopped when dropped.
pub struct Redis {
    child: Child,
    url: String,
}

impl Redis {
    /// Its address, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Starts `redis-server` on a free loopback port without persistence, or says why not.
    pub fn start() -> Result<Redis, String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free loopback port: {e}"))?
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "redis-server not started ({e}); install it (e.g. apt install redis-server)"
                )
            })?;
        let mut redis = Redis {
            child,
            url: format!("redis://127.0.0.1:{port}"),
        };
        for _ in 0..START_POLLS {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(redis);
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        let _ = redis.child.kill();
        Err("redis-server did not accept connections within 5 s".to_owned())
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
