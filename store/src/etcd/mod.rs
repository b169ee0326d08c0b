//! The lockscope protocol on etcd v3.
//!
//! Layout under a configurable prefix (default `/lockscope/`): `locks/<name>` holds
//! the JSON [`LockRecord`](lockscope_model::LockRecord), `sessions/<id>` and
//! `waiters/<name>/<id>` live on the session's lease, `blacklist/<id>` marks a
//! refused session; `unlocker` names the dashboard replica elected to release
//! expired locks, on its lease (see `unlocker`). The lock key's `create_revision` is the fencing token; its
//! `mod_revision` identifies the exact value a reader saw. `docs/protocol.md` is
//! the authority.
//!
//! The client uses a lazily connecting, balanced gRPC channel: a request to a dead
//! endpoint waits rather than failing, so every request here runs under a timeout.

mod locks;
mod observer;
mod replay;
mod unlocker;

pub use locks::EtcdLocks;
pub use observer::EtcdObserver;
pub use unlocker::EtcdLeadership;

use std::future::Future;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

use crate::StoreError;

/// How to reach one etcd fleet.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    pub endpoints: Vec<String>,
    /// Key prefix of the lockscope layout, ending in `/`.
    pub prefix: String,
    /// Limit for connecting and for each unary request.
    pub request_timeout: Duration,
    /// A snapshot reads a span of keys of at most this many keys in one request,
    /// and cuts larger ones (see the observer).
    pub span_read_max: i64,
    /// The largest snapshot response accepted (tonic's default is 4 MiB).
    pub response_max_bytes: usize,
    /// Keys per page when a span's response would be larger than that.
    pub page_size: i64,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

impl EtcdConfig {
    pub fn new(endpoints: Vec<String>, prefix: impl Into<String>) -> EtcdConfig {
        let mut prefix = prefix.into();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        EtcdConfig {
            endpoints,
            prefix,
            request_timeout: Duration::from_secs(3),
            // About 25 MB of typical records per read, under a limit that allows
            // records of 5 KB.
            span_read_max: 50_000,
            response_max_bytes: 256 << 20,
            page_size: 500,
            backoff_min: Duration::from_millis(250),
            backoff_max: Duration::from_secs(10),
        }
    }

    pub(crate) fn locks_prefix(&self) -> String {
        format!("{}locks/", self.prefix)
    }

    pub(crate) fn lock_key(&self, name: &str) -> String {
        format!("{}locks/{name}", self.prefix)
    }

    pub(crate) fn waiters_prefix(&self) -> String {
        format!("{}waiters/", self.prefix)
    }

    pub(crate) fn sessions_prefix(&self) -> String {
        format!("{}sessions/", self.prefix)
    }

    pub(crate) fn blacklist_prefix(&self) -> String {
        format!("{}blacklist/", self.prefix)
    }

    pub(crate) fn session_key(&self, session: &str) -> String {
        format!("{}sessions/{session}", self.prefix)
    }

    pub(crate) fn blacklist_key(&self, session: &str) -> String {
        format!("{}blacklist/{session}", self.prefix)
    }

    /// The unlocker role's key: the elected replica's record, on its lease.
    pub(crate) fn unlocker_key(&self) -> String {
        format!("{}unlocker", self.prefix)
    }

    pub(crate) fn waiter_key(&self, name: &str, session: &str) -> String {
        // The session id comes last: lock names may contain '/', session ids may not.
        format!("{}waiters/{name}/{session}", self.prefix)
    }

    pub(crate) async fn connect(&self) -> Result<Client, StoreError> {
        let opts = ConnectOptions::new()
            .with_connect_timeout(self.request_timeout)
            // HTTP/2 pings notice a peer that vanished without closing the socket.
            .with_keep_alive(KEEP_ALIVE_EVERY, self.request_timeout)
            .with_keep_alive_while_idle(true);
        timed(self.request_timeout, Client::connect(&self.endpoints, Some(opts))).await
    }
}

/// HTTP/2 ping interval on every etcd connection: etcd's default
/// `--grpc-keepalive-min-time`; a client that pings more often while nothing
/// else moves is sent `GOAWAY too_many_pings` and loses its connection. So
/// pings alone notice a black-holed link only after 5 s plus their timeout;
/// the observer's liveness probe ([`EtcdProbe`]) brings that under 3 s.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(5);

/// The observer's liveness probe ([`crate::liveness`]): a linearizable count
/// of one key (the unlocker's), on the observer's own connection, so a link
/// that drops packets is noticed. Linearizable, not serializable: a member cut
/// off from its cluster's quorum still answers a serializable read from its
/// own state while its watch delivers nothing, so a stale table would read
/// live; a linearizable read needs the member's leader to confirm it still
/// leads a quorum (one ReadIndex round, no log entry), and a member without
/// one leaves it unanswered or refuses it. One such read a second per
/// dashboard is next to nothing for etcd.
pub(crate) struct EtcdProbe {
    kv: etcd_client::KvClient,
    key: String,
}

impl EtcdProbe {
    pub(crate) fn new(client: &Client, cfg: &EtcdConfig) -> EtcdProbe {
        EtcdProbe {
            kv: client.kv_client(),
            key: cfg.unlocker_key(),
        }
    }
}

impl EtcdProbe {
    /// One probe, answered within `limit`: what an observer asks before it
    /// reports a new connection live. A member cut off from its quorum accepts
    /// the connection and opens a watch (neither needs a leader), so without it
    /// a reconnect would read live until the next probe failed, and flap.
    pub(crate) async fn answered(&mut self, limit: Duration) -> Result<(), StoreError> {
        use crate::liveness::Probe;
        match tokio::time::timeout(limit, self.probe()).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout(limit)),
        }
    }
}

impl crate::liveness::Probe for EtcdProbe {
    fn probe(&mut self) -> futures::future::BoxFuture<'_, Result<(), StoreError>> {
        // Linearizable: etcd's default (no `with_serializable`).
        let opts = etcd_client::GetOptions::new().with_count_only();
        Box::pin(async move {
            self.kv.get(self.key.as_str(), Some(opts)).await?;
            Ok(())
        })
    }
}

/// One observer connection, for both etcd layouts: connects, reads live only
/// once the member answers a linearizable probe (it has a quorum), then runs
/// `observe` on the client while the probe keeps answering (a link that drops
/// packets says nothing: the probe notices it).
pub(crate) async fn while_connected<Fut>(
    cfg: &EtcdConfig,
    beat: &crate::liveness::Heartbeat,
    observe: impl FnOnce(Client) -> Fut,
) -> Result<(), StoreError>
where
    Fut: Future<Output = Result<(), StoreError>>,
{
    let client = cfg.connect().await?;
    let mut probe = EtcdProbe::new(&client, cfg);
    probe.answered(cfg.request_timeout).await?;
    crate::liveness::while_alive(observe(client), &mut probe, beat).await
}

/// Whether a watch response can be applied (`Ok(true)`), or etcd compacted
/// its history past `wanted`, the revision the watch started from
/// (`Ok(false)`: the caller reads the keys afresh, `afresh` says how, for the
/// log); a canceled watch is an error. The observers of both etcd layouts ask it.
pub(crate) fn watch_usable(resp: &etcd_client::WatchResponse, wanted: i64, afresh: &str) -> Result<bool, StoreError> {
    if resp.compact_revision() > 0 {
        tracing::info!(
            wanted,
            compacted = resp.compact_revision(),
            "history compacted, {afresh}"
        );
        return Ok(false);
    }
    if resp.canceled() {
        return Err(StoreError::backend_msg(format!(
            "etcd watch canceled: {}",
            resp.cancel_reason()
        )));
    }
    Ok(true)
}

/// Runs one etcd request under `limit`.
pub(crate) async fn timed<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(StoreError::from),
        Err(_) => Err(StoreError::Timeout(limit)),
    }
}

/// The first key after every key that starts with `prefix` (etcd's range end).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0] // the whole key space
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_ends() {
        assert_eq!(prefix_end(b"/l/locks/"), b"/l/locks0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }

    #[test]
    fn prefix_gets_a_slash() {
        assert_eq!(EtcdConfig::new(vec![], "/x").lock_key("a"), "/x/locks/a");
    }
}
