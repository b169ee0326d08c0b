//! One replica: a `lockscope` process on the test's etcd (its logs read for
//! the failure messages), and a plain HTTP GET to read its `/metrics` and
//! `/healthz`.

use super::*;

/// One `lockscope` process; killed (and reaped) on drop.
pub(super) struct Replica {
    pub(super) name: String,
    pub(super) child: Mutex<Option<Child>>,
    pub(super) pid: u32,
    pub(super) port: u16,
    pub(super) stderr: PathBuf,
    pub(super) audit_path: PathBuf,
    pub(super) audit: AuditLog,
}

impl Replica {
    /// Starts `lockscope --replica NAME` on etcd at `endpoint`, its files in
    /// `dir/NAME/`, and returns once it listens.
    pub(super) async fn start(name: &str, dir: &Path, endpoint: &str) -> Replica {
        let home = dir.join(name);
        std::fs::create_dir_all(home.join("site")).unwrap();
        let port = free_port();
        let stdout = home.join("stdout.log");
        let stderr = home.join("stderr.log");
        let audit_path = home.join("audit.db");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockscope"));
        // Nothing from the environment or a lockscope.toml in the cwd.
        for (k, _) in std::env::vars() {
            if k.starts_with("LOCKSCOPE_") || k.starts_with("LEPTOS_") {
                cmd.env_remove(k);
            }
        }
        cmd.current_dir(&home)
            .args(["--etcd", endpoint, "--prefix", PREFIX, "--fleet", FLEET])
            .args(["--unlocker", "on"])
            .args(["--unlocker-lease-secs", &LEASE_SECS.to_string()])
            .args(["--unlocker-grace-secs", &GRACE_SECS.to_string()])
            .args(["--replica", name])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--audit")
            .arg(format!("sqlite:{}", audit_path.display()))
            .arg("--site-root")
            .arg(home.join("site"))
            .args(["--log", "info"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let mut child = cmd.spawn().expect("spawning the lockscope binary");
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "replica {name} exited at start ({status}); its stderr:\n{}",
                    tail(&stderr, 40)
                );
            }
            let out = std::fs::read_to_string(&stdout).unwrap_or_default();
            if out.contains("lockscope listening on") {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "replica {name} not listening after 30 s; its stderr:\n{}",
                    tail(&stderr, 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Opened once the replica made its tables; reading beside it is fine
        // (WAL). Read-only: the replica's audit spool stays the replica's.
        let audit = AuditLog::open_read_only(&format!("sqlite:{}", audit_path.display()))
            .await
            .expect("opening a replica's audit log");
        Replica {
            name: name.to_string(),
            child: Mutex::new(Some(child)),
            pid,
            port,
            stderr,
            audit_path,
            audit,
        }
    }

    /// SIGKILL, and reaped.
    pub(super) fn kill(&self) {
        if let Some(mut c) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `sig` (libc's, not procps' `kill`: a slim machine has none).
    pub(super) fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid (reaped only on drop).
        let ok = unsafe { libc::kill(self.pid as i32, sig) } == 0;
        let e = std::io::Error::last_os_error();
        assert!(ok, "kill {sig} {} ({}) failed: {e}", self.pid, self.name);
    }

    pub(super) fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    pub(super) fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// The unlocker's releases this replica put on record with `outcome`.
    pub(super) async fn releases(&self, outcome: Outcome) -> Vec<AuditEntry> {
        let q = AuditQuery {
            outcome: Some(outcome),
            limit: Some(MAX_AUDIT_ROWS),
            ..AuditQuery::default()
        };
        let entries = self.audit.query(&q).await.expect("reading an audit log");
        assert!(
            entries.len() < MAX_AUDIT_ROWS as usize,
            "audit query capped: count differently"
        );
        entries
            .into_iter()
            .filter(|e| e.actor.starts_with("unlocker@"))
            .collect()
    }

    /// The `Done` releases of locks named `tag/…`.
    pub(super) async fn done(&self, tag: &str) -> Vec<AuditEntry> {
        let prefix = format!("{tag}/");
        let mut done = self.releases(Outcome::Done).await;
        done.retain(|e| e.target.starts_with(&prefix));
        done
    }

    /// `lockscope_unlocker_releases_total{outcome=…}` of this replica, by outcome.
    pub(super) async fn release_metrics(&self) -> BTreeMap<String, f64> {
        let text = http_get(self.port, "/metrics").await.unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with("lockscope_unlocker_releases_total{"))
            .filter_map(|l| {
                let outcome = l.split("outcome=\"").nth(1)?.split('"').next()?.to_string();
                Some((outcome, l.rsplit(' ').next()?.parse().ok()?))
            })
            .collect()
    }

    /// How many locks this replica's hub shows held (from `/healthz`).
    pub(super) async fn held_in_view(&self) -> Option<u64> {
        let body = http_get(self.port, "/healthz").await?;
        let json = body.split_once("\r\n\r\n")?.1;
        let v: serde_json::Value = serde_json::from_str(json).ok()?;
        v["fleets"].as_array()?.iter().find(|f| f["name"] == FLEET)?["held"].as_u64()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too.
        self.kill();
    }
}

/// A replica's log without terminal colours.
pub(super) fn read_log(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("({}: {e})", path.display()));
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // `ESC [ … m`
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The last `n` lines of a replica's log.
pub(super) fn tail(path: &Path, n: usize) -> String {
    let text = read_log(path);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The lines of a replica's log about the role, and its warnings and errors.
pub(super) fn notable(path: &Path) -> Vec<String> {
    read_log(path)
        .lines()
        .filter(|l| {
            [" WARN ", " ERROR ", "active unlocker", "lost the unlocker role"]
                .iter()
                .any(|w| l.contains(w))
        })
        .map(str::to_string)
        .collect()
}

/// Both replicas' notable lines and stderr tails, for failure messages.
pub(super) fn tails(replicas: &[&Replica]) -> String {
    replicas
        .iter()
        .map(|r| {
            let notable = notable(&r.stderr);
            format!(
                "\n--- replica {} (pid {}): role changes, warnings, errors ({}, last 20) ---\n{}\n--- replica {} stderr tail ---\n{}",
                r.name,
                r.pid,
                notable.len(),
                notable[notable.len().saturating_sub(20)..].join("\n"),
                r.name,
                tail(&r.stderr, 15)
            )
        })
        .collect()
}

/// A plain HTTP/1.0 GET on loopback; `None` if the server does not answer.
pub(super) async fn http_get(port: u16, path: &str) -> Option<String> {
    let get = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).await.ok()?;
        Some(body)
    };
    tokio::time::timeout(Duration::from_secs(3), get).await.ok()?
}
