//! Observes `<prefix>locks/` on etcd: a paged snapshot at one revision, then a watch
//! from the next revision. On any failure it reports the store unreachable, waits a
//! capped, jittered backoff, reconnects and resumes the watch where it stopped; if
//! etcd compacted that revision away meanwhile, it takes a fresh snapshot instead,
//! which the hub's reducer turns into the difference.
//!
//! One task, one connection: this loop is the only reader, so it needs no locking.

use etcd_client::{Client, EventType, GetOptions, KeyValue, WatchOptions};
use futures::future::BoxFuture;
use lockscope_model::{FleetEvent, LockEntry};
use tokio::sync::mpsc;
use tracing::{debug, info};

use super::{prefix_end, timed, EtcdConfig};
use crate::backoff::Backoff;
use crate::link::{run_observer, Link, Session};
use crate::{Observer, ObserverEvent, StoreError};

pub struct EtcdObserver {
    cfg: EtcdConfig,
    /// The last revision whose events have all been sent; `None` until the first
    /// snapshot (and again after compaction ate the history we needed).
    resume: Option<i64>,
}

impl EtcdObserver {
    pub fn new(cfg: EtcdConfig) -> EtcdObserver {
        EtcdObserver { cfg, resume: None }
    }
}

impl Observer for EtcdObserver {
    fn run(self: Box<Self>, events: mpsc::Sender<ObserverEvent>) -> BoxFuture<'static, ()> {
        let link = Link::new(events, Backoff::new(self.cfg.backoff_min, self.cfg.backoff_max));
        Box::pin(run_observer(link, "etcd", *self))
    }
}

impl Session for EtcdObserver {
    fn session<'a>(&'a mut self, link: &'a mut Link) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.observe(link))
    }
}

impl EtcdObserver {
    /// One connection: snapshot if needed, then watch; `Ok` only when the hub is gone.
    async fn observe(&mut self, link: &mut Link) -> Result<(), StoreError> {
        let mut client = self.cfg.connect().await?;
        loop {
            let from = match self.resume {
                Some(rev) => rev,
                None => match self.snapshot(&mut client, link).await? {
                    Some(rev) => rev,
                    None => return Ok(()),
                },
            };
            self.resume = Some(from);
            let prefix = self.cfg.locks_prefix();
            let opts = WatchOptions::new()
                .with_prefix()
                .with_start_revision(from + 1)
                .with_progress_notify();
            let mut stream = timed(self.cfg.request_timeout, client.watch(prefix.clone(), Some(opts))).await?;
            loop {
                let Some(resp) = stream.message().await? else {
                    return Err(StoreError::Unreachable("watch stream ended".into()));
                };
                if resp.compact_revision() > 0 {
                    info!(
                        wanted = from + 1,
                        compacted = resp.compact_revision(),
                        "history compacted, taking a fresh snapshot"
                    );
                    self.resume = None;
                    break;
                }
                if resp.canceled() {
                    return Err(StoreError::Backend(format!("watch canceled: {}", resp.cancel_reason())));
                }
                // The watch is established from where we left off: we are live.
                if link.live().await.is_err() {
                    return Ok(());
                }
                let mut events = Vec::with_capacity(resp.events().len());
                let mut last = None;
                for ev in resp.events() {
                    let Some(kv) = ev.kv() else { continue };
                    let name = name_of(kv, &prefix);
                    last = Some(kv.mod_revision());
                    events.push(match ev.event_type() {
                        EventType::Put => FleetEvent::Upsert(entry_of(kv, name)),
                        EventType::Delete => FleetEvent::Remove {
                            name,
                            revision: kv.mod_revision(),
                        },
                    });
                }
                if !events.is_empty() {
                    if link.events(events).await.is_err() {
                        return Ok(());
                    }
                } else if !resp.created() {
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

    /// Reads every lock at one revision, page by page, and sends it as one reset.
    /// Returns the revision, or `None` if the hub is gone.
    async fn snapshot(&mut self, client: &mut Client, link: &Link) -> Result<Option<i64>, StoreError> {
        let prefix = self.cfg.locks_prefix();
        let end = prefix_end(prefix.as_bytes());
        let mut from = prefix.as_bytes().to_vec();
        let mut revision = 0;
        let mut locks = Vec::new();
        loop {
            let mut opts = GetOptions::new().with_range(end.clone()).with_limit(self.cfg.page_size);
            if revision > 0 {
                // Every page at the first page's revision: one consistent table.
                opts = opts.with_revision(revision);
            }
            let resp = timed(self.cfg.request_timeout, client.get(from.clone(), Some(opts))).await?;
            if revision == 0 {
                revision = resp.header().map(|h| h.revision()).unwrap_or_default();
            }
            for kv in resp.kvs() {
                locks.push(entry_of(kv, name_of(kv, &prefix)));
            }
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        debug!(revision, locks = locks.len(), "snapshot taken");
        if link.events(vec![FleetEvent::Reset { revision, locks }]).await.is_err() {
            return Ok(None);
        }
        Ok(Some(revision))
    }
}

fn name_of(kv: &KeyValue, prefix: &str) -> String {
    let key = kv.key();
    let rest = key.strip_prefix(prefix.as_bytes()).unwrap_or(key);
    String::from_utf8_lossy(rest).into_owned()
}

fn entry_of(kv: &KeyValue, name: String) -> LockEntry {
    LockEntry::from_stored(name, kv.create_revision(), kv.mod_revision(), kv.value())
}
