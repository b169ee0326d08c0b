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
}

impl Psql {
    /// Connects `psql` to `url` with `application_name` `app`.
    pub fn open(url: &str, app: &str) -> Psql {
        let mut child = Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=0", "-d", url])
            .env("PGAPPNAME", app)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("psql (scripts/install.sh installs postgresql-client)");
        let stdin = child.stdin.take().unwrap();
        Psql { child, stdin }
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
