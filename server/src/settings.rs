//! `lockscope.toml`: the fleet list, where the audit log lives, and who may do
//! what. Flags and environment variables override the file (see
//! `ServeArgs` in `cli/args.rs`); `docs/operations.md` documents every key.
//!
//! ```toml
//! listen = "0.0.0.0:3000"
//! audit = "postgres://lockscope@db/lockscope"
//!
//! [[fleets]]
//! name = "prod"
//! store = "etcd:http://10.0.0.5:2379"
//! unlocker = "on"          # off, dry-run (the default) or on
//!
//! [unlocker]
//! grace_secs = 15          # past auto_unlock_at, on this server's clock
//! lease_secs = 10          # the unlocker role's lease among replicas
//!
//! [history_exports]        # CSV/NDJSON exports of the lock history
//! per_identity = 2         # running at a time per identity (more: 429)
//! total = 8                # running at a time in all (more: 429)
//! idle_secs = 30           # a download whose client reads nothing this long is ended
//! connections = 2          # the exports' own database connections
//!
//! [[auth.tokens]]          # made by `lockscope token --name alice --role operator`
//! name = "alice"
//! id = "3f9a0c1e"
//! hash = "$argon2id$v=19$m=19456,t=2,p=1$…"
//! role = "operator"
//! scope = { prod = ["billing/"] }
//!
//! [auth.proxy]             # a reverse proxy that authenticates users itself
//! header = "X-Forwarded-User"
//! trusted = ["127.0.0.1"]
//!
//! [[auth.users]]           # roles of proxy users (others are viewers)
//! name = "bob@example.com"
//! role = "admin"
//!
//! [limits]                 # every key optional; these are the defaults
//! ws_per_identity = 64
//! ws_per_address = 64
//! ws_total = 1024
//! auth_failures_per_minute = 10
//! auth_sources = 10000
//! auth_verify_concurrency = 1
//! auth_verify_queue = 64
//! audit_sources_per_minute = 100
//! proxies = []
//! ```

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use lockscope_model::admin::Role;
use lockscope_model::unlock::Mode;
use serde::Deserialize;

/// The file as written. Unknown keys are errors, so a typo never silently
/// weakens the configuration.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    /// The audit log's (and sign-in sessions') database: `sqlite:PATH` or `postgres://…`.
    pub audit: Option<String>,
    /// The lock history's database (`sqlite:PATH`, `postgres://…` or `off`).
    pub history: Option<String>,
    pub history_days: Option<u64>,
    pub history_max_events: Option<u64>,
    /// `[history_exports]`: what exports of the history may take.
    pub history_exports: Option<HistoryExportsFile>,
    #[serde(default)]
    pub fleets: Vec<FileFleet>,
    pub auth: Option<AuthFile>,
    pub unlocker: Option<UnlockerFile>,
    /// `[limits]`: what one client (or all of them) can make the server hold.
    #[serde(default)]
    pub limits: Limits,
}

/// `[limits]`: the bounds on what clients can make the server hold, each with
/// the answer a client gets when it hits it (`docs/operations.md`, "Limits").
/// A source is a peer address (an IPv6 peer's /64).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Open websockets of one identity (its actor); one more is closed 1008.
    pub ws_per_identity: usize,
    /// Open websockets from one source; one more is closed 1008.
    pub ws_per_address: usize,
    /// Open websockets on this server; one more is closed 1013.
    pub ws_total: usize,
    /// Failed token checks a source may make in a minute; beyond, 429.
    pub auth_failures_per_minute: u32,
    /// Sources tracked at once for failed authentication; when full, the one
    /// whose minute started first is forgotten.
    pub auth_sources: usize,
    /// Token hashes (Argon2, ~19 MiB each) verified at once; others wait.
    pub auth_verify_concurrency: usize,
    /// Token checks that may wait for a hash at once (besides the ones
    /// running); one more is answered 503 with `Retry-After`.
    pub auth_verify_queue: usize,
    /// Sources whose attempts without an identity get audit rows of their
    /// own in a minute; the rest share one row.
    pub audit_sources_per_minute: usize,
    /// Reverse proxies in front of lockscope: for a request from one of these
    /// peers the source is the last address of its `X-Forwarded-For` (the
    /// client the proxy saw), not the proxy.
    pub proxies: Vec<IpAddr>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            ws_per_identity: 64,
            ws_per_address: 64,
            ws_total: 1024,
            auth_failures_per_minute: 10,
            auth_sources: 10_000,
            auth_verify_concurrency: 1,
            auth_verify_queue: 64,
            audit_sources_per_minute: 100,
            proxies: Vec::new(),
        }
    }
}

impl Limits {
    fn check(&self) -> Result<(), String> {
        for (key, value) in [
            ("ws_per_identity", self.ws_per_identity),
            ("ws_per_address", self.ws_per_address),
            ("ws_total", self.ws_total),
            ("auth_failures_per_minute", self.auth_failures_per_minute as usize),
            ("auth_sources", self.auth_sources),
            ("auth_verify_concurrency", self.auth_verify_concurrency),
            ("auth_verify_queue", self.auth_verify_queue),
            ("audit_sources_per_minute", self.audit_sources_per_minute),
        ] {
            if value == 0 {
                return Err(format!("[limits] {key} = 0 would refuse everyone: use at least 1"));
            }
        }
        Ok(())
    }
}

/// The limits of history exports (`[history_exports]` in `lockscope.toml`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportLimits {
    /// Running exports per identity (`per_identity`, default 2).
    pub per_identity: usize,
    /// Running exports in all (`total`, default 8).
    pub total: usize,
    /// A download whose client has taken nothing for this long is ended
    /// (`idle_secs`, default 30).
    pub idle: std::time::Duration,
    /// Connections of the exports' own pool (`connections`, default 2).
    pub connections: u32,
}

impl Default for ExportLimits {
    fn default() -> Self {
        ExportLimits {
            per_identity: 2,
            total: 8,
            idle: std::time::Duration::from_secs(30),
            connections: 2,
        }
    }
}

/// `[history_exports]`: limits of the history's CSV/NDJSON exports (see
/// [`ExportLimits`] for the defaults).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryExportsFile {
    /// Exports one identity may run at a time (default 2).
    pub per_identity: Option<usize>,
    /// Exports the server runs at a time (default 8).
    pub total: Option<usize>,
    /// Seconds a download's client may take nothing before it is ended (default 30).
    pub idle_secs: Option<u64>,
    /// Database connections of the exports' own pool (default 2).
    pub connections: Option<u32>,
}

/// The largest `[history_exports]` values accepted (past them a start error):
/// running, exports, idle seconds (a day), connections.
pub const HISTORY_EXPORTS_MAX: (usize, usize, u64, u32) = (1024, 1024, 86_400, 64);

impl HistoryExportsFile {
    /// The limits, defaults filled in (the file is checked when parsed).
    pub fn limits(&self) -> ExportLimits {
        let d = ExportLimits::default();
        ExportLimits {
            per_identity: self.per_identity.unwrap_or(d.per_identity).max(1),
            total: self.total.unwrap_or(d.total).max(1),
            idle: self
                .idle_secs
                .map_or(d.idle, |s| std::time::Duration::from_secs(s.max(1))),
            connections: self.connections.unwrap_or(d.connections).max(1),
        }
    }

    /// As `[limits]`: a 0 refuses to start (it would refuse every export, or
    /// end every download at once), and so does an absurdly large value.
    fn check(&self) -> Result<(), String> {
        let (per_identity, total, idle_secs, connections) = HISTORY_EXPORTS_MAX;
        for (key, value, max) in [
            ("per_identity", self.per_identity.map(|v| v as u64), per_identity as u64),
            ("total", self.total.map(|v| v as u64), total as u64),
            ("idle_secs", self.idle_secs, idle_secs),
            ("connections", self.connections.map(u64::from), u64::from(connections)),
        ] {
            match value {
                Some(0) => {
                    return Err(format!(
                        "[history_exports] {key} = 0 would refuse or end every export: use at least 1"
                    ))
                }
                Some(v) if v > max => return Err(format!("[history_exports] {key} = {v} is too large: at most {max}")),
                _ => {}
            }
        }
        Ok(())
    }
}

/// `[unlocker]`: settings shared by every fleet's unlocker.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnlockerFile {
    pub grace_secs: Option<u64>,
    pub lease_secs: Option<u64>,
    /// This replica's name (default HOST:PORT).
    pub replica: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileFleet {
    pub name: String,
    /// A store spec, as `--store NAME=STORE` takes it.
    pub store: String,
    /// The fleet's unlocker: `off`, `dry-run` (the default) or `on`.
    pub unlocker: Option<Mode>,
}

/// `[auth]`: when present, every request needs an identity.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthFile {
    #[serde(default)]
    pub tokens: Vec<TokenFile>,
    pub proxy: Option<ProxyFile>,
    #[serde(default)]
    pub users: Vec<UserFile>,
    /// How long a browser sign-in lasts (default 12).
    pub session_hours: Option<u64>,
    /// Mark cookies Secure even without `X-Forwarded-Proto: https` (TLS is
    /// terminated in front of lockscope).
    #[serde(default)]
    pub secure_cookies: bool,
}

/// An API token: its public id (the part before the `.`) and a password hash
/// of the whole token.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenFile {
    /// The actor the audit log names.
    pub name: String,
    pub id: String,
    /// PHC string (Argon2id).
    pub hash: String,
    /// Absent: viewer.
    pub role: Option<Role>,
    /// Fleet → lock-name prefixes; absent: every fleet and lock.
    #[serde(default)]
    pub scope: BTreeMap<String, Vec<String>>,
}

/// A reverse proxy that authenticates users and names them in a header.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyFile {
    pub header: String,
    /// Peer addresses whose header is believed; from anywhere else it is ignored.
    pub trusted: Vec<IpAddr>,
}

/// The role of a user the proxy names.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserFile {
    pub name: String,
    pub role: Option<Role>,
    #[serde(default)]
    pub scope: BTreeMap<String, Vec<String>>,
}

/// Why `lockscope.toml` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("reading {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not TOML, or a key or value the file may not have (which and why).
    #[error("{}: {why}", path.display())]
    Invalid { path: PathBuf, why: String },
}

/// The default file, read when present and `--config` names none.
pub const DEFAULT_PATH: &str = "lockscope.toml";

impl FileConfig {
    /// Reads `path`, or `lockscope.toml` if it exists, or nothing.
    pub fn load(path: Option<&Path>) -> Result<(FileConfig, Option<PathBuf>), SettingsError> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None if Path::new(DEFAULT_PATH).exists() => PathBuf::from(DEFAULT_PATH),
            None => return Ok((FileConfig::default(), None)),
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(source) => return Err(SettingsError::Read { path, source }),
        };
        let config = match FileConfig::parse(&text) {
            Ok(config) => config,
            Err(why) => return Err(SettingsError::Invalid { path, why }),
        };
        Ok((config, Some(path)))
    }

    pub fn parse(text: &str) -> Result<FileConfig, String> {
        let config: FileConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        if let Some(auth) = &config.auth {
            auth.check()?;
        }
        config.limits.check()?;
        if let Some(exports) = &config.history_exports {
            exports.check()?;
        }
        Ok(config)
    }
}

impl AuthFile {
    fn check(&self) -> Result<(), String> {
        let mut ids = std::collections::HashSet::new();
        for t in &self.tokens {
            if !ids.insert(t.id.as_str()) {
                return Err(format!("[[auth.tokens]]: two tokens have id {:?}", t.id));
            }
            if t.id.is_empty() || t.id.contains('.') {
                return Err(format!(
                    "[[auth.tokens]] {:?}: id must be non-empty, without '.'",
                    t.name
                ));
            }
            if !t.hash.starts_with("$argon2") {
                return Err(format!(
                    "[[auth.tokens]] {:?}: hash must be an Argon2 PHC string (made by `lockscope token`)",
                    t.name
                ));
            }
        }
        if self.tokens.is_empty() && self.proxy.is_none() {
            return Err("[auth] configures neither tokens nor a proxy: nobody could sign in".into());
        }
        if let Some(p) = &self.proxy {
            if p.trusted.is_empty() {
                return Err("[auth.proxy]: trusted lists no address, so the header would never be believed".into());
            }
            axum::http::HeaderName::try_from(p.header.as_str())
                .map_err(|e| format!("[auth.proxy] header {:?}: {e}", p.header))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
