//! PostgreSQL's notifications of lock, session and blacklist changes (from the schema's
//! triggers), re-broadcast to the store's waiters and to the observer.

use std::time::Duration;

use tokio::sync::broadcast;
use tracing::{info, warn};

use crate::StoreError;

/// A change PostgreSQL notified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// A lock row changed (`NOTIFY lockscope_locks, '<name>'`).
    Lock(String),
    /// A session or blacklist row changed (`NOTIFY lockscope_sessions`).
    Sessions,
    /// The listening connection was lost: notifications may have been missed.
    Lost,
}

/// Listens for the triggers' notifications and re-broadcasts them. One
/// connection per store; when it is lost, sqlx reconnects on the next call and
/// the loss is broadcast as [`Change::Lost`] (notifications sent meanwhile are
/// gone, so observers re-read the table).
pub(super) async fn listen(url: &str) -> Result<broadcast::Sender<Change>, StoreError> {
    let mut listener = sqlx::postgres::PgListener::connect(url).await?;
    listener.listen_all(["lockscope_locks", "lockscope_sessions"]).await?;
    // Room for bursts: a receiver that falls further behind gets `Lagged` and
    // re-reads the table instead.
    let (tx, _) = broadcast::channel(16384);
    // The task holds only a weak sender: once every clone of the store is gone,
    // it stops at the next notification.
    let weak = tx.downgrade();
    tokio::spawn(async move {
        loop {
            let change = match listener.try_recv().await {
                Ok(Some(n)) => match n.channel() {
                    "lockscope_locks" => Change::Lock(n.payload().to_string()),
                    _ => Change::Sessions,
                },
                Ok(None) => {
                    warn!("postgres listener connection lost; reconnecting");
                    Change::Lost
                }
                Err(e) => {
                    warn!(error = %e, "postgres listener failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Change::Lost
                }
            };
            match weak.upgrade() {
                Some(tx) => {
                    let _ = tx.send(change);
                }
                None => return,
            }
        }
    });
    info!("listening for lock changes");
    Ok(tx)
}
