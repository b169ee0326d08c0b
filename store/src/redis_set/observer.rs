//! Observes the `SET key token NX PX ms` locks of one Redis database: `SCAN`
//! with the spec's pattern (never `KEYS`), `TYPE`, then `PTTL`/`GET` of the
//! string keys in pipelines, sent as a reset; then keyspace notifications
//! (`__keyspace@DB__:PATTERN`) to stay live, each notified key read again.
//!
//! Notifications: lockscope turns on the classes it needs (`K`, `g`, `$`,
//! `x`, `e`) with `CONFIG SET notify-keyspace-events`, keeping any already
//! on; where `CONFIG` is refused (a managed Redis, an ACL without it) and
//! they are not on already, the fleet is polled: a full scan every
//! [`POLL_EVERY`]. Notifications are lossy (a dropped subscriber connection,
//! a missed message), so a full scan reconciles every [`RESCAN_EVERY`] all
//! the same, sent as a reset (the hub's reducer keeps only the differences).
//! A lost connection reads as unreachable; on return the database is scanned
//! afresh. The liveness probe is a `PING` on the observer's connection
//! ([`crate::liveness`]).

use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use lockscope_model::{FleetEvent, LockEntry, Snapshot};
use redis::aio::MultiplexedConnection;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::{entry, timed, RedisTarget};
use crate::backoff::Backoff;
use crate::link::{run_observer, Link, Session};
use crate::liveness::{while_alive, Heartbeat, Probe};
use crate::{Observer, ObserverEvent, StoreError};

/// How often the whole pattern is scanned again while notifications flow.
pub const RESCAN_EVERY: Duration = Duration::from_secs(30);

/// How often the whole pattern is scanned when notifications cannot be had.
pub const POLL_EVERY: Duration = Duration::from_secs(1);

/// Keys asked per `SCAN` step (a hint to Redis), and per pipeline.
const SCAN_COUNT: usize = 1000;

/// The notification classes read: keyspace (`K`), generic (`g`: del, expire,
/// rename), string (`$`: set), expired (`x`), evicted (`e`).
const NEEDED: &str = "Kg$xe";

/// Watches one Redis database's SET NX locks (see the module docs).
pub struct RedisObserver {
    target: RedisTarget,
    /// Orders this observer's events and resets: bumped by every one.
    revision: i64,
    /// How often a full scan reconciles while notifications flow.
    rescan: Duration,
    beat: std::sync::Arc<Heartbeat>,
}

impl RedisObserver {
    pub fn new(target: RedisTarget) -> RedisObserver {
        RedisObserver {
            target,
            revision: 0,
            rescan: RESCAN_EVERY,
            beat: Default::default(),
        }
    }

    /// The same observer reconciling every `every` instead of [`RESCAN_EVERY`]
    /// (tests: a lost notification without waiting 30 s).
    pub fn rescan_every(mut self, every: Duration) -> RedisObserver {
        self.rescan = every;
        self
    }

    fn next_revision(&mut self) -> i64 {
        self.revision += 1;
        self.revision
    }
}

impl Observer for RedisObserver {
    fn run(self: Box<Self>, events: mpsc::Sender<ObserverEvent>) -> BoxFuture<'static, ()> {
        let link = Link::new(
            events,
            Backoff::new(Duration::from_millis(200), Duration::from_secs(5)),
            self.target.address(),
        );
        Box::pin(run_observer(link, "redis", *self))
    }
}

/// `PING` on the observer's own connection.
struct Ping(MultiplexedConnection);

impl Probe for Ping {
    fn probe(&mut self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let _: String = timed(redis::cmd("PING").query_async(&mut self.0)).await?;
            Ok(())
        })
    }
}

impl Session for RedisObserver {
    fn session<'a>(&'a mut self, link: &'a mut Link) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let con = self.target.connect().await?;
            let mut probe = Ping(con.clone());
            let beat = self.beat.clone();
            while_alive(self.observe(con, link), &mut probe, &beat).await
        })
    }
}

impl RedisObserver {
    /// One connection: subscribe, scan, then follow; `Ok` only when the hub is gone.
    async fn observe(&mut self, mut con: MultiplexedConnection, link: &mut Link) -> Result<(), StoreError> {
        let notified = self.enable_notifications(&mut con).await;
        // Subscribed before the scan, so no change after it goes unseen.
        let mut pubsub = self.target.pubsub().await?;
        let channel = format!("__keyspace@{}__:{}", self.target.db, self.target.pattern);
        if notified {
            timed(pubsub.psubscribe(&channel)).await?;
        } else {
            info!(address = %self.target.address(), every = ?POLL_EVERY, "keyspace notifications are off and CONFIG is refused: the fleet is polled");
        }
        let every = if notified { self.rescan } else { POLL_EVERY };
        let prefix = format!("__keyspace@{}__:", self.target.db);
        let mut messages = pubsub.on_message();
        let mut rescan = tokio::time::interval(every);
        rescan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = rescan.tick() => {
                    let locks = self.scan(&mut con).await?;
                    let snapshot = Snapshot { revision: self.next_revision(), locks, ..Snapshot::default() };
                    if link.reset(snapshot).await.is_err() {
                        return Ok(());
                    }
                    if link.live().await.is_err() {
                        return Ok(());
                    }
                }
                msg = messages.next() => {
                    let Some(msg) = msg else {
                        return Err(StoreError::unreachable_msg("redis: the notification connection closed"));
                    };
                    self.beat.saw();
                    let Some(key) = msg.get_channel_name().strip_prefix(prefix.as_str()) else { continue };
                    let event = self.read_key(&mut con, key).await?;
                    if link.events(vec![event]).await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Whether keyspace notifications of the classes read are on (turned on
    /// here where `CONFIG` is allowed).
    async fn enable_notifications(&mut self, con: &mut MultiplexedConnection) -> bool {
        let current: Result<Vec<String>, _> = timed(
            redis::cmd("CONFIG")
                .arg("GET")
                .arg("notify-keyspace-events")
                .query_async(con),
        )
        .await;
        let flags = match current {
            Ok(pair) => pair.get(1).cloned().unwrap_or_default(),
            Err(e) => {
                warn!(error = %e.describe(), "CONFIG GET notify-keyspace-events refused");
                return false;
            }
        };
        let has = |c: char| flags.contains(c) || (flags.contains('A') && "g$xe".contains(c));
        if NEEDED.chars().all(has) {
            return true;
        }
        let mut wanted = flags.clone();
        wanted.extend(NEEDED.chars().filter(|c| !has(*c)));
        let set: Result<(), _> = timed(
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("notify-keyspace-events")
                .arg(&wanted)
                .query_async(con),
        )
        .await;
        match set {
            Ok(()) => {
                info!(from = %flags, to = %wanted, "keyspace notifications turned on");
                true
            }
            Err(e) => {
                warn!(error = %e.describe(), "CONFIG SET notify-keyspace-events refused");
                false
            }
        }
    }

    /// Every lock matching the pattern now, by name.
    async fn scan(&mut self, con: &mut MultiplexedConnection) -> Result<Vec<LockEntry>, StoreError> {
        let mut locks = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = timed(
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&self.target.pattern)
                    .arg("COUNT")
                    .arg(SCAN_COUNT)
                    .query_async(con),
            )
            .await?;
            self.beat.saw();
            locks.extend(self.read_keys(con, keys).await?);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        locks.dedup_by(|a, b| a.name == b.name);
        Ok(locks)
    }

    /// `keys` as locks: `TYPE` of each, then `PTTL` and `GET` of the strings,
    /// each step one pipeline. A key gone or retyped in between is left out.
    async fn read_keys(
        &mut self,
        con: &mut MultiplexedConnection,
        keys: Vec<String>,
    ) -> Result<Vec<LockEntry>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut types = redis::pipe();
        for k in &keys {
            types.cmd("TYPE").arg(k);
        }
        let kinds: Vec<String> = timed(types.query_async(con)).await?;
        let strings: Vec<String> = keys
            .into_iter()
            .zip(kinds)
            .filter(|(_, t)| t == "string")
            .map(|(k, _)| k)
            .collect();
        if strings.is_empty() {
            return Ok(Vec::new());
        }
        let mut reads = redis::pipe();
        for k in &strings {
            reads.cmd("PTTL").arg(k).cmd("GET").arg(k);
        }
        let values: Vec<redis::Value> = timed(reads.query_async(con)).await?;
        self.beat.saw();
        let mut out = Vec::with_capacity(strings.len());
        for (key, pair) in strings.into_iter().zip(values.chunks(2)) {
            let (Some(redis::Value::Int(pttl)), Some(redis::Value::BulkString(token))) = (pair.first(), pair.get(1))
            else {
                continue;
            };
            if *pttl == -2 {
                continue;
            }
            let revision = self.next_revision();
            out.push(entry(key, token, *pttl, revision));
        }
        Ok(out)
    }

    /// What key `key` is now, as one event.
    async fn read_key(&mut self, con: &mut MultiplexedConnection, key: &str) -> Result<FleetEvent, StoreError> {
        let found = self.read_keys(con, vec![key.to_string()]).await?;
        Ok(match found.into_iter().next() {
            Some(e) => FleetEvent::Upsert(e),
            None => FleetEvent::Remove {
                name: key.to_string(),
                revision: self.next_revision(),
            },
        })
    }
}
