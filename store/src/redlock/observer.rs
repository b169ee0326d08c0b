//! Observes one Redlock deployment: every master is scanned as a `redis://`
//! fleet is ([`crate::redis_set::read`], strings only), followed by its
//! keyspace notifications, and each key is [`super::combine`]d over the
//! masters. A master that stops answering (its notification connection ends,
//! a read fails or times out) is shown unreachable in every lock's per-master
//! state (its locks then read "2 of 3") and retried every [`RETRY_EVERY`];
//! the fleet is unreachable only when no master answers. A full rescan
//! reconciles every [`crate::redis_set::RESCAN_EVERY`] (every
//! [`crate::redis_set::POLL_EVERY`] when a master refuses notifications or
//! is down), sending only what changed ([`crate::redis_set::shown`]) and
//! saying when it ran ([`crate::ObserverEvent::Looked`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{BoxStream, FuturesUnordered, SelectAll};
use futures::StreamExt;
use lockscope_model::polled::Look;
use redis::aio::MultiplexedConnection;
use tokio::sync::mpsc;

use super::{combine, master_read, MasterRead, RedlockTarget};
use crate::backoff::Backoff;
use crate::link::{run_observer, Link, Session};
use crate::redis_set::observer::enable_notifications;
use crate::redis_set::read::{read_keys, scan_keys};
use crate::redis_set::shown::{Found, Shown};
use crate::redis_set::{POLL_EVERY, RESCAN_EVERY};
use crate::{Observer, ObserverEvent, StoreError};

/// How often a master that stopped answering is tried again.
pub const RETRY_EVERY: Duration = Duration::from_secs(1);

/// Keys asked per `SCAN` step and per pipeline.
const SCAN_COUNT: usize = 1000;

/// Watches one Redlock deployment (see the module docs).
pub struct RedlockObserver {
    target: RedlockTarget,
    revision: i64,
    rescan: Duration,
    shown: Shown,
}

/// A master's notification: `(master, connection, Some(key))`, or `(master,
/// connection, None)` when that notification connection ended (the
/// connection's number tells an old connection's end from the current one's).
type Note = (usize, u64, Option<String>);

/// A master connected: its connection and notifications (`None`: polled).
type Connected = (MultiplexedConnection, Option<BoxStream<'static, Note>>);

impl RedlockObserver {
    pub fn new(target: RedlockTarget) -> RedlockObserver {
        RedlockObserver {
            target,
            revision: 0,
            rescan: RESCAN_EVERY,
            shown: Shown::default(),
        }
    }

    /// The same observer reconciling every `every` (tests).
    pub fn rescan_every(mut self, every: Duration) -> RedlockObserver {
        self.rescan = every;
        self
    }

    fn next_revision(&mut self) -> i64 {
        self.revision += 1;
        self.revision
    }
}

impl Observer for RedlockObserver {
    fn run(self: Box<Self>, events: mpsc::Sender<ObserverEvent>) -> BoxFuture<'static, ()> {
        let link = Link::new(
            events,
            Backoff::new(Duration::from_millis(200), Duration::from_secs(5)),
            self.target.address(),
        );
        Box::pin(run_observer(link, "redis", *self))
    }
}

impl Session for RedlockObserver {
    fn session<'a>(&'a mut self, link: &'a mut Link) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.observe(link))
    }
}

/// Connects master `i`: its connection, and its notifications as a stream
/// (`None`: notifications refused, so it is polled).
async fn connect(target: crate::redis_set::RedisTarget, i: usize, generation: u64) -> Result<Connected, StoreError> {
    let mut con = target.connect().await?;
    if !enable_notifications(&mut con).await {
        return Ok((con, None));
    }
    let mut pubsub = target.pubsub().await?;
    crate::redis_set::timed(pubsub.psubscribe(format!("__keyspace@{}__:{}", target.db, target.pattern))).await?;
    let prefix = format!("__keyspace@{}__:", target.db);
    let notes = pubsub
        .into_on_message()
        .map(move |m| {
            (
                i,
                generation,
                m.get_channel_name().strip_prefix(prefix.as_str()).map(str::to_string),
            )
        })
        .chain(futures::stream::once(async move { (i, generation, None) }));
    Ok((con, Some(notes.boxed())))
}

/// Master `i` connected: its connection kept, its notifications followed
/// (or it is polled).
fn attach(
    i: usize,
    (con, stream): Connected,
    cons: &mut [Option<MultiplexedConnection>],
    notes: &mut SelectAll<BoxStream<'static, Note>>,
    polled: &mut BTreeSet<usize>,
) {
    cons[i] = Some(con);
    match stream {
        Some(s) => {
            polled.remove(&i);
            notes.push(s);
        }
        None => {
            polled.insert(i);
        }
    }
}

impl RedlockObserver {
    async fn observe(&mut self, link: &mut Link) -> Result<(), StoreError> {
        let n = self.target.masters.len();
        let mut cons: Vec<Option<MultiplexedConnection>> = vec![None; n];
        let mut notes: SelectAll<BoxStream<'static, Note>> = SelectAll::new();
        let mut polled = BTreeSet::new();
        // Each master's current connection number.
        let mut generation = vec![0u64; n];
        let mut last_error = None;
        let first_tries = (0..n).map(|i| connect(self.target.masters[i].clone(), i, 0));
        for (i, tried) in futures::future::join_all(first_tries).await.into_iter().enumerate() {
            match tried {
                Ok(connected) => attach(i, connected, &mut cons, &mut notes, &mut polled),
                Err(e) => last_error = Some(e),
            }
        }
        if cons.iter().all(Option::is_none) {
            return Err(last_error.unwrap_or_else(|| StoreError::unreachable_msg("redis: no Redlock master answered")));
        }
        // Masters being connected again, in the background: a master that
        // does not answer never holds the others' notifications back.
        let mut connecting: FuturesUnordered<BoxFuture<'static, (usize, Result<Connected, StoreError>)>> =
            FuturesUnordered::new();
        let mut trying = BTreeSet::new();
        let mut rescan = tokio::time::interval(self.rescan.min(POLL_EVERY));
        rescan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut retry = tokio::time::interval(RETRY_EVERY);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_scan: Option<tokio::time::Instant> = None;
        let mut first = true;
        loop {
            // A full scan at start, every rescan period, and every poll while
            // a master is down or unnotified.
            let notified = polled.is_empty() && cons.iter().all(Option::is_some);
            let (every, how) = if notified {
                (self.rescan, Look::Rescanned)
            } else {
                (POLL_EVERY.min(self.rescan), Look::Polled)
            };
            tokio::select! {
                _ = rescan.tick() => {
                    if last_scan.is_some_and(|t| t.elapsed() < every) {
                        continue;
                    }
                    last_scan = Some(tokio::time::Instant::now());
                    let found = self.scan(&mut cons).await?;
                    let sent = if first {
                        let revision = self.next_revision();
                        link.reset(self.shown.reset(found, revision)).await
                    } else {
                        let names: Vec<String> = self.shown.names().cloned().collect();
                        self.send(link, names, found).await
                    };
                    first = false;
                    if sent.is_err() || link.live().await.is_err() || link.looked(every, how).await.is_err() {
                        return Ok(());
                    }
                }
                _ = retry.tick(), if cons.iter().any(Option::is_none) => {
                    let down: Vec<usize> = (0..n).filter(|i| cons[*i].is_none() && !trying.contains(i)).collect();
                    for i in down {
                        generation[i] += 1;
                        let target = self.target.masters[i].clone();
                        let generation = generation[i];
                        trying.insert(i);
                        connecting.push(Box::pin(async move { (i, connect(target, i, generation).await) }));
                    }
                }
                Some((i, tried)) = connecting.next(), if !connecting.is_empty() => {
                    trying.remove(&i);
                    if let Ok(connected) = tried {
                        attach(i, connected, &mut cons, &mut notes, &mut polled);
                        last_scan = None;
                    }
                }
                Some((i, of, key)) = notes.next(), if !notes.is_empty() => {
                    if of != generation[i] {
                        continue;
                    }
                    let Some(key) = key else {
                        // Its notification connection ended: down until it answers again.
                        cons[i] = None;
                        last_scan = None;
                        continue;
                    };
                    let found = self.read(&mut cons, vec![key.clone()]).await?;
                    if self.send(link, vec![key], found).await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Sends what changed of `names`, if anything.
    async fn send(
        &mut self,
        link: &mut Link,
        names: Vec<String>,
        found: Vec<Found>,
    ) -> Result<(), crate::link::HubGone> {
        let revision = &mut self.revision;
        let events = self.shown.settle(names, found, || {
            *revision += 1;
            *revision
        });
        if events.is_empty() {
            return Ok(());
        }
        link.events(events).await
    }

    /// Every key of the pattern on any master, combined.
    async fn scan(&mut self, cons: &mut [Option<MultiplexedConnection>]) -> Result<Vec<Found>, StoreError> {
        let mut keys = BTreeSet::new();
        for i in 0..cons.len() {
            let Some(con) = cons[i].as_mut() else { continue };
            match scan_keys(con, &self.target.masters[i].pattern, SCAN_COUNT).await {
                Ok(k) => keys.extend(k),
                Err(_) => cons[i] = None,
            }
        }
        let keys: Vec<String> = keys.into_iter().collect();
        let mut found = Vec::new();
        for batch in keys.chunks(SCAN_COUNT) {
            found.extend(self.read(cons, batch.to_vec()).await?);
        }
        Ok(found)
    }

    /// `keys` read on every master answering, combined; a master whose read
    /// fails is down from now on. Unreachable when none answers.
    async fn read(
        &mut self,
        cons: &mut [Option<MultiplexedConnection>],
        keys: Vec<String>,
    ) -> Result<Vec<Found>, StoreError> {
        let mut per_master: Vec<Option<BTreeMap<String, (Vec<u8>, i64)>>> = Vec::with_capacity(cons.len());
        for slot in cons.iter_mut() {
            let got = match slot.as_mut() {
                Some(con) => read_keys(con, keys.clone(), None).await.ok(),
                None => None,
            };
            if got.is_none() {
                *slot = None;
            }
            per_master.push(got.map(|reads| {
                reads
                    .iter()
                    .filter_map(|r| Some((r.key().to_string(), master_read(Some(r))?)))
                    .collect()
            }));
        }
        if per_master.iter().all(Option::is_none) {
            return Err(StoreError::unreachable_msg("redis: no Redlock master answered"));
        }
        let addresses: Vec<String> = self.target.masters.iter().map(|m| m.address()).collect();
        let mut out = Vec::new();
        for key in keys {
            let reads: Vec<MasterRead> = per_master
                .iter()
                .map(|m| m.as_ref().map(|m| m.get(&key).cloned()))
                .collect();
            let revision = self.next_revision();
            if let Some(e) = combine(&key, &addresses, &reads, revision) {
                out.push((e, BTreeSet::new()));
            }
        }
        Ok(out)
    }
}
