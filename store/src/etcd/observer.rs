//! Observes the lockscope layout on etcd (locks, waiters, sessions, blacklist): a
//! snapshot at one revision, then a watch of the whole prefix from the next
//! revision. A session key lives on its session's lease, so its deletion is the
//! session going (closed, or not kept alive for its ttl): etcd decides, on its
//! own clock, and no two hosts' clocks are compared. On any failure it reports the store unreachable, waits a
//! capped, jittered backoff, reconnects and resumes the watch where it stopped; if
//! etcd compacted that revision away meanwhile, it takes a fresh snapshot instead,
//! which the hub's reducer turns into the difference. A link that goes silent
//! (packets dropped, no reset) fails the liveness probe run beside the session
//! ([`crate::liveness`]) within 3 s. Told where the dashboard's history
//! stopped, its first snapshot is preceded by what changed since (`replay`).
//!
//! One task, one connection: this loop is the only reader, so it needs no locking.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, KeyValue, KvClient, WatchOptions};
use futures::future::BoxFuture;
use lockscope_model::fleet::SnapshotSharing;
use lockscope_model::{BlacklistEntry, FleetEvent, LockEntry, SessionEntry, Snapshot, Waiter};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::{prefix_end, timed, watch_usable, while_connected, EtcdConfig};
use crate::backoff::Backoff;
use crate::link::{run_observer, Link, Session};
use crate::liveness::Heartbeat;
use crate::{now_ms, Observer, ObserverEvent, StoreError};

pub struct EtcdObserver {
    pub(super) cfg: EtcdConfig,
    /// The last revision whose events have all been sent; `None` until the first
    /// snapshot (and again after compaction ate the history we needed).
    resume: Option<i64>,
    /// Where the dashboard's history stopped: before the first snapshot, what
    /// changed since is replayed to it (`super::replay`), once.
    pub(super) history_from: Option<i64>,
    /// Marked on every response the session receives, so a probe answered late
    /// behind a large snapshot is not taken for a dead store (`crate::liveness`).
    pub(super) beat: Arc<Heartbeat>,
}

impl EtcdObserver {
    pub fn new(cfg: EtcdConfig) -> EtcdObserver {
        EtcdObserver {
            cfg,
            resume: None,
            history_from: None,
            beat: Arc::default(),
        }
    }
}

impl Observer for EtcdObserver {
    fn run(self: Box<Self>, events: mpsc::Sender<ObserverEvent>) -> BoxFuture<'static, ()> {
        let address = crate::summary::address_of_endpoints(&self.cfg.endpoints);
        let link = Link::new(
            events,
            Backoff::new(self.cfg.backoff_min, self.cfg.backoff_max),
            address,
        );
        Box::pin(run_observer(link, "etcd", *self))
    }

    fn resume_history(&mut self, revision: i64) -> bool {
        self.history_from = Some(revision);
        true
    }
}

impl Session for EtcdObserver {
    fn session<'a>(&'a mut self, link: &'a mut Link) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let (cfg, beat) = (self.cfg.clone(), self.beat.clone());
            while_connected(&cfg, &beat, |client| self.observe(client, link)).await
        })
    }
}

impl EtcdObserver {
    /// One connection: snapshot if needed, then watch; `Ok` only when the hub is gone.
    async fn observe(&mut self, mut client: Client, link: &mut Link) -> Result<(), StoreError> {
        loop {
            let from = match self.resume {
                Some(rev) => rev,
                None => match self.snapshot(&mut client, link).await? {
                    Some(rev) => rev,
                    None => return Ok(()),
                },
            };
            self.resume = Some(from);
            // One watch over the whole layout: lock, waiter, session and
            // blacklist keys.
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
                let Some(resp) = stream.message().await? else {
                    return Err(StoreError::unreachable_msg("etcd watch stream ended"));
                };
                self.beat.saw();
                if !watch_usable(&resp, from + 1, "taking a fresh snapshot")? {
                    self.resume = None;
                    break;
                }
                // The watch is established from where we left off: we are live.
                if link.live().await.is_err() {
                    return Ok(());
                }
                let (events, mut last) = self.events_of(resp.events());
                if !events.is_empty() {
                    if link.events(events).await.is_err() {
                        return Ok(());
                    }
                } else if !resp.created() && resp.events().is_empty() {
                    // A progress notification: every event up to the header's
                    // revision has been delivered.
                    last = resp.header().map(|h| h.revision());
                }
                if let Some(rev) = last {
                    self.resume = Some(self.resume.unwrap_or(0).max(rev));
                }
            }
        }
    }

    /// The table events of a watch response's `events`, and the revision of
    /// the last one.
    pub(super) fn events_of(&self, events: &[etcd_client::Event]) -> (Vec<FleetEvent>, Option<i64>) {
        let mut out = Vec::with_capacity(events.len());
        let mut last = None;
        // The skew estimate's receive time (docs/protocol.md, "Clock skew").
        let seen_at = now_ms();
        for ev in events {
            let Some(kv) = ev.kv() else { continue };
            last = Some(kv.mod_revision());
            let put = ev.event_type() == EventType::Put;
            out.extend(match self.key_of(kv) {
                Key::Lock(name) if put => Some(FleetEvent::Upsert(entry_of(kv, name))),
                Key::Lock(name) => Some(FleetEvent::Remove {
                    name,
                    revision: kv.mod_revision(),
                }),
                Key::Waiter(w) if put => Some(FleetEvent::Waiting(w)),
                Key::Waiter(w) => Some(FleetEvent::StoppedWaiting(w)),
                Key::Session(id) if put => Some(FleetEvent::Session(SessionEntry::from_stored(
                    id,
                    kv.mod_revision(),
                    kv.value(),
                    Some(seen_at),
                ))),
                Key::Session(id) => Some(FleetEvent::SessionGone { id }),
                Key::Blacklist(id) if put => Some(FleetEvent::Blacklisted(BlacklistEntry::from_stored(
                    id,
                    kv.mod_revision(),
                    kv.value(),
                ))),
                Key::Blacklist(session) => Some(FleetEvent::BlacklistLifted { session }),
                Key::Other => None,
            });
        }
        (out, last)
    }

    /// Reads every lock, waiter, session and blacklist entry at one revision, span
    /// by span, and sends them as one reset (after what changed since the
    /// history stopped, the first time: `super::replay`). Returns the revision,
    /// or `None` if the hub is gone.
    async fn snapshot(&mut self, client: &mut Client, link: &Link) -> Result<Option<i64>, StoreError> {
        let snap = self.read_snapshot(client, 0).await?;
        if let Some(from) = self.history_from.take() {
            // A replay that fails (a watch response past the client's message
            // limit, a link that drops) never holds the live table back: the
            // snapshot goes on unreplayed, and the history records a gap.
            match self.send_missed(client, link, from, snap.revision).await {
                Ok(Some(())) => {}
                Ok(None) => return Ok(None),
                Err(e) => warn!(
                    error = %e, from,
                    "could not replay what changed while no dashboard watched: the history records a gap"
                ),
            }
        }
        let revision = snap.revision;
        if link.reset(snap).await.is_err() {
            return Ok(None);
        }
        Ok(Some(revision))
    }

    /// Every lock, waiter, session and blacklist entry at `revision` (0: now),
    /// read span by span.
    pub(super) async fn read_snapshot(&self, client: &mut Client, revision: i64) -> Result<Snapshot, StoreError> {
        // Spans are read whole: allow responses far beyond tonic's 4 MiB default.
        let mut kv = client
            .kv_client()
            .max_decoding_message_size(self.cfg.response_max_bytes);
        let mut snap = Snapshot {
            sessions: Some(Vec::new()),
            ..Snapshot::default()
        };
        // Each response is parsed as it arrives, so its raw bytes never pile up,
        // and each record's common fields are shared as it is parsed.
        let mut sharing = SnapshotSharing::default();
        let mut take = |kv: &KeyValue| match self.key_of(kv) {
            Key::Lock(name) => snap.locks.push(sharing.share(entry_of(kv, name))),
            Key::Waiter(w) => snap.waiters.push(w),
            Key::Session(id) => snap
                .sessions
                .get_or_insert_with(Vec::new)
                .push(SessionEntry::from_stored(id, kv.mod_revision(), kv.value(), None)),
            Key::Blacklist(id) => snap
                .blacklist
                .push(BlacklistEntry::from_stored(id, kv.mod_revision(), kv.value())),
            Key::Other => {}
        };
        let revision = self
            .range(&mut kv, &self.cfg.locks_prefix(), revision, &mut take)
            .await?;
        for prefix in [
            self.cfg.waiters_prefix(),
            self.cfg.sessions_prefix(),
            self.cfg.blacklist_prefix(),
        ] {
            self.range(&mut kv, &prefix, revision, &mut take).await?;
        }
        snap.revision = revision;
        debug!(
            revision,
            locks = snap.locks.len(),
            waiters = snap.waiters.len(),
            sessions = snap.sessions.as_ref().map_or(0, Vec::len),
            "snapshot taken"
        );
        Ok(snap)
    }

    /// Passes every key under `prefix` at `revision` (0: now) to `take`, in key
    /// order. Returns the revision read at.
    ///
    /// etcd 3.4 collects every key from a range's start to its *end* before it
    /// applies `limit`, so paging through a prefix with a limit costs O(N²) inside
    /// etcd (100k keys took 2.8 s, 1M did not finish in 120 s). Instead, the prefix
    /// is cut into spans of keys sharing a longer prefix, each counted with
    /// `count_only` (which scans only that span) and cut again, 256 ways by its
    /// next byte, while it holds more than `span_read_max` keys; each span is
    /// then read whole, both ends bounded. Work in etcd is linear in N times the
    /// depth of the cuts, in few requests (cutting at a few hundred keys instead
    /// took 150,000 count requests for 1M locks, 80 s of etcd's time); every read
    /// is at one revision, so the result is one consistent cut of the table.
    async fn range(
        &self,
        kv: &mut KvClient,
        prefix: &str,
        mut revision: i64,
        take: &mut impl FnMut(&KeyValue),
    ) -> Result<i64, StoreError> {
        let root = prefix.as_bytes().to_vec();
        let (rev, total) = self.count(kv, &root, revision).await?;
        if revision == 0 {
            revision = rev;
        }
        // Spans to read, each a key prefix with its count; depth-first, in order.
        let mut todo = vec![(root.clone(), total)];
        while let Some((span, count)) = todo.pop() {
            if count == 0 {
                continue;
            }
            if count <= self.cfg.span_read_max || span.len() >= root.len() + MAX_CUT_DEPTH {
                self.read(kv, &span, revision, take).await?;
                continue;
            }
            // A key equal to the span's prefix belongs to none of its children.
            let exact = GetOptions::new().with_revision(revision);
            let resp = timed(self.cfg.request_timeout, kv.get(span.clone(), Some(exact))).await?;
            resp.kvs().iter().for_each(&mut *take);
            self.beat.saw();
            // Children counted concurrently (one connection, multiplexed).
            let children: Vec<Vec<u8>> = (0..=255u8)
                .map(|b| {
                    let mut c = span.clone();
                    c.push(b);
                    c
                })
                .collect();
            let counts = futures::future::try_join_all(children.iter().map(|c| {
                let mut kv = kv.clone();
                async move { self.count(&mut kv, c, revision).await.map(|(_, n)| n) }
            }))
            .await?;
            todo.extend(children.into_iter().zip(counts).filter(|(_, n)| *n > 0).rev());
        }
        Ok(revision)
    }

    /// Keys starting with `span` at `revision` (0: now): (revision, count).
    async fn count(&self, kv: &mut KvClient, span: &[u8], revision: i64) -> Result<(i64, i64), StoreError> {
        let mut opts = GetOptions::new().with_range(prefix_end(span)).with_count_only();
        // Linearizable even at a fixed revision: a serializable read could reach a
        // member that has not applied `revision` yet ("future revision").
        if revision > 0 {
            opts = opts.with_revision(revision);
        }
        let resp = timed(self.cfg.request_timeout, kv.get(span.to_vec(), Some(opts))).await?;
        self.beat.saw();
        Ok((resp.header().map(|h| h.revision()).unwrap_or_default(), resp.count()))
    }

    /// Passes every key starting with `span` at `revision` to `take`: in one
    /// response, or, if that is too large for gRPC (records far larger than
    /// usual, or a span that could not be cut) or too slow, in pages of
    /// `page_size`.
    async fn read(
        &self,
        kv: &mut KvClient,
        span: &[u8],
        revision: i64,
        take: &mut impl FnMut(&KeyValue),
    ) -> Result<(), StoreError> {
        let end = prefix_end(span);
        let span_at = || GetOptions::new().with_range(end.clone()).with_revision(revision);
        let whole = tokio::time::timeout(SPAN_READ_TIMEOUT, kv.get(span.to_vec(), Some(span_at()))).await;
        match whole {
            Ok(Ok(resp)) => {
                resp.kvs().iter().for_each(take);
                // After parsing: time spent on it is not the store's silence.
                self.beat.saw();
                return Ok(());
            }
            // Over the client's decoding limit (tonic says OutOfRange, as etcd does
            // for a compacted revision, hence the message) or the server's.
            Ok(Err(etcd_client::Error::GRpcStatus(s)))
                if s.code() == tonic::Code::ResourceExhausted
                    || (s.code() == tonic::Code::OutOfRange && s.message().contains("too large")) =>
            {
                debug!(error = %s.message(), "a snapshot span is too large for one response; paging it");
            }
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => debug!(
                ?SPAN_READ_TIMEOUT,
                "a snapshot span is too slow to read whole; paging it"
            ),
        }
        let mut from = span.to_vec();
        loop {
            let opts = span_at().with_limit(self.cfg.page_size);
            let resp = timed(self.cfg.request_timeout, kv.get(from.clone(), Some(opts))).await?;
            resp.kvs().iter().for_each(&mut *take);
            self.beat.saw();
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return Ok(()),
            }
        }
    }

    fn key_of(&self, kv: &KeyValue) -> Key {
        let key = String::from_utf8_lossy(kv.key());
        let Some(rest) = key.strip_prefix(self.cfg.prefix.as_str()) else {
            return Key::Other;
        };
        if let Some(name) = rest.strip_prefix("locks/") {
            Key::Lock(name.to_string())
        } else if let Some(id) = rest.strip_prefix("sessions/") {
            Key::Session(id.to_string())
        } else if let Some(id) = rest.strip_prefix("blacklist/") {
            Key::Blacklist(id.to_string())
        } else if let Some((lock, session)) = rest.strip_prefix("waiters/").and_then(|w| w.rsplit_once('/')) {
            // Lock names may contain '/'; session ids may not, so the last segment
            // is the session.
            Key::Waiter(Waiter {
                lock: lock.to_string(),
                session: session.to_string(),
            })
        } else {
            Key::Other
        }
    }
}

/// Longest key prefix (beyond the listed prefix) a snapshot cuts by; past it a
/// span is read as it is (only names sharing 256 leading bytes get there).
const MAX_CUT_DEPTH: usize = 256;

/// Time allowed for reading one span whole (a busy etcd takes about a second
/// for 50,000 records).
const SPAN_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What a key under the prefix is.
enum Key {
    Lock(String),
    Waiter(Waiter),
    Session(String),
    Blacklist(String),
    Other,
}

fn entry_of(kv: &KeyValue, name: String) -> LockEntry {
    LockEntry::from_stored(name, kv.create_revision(), kv.mod_revision(), kv.value())
}
