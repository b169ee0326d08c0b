//! The numbers of the limits on what clients can make the server hold
//! (`[limits]`): websockets refused, failed authentication, password hash
//! verifications, and the audit log's tallies of attempts without an identity.
//! Read at scrape time from the counters their owners keep.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;

use crate::audit::AuditLog;
use crate::auth::Auth;
use crate::ws::limit::{Sockets, Which};

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
        let (failed, limited, verified) = self.auth.counts();
        let (tallied, rows) = self.audit.tally_counts();
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
        Ok(())
    }
}
