use super::*;

fn ev(at: Millis, kind: Kind, fence: Option<i64>, session: &str) -> HistoryEvent {
    HistoryEvent {
        id: String::new(),
        fleet: "f".into(),
        at,
        kind,
        lock: Some("l".into()),
        session: Some(session.into()),
        owner: None,
        fence,
        revision: None,
        service: None,
        host: None,
        actor: Some("alice".into()),
        detail: "stuck".into(),
        record: None,
    }
}

#[test]
fn acquisitions_become_bars_ended_by_their_own_end() {
    let events = [
        ev(100, Kind::Extended, Some(1), "a"),
        ev(200, Kind::Released, Some(1), "a"),
        ev(300, Kind::Acquired, Some(2), "b"),
        ev(350, Kind::WaitStarted, None, "c"),
        ev(360, Kind::WaitStarted, None, "d"),
        ev(400, Kind::ForceReleased, Some(2), "b"),
        ev(410, Kind::WaitStopped, None, "c"),
        ev(420, Kind::Acquired, Some(3), "c"),
    ];
    let l = lanes(&events, 0, 1000);
    let holds: Vec<_> = l
        .holds
        .iter()
        .map(|s| (s.start, s.end, s.fence, s.start_unseen, s.still, s.ended))
        .collect();
    assert_eq!(
        holds,
        [
            (0, 200, Some(1), true, false, Some(Kind::Released)),
            (300, 400, Some(2), false, false, Some(Kind::ForceReleased)),
            (420, 1000, Some(3), false, true, None),
        ]
    );
    let waits: Vec<_> = l.waits.iter().map(|w| (w.start, w.end, w.still, w.row)).collect();
    assert_eq!(
        waits,
        [(350, 410, false, 0), (360, 1000, true, 1)],
        "overlapping waits get rows"
    );
    assert_eq!(l.wait_rows, 2);
    assert_eq!(l.marks.len(), 1);
    assert_eq!(l.marks[0].label(), "force-released");
    assert!(l.marks[0].title.contains("by alice") && l.marks[0].title.ends_with(": stuck"));
    assert_eq!(l.holds[1].label(), "fence 2 · b");
    assert!(l.holds[2].title("held").contains("still at the end of the range"));
}

#[test]
fn an_end_without_its_start_began_before_the_range() {
    let l = lanes(&[ev(50, Kind::AutoReleased, Some(7), "a")], 10, 100);
    assert_eq!(l.holds.len(), 1);
    assert_eq!(
        (l.holds[0].start, l.holds[0].end, l.holds[0].start_unseen),
        (10, 50, true)
    );
    assert_eq!(l.marks[0].kind, Kind::AutoReleased);
}

#[test]
fn ticks_fall_on_round_instants() {
    let (t, step) = ticks(1_000_030_000, 1_000_030_000 + 15 * 60_000);
    assert_eq!(step, 300_000);
    assert!(t.iter().all(|t| t % step == 0));
    assert_eq!(t.len(), 3);
    assert_eq!(ticks(0, 3_600_000).1, 600_000);
}

/// Issue 23: `/history?…&from=0&to=9223372036854775807` made the tick loop
/// wrap around (release) and allocate until the OOM killer came, or overflow
/// (debug); `from=to=-9223372036854775808` overflowed rounding down.
#[test]
fn the_issues_ranges_give_a_few_ticks_and_a_drawable_timeline() {
    for (from, to) in [
        (0, i64::MAX),
        (i64::MIN, i64::MIN),
        (i64::MIN, i64::MAX),
        (i64::MAX, i64::MAX),
    ] {
        let (t, step) = ticks(from, to);
        assert!(t.len() <= MAX_TICKS && step > 0, "{from}..{to}: {t:?}");
        assert!(t.iter().all(|t| (from..=to).contains(t)), "{from}..{to}: {t:?}");
        let events = vec![
            ev(from, Kind::Acquired, Some(1), "a"),
            ev(to, Kind::ForceReleased, Some(1), "a"),
        ];
        let html =
            leptos::prelude::Owner::new().with(|| view! { <Timeline lock="l".to_string() events from to/> }.to_html());
        assert!(html.contains(r#"data-testid="timeline-hold""#), "{html}");
    }
}

mod properties {
    //! The timeline's arithmetic over any range (deterministic: a fixed seed,
    //! 256 cases or `PROPTEST_CASES`; overflow checks on in the test profile,
    //! explicit `i128`/saturating/`f64` arithmetic for the release build).
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

    use super::*;

    fn run<S: Strategy>(strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>) {
        let config = Config {
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[23; 32]));
        if let Err(e) = runner.run(&strategy, test) {
            panic!("{e}");
        }
    }

    fn edge() -> impl Strategy<Value = i64> {
        prop_oneof![
            3 => any::<i64>(),
            1 => Just(i64::MIN),
            1 => Just(i64::MAX),
            1 => -1_000i64..1_000,
            2 => 1_700_000_000_000i64..1_900_000_000_000,
        ]
    }

    #[test]
    fn ticks_are_few_round_and_inside_any_range() {
        run((edge(), edge()), |(from, to)| {
            let (t, step) = ticks(from, to);
            prop_assert!(t.len() <= MAX_TICKS && step > 0);
            prop_assert!(t.iter().all(|t| *t >= from && *t <= to.max(from)), "{t:?}");
            prop_assert!(t.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(t.iter().all(|t| t.rem_euclid(step) == 0) || step == i64::MAX);
            Ok(())
        });
    }

    #[test]
    fn lanes_stay_within_the_range_and_bounded_by_their_events() {
        let kinds = proptest::sample::select(Kind::ALL.to_vec());
        let event = (edge(), kinds, proptest::option::of(0i64..4), 0u8..3);
        let events = proptest::collection::vec(event, 0..30);
        run((events, edge(), edge()), |(events, from, to)| {
            let mut events: Vec<HistoryEvent> = events
                .into_iter()
                .map(|(at, kind, fence, s)| ev(at, kind, fence, &format!("s{s}")))
                .collect();
            // As the history answers them: oldest first.
            events.sort_by_key(|e| e.at);
            let l = lanes(&events, from, to);
            let n = events.len();
            prop_assert!(l.holds.len() <= n && l.waits.len() <= n && l.marks.len() <= n);
            prop_assert!(l.wait_rows <= MAX_WAIT_ROWS);
            let to = to.max(from);
            for s in l.holds.iter().chain(&l.waits) {
                prop_assert!(from <= s.start && s.start <= s.end && s.end <= to, "{s:?}");
                let _ = s.title("held");
            }
            Ok(())
        });
    }
}
