//! `lockscope watch locks`, the real binary against a real server with
//! authentication over a real SQLite store. docs/operations.md: "prints the
//! locks there are, then one line per change (`acquired`, `released`,
//! `changed`) … until interrupted (ctrl-c: exit 0)"; "the token as for `get`";
//! "when the connection drops or the server closes it, it exits 3"; "when the
//! server says the fleet is not live, it says so on stderr".

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockscope::auth::Auth;
use lockscope::live::hub::{Fleets, HubHandle};
use lockscope::remember::audit::AuditLog;
use lockscope::web::AppState;
use lockscope_store::protocol::LockStore;
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::{free_port, take};
use tokio::sync::mpsc;

use crate::admin::Server;

/// A running `lockscope watch locks`: its stdout line by line, its stderr as it comes.
struct Watcher {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
    stderr: Arc<Mutex<String>>,
    stderr_reader: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    fn spawn(base: &str, token: Option<&str>, args: &[&str]) -> Watcher {
        let mut c = Command::new(env!("CARGO_BIN_EXE_lockscope"));
        c.args(["watch", "locks", "--server", base])
            .args(args)
            .env_remove("RUST_BACKTRACE")
            .env_remove("LOCKSCOPE_TOKEN_FILE")
            .env("LOCKSCOPE_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match token {
            Some(t) => c.env("LOCKSCOPE_TOKEN", t),
            None => c.env_remove("LOCKSCOPE_TOKEN"),
        };
        let mut child = c.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (err, into) = (child.stderr.take().unwrap(), stderr.clone());
        let stderr_reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                into.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Watcher {
            child,
            lines,
            seen: Vec::new(),
            stderr,
            stderr_reader: Some(stderr_reader),
        }
    }

    /// The next line that `ok` accepts (10 s at most).
    async fn line(&mut self, ok: impl Fn(&str) -> bool) -> String {
        let found = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(l) = self.lines.recv().await {
                self.seen.push(l.clone());
                if ok(&l) {
                    return Some(l);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(l)) => l,
            _ => panic!("no such line; printed: {:#?}", self.seen),
        }
    }

    /// Waits (10 s at most) until its stderr says `text`.
    async fn said(&self, text: &str) {
        for _ in 0..200 {
            if self.stderr.lock().unwrap().contains(text) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("never said {text:?}: {}", self.stderr.lock().unwrap());
    }

    /// Waits (10 s at most) until it exits: its exit code and stderr.
    async fn exit(mut self) -> (i32, String) {
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Its stderr's reader ends when the pipe closes.
                let reader = self.stderr_reader.take().unwrap();
                tokio::task::block_in_place(|| reader.join().unwrap());
                let err = self.stderr.lock().unwrap().clone();
                return (status.code().expect("exited, not killed"), err);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = self.child.kill();
        panic!("watch still runs 10 s later; printed: {:#?}", self.seen);
    }

    fn interrupt(&self) {
        // SAFETY: kill(2) on our own child, not reaped yet.
        let sent = unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) } == 0;
        assert!(sent, "SIGINT: {}", std::io::Error::last_os_error());
    }
}

/// Until the server's API shows (or no longer shows) the lock `name`.
async fn until_listed(s: &Server, name: &str, listed: bool) {
    let path = format!("/api/v1/fleets/sql/locks/{}", lockscope_model::url::segment(name));
    for _ in 0..200 {
        let r = s
            .send("GET", &path, &[("authorization", &s.bearer("viewer"))], "")
            .await;
        if (r.status == 200) == listed {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{name} never {}", if listed { "listed" } else { "gone" });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_the_locks_then_each_change_until_interrupted() {
    let s = Server::start().await;
    take(&s.store, "jobs/a").await;
    until_listed(&s, "jobs/a", true).await;

    let mut w = Watcher::spawn(&s.base, Some(&s.tokens["viewer"]), &["--fleet", "sql"]);
    w.line(|l| l.starts_with("NAME")).await;
    w.line(|l| l.starts_with("jobs/a ")).await;
    let fence = take(&s.store, "jobs/b").await;
    let acquired = w.line(|l| l.contains(" acquired ")).await;
    assert!(
        acquired.contains(" jobs/b ") && acquired.contains(&format!("fence {fence}")),
        "{acquired}"
    );
    assert!(
        acquired.starts_with("20") && acquired[..24].ends_with('Z'),
        "timed: {acquired}"
    );
    assert!(s.store.release("jobs/b", fence).await.unwrap());
    let released = w.line(|l| l.contains(" released ")).await;
    assert!(released.contains(" jobs/b "), "{released}");
    w.interrupt();
    let (code, err) = w.exit().await;
    assert_eq!(code, 0, "ctrl-c ends it with 0: {err}");

    // One lock by name, as ndjson events: only that lock's.
    let mut one = Watcher::spawn(&s.base, Some(&s.tokens["viewer"]), &["jobs/c", "-o", "ndjson"]);
    let fence = take(&s.store, "jobs/c").await;
    let event: serde_json::Value = serde_json::from_str(&one.line(|l| l.contains("jobs/c")).await).unwrap();
    assert_eq!(
        (event["event"].as_str(), event["row"]["entry"]["fence"].as_i64()),
        (Some("acquired"), Some(fence)),
        "{event}"
    );
    assert!(one.seen.iter().all(|l| !l.contains("jobs/a")), "{:?}", one.seen);

    // The token goes on the upgrade request: none, and the server refuses (exit 4).
    let (code, err) = Watcher::spawn(&s.base, None, &[]).exit().await;
    assert!(code == 4 && err.contains("401"), "no token: {code} {err}");
    let (code, err) = Watcher::spawn(&s.base, Some(&s.tokens["viewer"]), &["--state", "asleep"])
        .exit()
        .await;
    assert!(code == 2 && err.contains("not a state"), "usage: {code} {err}");

    // The server goes away: the connection ends, and so does watch, with 3.
    drop(s);
    let (code, err) = one.exit().await;
    assert!(
        code == 3 && (err.contains("closed the connection") || err.contains("dropped")),
        "{code} {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_says_when_the_fleet_is_not_live() {
    let dir = tempfile::tempdir().unwrap();
    let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("audit.db").display()))
        .await
        .unwrap();
    // Nothing listens there: the fleet never goes live.
    let spec = StoreSpec::parse(&format!("etcd:http://127.0.0.1:{}", free_port())).unwrap();
    let hub = HubHandle::spawn("down", "etcd nowhere", spec.open().unwrap());
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    let state = AppState::new(
        Fleets::new(vec![hub]),
        "target/site".into(),
        stop_rx.clone(),
        audit.clone(),
        Auth::new(None, audit),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(lockscope::serve(listener, state, stop_rx, Duration::from_secs(1)));

    let w = Watcher::spawn(&base, None, &[]);
    w.said("warning: the fleet down is not live").await;
    w.interrupt();
    let (code, err) = w.exit().await;
    assert_eq!(code, 0, "{err}");
}
