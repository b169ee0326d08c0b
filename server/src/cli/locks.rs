//! `lockscope lock` and `lockscope unlock`: take a lock from the shell (and
//! exit holding it, as a dead worker would) and release one by its fence,
//! through the client library and the store's guarded release.

use std::time::Duration;

use anyhow::bail;
use lockscope_store::client::{LockOptions, Session, SessionConfig};
use lockscope_store::fleet::Release;

use super::args::{LockArgs, UnlockArgs};

/// Takes a lock through the client library and exits holding it (its session
/// stops heartbeating, as a dead worker's would). A held lock is waited for —
/// up to `--wait`, or until it is free — as a waiter the dashboard shows, and
/// the session's counters (attempts, conflicts, waits) are published before exit.
/// After the session's ttl the dashboard shows the lock as orphaned until
/// `unlock` (or the unlocker) releases it.
pub async fn lock(args: LockArgs) -> anyhow::Result<()> {
    let spec = args.store.spec();
    let store = spec.connect().await?;
    let session = Session::open(store, SessionConfig::new(args.service)).await?;
    let expected = Duration::from_secs(args.expected_runtime);
    let opts = LockOptions::new(args.purpose, expected).auto_unlock_after(expected * 2);
    let mut batch = session.try_lock_batch(&[&args.name], opts.clone()).await?;
    let guard = match (batch.taken.pop(), batch.busy.pop()) {
        (Some(guard), _) => guard,
        (None, Some((_, holder))) => {
            let who = holder.as_ref().map_or("someone".to_string(), holder_text);
            if args.no_wait {
                session.heartbeat_now().await;
                bail!("{} is held by {who}", args.name);
            }
            let limit = args
                .wait
                .map_or("until it is free".into(), |d| format!("up to {}", human(d)));
            eprintln!("{} is held by {who}; waiting {limit} (Ctrl-C gives up)", args.name);
            let waited = wait_for(&session, &args.name, opts, args.wait).await;
            session.heartbeat_now().await;
            waited?
        }
        (None, None) => bail!("{}: the store answered neither acquired nor busy", args.name),
    };
    println!(
        "acquired {} fence={} session={}",
        args.name,
        guard.fence(),
        session.id()
    );
    session.heartbeat_now().await;
    guard.abandon();
    Ok(())
}

/// Waits for `name` (at most `limit`; `None`: until it is free), saying every
/// 30 s that it still waits.
async fn wait_for(
    session: &Session<lockscope_store::spec::AnyLocks>,
    name: &str,
    opts: LockOptions,
    limit: Option<Duration>,
) -> anyhow::Result<lockscope_store::client::LockGuard<lockscope_store::spec::AnyLocks>> {
    // Without a limit the client library's deadline is renewed daily: its
    // wait stays one registration as a waiter, whatever the deadline.
    const DAY: Duration = Duration::from_secs(86_400);
    let started = tokio::time::Instant::now();
    let mut tick = tokio::time::interval_at(started + Duration::from_secs(30), Duration::from_secs(30));
    let attempt = async {
        loop {
            let deadline = limit.map_or(DAY, |l| l.saturating_sub(started.elapsed()));
            match session.lock(name, opts.clone().deadline(deadline)).await {
                Err(lockscope_store::StoreError::Deadline { .. }) if limit.is_none() => continue,
                r => return r,
            }
        }
    };
    tokio::pin!(attempt);
    loop {
        tokio::select! {
            r = &mut attempt => return r.map_err(|e| match e {
                lockscope_store::StoreError::Deadline { .. } => {
                    anyhow::anyhow!("{name} is still held after {}: gave up", human(started.elapsed()))
                }
                e => e.into(),
            }),
            _ = tick.tick() => eprintln!("still waiting for {name} ({})", human(started.elapsed())),
            _ = tokio::signal::ctrl_c() => bail!("{name}: gave up waiting after {}", human(started.elapsed())),
        }
    }
}

/// `1m30s`-style text of a duration, to the second.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

/// Who holds a lock, as the CLI says it.
fn holder_text(h: &lockscope_model::LockEntry) -> String {
    match h.record() {
        Some(r) => format!(
            "{}@{}:{} (session {}), fence {}",
            r.service, r.host, r.pid, r.session, h.fence
        ),
        None => match h.holder_session() {
            Some(s) => format!("session {s} (foreign schema), fence {}", h.fence),
            None if matches!(h.body, lockscope_model::LockBody::Foreign { .. }) => {
                format!("an unknown session (foreign schema), fence {}", h.fence)
            }
            None => format!("a malformed record, fence {}", h.fence),
        },
    }
}

/// Releases the acquisition of `name` with `fence` through the store, or says what is there instead.
pub async fn unlock(args: UnlockArgs) -> anyhow::Result<()> {
    let store = args.store.spec().open()?;
    match store.release(&args.name, args.fence).await? {
        Release::Released(_) => {
            println!("released {} fence={}", args.name, args.fence);
            Ok(())
        }
        Release::NotHeld => bail!("{} was not released: it is not held", args.name),
        Release::Changed(now) => bail!(
            "{} was not released: it is no longer the acquisition with fence {} (now fence {})",
            args.name,
            args.fence,
            now.fence
        ),
    }
}
