//! The lock table page. Every element a test or a person looks for has a
//! `data-testid`; rows carry their lock name in `data-lock`.
//!
//! The table is a virtual scroll: the scroller is as tall as the whole view
//! (spacer rows above and below the window), and only the window's rows exist in
//! the document. Without JavaScript the page shows the window the URL names, with
//! links to the previous and next windows.

use leptos::prelude::*;
use lockscope_model::time::{human_duration, utc_hms};
use lockscope_model::view::{RowState, SortKey, ViewSpec};
use lockscope_model::{FleetSummary, LockBody, Screen, StoreStatus};

use crate::live::{Connection, LiveView};
use crate::rows::{row_text, state_icon};

/// Height of one table row, in CSS pixels (the stylesheet fixes it too).
pub const ROW_PX: f64 = 36.0;
/// Tallest scroll area: browsers cap element heights (~33 M px in Chromium); past
/// this, a pixel of scroll stands for more than one row.
const MAX_SCROLL_PX: f64 = 8_000_000.0;
/// Rows kept beyond the visible ones on each side.
const OVERSCAN: u64 = 30;

/// The HTML document around [`App`], rendered on the server.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    let page = use_context::<lockscope_model::Page>().unwrap_or_default();
    let attention = page
        .fleets
        .iter()
        .find(|f| f.name == page.fleet)
        .map_or(0, |f| f.counts.attention());
    let title = tab_title(&page.fleet, attention, &page.screen);
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <title>{title}</title>
                <link rel="icon" type="image/svg+xml" href="/favicon.svg"/>
                <link rel="stylesheet" href="/pkg/lockscope.css"/>
                <AutoReload options=options.clone()/>
                <HydrationScripts options/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

/// The page. On the server it reads the [`lockscope_model::Page`] the request
/// handler provided as context; during hydration the same value comes from the
/// page itself.
#[component]
pub fn App() -> impl IntoView {
    let page = SharedValue::new(|| use_context::<lockscope_model::Page>().unwrap_or_default()).into_inner();
    let live = LiveView::new(page);
    provide_context(live);
    #[cfg(feature = "hydrate")]
    crate::socket::start(live);
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let title = tab_title(&live.fleet.get(), live.attention(), &live.screen.get());
        document().set_title(&title);
    });

    // A page shows one screen for its whole life (other screens are other URLs).
    let screen = live.screen.with_untracked(|s| std::mem::discriminant(s));
    let is = |s: Screen| std::mem::discriminant(&s) == screen;
    let body = if is(Screen::Locks) {
        view! { <Overview/><States/><Controls/><LockTable/> }.into_any()
    } else if is(Screen::Sessions {
        sessions: Default::default(),
    }) {
        view! { <Overview/><crate::sessions::SessionsPage/> }.into_any()
    } else {
        view! { <crate::detail::LockPage/> }.into_any()
    };
    let locks_href = move || format!("/?fleet={}", encode(&live.fleet.get()));
    let sessions_href = move || format!("/sessions?fleet={}", encode(&live.fleet.get()));
    view! {
        <header class="top">
            <h1><a href=locks_href>"lockscope"</a></h1>
            <span class="fleet" data-testid="fleet">{move || live.fleet.get()}</span>
            <nav class="pages">
                <a href=locks_href data-testid="nav-locks" class:here=is(Screen::Locks)>"locks"</a>
                " "
                <a href=sessions_href data-testid="nav-sessions" class:here=!is(Screen::Locks) && live.watch().is_some_and(|w| w == lockscope_model::Watch::Sessions)>"sessions"</a>
            </nav>
            <span class="source" data-testid="source">{move || live.source()}</span>
            <Indicator/>
        </header>
        <main>{body}</main>
        <footer>
            {is(Screen::Locks).then(|| view! {
                <span data-testid="view-range">{move || range_text(live)}</span>
                <span data-testid="view-total">{move || live.total.get()}</span>
                {move || if live.view.with(|v| v.filter.is_empty()) { "" } else { " matching" }}
                " · "
            })}
            "times on the server's clock (UTC); browser offset "
            <span data-testid="clock-offset">{move || format!("{:+} ms", live.clock_offset.get())}</span>
            " · last update "
            <span data-testid="lag">{move || format!("{} ms", live.lag_ms.get())}</span>
            " after it reached the server"
        </footer>
    }
}

/// The browser tab's title: what needs attention first, so a glance at the tab
/// bar tells.
pub fn tab_title(fleet: &str, attention: u64, screen: &Screen) -> String {
    let page = match screen {
        Screen::Locks => String::new(),
        Screen::Lock { detail } => format!("{} · ", detail.name),
        Screen::Sessions { .. } => "sessions · ".into(),
    };
    let alert = match attention {
        0 => String::new(),
        n => format!("({n} need attention) "),
    };
    format!("{alert}{page}{fleet} — lockscope")
}

/// "locks 101–200 of " (the total is its own element).
fn range_text(live: LiveView) -> String {
    let n = live.order.with(Vec::len) as u64;
    if n == 0 {
        return "0 of ".into();
    }
    let first = live.offset.get() + 1;
    format!("locks {first}–{} of ", first + n - 1)
}

/// Changes the view on screen (the socket sends it; the URL follows).
fn set_view(live: LiveView, change: impl FnOnce(&mut ViewSpec)) {
    let mut v = live.view.get_untracked();
    change(&mut v);
    #[cfg(feature = "hydrate")]
    crate::socket::show(live, v);
    #[cfg(not(feature = "hydrate"))]
    let _ = v;
}

/// `/?fleet=…&…` for `view` (links work without JavaScript).
fn href(fleet: &str, view: &ViewSpec) -> String {
    let mut url = format!("/?fleet={}", encode(fleet));
    for (k, v) in view.to_query() {
        url.push('&');
        url.push_str(k);
        url.push('=');
        url.push_str(&encode(&v));
    }
    url
}

/// Percent-encodes a query value.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Where the data on screen comes from, and how fresh it is.
#[component]
fn Indicator() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let state = move || {
        let now = live.now.get();
        match (live.connection.get(), live.status.get()) {
            (Connection::Static, _) => (
                "static",
                format!("snapshot of {} UTC; live updates need JavaScript", utc_hms(now)),
            ),
            (Connection::Connecting, _) => ("connecting", "connecting…".to_string()),
            (Connection::Reconnecting { retry_at }, _) => (
                "reconnecting",
                format!(
                    "server connection lost; reconnecting in {}",
                    human_duration((retry_at - now).max(0))
                ),
            ),
            (Connection::Live, StoreStatus::Live { .. }) => match live.behind() {
                Some(lag) => ("behind", format!("live, {} behind", lag_text(lag))),
                None => ("live", "live".to_string()),
            },
            (Connection::Live, StoreStatus::Connecting { .. }) => {
                ("store-connecting", "connecting to the store…".to_string())
            }
            (Connection::Live, StoreStatus::Unreachable { since, retry_at, error }) => (
                "store-unreachable",
                format!(
                    "store unreachable since {} UTC, retrying in {} ({error}); showing the last known state",
                    utc_hms(since),
                    human_duration((retry_at - now).max(0))
                ),
            ),
        }
    };
    view! {
        <span class="indicator" data-testid="connection" data-state=move || state().0>
            {move || state().1}
        </span>
    }
}

fn lag_text(ms: i64) -> String {
    if ms < 10_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        human_duration(ms)
    }
}

/// One row per fleet: its connection and headline numbers; the name switches to
/// that fleet's table.
#[component]
fn Overview() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let row = move |f: FleetSummary| {
        let current = live.fleet.with(|c| *c == f.name);
        // The fleet on screen counts from its live view, so the overview never
        // disagrees with the rows below it (pages without a view use the summary).
        let from_view = current && live.watch().is_none();
        let counts = move || if from_view { live.counts() } else { f.counts };
        let (state, label) = match &f.status {
            StoreStatus::Live { .. } => ("live", "live".to_string()),
            StoreStatus::Connecting { .. } => ("connecting", "connecting".to_string()),
            StoreStatus::Unreachable { since, .. } => {
                ("unreachable", format!("unreachable since {} UTC", utc_hms(*since)))
            }
        };
        // The fleet's colour is its worst lock's, beside the store connection's.
        let worst = move || {
            let c = counts();
            RowState::ALL
                .into_iter()
                .find(|s| *s != RowState::Healthy && c.of(*s) > 0)
                .unwrap_or(RowState::Healthy)
        };
        let worst_text = move || {
            let c = counts();
            match worst() {
                RowState::Healthy => "all healthy".to_string(),
                w => format!("{} {}", c.of(w), w.as_str()),
            }
        };
        view! {
            <tr data-testid="fleet-row" data-fleet=f.name.clone() class:current=current data-worst=move || worst().as_str()>
                <td><a href=format!("/?fleet={}", encode(&f.name))>{f.name.clone()}</a></td>
                <td class="state" data-state=state>{label}</td>
                <td class="worst" data-testid="fleet-worst" data-state=move || worst().as_str() title=move || worst().reason()>
                    <span class="icon" aria-hidden="true">{move || state_icon(worst())}</span>
                    {worst_text}
                </td>
                <td data-testid="fleet-held">{move || counts().held}</td>
                <td data-testid="fleet-expired">{move || counts().expired}</td>
                <td data-testid="fleet-orphaned">{move || counts().orphaned}</td>
                <td data-testid="fleet-blacklisted">{move || counts().blacklisted}</td>
                <td data-testid="fleet-overdue">{move || counts().overdue}</td>
                <td data-testid="fleet-malformed">{move || counts().malformed}</td>
                <td data-testid="fleet-waiters">{move || counts().waiters}</td>
                <td class="source">{f.source}</td>
            </tr>
        }
    };
    view! {
        <div class="wide">
            <table class="overview" data-testid="fleet-overview">
                <thead>
                    <tr>
                        <th>"fleet"</th>
                        <th>"store"</th>
                        <th>"worst"</th>
                        <th>"held"</th>
                        <th>"expired"</th>
                        <th>"orphaned"</th>
                        <th>"blacklisted"</th>
                        <th>"overdue"</th>
                        <th>"malformed"</th>
                        <th>"waiters"</th>
                        <th class="source">"source"</th>
                    </tr>
                </thead>
                <tbody>{move || live.overview.get().into_iter().map(row).collect_view()}</tbody>
            </table>
        </div>
    }
}

/// The fleet's locks per state and per service; each is a link that filters the
/// table to it.
#[component]
fn States() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let chip = move |s: RowState| {
        let link = move || {
            let mut v = live.view.get();
            v.filter.state = (v.filter.state != Some(s)).then_some(s);
            v.offset = 0;
            href(&live.fleet.get(), &v)
        };
        let on_click = move |ev: leptos::ev::MouseEvent| {
            ev.prevent_default();
            set_view(live, |v| {
                v.filter.state = (v.filter.state != Some(s)).then_some(s);
                v.offset = 0;
            });
        };
        view! {
            <a
                class="chip"
                data-testid="state-count"
                data-state=s.as_str()
                class:selected=move || live.view.with(|v| v.filter.state == Some(s))
                title=s.reason()
                href=link
                on:click=on_click
            >
                <span class="icon" aria-hidden="true">{state_icon(s)}</span>
                {s.as_str()}
                " "
                <b>{move || live.aggregates.with(|a| a.count(s))}</b>
            </a>
        }
    };
    let services = move || {
        live.aggregates.with(|a| {
            a.services
                .iter()
                .map(|(name, n)| {
                    let name = name.clone();
                    let target = name.clone();
                    let link = {
                        let name = name.clone();
                        move || {
                            let mut v = live.view.get();
                            v.filter.service = Some(name.clone());
                            v.offset = 0;
                            href(&live.fleet.get(), &v)
                        }
                    };
                    let on_click = move |ev: leptos::ev::MouseEvent| {
                        ev.prevent_default();
                        let target = target.clone();
                        set_view(live, |v| {
                            v.filter.service = Some(target);
                            v.offset = 0;
                        });
                    };
                    let label = name.clone();
                    view! {
                        <a class="service" data-testid="service-count" data-service=name href=link on:click=on_click>
                            {label}
                            " "
                            <b>{*n}</b>
                        </a>
                    }
                })
                .collect_view()
        })
    };
    view! {
        <section class="aggregates" data-testid="aggregates">
            <div class="states">{RowState::ALL.into_iter().map(chip).collect_view()}</div>
            <div class="services">
                <span class="label">"services "</span>
                {services}
                {move || {
                    let (shown, all) = live.aggregates.with(|a| (a.services.len() as u64, a.service_count));
                    (all > shown).then(|| format!("and {} more", all - shown))
                }}
            </div>
        </section>
    }
}

/// Filter and sort. A plain GET form (works without JavaScript); with it, each
/// change applies at once.
#[component]
fn Controls() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let v = live.view.get_untracked();
    view! {
        <form class="controls" method="get" action="/" data-testid="controls" on:submit=|ev| ev.prevent_default()>
            <input type="hidden" name="fleet" prop:value=move || live.fleet.get()/>
            <label>
                "state "
                <select
                    name="state"
                    data-testid="filter-state"
                    prop:value=move || live.view.with(|v| v.filter.state.map_or("", RowState::as_str))
                    on:change=move |ev| {
                        let s = RowState::parse(&event_target_value(&ev));
                        set_view(live, |v| { v.filter.state = s; v.offset = 0; });
                    }
                >
                    <option value="" selected=v.filter.state.is_none()>"any"</option>
                    {RowState::ALL
                        .into_iter()
                        .map(|s| view! {
                            <option value=s.as_str() selected=v.filter.state == Some(s)>{s.as_str()}</option>
                        })
                        .collect_view()}
                </select>
            </label>
            <TextFilter label="service " name="service" field=|f| &mut f.service list="services"/>
            <datalist id="services">
                {move || live.aggregates.with(|a| a.services.iter().map(|(s, _)| view! { <option value=s.clone()></option> }).collect_view())}
            </datalist>
            <TextFilter label="host " name="host" field=|f| &mut f.host/>
            <TextFilter label="name starts with " name="prefix" field=|f| &mut f.prefix/>
            <TextFilter label="contains " name="q" field=|f| &mut f.contains/>
            <label>
                "sort "
                <select
                    name="sort"
                    data-testid="sort"
                    prop:value=move || live.view.with(|v| v.sort.key.as_str())
                    on:change=move |ev| {
                        let k = SortKey::parse(&event_target_value(&ev)).unwrap_or_default();
                        set_view(live, |v| { v.sort.key = k; v.offset = 0; });
                    }
                >
                    {SortKey::ALL
                        .into_iter()
                        .map(|k| view! { <option value=k.as_str() selected=v.sort.key == k>{sort_label(k)}</option> })
                        .collect_view()}
                </select>
            </label>
            <label>
                <input
                    type="checkbox"
                    name="rev"
                    value="1"
                    data-testid="reverse"
                    checked=v.sort.reverse
                    prop:checked=move || live.view.with(|v| v.sort.reverse)
                    on:change=move |ev| {
                        let r = event_target_checked(&ev);
                        set_view(live, |v| { v.sort.reverse = r; v.offset = 0; });
                    }
                />
                " reversed"
            </label>
            <noscript><button type="submit">"apply"</button></noscript>
            <a class="reset" href=move || format!("/?fleet={}", encode(&live.fleet.get()))>"clear"</a>
        </form>
        {move || live.view_error.get().map(|e| view! { <p class="error" data-testid="view-error">"This URL's view was not usable (" {e} "); showing the default view."</p> })}
    }
}

/// One text field of the filter: applied when it changes (Enter or leaving the
/// field), not per keystroke, since a new filter builds a new index on the server.
#[component]
fn TextFilter(
    label: &'static str,
    /// The URL query key (the form's field name).
    name: &'static str,
    field: fn(&mut lockscope_model::view::Filter) -> &mut Option<String>,
    #[prop(optional)] list: Option<&'static str>,
) -> impl IntoView {
    let live = expect_context::<LiveView>();
    let value = move || {
        live.view
            .with(|v| field(&mut v.filter.clone()).clone().unwrap_or_default())
    };
    view! {
        <label>
            {label}
            <input
                name=name
                data-testid=format!("filter-{name}")
                list=list
                size="12"
                prop:value=value
                on:change=move |ev| {
                    let s = event_target_value(&ev);
                    set_view(live, |v| {
                        *field(&mut v.filter) = (!s.is_empty()).then_some(s);
                        v.offset = 0;
                    });
                }
            />
        </label>
    }
}

fn sort_label(k: SortKey) -> &'static str {
    match k {
        SortKey::Severity => "severity, then oldest",
        SortKey::Name => "name",
        SortKey::Age => "oldest first",
        SortKey::Expiry => "expires soonest",
        SortKey::Waiters => "most waiters",
        SortKey::Fence => "highest fence",
    }
}

/// Pixels of scroll per row: one row's height, unless the view is too tall for
/// the browser.
fn px_per_row(total: u64) -> f64 {
    let full = total as f64 * ROW_PX;
    if full > MAX_SCROLL_PX {
        MAX_SCROLL_PX / total as f64
    } else {
        ROW_PX
    }
}

#[component]
fn LockTable() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let scroller = NodeRef::<leptos::html::Div>::new();
    let is_static = move || live.connection.with(|c| *c == Connection::Static);
    let top = move || {
        if is_static() {
            return "0px".to_string();
        }
        format!("{}px", live.offset.get() as f64 * px_per_row(live.total.get()))
    };
    let bottom = move || {
        if is_static() {
            return "0px".to_string();
        }
        let total = live.total.get();
        let below = total.saturating_sub(live.offset.get() + live.order.with(Vec::len) as u64);
        format!("{}px", below as f64 * px_per_row(total))
    };
    // Scrolling moves the window: when the visible rows get near its edge, ask for
    // the window around them.
    let on_scroll = move |_| {
        let Some(el) = scroller.get_untracked() else { return };
        let total = live.total.get_untracked();
        let offset = live.offset.get_untracked();
        let len = live.order.with_untracked(Vec::len) as u64;
        let ppr = px_per_row(total);
        let scroll = el.scroll_top() as f64;
        let top = offset as f64 * ppr;
        let first = if scroll >= top && scroll < top + len as f64 * ROW_PX {
            offset + ((scroll - top) / ROW_PX) as u64
        } else {
            (scroll / ppr) as u64
        };
        let visible = (el.client_height() as f64 / ROW_PX).ceil() as u64 + 1;
        let want = (
            first.saturating_sub(OVERSCAN / 3),
            (first + visible + OVERSCAN / 3).min(total),
        );
        let requested = live.view.with_untracked(|v| (v.offset, v.offset + v.limit as u64));
        let covered = |(a, b): (u64, u64)| a <= want.0 && b >= want.1.min(total);
        if covered((offset, offset + len)) || covered(requested) {
            return;
        }
        let limit = (visible + 2 * OVERSCAN).clamp(1, lockscope_model::view::MAX_WINDOW as u64) as u32;
        set_view(live, |v| {
            v.offset = first.saturating_sub(OVERSCAN);
            v.limit = limit;
        });
    };
    // A new filter or order starts at the top.
    Effect::new(
        move |prev: Option<(lockscope_model::view::Filter, lockscope_model::view::Sort)>| {
            let cur = live.view.with(|v| (v.filter.clone(), v.sort));
            if prev.is_some_and(|p| p != cur) {
                if let Some(el) = scroller.get_untracked() {
                    el.set_scroll_top(0);
                }
            }
            cur
        },
    );
    // A URL that names a position: scroll there once the view is live.
    Effect::new(move |done: Option<bool>| {
        if done == Some(true) || live.connection.get() != Connection::Live {
            return false;
        }
        let (Some(el), offset) = (scroller.get_untracked(), live.offset.get_untracked()) else {
            return false;
        };
        if offset > 0 {
            el.set_scroll_top((offset as f64 * px_per_row(live.total.get_untracked())) as i32);
        }
        true
    });
    let pager = move || {
        let v = live.view.get();
        let total = live.total.get();
        let offset = live.offset.get();
        let limit = v.limit as u64;
        let fleet = live.fleet.get();
        let prev = (offset > 0).then(|| {
            href(
                &fleet,
                &ViewSpec {
                    offset: offset.saturating_sub(limit),
                    ..v.clone()
                },
            )
        });
        let next = (offset + limit < total).then(|| {
            href(
                &fleet,
                &ViewSpec {
                    offset: offset + limit,
                    ..v.clone()
                },
            )
        });
        view! {
            {prev.map(|h| view! { <a href=h data-testid="prev-page">"◀ previous"</a> })}
            " "
            {next.map(|h| view! { <a href=h data-testid="next-page">"next ▶"</a> })}
        }
    };
    view! {
        <div class="scroller" data-testid="scroller" node_ref=scroller on:scroll=on_scroll>
            <table class="locks" data-testid="lock-table">
                <thead>
                    <tr>
                        <th class="st">"state"</th>
                        <th class="name">"lock"</th>
                        <th class="holder">"holder"</th>
                        <th class="purpose">"purpose"</th>
                        <th class="age">"held for"</th>
                        <th class="expires">"expires in"</th>
                        <th class="waiters">"waiters"</th>
                        <th class="fence">"fence"</th>
                    </tr>
                </thead>
                <tbody>
                    <tr class="spacer" aria-hidden="true"><td colspan="8" style:height=top></td></tr>
                    <For each=move || live.order.get() key=|name| name.clone() let:name>
                        <LockRow name/>
                    </For>
                    <tr class="spacer" aria-hidden="true"><td colspan="8" style:height=bottom></td></tr>
                </tbody>
            </table>
        </div>
        <Show when=move || live.order.with(Vec::is_empty)>
            <p class="empty" data-testid="empty">
                {move || if live.view.with(|v| v.filter.is_empty()) { "No locks are held." } else { "No locks match this view." }}
            </p>
        </Show>
        <nav class="pager" data-testid="pager">{pager}</nav>
    }
}

/// One lock. Re-renders only when its own row signal changes; its state and
/// countdown cells also follow the clock (once a second).
#[component]
fn LockRow(name: String) -> impl IntoView {
    let live = expect_context::<LiveView>();
    let Some(row) = live.row(&name) else {
        return view! { <tr></tr> }.into_any();
    };
    // An arena handle owned by this row's view: dropped when the row unmounts.
    let row = RwSignal::from(row);
    // Memos: each is computed once per change of the row (or tick of the clock)
    // however many cells read it, and the cells re-render only if it differs.
    let text = Memo::new(move |_| row.with(row_text));
    let state = Memo::new(move |_| row.with(|r| r.state(live.now.get())));
    let timed = Memo::new(move |_| row.with(|r| crate::rows::countdowns(r, live.now.get())));
    let malformed = move || row.with(|r| matches!(r.entry.body, LockBody::Malformed { .. }));
    let name_link = name.clone();
    view! {
        <tr data-testid="lock-row" data-lock=name.clone() class=move || state.get().as_str() data-state=move || state.get().as_str()>
            <td class="st" data-testid="state" title=move || state.get().reason()>
                <span class="icon" aria-hidden="true">{move || state_icon(state.get())}</span>
                {move || state.get().as_str()}
            </td>
            <td class="name" title=name.clone()>
                <a href=move || format!("/lock?fleet={}&name={}", encode(&live.fleet.get()), encode(&name_link)) data-testid="lock-link">{name.clone()}</a>
                {move || row.with(|r| r.deadlock).then(|| view! { <span class="deadlock-flag" title="on a wait-for cycle">" ⟲"</span> })}
            </td>
            <td class="holder" title=move || text.with(|t| t.holder_title.clone())>
                <span class="where">{move || text.with(|t| t.holder.clone())}</span>
                " "
                <span class="session">{move || text.with(|t| t.session.clone())}</span>
            </td>
            <td class="purpose" class:malformed=malformed title=move || text.with(|t| t.purpose.clone())>{move || text.with(|t| t.purpose.clone())}</td>
            <td class="age" data-testid="held-for" title=move || timed.with(|t| t.held_title.clone())>{move || timed.with(|t| t.held_for.clone())}</td>
            <td class="expires" data-testid="expires-in" title=move || timed.with(|t| t.expires_title.clone())>{move || timed.with(|t| t.expires_in.clone())}</td>
            <td class="waiters" data-testid="waiters" title=move || text.with(|t| t.waiters_title.clone())>{move || text.with(|t| t.waiters.clone())}</td>
            <td class="fence" data-testid="fence">{move || row.with(|r| r.entry.fence)}</td>
        </tr>
    }
    .into_any()
}
