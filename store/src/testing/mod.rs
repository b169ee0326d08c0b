//! Test harness: a real `etcd` (Debian's `etcd-server`) on free loopback ports with
//! a temporary data directory, a TCP proxy that can cut every connection, a
//! real PostgreSQL ([`PgServer`], in `pg.rs`), a real etcd cluster
//! ([`EtcdCluster`]) and a real Redis with redis-py lock holders
//! ([`RedisServer`], [`PyLock`], in `redis.rs`), and a real ZooKeeper with kazoo
//! and recipe lock holders ([`ZkServer`], [`KazooLock`], [`RecipeLock`], in `zookeeper.rs`).
//!
//! Panics instead of returning errors: these are for tests only.
//!
//! [`contract`] is the lock protocol's contract suite, written once over
//! [`LockStore`](crate::protocol::LockStore): every store runs it.

pub mod contract;
mod contract_rules;
pub mod etcd_cluster;
pub mod etcd_gateway;
pub mod etcdctl;
pub mod observer_contract;
mod pg;
mod process;
mod psql;
mod redis;
pub mod scylla;
mod zookeeper;

pub use etcd_cluster::EtcdCluster;
pub use pg::{PgOptions, PgServer};
pub use psql::Psql;
pub use redis::{tls_files, PyLock, RedisServer, Redisson, REDISSON_FAIR_LOCK, REDISSON_LOCK, REDISSON_UNLOCK};
pub use zookeeper::{KazooLock, RecipeLock, ZkServer, ZK_TICK};

use std::net::{SocketAddr, TcpListener as StdListener};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running etcd, stopped (and its data deleted) on drop.
pub struct EtcdServer {
    child: Option<Child>,
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
}

/// A temporary directory, under /dev/shm when there is one (fsync on tmpfs is free).
fn scratch_dir(prefix: &str) -> tempfile::TempDir {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    tempfile::Builder::new().prefix(prefix).tempdir_in(base).unwrap()
}

/// A free loopback port (bound and released; the tiny race is acceptable in tests).
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl EtcdServer {
    pub async fn start() -> EtcdServer {
        let dir = scratch_dir("lockscope-etcd-");
        let mut s = EtcdServer {
            child: None,
            dir,
            client_port: free_port(),
            peer_port: free_port(),
        };
        s.spawn().await;
        s
    }

    async fn spawn(&mut self) {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new(std::env::var("LOCKSCOPE_ETCD_BIN").unwrap_or_else(|_| "etcd".into()))
            .args(["--name", "test", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("test={peer}")])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd must be installed (Debian: etcd-server); scripts/install.sh does it");
        self.child = Some(child);
        self.wait_healthy().await;
    }

    async fn wait_healthy(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("etcd exited at start: {status}");
            }
            if health(self.client_port).await {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "etcd not healthy after 20 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.client_port))
    }

    /// Every gRPC request etcd has started (unary calls and streams), from its own
    /// Prometheus metrics: the store's side of "how many requests did we make".
    pub async fn grpc_requests(&self) -> u64 {
        let text = http_get(self.client_port, "/metrics")
            .await
            .expect("etcd serves /metrics");
        text.lines()
            .filter(|l| l.starts_with("grpc_server_started_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    /// Kills etcd (data kept).
    pub fn stop(&mut self) {
        process::kill(&mut self.child);
    }

    /// Starts etcd again on the same ports and data.
    pub async fn restart(&mut self) {
        self.stop();
        self.spawn().await;
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn health(port: u16) -> bool {
    http_get(port, "/health")
        .await
        .is_some_and(|b| b.contains("\"health\":\"true\""))
}

/// A plain HTTP/1.0 GET on loopback; `None` if the server does not answer.
async fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(("127.0.0.1", port)))
        .await
        .ok()?
        .ok()?;
    let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut body = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut body))
        .await
        .ok()?
        .ok()?;
    Some(body)
}

/// Forwards loopback TCP to `upstream`. [`cut`](TcpProxy::cut) closes every open
/// connection and refuses new ones; [`freeze`](TcpProxy::freeze) keeps connections
/// open but forwards nothing (a store that hangs); [`throttle`](TcpProxy::throttle)
/// forwards the store's side at a set rate (a slow link); [`restore`](TcpProxy::restore)
/// forwards again at full speed.
pub struct TcpProxy {
    addr: SocketAddr,
    open: Arc<AtomicBool>,
    generation: watch::Sender<u64>,
    frozen: watch::Sender<bool>,
    /// Bytes per second forwarded from the store to the client; 0: unlimited.
    rate: watch::Sender<u64>,
}

impl TcpProxy {
    pub async fn start(upstream: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let (generation, _) = watch::channel(0u64);
        let (frozen, _) = watch::channel(false);
        let (rate, _) = watch::channel(0u64);
        let (gen_tx, frozen_tx, is_open) = (generation.clone(), frozen.clone(), open.clone());
        let rate_tx = rate.clone();
        tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                if !is_open.load(Ordering::SeqCst) {
                    continue; // dropped: the client sees the connection closed
                }
                let mut cut = gen_tx.subscribe();
                let mut frozen = frozen_tx.subscribe();
                let rate = rate_tx.subscribe();
                tokio::spawn(async move {
                    // While frozen, hold the client's socket and send nothing.
                    if frozen.wait_for(|f| !*f).await.map(|_| ()).is_err() {
                        return;
                    }
                    let Ok(mut up) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = forward(&mut down, &mut up, rate) => {}
                        _ = cut.changed() => {}
                        _ = async { frozen.wait_for(|f| *f).await.map(|_| ()) } => {
                            // Hang: both sockets stay open, nothing moves, until cut.
                            let _ = cut.changed().await;
                        }
                    }
                });
            }
        });
        TcpProxy {
            addr,
            open,
            generation,
            frozen,
            rate,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    /// Forwards what the store sends at most `bytes_per_sec` (what the client
    /// sends goes at full speed): a slow link, where the store's answers queue
    /// behind what it sent before.
    pub fn throttle(&self, bytes_per_sec: u64) {
        self.rate.send_replace(bytes_per_sec);
    }

    pub fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
        self.frozen.send_replace(false);
        self.rate.send_replace(0);
    }
}

/// Copies both ways between the client (`down`) and the store (`up`) until
/// either side closes; the store's side at most `rate` bytes per second.
async fn forward(down: &mut TcpStream, up: &mut TcpStream, rate: watch::Receiver<u64>) {
    let (mut down_read, mut down_write) = down.split();
    let (mut up_read, mut up_write) = up.split();
    let to_store = tokio::io::copy(&mut down_read, &mut up_write);
    let to_client = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = up_read.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, std::io::Error>(());
            }
            down_write.write_all(&buf[..n]).await?;
            let rate = *rate.borrow();
            if rate > 0 {
                tokio::time::sleep(Duration::from_secs_f64(n as f64 / rate as f64)).await;
            }
        }
    };
    let _ = tokio::select! {
        r = to_store => r.map(|_| ()),
        r = to_client => r,
    };
}

/// A well-formed record for lock tests, timed from `now_ms` on the caller's clock.
pub fn record(owner: &str, purpose: &str, now_ms: i64) -> lockscope_model::LockRecord {
    lockscope_model::LockRecord {
        v: lockscope_model::record::RECORD_VERSION,
        owner: owner.to_string(),
        session: format!("session-{owner}").into(),
        service: "test-service".into(),
        host: "test-host".into(),
        pid: std::process::id(),
        purpose: purpose.to_string(),
        backtrace: ["tests::caller".to_string()].into(),
        acquired_at: now_ms,
        expected_runtime_ms: 60_000,
        alert_at: now_ms + 60_000,
        auto_unlock_at: now_ms + 120_000,
        heartbeat_at: now_ms,
    }
}

/// Takes `name` through the protocol's acquire step; panics if it is held.
/// Returns the fencing token.
pub async fn take<S: crate::protocol::LockStore>(store: &S, name: &str) -> i64 {
    let rec = record(&format!("owner-{name}"), "test", crate::now_ms());
    match store.try_acquire(name, &rec).await.expect("store reachable") {
        crate::protocol::Attempt::Acquired { fence } => fence,
        crate::protocol::Attempt::Busy { holder, .. } => panic!("{name} already held: {holder:?}"),
    }
}

/// Creates lockscope's SQL tables in the database at `url` at schema `version`
/// only, as an older lockscope left them (tests of upgrading; `SqlLocks::connect`
/// then applies the rest).
pub async fn sql_schema_at(url: &str, version: i64) {
    sqlx::any::install_default_drivers();
    let dialect = crate::sql::Dialect::of_url(url).unwrap();
    let pool = sqlx::AnyPool::connect(url).await.unwrap();
    crate::sql::schema::migrator_up_to(dialect, version)
        .run(&pool)
        .await
        .unwrap();
    pool.close().await;
}
