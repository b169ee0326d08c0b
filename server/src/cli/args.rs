//! Command line of the `lockscope` binary. Every flag has an environment fallback
//! (shown by `--help`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use lockscope_store::spec::{StoreSpec, DEFAULT_ETCD_PREFIX};

use lockscope_model::admin::Role;
use lockscope_model::unlock::Mode;

use crate::cli::demo::DemoConfig;

#[derive(Debug, Parser)]
#[command(
    name = "lockscope",
    version,
    about = "Observability dashboard and admin console for fleets of distributed locks",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Run the dashboard (the default when no subcommand is given).
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Log filter, in `tracing` EnvFilter syntax (e.g. `info,lockscope_store=debug`).
    #[arg(long, env = "LOCKSCOPE_LOG", default_value = "info", global = true)]
    pub log: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Take a lock with metadata through the lock protocol, print its fencing token,
    /// and leave it held (for demos and tests; services use the client library).
    Lock(LockArgs),
    /// Release a lock taken with `lock`, only if it is still that acquisition.
    Unlock(UnlockArgs),
    /// Run a simulated fleet of workers taking real locks through the client
    /// library (contention, timeouts, overdue holders, hung-but-alive holders,
    /// dead workers' abandoned locks), for the dashboard to show and as a load
    /// generator.
    Demo(DemoArgs),
    /// Make an API token: prints the token (once) and the `[[auth.tokens]]`
    /// entry for lockscope.toml, which keeps only its hash.
    Token(TokenArgs),
    /// Force-release, blacklist or lift a blacklist through a running server's
    /// API, so roles and the audit log apply.
    Admin(crate::cli::admin::AdminArgs),
    /// The lock history: `export` writes a query's events to stdout.
    History(crate::cli::history::HistoryArgs),
    /// List a running server's locks or sessions (exit 0 found, 1 not found,
    /// 2 usage, 3 unreachable, 4 refused).
    Get(crate::cli::get::GetArgs),
    /// One lock in full, as its page shows it (exit codes as `get`).
    Describe(crate::cli::get::DescribeArgs),
    /// Follow a running server's locks: the rows there are, then one line per
    /// change, until interrupted (exit codes as `get`; 3 when the connection drops).
    Watch(crate::cli::watch::WatchArgs),
    /// Print the completion script for a shell (bash, zsh, fish).
    Completions(CompletionsArgs),
    /// Print the man page (roff), or write every page into `--dir`.
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub struct TokenArgs {
    /// Who the token is: the actor the audit log names.
    #[arg(long)]
    pub name: String,
    /// viewer, operator or admin.
    #[arg(long, default_value = "viewer", value_parser = parse_role)]
    pub role: Role,
}

/// `MODE` or `FLEET=MODE` (see `--unlocker`).
fn parse_unlocker(s: &str) -> Result<(Option<String>, Mode), String> {
    let (fleet, mode) = match s.split_once('=') {
        Some((f, m)) => (Some(parse_fleet_name(f)?), m),
        None => (None, s),
    };
    let mode = Mode::parse(mode.trim()).ok_or_else(|| format!("unlocker mode {mode:?}: use off, dry-run or on"))?;
    Ok((fleet, mode))
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse(s).ok_or_else(|| format!("{s:?}: use viewer, operator or admin"))
}

/// The store a subcommand acts on.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The store: `etcd:ENDPOINT[,ENDPOINT…][#PREFIX]`, `sqlite:PATH` or
    /// `postgres://…`. The default is the file the dashboard's embedded default
    /// serves, so `lockscope lock NAME` shows up on a bare `lockscope`.
    #[arg(long, env = "LOCKSCOPE_STORE", value_parser = parse_spec, default_value = "sqlite:.lockscope/lockscope.db")]
    pub store: StoreSpec,
    /// Shorthand for `--store etcd:ENDPOINTS` (comma-separated).
    #[arg(long = "etcd", env = "LOCKSCOPE_ETCD", value_delimiter = ',')]
    pub etcd: Vec<String>,
    /// Key prefix of the lockscope layout in etcd (unless the spec names one).
    #[arg(long, env = "LOCKSCOPE_PREFIX", default_value = DEFAULT_ETCD_PREFIX)]
    pub prefix: String,
}

impl StoreArgs {
    pub fn spec(&self) -> StoreSpec {
        let spec = match self.etcd.is_empty() {
            true => self.store.clone(),
            false => StoreSpec::Etcd {
                endpoints: self.etcd.clone(),
                prefix: None,
            },
        };
        spec.with_default_prefix(&self.prefix)
    }
}

fn parse_spec(text: &str) -> Result<StoreSpec, String> {
    StoreSpec::parse(text).map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// etcd client endpoints, comma-separated: one etcd fleet, named by `--fleet`.
    #[arg(long = "etcd", env = "LOCKSCOPE_ETCD", value_delimiter = ',')]
    pub etcd: Vec<String>,
    /// Key prefix of the lockscope layout in etcd (for etcd fleets whose spec
    /// names none).
    #[arg(long, env = "LOCKSCOPE_PREFIX", default_value = DEFAULT_ETCD_PREFIX)]
    pub prefix: String,
    /// A fleet to watch, as NAME=STORE; repeatable (environment: `;`-separated).
    /// STORE is `etcd:ENDPOINT[,ENDPOINT…][#PREFIX]`, `sqlite:PATH`,
    /// `postgres://…`, `scylla:HOST[,HOST…][/KEYSPACE][?dc=…&serial=local&user=…&password_file=…&tls_ca=…&scan_ms=…]`
    /// (password of `user` also from LOCKSCOPE_SCYLLA_PASSWORD), or a read-only
    /// ShedLock table: `shedlock+postgres://…[#TABLE]`, `shedlock+sqlite:PATH[#TABLE]`, or
    /// etcd's native mutexes (`etcdctl lock`) under a prefix: `etcd-mutex:ENDPOINT[,…]#PREFIX`,
    /// Redis `SET NX PX` locks (redis-py's `Lock`) and Redisson hashes: `redis://[USER:PASSWORD@]HOST:PORT[/DB][?match=PATTERN&queue=N]` (`rediss://…[&ca=PEM]`: TLS),
    /// Redlock over several masters: `redlock+redis://HOST:PORT,HOST:PORT,…[/DB][?match=PATTERN]`,
    /// ZooKeeper lock recipes (kazoo, Curator): `zk://HOST:PORT[,HOST:PORT…]/ROOT`, or
    /// PostgreSQL advisory locks: `advisory+postgres://…[#poll=1s&limit=10000&…]`. With no
    /// `--store` and no `--etcd`, lockscope runs on an embedded SQLite file with a
    /// demo fleet.
    #[arg(long = "store", env = "LOCKSCOPE_STORES", value_delimiter = ';', value_parser = parse_fleet)]
    pub stores: Vec<FleetSpec>,
    /// The embedded default's SQLite file (used when no store is configured).
    #[arg(long, env = "LOCKSCOPE_EMBEDDED_DB", default_value = ".lockscope/lockscope.db")]
    pub embedded_db: PathBuf,
    /// Do not run the demo fleet on the embedded default.
    #[arg(long, env = "LOCKSCOPE_NO_DEMO")]
    pub no_demo: bool,
    /// Address to serve the dashboard on (default 127.0.0.1:3000, or the
    /// config file's `listen`). Without `[auth]` only loopback addresses are
    /// allowed.
    #[arg(long, env = "LOCKSCOPE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// The config file (fleets, audit database, auth); default `lockscope.toml`
    /// when it exists. Flags and environment variables override it.
    #[arg(long, env = "LOCKSCOPE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Where the audit log (and browser sign-ins) live: `sqlite:PATH` or
    /// `postgres://…`; default the embedded default's SQLite file.
    #[arg(long, env = "LOCKSCOPE_AUDIT")]
    pub audit: Option<String>,
    /// Where the lock history lives: `sqlite:PATH` (a file of its own) or
    /// `postgres://…` (schema `lockscope_history`; replicas share it), or `off`.
    /// Default: `lockscope-history.db` beside the embedded default's file.
    #[arg(long, env = "LOCKSCOPE_HISTORY")]
    pub history: Option<String>,
    /// History older than this many days is removed (default 30).
    #[arg(long, env = "LOCKSCOPE_HISTORY_DAYS")]
    pub history_days: Option<u64>,
    /// At most this many history events are kept, the oldest go first
    /// (default 20,000,000).
    #[arg(long, env = "LOCKSCOPE_HISTORY_MAX_EVENTS")]
    pub history_max_events: Option<u64>,
    /// The unlocker's mode, `off`, `dry-run` or `on`: for every fleet (`MODE`)
    /// or one (`FLEET=MODE`); repeatable. Default: `on` for the embedded
    /// default, else the config file's `unlocker`, else `dry-run`.
    #[arg(long = "unlocker", env = "LOCKSCOPE_UNLOCKER", value_delimiter = ',', value_parser = parse_unlocker)]
    pub unlocker: Vec<(Option<String>, Mode)>,
    /// How long past a lock's `auto_unlock_at` (on this server's clock) the
    /// unlocker waits before releasing it: covers the holders' clock skew.
    #[arg(long, env = "LOCKSCOPE_UNLOCKER_GRACE_SECS")]
    pub unlocker_grace_secs: Option<u64>,
    /// The unlocker role's lease: a replica that stops renewing it (killed,
    /// paused) hands the role over this long after its last renewal.
    #[arg(long, env = "LOCKSCOPE_UNLOCKER_LEASE_SECS")]
    pub unlocker_lease_secs: Option<u64>,
    /// This replica's name, as other replicas and the UI show the active
    /// unlocker (default HOST:PORT).
    #[arg(long, env = "LOCKSCOPE_REPLICA")]
    pub replica: Option<String>,
    /// Name of the `--etcd` fleet.
    #[arg(long, env = "LOCKSCOPE_FLEET", default_value = "etcd", value_parser = parse_fleet_name)]
    pub fleet: String,
    /// Directory holding the built site (`pkg/` with the wasm, JS and CSS).
    #[arg(long, env = "LEPTOS_SITE_ROOT", default_value = "target/site")]
    pub site_root: PathBuf,
}

/// One configured fleet: a name and its store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetSpec {
    pub name: String,
    pub store: StoreSpec,
}

fn parse_fleet_name(name: &str) -> Result<String, String> {
    if !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        Ok(name.to_string())
    } else {
        Err(format!("fleet name {name:?}: use 1 to 64 of A-Z a-z 0-9 - _ ."))
    }
}

/// Parses `NAME=STORE` (see `--store`).
pub fn parse_fleet(text: &str) -> Result<FleetSpec, String> {
    let (name, store) = text
        .split_once('=')
        .ok_or_else(|| format!("{:?}: expected NAME=STORE", lockscope_store::spec::redact(text)))?;
    Ok(FleetSpec {
        name: parse_fleet_name(name.trim())?,
        store: parse_spec(store)?,
    })
}

#[derive(Debug, Args)]
pub struct LockArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Lock name.
    pub name: String,
    /// Why the lock is taken.
    #[arg(long, default_value = "")]
    pub purpose: String,
    /// Expected hold time in seconds: alert at 1x, auto-unlock at 2x.
    #[arg(long, default_value_t = 60)]
    pub expected_runtime: u64,
    /// Service name recorded as the holder.
    #[arg(long, default_value = "lockscope-cli")]
    pub service: String,
    /// While the lock is held by someone else, wait at most this long (`90s`,
    /// `15m`, `1h30m`, `2d`); without it, wait until it is free.
    #[arg(long, value_parser = parse_wait, conflicts_with = "no_wait")]
    pub wait: Option<std::time::Duration>,
    /// Try once: when the lock is held, say by whom and fail at once.
    #[arg(long)]
    pub no_wait: bool,
}

/// A `--wait` duration, written as the history's relative times are.
fn parse_wait(text: &str) -> Result<std::time::Duration, String> {
    lockscope_model::history::parse_duration(text)
        .filter(|ms| *ms > 0)
        .map(|ms| std::time::Duration::from_millis(ms as u64))
        .ok_or_else(|| format!("{text:?} is not a duration: numbers with units s, m, h, d, e.g. 90s or 1h30m"))
}

#[derive(Debug, Args)]
pub struct UnlockArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Lock name.
    pub name: String,
    /// Fencing token printed by `lock`.
    #[arg(long)]
    pub fence: i64,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Simulated workers, each with its own session.
    #[arg(long, env = "LOCKSCOPE_DEMO_WORKERS", default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: u32,
    /// What every lock name starts with: a second demo with its own prefix never
    /// contends with the first.
    #[arg(long, env = "LOCKSCOPE_DEMO_NAME_PREFIX", default_value = "demo/", value_parser = name_prefix)]
    pub name_prefix: String,
    /// Distinct lock names: a few readable ones, then `<prefix>jobs/<n>`.
    #[arg(long, env = "LOCKSCOPE_DEMO_KEYS", default_value_t = 40, value_parser = clap::value_parser!(u32).range(1..))]
    pub keys: u32,
    /// How many of the locks are hot (the first ones; at most `--keys`).
    #[arg(long, env = "LOCKSCOPE_DEMO_HOT_KEYS", default_value_t = 3)]
    pub hot_keys: u32,
    /// Fraction (0 to 1) of acquisitions that go to the hot locks.
    #[arg(long, env = "LOCKSCOPE_DEMO_HOT_SHARE", default_value_t = 0.5, value_parser = fraction)]
    pub hot_share: f64,
    /// Mean hold time in milliseconds (exponentially distributed, kept under the
    /// expected runtime except for stalls).
    #[arg(long, env = "LOCKSCOPE_DEMO_HOLD_MS", default_value_t = 1500)]
    pub hold_ms: u64,
    /// Expected runtime recorded with every lock, in milliseconds (overdue past it).
    #[arg(long, env = "LOCKSCOPE_DEMO_EXPECTED_RUNTIME_MS", default_value_t = 3000, value_parser = clap::value_parser!(u64).range(1..))]
    pub expected_runtime_ms: u64,
    /// Probability per acquisition that the worker dies holding the lock (the lock
    /// stays until the unlocker releases it; the worker restarts with a new session).
    #[arg(long, env = "LOCKSCOPE_DEMO_DIE_RATE", default_value_t = 0.02, value_parser = fraction)]
    pub die_rate: f64,
    /// Probability per acquisition that the worker holds 1.5 to 3 times its
    /// expected runtime, so the lock turns overdue.
    #[arg(long, env = "LOCKSCOPE_DEMO_STALL_RATE", default_value_t = 0.05, value_parser = fraction)]
    pub stall_rate: f64,
    /// Probability per acquisition that the worker hangs holding the lock: stuck
    /// but alive, its session heartbeating, so the lock turns overdue with a
    /// healthy-looking holder (to try blacklisting and force-release on).
    #[arg(long, env = "LOCKSCOPE_DEMO_HANG_RATE", default_value_t = 0.001, value_parser = fraction)]
    pub hang_rate: f64,
    /// How long a hang lasts, in seconds; default 3 to 5 minutes (uniformly).
    #[arg(long, env = "LOCKSCOPE_DEMO_HANG_SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub hang_secs: Option<u64>,
    /// A lock not extended for this many milliseconds may be released by the
    /// unlocker (`auto_unlock_at`); at least three heartbeats (6 s).
    #[arg(long, env = "LOCKSCOPE_DEMO_AUTO_UNLOCK_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub auto_unlock_ms: u64,
    /// Stop after this many seconds; 0 runs until ctrl-c or SIGTERM.
    #[arg(long, env = "LOCKSCOPE_DEMO_DURATION_SECS", default_value_t = 0)]
    pub duration_secs: u64,
    /// Seed for the workers' random decisions (which lock, how long, die, stall or hang).
    #[arg(long, env = "LOCKSCOPE_DEMO_SEED")]
    pub seed: Option<u64>,
}

impl DemoArgs {
    pub fn demo_config(&self) -> DemoConfig {
        let mut cfg = DemoConfig {
            workers: self.workers as usize,
            name_prefix: self.name_prefix.clone(),
            keys: self.keys as usize,
            hot_keys: self.hot_keys as usize,
            hot_share: self.hot_share,
            hold_mean: Duration::from_millis(self.hold_ms),
            expected_runtime: Duration::from_millis(self.expected_runtime_ms),
            die_rate: self.die_rate,
            stall_rate: self.stall_rate,
            hang_rate: self.hang_rate,
            auto_unlock_after: Duration::from_millis(self.auto_unlock_ms),
            duration: (self.duration_secs > 0).then(|| Duration::from_secs(self.duration_secs)),
            seed: self.seed,
            ..DemoConfig::default()
        };
        if let Some(secs) = self.hang_secs {
            cfg.hang = Duration::from_secs(secs)..=Duration::from_secs(secs);
        }
        cfg
    }
}

/// A probability: a number from 0 to 1.
/// `--name-prefix`: refused unless every name the demo makes from it is a valid
/// lock name (else every acquisition would fail, forever).
fn name_prefix(s: &str) -> Result<String, String> {
    crate::cli::demo::check_prefix(s)
        .map(|()| s.to_string())
        .map_err(|e| e.to_string())
}

fn fraction(s: &str) -> Result<f64, String> {
    let f: f64 = s.trim().parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&f) {
        Ok(f)
    } else {
        Err(format!("{s} is not between 0 and 1"))
    }
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish (also elvish, powershell).
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write `lockscope.1` and one page per subcommand (`lockscope-get.1`, …)
    /// into this directory instead of printing `lockscope.1` to stdout.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

#[cfg(test)]
mod tests;
