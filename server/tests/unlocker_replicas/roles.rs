//! Who held the unlocker role, as the fleet reports it, polled from the
//! test's start: each change with when it happened.

use super::*;

/// When (since the test began) the role changed, and to whom.
pub(super) type RoleChange = (Duration, Option<UnlockerInfo>);

/// Who held the unlocker role, polled every 25 ms from the test's start.
pub(super) struct RoleLog {
    pub(super) t0: Instant,
    pub(super) changes: Arc<Mutex<Vec<RoleChange>>>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

impl RoleLog {
    pub(super) fn start(fleet: Arc<dyn FleetStore>, t0: Instant) -> RoleLog {
        let changes = Arc::new(Mutex::new(Vec::<(Duration, Option<UnlockerInfo>)>::new()));
        let c = changes.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok(now) = fleet.unlocker().await {
                    let mut c = c.lock().unwrap();
                    if c.last().is_none_or(|(_, last)| *last != now) {
                        c.push((t0.elapsed(), now));
                    }
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        });
        RoleLog { t0, changes, task }
    }

    /// The terms seen since `since` (from the test's start), in order.
    pub(super) fn terms_since(&self, since: Duration) -> Vec<UnlockerInfo> {
        let c = self.changes.lock().unwrap();
        c.iter()
            .filter(|(at, _)| *at >= since)
            .filter_map(|(_, u)| u.clone())
            .collect()
    }

    pub(super) fn describe(&self) -> String {
        let c = self.changes.lock().unwrap();
        let lines: Vec<String> = c
            .iter()
            .map(|(at, u)| match u {
                Some(u) => format!("  [{at:>5.1?}] {} (term {})", u.candidate, u.term),
                None => format!("  [{at:>5.1?}] nobody"),
            })
            .collect();
        format!(
            "\n--- the unlocker role over time (now {:.1?}) ---\n{}",
            self.t0.elapsed(),
            lines.join("\n")
        )
    }
}

impl Drop for RoleLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}
