//! etcd's native mutexes and elections (`go.etcd.io/etcd/client/v3/concurrency`,
//! `etcdctl lock`, `etcdctl elect`) as a fleet: spec `etcd-mutex:ENDPOINTS#PREFIX`.
//!
//! Every group of keys `PREFIX<NAME>/<lease id in hex>` is the lock `NAME`
//! ([`layout`]): its holder is the key with the lowest create revision, shown
//! as a foreign lock whose session is its lease (in hex), with that lease's
//! TTL left and granted TTL, its fencing token the key's create revision (what
//! the library hands out), an election's value as the proposal; the other
//! keys are its waiters (sessions = leases). What the layout does not keep
//! (service, host, pid, purpose, heartbeats, deadlines, when a key was
//! written) is unknown, never invented; etcd sessions are not lockscope
//! sessions, so the fleet reports none.
//!
//! Admin actions ([`MutexFleet`]): a guarded force-release deletes the
//! holder's key only if it is still the acquisition seen (its create
//! revision, the fence) at the mod revision just read, in one transaction;
//! the holder's process is not told (its library learns only if it looks at
//! its key again), and the first waiter proceeds because each waiter watches
//! the delete of the key just before its own. A blacklisting revokes the
//! holder's lease, which deletes every key on it. The unlocker never acts
//! here: these locks end with their leases.

mod layout;
mod observer;

pub use observer::{MutexObserver, LEASE_POLL, LEASE_POLL_MAX};

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, LeaseTimeToLiveOptions, Txn, TxnOp};
use futures::future::BoxFuture;
use lockscope_model::fleet::{LeaseInfo, LEASE_KEYS_KEPT};
use lockscope_model::record::BlacklistRecord;
use lockscope_model::LockEntry;
use tokio::sync::OnceCell;

use self::layout::Table;
use crate::etcd::{prefix_end, timed, EtcdConfig};
use crate::fleet::{FleetStore, Foreign, Leadership, Release, Removed, UnlockerInfo};
use crate::protocol::Blacklisting;
use crate::spec::StoreSpec;
use crate::{now_ms, Observer, StoreError};

/// The part of an `etcd-mutex:` spec after the scheme: `ENDPOINT[,ENDPOINT…]#PREFIX`.
/// The prefix is required and taken byte for byte (`#/mx/` and `#/mx` differ:
/// the lock names are what follows it).
pub(crate) fn parse_spec(rest: &str) -> Result<StoreSpec, String> {
    let Some((endpoints, prefix)) = rest.split_once('#') else {
        return Err("etcd-mutex:ENDPOINTS#PREFIX needs '#' and the key prefix the mutexes live under".into());
    };
    let endpoints: Vec<String> = endpoints
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect();
    if endpoints.is_empty() {
        return Err("etcd-mutex: needs at least one endpoint before '#'".into());
    }
    if prefix.is_empty() {
        return Err("etcd-mutex: an empty prefix after '#' (it would watch every key in etcd)".into());
    }
    if prefix.chars().any(char::is_control) {
        return Err("etcd-mutex: the prefix contains a control character".into());
    }
    Ok(StoreSpec::EtcdMutex {
        endpoints,
        prefix: prefix.to_string(),
    })
}

/// Where the mutexes live, for people.
pub(crate) fn source(endpoints: &[String], prefix: &str) -> String {
    format!("etcd native mutexes {} {prefix}", endpoints.join(","))
}

/// The etcd connection settings of the lockscope layout, with `prefix` as is.
fn config(endpoints: Vec<String>, prefix: &str) -> EtcdConfig {
    let mut cfg = EtcdConfig::new(endpoints, prefix);
    cfg.prefix = prefix.to_string();
    cfg
}

/// The admin side of an `etcd-mutex:` fleet (see the module docs).
pub struct MutexFleet {
    cfg: EtcdConfig,
    /// Connected on the first action (an unreachable etcd is the observer's to report).
    client: OnceCell<Client>,
}

/// Lock `name` as read now: the entry and its holder key's mod revision.
struct Now {
    entry: LockEntry,
    key: Vec<u8>,
    modified: i64,
}

impl MutexFleet {
    pub(crate) fn new(endpoints: Vec<String>, prefix: &str) -> MutexFleet {
        MutexFleet {
            cfg: config(endpoints, prefix),
            client: OnceCell::new(),
        }
    }

    async fn client(&self) -> Result<Client, StoreError> {
        Ok(self.client.get_or_try_init(|| self.cfg.connect()).await?.clone())
    }

    /// Lock `name` now, its holder's lease read too (`None`: no key holds it).
    async fn read(&self, name: &str) -> Result<Option<Now>, StoreError> {
        crate::validate_name(name)?;
        let mut client = self.client().await?;
        let from = format!("{}{name}/", self.cfg.prefix);
        let opts = GetOptions::new().with_range(prefix_end(from.as_bytes()));
        let resp = timed(self.cfg.request_timeout, client.get(from.as_bytes(), Some(opts))).await?;
        let mut table = Table::default();
        for kv in resp.kvs() {
            let rest = String::from_utf8_lossy(kv.key());
            if let Some(rest) = rest.strip_prefix(self.cfg.prefix.as_str()) {
                table.put(kv.key(), rest, kv, None);
            }
        }
        let Some((key, lease, _, modified)) = table.holder(name).map(|(k, l, c, m)| (k.to_vec(), l, c, m)) else {
            return Ok(None);
        };
        table
            .leases
            .insert(lease, read_lease(&mut client, lease, self.cfg.request_timeout).await?);
        let Some((mut entry, _)) = table.derive(name) else {
            return Ok(None);
        };
        entry.revision = modified;
        Ok(Some(Now { entry, key, modified }))
    }
}

/// What `LeaseTimeToLive` says of lease `id` now, with (the first
/// [`LEASE_KEYS_KEPT`] of) the keys on it. A lease that is gone reads as TTL `-1`.
pub(crate) async fn read_lease(client: &mut Client, id: i64, limit: Duration) -> Result<LeaseInfo, StoreError> {
    let opts = LeaseTimeToLiveOptions::new().with_keys();
    let resp = timed(limit, client.lease_time_to_live(id, Some(opts))).await?;
    Ok(LeaseInfo {
        id: layout::lease_hex(id),
        granted_s: resp.granted_ttl(),
        ttl_s: resp.ttl(),
        read_at: now_ms(),
        keys: resp
            .keys()
            .iter()
            .take(LEASE_KEYS_KEPT)
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect(),
        keys_total: resp.keys().len() as u64,
    })
}

/// What a lease-hex session id names.
fn lease_of(session: &str) -> Result<i64, StoreError> {
    let hex = !session.is_empty() && session.len() <= 16 && session.bytes().all(|b| b.is_ascii_hexdigit());
    match hex.then(|| u64::from_str_radix(session, 16).ok()).flatten() {
        Some(lease) => Ok(lease as i64),
        None => Err(StoreError::Config(format!(
            "{session:?} is not an etcd lease id in hex: an etcd mutex's session is its lease"
        ))),
    }
}

/// The admin actions these locks refuse like every foreign family's.
const FOREIGN: Foreign = Foreign {
    no_unlocker: "the unlocker never acts on etcd's native mutexes: they end with their leases",
};

impl FleetStore for MutexFleet {
    fn source(&self) -> String {
        source(&self.cfg.endpoints, &self.cfg.prefix)
    }

    fn address(&self) -> String {
        crate::summary::address_of_endpoints(&self.cfg.endpoints)
    }

    fn writable(&self) -> bool {
        true
    }

    fn observer(&self) -> Box<dyn Observer> {
        Box::new(MutexObserver::new(self.cfg.endpoints.clone(), &self.cfg.prefix))
    }

    fn release<'a>(&'a self, name: &'a str, fence: i64) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(async move {
            let Some(now) = self.read(name).await? else {
                return Ok(Release::NotHeld);
            };
            if now.entry.fence != fence {
                return Ok(Release::Changed(now.entry));
            }
            // Still this acquisition (create revision), and not rewritten since
            // it was read (mod revision): only then is the key deleted.
            let txn = Txn::new()
                .when([
                    Compare::create_revision(now.key.clone(), CompareOp::Equal, fence),
                    Compare::mod_revision(now.key.clone(), CompareOp::Equal, now.modified),
                ])
                .and_then([TxnOp::delete(now.key.clone(), None)]);
            let mut client = self.client().await?;
            let resp = timed(self.cfg.request_timeout, client.txn(txn)).await?;
            if resp.succeeded() {
                return Ok(Release::Released(Removed {
                    revision: resp.header().map(|h| h.revision()),
                }));
            }
            Ok(match self.read(name).await? {
                Some(now) => Release::Changed(now.entry),
                None => Release::NotHeld,
            })
        })
    }

    /// A foreign lock shows no owner: `owner` is not compared (the fence names
    /// the acquisition: a key's create revision is never reused).
    fn release_seen<'a>(
        &'a self,
        name: &'a str,
        fence: i64,
        _owner: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        self.release(name, fence)
    }

    /// Revokes the session's lease: etcd deletes every key on it (each lock it
    /// holds or waits for), and its client's next renewal fails.
    fn blacklist<'a>(&'a self, entry: &'a BlacklistRecord) -> BoxFuture<'a, Result<Blacklisting, StoreError>> {
        Box::pin(async move {
            let lease = lease_of(&entry.session)?;
            let mut client = self.client().await?;
            let ttl = timed(self.cfg.request_timeout, client.lease_time_to_live(lease, None)).await?;
            if ttl.ttl() < 0 {
                return Err(StoreError::Config(format!(
                    "lease {} is not in etcd (expired or revoked already)",
                    entry.session
                )));
            }
            timed(self.cfg.request_timeout, client.lease_revoke(lease)).await?;
            Ok(Blacklisting::Written)
        })
    }

    fn session_registered<'a>(&'a self, session: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let lease = lease_of(session)?;
            let mut client = self.client().await?;
            let ttl = timed(self.cfg.request_timeout, client.lease_time_to_live(lease, None)).await?;
            Ok(ttl.ttl() >= 0)
        })
    }

    /// A revoked lease stays revoked: there is never an entry to lift.
    fn lift_blacklist<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        FOREIGN.lift_blacklist()
    }

    fn campaign<'a>(&'a self, _: &'a str, _: Duration) -> BoxFuture<'a, Result<Box<dyn Leadership>, StoreError>> {
        FOREIGN.campaign()
    }

    fn unlocker(&self) -> BoxFuture<'_, Result<Option<UnlockerInfo>, StoreError>> {
        FOREIGN.unlocker()
    }

    fn no_unlocker(&self) -> Option<&'static str> {
        FOREIGN.no_unlocker()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_form() {
        assert_eq!(
            StoreSpec::parse("etcd-mutex:http://a:1,http://b:2#/mx/").unwrap(),
            StoreSpec::EtcdMutex {
                endpoints: vec!["http://a:1".into(), "http://b:2".into()],
                prefix: "/mx/".into(),
            }
        );
        assert_eq!(
            StoreSpec::parse("etcd-mutex:http://a:1#/mx").unwrap(),
            StoreSpec::EtcdMutex {
                endpoints: vec!["http://a:1".into()],
                prefix: "/mx".into(),
            },
            "the prefix is taken byte for byte"
        );
        for (bad, why) in [
            ("etcd-mutex:http://a:1", "needs '#'"),
            ("etcd-mutex:http://a:1#", "an empty prefix"),
            ("etcd-mutex:#/mx/", "at least one endpoint"),
            ("etcd-mutex: , #/mx/", "at least one endpoint"),
            ("etcd-mutex:http://a:1#/m\nx/", "control character"),
        ] {
            let err = StoreSpec::parse(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
        let spec = StoreSpec::parse("etcd-mutex:http://a:1#/mx/").unwrap();
        assert_eq!(spec.source(), "etcd native mutexes http://a:1 /mx/");
        assert!(spec.open().is_ok());
    }

    #[test]
    fn a_session_is_a_lease_in_hex() {
        assert_eq!(lease_of("694d7a3b3c0c6a04").unwrap(), 0x694d7a3b3c0c6a04);
        for bad in ["", "zz", "a/b", "+1"] {
            assert!(lease_of(bad).is_err(), "{bad}");
        }
    }
}
