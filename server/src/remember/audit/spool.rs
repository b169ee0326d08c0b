//! Audit entries the database could not take yet: a bounded, durable queue, so
//! that an admin attempt is never lost from the audit log (docs/operations.md,
//! "When writing fails").
//!
//! When an entry cannot be written (the audit database is busy past its busy
//! timeout, unreachable, or refuses), it is appended to the spool file (one
//! JSON entry a line, synced to disk before the answer) and written to the
//! log, in order, as soon as the database takes writes again; until then every
//! new entry queues behind it, so ids still follow the order of the attempts.
//! The queue holds at most [`SPOOL_MAX`] entries: when it is full, admin
//! actions are refused before they act (`503`, nothing done), because an
//! action must never happen unaudited. The bound is exact: an action reserves
//! its entry's place before it acts ([`Spool::reserve`]), and only a reserved
//! entry is pushed, so two actions at 999 queued cannot both act.
//!
//! The flush writes the queued entries in one transaction and then empties the
//! file: a crash between the two, or a file that cannot be rewritten (a full
//! disk), makes the next flush write them again, and the log keeps one of
//! each: every line carries its entry's key ([`Spooled`]), and an entry whose
//! key the log has already is skipped (`ON CONFLICT DO NOTHING`).
//!
//! A spool is one process's: it holds an exclusive `flock` on `PATH.lock` for
//! its lifetime, so that two processes never flush the same entries. Another
//! process opening the same log (a second server in the same directory, a test
//! reading the log) gets no spool ([`Spool::open`] fails with `WouldBlock`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use lockscope_model::admin::AuditEntry;
use tokio::io::AsyncWriteExt;

/// One line of the spool: an entry and its key (random, given when the entry
/// was first tried; lines of an earlier version have none).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Spooled {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(flatten)]
    pub entry: AuditEntry,
}

/// The most entries the spool holds (docs/security.md, "Limits").
pub const SPOOL_MAX: usize = 1000;

/// Why an entry could not be queued.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("writing the audit spool {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The spool file and what it holds.
pub(crate) struct Spool {
    path: PathBuf,
    /// `PATH.lock`, `flock`ed while this spool lives (closing it unlocks).
    _owner: std::fs::File,
    /// Held to change the file (briefly: a push, or a flush taking away what
    /// it wrote), never while a flush waits for the database.
    file: tokio::sync::Mutex<()>,
    /// One flush at a time.
    flushing: tokio::sync::Mutex<()>,
    pending: AtomicUsize,
    /// `pending` plus the places reserved for entries not pushed yet: never
    /// more than [`SPOOL_MAX`].
    used: AtomicUsize,
    queued_total: AtomicU64,
}

impl Spool {
    /// The spool at `path`, counting the entries a previous run left there;
    /// `WouldBlock` when another process (or log) owns it.
    pub(crate) fn open(path: &Path) -> std::io::Result<Spool> {
        let mut lock = path.to_path_buf().into_os_string();
        lock.push(".lock");
        let owner = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock)?;
        own(&owner)?;
        let pending = match std::fs::read_to_string(path) {
            Ok(text) => text.lines().filter(|l| !l.trim().is_empty()).count(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        Ok(Spool {
            path: path.to_path_buf(),
            _owner: owner,
            file: tokio::sync::Mutex::new(()),
            flushing: tokio::sync::Mutex::new(()),
            pending: AtomicUsize::new(pending),
            used: AtomicUsize::new(pending),
            queued_total: AtomicU64::new(0),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Entries waiting for the log.
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Entries ever queued by this process.
    pub(crate) fn queued_total(&self) -> u64 {
        self.queued_total.load(Ordering::Relaxed)
    }

    /// Reserves a place for one entry: `false` when the spool is full
    /// (counting the places reserved). The place is given back with
    /// [`Spool::unreserve`], or taken by [`Spool::push`].
    pub(crate) fn reserve(&self) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used < SPOOL_MAX).then_some(used + 1)
            })
            .is_ok()
    }

    /// Gives back a place [`Spool::reserve`] took and no entry used.
    pub(crate) fn unreserve(&self) {
        self.used.fetch_sub(1, Ordering::AcqRel);
    }

    /// Appends `entry` in a place reserved for it ([`Spool::reserve`]), on disk
    /// before this returns. `Ok`: the place is the entry's now; `Err`: it is
    /// still reserved (the caller gives it back).
    pub(crate) async fn push(&self, entry: &Spooled) -> Result<(), SpoolError> {
        let _file = self.file.lock().await;
        let io = |source| SpoolError::Io {
            path: self.path.display().to_string(),
            source,
        };
        let mut line = serde_json::to_vec(entry).expect("audit entries serialise");
        line.push(b'\n');
        let created = !tokio::fs::try_exists(&self.path).await.unwrap_or(false);
        let mut f = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .await
            .map_err(io)?;
        f.write_all(&line).await.map_err(io)?;
        f.sync_data().await.map_err(io)?;
        if created {
            // A new file's name is on disk once its directory is.
            sync_dir(&self.path).await.map_err(io)?;
        }
        self.pending.fetch_add(1, Ordering::Relaxed);
        self.queued_total.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Writes the queued entries with `write` (all or none, in order), then
    /// takes them out of the file (entries queued meanwhile stay). `Ok(n)`:
    /// entries written; `Err`: the log still does not take them (they stay).
    pub(crate) async fn flush<F, Fut, E>(&self, write: F) -> Result<usize, E>
    where
        F: FnOnce(Vec<Spooled>) -> Fut,
        Fut: std::future::Future<Output = Result<(), E>>,
    {
        let _one = self.flushing.lock().await;
        if self.pending() == 0 {
            return Ok(0);
        }
        let text = {
            let _file = self.file.lock().await;
            match tokio::fs::read_to_string(&self.path).await {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(error = %e, path = %self.path.display(), "reading the audit spool");
                    return Ok(0);
                }
            }
        };
        let mut entries = Vec::new();
        let mut lines = 0;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            lines += 1;
            match serde_json::from_str::<Spooled>(line) {
                Ok(e) => entries.push(e),
                // Only a crash in the middle of a push leaves half a line.
                Err(e) => tracing::error!(error = %e, line, "an unreadable line in the audit spool is skipped"),
            }
        }
        let n = entries.len();
        write(entries).await?;
        let _file = self.file.lock().await;
        if let Err(e) = self.take_front(text.len()).await {
            // Written, but still in the file, and still counted: a later
            // flush writes them again, and the log keeps one of each (every
            // entry has a key of its own).
            tracing::error!(error = %e, path = %self.path.display(), "taking written entries out of the audit spool");
            return Ok(n);
        }
        self.pending.fetch_sub(lines, Ordering::Relaxed);
        self.used.fetch_sub(lines, Ordering::AcqRel);
        Ok(n)
    }

    /// Removes the first `len` bytes (entries written) from the file, keeping
    /// what was queued after them: the rest goes to a new file that replaces
    /// it. Called holding `file`.
    async fn take_front(&self, len: usize) -> std::io::Result<()> {
        let all = tokio::fs::read(&self.path).await?;
        let rest = all.get(len..).unwrap_or_default();
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let mut f = tokio::fs::File::create(&tmp).await?;
        f.write_all(rest).await?;
        f.sync_data().await?;
        tokio::fs::rename(&tmp, &self.path).await?;
        sync_dir(&self.path).await
    }
}

/// Syncs the directory holding `path`, so that a file created or renamed
/// there is still there after a crash.
async fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    #[cfg(unix)]
    tokio::fs::File::open(dir).await?.sync_all().await?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// An exclusive, non-blocking `flock` on `file` (unix; elsewhere every
/// process owns its spool).
fn own(file: &std::fs::File) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor, open for as long as the call.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    #[cfg(not(unix))]
    let _ = file;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(target: &str) -> Spooled {
        Spooled {
            key: Some(format!("k-{target}")),
            entry: AuditEntry {
                actor: "t".into(),
                target: target.into(),
                ..AuditEntry::default()
            },
        }
    }

    /// An entry queued while a flush waits for the database stays queued,
    /// behind what the flush wrote; the written ones leave the file.
    #[tokio::test]
    async fn a_flush_takes_out_only_what_it_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(&dir.path().join("s")).unwrap();
        for e in ["a", "b"] {
            assert!(spool.reserve());
            spool.push(&entry(e)).await.unwrap();
        }
        let written = std::sync::Mutex::new(Vec::new());
        let n = spool
            .flush(|entries| async {
                assert!(spool.reserve());
                spool.push(&entry("c")).await.unwrap();
                written
                    .lock()
                    .unwrap()
                    .extend(entries.into_iter().map(|e| e.entry.target));
                Ok::<(), ()>(())
            })
            .await
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(*written.lock().unwrap(), ["a", "b"]);
        assert_eq!(spool.pending(), 1);
        let left = std::fs::read_to_string(spool.path()).unwrap();
        assert_eq!(left.lines().count(), 1);
        assert!(left.contains("\"target\":\"c\""), "{left}");
        // A failed write keeps everything, in order.
        assert!(spool.flush(|_| async { Err::<(), ()>(()) }).await.is_err());
        assert_eq!(spool.pending(), 1);
        // One owner at a time; reopened (a restart), it counts what is there.
        let taken = Spool::open(spool.path()).err().expect("owned");
        assert_eq!(taken.kind(), std::io::ErrorKind::WouldBlock, "{taken}");
        let path = spool.path().to_path_buf();
        drop(spool);
        assert_eq!(Spool::open(&path).unwrap().pending(), 1);
    }

    #[tokio::test]
    async fn it_holds_at_most_spool_max() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let line = format!("{}\n", serde_json::to_string(&entry("x")).unwrap());
        std::fs::write(&path, line.repeat(SPOOL_MAX)).unwrap();
        let spool = Spool::open(&path).unwrap();
        assert_eq!(spool.pending(), SPOOL_MAX);
        assert!(!spool.reserve(), "full");
    }

    /// Places reserved count against the bound: at SPOOL_MAX - 1 queued, one
    /// action gets the last place and a second one none (review item 2).
    #[tokio::test]
    async fn the_last_place_goes_to_one_reservation_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let line = format!("{}\n", serde_json::to_string(&entry("x")).unwrap());
        std::fs::write(&path, line.repeat(SPOOL_MAX - 1)).unwrap();
        let spool = Spool::open(&path).unwrap();
        assert!(spool.reserve(), "the last place");
        assert!(!spool.reserve(), "taken by the first, though nothing is pushed yet");
        spool.unreserve();
        assert!(spool.reserve(), "given back");
        spool.push(&entry("y")).await.unwrap();
        assert_eq!(spool.pending(), SPOOL_MAX);
        assert!(!spool.reserve());
    }

    /// Entries whose removal from the file failed stay counted (they are in
    /// the file, and written again): review item 6a.
    #[tokio::test]
    async fn entries_not_taken_out_stay_counted() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(&dir.path().join("s")).unwrap();
        assert!(spool.reserve());
        spool.push(&entry("a")).await.unwrap();
        // The new file cannot be made (here: a directory has its name; in
        // production, a full disk), so `take_front` fails after the write.
        let n = spool
            .flush(|_| async {
                std::fs::create_dir(dir.path().join("s.tmp")).unwrap();
                Ok::<(), ()>(())
            })
            .await
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(std::fs::read_to_string(spool.path()).unwrap().lines().count(), 1);
        assert_eq!(spool.pending(), 1, "still in the file, so still pending");
    }
}
