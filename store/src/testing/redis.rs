//! A throwaway Redis for tests ([`RedisServer`]): Debian's `redis-server` on a
//! free loopback port, its own temporary directory, no persistence, and
//! redis-py (PyPI `redis`) lock holders run as `python3` children
//! ([`PyLock`]).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{free_port, scratch_dir};

/// A running `redis-server` (`--save ''`, `--appendonly no`): killed on drop,
/// its directory deleted. [`stop`](RedisServer::stop) and
/// [`restart`](RedisServer::restart) keep the port (the data is lost: nothing
/// is saved).
pub struct RedisServer {
    child: Option<Child>,
    dir: tempfile::TempDir,
    port: u16,
    /// More `redis-server` options, kept across restarts.
    extra: Vec<String>,
}

impl RedisServer {
    pub async fn start() -> RedisServer {
        RedisServer::start_with(&[]).await
    }

    /// A server run with more options (`["--notify-keyspace-events", "Kl"]`).
    pub async fn start_with(extra: &[&str]) -> RedisServer {
        let mut s = RedisServer {
            child: None,
            dir: scratch_dir("lockscope-redis-"),
            port: free_port(),
            extra: extra.iter().map(|a| a.to_string()).collect(),
        };
        s.spawn().await;
        s
    }

    async fn spawn(&mut self) {
        let child = Command::new(std::env::var("LOCKSCOPE_REDIS_BIN").unwrap_or_else(|_| "redis-server".into()))
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--loglevel", "warning"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (Debian: redis-server); scripts/install.sh does it");
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("redis-server exited at start: {status}");
            }
            if self.ping().await {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "redis-server not answering after 20 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `PING` answered `+PONG`.
    async fn ping(&self) -> bool {
        let Ok(Ok(mut s)) =
            tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(("127.0.0.1", self.port))).await
        else {
            return false;
        };
        let mut buf = [0u8; 16];
        s.write_all(b"PING\r\n").await.is_ok()
            && matches!(
                tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await,
                Ok(Ok(n)) if buf[..n].starts_with(b"+PONG")
            )
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>` (database 0).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL: its data is gone).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub async fn restart(&mut self) {
        self.stop();
        self.spawn().await;
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A redis-py `Lock` (`SET name token NX PX ms`, released by the library's
/// compare-and-delete script) held by a `python3` child: it prints the token
/// it holds, then holds until told to release (a line on its stdin) or is
/// killed. Killed on drop.
pub struct PyLock {
    child: Child,
    /// The token redis-py wrote as the key's value.
    pub token: String,
}

const PY_HOLDER: &str = r#"
import sys, redis
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]), db=int(sys.argv[2]))
lock = r.lock(sys.argv[3], timeout=float(sys.argv[4]), blocking=True, blocking_timeout=10)
assert lock.acquire(), "not acquired"
print(lock.local.token.decode(), flush=True)
sys.stdin.readline()
try:
    lock.release()
    print("released", flush=True)
except redis.exceptions.LockError as e:
    print("not released:", e, flush=True)
"#;

impl PyLock {
    /// Acquires lock `name` on database `db` of `server` with a timeout of
    /// `ttl` (the key's PX) and waits until it holds it.
    pub fn acquire(server: &RedisServer, db: u32, name: &str, ttl: Duration) -> PyLock {
        use std::io::BufRead;
        let mut child = Command::new("python3")
            .args(["-c", PY_HOLDER, &server.port().to_string(), &db.to_string(), name])
            .arg(format!("{}", ttl.as_secs_f64()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 with redis-py (PyPI redis) must be installed; scripts/install.sh does it");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let token = line.trim().to_string();
        assert!(!token.is_empty(), "redis-py did not acquire {name}");
        PyLock { child, token }
    }

    /// Releases through redis-py (its own compare-and-delete) and waits for
    /// the child to end; `true`: redis-py said it released.
    pub fn release(mut self) -> bool {
        use std::io::{Read, Write};
        let _ = self.child.stdin.as_mut().unwrap().write_all(b"\n");
        let mut out = String::new();
        let _ = self.child.stdout.as_mut().unwrap().read_to_string(&mut out);
        let _ = self.child.wait();
        out.trim() == "released"
    }
}

impl Drop for PyLock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
