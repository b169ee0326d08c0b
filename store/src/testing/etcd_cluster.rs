//! A real etcd cluster of several members on loopback, for what one member
//! cannot show: a member cut off from its cluster's quorum (the others killed)
//! keeps its client port open and answers serializable reads from its own
//! state, while nothing it serves is current any more.
//!
//! Each member is Debian's `etcd` with its own ports and data directory, at
//! etcd's default heartbeat (100 ms) and election timeout (1 s). Panics
//! instead of returning errors: for tests only.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, health, scratch_dir};

/// One member: its process (while it runs) and ports.
struct Member {
    name: String,
    child: Option<Child>,
    client_port: u16,
    peer_port: u16,
}

/// A running cluster, every member stopped (and the data deleted) on drop.
pub struct EtcdCluster {
    dir: tempfile::TempDir,
    members: Vec<Member>,
}

impl EtcdCluster {
    /// Starts `size` members and waits until each reports itself healthy
    /// (etcd's `/health` is true only with a leader).
    pub async fn start(size: usize) -> EtcdCluster {
        let members = (0..size)
            .map(|i| Member {
                name: format!("m{i}"),
                child: None,
                client_port: free_port(),
                peer_port: free_port(),
            })
            .collect();
        let mut c = EtcdCluster {
            dir: scratch_dir("lockscope-etcd-cluster-"),
            members,
        };
        for i in 0..size {
            c.spawn(i);
        }
        for i in 0..size {
            c.wait_healthy(i).await;
        }
        c
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn spawn(&mut self, i: usize) {
        let initial = self.initial_cluster();
        let data = self.dir.path().join(&self.members[i].name);
        let m = &mut self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let child = Command::new(std::env::var("LOCKSCOPE_ETCD_BIN").unwrap_or_else(|_| "etcd".into()))
            .args(["--name", &m.name, "--data-dir"])
            .arg(data)
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial, "--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "lockscope-test"])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd must be installed (Debian: etcd-server); scripts/install.sh does it");
        m.child = Some(child);
    }

    async fn wait_healthy(&mut self, i: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let m = &mut self.members[i];
            if let Some(status) = m.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("etcd member {} exited: {status}", m.name);
            }
            if health(m.client_port).await {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "etcd member {} not healthy after 30 s",
                m.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Member `i`'s client URL, `http://127.0.0.1:<port>`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client_port)
    }

    /// Kills member `i` (SIGKILL; its data kept).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the killed members `which` again (same ports and data) and waits
    /// until each is healthy (has a leader).
    pub async fn restart(&mut self, which: &[usize]) {
        for &i in which {
            self.kill(i);
            self.spawn(i);
        }
        for &i in which {
            self.wait_healthy(i).await;
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
