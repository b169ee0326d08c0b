//! What one viewer of `lockscope-bench viewers` saw, and how the load's writes
//! to its window are judged against it.

use super::*;

/// What one viewer saw.
#[derive(Default)]
pub(super) struct Viewer {
    pub(super) view: ViewSpec,
    /// When the view was asked for (unix ms).
    pub(super) asked_at: i64,
    pub(super) first_frame_at: Option<i64>,
    pub(super) last_frame_at: Option<i64>,
    pub(super) ended_at: i64,
    pub(super) frames: u64,
    pub(super) bytes: u64,
    pub(super) max_gap_ms: i64,
    /// Receive time − the frame's `server_time`.
    pub(super) max_age_ms: i64,
    pub(super) max_waited_ms: u64,
    pub(super) late_frames: u64,
    /// Store write → frame received, once per stamp.
    pub(super) latencies: Vec<i64>,
    /// The server's part of each latency: store write → the frame's `server_time`.
    pub(super) to_sent: Vec<i64>,
    /// Stamps not timed: written before the view was asked for, or arriving with
    /// a row new to the window.
    pub(super) untimed: u64,
    pub(super) seen: HashSet<u64>,
    /// Per row, every stamp shown, with its receive time.
    pub(super) shown: HashMap<String, Vec<(i64, u64)>>,
    /// The window's rows from each receive time on (appended when they change).
    pub(super) membership: Vec<(i64, Arc<HashSet<String>>)>,
    /// Writes to its window judged / not shown within `late_ms` / never shown.
    pub(super) judged: u64,
    pub(super) stale: u64,
    pub(super) never: u64,
    pub(super) examples: Vec<String>,
    pub(super) error: Option<String>,
}

impl Viewer {
    pub(super) fn on_frame(
        &mut self,
        recv: i64,
        f: WindowFrame,
        window: &mut Window,
        late_ms: i64,
    ) -> anyhow::Result<()> {
        if f.view_id != VIEW_ID {
            bail!("frame {} answers view {}, not {VIEW_ID}", f.seq, f.view_id);
        }
        self.frames += 1;
        if self.first_frame_at.is_none() {
            self.first_frame_at = Some(recv);
        }
        // Gaps count once stamps flow: before the load starts (and after it ends)
        // a quiet window rightly gets nothing.
        if let (Some(last), false) = (self.last_frame_at, self.latencies.is_empty()) {
            self.max_gap_ms = self.max_gap_ms.max(recv - last);
        }
        self.last_frame_at = Some(recv);
        let age = recv - f.server_time;
        self.max_age_ms = self.max_age_ms.max(age);
        self.max_waited_ms = self.max_waited_ms.max(f.waited_ms);
        if age > late_ms || f.waited_ms as i64 > late_ms {
            self.late_frames += 1;
        }
        let held: HashSet<&str> = window.order().iter().map(String::as_str).collect();
        for row in &f.rows {
            let Some((t, n)) = row.entry.record().and_then(|r| stamp(&r.purpose)) else {
                continue;
            };
            self.shown.entry(row.entry.name.clone()).or_default().push((recv, n));
            if !self.seen.insert(n) {
                continue;
            }
            // Timed only if the row was in the window when written, as far as this
            // viewer knows: a row entering the window brings its last stamp along,
            // however old, and that age is not a delivery time.
            if t >= self.asked_at && held.contains(row.entry.name.as_str()) {
                self.latencies.push(recv - t);
                self.to_sent.push(f.server_time - t);
            } else {
                self.untimed += 1;
            }
        }
        let order_changed = f.full || f.order.is_some();
        window.apply(f).map_err(|e| anyhow::anyhow!("applying a frame: {e}"))?;
        if order_changed {
            let names: HashSet<String> = window.order().iter().cloned().collect();
            if self.membership.last().is_none_or(|(_, m)| **m != names) {
                self.membership.push((recv, Arc::new(names)));
            }
        }
        Ok(())
    }

    fn in_window(&self, name: &str, at: i64) -> bool {
        let i = self.membership.partition_point(|(from, _)| *from <= at);
        i > 0 && self.membership[i - 1].1.contains(name)
    }

    /// Judges every write to a row in this viewer's window between its first
    /// frame and `late_ms` before it stopped watching.
    pub(super) fn judge(&mut self, writes: &[Write], late_ms: i64) {
        let Some(from) = self.first_frame_at else { return };
        let to = self.ended_at - late_ms;
        for w in writes.iter().filter(|w| w.t >= from && w.t <= to) {
            if !self.in_window(&w.name, w.t) {
                continue;
            }
            let shown = self.shown.get(&w.name).map(Vec::as_slice).unwrap_or(&[]);
            let reflected = shown.iter().filter(|(_, n)| *n >= w.n).map(|(r, _)| *r).min();
            match reflected {
                Some(r) if r <= w.t + late_ms => self.judged += 1,
                // It left the window before it was due: nothing was owed.
                _ if !self.in_window(&w.name, w.t + late_ms) => {}
                Some(r) => {
                    self.judged += 1;
                    self.stale += 1;
                    self.example(format!("{} n={} shown after {} ms", w.name, w.n, r - w.t));
                }
                None => {
                    self.judged += 1;
                    self.stale += 1;
                    self.never += 1;
                    self.example(format!("{} n={} never shown", w.name, w.n));
                }
            }
        }
    }

    /// Keeps the first few writes not shown in time, for the report.
    fn example(&mut self, what: String) {
        if self.examples.len() < 3 {
            self.examples.push(what);
        }
    }

    pub(super) fn lagged(&self) -> bool {
        self.late_frames > 0 || self.stale > 0
    }
}

/// `bench t=<ms> n=<n>` → `(t, n)`.
pub(super) fn stamp(purpose: &str) -> Option<(i64, u64)> {
    let rest = purpose.strip_prefix("bench t=")?;
    let (t, n) = rest.split_once(" n=")?;
    Some((t.parse().ok()?, n.parse().ok()?))
}

/// One line of the load's log.
pub(super) struct Write {
    pub(super) name: String,
    pub(super) t: i64,
    pub(super) n: u64,
}

pub(super) fn read_writes(path: &std::path::Path) -> anyhow::Result<Vec<Write>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    // A line cut short (the load still writing) does not parse and is skipped.
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            Some(Write {
                name: f.next()?.to_string(),
                t: f.next()?.parse().ok()?,
                n: f.next()?.parse().ok()?,
            })
        })
        .collect())
}
