//! How many websockets are open: per identity (its actor), per source (the
//! peer address, an IPv6 peer's /64) and in all, each bounded by `[limits]`.
//! A socket holds its place with a [`Slot`], given back when the socket ends.
//! One past a limit is accepted and at once closed with a reason naming the
//! limit: `1008` (policy) for the per-identity and per-source limits, `1013`
//! (try again later) for the server's total. (A browser's script cannot read
//! the status of a refused upgrade, but it can read a close frame's reason.)

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::settings::Limits;

use super::close;

/// Which limit a socket hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    Identity,
    Address,
    Total,
}

impl Which {
    pub const ALL: [Which; 3] = [Which::Identity, Which::Address, Which::Total];

    /// The `limit` label in `/metrics`.
    pub fn as_str(self) -> &'static str {
        match self {
            Which::Identity => "identity",
            Which::Address => "address",
            Which::Total => "total",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Which::Identity => "ws_per_identity",
            Which::Address => "ws_per_address",
            Which::Total => "ws_total",
        }
    }
}

/// A socket refused: the limit it hit and that limit's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub which: Which,
    pub max: usize,
}

impl Refused {
    /// The close code: `1013` (try again later) when the server is full,
    /// `1008` (policy) when this identity or address has its share.
    pub fn code(&self) -> u16 {
        match self.which {
            Which::Total => close::TRY_AGAIN_LATER,
            _ => close::POLICY_VIOLATION,
        }
    }

    /// The close reason (fits a control frame).
    pub fn reason(&self) -> String {
        let (whose, key) = match self.which {
            Which::Identity => ("this identity", self.which.key()),
            Which::Address => ("this address", self.which.key()),
            Which::Total => ("this server", self.which.key()),
        };
        format!("too many websockets: {whose} has {} open ([limits] {key})", self.max)
    }
}

#[derive(Debug, Default)]
struct Open {
    /// The limits: per identity, per address, in all.
    max: (usize, usize, usize),
    total: usize,
    by_identity: HashMap<String, usize>,
    by_address: HashMap<Option<IpAddr>, usize>,
}

/// The open websockets and their limits (shared: `Arc`).
#[derive(Debug)]
pub struct Sockets {
    open: Mutex<Open>,
    /// Refused so far, by [`Which`] (for `/metrics`).
    refused: [AtomicU64; 3],
}

impl Sockets {
    pub fn new(limits: &Limits) -> Arc<Sockets> {
        let s = Arc::new(Sockets {
            open: Mutex::default(),
            refused: Default::default(),
        });
        s.set_limits(limits);
        s
    }

    /// Bounds sockets opened from now on by `limits`.
    pub fn set_limits(&self, limits: &Limits) {
        self.open.lock().unwrap().max = (limits.ws_per_identity, limits.ws_per_address, limits.ws_total);
    }

    /// The limits in force (for `/metrics`): per identity, per address, in all.
    pub fn limits(&self) -> (usize, usize, usize) {
        self.open.lock().unwrap().max
    }

    /// A place for a socket of `actor` from `peer`, or the limit it would pass.
    pub fn open(self: &Arc<Self>, actor: &str, peer: Option<IpAddr>) -> Result<Slot, Refused> {
        let address = crate::client::source(peer);
        let mut open = self.open.lock().unwrap();
        let (per_identity, per_address, total) = open.max;
        let refused = if open.total >= total {
            Some((Which::Total, total))
        } else if open.by_identity.get(actor).copied().unwrap_or(0) >= per_identity {
            Some((Which::Identity, per_identity))
        } else if open.by_address.get(&address).copied().unwrap_or(0) >= per_address {
            Some((Which::Address, per_address))
        } else {
            None
        };
        if let Some((which, max)) = refused {
            self.refused[which as usize].fetch_add(1, Ordering::Relaxed);
            return Err(Refused { which, max });
        }
        open.total += 1;
        *open.by_identity.entry(actor.to_string()).or_default() += 1;
        *open.by_address.entry(address).or_default() += 1;
        Ok(Slot {
            sockets: self.clone(),
            actor: actor.to_string(),
            address,
        })
    }

    /// Sockets refused so far for passing `which`.
    pub fn refused(&self, which: Which) -> u64 {
        self.refused[which as usize].load(Ordering::Relaxed)
    }

    /// Sockets open now.
    pub fn open_now(&self) -> usize {
        self.open.lock().unwrap().total
    }
}

/// One open socket's place; given back when dropped.
#[derive(Debug)]
pub struct Slot {
    sockets: Arc<Sockets>,
    actor: String,
    address: Option<IpAddr>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.sockets.open.lock().unwrap();
        open.total -= 1;
        fn give_back<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: &K) {
            if let Some(n) = map.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
        give_back(&mut open.by_identity, &self.actor);
        give_back(&mut open.by_address, &self.address);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_identity: usize, per_address: usize, total: usize) -> Limits {
        Limits {
            ws_per_identity: per_identity,
            ws_per_address: per_address,
            ws_total: total,
            ..Limits::default()
        }
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn each_limit_refuses_one_more_and_a_closed_socket_gives_its_place_back() {
        let s = Sockets::new(&limits(2, 3, 4));
        let a1 = s.open("alice", ip("10.0.0.1")).unwrap();
        let _a2 = s.open("alice", ip("10.0.0.2")).unwrap();
        let refused = s.open("alice", ip("10.0.0.3")).unwrap_err();
        assert_eq!(refused.which, Which::Identity);
        assert_eq!(refused.code(), 1008);
        assert_eq!(
            refused.reason(),
            "too many websockets: this identity has 2 open ([limits] ws_per_identity)"
        );
        drop(a1);
        let _a3 = s.open("alice", ip("10.0.0.3")).unwrap();
        let _b1 = s.open("bob", ip("10.0.0.9")).unwrap();
        let _c1 = s.open("carol", ip("10.0.0.9")).unwrap();
        let full = s.open("dave", ip("10.0.0.9")).unwrap_err();
        assert_eq!((full.which, full.code()), (Which::Total, 1013));
        assert_eq!(s.open_now(), 4);
        let s = Sockets::new(&limits(9, 2, 9));
        let _x = s.open("a", ip("2001:db8::1")).unwrap();
        let _y = s.open("b", ip("2001:db8::2")).unwrap();
        let same_64 = s.open("c", ip("2001:db8::3")).unwrap_err();
        assert_eq!(same_64.which, Which::Address, "an IPv6 peer's /64 is one address");
        assert_eq!(s.refused(Which::Address), 1);
        assert!(same_64.reason().len() <= 123, "fits a close frame");
    }
}
