//! Observes a ScyllaDB lock keyspace for the dashboard. CQL has no change feed
//! lockscope can rely on (CDC is optional and per table), so the observer
//! scans: every `poll` (default 1 s) it reads `tokens`, `token_times` and the
//! blacklist whole, in pages of `page` rows with the driver's paging state
//! (never one unbounded read), and sends what differs from the previous scan
//! as events. The first scan after (re)connecting is a reset.
//!
//! A removed lock is sent at its last revision plus one (revisions grow
//! across acquisitions, `super::REVISION_STRIDE`). Sessions go through the
//! same tracker as SQL's ([`SessionTracker`]): a session is gone when its row
//! is (its TTL ran out on the server's clock, or it was closed), or when this
//! observer has seen no heartbeat for the session's own ttl on its monotonic
//! clock. A row of the published schema has no lockscope record: it is shown
//! as a session whose record cannot be read, with what the row holds (its
//! heartbeat time and tokens).
//!
//! A liveness probe runs beside the scans ([`ScyllaProbe`], `crate::liveness`):
//! a cluster that stops answering is reported within 3 s, not at the scan's
//! request timeout.
//!
//! One task: this loop is the only reader, so its state needs no lock.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use lockscope_model::{FleetEvent, LockEntry, Snapshot};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::cql::{col, Row, Schema, Stmt, Value};
use super::{ScyllaLocks, ScyllaTarget};
use crate::backoff::Backoff;
use crate::link::{run_observer, Link, Session};
use crate::liveness::{while_alive, Heartbeat, Probe};
use crate::sql::sessions::SessionTracker;
use crate::sql::SessionRow;
use crate::{now_ms, Observer, ObserverEvent, StoreError};

pub struct ScyllaObserver {
    target: ScyllaTarget,
    /// Time between two scans.
    pub poll: Duration,
    /// Rows per page of a scan.
    pub page: i32,
    pub backoff: Backoff,
    /// Kept across reconnects (see the SQL observer's note).
    sessions: SessionTracker,
    scans: i64,
}

impl ScyllaObserver {
    pub fn new(target: ScyllaTarget) -> ScyllaObserver {
        ScyllaObserver {
            poll: target.scan_interval(),
            target,
            page: super::PAGE_ROWS,
            backoff: Backoff::new(Duration::from_millis(250), Duration::from_secs(10)),
            sessions: SessionTracker::default(),
            scans: 0,
        }
    }

    async fn observe(&mut self, link: &mut Link) -> Result<(), StoreError> {
        let store = self.target.connect(false).await?.with_page(self.page);
        let mut sessions = std::mem::take(&mut self.sessions);
        let mut probe = ScyllaProbe(store.clone());
        let beat = Heartbeat::default();
        let result = while_alive(self.follow(&store, link, &mut sessions, &beat), &mut probe, &beat).await;
        self.sessions = sessions;
        result
    }

    /// Scans until the store fails (`Err`) or the hub is gone (`Ok`).
    async fn follow(
        &mut self,
        store: &ScyllaLocks,
        link: &mut Link,
        sessions: &mut SessionTracker,
        beat: &Heartbeat,
    ) -> Result<(), StoreError> {
        let mut shown: Option<BTreeMap<String, LockEntry>> = None;
        let mut scanned_at = now_ms();
        loop {
            let started = now_ms();
            // Each read's answer is a sign of life (a probe may wait behind it).
            let locks = store.held().await?;
            beat.saw();
            let schema = store.schema();
            let rows = store
                .session_rows()
                .await?
                .iter()
                .filter_map(|r| session_row(r, schema))
                .collect();
            beat.saw();
            let blacklist = store.blacklist_rows().await?;
            beat.saw();
            self.scans += 1;
            let now: BTreeMap<String, LockEntry> = locks.into_iter().map(|e| (e.name.clone(), e)).collect();
            let sent = match &shown {
                None => {
                    // Not a live observation: no receive time for the skew estimate.
                    sessions.update(rows, blacklist, Instant::now(), None);
                    let (live, blacklist, waiters) = sessions.snapshot();
                    link.reset(Snapshot {
                        revision: self.scans,
                        locks: now.values().cloned().collect(),
                        waiters,
                        sessions: Some(live),
                        blacklist,
                    })
                    .await
                }
                Some(before) => {
                    // Sessions first: a lock taken by a new session is not orphaned.
                    // A heartbeat seen now was written since the previous scan
                    // began: the midpoint is its receive time, within half a
                    // poll (what the skew estimate carries on this store).
                    let seen_at = scanned_at + (now_ms() - scanned_at) / 2;
                    let mut events = sessions.update(rows, blacklist, Instant::now(), Some(seen_at));
                    events.extend(diff(before, &now));
                    events.extend(sessions.expire(Instant::now()));
                    if events.is_empty() {
                        Ok(())
                    } else {
                        link.events(events).await
                    }
                }
            };
            if sent.is_err() {
                return Ok(());
            }
            shown = Some(now);
            scanned_at = started;
            if link.live().await.is_err() || link.hub_gone() {
                return Ok(());
            }
            tokio::time::sleep(self.poll).await;
        }
    }
}

/// The events that turn scan `before` into scan `now`.
fn diff(before: &BTreeMap<String, LockEntry>, now: &BTreeMap<String, LockEntry>) -> Vec<FleetEvent> {
    let mut events = Vec::new();
    for (name, old) in before {
        if !now.contains_key(name) {
            events.push(FleetEvent::Remove {
                name: name.clone(),
                revision: old.revision + 1,
            });
        }
    }
    for (name, entry) in now {
        match before.get(name) {
            Some(old) if old == entry => continue,
            // A lower revision than shown is another acquisition (one whose
            // token was still being moved onto a later one, or a published
            // row written by a slower clock), which the reducer would drop as
            // stale: the one shown is released first.
            Some(old) if old.revision >= entry.revision => events.push(FleetEvent::Remove {
                name: name.clone(),
                revision: old.revision,
            }),
            _ => {}
        }
        events.push(FleetEvent::Upsert(entry.clone()));
    }
    events
}

/// A `token_times` row as the session tracker reads it. lockscope's rows carry
/// the session record and ttl; a published row carries only its heartbeat
/// time and tokens, kept as the (unreadable) record text so that it is shown,
/// and so that a new heartbeat counts as a write.
fn session_row(row: &Row, schema: Schema) -> Option<SessionRow> {
    let id = col(row, "service_session_id").as_text()?.to_string();
    let heartbeat = col(row, "timestamp").as_i64();
    match (col(row, "record").as_text(), col(row, "ttl_ms").as_i64()) {
        (Some(record), Some(ttl_ms)) => Some(SessionRow {
            id,
            record: record.to_string(),
            waiting_for: col(row, "waiting_for").as_text().map(str::to_string),
            expires_at: heartbeat.unwrap_or(0).saturating_add(ttl_ms),
        }),
        // What is left of a lockscope session whose cells expired (its
        // blacklist mark, say): gone. A published client's row on lockscope's
        // tables has a heartbeat time of its own.
        _ if schema == Schema::Superset && heartbeat.is_none() => None,
        _ => {
            let tokens: Vec<&str> = match col(row, "tokens") {
                Value::List(items) => items.iter().filter_map(Value::as_text).collect(),
                _ => Vec::new(),
            };
            let published = serde_json::json!({
                "published_schema_row": { "timestamp": heartbeat, "tokens": tokens }
            });
            Some(SessionRow {
                id,
                record: published.to_string(),
                waiting_for: None,
                expires_at: 0,
            })
        }
    }
}

/// The observer's liveness probe: the `tokens` table's columns from
/// `system_schema` (the statement the schema check at connect runs), at
/// consistency ONE, so the coordinator answers it from its own schema tables:
/// next to nothing for the cluster, once a second per dashboard.
struct ScyllaProbe(ScyllaLocks);

impl Probe for ScyllaProbe {
    fn probe(&mut self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let values = vec![Value::text(self.0.keyspace.clone()), Value::text("tokens")];
            self.0.run(Stmt::Columns, values).await?;
            Ok(())
        })
    }
}

impl Session for ScyllaObserver {
    fn session<'a>(&'a mut self, link: &'a mut Link) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.observe(link))
    }
}

impl Observer for ScyllaObserver {
    fn run(self: Box<Self>, events: mpsc::Sender<ObserverEvent>) -> BoxFuture<'static, ()> {
        let link = Link::new(
            events,
            self.backoff.clone(),
            crate::summary::address_of_scylla(&self.target),
        );
        Box::pin(run_observer(link, "scylla", *self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::FleetState;

    fn entry(name: &str, session: &str, revision: i64) -> LockEntry {
        LockEntry::foreign(name.into(), revision, revision, Some(session.into()), Some(revision))
    }

    /// A row with a lower revision than the one shown is another acquisition:
    /// the reducer, which drops stale upserts, must still end up showing it.
    #[test]
    fn a_lower_revision_replaces_what_is_shown() {
        let mut state = FleetState::default();
        let before = BTreeMap::from([("x".to_string(), entry("x", "a", 50))]);
        for e in diff(&BTreeMap::new(), &before) {
            state.apply(e);
        }
        let cases = [
            // (now, what the state shows after)
            (entry("x", "b", 40), "b"), // lower: another acquisition
            (entry("x", "b", 60), "b"), // higher: an update
        ];
        let mut shown = before;
        for (now, want) in cases {
            let now = BTreeMap::from([("x".to_string(), now)]);
            for e in diff(&shown, &now) {
                state.apply(e);
            }
            assert_eq!(state.get("x").and_then(|e| e.holder_session()), Some(want));
            assert_eq!(state.get("x"), now.get("x"));
            shown = now;
        }
        let gone = diff(&shown, &BTreeMap::new());
        assert_eq!(
            gone,
            [FleetEvent::Remove {
                name: "x".into(),
                revision: 61
            }]
        );
    }
}
