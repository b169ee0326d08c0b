//! The websocket contract between the server and the browser (`/ws`), JSON text
//! frames.
//!
//! The server speaks first (`hello`); the browser then asks for a view
//! ([`ClientMsg::View`]: filter, sort, window of rows) and receives
//! [`ServerMsg::Window`] frames for it: the first carries the whole window
//! (`full`), each later one the current state of whatever changed in the window
//! since the previous one (absent means unchanged). The browser acknowledges every
//! frame it has applied ([`ClientMsg::Ack`]); the server sends at most
//! [`MAX_IN_FLIGHT`] unacknowledged frames and, while one is unacknowledged, at
//! most one per [`MIN_FRAME_INTERVAL_MS`] (an idle browser gets a change at
//! once), coalescing whatever happens meanwhile, so a slow
//! browser receives the present, late, and never a backlog. `status` reports the
//! store connection; `overview` every fleet's headline numbers.
//!
//! Bump [`PROTOCOL_VERSION`] on any change a deployed browser would misread.

use serde::{Deserialize, Serialize};

use crate::admin::{AuditEntry, AuditQuery, Viewer};
use crate::charts::Charts;
use crate::detail::{LockDetail, SessionList};
use crate::fleet::{Counts, StoreStatus};
use crate::review::Review;
use crate::time::Millis;
use crate::unlock::UnlockerStatus;
use crate::view::{ViewSpec, WindowFrame};

pub const PROTOCOL_VERSION: u32 = 3;

/// Longest client message the server reads.
pub const MAX_CLIENT_MSG_BYTES: usize = 4096;

/// Frames a subscriber may have unacknowledged before the server holds back.
pub const MAX_IN_FLIGHT: u64 = 2;

/// Shortest time between two frames to one subscriber while the first is
/// unacknowledged (one that acknowledged every frame is sent a change at once).
pub const MIN_FRAME_INTERVAL_MS: u64 = 25;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMsg {
    Hello {
        protocol: u32,
        server_version: String,
        fleet: String,
    },
    /// The subscriber's window: its first frame, or what changed since the last.
    Window(WindowFrame),
    /// The store connection changed (sent once on connect, then on every change).
    Status { server_time: Millis, status: StoreStatus },
    /// Answer to [`ClientMsg::Ping`], for round-trip time and clock offset.
    Pong { nonce: u64, server_time: Millis },
    /// The client sent something the server could not use; the connection closes.
    Error { reason: String },
    /// Every fleet's headline numbers, whenever they change (at most every
    /// [`OVERVIEW_EVERY_MS`]).
    Overview {
        server_time: Millis,
        fleets: Vec<FleetSummary>,
    },
    /// The watched lock, whenever it, its holder's session or its waiters change.
    Detail {
        server_time: Millis,
        detail: Box<LockDetail>,
    },
    /// The fleet's sessions, when they changed (at most every
    /// [`SESSIONS_EVERY_MS`]: heartbeats change them all the time).
    Sessions { server_time: Millis, sessions: SessionList },
}

/// Shortest time between two sessions lists to one watcher.
pub const SESSIONS_EVERY_MS: u64 = 1000;

/// What a detail or sessions page keeps live ([`ClientMsg::Watch`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Watch {
    Lock { name: String },
    Sessions,
}

/// Shortest time between two overviews to one subscriber.
pub const OVERVIEW_EVERY_MS: u64 = 1000;

/// One fleet's headline numbers, for the overview row.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FleetSummary {
    pub name: String,
    /// Where the fleet's locks live (credentials removed), e.g. `etcd http://10.0.0.5:2379`.
    pub source: String,
    pub status: StoreStatus,
    /// Whether the fleet's store accepts admin actions (a ShedLock table does not).
    #[serde(default)]
    pub writable: bool,
    /// What the fleet's unlocker is doing, as this server's replica sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unlocker: Option<UnlockerStatus>,
    /// The lock history is failing to write (`None`: recording, or kept by
    /// no history): since when, and the fleet's events lost since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<crate::history::NotRecording>,
    /// A polled or rescanned fleet's last full read of its store (`None`:
    /// the store has a change feed and is never polled, or no read yet):
    /// older than 3× its interval, the table is not live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub polled: Option<crate::polled::Polled>,
    #[serde(flatten)]
    pub counts: Counts,
}

/// Which page a URL names, with the data only that page shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "page", rename_all = "snake_case")]
pub enum Screen {
    /// `/`: the lock table (its window is [`Page::frame`]).
    #[default]
    Locks,
    /// `/lock?name=…`: one lock in full.
    Lock { detail: Box<LockDetail> },
    /// `/sessions`: the fleet's sessions.
    Sessions { sessions: SessionList },
    /// `/audit`: admin attempts matching `query`, newest first (not live: the
    /// page says when it was read).
    Audit {
        entries: Vec<AuditEntry>,
        query: AuditQuery,
        /// Why the URL's filter could not be used, if it could not.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// `/history`: the lock history matching a filter, oldest first, with the
    /// lock table at an instant when the URL names one (not live: the page says
    /// when it was read).
    History { review: Box<Review> },
    /// `/charts`: the contention charts for one window ending when it was
    /// rendered; the browser asks for them again every refresh and says when
    /// it last succeeded.
    Charts { charts: Box<Charts> },
    /// `/signin`: a token form (authentication is configured and the browser
    /// has no session).
    SignIn {
        /// Where to go after signing in (a path on this server).
        next: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

/// What the server embeds in a rendered page: the chosen fleet's view (its first
/// window and aggregates) and the overview of all fleets. Its size depends on the
/// window, never on the fleet. The page is complete without JavaScript and
/// hydrates from this same value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    #[serde(default)]
    pub screen: Screen,
    /// When the server rendered it (its clock).
    #[serde(default)]
    pub server_time: Millis,
    pub fleet: String,
    pub status: StoreStatus,
    pub view: ViewSpec,
    /// The window as a first (`full`) frame; `None` if the hub was unavailable.
    pub frame: Option<WindowFrame>,
    pub fleets: Vec<FleetSummary>,
    /// Why the URL's view could not be used (the default view is shown instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view_error: Option<String>,
    /// Who is looking and what they may do (the forms' CSRF token too).
    #[serde(default)]
    pub viewer: Viewer,
    /// The outcome of the viewer's own last action, after a form post
    /// (`?audit=ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<AuditEntry>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMsg {
    Ping {
        nonce: u64,
    },
    /// Show this view from now on; `id` is echoed in the frames that answer it.
    View {
        id: u32,
        view: ViewSpec,
    },
    /// Every frame up to `seq` has been applied (and painted).
    Ack {
        seq: u64,
    },
    /// Keep this lock or the sessions live (the detail and sessions pages),
    /// instead of a view.
    Watch {
        watch: Watch,
    },
}

impl ClientMsg {
    /// Parses a client frame, with a reason fit to send back when it is unusable.
    pub fn parse(text: &str) -> Result<ClientMsg, String> {
        if text.len() > MAX_CLIENT_MSG_BYTES {
            return Err(format!(
                "message of {} bytes exceeds {MAX_CLIENT_MSG_BYTES}",
                text.len()
            ));
        }
        let msg: ClientMsg = serde_json::from_str(text).map_err(|e| format!("unrecognised message: {e}"))?;
        match msg {
            ClientMsg::View { id, view } => Ok(ClientMsg::View {
                id,
                view: view.normalized()?,
            }),
            ClientMsg::Watch {
                watch: Watch::Lock { name },
            } if name.is_empty() || name.len() > 512 => Err(format!(
                "watch a lock by its name (1 to 512 bytes), not {} bytes",
                name.len()
            )),
            other => Ok(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_shape_is_stable() {
        let m = ServerMsg::Status {
            server_time: 5,
            status: StoreStatus::Live { since: 3 },
        };
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"type":"status","server_time":5,"status":{"state":"live","since":3}}"#
        );
        let f = ServerMsg::Window(WindowFrame {
            seq: 2,
            view_id: 1,
            server_time: 9,
            waited_ms: 1,
            full: false,
            total: 3,
            offset: 0,
            order: None,
            rows: vec![],
            aggregates: None,
        });
        assert_eq!(
            serde_json::to_string(&f).unwrap(),
            r#"{"type":"window","seq":2,"view_id":1,"server_time":9,"waited_ms":1,"total":3,"offset":0}"#,
            "absent means unchanged"
        );
        let back: ServerMsg = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn client_messages() {
        assert_eq!(
            ClientMsg::parse(r#"{"type":"ping","nonce":7}"#),
            Ok(ClientMsg::Ping { nonce: 7 })
        );
        assert_eq!(
            ClientMsg::parse(r#"{"type":"ack","seq":3}"#),
            Ok(ClientMsg::Ack { seq: 3 })
        );
        assert_eq!(
            ClientMsg::parse(r#"{"type":"view","id":1,"view":{"sort":{"key":"name"},"offset":10}}"#),
            Ok(ClientMsg::View {
                id: 1,
                view: ViewSpec {
                    sort: crate::view::Sort {
                        key: crate::view::SortKey::Name,
                        reverse: false
                    },
                    offset: 10,
                    ..ViewSpec::default()
                }
            })
        );
        assert!(ClientMsg::parse("{}").unwrap_err().contains("unrecognised"));
        assert!(ClientMsg::parse(r#"{"type":"view","id":1,"view":{"limit":100000}}"#)
            .unwrap_err()
            .contains("window of 100000 rows"));
        assert!(
            ClientMsg::parse(r#"{"type":"view","id":1,"view":{"filter":{"state":"sleepy"}}}"#)
                .unwrap_err()
                .contains("unrecognised")
        );
        assert_eq!(
            ClientMsg::parse(r#"{"type":"watch","watch":{"kind":"lock","name":"a/b"}}"#),
            Ok(ClientMsg::Watch {
                watch: Watch::Lock { name: "a/b".into() }
            })
        );
        assert!(
            ClientMsg::parse(r#"{"type":"watch","watch":{"kind":"lock","name":""}}"#)
                .unwrap_err()
                .contains("by its name")
        );
        assert!(ClientMsg::parse(&"x".repeat(MAX_CLIENT_MSG_BYTES + 1))
            .unwrap_err()
            .contains("exceeds"));
    }
}
