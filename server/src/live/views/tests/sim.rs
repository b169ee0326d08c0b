//! The views tests' simulated fleet: random events, and windows and aggregates
//! recomputed from scratch to compare with.

use super::*;

/// A fleet driven by random events, with the views following it.
pub(super) struct Sim {
    pub(super) rng: fastrand::Rng,
    pub(super) state: FleetState,
    pub(super) views: Views,
    pub(super) now: Millis,
    pub(super) rev: i64,
}

pub(super) const SERVICES: [&str; 3] = ["billing", "search", "media"];

impl Sim {
    pub(super) fn new(seed: u64) -> Sim {
        let mut sim = Sim {
            rng: fastrand::Rng::with_seed(seed),
            state: FleetState::default(),
            views: Views::new(),
            now: 1_000_000,
            rev: 0,
        };
        // A store that keeps sessions; the holders s0..s4 come and go.
        let sessions = (0..5).map(|i| sim.session(i)).collect();
        sim.apply(FleetEvent::Reset(Snapshot {
            sessions: Some(sessions),
            ..Snapshot::default()
        }));
        sim
    }

    fn session(&self, i: u8) -> SessionEntry {
        let raw = format!(
            r#"{{"v":1,"session":"s{i}","service":"x","host":"h","pid":1,"started_at":0,"heartbeat_at":{}}}"#,
            self.now
        );
        SessionEntry::from_stored(format!("s{i}"), self.rev, raw.as_bytes(), Some(self.now))
    }

    pub(super) fn name(&mut self) -> String {
        let i = self.rng.usize(0..40);
        match i % 4 {
            0 => format!("billing/inv-{i:02}"),
            1 => format!("search/shard-{i:02}"),
            _ => format!("l{i:02}"),
        }
    }

    pub(super) fn record(&mut self, acquired_at: Millis) -> LockRecord {
        let service = SERVICES[self.rng.usize(0..SERVICES.len())];
        LockRecord {
            v: RECORD_VERSION,
            owner: format!("o{}", self.rev),
            session: format!("s{}", self.rng.u8(0..5)).into(),
            service: service.into(),
            host: format!("host-{}", self.rng.u8(0..3)).into(),
            pid: 7,
            purpose: String::new(),
            backtrace: [].into(),
            acquired_at,
            expected_runtime_ms: 60_000,
            alert_at: acquired_at + self.rng.i64(1_000..60_000),
            auto_unlock_at: acquired_at + self.rng.i64(60_000..120_000),
            heartbeat_at: acquired_at,
        }
    }

    pub(super) fn t(&self) -> Now {
        Now {
            wall: self.now,
            mono: self.now,
        }
    }

    pub(super) fn apply(&mut self, event: FleetEvent) {
        for ch in self.state.apply(event) {
            self.views.on_change(&self.state, &ch, self.now);
        }
    }

    /// One random thing happening to the fleet.
    pub(super) fn step(&mut self) {
        self.rev += 1;
        let name = self.name();
        match self.rng.u8(0..24) {
            0..=6 => {
                // acquire (or re-acquire with a new fence)
                let at = self.now - self.rng.i64(0..150_000);
                let rec = self.record(at);
                self.apply(FleetEvent::Upsert(LockEntry {
                    name,
                    fence: self.rev,
                    revision: self.rev,
                    body: LockBody::Held(rec),
                }));
            }
            7..=9 => {
                // heartbeat: same acquisition, later deadlines
                if let Some(mut e) = self.state.get(&name).cloned() {
                    if let LockBody::Held(r) = &mut e.body {
                        r.auto_unlock_at = self.now + 90_000;
                        r.heartbeat_at = self.now;
                    }
                    e.revision = self.rev;
                    self.apply(FleetEvent::Upsert(e));
                }
            }
            10..=13 => self.apply(FleetEvent::Remove {
                name,
                revision: self.rev,
            }),
            14 | 15 => {
                let w = Waiter {
                    lock: name,
                    session: format!("w{}", self.rng.u8(0..4)),
                };
                let start = self.rng.bool();
                self.apply(if start {
                    FleetEvent::Waiting(w)
                } else {
                    FleetEvent::StoppedWaiting(w)
                });
            }
            16 => self.apply(FleetEvent::Upsert(LockEntry::from_stored(
                name, self.rev, self.rev, b"{oops",
            ))),
            20 => {
                let i = self.rng.u8(0..5);
                let s = self.session(i);
                self.apply(FleetEvent::Session(s));
            }
            21 => {
                let id = format!("s{}", self.rng.u8(0..5));
                self.apply(FleetEvent::SessionGone { id });
            }
            22 => {
                let id = format!("s{}", self.rng.u8(0..5));
                let raw = format!(r#"{{"v":1,"session":"{id}","by":"t","reason":"r","at":1}}"#);
                self.apply(FleetEvent::Blacklisted(BlacklistEntry::from_stored(
                    id,
                    self.rev,
                    raw.as_bytes(),
                )));
            }
            23 => {
                let session = format!("s{}", self.rng.u8(0..5));
                self.apply(FleetEvent::BlacklistLifted { session });
            }
            17 => {
                // a reset keeping a random half
                let all: Vec<LockEntry> = self.state.locks().cloned().collect();
                let keep: Vec<LockEntry> = all.into_iter().filter(|_| self.rng.bool()).collect();
                let waiters: Vec<Waiter> = self.state.waiters().cloned().collect();
                let revision = self.rev;
                let known = self.state.sessions();
                let sessions = Some(known.sessions.values().cloned().collect());
                let blacklist = known.blacklist.values().cloned().collect();
                self.apply(FleetEvent::Reset(Snapshot {
                    revision,
                    locks: keep,
                    waiters,
                    sessions,
                    blacklist,
                }));
            }
            _ => {
                self.now += self.rng.i64(0..20_000);
                self.views.advance(&self.state, self.now);
            }
        }
    }

    /// What `spec`'s window must be, computed from scratch.
    pub(super) fn brute(&self, spec: &ViewSpec) -> (u64, u64, Vec<String>) {
        let mut keys: Vec<(i64, i64, String)> = self
            .state
            .locks()
            .filter_map(|e| {
                let st = self.state.state_of(e, self.now);
                spec.filter.matches(e, st).then(|| {
                    let w = self.state.waiters_of(&e.name).count() as u32;
                    let (a, b) = sort_key(spec.sort.key, &SortFields::of(e), st, w);
                    (a, b, e.name.clone())
                })
            })
            .collect();
        keys.sort();
        if spec.sort.reverse {
            keys.reverse();
        }
        let total = keys.len();
        let limit = spec.limit as usize;
        let offset = (spec.offset as usize).min(total.saturating_sub(limit));
        let end = (offset + limit).min(total);
        let names = keys[offset..end].iter().map(|k| k.2.clone()).collect();
        (total as u64, offset as u64, names)
    }

    pub(super) fn specs() -> Vec<ViewSpec> {
        let mut out = Vec::new();
        let filters = [
            Filter::default(),
            Filter {
                service: Some("billing".into()),
                ..Filter::default()
            },
            Filter {
                state: Some(RowState::Overdue),
                ..Filter::default()
            },
            Filter {
                state: Some(RowState::Orphaned),
                ..Filter::default()
            },
            Filter {
                prefix: Some("billing/".into()),
                host: Some("host-1".into()),
                ..Filter::default()
            },
            Filter {
                contains: Some("shard".into()),
                ..Filter::default()
            },
            Filter {
                prefix: Some("search/".into()),
                ..Filter::default()
            },
        ];
        for filter in filters {
            for key in SortKey::ALL {
                for reverse in [false, true] {
                    for (offset, limit) in [(0, 5), (3, 4), (1000, 5)] {
                        out.push(ViewSpec {
                            filter: filter.clone(),
                            sort: Sort { key, reverse },
                            offset,
                            limit,
                        });
                    }
                }
            }
        }
        out
    }

    pub(super) fn recount(&self) -> Aggregates {
        let mut services: HashMap<String, u64> = HashMap::new();
        for e in self.state.locks() {
            if let Some(r) = e.record() {
                *services.entry(r.service.to_string()).or_default() += 1;
            }
        }
        let mut services: Vec<(String, u64)> = services.into_iter().collect();
        services.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Aggregates {
            counts: self.state.counts(self.now),
            service_count: services.len() as u64,
            services,
        }
    }

    /// A browser subscribed to each of `specs`, with an empty window.
    pub(super) fn browsers(&mut self, specs: impl IntoIterator<Item = ViewSpec>) -> Vec<(ViewSpec, Browser)> {
        specs
            .into_iter()
            .map(|spec| {
                let id = self.views.subscribe(1, spec.clone(), self.t());
                (
                    spec,
                    Browser {
                        id,
                        window: Window::default(),
                    },
                )
            })
            .collect()
    }

    /// Sends `browsers` the frames due, each applied and acknowledged, then
    /// checks every window holds what a full re-sort gives: order, total,
    /// offset and the rows' contents (`at` names the case in failures).
    pub(super) fn deliver_and_check(&mut self, browsers: &mut [(ViewSpec, Browser)], at: &str) {
        self.views.mark_dirty(&self.state, self.t());
        for (id, f) in self.views.due_frames(&self.state, self.t()) {
            let (_, b) = browsers.iter_mut().find(|(_, b)| b.id == id).unwrap();
            b.window.apply(f).unwrap();
            self.views.ack(id, b.window.seq);
        }
        for (spec, b) in browsers.iter() {
            let (total, offset, names) = self.brute(spec);
            let at = format!("{at}, {spec:?}");
            assert_eq!(b.window.order(), names.as_slice(), "{at}: order");
            assert_eq!((b.window.total, b.window.offset), (total, offset), "{at}");
            for row in b.window.rows() {
                assert_eq!(Some(&row.entry), self.state.get(&row.entry.name), "{at}: row");
            }
        }
    }
}
