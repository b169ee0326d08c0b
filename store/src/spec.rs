//! A lock store as configured, parsed once, and what it opens.
//!
//! The one place that knows the store kinds: everything else holds a
//! [`FleetStore`] (the dashboard) or an [`AnyLocks`] (the client library, the
//! CLI, the demo fleet) and never matches on kinds.
//!
//! Forms (`lockscope --help` lists them too):
//! - `etcd:ENDPOINT[,ENDPOINT…][#PREFIX]` (prefix default `/lockscope/`);
//! - `sqlite:PATH` (created if missing) and `postgres://…` (`postgresql://…`):
//!   lockscope's own tables;
//! - `shedlock+postgres://…[#TABLE]`, `shedlock+sqlite:PATH[#TABLE]`: a
//!   ShedLock table, read-only (table default `shedlock`);
//! - `scylla:HOST[:PORT][,HOST…][/KEYSPACE][?dc=DC&serial=local&user=USER&password_file=PATH&tls_ca=PEM&scan_ms=MS]`:
//!   a ScyllaDB or Cassandra cluster (keyspace default `lockscope`; the
//!   password of `user` from `password_file` or `LOCKSCOPE_SCYLLA_PASSWORD`);
//! - `scylla-memory:NAME[?schema=published]`: an in-memory CQL keyspace of
//!   this process (tests and demos);
//! - `etcd-mutex:ENDPOINT[,ENDPOINT…]#PREFIX`: etcd's native mutexes and
//!   elections under PREFIX (taken byte for byte, required), read and
//!   guarded-released ([`crate::etcd_mutex`]);
//! - `advisory+postgres://…[#OPTIONS]`: PostgreSQL advisory locks of that
//!   database, polled, the holder's backend terminated by a guarded release
//!   ([`crate::pg_advisory`]; OPTIONS `poll=1s&limit=10000&idle=300s&
//!   poolers=pgbouncer,…&names=TABLE&name.KEY=NAME&hashtext=NAME,…`, each
//!   optional: see [`crate::pg_advisory::AdvisoryTarget`]'s module);
//! - `redis://[USER:PASSWORD@]HOST:PORT[/DB][?match=PATTERN&queue=N]`: Redis `SET NX PX`
//!   locks and Redisson `RLock`/fair-lock hashes, read and guarded-released
//!   ([`crate::redis_set`]; `rediss://…[&ca=PEM]` over TLS);
//! - `redlock+redis://[USER:PASSWORD@]HOST:PORT,HOST:PORT,…[/DB][?match=PATTERN]`:
//!   Redlock over several masters ([`crate::redlock`]);
//! - `zk://HOST:PORT[,HOST:PORT…]/ROOT`: ZooKeeper lock recipes (kazoo,
//!   Curator, the documented recipe) below ROOT, read and guarded-released
//!   ([`crate::zookeeper`]).

use std::sync::Arc;
use std::time::Duration;

use lockscope_model::record::{BlacklistRecord, SessionRecord};
use lockscope_model::{LockEntry, LockRecord};

use crate::etcd::{EtcdConfig, EtcdLocks, EtcdObserver};
use crate::fleet::{FleetStore, Leadership, ReadOnlyFleet, Removed, UnlockerInfo, WritableFleet};
use crate::protocol::{Attempt, Blacklisting, Extend, LockStore, SessionLease, WaitFrom};
use crate::scylla::{ScyllaLocks, ScyllaObserver, ScyllaTarget};
use crate::sql::{ShedLockObserver, SqlLocks, SqlObserver};
use crate::{Observer, StoreError};

/// The etcd key prefix when a spec names none.
pub const DEFAULT_ETCD_PREFIX: &str = "/lockscope/";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreSpec {
    Etcd {
        endpoints: Vec<String>,
        /// `None`: the caller's default ([`StoreSpec::with_default_prefix`]).
        prefix: Option<String>,
    },
    /// lockscope's own tables (`sqlite://…?mode=rwc` or `postgres://…`).
    Sql { url: String },
    /// A ShedLock table, read-only.
    ShedLock { url: String, table: String },
    /// ScyllaDB / Cassandra (or its in-memory emulation).
    Scylla(ScyllaTarget),
    /// etcd's native mutexes (`etcdctl lock`, `concurrency.Mutex`) and
    /// elections under `prefix` ([`crate::etcd_mutex`]).
    EtcdMutex { endpoints: Vec<String>, prefix: String },
    /// Redis `SET key token NX PX ms` locks ([`crate::redis_set`]).
    Redis(crate::redis_set::RedisTarget),
    /// Redlock over several Redis masters ([`crate::redlock`]).
    Redlock(crate::redlock::RedlockTarget),
    /// PostgreSQL advisory locks of one database ([`crate::pg_advisory`]).
    PgAdvisory(crate::pg_advisory::AdvisoryTarget),
    /// ZooKeeper lock recipes below a root znode ([`crate::zookeeper`]).
    Zookeeper(crate::zookeeper::ZkTarget),
}

impl StoreSpec {
    /// Parses one of the forms in the module docs; a mistake is a
    /// [`StoreError::Config`] that says which form was meant.
    pub fn parse(text: &str) -> Result<StoreSpec, StoreError> {
        let text = text.trim();
        let bad = |why: &str| Err(StoreError::Config(format!("store {:?}: {why}", redact(text))));
        if let Some(rest) = text.strip_prefix("etcd-mutex:") {
            crate::etcd_mutex::parse_spec(rest)
                .map_err(|why| StoreError::Config(format!("store {:?}: {why}", redact(text))))
        } else if text.starts_with("zk://") {
            crate::zookeeper::parse_spec(text)
                .map_err(|why| StoreError::Config(format!("store {:?}: {why}", redact(text))))
        } else if let Some(rest) = text.strip_prefix("advisory+") {
            crate::pg_advisory::parse_spec(rest)
                .map_err(|why| StoreError::Config(format!("store {:?}: {why}", redact(text))))
        } else if text.starts_with("redlock+") {
            crate::redlock::parse_spec(text)
                .map_err(|why| StoreError::Config(format!("store {:?}: {why}", redact(text))))
        } else if text.starts_with("redis://") || text.starts_with("rediss://") {
            crate::redis_set::parse_spec(text)
                .map_err(|why| StoreError::Config(format!("store {:?}: {why}", redact(text))))
        } else if let Some(rest) = text.strip_prefix("etcd:") {
            let (endpoints, prefix) = match rest.split_once('#') {
                Some((e, p)) => (e, Some(p.to_string())),
                None => (rest, None),
            };
            let endpoints: Vec<String> = endpoints
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_string)
                .collect();
            if endpoints.is_empty() {
                return bad("etcd needs at least one endpoint");
            }
            if prefix.as_deref() == Some("") {
                return bad("an empty etcd prefix after '#'");
            }
            Ok(StoreSpec::Etcd { endpoints, prefix })
        } else if let Some(rest) = text.strip_prefix("shedlock+") {
            let (url, table) = match rest.split_once('#') {
                Some((u, t)) => (u, t.to_string()),
                None => (rest, ShedLockObserver::DEFAULT_TABLE.to_string()),
            };
            let url = match url.strip_prefix("sqlite:") {
                // Read-only: no `mode=rwc`, a missing file is an error, not a new database.
                Some(path) => format!("sqlite://{}", path.trim_start_matches("//")),
                None if is_postgres(url) => url.to_string(),
                None => return bad("ShedLock is read from shedlock+postgres://… or shedlock+sqlite:PATH"),
            };
            crate::sql::validate_table(&table)?;
            Ok(StoreSpec::ShedLock { url, table })
        } else if let Some(rest) = text.strip_prefix("scylla-memory:") {
            let (name, query) = rest.split_once('?').unwrap_or((rest, ""));
            let published = match query {
                "" => false,
                "schema=published" => true,
                _ => return bad("scylla-memory:NAME takes only ?schema=published"),
            };
            if name.is_empty() {
                return bad("scylla-memory: needs a name");
            }
            Ok(StoreSpec::Scylla(ScyllaTarget::Memory {
                name: name.to_string(),
                published,
            }))
        } else if let Some(rest) = text.strip_prefix("scylla:") {
            scylla::parse_scylla(rest.trim_start_matches("//"))
                .map_err(|why| StoreError::Config(format!("store {:?}: {why}", redact(text))))
        } else if let Some(path) = text.strip_prefix("sqlite:") {
            let path = path.trim_start_matches("//");
            if path.is_empty() {
                return bad("sqlite: needs a file path");
            }
            Ok(StoreSpec::Sql {
                url: format!("sqlite://{path}?mode=rwc"),
            })
        } else if is_postgres(text) {
            Ok(StoreSpec::Sql { url: text.to_string() })
        } else {
            bad("expected etcd:…, etcd-mutex:…#PREFIX, sqlite:PATH, postgres://…, redis://…, redlock+redis://…, zk://…/ROOT, scylla:… or shedlock+…")
        }
    }

    /// lockscope's tables in a SQLite file (the embedded default).
    pub fn sqlite_file(path: &std::path::Path) -> StoreSpec {
        StoreSpec::Sql {
            url: format!("sqlite://{}?mode=rwc", path.display()),
        }
    }

    /// An etcd spec without a prefix of its own gets `prefix`.
    pub fn with_default_prefix(self, prefix: &str) -> StoreSpec {
        match self {
            StoreSpec::Etcd {
                endpoints,
                prefix: None,
            } => StoreSpec::Etcd {
                endpoints,
                prefix: Some(prefix.to_string()),
            },
            other => other,
        }
    }

    /// Where the locks live, for people: no credentials.
    pub fn source(&self) -> String {
        match self {
            StoreSpec::Etcd { endpoints, prefix } => {
                let prefix = prefix.as_deref().unwrap_or(DEFAULT_ETCD_PREFIX);
                format!("etcd {} {prefix}", endpoints.join(","))
            }
            StoreSpec::Sql { url } => redact(url),
            StoreSpec::ShedLock { url, table } => format!("ShedLock table {table} in {}", redact(url)),
            StoreSpec::Scylla(target) => target.source(),
            StoreSpec::EtcdMutex { endpoints, prefix } => crate::etcd_mutex::source(endpoints, prefix),
            StoreSpec::Redis(target) => target.source(),
            StoreSpec::Redlock(target) => target.source(),
            StoreSpec::PgAdvisory(target) => target.source(),
            StoreSpec::Zookeeper(target) => target.source(),
        }
    }

    /// What the store's client connects to, for people (no credentials): an
    /// etcd endpoint, a PostgreSQL `host:port/database`, a SQLite file, ScyllaDB
    /// contact points ([`crate::summary`]).
    pub fn address(&self) -> String {
        match self {
            StoreSpec::Etcd { endpoints, .. } | StoreSpec::EtcdMutex { endpoints, .. } => {
                crate::summary::address_of_endpoints(endpoints)
            }
            StoreSpec::Sql { url } | StoreSpec::ShedLock { url, .. } => crate::summary::address_of_url(url),
            StoreSpec::PgAdvisory(target) => crate::summary::address_of_url(&target.url),
            StoreSpec::Scylla(target) => crate::summary::address_of_scylla(target),
            StoreSpec::Redis(target) => target.address(),
            StoreSpec::Redlock(target) => target.address(),
            StoreSpec::Zookeeper(target) => target.address(),
        }
    }

    /// Whether lockscope may write to this store (ShedLock tables it only reads).
    pub fn writable(&self) -> bool {
        !matches!(self, StoreSpec::ShedLock { .. })
    }

    /// The per-fleet handle: observer and admin side. Connects lazily: an
    /// unreachable store is reported by its observer, not refused here; a spec
    /// that cannot be observed (built by hand rather than parsed) is refused.
    pub fn open(&self) -> Result<Arc<dyn FleetStore>, StoreError> {
        self.try_observer()?;
        if let StoreSpec::EtcdMutex { endpoints, prefix } = self {
            return Ok(Arc::new(crate::etcd_mutex::MutexFleet::new(endpoints.clone(), prefix)));
        }
        if let StoreSpec::PgAdvisory(target) = self {
            return Ok(Arc::new(crate::pg_advisory::PgAdvisoryFleet::new(target.clone())));
        }
        if let StoreSpec::Redis(target) = self {
            return Ok(Arc::new(crate::redis_set::RedisFleet::new(target.clone())));
        }
        if let StoreSpec::Redlock(target) = self {
            return Ok(Arc::new(crate::redlock::RedlockFleet::new(target.clone())));
        }
        if let StoreSpec::Zookeeper(target) = self {
            return Ok(Arc::new(crate::zookeeper::ZkFleet::new(target.clone())));
        }
        Ok(match self.writable() {
            true => Arc::new(WritableFleet::new(self.clone())),
            false => Arc::new(ReadOnlyFleet::new(self.clone())),
        })
    }

    /// A new observer of this store (of a spec [`StoreSpec::open`] accepted).
    pub(crate) fn observer(&self) -> Box<dyn Observer> {
        self.try_observer()
            .expect("StoreSpec::open checked that this spec can be observed, and a fleet's spec does not change")
    }

    fn try_observer(&self) -> Result<Box<dyn Observer>, StoreError> {
        Ok(match self {
            StoreSpec::Etcd { .. } => Box::new(EtcdObserver::new(self.etcd_config())),
            // A SQLite file can be held by another writer while it reads fine:
            // the page says when writes are blocked (crate::sql::WriteWatch).
            StoreSpec::Sql { url } if url.starts_with("sqlite:") => {
                Box::new(crate::sql::WriteWatch::new(Box::new(SqlObserver::new(url)), url))
            }
            StoreSpec::Sql { url } => Box::new(SqlObserver::new(url)),
            StoreSpec::ShedLock { url, table } => Box::new(ShedLockObserver::new(url, Some(table))?),
            StoreSpec::Scylla(target) => Box::new(ScyllaObserver::new(target.clone())),
            StoreSpec::EtcdMutex { endpoints, prefix } => {
                Box::new(crate::etcd_mutex::MutexObserver::new(endpoints.clone(), prefix))
            }
            StoreSpec::Redis(target) => Box::new(crate::redis_set::RedisObserver::new(target.clone())),
            StoreSpec::Redlock(target) => Box::new(crate::redlock::RedlockObserver::new(target.clone())),
            StoreSpec::PgAdvisory(target) => Box::new(crate::pg_advisory::AdvisoryObserver::new(target.clone())),
            StoreSpec::Zookeeper(target) => Box::new(crate::zookeeper::ZkObserver::new(target.clone())),
        })
    }

    /// Connects a lock store for the client library (applying SQL migrations).
    pub async fn connect(&self) -> Result<AnyLocks, StoreError> {
        match self {
            StoreSpec::Etcd { .. } => Ok(AnyLocks::Etcd(Box::new(EtcdLocks::connect(self.etcd_config()).await?))),
            StoreSpec::Sql { url } => {
                create_sqlite_dir(url)?;
                Ok(AnyLocks::Sql(SqlLocks::connect(url).await?))
            }
            StoreSpec::ShedLock { .. } => Err(StoreError::ReadOnly { store: self.source() }),
            StoreSpec::EtcdMutex { .. }
            | StoreSpec::Redis(_)
            | StoreSpec::Redlock(_)
            | StoreSpec::PgAdvisory(_)
            | StoreSpec::Zookeeper(_) => Err(StoreError::Config(format!(
                "{} holds another library's locks, not lockscope's layout: a lockscope client cannot use it",
                self.source()
            ))),
            StoreSpec::Scylla(target) => Ok(AnyLocks::Scylla(target.connect(true).await?)),
        }
    }

    /// Connects the dashboard's admin side: as [`Self::connect`], but it never
    /// changes a store's schema (a ScyllaDB keyspace with only the published
    /// tables is administered as it is), and a SQLite write gives up after
    /// [`crate::sql::ADMIN_BUSY_TIMEOUT`] ([`StoreError::Busy`]).
    pub(crate) async fn connect_admin(&self) -> Result<AnyLocks, StoreError> {
        match self {
            StoreSpec::Scylla(target) => Ok(AnyLocks::Scylla(target.connect(false).await?)),
            StoreSpec::Sql { url } => {
                create_sqlite_dir(url)?;
                Ok(AnyLocks::Sql(SqlLocks::connect_admin(url).await?))
            }
            _ => self.connect().await,
        }
    }

    fn etcd_config(&self) -> EtcdConfig {
        match self {
            StoreSpec::Etcd { endpoints, prefix } => {
                EtcdConfig::new(endpoints.clone(), prefix.as_deref().unwrap_or(DEFAULT_ETCD_PREFIX))
            }
            _ => unreachable!("only called on etcd specs"),
        }
    }
}

/// A `sqlite://PATH` store's directory, created if missing (`mode=rwc`
/// creates the file, not its directory).
fn create_sqlite_dir(url: &str) -> Result<(), StoreError> {
    if let Some(path) = url.strip_prefix("sqlite://").and_then(|p| p.split('?').next()) {
        let dir = std::path::Path::new(path)
            .parent()
            .filter(|d| !d.as_os_str().is_empty());
        if let Some(dir) = dir {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::backend(format!("creating {}", dir.display()), e))?;
        }
    }
    Ok(())
}

fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// `scheme://user:secret@host/…?opts` → `scheme://user@host/…`: what may be
/// shown and logged. Everything before the last `@` is taken for credentials
/// (a password may hold an unencoded `?`, `/` or `#`); only the user name before
/// its first `:` is kept. Hiding too much is safe, showing a secret is not.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.split('?').next().unwrap_or(url).to_string();
    };
    let (user, host) = credentials(rest);
    let host = host.split('?').next().unwrap_or(host);
    match user {
        Some(user) => format!("{scheme}://{user}@{host}"),
        None => format!("{scheme}://{host}"),
    }
}

/// `user:secret@host…` (a URL after its `://`) → the user name, if any, and
/// what follows the last `@`. A user name is not shown when what precedes the
/// `@` holds a path or query (`h/db?password=…@x` is no user name).
pub(crate) fn credentials(rest: &str) -> (Option<&str>, &str) {
    match rest.rsplit_once('@') {
        Some((userinfo, after)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            (Some(user).filter(|u| !u.contains(['/', '?', '#'])), after)
        }
        None => (None, rest),
    }
}

/// A lock store of any writable kind, for code written once over
/// [`LockStore`] that is handed a store at run time (the CLI, the demo fleet).
#[derive(Clone)]
pub enum AnyLocks {
    /// Boxed: an etcd client is several KiB, a pool a pointer.
    Etcd(Box<EtcdLocks>),
    Sql(SqlLocks),
    Scylla(ScyllaLocks),
}

impl AnyLocks {
    /// Writes raw bytes as lock `name`'s value, bypassing the protocol (tests and
    /// demos of malformed records; SQL stores the bytes as text).
    pub async fn put_raw(&self, name: &str, value: &[u8]) -> Result<(), StoreError> {
        match self {
            AnyLocks::Etcd(s) => s.put_raw(name, value).await.map(|_| ()),
            AnyLocks::Sql(s) => s.put_raw(name, value).await,
            AnyLocks::Scylla(s) => s.put_raw(name, value).await,
        }
    }

    /// [`LockStore::release`], saying what the store removed (`None`: nothing).
    pub async fn release_removing(&self, name: &str, fence: i64) -> Result<Option<Removed>, StoreError> {
        match self {
            AnyLocks::Etcd(s) => s.release_removing(name, fence).await,
            AnyLocks::Sql(s) => s.release_removing(name, fence).await,
            // A lightweight transaction returns no revision.
            AnyLocks::Scylla(s) => Ok(s.release(name, fence).await?.then_some(Removed { revision: None })),
        }
    }

    /// Campaigns for the fleet's unlocker role (see [`FleetStore::campaign`]).
    pub async fn campaign(&self, candidate: &str, ttl: Duration) -> Result<Box<dyn Leadership>, StoreError> {
        Ok(match self {
            AnyLocks::Etcd(s) => Box::new(s.campaign(candidate, ttl).await?),
            AnyLocks::Sql(s) => Box::new(s.campaign(candidate, ttl).await?),
            AnyLocks::Scylla(s) => Box::new(s.campaign(candidate, ttl).await?),
        })
    }

    /// Who holds the fleet's unlocker role now (see [`FleetStore::unlocker`]).
    pub async fn unlocker(&self) -> Result<Option<UnlockerInfo>, StoreError> {
        match self {
            AnyLocks::Etcd(s) => s.unlocker().await,
            AnyLocks::Sql(s) => s.unlocker().await,
            AnyLocks::Scylla(s) => s.unlocker().await,
        }
    }
}

/// Calls the same method on whichever store this is.
macro_rules! either {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            AnyLocks::Etcd($s) => $call.await,
            AnyLocks::Sql($s) => $call.await,
            AnyLocks::Scylla($s) => $call.await,
        }
    };
}

impl LockStore for AnyLocks {
    async fn open_session(&self, session: &SessionRecord, ttl: Duration) -> Result<SessionLease, StoreError> {
        either!(self, s => s.open_session(session, ttl))
    }

    async fn session_heartbeat(&self, lease: SessionLease, session: &SessionRecord) -> Result<(), StoreError> {
        either!(self, s => s.session_heartbeat(lease, session))
    }

    async fn close_session(&self, lease: SessionLease, session: &str) -> Result<(), StoreError> {
        either!(self, s => s.close_session(lease, session))
    }

    async fn try_acquire(&self, name: &str, record: &LockRecord) -> Result<Attempt, StoreError> {
        either!(self, s => s.try_acquire(name, record))
    }

    async fn extend(&self, name: &str, fence: i64, record: &LockRecord) -> Result<Extend, StoreError> {
        either!(self, s => s.extend(name, fence, record))
    }

    async fn release(&self, name: &str, fence: i64) -> Result<bool, StoreError> {
        either!(self, s => s.release(name, fence))
    }

    async fn set_waiting(
        &self,
        lease: SessionLease,
        session: &str,
        name: &str,
        waiting: bool,
    ) -> Result<(), StoreError> {
        either!(self, s => s.set_waiting(lease, session, name, waiting))
    }

    async fn wait_released(&self, name: &str, from: WaitFrom, max: Duration) -> Result<(), StoreError> {
        either!(self, s => s.wait_released(name, from, max))
    }

    async fn blacklist(&self, entry: &BlacklistRecord) -> Result<Blacklisting, StoreError> {
        either!(self, s => s.blacklist(entry))
    }

    async fn session_registered(&self, session: &str) -> Result<bool, StoreError> {
        either!(self, s => s.session_registered(session))
    }

    async fn lift_blacklist(&self, session: &str) -> Result<bool, StoreError> {
        either!(self, s => s.lift_blacklist(session))
    }

    async fn get(&self, name: &str) -> Result<Option<LockEntry>, StoreError> {
        either!(self, s => s.get(name))
    }
}

mod scylla;
#[cfg(test)]
mod tests;
