//! Observes the lock recipes under one ROOT: a persistent recursive watch on
//! ROOT (ZooKeeper 3.6+) is added first, then the tree below ROOT is read
//! level by level (children lists, then each contender's data and stat, many
//! requests in flight on the one connection) and sent as a reset; then each
//! watched event is applied: a created (or rewritten) node is read, a deleted
//! one dropped, and the locks it touched settled into table events. Events
//! that raced with the read are applied after it, each reading the node as it
//! is then, so the table converges.
//!
//! ZooKeeper does not replay a persistent watch's events missed while the
//! connection was down, so any disconnection ends the session here: the
//! store is reported unreachable and, after the backoff, a new session reads
//! the tree afresh (likewise after this session's own expiry). The liveness
//! probe is an `exists` of ROOT's parent on the observer's session
//! ([`crate::liveness`]).
//!
//! Holders' session timeouts come from the servers' `cons` ([`super::cons`]):
//! read with the tree, then every [`CONS_EVERY`], and within 1 s when a lock
//! gets a holder whose timeout is not known yet (only while `cons` answers).

use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use tokio::sync::mpsc;
use zookeeper_client::{AddWatchMode, Client, Error as ZkError, EventType, SessionState};

use super::cons::{self, CONS_EVERY};
use super::layout::{self, Table};
use super::{store_error, timed, ZkTarget, IN_FLIGHT};
use crate::backoff::Backoff;
use crate::link::{run_observer, Link, Session};
use crate::liveness::{while_alive, Heartbeat, Probe};
use crate::{Observer, ObserverEvent, StoreError};

/// The session timeout the observer asks for (the server bounds it by its
/// `minSessionTimeout`/`maxSessionTimeout`).
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// Watches the ZooKeeper lock recipes under one ROOT (see the module docs).
pub struct ZkObserver {
    target: ZkTarget,
    table: Table,
    /// Orders this observer's events and resets: bumped by every one.
    revision: i64,
    beat: std::sync::Arc<Heartbeat>,
}

impl ZkObserver {
    pub fn new(target: ZkTarget) -> ZkObserver {
        let table = Table::new(&target.root);
        ZkObserver {
            target,
            table,
            revision: 0,
            beat: Default::default(),
        }
    }

    fn next_revision(&mut self) -> i64 {
        self.revision += 1;
        self.revision
    }
}

impl Observer for ZkObserver {
    fn run(self: Box<Self>, events: mpsc::Sender<ObserverEvent>) -> BoxFuture<'static, ()> {
        let link = Link::new(
            events,
            Backoff::new(Duration::from_millis(200), Duration::from_secs(5)),
            self.target.address(),
        );
        Box::pin(run_observer(link, "zookeeper", *self))
    }
}

/// `exists` of a path on the observer's own session.
struct Exists(Client, String);

impl Probe for Exists {
    fn probe(&mut self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            timed(self.0.check_stat(&self.1)).await?;
            Ok(())
        })
    }
}

impl Session for ZkObserver {
    fn session<'a>(&'a mut self, link: &'a mut Link) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.target.connect(SESSION_TIMEOUT).await?;
            let parent = match self.target.root.rsplit_once('/') {
                Some(("", _)) | None => "/".to_string(),
                Some((p, _)) => p.to_string(),
            };
            let mut probe = Exists(client.clone(), parent);
            let beat = self.beat.clone();
            while_alive(self.observe(client, link), &mut probe, &beat).await
        })
    }
}

impl ZkObserver {
    /// One session: watch, read, then follow; `Ok` only when the hub is gone.
    async fn observe(&mut self, client: Client, link: &mut Link) -> Result<(), StoreError> {
        // Watched before the read, so no change after it goes unseen.
        let mut watcher = timed(client.watch(&self.target.root, AddWatchMode::PersistentRecursive)).await?;
        self.read(&client).await?;
        let timeouts = cons::read(&self.target.hosts).await;
        let mut told = !timeouts.is_empty();
        self.table.set_timeouts(timeouts);
        let mut last_cons = tokio::time::Instant::now();
        // A holder whose timeout is unknown: the servers are asked again within 1 s.
        let mut unknown = false;
        let revision = self.next_revision();
        if link.reset(self.table.snapshot(revision)).await.is_err() {
            return Ok(());
        }
        if link.live().await.is_err() {
            return Ok(());
        }
        loop {
            let soon = if told && unknown {
                Duration::from_secs(1)
            } else {
                CONS_EVERY
            };
            let event = tokio::select! {
                event = watcher.changed() => event,
                _ = tokio::time::sleep_until(last_cons + soon) => {
                    let timeouts = cons::read(&self.target.hosts).await;
                    (told, unknown, last_cons) = (!timeouts.is_empty(), false, tokio::time::Instant::now());
                    let names = self.table.set_timeouts(timeouts);
                    if !names.is_empty() {
                        let revision = self.next_revision();
                        let events = self.table.settle(names, revision);
                        if !events.is_empty() && link.events(events).await.is_err() {
                            return Ok(());
                        }
                    }
                    continue;
                }
            };
            self.beat.saw();
            let path = match event.event_type {
                EventType::Session => match event.session_state {
                    SessionState::SyncConnected => continue,
                    // Events missed meanwhile are not replayed: read afresh.
                    state => {
                        return Err(StoreError::unreachable_msg(format!(
                            "zookeeper: the observer's session went {state:?}"
                        )))
                    }
                },
                EventType::NodeChildrenChanged => continue,
                EventType::NodeCreated | EventType::NodeDataChanged | EventType::NodeDeleted => event.path,
            };
            let Some((name, child)) = self.table.split(&path) else {
                continue;
            };
            let (name, child) = (name.to_string(), child.to_string());
            if layout::parse_node(&child).is_none() {
                continue;
            }
            let changed = if event.event_type == EventType::NodeDeleted {
                self.table.delete(&name, &child)
            } else {
                match timed_read(&client, &path).await? {
                    Some((data, stat)) => match layout::node(&child, &stat, &data) {
                        Some(node) => {
                            self.table.put(&name, node);
                            true
                        }
                        None => self.table.delete(&name, &child),
                    },
                    None => self.table.delete(&name, &child),
                }
            };
            if !changed {
                continue;
            }
            unknown |= self.table.holder_timeout_unknown(&name);
            let revision = self.next_revision();
            let events = self.table.settle([name], revision);
            if !events.is_empty() && link.events(events).await.is_err() {
                return Ok(());
            }
        }
    }

    /// Reads every contender below ROOT into a fresh table (what was shown
    /// is kept for the reset's difference). A missing ROOT holds no locks.
    async fn read(&mut self, client: &Client) -> Result<(), StoreError> {
        self.table.clear();
        let mut dirs = vec![self.target.root.clone()];
        while !dirs.is_empty() {
            let lists = futures::stream::iter(dirs.drain(..).map(|dir| {
                let list = client.list_children(&dir);
                async move { (dir, list.await) }
            }))
            .buffer_unordered(IN_FLIGHT)
            .collect::<Vec<_>>()
            .await;
            self.beat.saw();
            let mut contenders = Vec::new();
            for (dir, list) in lists {
                let children = match list {
                    Ok(c) => c,
                    Err(ZkError::NoNode) => continue,
                    Err(e) => return Err(store_error(e)),
                };
                for child in children {
                    let path = if dir == "/" {
                        format!("/{child}")
                    } else {
                        format!("{dir}/{child}")
                    };
                    // A contender is ephemeral: it has no children to list.
                    if layout::parse_node(&child).is_some() {
                        contenders.push((path, child));
                    } else {
                        dirs.push(path);
                    }
                }
            }
            let reads = futures::stream::iter(contenders.into_iter().map(|(path, child)| {
                let read = client.get_data(&path);
                async move { (path, child, read.await) }
            }))
            .buffer_unordered(IN_FLIGHT)
            .collect::<Vec<_>>()
            .await;
            self.beat.saw();
            for (path, child, read) in reads {
                let (data, stat) = match read {
                    Ok(r) => r,
                    Err(ZkError::NoNode) => continue,
                    Err(e) => return Err(store_error(e)),
                };
                match (layout::node(&child, &stat, &data), self.table.split(&path)) {
                    (Some(node), Some((name, _))) => {
                        let name = name.to_string();
                        self.table.put(&name, node);
                    }
                    // Persistent, though its name looks sequential: it may have children.
                    (None, _) if stat.num_children > 0 => dirs.push(path),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// A node's data and stat (`None`: it is gone).
async fn timed_read(client: &Client, path: &str) -> Result<Option<(Vec<u8>, zookeeper_client::Stat)>, StoreError> {
    match super::timed_raw(client.get_data(path)).await? {
        Ok(r) => Ok(Some(r)),
        Err(ZkError::NoNode) => Ok(None),
        Err(e) => Err(store_error(e)),
    }
}
