//! A ZooKeeper lock recipe's lock on its detail page: the recipe, every
//! contender node in order (who holds, who waits and since when, each node's
//! session and data), what a force-release does and does not do, and why its
//! holder cannot be blacklisted.

use leptos::prelude::*;
use lockscope_model::detail::LockDetail;
use lockscope_model::fleet::zookeeper::{ZkLock, ZkRecipe};
use lockscope_model::fleet::FamilyDetail;
use lockscope_model::time::{absolute_and_relative, human_duration, Millis};
use lockscope_model::LockEntry;

/// What a force-release of a ZooKeeper lock does, and what it cannot.
pub const ZK_RELEASE: &str = "A force-release deletes the holder's node, only if it is still the node shown \
     (its czxid, the fencing token) at the version read: ZooKeeper's versioned delete. The next contender's \
     watch fires and it goes ahead. The holder's process is not told: Curator and kazoo learn it only through \
     their connection state (they do not watch their own node), the documented recipe's holder not at all, so \
     a release is not a fence: the old holder may still be working.";

/// Why there is no blacklist button.
pub const ZK_NO_BLACKLIST: &str = "Blacklist: not possible. ZooKeeper cannot end another client's session: only \
     its own client closes it, or the server expires it when the client stops heartbeating.";

/// What ZooKeeper does not keep.
pub const ZK_UNKNOWN: &str = "Not kept by ZooKeeper, so unknown: the holder's service, host and pid (unless a \
     node's data names them), the purpose, when the holder got the lock (its node's creation is when it began \
     to contend).";

/// The library a recipe name stands for, for people.
pub fn recipe_text(r: ZkRecipe) -> &'static str {
    match r {
        ZkRecipe::Kazoo => "kazoo's Lock",
        ZkRecipe::Curator => "Apache Curator's InterProcessMutex or read/write lock",
        ZkRecipe::Recipe => "the lock recipe in ZooKeeper's documentation",
    }
}

/// The ZooKeeper lock in `family`, if it is one.
pub fn zk(family: &FamilyDetail) -> Option<&ZkLock> {
    match family {
        FamilyDetail::Zookeeper(l) => Some(l),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// One contender's line: its role, node, session, age and data.
pub fn node_line(lock: &ZkLock, i: usize, now: Millis) -> String {
    let n = &lock.nodes[i];
    let holds = i < lock.holders as usize;
    let role = match (holds, n.read) {
        (true, true) => "holds (shared, reader)".to_string(),
        (true, false) => "holds".to_string(),
        (false, read) => format!(
            "waits ({}{})",
            i + 1 - lock.holders as usize,
            if read { ", reader" } else { "" }
        ),
    };
    let data = n.data.as_deref().map(|d| format!(", data {d:?}")).unwrap_or_default();
    format!(
        "{role}: {} (session {}, created {} ago{data})",
        n.name,
        n.session,
        human_duration(now - n.ctime)
    )
}

/// The record section of a ZooKeeper lock.
pub fn record(entry: &LockEntry, lock: &ZkLock, d: &LockDetail, now: Millis) -> AnyView {
    let recipe = lock.holder().map(|n| recipe_text(n.recipe)).unwrap_or("a lock recipe");
    let holder = lock.holder().cloned();
    let nodes = (0..lock.nodes.len())
        .map(|i| {
            let n = &lock.nodes[i];
            let role = if i < lock.holders as usize { "holder" } else { "waiter" };
            view! { <li data-testid="detail-zk-node" data-role=role data-session=n.session.clone()>{node_line(lock, i, now)}</li> }
        })
        .collect_view();
    let created = holder
        .as_ref()
        .map(|n| absolute_and_relative(n.ctime, now))
        .unwrap_or_else(|| "unknown".into());
    let timeout = lock.holder_timeout_ms.map(|t| human_duration(t)).unwrap_or_else(|| {
        "unknown (ZooKeeper tells a session's timeout only to its own client, and the servers' cons is not allowed)"
            .into()
    });
    view! {
        <section class="record foreign">
            <h3>"ZooKeeper lock"</h3>
            <p data-testid="detail-foreign">
                "Held through "{recipe}": the children of "<code>{lock.path.clone()}</code>" are ephemeral "
                "sequential nodes; the lowest sequence holds (a read lock's readers ahead of the first writer "
                "share it), the rest wait in order. The holder's session is its node's ephemeral owner, its "
                "fencing token its node's czxid."
            </p>
            <dl>
                <dt>"holder's session"</dt>
                <dd data-testid="detail-holder"><code>{holder.as_ref().map(|n| n.session.clone()).unwrap_or_default()}</code></dd>
                <dt>"session timeout"</dt><dd data-testid="detail-zk-timeout">{timeout}</dd>
                <dt>"holder's node created (server's clock)"</dt><dd>{created}</dd>
                <dt>"fencing token (czxid)"</dt><dd data-testid="detail-fence">{entry.fence}</dd>
                <dt>"store revision"</dt><dd>{format!("{} (fleet at {})", entry.revision, d.store_revision)}</dd>
            </dl>
            <h4>"Contenders, in order"</h4>
            <ol class="zk-nodes" data-testid="detail-zk-nodes">{nodes}</ol>
            {(lock.nodes_total as usize > lock.nodes.len()).then(|| view! {
                <p class="hint">{format!("{} more contenders not listed (the first {} are).", lock.nodes_total as usize - lock.nodes.len(), lock.nodes.len())}</p>
            })}
            <p data-testid="detail-zk-release">{ZK_RELEASE}</p>
            <p data-testid="detail-zk-no-blacklist">{ZK_NO_BLACKLIST}</p>
            <p class="unknown" data-testid="detail-unknown">{ZK_UNKNOWN}</p>
        </section>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::fleet::zookeeper::ZkNode;

    #[test]
    fn each_contender_says_its_role_and_age() {
        let n = |name: &str, seq: i64, read: bool| ZkNode {
            name: name.into(),
            sequence: seq,
            read,
            recipe: ZkRecipe::Kazoo,
            session: format!("0x{seq}"),
            czxid: seq,
            version: 0,
            ctime: 1_000_000,
            data: (seq == 1).then(|| "worker-a".into()),
        };
        let lock = ZkLock {
            path: "/l/a".into(),
            nodes: vec![n("r1", 1, true), n("r2", 2, true), n("w3", 3, false)],
            holders: 2,
            nodes_total: 3,
            holder_timeout_ms: None,
        };
        let now = 1_005_000;
        assert_eq!(
            node_line(&lock, 0, now),
            "holds (shared, reader): r1 (session 0x1, created 5s ago, data \"worker-a\")"
        );
        assert!(node_line(&lock, 1, now).starts_with("holds (shared, reader): r2"));
        assert!(
            node_line(&lock, 2, now).starts_with("waits (1): w3"),
            "{}",
            node_line(&lock, 2, now)
        );
    }
}
