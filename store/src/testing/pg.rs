//! A throwaway PostgreSQL server for tests ([`PgServer`]), run as Debian's
//! `postgresql` binaries with the options of [`PgOptions`].

use std::process::Command;

use super::{free_port, scratch_dir};

/// A throwaway PostgreSQL (Debian's `postgresql`): `initdb` into a temporary
/// directory, `pg_ctl` on a free loopback port, trust auth for user `lockscope`.
/// PostgreSQL refuses to run as root, so as root it runs as the `postgres` user.
/// Stopped and deleted on drop.
pub struct PgServer {
    dir: tempfile::TempDir,
    port: u16,
    bin: std::path::PathBuf,
    opts: PgOptions,
}

/// How a [`PgServer`] runs. The default is built for speed: `max_connections`
/// 400 and `synchronous_commit` off (a commit returns before its WAL is
/// written: a kill within ~600 ms of it may lose it).
#[derive(Clone, Copy, Debug)]
pub struct PgOptions {
    pub max_connections: u32,
    /// `synchronous_commit=on`: a commit is in the WAL when it returns, so an
    /// immediate stop right after it keeps it.
    pub synchronous_commit: bool,
}

impl Default for PgOptions {
    fn default() -> PgOptions {
        PgOptions {
            max_connections: 400,
            synchronous_commit: false,
        }
    }
}

fn pg_bin_dir() -> std::path::PathBuf {
    let mut dirs: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .filter(|p| p.join("initdb").exists())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.pop().unwrap_or_default() // empty: rely on PATH
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}

impl PgServer {
    pub async fn start() -> PgServer {
        PgServer::start_with(PgOptions::default()).await
    }

    /// A server run with `opts` (kept across restarts).
    pub async fn start_with(opts: PgOptions) -> PgServer {
        let dir = scratch_dir("lockscope-pg-");
        let s = PgServer {
            dir,
            port: free_port(),
            bin: pg_bin_dir(),
            opts,
        };
        if running_as_root() {
            let ok = Command::new("chown")
                .args(["-R", "postgres:"])
                .arg(s.dir.path())
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown to the postgres user (is Debian's postgresql installed?)");
        }
        let data = s.dir.path().join("data");
        s.run(
            "initdb",
            &[
                "-D",
                &data.to_string_lossy(),
                "-A",
                "trust",
                "-U",
                "lockscope",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        s.pg_ctl_start();
        s
    }

    fn pg_ctl_start(&self) {
        let data = self.dir.path().join("data");
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections={} -c fsync=off -c synchronous_commit={} -c full_page_writes=off",
            self.port,
            self.dir.path().display(),
            self.opts.max_connections,
            if self.opts.synchronous_commit { "on" } else { "off" },
        );
        let log = self.dir.path().join("log");
        self.run(
            "pg_ctl",
            &[
                "-D",
                &data.to_string_lossy(),
                "-l",
                &log.to_string_lossy(),
                "-o",
                &opts,
                "-w",
                "start",
            ],
        );
    }

    /// Stops the server (fast shutdown: sessions are ended), data kept.
    pub fn stop(&self) {
        let data = self.dir.path().join("data");
        self.run("pg_ctl", &["-D", &data.to_string_lossy(), "-m", "fast", "-w", "stop"]);
    }

    /// [`PgServer::stop`] without blocking the caller's runtime (`pg_ctl` as a
    /// child process awaited): for tests that time what follows.
    pub async fn stop_fast(&self) {
        let data = self.dir.path().join("data");
        self.run_async("pg_ctl", &["-D", &data.to_string_lossy(), "-m", "fast", "-w", "stop"])
            .await;
    }

    /// Kills the server (`pg_ctl stop -m immediate`: every process ends at once,
    /// nothing is said to clients, crash recovery at the next start), data kept.
    /// Returns once it is gone, without blocking the caller's runtime.
    pub async fn stop_immediate(&self) {
        let data = self.dir.path().join("data");
        self.run_async(
            "pg_ctl",
            &["-D", &data.to_string_lossy(), "-m", "immediate", "-w", "stop"],
        )
        .await;
    }

    /// Starts it again after [`PgServer::stop`] or [`PgServer::stop_immediate`],
    /// same port and data.
    pub fn restart(&self) {
        self.pg_ctl_start();
    }

    /// A PostgreSQL tool, run as the `postgres` user when we are root.
    fn command(&self, tool: &str) -> Command {
        let exe = if self.bin.as_os_str().is_empty() {
            tool.into()
        } else {
            self.bin.join(tool)
        };
        if running_as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let mut cmd = self.command(tool);
        let out = cmd
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{tool}: {e} (scripts/install.sh installs postgresql)"));
        assert!(
            out.status.success(),
            "{tool} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// [`PgServer::run`] as a tokio child process.
    async fn run_async(&self, tool: &str, args: &[&str]) {
        let mut cmd = tokio::process::Command::from(self.command(tool));
        let out = cmd
            .args(args)
            .output()
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e} (scripts/install.sh installs postgresql)"));
        assert!(
            out.status.success(),
            "{tool} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `postgres://lockscope@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://lockscope@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let mut cmd = self.command("pg_ctl");
        let _ = cmd.arg("-D").arg(data).args(["-m", "immediate", "-w", "stop"]).output();
    }
}
