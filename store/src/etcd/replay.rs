//! After a restart: what etcd changed while no dashboard watched, replayed to
//! the history. The dashboard's history knows the last store revision it
//! recorded ([`crate::Observer::resume_history`]); before the first snapshot
//! (at the current revision `to`) the observer reads the layout as it stood at
//! that revision and watches from the next one until it reaches `to`, and sends
//! both as one [`crate::ObserverEvent::Missed`], which the hub turns into
//! history only (the live table starts from the snapshot). Where etcd has
//! compacted past the revision, refuses the watch, or the replay is too large
//! or too slow, it sends nothing and the history records a gap instead.
//!
//! The replay watches every key, not only the layout's prefix: every revision
//! is a write with at least one event, so the event at revision `to` always
//! comes and says the replay is complete. (A progress request cannot say it:
//! etcd 3.4 answers one at once with its current revision, before a lagging
//! watch has caught up.) Keys outside the prefix are dropped as they come.

use std::time::Duration;

use etcd_client::{Client, WatchOptions};
use lockscope_model::{FleetEvent, Snapshot};
use tokio::time::Instant;
use tracing::{info, warn};

use super::observer::EtcdObserver;
use super::timed;
use crate::link::Link;
use crate::StoreError;

/// Changes replayed at most; past it the history records a gap rather than
/// hold more in memory.
pub const MAX_REPLAY_EVENTS: usize = 100_000;

/// Longest a replay's watch may take to reach the first snapshot's revision.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(30);

impl EtcdObserver {
    /// Sends what changed after revision `from` up to `to` (the first
    /// snapshot's) as [`crate::ObserverEvent::Missed`], or nothing where etcd
    /// no longer has it. `Ok(None)`: the hub is gone; an error: the caller
    /// goes on without the replay (the history then records a gap).
    pub(super) async fn send_missed(
        &self,
        client: &mut Client,
        link: &Link,
        from: i64,
        to: i64,
    ) -> Result<Option<()>, StoreError> {
        if from > to {
            warn!(
                from,
                to, "etcd's revision is behind the history's (a new cluster?): the history records a gap"
            );
            return Ok(Some(()));
        }
        let Some(events) = self.changes(client, from, to).await? else {
            return Ok(Some(()));
        };
        let Some(base) = self.base(client, from).await? else {
            return Ok(Some(()));
        };
        info!(
            from,
            to,
            events = events.len(),
            "replaying what changed while no dashboard watched"
        );
        match link.missed(base, events).await {
            Ok(()) => Ok(Some(())),
            Err(_) => Ok(None),
        }
    }

    /// The layout at `from`, or `None` if etcd has compacted it away.
    async fn base(&self, client: &mut Client, from: i64) -> Result<Option<Snapshot>, StoreError> {
        match self.read_snapshot(client, from).await {
            Ok(snap) => Ok(Some(snap)),
            Err(e) if format!("{e:?}").contains("compacted") => {
                info!(
                    from,
                    "etcd compacted the revision the history stopped at: the history records a gap"
                );
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Every change of the layout after `from` up to `to`, in store order;
    /// `None` where etcd compacted past `from` or refused the watch, or the
    /// changes are too many or too slow to come.
    async fn changes(&self, client: &mut Client, from: i64, to: i64) -> Result<Option<Vec<FleetEvent>>, StoreError> {
        if from == to {
            return Ok(Some(Vec::new()));
        }
        let opts = WatchOptions::new().with_all_keys().with_start_revision(from + 1);
        let stream = timed(self.cfg.request_timeout, client.watch("", Some(opts))).await?;
        let (_ask, mut answers) = stream.split();
        let deadline = Instant::now() + REPLAY_TIMEOUT;
        let mut out = Vec::new();
        loop {
            let resp = tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {
                    warn!(from, to, ?REPLAY_TIMEOUT, "the replay did not reach the first snapshot in time: the history records a gap");
                    return Ok(None);
                }
                msg = answers.message() => msg?,
            };
            let Some(resp) = resp else {
                return Err(StoreError::unreachable_msg("etcd watch stream ended"));
            };
            self.beat.saw();
            if resp.compact_revision() > 0 {
                info!(
                    from,
                    compacted = resp.compact_revision(),
                    "etcd compacted past the revision the history stopped at: the history records a gap"
                );
                return Ok(None);
            }
            if resp.canceled() {
                // Such as a role that may not read outside the prefix.
                warn!(
                    from,
                    reason = resp.cancel_reason(),
                    "etcd refused the replay's watch: the history records a gap"
                );
                return Ok(None);
            }
            let all = resp.events();
            let within = all.partition_point(|e| e.kv().is_none_or(|kv| kv.mod_revision() <= to));
            let (events, last) = self.events_of(&all[..within]);
            out.extend(events);
            if out.len() > MAX_REPLAY_EVENTS {
                warn!(
                    from,
                    to, MAX_REPLAY_EVENTS, "too many changes to replay: the history records a gap"
                );
                return Ok(None);
            }
            if within < all.len() || last.is_some_and(|r| r >= to) {
                return Ok(Some(out));
            }
        }
    }
}
