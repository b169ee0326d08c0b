//! etcd's own watch on the lock keys: every Put and Delete under
//! `<prefix>locks/` counted per lock name, to prove each lock was deleted
//! exactly once.

use super::*;

/// What etcd's watch on `<prefix>locks/` saw, per lock name.
#[derive(Default)]
pub(super) struct Seen {
    pub(super) puts: HashMap<String, u32>,
    pub(super) deletes: HashMap<String, u32>,
    pub(super) problem: Option<String>,
}

/// Counts every Put and Delete under `<prefix>locks/` from now on.
pub(super) struct KeyWatch {
    pub(super) seen: Arc<Mutex<Seen>>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

impl KeyWatch {
    pub(super) async fn start(endpoint: &str) -> KeyWatch {
        let mut client = Client::connect([endpoint], None).await.expect("connecting to etcd");
        let prefix = format!("{PREFIX}locks/");
        // From the revision read now: nothing written after it is missed, even
        // if the watch is created a moment later.
        let now = client
            .get(prefix.as_str(), Some(GetOptions::new().with_prefix().with_count_only()))
            .await
            .unwrap();
        let revision = now.header().expect("a response header").revision();
        let mut stream = client
            .watch(
                prefix.as_str(),
                Some(WatchOptions::new().with_prefix().with_start_revision(revision + 1)),
            )
            .await
            .expect("watching the locks");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s = seen.clone();
        let task = tokio::spawn(async move {
            let _client = client;
            loop {
                match stream.message().await {
                    Ok(Some(resp)) => {
                        let mut seen = s.lock().unwrap();
                        if resp.canceled() || resp.compact_revision() > 0 {
                            seen.problem = Some(format!("the watch ended: {resp:?}"));
                            return;
                        }
                        for ev in resp.events() {
                            let Some(kv) = ev.kv() else { continue };
                            let key = String::from_utf8_lossy(kv.key());
                            let name = key.strip_prefix(&prefix).unwrap_or(&key).to_string();
                            let counts = match ev.event_type() {
                                EventType::Put => &mut seen.puts,
                                EventType::Delete => &mut seen.deletes,
                            };
                            *counts.entry(name).or_default() += 1;
                        }
                    }
                    Ok(None) => {
                        s.lock().unwrap().problem = Some("the watch stream closed".into());
                        return;
                    }
                    Err(e) => {
                        s.lock().unwrap().problem = Some(format!("the watch failed: {e}"));
                        return;
                    }
                }
            }
        });
        KeyWatch { seen, task }
    }

    /// How many of `names` were deleted (at least once).
    pub(super) fn deleted(&self, names: &[String]) -> usize {
        let seen = self.seen.lock().unwrap();
        assert!(seen.problem.is_none(), "{}", seen.problem.as_deref().unwrap());
        names.iter().filter(|n| seen.deletes.contains_key(*n)).count()
    }

    /// Every one of `names` written once and deleted exactly once.
    pub(super) fn assert_exactly_once(&self, names: &[String], ctx: &dyn Fn() -> String) {
        let seen = self.seen.lock().unwrap();
        assert!(seen.problem.is_none(), "{}", seen.problem.as_deref().unwrap());
        let wrong: Vec<_> = names
            .iter()
            .map(|n| {
                let p = seen.puts.get(n).copied().unwrap_or(0);
                let d = seen.deletes.get(n).copied().unwrap_or(0);
                (n, p, d)
            })
            .filter(|&(_, p, d)| p != 1 || d != 1)
            .collect();
        assert!(
            wrong.is_empty(),
            "{} of {} keys not (written once, deleted once); first ones (name, puts, deletes): {:?}{}",
            wrong.len(),
            names.len(),
            &wrong[..wrong.len().min(10)],
            ctx()
        );
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
