//! The unlocker: per fleet, releases locks whose `auto_unlock_at` plus a grace
//! margin has passed on this server's clock, by compare-and-set on the fencing
//! token it saw, through the fleet's store handle — and only while this replica
//! holds the fleet's unlocker role, elected through the store itself. Every
//! release it makes is fenced by its leadership term in the same store
//! transaction, so a replica that was paused past its lease and wakes up late
//! releases nothing.
//!
//! Modes (per fleet): `off`; `dry-run` (says what it would release and when,
//! releases nothing, needs no role); `on`. What it does reaches the overview
//! through the hub ([`UnlockerStatus`]), the audit log (each release, as the
//! actor `unlocker@REPLICA`), the log and the metrics.
//!
//! The decision itself is [`lockscope_model::unlock::verdict`]; which locks to
//! look at comes from the hub's view sorted by `auto_unlock_at` (soonest first),
//! rendered once per tick: the unlocker reads the same windows the browsers do.
//!
//! Layout: here, the task and its releases; `clock` ([`ServerClock`]); `role`
//! (campaigning for the role, renewing it).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lockscope_model::admin::{Action, AuditEntry, Outcome};
use lockscope_model::history::{Kind, ReleaseNote};
use lockscope_model::time::{human_duration, utc_datetime, Millis};
use lockscope_model::unlock::{verdict, Mode, Pending, UnlockerStatus, Verdict, MAX_PENDING};
use lockscope_model::view::{Sort, SortKey, ViewSpec, MAX_WINDOW};
use lockscope_model::{LockBody, LockEntry, StoreStatus};
use lockscope_store::fleet::{Fenced, FleetStore, Leadership, Release};
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

use crate::live::hub::HubHandle;
use crate::metrics::Metrics;
use crate::remember::audit::AuditLog;

/// How often the unlocker looks at the fleet.
pub const TICK: Duration = Duration::from_millis(500);
/// A lock just released is not tried again for this long (the hub sees the
/// release a moment later).
const RECENT: Duration = Duration::from_secs(10);

/// One fleet's unlocker settings.
#[derive(Clone, Debug)]
pub struct UnlockerConfig {
    pub mode: Mode,
    /// This replica's name, as other replicas and the UI show it.
    pub replica: String,
    pub grace: Duration,
    /// The unlocker role's lease: a replica that stops renewing it (killed,
    /// paused) loses the role this long after its last renewal.
    pub lease: Duration,
}

/// What the unlocker needs besides its fleet.
#[derive(Clone)]
pub struct Deps {
    pub audit: AuditLog,
    pub metrics: Arc<Metrics>,
}

/// Runs `fleet`'s unlocker until `stop` turns true.
pub async fn run(
    hub: HubHandle,
    store: Arc<dyn FleetStore>,
    cfg: UnlockerConfig,
    deps: Deps,
    mut stop: watch::Receiver<bool>,
) {
    let mut u = Unlocker {
        status: UnlockerStatus {
            mode: cfg.mode,
            replica: cfg.replica.clone(),
            grace_ms: cfg.grace.as_millis() as i64,
            ..UnlockerStatus::default()
        },
        fleet: hub.fleet().to_string(),
        hub,
        store,
        cfg,
        deps,
        clock: ServerClock::new(),
        recent: HashMap::new(),
    };
    // A fleet the unlocker never acts on (read-only, another library's locks):
    // off whatever was asked, and the overview says why.
    if let Some(why) = u.store.no_unlocker() {
        u.status.mode = Mode::Off;
        u.status.problem = Some(why.into());
    }
    u.deps.metrics.set_unlocker_active(&u.fleet, false);
    u.deps.metrics.set_unlocker_mode(&u.fleet, u.status.mode);
    u.publish().await;
    // Subscribed for as long as the unlocker runs, so the hub keeps the view's
    // index built and each tick's render reads it instead of building it anew.
    // Its frames are read and dropped (never acknowledged: the hub sends two
    // windows and then holds back; status messages do not pile up).
    let _index = match u.status.mode {
        Mode::Off => None,
        _ => u.hub.subscribe(u32::MAX, expiry_view()).await.ok().map(|mut sub| {
            AbortOnDrop(tokio::spawn(async move { while sub.frames.recv().await.is_some() {} }).abort_handle())
        }),
    };
    match u.status.mode {
        Mode::Off => {}
        Mode::DryRun => u.dry_run(&mut stop).await,
        Mode::On => u.serve(&mut stop).await,
    }
}

struct Unlocker {
    status: UnlockerStatus,
    fleet: String,
    hub: HubHandle,
    store: Arc<dyn FleetStore>,
    cfg: UnlockerConfig,
    deps: Deps,
    clock: ServerClock,
    /// (name, fence) released (or tried) lately, and when.
    recent: HashMap<(String, i64), Instant>,
}

/// What one look at the fleet found.
#[derive(Default)]
struct Scan {
    due: Vec<LockEntry>,
    pending: Vec<Pending>,
}

impl Unlocker {
    async fn publish(&self) {
        self.hub.set_unlocker(self.status.clone()).await;
    }

    /// The locks due now, and the next ones due, soonest first.
    async fn scan(&mut self) -> Option<Scan> {
        let (frame, status) = self.hub.render(expiry_view()).await.ok()?;
        // A view the store no longer confirms is the past: nothing in it is due.
        if !matches!(status, StoreStatus::Live { .. }) {
            return None;
        }
        let now = self.clock.now();
        let grace = self.status.grace_ms;
        self.recent.retain(|_, at| at.elapsed() < RECENT);
        let mut scan = Scan::default();
        for row in frame.rows {
            if self.recent.contains_key(&(row.entry.name.clone(), row.entry.fence)) {
                continue;
            }
            match verdict(&row.entry, now, grace) {
                Verdict::Release { release_at } => {
                    scan.pending.push(pending(&row.entry, release_at));
                    scan.due.push(row.entry);
                }
                Verdict::Expired { release_at } => scan.pending.push(pending(&row.entry, release_at)),
                Verdict::Keep | Verdict::Overdue | Verdict::Malformed | Verdict::Foreign => {}
            }
        }
        Some(scan)
    }

    /// Says what it would release, and when; releases nothing.
    async fn dry_run(&mut self, stop: &mut watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut said: HashMap<(String, i64), Instant> = HashMap::new();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stopped(stop) => return,
            }
            let Some(scan) = self.scan().await else { continue };
            said.retain(|_, at| at.elapsed() < RECENT * 6);
            for e in &scan.due {
                if said.insert((e.name.clone(), e.fence), Instant::now()).is_none() {
                    tracing::info!(fleet = %self.fleet, lock = %e.name, fence = e.fence, "dry-run: would release now");
                }
            }
            self.status.active = self.store.unlocker().await.ok().flatten().map(|u| u.candidate);
            self.set_pending(scan.pending).await;
        }
    }

    async fn set_pending(&mut self, mut pending: Vec<Pending>) {
        pending.truncate(MAX_PENDING);
        if pending != self.status.pending {
            self.status.pending = pending;
            self.publish().await;
        }
    }

    /// Campaigns for the role; while holding it, releases what is due.
    async fn serve(&mut self, stop: &mut watch::Receiver<bool>) {
        loop {
            let Some(leadership) = self.campaign(stop).await else {
                return;
            };
            self.status.leading = true;
            self.status.active = Some(self.cfg.replica.clone());
            self.status.term = Some(leadership.term());
            self.status.problem = None;
            self.deps.metrics.set_unlocker_active(&self.fleet, true);
            self.publish().await;
            tracing::info!(fleet = %self.fleet, term = leadership.term(), "this replica is the active unlocker");
            // A new term: what the last one tried is worth trying again.
            self.recent.clear();
            // The lease is renewed by a task of its own, so a slow round of
            // releases (a slow store or audit log) never lets it run out.
            let leadership = Arc::new(leadership);
            let (lost_tx, mut lost) = watch::channel(false);
            let renewer = tokio::spawn(renew(
                leadership.clone(),
                self.cfg.lease,
                lost_tx,
                self.fleet.clone(),
                self.deps.metrics.clone(),
            ));
            let stopped = self.lead(leadership.as_ref().as_ref(), &mut lost, stop).await;
            renewer.abort();
            let _ = renewer.await;
            self.status.leading = false;
            self.deps.metrics.set_unlocker_active(&self.fleet, false);
            self.publish().await;
            if stopped {
                match Arc::into_inner(leadership) {
                    Some(l) => {
                        if let Err(e) = l.resign().await {
                            tracing::warn!(fleet = %self.fleet, error = %e.describe(), "resigning the unlocker role");
                        }
                    }
                    None => tracing::warn!(fleet = %self.fleet, "the unlocker role is still shared; not resigning"),
                }
                return;
            }
            tracing::warn!(fleet = %self.fleet, "lost the unlocker role; campaigning again");
        }
    }

    /// Acts as the unlocker until the role is lost (`false`) or `stop` (`true`).
    /// `lost` turns true when the renewer finds the role gone.
    async fn lead(
        &mut self,
        leadership: &dyn Leadership,
        lost: &mut watch::Receiver<bool>,
        stop: &mut watch::Receiver<bool>,
    ) -> bool {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stopped(stop) => return true,
                _ = stopped(lost) => return false,
                _ = tick.tick() => {
                    let Some(scan) = self.scan().await else { continue };
                    self.set_pending(scan.pending).await;
                    for entry in scan.due {
                        if *lost.borrow() || *stop.borrow() {
                            break;
                        }
                        if !self.release(leadership, entry).await {
                            return false;
                        }
                    }
                }
            }
        }
    }

    /// Releases one due lock; `false`: the role turned out lost.
    async fn release(&mut self, leadership: &dyn Leadership, entry: LockEntry) -> bool {
        // As an admin action: never unaudited. Without a place for its entry
        // (the audit log's spool full, or none in this process), not done.
        let permit = match self.deps.audit.ready() {
            Ok(p) => p,
            Err(why) => {
                tracing::warn!(fleet = %self.fleet, lock = %entry.name, "auto-release not done: {why}");
                self.deps.metrics.unlocker_failed(&self.fleet, "audit");
                self.status.problem = Some(format!("releasing {}: {why}", entry.name));
                self.publish().await;
                return true;
            }
        };
        self.recent.insert((entry.name.clone(), entry.fence), Instant::now());
        let note = ReleaseNote {
            kind: Kind::AutoReleased,
            actor: format!("unlocker@{}", self.cfg.replica),
            reason: "past its auto_unlock_at (and the grace)".into(),
        };
        let release = leadership.release(&entry.name, entry.fence, entry.revision);
        let released = self
            .hub
            .release_as(&entry.name, entry.fence, note, release, Fenced::removed)
            .await;
        let outcome = match released {
            Ok(Fenced::Deposed) => {
                // Not released: whoever holds the role next may try it.
                self.recent.remove(&(entry.name.clone(), entry.fence));
                self.deps.metrics.unlocker_released(&self.fleet, "deposed");
                return false;
            }
            Ok(Fenced::Done(r)) => {
                if self.status.problem.take().is_some() {
                    self.publish().await;
                }
                r
            }
            Err(e) => {
                tracing::warn!(fleet = %self.fleet, lock = %entry.name, error = %e.describe(), "auto-release failed");
                self.deps.metrics.unlocker_failed(&self.fleet, "store");
                let said = e.summary(&self.store.address()).line;
                self.status.problem = Some(format!("releasing {}: {said}", entry.name));
                self.publish().await;
                return true;
            }
        };
        let (word, outcome, detail) = match &outcome {
            Release::Released(_) => (
                "released",
                Outcome::Done,
                self.released_detail(&entry, leadership.term()),
            ),
            Release::NotHeld => ("not_held", Outcome::Changed, format!("{} is not held now", entry.name)),
            Release::Changed(now) if now.fence == entry.fence => (
                "changed",
                Outcome::Changed,
                format!(
                    "{} was extended since it was seen (revision {})",
                    entry.name, now.revision
                ),
            ),
            Release::Changed(now) => (
                "changed",
                Outcome::Changed,
                format!("{} is now fence {}", entry.name, now.fence),
            ),
        };
        self.deps.metrics.unlocker_released(&self.fleet, word);
        if outcome == Outcome::Done {
            self.status.released += 1;
            self.publish().await;
            tracing::info!(fleet = %self.fleet, lock = %entry.name, fence = entry.fence, "{detail}");
        }
        let audit = AuditEntry {
            at: self.clock.now(),
            actor: format!("unlocker@{}", self.cfg.replica),
            via: "unlocker".into(),
            action: Some(Action::Release),
            fleet: self.fleet.clone(),
            target: entry.name.clone(),
            fence: Some(entry.fence),
            reason: format!(
                "auto_unlock_at plus {} grace passed",
                human_duration(self.status.grace_ms)
            ),
            outcome: Some(outcome),
            detail,
            ..AuditEntry::default()
        };
        // The same door as admin actions: written, or queued in the spool
        // when the audit database does not take it within 1 s.
        if let Err(e) = self.deps.audit.record(&audit, permit).await {
            tracing::error!(error = %e, ?audit, "the audit log could not be written");
        }
        true
    }

    /// "auto-released by the unlocker (term 7): held by svc@h:1 since …; last
    /// heartbeat …; auto-unlock at …" — the holder's times on its own clock.
    fn released_detail(&self, e: &LockEntry, term: i64) -> String {
        let LockBody::Held(r) = &e.body else {
            return format!("auto-released fence {} (term {term})", e.fence);
        };
        format!(
            "auto-released by the unlocker (term {term}): held by {} since {}, last heartbeat {}, auto-unlock at {} \
             (the holder's clock); released at {} (this server's clock)",
            r.holder(),
            utc_datetime(r.acquired_at),
            utc_datetime(r.heartbeat_at),
            utc_datetime(r.auto_unlock_at),
            utc_datetime(self.clock.now()),
        )
    }
}

/// The hub's view the unlocker reads: soonest `auto_unlock_at` first.
fn expiry_view() -> ViewSpec {
    ViewSpec {
        sort: Sort {
            key: SortKey::Expiry,
            reverse: false,
        },
        limit: MAX_WINDOW,
        ..ViewSpec::default()
    }
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}

fn pending(e: &LockEntry, release_at: Millis) -> Pending {
    Pending {
        name: e.name.clone(),
        fence: e.fence,
        release_at,
    }
}

mod clock;
mod role;
#[cfg(test)]
mod tests;

pub use clock::ServerClock;
use role::{renew, AbortOnDrop};
