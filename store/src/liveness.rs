//! How an observer notices a store that went away without saying so: a store
//! killed at once (PostgreSQL's immediate stop), restarted, or behind a link
//! that drops packets (no reset, nothing more arrives). Waiting for its next
//! event can take as long as the store is quiet, and a client's own reconnect
//! may wait for its pool's timeout; so every observer runs a bounded liveness
//! probe beside its session ([`while_alive`]): one trivial request every
//! [`PROBE_EVERY`], each answered within [`PROBE_TIMEOUT`], or the session
//! ends with that failure and the store is reported unreachable
//! (`docs/operations.md`, "When a store goes away"). The observer then
//! reconnects by itself, with its backoff, and reports it live again.
//!
//! Each store kind says what its probe is ([`Probe`]): etcd a serializable
//! count of one key on the observer's own connection, PostgreSQL `SELECT 1` on
//! a connection of the probe's own, SQLite that the file at the configured path
//! is still the one the observer opened.

use std::future::Future;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::StoreError;

/// How often an observer asks its store whether it is there: a store that goes
/// away is noticed within `PROBE_EVERY + PROBE_TIMEOUT` (2.5 s), under the 3 s
/// the page promises, at one trivial request a second per dashboard.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// How long a probe may take: a healthy store answers it in milliseconds; 1.5 s
/// leaves room for a loaded store or host without calling it down.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);

/// One store kind's liveness check.
pub(crate) trait Probe: Send {
    /// `Ok` if the store answered as it should.
    fn probe(&mut self) -> BoxFuture<'_, Result<(), StoreError>>;
}

/// Probes every [`PROBE_EVERY`], each under [`PROBE_TIMEOUT`]; returns the first
/// failure (a probe with no answer in time is [`StoreError::Timeout`]).
async fn until_dead(probe: &mut dyn Probe) -> StoreError {
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        match tokio::time::timeout(PROBE_TIMEOUT, probe.probe()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return e,
            Err(_) => return StoreError::Timeout(PROBE_TIMEOUT),
        }
    }
}

/// Runs `session` while `probe` says the store is there: the session's own
/// result, or the probe's failure (the session is then dropped where it
/// waits; the caller reconnects).
pub(crate) async fn while_alive<T>(
    session: impl Future<Output = Result<T, StoreError>>,
    probe: &mut dyn Probe,
) -> Result<T, StoreError> {
    tokio::select! {
        biased;
        r = session => r,
        e = until_dead(probe) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fails(usize);

    impl Probe for Fails {
        fn probe(&mut self) -> BoxFuture<'_, Result<(), StoreError>> {
            Box::pin(async move {
                self.0 = self.0.saturating_sub(1);
                match self.0 {
                    0 => Err(StoreError::unreachable_msg("gone")),
                    _ => Ok(()),
                }
            })
        }
    }

    struct Hangs;

    impl Probe for Hangs {
        fn probe(&mut self) -> BoxFuture<'_, Result<(), StoreError>> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_or_unanswered_probe_ends_the_session_in_bounded_time() {
        let start = tokio::time::Instant::now();
        let r = while_alive(std::future::pending::<Result<(), StoreError>>(), &mut Fails(3)).await;
        assert!(matches!(r, Err(StoreError::Unreachable { .. })), "{r:?}");
        assert_eq!(start.elapsed(), PROBE_EVERY * 3);
        let start = tokio::time::Instant::now();
        let r = while_alive(std::future::pending::<Result<(), StoreError>>(), &mut Hangs).await;
        assert!(matches!(r, Err(StoreError::Timeout(t)) if t == PROBE_TIMEOUT), "{r:?}");
        assert_eq!(start.elapsed(), PROBE_EVERY + PROBE_TIMEOUT);
        assert!(PROBE_EVERY + PROBE_TIMEOUT < Duration::from_secs(3), "the page's 3 s");
        // The session's own end wins.
        assert!(while_alive(async { Ok(7) }, &mut Hangs).await.is_ok());
    }
}
