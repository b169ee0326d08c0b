//! The numbers of the limits on what clients can make the server hold
//! (`[limits]`): websockets refused, failed authentication, password hash
//! verifications (and checks refused for a full queue), the audit log's
//! tallies of attempts without an identity, and each limit's value in force
//! (`lockscope_limit_<key>`, a gauge per `[limits]` key, as
//! `lockscope_history_export_limit_*` for `[history_exports]`). Read at scrape
//! time from the counters and limits their owners keep.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::auth::Auth;
use crate::live::subscriber::limit::{Sockets, Which};
use crate::remember::audit::AuditLog;

/// Encodes the limits' families (registered with the [`super::Metrics`] registry).
pub(super) struct LimitsCollector {
    pub(super) auth: Arc<Auth>,
    pub(super) sockets: Arc<Sockets>,
    pub(super) audit: AuditLog,
}

impl fmt::Debug for LimitsCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitsCollector").finish_non_exhaustive()
    }
}

impl Collector for LimitsCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let mut m = enc.encode_descriptor(
            "websockets_refused",
            "Websockets closed at once for passing a limit ([limits] ws_per_identity, ws_per_address, ws_total), by limit",
            None,
            MetricType::Counter,
        )?;
        for which in Which::ALL {
            ConstCounter::new(self.sockets.refused(which)).encode(m.encode_family(&[("limit", which.as_str())])?)?;
        }
        let (failed, limited, verified, busy) = self.auth.counts();
        let (tallied, rows, audit_sources) = self.audit.tally_counts();
        let counters = [
            (
                "auth_failures",
                "Tokens (API or sign-in) that were not accepted",
                failed,
            ),
            (
                "auth_rate_limited",
                "Requests answered 429: their source failed [limits] auth_failures_per_minute token checks this minute",
                limited,
            ),
            (
                "auth_verifications",
                "Password hash (Argon2) verifications run",
                verified,
            ),
            (
                "auth_verify_queue_full",
                "Token checks answered 503: [limits] auth_verify_queue checks were already waiting for a password hash",
                busy,
            ),
            (
                "audit_unauthenticated_attempts",
                "Admin attempts without an identity, tallied in the audit log per source and minute",
                tallied,
            ),
            (
                "audit_unauthenticated_rows",
                "Audit rows made of those tallies (one per source and minute)",
                rows,
            ),
        ];
        for (name, help, value) in counters {
            let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(value).encode(m)?;
        }
        let (per_identity, per_address, total) = self.sockets.limits();
        let limits = [
            ("ws_per_identity", per_identity as u64),
            ("ws_per_address", per_address as u64),
            ("ws_total", total as u64),
        ]
        .into_iter()
        .chain(self.auth.limits())
        .chain([("audit_sources_per_minute", audit_sources as u64)]);
        for (key, value) in limits {
            let name = format!("limit_{key}");
            let help = format!("The limit in force: [limits] {key}");
            let m = enc.encode_descriptor(&name, &help, None, MetricType::Gauge)?;
            ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(m)?;
        }
        // The audit spool (crate::remember::audit::spool): entries the audit database
        // has not taken yet, and its fixed bound.
        let (spooled, queued) = self.audit.spool_counts();
        let gauges = [
            (
                "audit_spooled",
                "Audit entries waiting in the spool for the audit database to take them",
                spooled as i64,
            ),
            (
                "audit_spool_max",
                "The most entries the audit spool holds; when full, admin actions are refused (503) before they act",
                crate::remember::audit::spool::SPOOL_MAX as i64,
            ),
        ];
        for (name, help, value) in gauges {
            let m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(value).encode(m)?;
        }
        let m = enc.encode_descriptor(
            "audit_queued",
            "Audit entries the audit database did not take at once and the spool queued",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(queued).encode(m)?;
        Ok(())
    }
}
