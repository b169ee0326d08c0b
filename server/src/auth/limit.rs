//! Failed authentication, per source: a source that fails `per_minute` token
//! checks within a minute gets `429 Too Many Requests` (with `Retry-After`)
//! for every request carrying a token until that minute is over, and costs no
//! more password hashing meanwhile.
//!
//! A source is a peer address, an IPv6 peer's /64 (one host usually holds a
//! whole /64). At most `capacity` sources are tracked; when full, the one whose
//! minute started first is forgotten.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long a source's failures are counted together.
pub const WINDOW: Duration = Duration::from_secs(60);

pub(crate) use crate::client::source;

/// A source's failures in its current window.
#[derive(Clone, Copy, Debug)]
struct Window {
    started: Instant,
    failures: u32,
}

/// Failed token checks per source in the current minute (see the module docs).
#[derive(Debug)]
pub struct Failures {
    per_minute: u32,
    capacity: usize,
    windows: Mutex<HashMap<Option<IpAddr>, Window>>,
    /// Failed checks counted so far (for `/metrics`).
    failed: AtomicU64,
    /// Requests answered `429` so far (for `/metrics`).
    limited: AtomicU64,
}

impl Failures {
    pub fn new(per_minute: u32, capacity: usize) -> Failures {
        Failures {
            per_minute: per_minute.max(1),
            capacity: capacity.max(1),
            windows: Mutex::new(HashMap::new()),
            failed: AtomicU64::new(0),
            limited: AtomicU64::new(0),
        }
    }

    /// Failed checks allowed per source and minute.
    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// Sources tracked at most (`[limits] auth_sources`).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// `Some(how long until it may try again)` when `source` has used up its
    /// failures for this minute.
    pub fn blocked(&self, source: Option<IpAddr>) -> Option<Duration> {
        let now = Instant::now();
        let windows = self.windows.lock().unwrap();
        let w = windows.get(&source)?;
        let ends = w.started + WINDOW;
        (w.failures >= self.per_minute && ends > now).then(|| ends - now)
    }

    /// Counts one failed check of `source`.
    pub fn failed(&self, source: Option<IpAddr>) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut windows = self.windows.lock().unwrap();
        if windows.len() >= self.capacity && !windows.contains_key(&source) {
            // Ended windows go first; then the oldest.
            windows.retain(|_, w| w.started + WINDOW > now);
            if windows.len() >= self.capacity {
                if let Some(oldest) = windows.iter().min_by_key(|(_, w)| w.started).map(|(k, _)| *k) {
                    windows.remove(&oldest);
                }
            }
        }
        let w = windows.entry(source).or_insert(Window {
            started: now,
            failures: 0,
        });
        if w.started + WINDOW <= now {
            *w = Window {
                started: now,
                failures: 0,
            };
        }
        w.failures = w.failures.saturating_add(1);
    }

    /// Counts a request answered `429`.
    pub fn count_limited(&self) {
        self.limited.fetch_add(1, Ordering::Relaxed);
    }

    /// Failed checks so far, and requests answered `429` so far.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.failed.load(Ordering::Relaxed),
            self.limited.load(Ordering::Relaxed),
        )
    }

    /// Sources tracked now (at most the capacity).
    pub fn tracked(&self) -> usize {
        self.windows.lock().unwrap().len()
    }
}

/// The client's address: the peer's, or for a peer among `proxies` (`[limits]
/// proxies`) the last address of the last `X-Forwarded-For` header (the one
/// that proxy appended). A proxy's request without a readable one is the
/// proxy's own.
pub fn client(headers: &axum::http::HeaderMap, peer: Option<IpAddr>, proxies: &[IpAddr]) -> Option<IpAddr> {
    let peer = peer?;
    if !proxies.contains(&peer) {
        return Some(peer);
    }
    let forwarded = headers.get_all("x-forwarded-for").iter().next_back();
    let last = forwarded
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit(',').next())
        .map(str::trim);
    let parsed = last.and_then(|a| {
        a.parse::<IpAddr>()
            .ok()
            .or_else(|| a.parse::<std::net::SocketAddr>().ok().map(|s| s.ip()))
    });
    Some(parsed.unwrap_or(peer))
}

/// `d` in whole seconds, rounded up (what `Retry-After` says).
pub fn secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_is_blocked_for_the_rest_of_its_minute_after_its_failures() {
        let f = Failures::new(3, 100);
        for _ in 0..2 {
            f.failed(ip("10.0.0.1"));
        }
        assert_eq!(f.blocked(ip("10.0.0.1")), None, "two of three failures");
        tokio::time::advance(Duration::from_secs(20)).await;
        f.failed(ip("10.0.0.1"));
        assert_eq!(f.blocked(ip("10.0.0.1")), Some(Duration::from_secs(40)));
        assert_eq!(f.blocked(ip("10.0.0.2")), None, "another source is not");
        tokio::time::advance(Duration::from_secs(40)).await;
        assert_eq!(f.blocked(ip("10.0.0.1")), None, "the minute is over");
        f.failed(ip("10.0.0.1"));
        assert_eq!(f.blocked(ip("10.0.0.1")), None, "a new minute, a new count");
    }

    #[tokio::test(start_paused = true)]
    async fn the_map_stays_bounded_and_forgets_the_oldest() {
        let f = Failures::new(1, 3);
        for i in 1..=3 {
            f.failed(ip(&format!("10.0.0.{i}")));
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        f.failed(ip("10.0.0.4"));
        assert_eq!(f.tracked(), 3);
        assert_eq!(f.blocked(ip("10.0.0.1")), None, "the oldest was forgotten");
        assert!(f.blocked(ip("10.0.0.2")).is_some() && f.blocked(ip("10.0.0.4")).is_some());
    }

    #[test]
    fn behind_a_listed_proxy_the_client_is_the_last_forwarded_address() {
        let mut h = axum::http::HeaderMap::new();
        h.append("x-forwarded-for", "198.51.100.7".parse().unwrap());
        h.append("x-forwarded-for", "10.9.9.9, 203.0.113.5".parse().unwrap());
        let proxy = ip("127.0.0.1");
        let proxies = [proxy.unwrap()];
        assert_eq!(
            client(&h, proxy, &proxies),
            ip("203.0.113.5"),
            "what the proxy appended"
        );
        assert_eq!(
            client(&h, proxy, &[]),
            proxy,
            "not a listed proxy: the header is ignored"
        );
        assert_eq!(client(&h, ip("10.1.1.1"), &proxies), ip("10.1.1.1"));
        assert_eq!(client(&axum::http::HeaderMap::new(), proxy, &proxies), proxy);
        let mut h = axum::http::HeaderMap::new();
        h.insert("x-forwarded-for", "[2001:db8::1]:443".parse().unwrap());
        assert_eq!(client(&h, proxy, &proxies), ip("2001:db8::1"));
        h.insert("x-forwarded-for", "unknown".parse().unwrap());
        assert_eq!(client(&h, proxy, &proxies), proxy);
        assert_eq!(client(&h, None, &proxies), None);
    }

    #[test]
    fn sources_are_addresses_and_ipv6_64s() {
        assert_eq!(source(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(source(ip("2001:db8:1:2:bbbb::9")), source(ip("2001:db8:1:2::5")));
        assert_ne!(source(ip("2001:db8:1:3::1")), source(ip("2001:db8:1:2::1")));
        assert_eq!(source(ip("::ffff:10.1.2.3")), ip("10.1.2.3"));
        assert_eq!(source(ip("10.1.2.3")), ip("10.1.2.3"));
        assert_eq!(source(None), None);
        assert_eq!(secs(Duration::from_millis(1500)), 2);
        assert_eq!(secs(Duration::from_secs(3)), 3);
    }
}
