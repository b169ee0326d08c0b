//! A `psql` session kept open by a test ([`Psql`]): another client library
//! than lockscope's, holding and waiting for PostgreSQL advisory locks the
//! way an operator's shell or a migration script does.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};

/// `psql` on a URL, reading the statements [`Psql::send`] writes to it, one
/// at a time as they come (a blocking statement blocks the session, not the
/// test). Killed on drop.
pub struct Psql {
    child: Child,
    stdin: ChildStdin,
    /// Where its stderr goes ([`Psql::open_logged`]).
    log: Option<tempfile::NamedTempFile>,
}

impl Psql {
    /// Connects `psql` to `url` with `application_name` `app`.
    pub fn open(url: &str, app: &str) -> Psql {
        Psql::spawn(url, app, None)
    }

    /// [`Psql::open`], keeping what `psql` prints on stderr (its errors) for
    /// [`Psql::errors`].
    pub fn open_logged(url: &str, app: &str) -> Psql {
        Psql::spawn(url, app, Some(tempfile::NamedTempFile::new().unwrap()))
    }

    fn spawn(url: &str, app: &str, log: Option<tempfile::NamedTempFile>) -> Psql {
        let stderr = match &log {
            Some(f) => Stdio::from(f.reopen().unwrap()),
            None => Stdio::null(),
        };
        let mut child = Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=0", "-d", url])
            .env("PGAPPNAME", app)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("psql (scripts/install.sh installs postgresql-client)");
        let stdin = child.stdin.take().unwrap();
        Psql { child, stdin, log }
    }

    /// What it printed on stderr so far (empty unless [`Psql::open_logged`]).
    pub fn errors(&self) -> String {
        self.log
            .as_ref()
            .map(|f| std::fs::read_to_string(f.path()).unwrap_or_default())
            .unwrap_or_default()
    }

    /// Sends statements (ended by `;`), run in order by the session.
    pub fn send(&mut self, sql: &str) {
        writeln!(self.stdin, "{sql}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Whether the `psql` process has ended (its backend terminated, say).
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }
}

impl Drop for Psql {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
