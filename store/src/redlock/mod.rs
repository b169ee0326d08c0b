//! Redlock over N independent Redis masters as a fleet: spec
//! `redlock+redis://[USER:PASSWORD@]HOST:PORT,HOST:PORT,…[/DB][?match=PATTERN]`
//! (redsync, node-redlock, Redlock-py: the same `SET key token NX PX ms` on
//! every master).
//!
//! One row per key name matching PATTERN on any master ([`observer`]). A
//! lock is held when one token holds the key on a quorum of the masters
//! (N/2+1): shown with how many agree ("2 of 3" when a master is down or
//! lacks the key). When no token reaches the quorum (two tokens on different
//! masters, or one token on a minority) the lock is *split*, with the
//! reason ([`combine`]). Its fence is [`crate::redis_set::fence_of`] the
//! token shown (the one on the most masters). Per-master state goes in
//! [`FamilyDetail::Redlock`].
//!
//! Admin ([`RedlockFleet`]): a guarded force-release deletes the key on
//! every master where it still holds the token the fence names (the
//! libraries' compare-and-delete script), and answers `Changed` (409) when
//! the token is on none. The holder is not told. Blacklisting is refused
//! (Redis has no sessions); the unlocker never acts here.

mod observer;

pub use observer::RedlockObserver;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use lockscope_model::fleet::redis::{RedlockMaster, RedlockState};
use lockscope_model::fleet::{FamilyDetail, TokenKey};
use lockscope_model::record::BlacklistRecord;
use lockscope_model::{LockBody, LockEntry};

use crate::fleet::{FleetStore, Foreign, Leadership, Release, Removed, UnlockerInfo};
use crate::protocol::Blacklisting;
use crate::redis_set::read::{read_keys, Read};
use crate::redis_set::{fence_of, timed, RedisTarget, COMPARE_AND_DELETE, NO_BLACKLIST};
use crate::spec::StoreSpec;
use crate::{now_ms, Observer, StoreError};

/// The masters of one Redlock deployment: what `redlock+redis://…` named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedlockTarget {
    /// One target per master (same credentials, database and pattern).
    pub masters: Vec<RedisTarget>,
}

/// Parses `redlock+redis://[USER:PASSWORD@]H1:P1,H2:P2,…[/DB][?match=PATTERN]`.
pub(crate) fn parse_spec(text: &str) -> Result<StoreSpec, String> {
    let rest = text
        .strip_prefix("redlock+redis://")
        .ok_or("expected redlock+redis://HOST:PORT,HOST:PORT,…")?;
    let (userinfo, after) = match rest.rsplit_once('@') {
        Some((u, a)) => (format!("{u}@"), a),
        None => (String::new(), rest),
    };
    let (hosts, tail) = after.split_at(after.find(['/', '?']).unwrap_or(after.len()));
    let mut masters: Vec<RedisTarget> = Vec::new();
    for host in hosts.split(',') {
        let t = match crate::redis_set::parse_spec(&format!("redis://{userinfo}{}{tail}", host.trim()))? {
            StoreSpec::Redis(t) => t,
            _ => unreachable!("redis_set::parse_spec gives redis specs"),
        };
        if masters.iter().any(|m| m.address() == t.address()) {
            return Err(format!("master {} is named twice", t.address()));
        }
        masters.push(t);
    }
    if masters.len() < 2 {
        return Err("Redlock needs two masters or more (HOST:PORT,HOST:PORT,…); one instance is redis://…".into());
    }
    Ok(StoreSpec::Redlock(RedlockTarget { masters }))
}

impl RedlockTarget {
    /// Where the locks live, for people: no password.
    pub fn source(&self) -> String {
        let first = &self.masters[0];
        format!(
            "Redlock over {} masters redlock+redis://{}{}/{} match {}",
            self.masters.len(),
            first.user().map(|u| format!("{u}@")).unwrap_or_default(),
            self.address(),
            first.db,
            first.pattern
        )
    }

    /// `HOST:PORT,HOST:PORT,…`.
    pub fn address(&self) -> String {
        self.masters
            .iter()
            .map(RedisTarget::address)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// How many masters must agree: N/2+1.
    pub fn quorum(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    fn addresses(&self) -> Vec<String> {
        self.masters.iter().map(RedisTarget::address).collect()
    }
}

/// What one master holds under a key: `None` unreachable, `Some(None)` no
/// key, `Some(Some((token, pttl)))` the token and its `PTTL`.
pub(crate) type MasterRead = Option<Option<(Vec<u8>, i64)>>;

/// Lock `name` from what each master holds (in the spec's order); `None`
/// when no master holds the key. See the module docs.
pub(crate) fn combine(name: &str, addresses: &[String], reads: &[MasterRead], revision: i64) -> Option<LockEntry> {
    let mut counts: BTreeMap<&[u8], u32> = BTreeMap::new();
    for (token, _) in reads.iter().flatten().flatten() {
        *counts.entry(token.as_slice()).or_default() += 1;
    }
    // The token on the most masters; a tie goes to the smallest token.
    let (best, agree) = counts
        .iter()
        .fold(None, |acc: Option<(&[u8], u32)>, (t, c)| match acc {
            Some((_, a)) if a >= *c => acc,
            _ => Some((t, *c)),
        })?;
    let n = reads.len();
    let quorum = (n / 2 + 1) as u32;
    let down = reads.iter().filter(|r| r.is_none()).count();
    let split = (agree < quorum).then(|| {
        let down = if down > 0 {
            format!("; {down} master(s) unreachable")
        } else {
            String::new()
        };
        if counts.len() > 1 {
            let held: Vec<String> = counts
                .iter()
                .map(|(t, c)| format!("{} on {c}", String::from_utf8_lossy(t)))
                .collect();
            format!(
                "no token holds a quorum of {quorum} of {n} masters: {}{down}",
                held.join(", ")
            )
        } else {
            format!("held on {agree} of {n} masters only, short of the quorum of {quorum}{down}")
        }
    });
    let ttl = reads
        .iter()
        .flatten()
        .flatten()
        .filter(|(t, p)| t.as_slice() == best && *p >= 0)
        .map(|(_, p)| *p)
        .min();
    let masters = addresses
        .iter()
        .zip(reads)
        .map(|(address, r)| RedlockMaster {
            address: address.clone(),
            reachable: r.is_some(),
            token: r
                .as_ref()
                .and_then(|k| k.as_ref())
                .map(|(t, _)| String::from_utf8_lossy(t).into_owned()),
            ttl_ms: r
                .as_ref()
                .and_then(|k| k.as_ref())
                .and_then(|(_, p)| (*p >= 0).then_some(*p)),
        })
        .collect();
    Some(LockEntry {
        name: name.to_string(),
        fence: fence_of(best),
        revision,
        body: LockBody::Foreign {
            session: None,
            written_at: None,
            lease: None,
            proposal: None,
            key: Some(Box::new(TokenKey {
                token: String::from_utf8_lossy(best).into_owned(),
                ttl_ms: ttl,
                read_at: now_ms(),
            })),
            detail: Some(Box::new(FamilyDetail::Redlock(RedlockState {
                quorum,
                agree,
                split,
                masters,
            }))),
        },
    })
}

/// What one master's key reads as (strings only: Redlock is `SET NX PX`).
pub(crate) fn master_read(read: Option<&Read>) -> Option<(Vec<u8>, i64)> {
    match read {
        Some(Read::Token { token, pttl, .. }) => Some((token.clone(), *pttl)),
        _ => None,
    }
}

/// The admin side of a `redlock+redis://` fleet (see the module docs).
pub struct RedlockFleet {
    target: RedlockTarget,
}

impl RedlockFleet {
    pub(crate) fn new(target: RedlockTarget) -> RedlockFleet {
        RedlockFleet { target }
    }

    /// Each master's connection and its key `name` (`None`: unreachable).
    async fn read_all(&self, name: &str) -> Vec<Option<(redis::aio::MultiplexedConnection, Option<(Vec<u8>, i64)>)>> {
        let reads = self.target.masters.iter().map(|m| async move {
            let mut con = m.connect().await.ok()?;
            let got = read_keys(&mut con, vec![name.to_string()], None).await.ok()?;
            Some((con, master_read(got.first())))
        });
        futures::future::join_all(reads).await
    }

    fn entry(
        &self,
        name: &str,
        reads: &[Option<(redis::aio::MultiplexedConnection, Option<(Vec<u8>, i64)>)>],
    ) -> Option<LockEntry> {
        let reads: Vec<MasterRead> = reads.iter().map(|r| r.as_ref().map(|(_, k)| k.clone())).collect();
        combine(name, &self.target.addresses(), &reads, 0)
    }
}

/// The admin actions these locks refuse like every foreign family's.
const FOREIGN: Foreign = Foreign {
    no_unlocker: "the unlocker never acts on Redis locks: they end with their TTL",
};

impl FleetStore for RedlockFleet {
    fn source(&self) -> String {
        self.target.source()
    }

    fn address(&self) -> String {
        self.target.address()
    }

    fn writable(&self) -> bool {
        true
    }

    fn observer(&self) -> Box<dyn Observer> {
        Box::new(RedlockObserver::new(self.target.clone()))
    }

    fn release<'a>(&'a self, name: &'a str, fence: i64) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(async move {
            crate::validate_name(name)?;
            let mut reads = self.read_all(name).await;
            if reads.iter().all(Option::is_none) {
                return Err(StoreError::unreachable_msg(format!(
                    "redis: no Redlock master answered ({})",
                    self.target.address()
                )));
            }
            let mut deleted = 0;
            for (con, key) in reads.iter_mut().flatten() {
                let Some((token, _)) = key.as_ref().filter(|(t, _)| fence_of(t) == fence) else {
                    continue;
                };
                // The libraries' own unlock, on every master where the token still holds.
                let n: i64 = timed(
                    redis::cmd("EVAL")
                        .arg(COMPARE_AND_DELETE)
                        .arg(1)
                        .arg(name)
                        .arg(token)
                        .query_async(con),
                )
                .await
                .unwrap_or(0);
                deleted += n;
            }
            if deleted > 0 {
                return Ok(Release::Released(Removed { revision: None }));
            }
            Ok(match self.entry(name, &self.read_all(name).await) {
                Some(now) => Release::Changed(now),
                None => Release::NotHeld,
            })
        })
    }

    /// A Redis lock shows no owner: `owner` is not compared.
    fn release_seen<'a>(
        &'a self,
        name: &'a str,
        fence: i64,
        _owner: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        self.release(name, fence)
    }

    fn blacklist<'a>(&'a self, _: &'a BlacklistRecord) -> BoxFuture<'a, Result<Blacklisting, StoreError>> {
        Foreign::no_blacklist(NO_BLACKLIST)
    }

    fn session_registered<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Foreign::no_blacklist(NO_BLACKLIST)
    }

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
mod tests;
