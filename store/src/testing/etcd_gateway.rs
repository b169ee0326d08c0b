//! A second, independent client of etcd's native mutex for the tests of the
//! `etcd-mutex:` fleet: `etcd_gateway_mutex.py` (beside this file), which
//! follows `concurrency.Mutex`'s recipe over etcd's v3 JSON gateway with
//! Python's standard library only, so what the fleet shows is not an artefact
//! of Go's client or of `etcdctl`.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/testing/etcd_gateway_mutex.py");

/// A Python process holding or waiting for an etcd mutex through the gateway.
pub struct GatewayMutex {
    child: Child,
    /// Closing it makes the process unlock and close its session.
    stdin: Option<ChildStdin>,
    out: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    /// Its key (`NAME/<lease hex>`), once written.
    pub key: String,
}

impl GatewayMutex {
    /// Locks `name` (a key prefix, as `etcdctl lock` takes) on a fresh lease
    /// (with `lease_id`, that id: etcd's own ids grow with time) and returns
    /// once its key is written (it may still wait for the lock).
    pub async fn lock(endpoint: &str, name: &str, lease_id: Option<i64>) -> GatewayMutex {
        let mut cmd = Command::new("python3");
        cmd.arg("-u").arg(SCRIPT).arg(endpoint).arg(name);
        if let Some(id) = lease_id {
            cmd.arg("--lease-id").arg(id.to_string());
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs");
        let stdin = child.stdin.take();
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), out.next_line())
            .await
            .expect("the gateway client wrote its key in time")
            .unwrap()
            .expect("the gateway client printed its key");
        let key = line.strip_prefix("waiting ").expect("`waiting KEY`").to_string();
        GatewayMutex { child, stdin, out, key }
    }

    /// Its key, printed again once it holds the lock.
    pub async fn acquired(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(20), self.out.next_line())
            .await
            .expect("the gateway client acquired in time")
            .unwrap()
            .expect("the gateway client printed its key")
    }

    /// Whether it acquired within `wait`.
    pub async fn acquires_within(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, self.out.next_line()).await.is_ok()
    }

    /// Unlock (delete its key) and close its session (revoke its lease), as
    /// the library's `Unlock` and `Session.Close` do; waits for it to exit.
    pub async fn stop(mut self) {
        drop(self.stdin.take());
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}
