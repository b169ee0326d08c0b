//! A throwaway Redis for tests ([`RedisServer`]): Debian's `redis-server` on a
//! free loopback port, its own temporary directory, no persistence, and
//! redis-py (PyPI `redis`) lock holders run as `python3` children
//! ([`PyLock`]).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, process, scratch_dir};

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
        let child = self.child.insert(child);
        // `PING` answered `+PONG`.
        let ping: (&[u8], &[u8]) = (b"PING\r\n", b"+PONG");
        let timing = (Duration::from_secs(20), Duration::from_millis(20));
        process::wait_answering(child, "redis-server", self.port, ping, timing, None).await;
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server process's id while it runs (a test pauses it with
    /// `kill -STOP` to see a store that stops answering without closing).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `redis://127.0.0.1:<port>` (database 0).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `SET key token NX PX ttl`, as redsync and node-redlock take a lock on
    /// one master; `true`: taken.
    pub async fn set_nx(&self, key: &str, token: &str, ttl: Duration) -> bool {
        let client = ::redis::Client::open(self.url()).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let ok: Option<String> = ::redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async(&mut con)
            .await
            .unwrap();
        ok.is_some()
    }

    /// Kills the server (SIGKILL: its data is gone).
    pub fn stop(&mut self) {
        process::kill(&mut self.child);
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

/// A CA and a certificate for `127.0.0.1` it signed, made by the `openssl`
/// CLI into `dir` (`ca.pem`, `server.pem`, `server.key`): the path of the
/// CA, and the `redis-server` options serving TLS with them on `tls_port`
/// (clients need no certificate of their own).
pub fn tls_files(dir: &std::path::Path, tls_port: u16) -> (std::path::PathBuf, Vec<String>) {
    let at = |f: &str| dir.join(f).to_str().unwrap().to_string();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).output().expect("the openssl CLI");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let subject = format!("/CN=lockscope test CA {tls_port}");
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        &subject,
        "-keyout",
        &at("ca.key"),
        "-out",
        &at("ca.pem"),
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        &at("server.key"),
        "-out",
        &at("server.csr"),
    ]);
    std::fs::write(dir.join("ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-days",
        "1",
        "-in",
        &at("server.csr"),
        "-CA",
        &at("ca.pem"),
        "-CAkey",
        &at("ca.key"),
        "-CAcreateserial",
        "-extfile",
        &at("ext"),
        "-out",
        &at("server.pem"),
    ]);
    let args = [
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &at("server.pem"),
        "--tls-key-file",
        &at("server.key"),
        "--tls-ca-cert-file",
        &at("ca.pem"),
        "--tls-auth-clients",
        "no",
    ]
    .map(String::from)
    .to_vec();
    (dir.join("ca.pem"), args)
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

/// Redisson's `RLock` acquisition, verbatim from `RedissonLock.tryLockInnerAsync`
/// (Redisson 3.x): KEYS[1] the lock, ARGV[1] the lease (ms), ARGV[2]
/// `<client uuid>:<thread id>`. `nil`: acquired (or re-entered); else the
/// holder's TTL left.
pub const REDISSON_LOCK: &str = "if ((redis.call('exists', KEYS[1]) == 0) \
    or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
    end; \
    return redis.call('pttl', KEYS[1]);";

/// Redisson's `RLock` release, verbatim from `RedissonLock.unlockInnerAsync`:
/// KEYS[1] the lock, KEYS[2] its channel, ARGV[1] the unlock message (0),
/// ARGV[2] the lease (ms), ARGV[3] `<client uuid>:<thread id>`.
pub const REDISSON_UNLOCK: &str = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then \
    return nil;\
    end; \
    local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
    if (counter > 0) then \
    redis.call('pexpire', KEYS[1], ARGV[2]); \
    return 0; \
    else \
    redis.call('del', KEYS[1]); \
    redis.call('publish', KEYS[2], ARGV[1]); \
    return 1; \
    end; \
    return nil;";

/// Redisson's fair lock acquisition, verbatim from
/// `RedissonFairLock.tryLockInnerAsync` (the `EVAL_LONG` branch, with a wait):
/// KEYS[1] the lock, KEYS[2] `redisson_lock_queue:{NAME}`, KEYS[3]
/// `redisson_lock_timeout:{NAME}`; ARGV[1] the lease (ms), ARGV[2]
/// `<uuid>:<thread>`, ARGV[3] the thread wait time (ms, 300000 by default
/// in 3.x), ARGV[4] now (ms). `nil`: acquired; else the TTL to wait
/// (queued).
pub const REDISSON_FAIR_LOCK: &str = "while true do \
    local firstThreadId2 = redis.call('lindex', KEYS[2], 0);\
    if firstThreadId2 == false then break;end;\
    local timeout = tonumber(redis.call('zscore', KEYS[3], firstThreadId2));\
    if timeout <= tonumber(ARGV[4]) then \
    redis.call('zrem', KEYS[3], firstThreadId2);\
    redis.call('lpop', KEYS[2]);\
    else break;end;\
    end;\
    if (redis.call('exists', KEYS[1]) == 0) \
    and ((redis.call('exists', KEYS[2]) == 0) \
    or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then \
    redis.call('lpop', KEYS[2]);\
    redis.call('zrem', KEYS[3], ARGV[2]);\
    local keys = redis.call('zrange', KEYS[3], 0, -1);\
    for i = 1, #keys, 1 do \
    redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]);\
    end;\
    redis.call('hset', KEYS[1], ARGV[2], 1);\
    redis.call('pexpire', KEYS[1], ARGV[1]);\
    return nil;\
    end;\
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then \
    redis.call('hincrby', KEYS[1], ARGV[2],1);\
    redis.call('pexpire', KEYS[1], ARGV[1]);\
    return nil;\
    end;\
    local timeout = redis.call('zscore', KEYS[3], ARGV[2]);\
    if timeout ~= false then \
    return timeout - tonumber(ARGV[3]) - tonumber(ARGV[4]);\
    end;\
    local lastThreadId = redis.call('lindex', KEYS[2], -1);\
    local ttl;\
    if lastThreadId ~= false and lastThreadId ~= ARGV[2] then \
    ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]);\
    else \
    ttl = redis.call('pttl', KEYS[1]);\
    end;\
    local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);\
    if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then \
    redis.call('rpush', KEYS[2], ARGV[2]);\
    end;\
    return ttl;";

/// A Redisson client as far as its lock scripts go: runs Redisson's own Lua
/// ([`REDISSON_LOCK`], [`REDISSON_UNLOCK`], [`REDISSON_FAIR_LOCK`]) against
/// `server` as client `uuid`.
pub struct Redisson {
    con: ::redis::aio::MultiplexedConnection,
    pub uuid: String,
}

/// Redisson's `prefixName`: `prefix:{name}`.
fn redisson_key(prefix: &str, name: &str) -> String {
    crate::redis_set::redisson::side_key(prefix, name)
}

impl Redisson {
    pub async fn connect(server: &RedisServer, uuid: &str) -> Redisson {
        let client = ::redis::Client::open(server.url()).unwrap();
        Redisson {
            con: client.get_multiplexed_async_connection().await.unwrap(),
            uuid: uuid.to_string(),
        }
    }

    /// `<uuid>:<thread>`: Redisson's `getLockName(threadId)`.
    pub fn field(&self, thread: u64) -> String {
        format!("{}:{thread}", self.uuid)
    }

    /// `RLock.tryLock` by `thread` with a lease: `None` acquired, else the TTL left.
    pub async fn lock(&mut self, name: &str, thread: u64, lease: Duration) -> Option<i64> {
        ::redis::cmd("EVAL")
            .arg(REDISSON_LOCK)
            .arg(1)
            .arg(name)
            .arg(lease.as_millis() as u64)
            .arg(self.field(thread))
            .query_async(&mut self.con)
            .await
            .unwrap()
    }

    /// `RLock.unlock` by `thread`: `Some(1)` released, `Some(0)` still held
    /// (re-entered), `None` not its lock.
    pub async fn unlock(&mut self, name: &str, thread: u64, lease: Duration) -> Option<i64> {
        ::redis::cmd("EVAL")
            .arg(REDISSON_UNLOCK)
            .arg(2)
            .arg(name)
            .arg(redisson_key("redisson_lock__channel", name))
            .arg(0)
            .arg(lease.as_millis() as u64)
            .arg(self.field(thread))
            .query_async(&mut self.con)
            .await
            .unwrap()
    }

    /// `RFairLock.tryLock` by `thread`: `None` acquired, else queued (the TTL to wait).
    pub async fn fair_lock(&mut self, name: &str, thread: u64, lease: Duration) -> Option<i64> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        ::redis::cmd("EVAL")
            .arg(REDISSON_FAIR_LOCK)
            .arg(3)
            .arg(name)
            .arg(redisson_key("redisson_lock_queue", name))
            .arg(redisson_key("redisson_lock_timeout", name))
            .arg(lease.as_millis() as u64)
            .arg(self.field(thread))
            .arg(300_000)
            .arg(now)
            .query_async(&mut self.con)
            .await
            .unwrap()
    }
}
