//! The lockscope server (`lockscope` binary).
//!
//! - [`config`]: command line and environment.
//! - [`hub`]: one task per fleet owns its live table and sends each subscriber
//!   frames of its view.
//! - [`views`]: per (filter, sort) ordered indexes, per subscriber windows,
//!   aggregates; the pure logic the hub runs.
//! - [`ws`]: the `/ws` subscriber protocol, independent of axum for testing.
//! - [`http`]: routes, the server-rendered page, errors.
//! - [`demo`]: a simulated fleet of workers over the client library (`lockscope demo`).
//!
//! Data flows one way: store observer → hub reducer → view windows → browser.

pub mod config;
pub mod demo;
pub mod http;
pub mod hub;
pub mod views;
pub mod ws;

use std::future::IntoFuture;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

/// Serves `state` on `listener` until `shutdown` turns true; open websockets are
/// told to go away, and stragglers are cut after `grace`.
pub async fn serve(
    listener: TcpListener,
    state: http::AppState,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
) -> std::io::Result<()> {
    let router = http::app(state);
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
