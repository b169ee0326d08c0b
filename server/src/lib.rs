//! The lockscope server (`lockscope` binary).
//!
//! - [`config`]: command line and environment; [`settings`]: `lockscope.toml`.
//! - [`hub`]: one task per fleet owns its live table and sends each subscriber
//!   frames of its view.
//! - [`views`]: per (filter, sort) ordered indexes, per subscriber windows,
//!   aggregates; the pure logic the hub runs.
//! - [`ws`]: the `/ws` subscriber protocol, independent of axum for testing.
//! - [`http`]: routes, the server-rendered pages, errors; [`api`]: the JSON
//!   API under `/api/v1`; [`forms`]: the browser's admin and sign-in forms.
//! - [`auth`]: identities (tokens, sign-in sessions, a trusted proxy), roles,
//!   CSRF; [`admin`]: every admin attempt checked, performed and audited.
//! - [`unlocker`]: per fleet, releases locks past `auto_unlock_at` plus grace,
//!   while this replica holds the fleet's unlocker role (elected in the store).
//! - [`remote`]: `lockscope admin`, the admin actions through a server's API.
//! - [`demo`]: a simulated fleet of workers over the client library (`lockscope demo`).
//! - [`audit`]: the append-only audit log of admin actions and the browser sign-in sessions (SQL).
//! - [`metrics`]: `/metrics` for Prometheus, read from what the hubs publish.
//!
//! Data flows one way: store observer → hub reducer → view windows → browser.

pub mod admin;
pub mod api;
pub mod audit;
pub mod auth;
pub mod config;
pub mod demo;
pub mod forms;
pub mod history;
pub mod http;
pub mod hub;
pub mod metrics;
pub mod remote;
pub mod settings;
pub mod unlocker;
pub mod views;
pub mod ws;

use std::future::IntoFuture;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

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

/// Serves `state` on `listener` until `shutdown` turns true; open websockets are
/// told to go away, and stragglers are cut after `grace`. Without
/// authentication only a loopback listener is served: anyone who could reach
/// it would be admin.
pub async fn serve(
    listener: TcpListener,
    state: http::AppState,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
) -> std::io::Result<()> {
    // Peers' addresses reach the handlers: a proxy's identity header is believed
    // only from the addresses `[auth.proxy] trusted` names.
    check_exposure(listener.local_addr()?, state.auth.enabled())?;
    // With the history on, a client that takes no data for twice the history
    // exports' idle timeout is disconnected by the kernel (its export already
    // ended at the timeout; the connection and its buffers go now). With
    // `--history off` there are no exports and nothing is set
    // (docs/operations.md, "Exports' limits", says so). Saturating: limits
    // built in code are not checked as the file's are.
    let stalled = state.history.as_ref().map(|h| h.stats().limits.idle.saturating_mul(2));
    let listener = axum::serve::ListenerExt::tap_io(listener, move |tcp| {
        if let Some(after) = stalled {
            drop_stalled_peer_after(tcp, after);
        }
    });
    let router = http::app(state).into_make_service_with_connect_info::<std::net::SocketAddr>();
    let mut stop = shutdown.clone();
    let server = axum::serve(listener, router).with_graceful_shutdown(async move {
        let _ = stop.wait_for(|s| *s).await.map(|_| ());
    });
    let server = std::pin::pin!(server.into_future());
    tokio::select! {
        r = server => r,
        _ = async {
            let _ = shutdown.wait_for(|s| *s).await.map(|_| ());
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(?grace, "connections still open after the grace period; exiting");
            Ok(())
        }
    }
}
