//! Observes etcd's native mutexes under a prefix: one read of the prefix at
//! one revision, then a watch of it from the next revision, each change
//! turned into table events by [`Table`]. On any failure the store is
//! reported unreachable and, after the backoff, the watch resumes where it
//! stopped; if etcd compacted that revision away meanwhile, the prefix is read
//! afresh and sent as a reset. The liveness probe of the lockscope layout runs
//! beside it ([`crate::liveness`]).
//!
//! Holders' leases are read with `LeaseTimeToLive`: a new holder's at once
//! (before its row is sent, so it arrives with its TTL), and every
//! [`LEASE_POLL`] up to [`LEASE_POLL_MAX`] of the holders' leases, least
//! recently read first. Why: a holder's client renews its lease every third
//! of its TTL (60 s by default: every 20 s), so a renewal shows within 5 s,
//! and the observer sends etcd at most 20 lease reads a second whatever the
//! fleet's size. A read that finds a lease renewed or gone (its expiry moved
//! by more than 1.5 s), or whose keys changed, sends the locks that lease
//! holds again, as of the last revision applied, and only those.

use std::collections::BTreeSet;
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions};
use futures::future::BoxFuture;
use lockscope_model::fleet::LeaseInfo;
use tokio::sync::mpsc;

use super::layout::Table;
use crate::backoff::Backoff;
use crate::etcd::{timed, watch_usable, while_connected, EtcdConfig};
use crate::link::{run_observer, Link, Session};
use crate::liveness::Heartbeat;
use crate::{Observer, ObserverEvent, StoreError};

/// How often holders' leases are read again.
pub const LEASE_POLL: Duration = Duration::from_secs(5);

/// At most this many lease reads per [`LEASE_POLL`] (and per watch response,
/// for new holders; the rest are read by the next polls). Fixed: it bounds
/// the load one dashboard puts on etcd (20 reads a second) however many
/// locks there are; past 100 holders each lease is read less often than
/// every 5 s, least recently read first, and the page says when it was read
/// (docs/operations.md, "etcd's native mutexes").
pub const LEASE_POLL_MAX: usize = 100;

/// An expiry that moved by more than this was a renewal (or a revoke): TTLs
/// are whole seconds, so two reads of one unrenewed lease differ by up to 1 s.
const MOVED_MS: i64 = 1500;

/// Watches the etcd native mutexes under one prefix (see the module docs).
pub struct MutexObserver {
    cfg: EtcdConfig,
    table: Table,
    /// The last revision whose events have all been applied; `None` until the
    /// first read (and again after compaction).
    resume: Option<i64>,
    beat: std::sync::Arc<Heartbeat>,
}

impl MutexObserver {
    pub fn new(endpoints: Vec<String>, prefix: &str) -> MutexObserver {
        MutexObserver {
            cfg: super::config(endpoints, prefix),
            table: Table::default(),
            resume: None,
            beat: Default::default(),
        }
    }
}

impl Observer for MutexObserver {
    fn run(self: Box<Self>, events: mpsc::Sender<ObserverEvent>) -> BoxFuture<'static, ()> {
        let address = crate::summary::address_of_endpoints(&self.cfg.endpoints);
        let link = Link::new(
            events,
            Backoff::new(self.cfg.backoff_min, self.cfg.backoff_max),
            address,
        );
        Box::pin(run_observer(link, "etcd-mutex", *self))
    }
}

impl Session for MutexObserver {
    fn session<'a>(&'a mut self, link: &'a mut Link) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let (cfg, beat) = (self.cfg.clone(), self.beat.clone());
            while_connected(&cfg, &beat, |client| self.observe(client, link)).await
        })
    }
}

impl MutexObserver {
    /// One connection: read if needed, then watch; `Ok` only when the hub is gone.
    async fn observe(&mut self, mut client: Client, link: &mut Link) -> Result<(), StoreError> {
        let mut poll = tokio::time::interval(LEASE_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let from = match self.resume {
                Some(rev) => rev,
                None => {
                    let rev = self.read(&mut client).await?;
                    if link.reset(self.table.snapshot(rev)).await.is_err() {
                        return Ok(());
                    }
                    rev
                }
            };
            self.resume = Some(from);
            let opts = WatchOptions::new()
                .with_prefix()
                .with_start_revision(from + 1)
                .with_progress_notify();
            let mut stream = timed(
                self.cfg.request_timeout,
                client.watch(self.cfg.prefix.clone(), Some(opts)),
            )
            .await?;
            loop {
                let resp = tokio::select! {
                    resp = stream.message() => resp?,
                    _ = poll.tick() => {
                        let moved = self.poll_leases(&mut client).await?;
                        if !moved.is_empty() {
                            // Only the locks those leases hold are sent again, as
                            // of the last revision applied (the reducer takes a
                            // changed body at the same revision). A reset of the
                            // whole table every poll kept a 100,000-lock fleet's
                            // rows seconds behind (docs/performance.md).
                            let rev = self.resume.unwrap_or(from);
                            let names = self.table.names_held_by(&moved);
                            let events = self.table.settle(names, rev);
                            if !events.is_empty() && link.events(events).await.is_err() {
                                return Ok(());
                            }
                        }
                        continue;
                    }
                };
                let Some(resp) = resp else {
                    return Err(StoreError::unreachable_msg("etcd watch stream ended"));
                };
                self.beat.saw();
                if !watch_usable(&resp, from + 1, "reading the mutexes afresh")? {
                    self.resume = None;
                    break;
                }
                if link.live().await.is_err() {
                    return Ok(());
                }
                let mut touched = Vec::new();
                let mut last = None;
                let now = crate::now_ms();
                for ev in resp.events() {
                    let Some(kv) = ev.kv() else { continue };
                    last = Some(kv.mod_revision());
                    let key = kv.key();
                    let rest = String::from_utf8_lossy(key);
                    let Some(rest) = rest.strip_prefix(self.cfg.prefix.as_str()) else {
                        continue;
                    };
                    let name = match ev.event_type() {
                        EventType::Put => Some(self.table.put(key, rest, kv, Some(now))),
                        EventType::Delete => self.table.delete(key),
                    };
                    // One response may hold several revisions: each change is
                    // settled at its own.
                    if let Some(name) = name {
                        touched.push((name, kv.mod_revision()));
                    }
                }
                if !touched.is_empty() {
                    let names: Vec<&str> = touched.iter().map(|(n, _)| n.as_str()).collect();
                    let holders = self.table.holder_leases(names);
                    self.read_new_holders(&mut client, holders).await?;
                    let mut events = Vec::new();
                    for (name, rev) in touched {
                        events.extend(self.table.settle([name], rev));
                    }
                    if !events.is_empty() && link.events(events).await.is_err() {
                        return Ok(());
                    }
                } else if !resp.created() && resp.events().is_empty() {
                    // A progress notification: all is delivered up to its revision.
                    last = resp.header().map(|h| h.revision());
                }
                if let Some(rev) = last {
                    self.resume = Some(self.resume.unwrap_or(0).max(rev));
                }
            }
        }
    }

    /// Reads every key under the prefix at one revision into a fresh table
    /// (what was shown is kept for the reset's difference); returns the revision.
    /// Mutex keys hold no value (an election's, a proposal), so even 100,000
    /// of them are a few MB: one response.
    async fn read(&mut self, client: &mut Client) -> Result<i64, StoreError> {
        let mut kv = client
            .kv_client()
            .max_decoding_message_size(self.cfg.response_max_bytes);
        let opts = GetOptions::new().with_prefix();
        let resp = timed(Duration::from_secs(30), kv.get(self.cfg.prefix.clone(), Some(opts))).await?;
        self.beat.saw();
        self.table.clear_keys();
        for kv in resp.kvs() {
            let rest = String::from_utf8_lossy(kv.key());
            if let Some(rest) = rest.strip_prefix(self.cfg.prefix.as_str()) {
                self.table.put(kv.key(), rest, kv, None);
            }
        }
        let holders = self.table.all_holder_leases();
        self.table.leases.retain(|id, _| holders.contains(id));
        self.read_new_holders(client, holders).await?;
        Ok(resp.header().map(|h| h.revision()).unwrap_or_default())
    }

    /// Reads the leases of `holders` not read yet (at most [`LEASE_POLL_MAX`]).
    async fn read_new_holders(&mut self, client: &mut Client, holders: BTreeSet<i64>) -> Result<(), StoreError> {
        let new: Vec<i64> = holders
            .into_iter()
            .filter(|id| !self.table.leases.contains_key(id))
            .take(LEASE_POLL_MAX)
            .collect();
        for (id, info) in self.lease_infos(client, &new).await? {
            self.table.leases.insert(id, info);
        }
        Ok(())
    }

    /// Reads up to [`LEASE_POLL_MAX`] holders' leases, least recently read
    /// first; returns those renewed, ended or with other keys (their locks must
    /// be sent again).
    /// Leases that hold nothing any more are forgotten first (one pass over
    /// the table per poll, not per change).
    async fn poll_leases(&mut self, client: &mut Client) -> Result<BTreeSet<i64>, StoreError> {
        let holders = self.table.all_holder_leases();
        self.table.leases.retain(|id, _| holders.contains(id));
        let mut due: Vec<(i64, i64)> = self.table.leases.iter().map(|(id, l)| (l.read_at, *id)).collect();
        due.sort_unstable();
        let ids: Vec<i64> = due.into_iter().take(LEASE_POLL_MAX).map(|(_, id)| id).collect();
        let mut moved = BTreeSet::new();
        for (id, info) in self.lease_infos(client, &ids).await? {
            let expiry = |l: &LeaseInfo| l.read_at + l.ttl_s * 1000;
            let old = self.table.leases.get(&id);
            let changed = old.is_none_or(|o| {
                o.granted_s != info.granted_s
                    || (o.ttl_s < 0) != (info.ttl_s < 0)
                    || (o.keys_total, &o.keys) != (info.keys_total, &info.keys)
                    || (expiry(o) - expiry(&info)).abs() > MOVED_MS
            });
            if changed {
                moved.insert(id);
                self.table.leases.insert(id, info);
            }
        }
        Ok(moved)
    }

    /// `LeaseTimeToLive` of each of `ids`, concurrently (one connection).
    async fn lease_infos(&self, client: &Client, ids: &[i64]) -> Result<Vec<(i64, LeaseInfo)>, StoreError> {
        let reads = ids.iter().map(|&id| {
            let mut client = client.clone();
            async move { Ok::<_, StoreError>((id, super::read_lease(&mut client, id, self.cfg.request_timeout).await?)) }
        });
        let out = futures::future::try_join_all(reads).await?;
        if !out.is_empty() {
            self.beat.saw();
        }
        Ok(out)
    }
}
