//! What a [`HubHandle`](super::HubHandle) asks its hub ([`Command`]); the hub
//! answers each on its own task (`task.rs`, `Hub::on_command`).

use lockscope_model::detail::{LockDetail, SessionList};
use lockscope_model::history::{NotRecording, ReleaseNote};
use lockscope_model::unlock::UnlockerStatus;
use lockscope_model::view::{ViewSpec, WindowFrame};
use lockscope_model::StoreStatus;
use lockscope_store::fleet::Removed;
use tokio::sync::{mpsc, oneshot, watch};

use super::Frame;
use crate::live::views::{ListCursor, SubId};

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
        /// A list API page's cursor (`None` for a page render).
        after: Option<ListCursor>,
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
