//! What lockscope knows of one ZooKeeper lock recipe's lock
//! ([`crate::fleet::FamilyDetail::Zookeeper`]): its znode and every contender
//! node under it in sequence order, the first `holders` of which hold it.

use serde::{Deserialize, Serialize};

use crate::time::Millis;

/// The most contenders kept per lock in [`ZkLock::nodes`] (the first, in
/// order: the holders and the next waiters); every waiter's session is still
/// a waiter of the lock.
pub const ZK_NODES_KEPT: usize = 100;

/// Longest znode data kept per contender (the rest is cut on a char boundary).
/// Fixed: lock recipes write an identifier there (kazoo: the client's), and
/// every contender's data rides in its lock's entry to every page.
pub const ZK_DATA_KEEP_BYTES: usize = 256;

/// Which library's node names a contender has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZkRecipe {
    /// The recipe in ZooKeeper's documentation: `lock-0000000007` (also
    /// `read-`/`write-` for its shared lock).
    Recipe,
    /// Apache Curator: `_c_<uuid>-lock-0000000007`, `_c_<uuid>-__READ__…`, `…__WRIT__…`.
    Curator,
    /// kazoo: `<uuid>__lock__0000000007`, `<uuid>__rlock__0000000007`.
    Kazoo,
}

/// One ephemeral sequential node contending for the lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZkNode {
    /// The node's name (its last path segment).
    pub name: String,
    /// Its sequence number (the node's last 10 digits).
    pub sequence: i64,
    /// A shared (read) lock's node: readers ahead of the first writer all hold.
    pub read: bool,
    pub recipe: ZkRecipe,
    /// The ephemeral owner: the session that made it, in hex (`0x…`).
    pub session: String,
    /// The zxid that created it: never reused, the force-release's fence.
    pub czxid: i64,
    /// Its data version (a versioned delete compares it).
    pub version: i32,
    /// When it was created, on the ZooKeeper server's clock (unix ms).
    pub ctime: Millis,
    /// Its data (lossy UTF-8, cut to [`ZK_DATA_KEEP_BYTES`]; `None`: empty):
    /// kazoo writes the contender's identifier there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

/// One lock: a znode whose children are the contenders.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZkLock {
    /// The lock's znode, absolute (`ROOT/NAME`).
    pub path: String,
    /// Contenders in sequence order: the first `holders` hold the lock (one,
    /// or every reader ahead of the first writer), the rest wait. At most
    /// [`ZK_NODES_KEPT`]: `nodes_total` says how many there are.
    pub nodes: Vec<ZkNode>,
    pub holders: u32,
    /// How many contenders the lock has (`nodes` may list fewer).
    #[serde(default)]
    pub nodes_total: u32,
    /// The holder session's negotiated timeout in ms, where the server says it
    /// (`None`: unknown: ZooKeeper tells a session's timeout only to its client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_timeout_ms: Option<i64>,
}

impl ZkLock {
    /// The node the lock is shown held by (the lowest sequence).
    pub fn holder(&self) -> Option<&ZkNode> {
        self.nodes.first()
    }

    /// The nodes that hold it.
    pub fn holding(&self) -> &[ZkNode] {
        &self.nodes[..(self.holders as usize).min(self.nodes.len())]
    }

    /// The nodes that wait, in order.
    pub fn waiting(&self) -> &[ZkNode] {
        &self.nodes[(self.holders as usize).min(self.nodes.len())..]
    }
}
