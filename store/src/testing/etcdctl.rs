//! Real `etcdctl lock` and `etcdctl elect` processes (Debian's etcd-client) for
//! the tests of the `etcd-mutex:` fleet: each holds or waits for a lock of
//! etcd's native mutex layout, as a service using etcd's concurrency package does.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const ETCDCTL: &str = "/usr/bin/etcdctl";

/// An `etcdctl` process holding or waiting for a lock (or campaigning).
pub struct Etcdctl {
    child: Child,
    out: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Etcdctl {
    pub fn start(endpoint: &str, args: &[&str]) -> Etcdctl {
        let mut child = Command::new(ETCDCTL)
            .arg(format!("--endpoints={endpoint}"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("etcdctl runs (scripts/install.sh installs etcd-client)");
        let out = BufReader::new(child.stdout.take().unwrap()).lines();
        Etcdctl { child, out }
    }

    pub fn lock(endpoint: &str, name: &str) -> Etcdctl {
        Etcdctl::start(endpoint, &["lock", name])
    }

    /// The key it printed once it acquired the lock.
    pub async fn acquired(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(20), self.out.next_line())
            .await
            .expect("etcdctl acquired in time")
            .unwrap()
            .expect("etcdctl printed its key")
    }

    /// Whether it printed its key within `wait` (it acquired).
    pub async fn acquires_within(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, self.out.next_line()).await.is_ok()
    }

    /// SIGKILL: a crash. Its lease is not revoked, so its keys stay until the
    /// lease runs out (its TTL after the last renewal).
    pub async fn crash(mut self) {
        self.child.kill().await.expect("etcdctl killed");
    }

    /// SIGTERM: etcdctl closes its session (revokes its lease), as a process
    /// stopped by its supervisor does.
    pub async fn stop(mut self) {
        let pid = self.child.id().expect("running").to_string();
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

/// The lease id in hex a key `…/<lease>` names.
pub fn lease_in(key: &str) -> String {
    key.rsplit('/').next().unwrap().to_string()
}
