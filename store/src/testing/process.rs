//! What the tests' server processes (`redis-server`, ZooKeeper, etcd) share:
//! waiting until a freshly spawned one answers on its loopback port (or
//! failing fast when it exits), and killing it.

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Waits until the server `child` (`what`, for the panics) answers `ask` on
/// 127.0.0.1:`port` with a reply starting `answer`, asking every `every` for
/// at most `within`. Panics if it exits first (with its `log` file, if any).
pub(super) async fn wait_answering(
    child: &mut Child,
    what: &str,
    port: u16,
    (ask, answer): (&[u8], &[u8]),
    (within, every): (Duration, Duration),
    log: Option<&Path>,
) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            match log {
                Some(log) => {
                    let log = std::fs::read_to_string(log).unwrap_or_default();
                    panic!("{what} exited at start: {status}\n{log}");
                }
                None => panic!("{what} exited at start: {status}"),
            }
        }
        if answers(port, ask, answer).await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} not answering after {} s",
            within.as_secs()
        );
        tokio::time::sleep(every).await;
    }
}

/// Whether 127.0.0.1:`port` answers `ask` with a reply starting `answer`
/// (1 s to connect, 1 s to reply).
async fn answers(port: u16, ask: &[u8], answer: &[u8]) -> bool {
    let Ok(Ok(mut s)) = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(("127.0.0.1", port))).await
    else {
        return false;
    };
    let mut buf = [0u8; 16];
    s.write_all(ask).await.is_ok()
        && matches!(
            tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await,
            Ok(Ok(n)) if buf[..n].starts_with(answer)
        )
}

/// Kills the server (SIGKILL) and reaps it, if it runs.
pub(super) fn kill(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}
