//! ZooKeeper lock recipes (the recipe in ZooKeeper's documentation, Apache
//! Curator's `InterProcessMutex` and read/write lock, kazoo's `Lock`) as a
//! fleet: spec `zk://HOST:PORT[,HOST:PORT…]/ROOT`.
//!
//! Every znode below ROOT whose children are contenders ([`layout`]) is the
//! lock named by its path below ROOT: its holder is the lowest sequence (a
//! read lock's, every reader ahead of the first writer), shown as a foreign
//! lock whose session is the holder node's ephemeral owner (hex), whose
//! fencing token is the node's czxid (never reused) and whose write time is
//! the node's ctime; the other contenders wait, in order. Each node's data is
//! kept where a library writes some (kazoo: the contender's identifier). What
//! ZooKeeper does not tell a third party (the holders' service, host, pid,
//! their sessions' timeouts unless the servers' `cons` tells them: [`cons`])
//! is unknown, never invented. The observer
//! ([`observer`]) keeps it live with one persistent recursive watch on ROOT.
//!
//! Admin actions ([`ZkFleet`]): a guarded force-release deletes the holder's
//! node only if it is still the node seen (its czxid, the fence) at the data
//! version seen (ZooKeeper's versioned delete); the next contender's watch
//! fires and it goes ahead. The holder's process is not told: Curator and
//! kazoo learn of it only through their connection state, the documented
//! recipe's holder not at all, so a release is no fence. Blacklisting is
//! refused: ZooKeeper cannot end another client's session. The unlocker never
//! acts here: these locks end with their sessions.

mod cons;
mod layout;
mod observer;

pub use observer::{ZkObserver, SESSION_TIMEOUT};

use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use lockscope_model::record::BlacklistRecord;
use lockscope_model::LockEntry;
use zookeeper_client::{Client, Error as ZkError};

use crate::fleet::{FleetStore, Foreign, Leadership, Release, Removed, UnlockerInfo};
use crate::protocol::Blacklisting;
use crate::spec::StoreSpec;
use crate::{Observer, StoreError};

/// How long one request (or a connect) may take before the store is taken
/// for unreachable.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Requests kept in flight while reading the tree (one connection pipelines
/// them). A pace, not a bound on what is held (the whole tree is read
/// either way): past it a read waits for an answer before the next request
/// goes. Fixed: 256 keeps a server's outstanding-request queue (1000 by
/// default, `globalOutstandingLimit`) well clear, and 1,024 read a
/// 100,000-lock tree no faster (docs/performance.md, "ZooKeeper").
const IN_FLIGHT: usize = 256;

/// Why a ZooKeeper lock's holder cannot be blacklisted (said to whoever asks).
pub const NO_BLACKLIST: &str = "ZooKeeper cannot end another client's session: only the session's own client \
     closes it, or the server expires it when the client stops heartbeating (release the lock instead: delete \
     its holder's node)";

/// One ZooKeeper ensemble and the root the locks live under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkTarget {
    /// `HOST:PORT` of each server, as written.
    pub hosts: Vec<String>,
    /// An absolute znode path, not `/`, with no trailing `/`.
    pub root: String,
}

/// Parses `zk://HOST:PORT[,HOST:PORT…]/ROOT` (the whole spec).
pub(crate) fn parse_spec(text: &str) -> Result<StoreSpec, String> {
    let rest = text
        .strip_prefix("zk://")
        .ok_or("expected zk://HOST:PORT[,HOST:PORT…]/ROOT")?;
    let Some((hosts, root)) = rest.split_once('/') else {
        return Err("zk://HOST:PORT[,HOST:PORT…]/ROOT needs '/ROOT': the znode the locks live under".into());
    };
    let mut list = Vec::new();
    for host in hosts.split(',') {
        let host = host.trim();
        let Some((name, port)) = host.rsplit_once(':') else {
            return Err(format!("{host:?} is not HOST:PORT (every server needs its port)"));
        };
        match port.parse::<u16>() {
            Ok(p) if p > 0 && !name.is_empty() => list.push(host.to_string()),
            _ => return Err(format!("{host:?} is not HOST:PORT with a port from 1 to 65535")),
        }
    }
    let root = format!("/{root}");
    if root == "/" {
        return Err("an empty ROOT after the servers (a root of '/' would watch every znode)".into());
    }
    if root.ends_with('/') {
        return Err(format!("ROOT {root:?} ends with '/' (a znode path never does)"));
    }
    if root.split('/').skip(1).any(|s| s.is_empty() || s == "." || s == "..") {
        return Err(format!("ROOT {root:?} has an empty, '.' or '..' segment"));
    }
    if root.chars().any(char::is_control) {
        return Err("ROOT contains a control character".into());
    }
    Ok(StoreSpec::Zookeeper(ZkTarget { hosts: list, root }))
}

impl ZkTarget {
    /// Where the locks live, for people.
    pub fn source(&self) -> String {
        format!("ZooKeeper lock recipes {} {}", self.hosts.join(","), self.root)
    }

    /// The servers, for people.
    pub fn address(&self) -> String {
        self.hosts.join(",")
    }

    /// A new session with the ensemble, within [`REQUEST_TIMEOUT`].
    pub(crate) async fn connect(&self, session_timeout: Duration) -> Result<Client, StoreError> {
        let hosts = self.hosts.join(",");
        let connect = Client::connector()
            .with_session_timeout(session_timeout)
            .with_connection_timeout(REQUEST_TIMEOUT)
            .with_fail_eagerly()
            .connect(&hosts);
        timed(connect).await
    }
}

/// `path` below `root`: `Some("a/b")` for `ROOT/a/b`.
pub(crate) fn below_root<'p>(root: &str, path: &'p str) -> Option<&'p str> {
    path.strip_prefix(root)?.strip_prefix('/').filter(|r| !r.is_empty())
}

/// The znode of lock `name`.
pub(crate) fn lock_path(root: &str, name: &str) -> String {
    format!("{root}/{name}")
}

/// `fut` within [`REQUEST_TIMEOUT`], its error said as a store error.
pub(crate) async fn timed<T>(fut: impl std::future::Future<Output = Result<T, ZkError>>) -> Result<T, StoreError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Ok(r) => r.map_err(store_error),
        Err(_) => Err(StoreError::Timeout(REQUEST_TIMEOUT)),
    }
}

/// `fut` within [`REQUEST_TIMEOUT`], ZooKeeper's answer kept for the caller to read.
pub(crate) async fn timed_raw<T>(
    fut: impl std::future::Future<Output = Result<T, ZkError>>,
) -> Result<Result<T, ZkError>, StoreError> {
    tokio::time::timeout(REQUEST_TIMEOUT, fut)
        .await
        .map_err(|_| StoreError::Timeout(REQUEST_TIMEOUT))
}

/// A lost connection or session is the store unreachable; anything else (a
/// refused request: ACLs, bad arguments) a backend error. The source is kept.
pub(crate) fn store_error(e: ZkError) -> StoreError {
    match e {
        ZkError::ConnectionLoss
        | ZkError::SessionExpired
        | ZkError::Timeout
        | ZkError::NoHosts
        | ZkError::ClientClosed
        | ZkError::SessionMoved => StoreError::unreachable("zookeeper", e),
        e => StoreError::backend("zookeeper", e),
    }
}

/// The contenders of lock `name` now, in order, each with its stat (`None`:
/// the lock's znode is gone). Nodes that vanish while read are left out.
pub(crate) async fn read_lock(
    client: &Client,
    root: &str,
    name: &str,
) -> Result<Option<(LockEntry, std::collections::BTreeSet<String>)>, StoreError> {
    let path = lock_path(root, name);
    let children = match timed_raw(client.list_children(&path)).await? {
        Ok(c) => c,
        Err(ZkError::NoNode) => return Ok(None),
        Err(e) => return Err(store_error(e)),
    };
    let reads = children
        .into_iter()
        .filter(|c| layout::parse_node(c).is_some())
        .map(|c| {
            let read = client.get_data(&format!("{path}/{c}"));
            async move { (c, read.await) }
        });
    let mut nodes = Vec::new();
    let mut results = futures::stream::iter(reads).buffer_unordered(IN_FLIGHT);
    while let Some((child, read)) = results.next().await {
        match read {
            Ok((data, stat)) => nodes.extend(layout::node(&child, &stat, &data)),
            Err(ZkError::NoNode) => {}
            Err(e) => return Err(store_error(e)),
        }
    }
    nodes.sort_by(|a, b| (a.sequence, &a.name).cmp(&(b.sequence, &b.name)));
    Ok(layout::derive(name, &path, nodes))
}

/// The admin side of a `zk://` fleet (see the module docs). Each action opens
/// a session of its own and closes it.
pub struct ZkFleet {
    target: ZkTarget,
}

impl ZkFleet {
    pub(crate) fn new(target: ZkTarget) -> ZkFleet {
        ZkFleet { target }
    }
}

/// The admin actions these locks refuse like every foreign family's.
const FOREIGN: Foreign = Foreign {
    no_unlocker: "the unlocker never acts on ZooKeeper locks: they end with their sessions",
};

impl FleetStore for ZkFleet {
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
        Box::new(ZkObserver::new(self.target.clone()))
    }

    /// Deletes the holder's node at the version seen, only if it is still
    /// the node the fence (its czxid) names.
    fn release<'a>(&'a self, name: &'a str, fence: i64) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(async move {
            crate::validate_name(name)?;
            let client = self.target.connect(SESSION_TIMEOUT).await?;
            let root = &self.target.root;
            let Some((entry, _)) = read_lock(&client, root, name).await? else {
                return Ok(Release::NotHeld);
            };
            if entry.fence != fence {
                return Ok(Release::Changed(entry));
            }
            let Some(holder) = zk_lock(&entry).and_then(|l| l.holder()).cloned() else {
                return Ok(Release::NotHeld);
            };
            let path = format!("{}/{}", lock_path(root, name), holder.name);
            match timed_raw(client.delete(&path, Some(holder.version))).await? {
                Ok(()) => return Ok(Release::Released(Removed { revision: None })),
                Err(ZkError::BadVersion | ZkError::NoNode) => {}
                Err(e) => return Err(store_error(e)),
            }
            // Gone or rewritten since it was read: say what holds it now.
            Ok(match read_lock(&client, root, name).await? {
                Some((now, _)) => Release::Changed(now),
                None => Release::NotHeld,
            })
        })
    }

    /// A foreign lock shows no owner: `owner` is not compared (the fence names
    /// the holder's node).
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

/// The ZooKeeper detail of a lock entry, if it is one.
pub fn zk_lock(entry: &LockEntry) -> Option<&lockscope_model::fleet::zookeeper::ZkLock> {
    match &entry.body {
        lockscope_model::LockBody::Foreign { detail: Some(d), .. } => match &**d {
            lockscope_model::fleet::FamilyDetail::Zookeeper(l) => Some(l),
            #[allow(unreachable_patterns)]
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_form() {
        // docs/operations.md: "The fleet spec is `zk://HOST:PORT[,HOST:PORT…]/ROOT` (this exact form)."
        assert_eq!(
            StoreSpec::parse("zk://a:2181,b:2182/locks/app").unwrap(),
            StoreSpec::Zookeeper(ZkTarget {
                hosts: vec!["a:2181".into(), "b:2182".into()],
                root: "/locks/app".into(),
            })
        );
        for (bad, why) in [
            ("zk://a:2181", "needs '/ROOT'"),
            ("zk://a:2181/", "an empty ROOT"),
            ("zk://a/locks", "not HOST:PORT"),
            ("zk://a:0/locks", "port from 1 to 65535"),
            ("zk://:2181/locks", "port from 1 to 65535"),
            ("zk://a:1,,b:2/locks", "not HOST:PORT"),
            ("zk://a:1/locks/", "ends with '/'"),
            ("zk://a:1/locks//x", "empty, '.' or '..'"),
            ("zk://a:1/locks/../x", "empty, '.' or '..'"),
            ("zk://a:1/lo\ncks", "control character"),
        ] {
            let err = StoreSpec::parse(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
        let spec = StoreSpec::parse("zk://a:1/locks").unwrap();
        assert_eq!(spec.source(), "ZooKeeper lock recipes a:1 /locks");
        assert_eq!(spec.address(), "a:1");
        assert!(spec.open().is_ok());
    }

    #[test]
    fn names_are_paths_below_root() {
        // docs/operations.md: "a lock's name is its znode path below ROOT".
        assert_eq!(below_root("/l", "/l/a/b"), Some("a/b"));
        assert_eq!(below_root("/l", "/l"), None);
        assert_eq!(below_root("/l", "/lx/a"), None);
        assert_eq!(lock_path("/l", "a/b"), "/l/a/b");
    }
}
