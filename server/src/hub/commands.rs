//! What a [`HubHandle`](super::HubHandle) asks its hub ([`Command`]), and how
//! the hub answers each command on its own task.

use lockscope_model::detail::{LockDetail, SessionList};
use lockscope_model::history::{NotRecording, ReleaseNote};
use lockscope_model::unlock::UnlockerStatus;
use lockscope_model::view::{ViewSpec, WindowFrame};
use lockscope_model::{ServerMsg, StoreStatus};
use lockscope_store::fleet::Removed;
use tokio::sync::{mpsc, oneshot, watch};

use super::{Frame, Hub};
use crate::views::SubId;

pub(super) enum Command {
    Subscribe {
        view_id: u32,
        view: ViewSpec,
        out: mpsc::Sender<Frame>,
        reply: oneshot::Sender<SubId>,
    },
    SetView {
        id: SubId,
        view_id: u32,
        view: ViewSpec,
    },
    Ack {
        id: SubId,
        seq: u64,
    },
    Unsubscribe(SubId),
    Render {
        view: ViewSpec,
        reply: oneshot::Sender<(WindowFrame, StoreStatus)>,
    },
    WatchLock {
        name: String,
        reply: oneshot::Sender<watch::Receiver<Option<LockDetail>>>,
    },
    WatchSessions {
        reply: oneshot::Sender<watch::Receiver<Option<SessionList>>>,
    },
    SessionNow {
        id: String,
        reply: oneshot::Sender<SessionNow>,
    },
    /// What this fleet's unlocker is doing (shown with the fleet's summary).
    Unlocker(UnlockerStatus),
    /// Whether the lock history is failing to write (shown with the fleet's summary).
    History(Option<NotRecording>),
    /// A release about to be tried, for the history ([`super::credit`]).
    AnnounceRelease {
        id: u64,
        name: String,
        fence: i64,
        note: ReleaseNote,
        reply: oneshot::Sender<()>,
    },
    /// The store's answer to an announced release: what it removed, if anything.
    ConfirmRelease {
        id: u64,
        name: String,
        fence: i64,
        removed: Option<Removed>,
    },
}

/// What the fleet knows of one session now (the admin checks act on it).
#[derive(Clone, Debug, Default)]
pub struct SessionNow {
    /// Registered (live or not yet timed out).
    pub known: bool,
    pub blacklist: Option<lockscope_model::BlacklistEntry>,
    /// The locks it holds.
    pub locks: Vec<String>,
}

impl Hub {
    pub(super) fn on_command(&mut self, cmd: Command) {
        let now = self.now();
        match cmd {
            Command::Subscribe {
                view_id,
                view,
                out,
                reply,
            } => {
                let id = self.views.subscribe(view_id, view, now);
                let status = ServerMsg::Status {
                    server_time: now.wall,
                    status: self.status.clone(),
                };
                self.subscribers.insert(id, out);
                if reply.send(id).is_err() {
                    return self.drop_subscriber(id);
                }
                self.deliver(id, &status);
            }
            Command::SetView { id, view_id, view } => self.views.set_view(id, view_id, view, now),
            Command::Ack { id, seq } => self.views.ack(id, seq),
            Command::Unsubscribe(id) => self.drop_subscriber(id),
            Command::Render { view, reply } => match self.views.render(&self.state, &view, now) {
                Ok(frame) => {
                    let _ = reply.send((frame, self.status.clone()));
                }
                Err(waiting) => self.renders.push((waiting, reply)),
            },
            Command::WatchLock { name, reply } => {
                let _ = reply.send(self.watchers.watch_lock(&self.state, &name));
            }
            Command::WatchSessions { reply } => {
                let _ = reply.send(self.watchers.watch_sessions(&self.state, &self.views));
            }
            Command::Unlocker(status) => {
                self.summary.send_if_modified(|s| {
                    let changed = s.unlocker.as_ref() != Some(&status);
                    s.unlocker = Some(status);
                    changed
                });
            }
            Command::History(history) => {
                self.summary.send_if_modified(|s| {
                    let changed = s.history != history;
                    s.history = history;
                    changed
                });
            }
            Command::AnnounceRelease {
                id,
                name,
                fence,
                note,
                reply,
            } => {
                if let Some(h) = &mut self.history {
                    h.announce(id, name, fence, note);
                }
                let _ = reply.send(());
            }
            Command::ConfirmRelease {
                id,
                name,
                fence,
                removed,
            } => {
                if let Some(h) = &mut self.history {
                    h.confirm(id, name, fence, removed);
                }
            }
            Command::SessionNow { id, reply } => {
                let sessions = self.state.sessions();
                let _ = reply.send(SessionNow {
                    known: sessions.sessions.contains_key(&id),
                    blacklist: sessions.blacklist.get(&id).cloned(),
                    locks: self.views.lock_names_of_session(&id),
                });
            }
        }
    }
}
