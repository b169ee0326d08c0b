//! What the listener does before any route: only a loopback one is served
//! without authentication ([`check_exposure`]), and stalled clients are dropped
//! by the kernel ([`drop_stalled_peer_after`]).

use std::time::Duration;

/// Without authentication only loopback addresses are served: anyone who could
/// reach another would be admin.
pub fn check_exposure(addr: std::net::SocketAddr, auth: bool) -> std::io::Result<()> {
    if auth || addr.ip().is_loopback() {
        return Ok(());
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        format!(
            "refusing to serve on {addr} without authentication: anyone who could reach it would be admin. \
             Configure [auth] in lockscope.toml (docs/operations.md), or listen on a loopback address."
        ),
    ))
}

/// Has the kernel close `tcp` once data it sends stays unacknowledged, or
/// unsent because the peer's receive window stays shut (a client that stopped
/// reading), for `after` (`TCP_USER_TIMEOUT`; Linux only, elsewhere nothing).
/// Connections with nothing to send are not affected.
pub fn drop_stalled_peer_after(tcp: &tokio::net::TcpStream, after: Duration) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let ms = libc::c_uint::try_from(after.as_millis()).unwrap_or(libc::c_uint::MAX);
        // SAFETY: a valid socket descriptor, and a c_uint option of its size.
        let rc = unsafe {
            libc::setsockopt(
                tcp.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_USER_TIMEOUT,
                (&ms as *const libc::c_uint).cast(),
                std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            tracing::warn!(error = %std::io::Error::last_os_error(), "setting TCP_USER_TIMEOUT failed");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (tcp, after);
}
