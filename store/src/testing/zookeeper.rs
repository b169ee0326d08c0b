//! A throwaway ZooKeeper for tests ([`ZkServer`]): Debian's `zookeeper`
//! package run standalone on a free loopback port with its own `zoo.cfg` and
//! temporary data directory (tick 100 ms, so sessions of 200 ms to 30 s are
//! allowed and expire fast; admin server off), and lock holders: kazoo's
//! `Lock` in a `python3` child ([`KazooLock`]) and the documented recipe's
//! node made by a session of this process ([`RecipeLock`]).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use zookeeper_client::{Acls, Client, CreateMode};

use super::{free_port, process, scratch_dir};

/// The server's tick: sessions may ask for 2 to 300 ticks (200 ms to 30 s).
pub const ZK_TICK: Duration = Duration::from_millis(100);

/// A running standalone ZooKeeper: killed on drop, its directory deleted.
/// [`restart`](ZkServer::restart) keeps the port and the data (sessions and
/// their ephemeral nodes survive it, as in production).
pub struct ZkServer {
    child: Option<Child>,
    dir: tempfile::TempDir,
    port: u16,
}

impl ZkServer {
    pub async fn start() -> ZkServer {
        let dir = scratch_dir("lockscope-zk-");
        let port = free_port();
        let cfg = format!(
            "tickTime={}\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
             minSessionTimeout=200\nmaxSessionTimeout=30000\nadmin.enableServer=false\n\
             4lw.commands.whitelist=ruok,srvr,cons\n",
            ZK_TICK.as_millis(),
            dir.path().join("data").display()
        );
        std::fs::write(dir.path().join("zoo.cfg"), cfg).unwrap();
        let mut s = ZkServer { child: None, dir, port };
        s.spawn().await;
        s
    }

    async fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("zookeeper.log")).unwrap();
        let classpath =
            std::env::var("LOCKSCOPE_ZK_CLASSPATH").unwrap_or_else(|_| "/usr/share/java/zookeeper.jar".into());
        let child = Command::new("java")
            .args([
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-cp",
                &classpath,
            ])
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(self.dir.path().join("zoo.cfg"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("java must be installed with Debian's zookeeper package; scripts/install.sh does it");
        let child = self.child.insert(child);
        let log = self.dir.path().join("zookeeper.log");
        // The four-letter `ruok` answered `imok`.
        let ruok: (&[u8], &[u8]) = (b"ruok", b"imok");
        let timing = (Duration::from_secs(30), Duration::from_millis(50));
        process::wait_answering(child, "zookeeper", self.port, ruok, timing, Some(&log)).await;
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The fleet spec of the locks below `root` (`/…`).
    pub fn spec(&self, root: &str) -> String {
        format!("zk://{}{root}", self.host())
    }

    /// A client session of this process (timeout 10 s).
    pub async fn client(&self) -> Client {
        Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(&self.host())
            .await
            .expect("connect to the test zookeeper")
    }

    /// Kills the server (SIGKILL).
    pub fn stop(&mut self) {
        process::kill(&mut self.child);
    }

    /// Starts it again on the same port with the same data.
    pub async fn restart(&mut self) {
        self.stop();
        self.spawn().await;
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The documented recipe's contender: an ephemeral sequential
/// `PATH/lock-<seq>` made by a session of its own (created with its
/// ancestors). Dropping it closes the session, which deletes the node.
pub struct RecipeLock {
    client: Client,
    /// The node's full path.
    pub node: String,
    /// Its session, as ZooKeeper's tools print it (`0x…`).
    pub session: String,
}

impl RecipeLock {
    pub async fn create(server: &ZkServer, path: &str) -> RecipeLock {
        let client = server.client().await;
        let dir = CreateMode::Persistent.with_acls(Acls::anyone_all());
        match client.mkdir(path, &dir).await {
            Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => panic!("mkdir {path}: {e}"),
        }
        let opts = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let prefix = format!("{path}/lock-");
        let (_, seq) = client
            .create(&prefix, b"", &opts)
            .await
            .expect("create the recipe's node");
        RecipeLock {
            node: format!("{prefix}{seq}"),
            session: format!("0x{:x}", client.session_id().0 as u64),
            client,
        }
    }

    /// Deletes the node (the recipe's unlock) and closes the session.
    pub async fn release(self) {
        self.client
            .delete(&self.node, None)
            .await
            .expect("delete the recipe's node");
    }
}

/// kazoo's `Lock` in a `python3` child: it prints its session (`0x…`), then,
/// once it holds the lock, `held`; it releases (and prints `released`) on a
/// line on its stdin. Killed on drop (its session then expires after its
/// timeout, which deletes its node).
pub struct KazooLock {
    child: Child,
    out: std::io::BufReader<std::process::ChildStdout>,
    /// Its session, as ZooKeeper's tools print it.
    pub session: String,
}

const KAZOO_HOLDER: &str = r#"
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], timeout=float(sys.argv[4]))
zk.start()
print(hex(zk.client_id[0]), flush=True)
lock = zk.Lock(sys.argv[2], sys.argv[3])
lock.acquire()
print("held", flush=True)
sys.stdin.readline()
lock.release()
print("released", flush=True)
zk.stop()
"#;

impl KazooLock {
    /// Starts contending for lock `path` as `identifier` (kazoo writes it as
    /// its node's data) with a session of `timeout`; returns once connected
    /// (not once it holds: see [`KazooLock::wait_held`]).
    pub fn contend(server: &ZkServer, path: &str, identifier: &str, timeout: Duration) -> KazooLock {
        use std::io::BufRead;
        let mut child = Command::new("python3")
            .args(["-c", KAZOO_HOLDER, &server.host(), path, identifier])
            .arg(format!("{}", timeout.as_secs_f64()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 with kazoo (PyPI kazoo) must be installed; scripts/install.sh does it");
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let session = line.trim().to_string();
        assert!(session.starts_with("0x"), "kazoo did not connect: {line:?}");
        KazooLock { child, out, session }
    }

    /// Blocks until it holds the lock.
    pub fn wait_held(&mut self) {
        use std::io::BufRead;
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "held", "kazoo did not acquire");
    }

    /// Releases through kazoo and waits for the child to end.
    pub fn release(mut self) {
        use std::io::{BufRead, Write};
        self.child.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "released");
        let _ = self.child.wait();
    }

    /// Kills the process: its session lives on until its timeout.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for KazooLock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
