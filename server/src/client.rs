//! What identifies a client to the limits and what keys are made of: the source
//! address a client is counted under ([`source`]), and random identifiers
//! ([`random_hex`]). A leaf: the audit log and authentication both use it.

use std::net::IpAddr;

/// Where a request came from, as the limits count it: the peer address, an
/// IPv6 peer's /64 (an IPv4 address mapped into IPv6 is that IPv4 address).
/// `None`: unknown (a request that did not come over a socket).
pub fn source(peer: Option<IpAddr>) -> Option<IpAddr> {
    Some(match peer? {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    })
}

/// `n` random bytes from the operating system, hex-encoded.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    hex::encode(bytes)
}
