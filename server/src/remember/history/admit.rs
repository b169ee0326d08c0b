//! What keeps history exports from starving the rest of the history: their
//! limits ([`ExportLimits`], `[history_exports]` in `lockscope.toml`) and the
//! admission of each export ([`History::admit_export`]): at most
//! `per_identity` running exports per identity and `total` in all; the next
//! one is refused ([`Refused`], answered `429` with `Retry-After`) and
//! counted. An admitted export holds an [`ExportPermit`] until it ends (read
//! to its end, cut, or stalled past the idle timeout).
//!
//! The other halves live beside it: exports read on a pool of their own, a
//! page at a time (`export.rs`), and the writer has a connection no reader
//! can take (`mod.rs`).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{History, HistoryStats};

/// What a refused export is told to wait before trying again.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Why an export was not started, and when to try again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub reason: String,
    pub retry_after: Duration,
}

/// The running exports, per identity.
#[derive(Debug)]
pub(super) struct Exports {
    running: Mutex<HashMap<String, usize>>,
    stats: Arc<HistoryStats>,
}

impl Exports {
    pub(super) fn new(stats: Arc<HistoryStats>) -> Exports {
        Exports {
            running: Mutex::new(HashMap::new()),
            stats,
        }
    }
}

/// An admitted export's place among the running ones, given back when dropped.
#[derive(Debug)]
pub struct ExportPermit {
    exports: Arc<Exports>,
    identity: String,
    idle: Duration,
}

impl ExportPermit {
    /// How long its client may take nothing before the download is ended.
    pub fn idle(&self) -> Duration {
        self.idle
    }

    pub(super) fn stats(&self) -> &Arc<HistoryStats> {
        &self.exports.stats
    }
}

impl Drop for ExportPermit {
    fn drop(&mut self) {
        let mut running = self.exports.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = running.get_mut(&self.identity) {
            *n -= 1;
            if *n == 0 {
                running.remove(&self.identity);
            }
        }
        self.exports.stats.exports_active.fetch_sub(1, Ordering::Relaxed);
    }
}

impl History {
    /// Starts an export for `identity`, or says why not: it already runs
    /// `per_identity` exports, or the server runs `total`.
    pub fn admit_export(&self, identity: &str) -> Result<ExportPermit, Refused> {
        let limits = &self.inner.stats.limits;
        let exports = &self.inner.exports;
        let mut running = exports.running.lock().unwrap_or_else(|e| e.into_inner());
        let mine = running.get(identity).copied().unwrap_or(0);
        let all: usize = running.values().sum();
        let reason = if mine >= limits.per_identity {
            Some(format!(
                "{identity} already runs {mine} history exports (at most {} at a time): let one finish, then try again",
                limits.per_identity
            ))
        } else if all >= limits.total {
            Some(format!(
                "the server already runs {all} history exports (at most {} at a time): try again shortly",
                limits.total
            ))
        } else {
            None
        };
        if let Some(reason) = reason {
            self.inner.stats.exports_refused.fetch_add(1, Ordering::Relaxed);
            return Err(Refused {
                reason,
                retry_after: RETRY_AFTER,
            });
        }
        *running.entry(identity.to_string()).or_default() += 1;
        self.inner.stats.exports_active.fetch_add(1, Ordering::Relaxed);
        Ok(ExportPermit {
            exports: exports.clone(),
            identity: identity.to_string(),
            idle: limits.idle,
        })
    }
}
