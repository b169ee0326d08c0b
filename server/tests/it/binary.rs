//! The real `lockscope` binary as a test's child process: on a free loopback
//! port with the arguments the test gives, in its directory, ready once
//! `/healthz` answers, killed (SIGKILL) when dropped; requests to it with any
//! method and headers; stopped as systemd stops it (SIGTERM) or killed.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lockscope_store::testing::free_port;

pub struct Binary {
    child: Child,
    port: u16,
}

impl Binary {
    /// `lockscope ARGS --listen 127.0.0.1:PORT`, run in `dir`; waits (30 s at
    /// most) until it answers `/healthz`. Its stderr (warnings and errors) is
    /// appended to `dir/lockscope.log`, shown when it does not start.
    pub async fn start(args: &[String], dir: &Path) -> Binary {
        let port = free_port();
        let log_path = dir.join("lockscope.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_lockscope"))
            .args(args)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("LOCKSCOPE_LOG", "warn")
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut server = Binary { child, port };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let why = loop {
            if server.get("/healthz").await.0 == 200 {
                return server;
            }
            if let Some(status) = server.child.try_wait().unwrap() {
                break format!("exited at start ({status})");
            }
            if std::time::Instant::now() > deadline {
                break "not answering /healthz after 30 s".to_string();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        panic!("lockscope {args:?} {why}; its stderr:\n{log}");
    }

    /// `GET path`: the status and the body (`0` and nothing when it does not answer).
    pub async fn get(&self, path: &str) -> (u16, String) {
        let (status, _, body) = self.send("GET", path, &[], "").await;
        (status, body)
    }

    /// `METHOD path` with `headers` and `body`: the status, the headers and
    /// the body (`0` and nothing when it does not answer).
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, hyper::HeaderMap, String) {
        use http_body_util::{BodyExt, Full};
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("http://127.0.0.1:{}{path}", self.port));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(hyper::body::Bytes::from(body.to_string()))).unwrap();
        match client.request(req).await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let headers = resp.headers().clone();
                let body = resp.into_body().collect().await.unwrap().to_bytes();
                (status, headers, String::from_utf8_lossy(&body).into_owned())
            }
            Err(_) => (0, hyper::HeaderMap::new(), String::new()),
        }
    }

    /// SIGTERM (as `systemctl stop` sends), then waits until it exits
    /// (`within` at most, else it is killed and the test fails): its exit status.
    pub async fn terminate(mut self, within: Duration) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child, not reaped yet.
        let sent = unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) } == 0;
        assert!(sent, "SIGTERM: {}", std::io::Error::last_os_error());
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "lockscope still runs {within:?} after SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: nothing flushed, nothing said.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
