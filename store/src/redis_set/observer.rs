//! Observes the locks of one Redis database (`SET key token NX PX ms`
//! strings and Redisson hashes, [`super::read`]): `SCAN` with the spec's
//! pattern (never `KEYS`), then the keys in pipelines, sent as a reset; then
//! keyspace notifications (`__keyspace@DB__:PATTERN`, and the Redisson fair
//! lock queues of PATTERN) to stay live, each notified key read again.
//!
//! Notifications: lockscope turns on the classes it needs (`K`, `g`, `$`,
//! `x`, `e`) with `CONFIG SET notify-keyspace-events`, keeping any already
//! on; where `CONFIG` is refused (a managed Redis, an ACL without it) and
//! they are not on already, the fleet is polled: a full scan every
//! [`POLL_EVERY`]. Notifications are lossy (a dropped subscriber connection,
//! a missed message), so a full scan reconciles every [`RESCAN_EVERY`] all
//! the same; it sends only what changed ([`super::shown`]: an unchanged
//! database emits no event), and says when it ran ([`crate::ObserverEvent::Looked`]:
//! the overview shows the fleet's last rescan or poll).
//! A lost connection reads as unreachable; on return the database is scanned
//! afresh. The liveness probe is a `PING` on the observer's connection
//! ([`crate::liveness`]).

use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use lockscope_model::polled::Look;
use redis::aio::MultiplexedConnection;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::read::{read_keys, scan_keys};
use super::shown::{Found, Shown};
use super::{found, redisson, timed, RedisTarget};
use crate::backoff::Backoff;
use crate::link::{run_observer, Link, Session};
use crate::liveness::{while_alive, Heartbeat, Probe};
use crate::{Observer, ObserverEvent, StoreError};

/// How often the whole pattern is scanned again while notifications flow.
pub const RESCAN_EVERY: Duration = Duration::from_secs(30);

/// How often the whole pattern is scanned when notifications cannot be had.
pub const POLL_EVERY: Duration = Duration::from_secs(1);

/// Keys asked per `SCAN` step (a hint to Redis), and per pipeline. Not a
/// bound on what is held (every key of the pattern is read, 1000 a
/// pipeline), so not a setting: a `SCAN` step costs Redis time in proportion
/// to COUNT, and 1000 keeps each step short and one pipeline's reply small.
const SCAN_COUNT: usize = 1000;

/// The notification classes read: keyspace (`K`), generic (`g`: del, expire,
/// rename), string (`$`: set), hash (`h`: Redisson's hincrby), list and
/// sorted set (`l`, `z`: a fair lock's queue), expired (`x`), evicted (`e`).
const NEEDED: &str = "Kg$hlzxe";

/// Watches one Redis database's SET NX locks (see the module docs).
pub struct RedisObserver {
    target: RedisTarget,
    /// Orders this observer's events and resets: bumped by every one.
    revision: i64,
    /// How often a full scan reconciles while notifications flow.
    rescan: Duration,
    beat: std::sync::Arc<Heartbeat>,
    /// What the hub was last told.
    shown: Shown,
}

impl RedisObserver {
    pub fn new(target: RedisTarget) -> RedisObserver {
        RedisObserver {
            target,
            revision: 0,
            rescan: RESCAN_EVERY,
            beat: Default::default(),
            shown: Shown::default(),
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
        let notified = enable_notifications(&mut con).await;
        // Subscribed before the scan, so no change after it goes unseen.
        let mut pubsub = self.target.pubsub().await?;
        let channel = format!("__keyspace@{}__:{}", self.target.db, self.target.pattern);
        if notified {
            timed(pubsub.psubscribe(&channel)).await?;
            // A fair lock's waiters come and go in its queue, a key the
            // pattern may not match.
            let queues = format!(
                "__keyspace@{}__:{}",
                self.target.db,
                redisson::queue_key(&self.target.pattern)
            );
            timed(pubsub.psubscribe(&queues)).await?;
        } else {
            info!(address = %self.target.address(), every = ?POLL_EVERY, "keyspace notifications are off and CONFIG is refused: the fleet is polled");
        }
        let every = if notified { self.rescan } else { POLL_EVERY };
        let prefix = format!("__keyspace@{}__:", self.target.db);
        let mut messages = pubsub.on_message();
        let mut rescan = tokio::time::interval(every);
        rescan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut first = true;
        loop {
            tokio::select! {
                _ = rescan.tick() => {
                    let locks = self.scan(&mut con).await?;
                    let sent = if first {
                        let revision = self.next_revision();
                        link.reset(self.shown.reset(locks, revision)).await
                    } else {
                        let names: Vec<String> = self.shown.names().cloned().collect();
                        let revision = &mut self.revision;
                        let events = self.shown.settle(names, locks, || { *revision += 1; *revision });
                        if events.is_empty() { Ok(()) } else { link.events(events).await }
                    };
                    first = false;
                    let how = if notified { Look::Rescanned } else { Look::Polled };
                    if sent.is_err() || link.live().await.is_err() || link.looked(every, how).await.is_err() {
                        return Ok(());
                    }
                }
                msg = messages.next() => {
                    let Some(msg) = msg else {
                        return Err(StoreError::unreachable_msg("redis: the notification connection closed"));
                    };
                    self.beat.saw();
                    let Some(key) = msg.get_channel_name().strip_prefix(prefix.as_str()) else { continue };
                    let name = redisson::lock_of_side_key(key).unwrap_or(key).to_string();
                    let now = self.read(&mut con, vec![name.clone()]).await?;
                    let revision = &mut self.revision;
                    let events = self.shown.settle([name], now, || { *revision += 1; *revision });
                    if !events.is_empty() && link.events(events).await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Every lock matching the pattern now.
    async fn scan(&mut self, con: &mut MultiplexedConnection) -> Result<Vec<Found>, StoreError> {
        let keys = scan_keys(con, &self.target.pattern, SCAN_COUNT).await?;
        self.beat.saw();
        let mut locks = Vec::new();
        for batch in keys.chunks(SCAN_COUNT) {
            locks.extend(self.read(con, batch.to_vec()).await?);
        }
        Ok(locks)
    }

    /// `keys` as locks (see [`read_keys`]).
    async fn read(&mut self, con: &mut MultiplexedConnection, keys: Vec<String>) -> Result<Vec<Found>, StoreError> {
        let read = read_keys(con, keys, Some(self.target.queue)).await?;
        self.beat.saw();
        Ok(read.into_iter().map(|r| found(r, self.next_revision())).collect())
    }
}

/// Whether keyspace notifications of the classes read are on (turned on
/// here where `CONFIG` is allowed).
pub(crate) async fn enable_notifications(con: &mut MultiplexedConnection) -> bool {
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
    let has = |c: char| flags.contains(c) || (flags.contains('A') && "g$lshzxetd".contains(c));
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
