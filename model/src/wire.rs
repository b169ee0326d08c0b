//! The websocket contract between the server and the browser (`/ws`), JSON text
//! frames. The server speaks first: `hello`, then a `snapshot`, then `delta`s in
//! `seq` order, with `status` whenever the store connection changes. Absent means
//! unchanged. A subscriber that falls behind receives `lagged` and a fresh
//! `snapshot`, never a silent gap.
//!
//! Bump [`PROTOCOL_VERSION`] on any change a deployed browser would misread.

use serde::{Deserialize, Serialize};

use crate::fleet::{Counts, FleetEvent, LockEntry, StoreStatus, Waiter};
use crate::time::Millis;

pub const PROTOCOL_VERSION: u32 = 1;

/// Longest client message the server reads.
pub const MAX_CLIENT_MSG_BYTES: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMsg {
    Hello {
        protocol: u32,
        server_version: String,
        fleet: String,
    },
    /// The whole view at hub sequence `seq`; deltas numbered `seq + 1`, `seq + 2`,
    /// … follow.
    Snapshot(Snapshot),
    /// Changes since the previous delta (`seq` is one more than the last), in order.
    Delta {
        seq: u64,
        server_time: Millis,
        events: Vec<FleetEvent>,
    },
    /// The store connection changed.
    Status { server_time: Millis, status: StoreStatus },
    /// This subscriber fell behind and `dropped` messages were discarded; a fresh
    /// snapshot follows.
    Lagged { dropped: u64 },
    /// Answer to [`ClientMsg::Ping`], for round-trip time and clock offset.
    Pong { nonce: u64, server_time: Millis },
    /// The client sent something the server could not use; the connection closes.
    Error { reason: String },
    /// Every fleet's headline numbers, sent every few seconds.
    Overview {
        server_time: Millis,
        fleets: Vec<FleetSummary>,
    },
}

/// One fleet's headline numbers, for the overview row.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetSummary {
    pub name: String,
    /// Where the fleet's locks live (credentials removed), e.g. `etcd http://10.0.0.5:2379`.
    pub source: String,
    pub status: StoreStatus,
    #[serde(flatten)]
    pub counts: Counts,
}

/// What the server embeds in a rendered page: the chosen fleet's table and the
/// overview of all fleets. The page is complete without JavaScript and hydrates
/// from this same value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    pub snapshot: Snapshot,
    pub fleets: Vec<FleetSummary>,
}

/// A fleet's table as one subscriber's view sees it, at hub sequence `seq`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub fleet: String,
    pub seq: u64,
    pub server_time: Millis,
    pub revision: i64,
    pub status: StoreStatus,
    pub locks: Vec<LockEntry>,
    #[serde(default)]
    pub waiters: Vec<Waiter>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMsg {
    Ping { nonce: u64 },
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
        serde_json::from_str(text).map_err(|e| format!("unrecognised message: {e}"))
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
        let d = ServerMsg::Delta {
            seq: 2,
            server_time: 9,
            events: vec![FleetEvent::Remove {
                name: "a".into(),
                revision: 4,
            }],
        };
        let back: ServerMsg = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn client_messages() {
        assert_eq!(
            ClientMsg::parse(r#"{"type":"ping","nonce":7}"#),
            Ok(ClientMsg::Ping { nonce: 7 })
        );
        assert!(ClientMsg::parse("{}").unwrap_err().contains("unrecognised"));
        assert!(ClientMsg::parse(&"x".repeat(MAX_CLIENT_MSG_BYTES + 1))
            .unwrap_err()
            .contains("exceeds"));
    }
}
