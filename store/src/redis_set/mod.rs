//! Redis locks of one instance as a fleet: spec
//! `redis://[USER:PASSWORD@]HOST:PORT[/DB][?match=PATTERN&queue=N]`, or `rediss://…`
//! over TLS (`&ca=PEM`: the CA checking the server's certificate). Two layouts,
//! told apart by the key's type:
//! - `SET key token NX PX ms` (redis-py's `Lock`, redsync, node-redlock on
//!   one instance): a string key; its holder's token is the value;
//! - Redisson's `RLock` and fair lock ([`redisson`]): a hash whose field
//!   `<client uuid>:<thread id>` counts re-entries; the uuid is the holder's
//!   session, the fair lock's queue its waiters.
//!
//! Every key of database DB matching PATTERN (Redis glob, default `*`) is one
//! lock named by its key ([`observer`], [`read`]): its TTL left the key's
//! `PTTL`, its fencing token a stable value derived from the token (the
//! Redisson field) ([`fence_of`]: Redis keeps no revision). What a layout
//! does not keep is unknown, never invented. Keys of other types, and hashes
//! of another shape, are not these layouts and are not shown.
//!
//! Admin actions ([`RedisFleet`]): a guarded force-release runs the libraries'
//! own compare-and-delete script with the token the fence names (Redisson:
//! delete the hash only while it holds the field, then publish the unlock
//! message so waiters wake), so it deletes that holder's lock and nothing
//! written since; the holder's process is not told. Blacklisting is refused:
//! Redis has no sessions to end. The unlocker never acts here: these locks
//! end with their TTL.

pub(crate) mod observer;
pub(crate) mod read;
pub mod redisson;
pub(crate) mod shown;

pub use observer::{RedisObserver, POLL_EVERY, RESCAN_EVERY};

use std::time::Duration;

use futures::future::BoxFuture;
use lockscope_model::fleet::TokenKey;
use lockscope_model::record::BlacklistRecord;
use lockscope_model::{LockBody, LockEntry};

use crate::fleet::{FleetStore, Foreign, Leadership, Release, Removed, UnlockerInfo};
use crate::protocol::Blacklisting;
use crate::spec::StoreSpec;
use crate::{now_ms, Observer, StoreError};

/// How long one request (or a connect) may take before the store is taken
/// for unreachable.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The compare-and-delete the libraries unlock with (redis-py, redsync,
/// node-redlock): delete the key only while it holds the token.
pub const COMPARE_AND_DELETE: &str =
    r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#;

/// One Redis database to observe: what `redis://…` named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisTarget {
    /// `USER:PASSWORD` as written (URL-encoded), if any.
    userinfo: Option<String>,
    pub host: String,
    pub port: u16,
    pub db: u32,
    /// The keys observed (a Redis glob).
    pub pattern: String,
    /// `rediss://`: over TLS, the server's certificate checked against the
    /// system's roots, or against the CA at `ca=` only. Never unchecked.
    pub tls: Option<RedisTls>,
    /// The most waiters of a Redisson fair lock's queue read and shown per
    /// lock (`queue=`, default [`redisson::MAX_QUEUE`]).
    pub queue: usize,
}

/// How a `rediss://` fleet checks the server's certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisTls {
    /// A PEM file of the CA(s) that signed the server's certificate (`ca=`;
    /// `None`: the system's roots). Read at each connection.
    pub ca: Option<std::path::PathBuf>,
}

/// Parses `redis[s]://[USER:PASSWORD@]HOST:PORT[/DB][?match=PATTERN][&queue=N][&ca=PEM]`
/// (the whole spec); `ca=` only with `rediss://` (TLS); `queue=` from 1 to
/// [`redisson::QUEUE_CEILING`].
pub(crate) fn parse_spec(text: &str) -> Result<StoreSpec, String> {
    let (rest, mut tls) = match text.strip_prefix("rediss://") {
        Some(rest) => (rest, Some(RedisTls { ca: None })),
        None => (text.strip_prefix("redis://").ok_or("expected redis://…")?, None),
    };
    let (userinfo, after) = match rest.rsplit_once('@') {
        Some((u, a)) => (Some(u.to_string()).filter(|u| !u.is_empty()), a),
        None => (None, rest),
    };
    let (addr, query) = after.split_once('?').unwrap_or((after, ""));
    let (hostport, db) = addr.split_once('/').unwrap_or((addr, ""));
    let db: u32 = match db {
        "" => 0,
        d => d
            .parse()
            .map_err(|_| format!("the database after '/' is a number (0 to 2^32-1), not {d:?}"))?,
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>()
                .map_err(|_| format!("the port is a number from 1 to 65535, not {p:?}"))?,
        ),
        _ => return Err("redis://HOST:PORT needs the port".into()),
    };
    if host.is_empty() || port == 0 {
        return Err("redis://HOST:PORT needs a host and a port from 1 to 65535".into());
    }
    let mut pattern = "*".to_string();
    let mut queue = redisson::MAX_QUEUE;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("match", p)) if !p.is_empty() && !p.chars().any(char::is_control) => pattern = p.to_string(),
            Some(("match", _)) => {
                return Err("match= needs a key pattern (a Redis glob) without control characters".into())
            }
            Some(("queue", n)) => {
                queue = n
                    .parse()
                    .ok()
                    .filter(|n| (1..=redisson::QUEUE_CEILING).contains(n))
                    .ok_or_else(|| {
                        format!(
                            "queue= is how many fair-lock waiters are read per lock, from 1 to {}, not {n:?}",
                            redisson::QUEUE_CEILING
                        )
                    })?
            }
            Some(("ca", path)) => match &mut tls {
                Some(t) if path.starts_with('/') => t.ca = Some(path.into()),
                Some(_) => return Err(format!("ca= needs an absolute path to a PEM file, not {path:?}")),
                None => return Err("ca= is for rediss:// (TLS) only".into()),
            },
            _ => {
                return Err(format!(
                    "unknown option {:?} (only match=PATTERN, queue=N, and ca=PEM with rediss://)",
                    pair.split('=').next().unwrap_or("")
                ))
            }
        }
    }
    Ok(StoreSpec::Redis(RedisTarget {
        userinfo,
        host: host.to_string(),
        port,
        db,
        pattern,
        tls,
        queue,
    }))
}

impl RedisTarget {
    /// Where the locks live, for people: no password.
    pub fn source(&self) -> String {
        let user = self.user().map(|u| format!("{u}@")).unwrap_or_default();
        let ca = match &self.tls {
            Some(RedisTls { ca: Some(ca) }) => format!(" (TLS, CA {})", ca.display()),
            _ => String::new(),
        };
        format!(
            "Redis SET NX locks {}://{user}{}:{}/{} match {}{ca}",
            self.scheme(),
            self.host,
            self.port,
            self.db,
            self.pattern
        )
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        }
    }

    /// The user name, if the spec names one (never the password).
    pub(crate) fn user(&self) -> Option<&str> {
        self.userinfo
            .as_deref()
            .and_then(|u| u.split(':').next())
            .filter(|u| !u.is_empty())
    }

    /// `HOST:PORT`.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    fn client(&self) -> Result<redis::Client, StoreError> {
        let auth = self.userinfo.as_deref().map(|u| format!("{u}@")).unwrap_or_default();
        let url = format!("{}://{auth}{}:{}/{}", self.scheme(), self.host, self.port, self.db);
        let bad = |e: redis::RedisError| StoreError::Config(format!("{}: {e}", self.source()));
        match &self.tls {
            Some(RedisTls { ca: Some(ca) }) => {
                let pem = std::fs::read(ca).map_err(|e| {
                    StoreError::Config(format!("{}: reading the CA file {}: {e}", self.source(), ca.display()))
                })?;
                let certs = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                };
                redis::Client::build_with_tls(url, certs).map_err(bad)
            }
            _ => redis::Client::open(url).map_err(bad),
        }
    }

    /// A new multiplexed connection, within [`REQUEST_TIMEOUT`].
    pub(crate) async fn connect(&self) -> Result<redis::aio::MultiplexedConnection, StoreError> {
        let client = self.client()?;
        timed(client.get_multiplexed_async_connection()).await
    }

    /// A new connection for subscriptions.
    pub(crate) async fn pubsub(&self) -> Result<redis::aio::PubSub, StoreError> {
        let client = self.client()?;
        timed(client.get_async_pubsub()).await
    }
}

/// `fut` within [`REQUEST_TIMEOUT`], its error said as a store error.
pub(crate) async fn timed<T>(fut: impl std::future::Future<Output = redis::RedisResult<T>>) -> Result<T, StoreError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Ok(r) => r.map_err(store_error),
        Err(_) => Err(StoreError::Timeout(REQUEST_TIMEOUT)),
    }
}

/// A lost or refused connection is the store unreachable; anything else
/// (a refused command, bad credentials) a backend error. The source is kept.
pub(crate) fn store_error(e: redis::RedisError) -> StoreError {
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
        StoreError::unreachable("redis", e)
    } else {
        StoreError::backend("redis", e)
    }
}

/// The fencing token of a holder: FNV-1a (64-bit) of the token's bytes with
/// the top bit cleared, so a positive number that names one token: the same
/// token always gives the same fence, another token (all but certainly)
/// another (`docs/protocol.md`, "Redis SET NX").
pub fn fence_of(token: &[u8]) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in token {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h & (i64::MAX as u64)) as i64
}

/// Lock `name` as read: its token and `PTTL` (ms; `-1`: no expiry).
pub(crate) fn entry(name: String, token: &[u8], pttl: i64, revision: i64) -> LockEntry {
    LockEntry {
        name,
        fence: fence_of(token),
        revision,
        body: LockBody::Foreign {
            session: None,
            written_at: None,
            lease: None,
            proposal: None,
            key: Some(Box::new(TokenKey {
                token: String::from_utf8_lossy(token).into_owned(),
                ttl_ms: (pttl >= 0).then_some(pttl),
                read_at: now_ms(),
            })),
            detail: None,
        },
    }
}

/// A key as read, as the lock it is and the sessions waiting for it.
pub(crate) fn found(read: read::Read, revision: i64) -> shown::Found {
    match read {
        read::Read::Token { key, token, pttl } => (entry(key, &token, pttl, revision), Default::default()),
        read::Read::Redisson {
            key,
            field,
            count,
            pttl,
            queue,
            truncated,
        } => {
            // A truncated queue was cut to the fleet's `queue=`: its length.
            let cut = truncated.then_some(queue.len() as u32);
            let e = redisson::entry(key, &field, count, pttl, queue, cut, revision);
            let waiters = redisson::waiting_sessions(&e).into_iter().collect();
            (e, waiters)
        }
    }
}

/// The admin side of a `redis://` fleet (see the module docs).
pub struct RedisFleet {
    target: RedisTarget,
}

impl RedisFleet {
    pub(crate) fn new(target: RedisTarget) -> RedisFleet {
        RedisFleet { target }
    }

    /// Lock `name` now, and how it was read (`None`: no such key, or not a lock).
    async fn read(
        &self,
        con: &mut redis::aio::MultiplexedConnection,
        name: &str,
    ) -> Result<Option<(LockEntry, read::Read)>, StoreError> {
        crate::validate_name(name)?;
        let got = read::read_keys(con, vec![name.to_string()], Some(self.target.queue)).await?;
        Ok(got.into_iter().next().map(|r| (found(r.clone(), 0).0, r)))
    }
}

/// Why a Redis lock's holder cannot be blacklisted (said to whoever asks).
pub const NO_BLACKLIST: &str = "Redis has no sessions to end: a SET NX lock is a key and a token, and nothing \
     in Redis ties the token to a client that could be refused (release the lock instead)";

/// The admin actions these locks refuse like every foreign family's.
const FOREIGN: Foreign = Foreign {
    no_unlocker: "the unlocker never acts on Redis locks: they end with their TTL",
};

impl FleetStore for RedisFleet {
    fn source(&self) -> String {
        self.target.source()
    }

    fn address(&self) -> String {
        self.target.address()
    }

    fn writable(&self) -> bool {
        true
    }

    fn observer(&self) -> Box<dyn Observer> {
        Box::new(RedisObserver::new(self.target.clone()))
    }

    fn release<'a>(&'a self, name: &'a str, fence: i64) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(async move {
            let mut con = self.target.connect().await?;
            let Some((now, how)) = self.read(&mut con, name).await? else {
                return Ok(Release::NotHeld);
            };
            if now.fence != fence {
                return Ok(Release::Changed(now));
            }
            // The libraries' own unlock: deletes the key only while it still
            // holds the token (Redisson: the holder's field) this fence names.
            let script = match &how {
                read::Read::Token { token, .. } => redis::cmd("EVAL")
                    .arg(COMPARE_AND_DELETE)
                    .arg(1)
                    .arg(name)
                    .arg(token)
                    .clone(),
                read::Read::Redisson { field, .. } => redis::cmd("EVAL")
                    .arg(redisson::GUARDED_UNLOCK)
                    .arg(3)
                    .arg(name)
                    .arg(redisson::channel(name))
                    .arg(redisson::queue_key(name))
                    .arg(field)
                    .clone(),
            };
            let deleted: i64 = timed(script.query_async(&mut con)).await?;
            if deleted == 1 {
                return Ok(Release::Released(Removed { revision: None }));
            }
            Ok(match self.read(&mut con, name).await? {
                Some((now, _)) => Release::Changed(now),
                None => Release::NotHeld,
            })
        })
    }

    /// A Redis lock shows no owner: `owner` is not compared (the fence names
    /// the holder's token).
    fn release_seen<'a>(
        &'a self,
        name: &'a str,
        fence: i64,
        _owner: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        self.release(name, fence)
    }

    fn blacklist<'a>(&'a self, _: &'a BlacklistRecord) -> BoxFuture<'a, Result<Blacklisting, StoreError>> {
        Foreign::no_blacklist(NO_BLACKLIST)
    }

    /// Redis keeps no sessions: asking is already the refusal's reason.
    fn session_registered<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Foreign::no_blacklist(NO_BLACKLIST)
    }

    fn lift_blacklist<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        FOREIGN.lift_blacklist()
    }

    fn campaign<'a>(&'a self, _: &'a str, _: Duration) -> BoxFuture<'a, Result<Box<dyn Leadership>, StoreError>> {
        FOREIGN.campaign()
    }

    fn unlocker(&self) -> BoxFuture<'_, Result<Option<UnlockerInfo>, StoreError>> {
        FOREIGN.unlocker()
    }

    fn no_unlocker(&self) -> Option<&'static str> {
        FOREIGN.no_unlocker()
    }
}

#[cfg(test)]
mod tests;
