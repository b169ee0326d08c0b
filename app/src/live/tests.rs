//! The browser's reducer and its signals, without a browser.

use super::*;
use lockscope_model::{LockEntry, WindowFrame};

fn row(name: &str, revision: i64) -> WindowRow {
    WindowRow {
        entry: LockEntry::from_stored(name.into(), revision, revision, b"garbage"),
        holder: Default::default(),
        deadlock: false,
        waiters: vec![],
    }
}

fn frame(seq: u64, order: Option<&[&str]>, rows: Vec<WindowRow>) -> WindowFrame {
    WindowFrame {
        seq,
        view_id: 0,
        server_time: 2_000,
        waited_ms: 0,
        full: false,
        total: order.map_or(2, |o| o.len() as u64),
        offset: 0,
        order: order.map(|o| o.iter().map(|s| s.to_string()).collect()),
        rows,
        aggregates: None,
    }
}

fn page(order: &[&str]) -> Page {
    Page {
        fleet: "f".into(),
        frame: Some(WindowFrame {
            full: true,
            ..frame(1, Some(order), order.iter().map(|n| row(n, 1)).collect())
        }),
        ..Page::default()
    }
}

#[test]
fn a_heartbeat_touches_one_row_signal_and_not_the_row_list() {
    let owner = Owner::new();
    owner.with(|| {
        let v = LiveView::new(page(&["a", "b"]));
        assert_eq!(v.order.get_untracked(), vec!["a", "b"]);
        let a_before = v.row("a").unwrap();
        assert_eq!(
            v.receive(ServerMsg::Window(frame(2, None, vec![row("b", 5)])), 1_500),
            Followup::Ack(2)
        );
        assert_eq!(v.row("b").unwrap().get_untracked().entry.revision, 5);
        assert_eq!(a_before, v.row("a").unwrap(), "row a keeps its signal");
        assert_eq!(v.order.get_untracked(), vec!["a", "b"]);
    });
}

#[test]
fn rows_come_and_go_with_the_window_and_bad_frames_force_a_resync() {
    let owner = Owner::new();
    owner.with(|| {
        let v = LiveView::new(page(&["a"]));
        v.receive(ServerMsg::Window(frame(2, Some(&["c", "a"]), vec![row("c", 6)])), 1_500);
        v.receive(ServerMsg::Window(frame(3, Some(&["c"]), vec![])), 1_500);
        assert_eq!(v.order.get_untracked(), vec!["c"]);
        assert!(v.row("a").is_none());
        assert!(matches!(
            v.receive(ServerMsg::Window(frame(4, Some(&["c", "zz"]), vec![])), 1_500),
            Followup::Resync(_)
        ));
        // A new connection's first frame replaces the window.
        let full = WindowFrame {
            full: true,
            ..frame(1, Some(&["z"]), vec![row("z", 30)])
        };
        assert_eq!(v.receive(ServerMsg::Window(full), 1_500), Followup::Ack(1));
        assert_eq!(v.order.get_untracked(), vec!["z"]);
        assert_eq!(v.connection.get_untracked(), Connection::Live);
    });
}

#[test]
fn batched_frames_reach_the_signals_once_per_publish_and_a_row_in_and_out_meanwhile_is_never_built() {
    let owner = Owner::new();
    owner.with(|| {
        let v = LiveView::new(page(&["a", "b"]));
        v.batch_frames();
        v.connection.set(Connection::Connecting);
        let a_before = v.row("a").unwrap();
        // c enters, b changes, then c leaves again and d enters: two frames
        // between two paints.
        v.receive(
            ServerMsg::Window(frame(2, Some(&["a", "c", "b"]), vec![row("c", 6), row("b", 7)])),
            1_500,
        );
        v.receive(
            ServerMsg::Window(frame(3, Some(&["a", "b", "d"]), vec![row("d", 8)])),
            1_500,
        );
        assert_eq!(
            v.order.get_untracked(),
            vec!["a", "b"],
            "nothing shown before the paint"
        );
        assert_eq!(v.row("b").unwrap().get_untracked().entry.revision, 1);
        assert_eq!(
            v.connection.get_untracked(),
            Connection::Connecting,
            "live once the rows are on screen, not before"
        );
        v.publish();
        assert_eq!(v.order.get_untracked(), vec!["a", "b", "d"]);
        assert!(
            v.row("c").is_none(),
            "docs/performance.md: \"a row that enters and leaves between two paints is never built\""
        );
        assert_eq!(v.row("b").unwrap().get_untracked().entry.revision, 7, "b's latest data");
        assert_eq!(v.row("d").unwrap().get_untracked().entry.revision, 8);
        assert_eq!(a_before, v.row("a").unwrap(), "row a keeps its signal");
        assert_eq!(v.connection.get_untracked(), Connection::Live);
        // docs/performance.md: "one that leaves and comes back keeps its row".
        let b_before = v.row("b").unwrap();
        v.receive(ServerMsg::Window(frame(4, Some(&["a", "d"]), vec![])), 1_500);
        v.receive(
            ServerMsg::Window(frame(5, Some(&["a", "b", "d"]), vec![row("b", 9)])),
            1_500,
        );
        v.publish();
        assert_eq!(b_before, v.row("b").unwrap());
        assert_eq!(b_before.get_untracked().entry.revision, 9);
        // A socket that closed before the paint is not made live by it.
        v.connection.set(Connection::Connecting);
        v.receive(ServerMsg::Window(frame(6, Some(&["a"]), vec![])), 1_500);
        v.connection.set(Connection::Reconnecting { retry_at: 0 });
        v.publish();
        assert_eq!(v.order.get_untracked(), vec!["a"]);
        assert!(v.row("b").is_none() && v.row("d").is_none());
        assert_eq!(v.connection.get_untracked(), Connection::Reconnecting { retry_at: 0 });
    });
}

#[test]
fn the_held_count_of_an_unfiltered_view_is_its_total() {
    let owner = Owner::new();
    owner.with(|| {
        let v = LiveView::new(page(&["a", "b"]));
        assert_eq!(v.counts().held, 2);
        v.receive(ServerMsg::Window(frame(2, Some(&["a"]), vec![])), 0);
        assert_eq!(v.counts().held, 1);
    });
}

#[test]
fn lag_is_the_wait_on_the_server_plus_the_trip() {
    let owner = Owner::new();
    owner.with(|| {
        let v = LiveView::new(page(&[]));
        v.pong(10_000, 10_000, 10_000); // clocks agree
        let late = WindowFrame {
            waited_ms: 900,
            server_time: 20_000,
            ..frame(2, None, vec![])
        };
        v.receive(ServerMsg::Window(late), 20_100);
        assert_eq!(v.lag_ms.get_untracked(), 1_000);
        assert_eq!(v.behind(), Some(1_000));
        // Nothing more arrives: the late frame brought the page up to date.
        v.tick(20_100 + BEHIND_SHOWN_MS);
        assert_eq!(v.behind(), None);
    });
}

#[test]
fn clock_offset_comes_from_the_server() {
    let owner = Owner::new();
    owner.with(|| {
        let v = LiveView::new(page(&[]));
        // Browser clock 400 ms behind the server, 100 ms round trip.
        v.pong(10_000, 10_100, 10_450);
        assert_eq!(v.clock_offset.get_untracked(), 400);
        v.tick(20_000);
        assert_eq!(v.now.get_untracked(), 20_400);
    });
}

#[test]
fn wrong_protocol_is_refused() {
    let owner = Owner::new();
    owner.with(|| {
        let v = LiveView::new(page(&[]));
        let hello = ServerMsg::Hello {
            protocol: 999,
            server_version: "x".into(),
            fleet: "f".into(),
        };
        assert!(matches!(v.receive(hello, 0), Followup::Resync(_)));
    });
}

/// A memo of `f`, and a reading of how many times it has run (after running it
/// if it is stale).
fn counted<T: Clone + PartialEq + Send + Sync + 'static>(
    f: impl Fn() -> T + Send + Sync + 'static,
) -> impl Fn() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let memo = {
        let runs = runs.clone();
        ArcMemo::new(move |_| {
            runs.fetch_add(1, Ordering::Relaxed);
            f()
        })
    };
    move || {
        memo.get();
        runs.load(Ordering::Relaxed)
    }
}

#[test]
fn a_first_frame_equal_to_the_server_render_draws_nothing_again() {
    let owner = Owner::new();
    owner.with(|| {
        let v = LiveView::new(page(&["a", "b"]));
        // How often each row's view, and the keyed list, would be run again.
        let row_runs = |sig: ArcRwSignal<WindowRow>| counted(move || sig.get().entry.revision);
        let (a, b) = (row_runs(v.row("a").unwrap()), row_runs(v.row("b").unwrap()));
        let order = v.order;
        let order_runs = counted(move || order.get().len());
        assert_eq!((a(), b(), order_runs()), (1, 1, 1));
        // The socket's first frame: the whole window again, b changed since the render.
        let first = WindowFrame {
            full: true,
            ..frame(1, Some(&["a", "b"]), vec![row("a", 1), row("b", 2)])
        };
        assert_eq!(v.receive(ServerMsg::Window(first), 1_500), Followup::Ack(1));
        assert_eq!(a(), 1, "row a is as the server rendered it: not drawn again");
        assert_eq!(b(), 2, "row b changed: drawn again");
        assert_eq!(order_runs(), 1, "same order: the list is not diffed");
        assert_eq!(v.row("b").unwrap().get_untracked().entry.revision, 2);
        assert_eq!(v.connection.get_untracked(), Connection::Live);
    });
}
