//! The real `lockscope` binary as a test's child process: on a free loopback
//! port with the arguments the test gives, in its directory, ready once
//! `/healthz` answers, killed (SIGKILL) when dropped.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lockscope_store::testing::free_port;

pub struct Binary {
    child: Child,
    port: u16,
}

impl Binary {
    /// `lockscope ARGS --listen 127.0.0.1:PORT`, run in `dir`; waits (10 s at
    /// most) until it answers `/healthz`.
    pub async fn start(args: &[String], dir: &Path) -> Binary {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_lockscope"))
            .args(args)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("LOCKSCOPE_LOG", "warn")
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let server = Binary { child, port };
        for _ in 0..200 {
            if server.get("/healthz").await.0 == 200 {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("lockscope did not start");
    }

    /// `GET path`: the status and the body (`0` and nothing when it does not answer).
    pub async fn get(&self, path: &str) -> (u16, String) {
        use http_body_util::{BodyExt, Full};
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
        let req = hyper::Request::get(format!("http://127.0.0.1:{}{path}", self.port))
            .body(Full::new(hyper::body::Bytes::new()))
            .unwrap();
        match client.request(req).await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let body = resp.into_body().collect().await.unwrap().to_bytes();
                (status, String::from_utf8_lossy(&body).into_owned())
            }
            Err(_) => (0, String::new()),
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
