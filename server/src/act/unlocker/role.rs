//! Holding the fleet's unlocker role: campaigning for it (showing meanwhile
//! who holds it), and renewing it from a task of its own.

use std::sync::Arc;
use std::time::Duration;

use lockscope_store::fleet::Leadership;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

use super::{stopped, Unlocker};
use crate::metrics::Metrics;

impl Unlocker {
    /// Waits to be elected, showing meanwhile who holds the role. `None`: stopped.
    pub(super) async fn campaign(&mut self, stop: &mut watch::Receiver<bool>) -> Option<Box<dyn Leadership>> {
        let store = self.store.clone();
        let (replica, lease) = (self.cfg.replica.clone(), self.cfg.lease);
        // The campaign's last failure, shown with the status until it succeeds.
        let failure = Arc::new(std::sync::Mutex::new(None::<String>));
        let failed = failure.clone();
        // Its own task: the loop below awaits the store too (who holds the
        // role, what is due), and a campaign polled only between those awaits
        // could hold up what they wait for (the store's lazy connection).
        let mut campaign = tokio::spawn(async move {
            loop {
                match store.campaign(&replica, lease).await {
                    Ok(l) => return l,
                    Err(e) => {
                        tracing::warn!(error = %e.describe(), "campaigning for the unlocker role");
                        // One line on the page; the whole chain is in the log.
                        let said = e.summary(&store.address()).line;
                        *failed.lock().unwrap() = Some(format!("campaigning: {said}"));
                        // A configuration error (a ScyllaDB keyspace with only the
                        // published tables, say) will not go away by itself.
                        let again = match e {
                            lockscope_store::StoreError::Config(_) => Duration::from_secs(60),
                            _ => Duration::from_secs(1),
                        };
                        tokio::time::sleep(again).await;
                    }
                }
            }
        });
        let _abort = AbortOnDrop(campaign.abort_handle());
        let mut look = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                l = &mut campaign => match l {
                    Ok(l) => return Some(l),
                    Err(e) => {
                        tracing::error!(fleet = %self.fleet, error = %e, "the unlocker's campaign failed");
                        return None;
                    }
                },
                _ = stopped(stop) => return None,
                _ = look.tick() => {
                    let active = self.store.unlocker().await;
                    let mut problem = failure.lock().unwrap().clone();
                    let (active, term) = match active {
                        Ok(Some(u)) => (Some(u.candidate), Some(u.term)),
                        Ok(None) => (None, None),
                        Err(e) => {
                            tracing::debug!(error = %e.describe(), "reading the unlocker role");
                            let said = e.summary(&self.store.address()).line;
                            problem = Some(format!("cannot read the unlocker role: {said}"));
                            (None, None)
                        }
                    };
                    if (&active, term, &problem) != (&self.status.active, self.status.term, &self.status.problem) {
                        self.status.active = active;
                        self.status.term = term;
                        self.status.problem = problem;
                        self.publish().await;
                    }
                    if let Some(scan) = self.scan().await {
                        self.set_pending(scan.pending).await;
                    }
                }
            }
        }
    }
}

/// Renews the unlocker role every `lease / 3` until it is lost, and says so on
/// `lost`: when the store answers that it is gone, or when no renewal has
/// succeeded for a whole `lease` (measured from when the last successful one
/// was sent: by then the store may have elected another replica, and this one
/// must stop saying it is active; its releases were fenced by the term anyway).
pub(super) async fn renew(
    leadership: Arc<Box<dyn Leadership>>,
    lease: Duration,
    lost: watch::Sender<bool>,
    fleet: String,
    metrics: Arc<Metrics>,
) {
    let mut tick = tokio::time::interval(lease / 3);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last_ok = Instant::now();
    loop {
        tick.tick().await;
        let sent = Instant::now();
        // A renewal that hangs (a stalled link: no answer, no reset) counts as
        // failed once the lease has passed: waiting for the client's own
        // timeout kept a replica calling itself active for seconds after
        // another had taken the role.
        let left = lease.saturating_sub(last_ok.elapsed());
        match tokio::time::timeout(left, leadership.keep_alive()).await {
            Ok(Ok(true)) => last_ok = sent,
            Ok(Ok(false)) => break,
            Ok(Err(e)) => {
                tracing::warn!(%fleet, error = %e.describe(), "renewing the unlocker role");
                metrics.unlocker_failed(&fleet, "renew");
                if last_ok.elapsed() >= lease {
                    break;
                }
            }
            Err(_) => {
                tracing::warn!(%fleet, "renewing the unlocker role: no answer before the lease ran out");
                metrics.unlocker_failed(&fleet, "renew");
                break;
            }
        }
    }
    // At once: the unlocker's loop notices `lost` only between releases, and a
    // release in flight on a stalled link waits for its store call's timeout.
    metrics.set_unlocker_active(&fleet, false);
    let _ = lost.send(true);
}

/// Aborts a task when dropped (the campaign, when the unlocker stops first).
pub(super) struct AbortOnDrop(pub(super) tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
