//! The document, the page frame every screen shares (header with who is
//! looking, connection indicator, the notice of the viewer's last action, fleet
//! overview, footer) and the choice of screen: the lock table
//! ([`crate::table`]), one lock ([`crate::detail`]), the sessions
//! ([`crate::sessions`]), the lock history ([`crate::history`]), the audit log
//! ([`crate::audit`]) or the sign-in form
//! ([`crate::signin`]). Every element a test or a person looks for has a
//! `data-testid`; rows carry their lock name in `data-lock`.

use leptos::prelude::*;
use lockscope_model::admin::Role;
use lockscope_model::time::{hms, human_duration, zone_name};
use lockscope_model::view::RowState;
use lockscope_model::{FleetSummary, Screen, StoreStatus};

use crate::links::{fleet_page_href, locks_href, sessions_href};
use crate::live::{Connection, LiveView};
use crate::prefs::{PrefSwitches, Prefs};
use crate::rows::state_icon;
use crate::unlocker::UnlockerCell;
use crate::viewer::{NoAuthBanner, Notice, WhoAmI};

/// The HTML document around [`App`], rendered on the server. An [`AnyView`], so that
/// its HTML rendering is compiled here (opt-level 0 in the server's release build),
/// not once more in the server's library (docs/performance.md, "The first run, cut again").
pub fn shell(options: LeptosOptions) -> AnyView {
    let page = use_context::<lockscope_model::Page>().unwrap_or_default();
    let attention = page
        .fleets
        .iter()
        .find(|f| f.name == page.fleet)
        .map_or(0, |f| f.counts.attention());
    let title = tab_title(&page.fleet, attention, &page.screen);
    let early_socket = crate::boot::early_socket(&page);
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <meta name="color-scheme" content="dark light"/>
                // The remembered theme, before anything is drawn (crate::prefs).
                <script inner_html=crate::prefs::THEME_SCRIPT></script>
                // A live page's websocket, opened before the wasm arrives (crate::boot).
                {early_socket.map(|s| view! { <script inner_html=s></script> })}
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
    .into_any()
}

/// The page. On the server it reads the [`lockscope_model::Page`] the request
/// handler provided as context; during hydration the same value comes from the
/// page itself.
#[component]
pub fn App() -> impl IntoView {
    let page = SharedValue::new(|| use_context::<lockscope_model::Page>().unwrap_or_default()).into_inner();
    let notice = page.notice.clone();
    let viewer = page.viewer.clone();
    let is_admin = viewer.role == Role::Admin;
    provide_context(viewer);
    let live = LiveView::new(page);
    provide_context(live);
    let prefs = Prefs::new();
    provide_context(prefs);

    // A page shows one screen for its whole life (other screens are other URLs).
    let kind = live.screen.with_untracked(Kind::of);
    #[cfg(feature = "hydrate")]
    if kind.is_live() {
        crate::socket::start(live);
    }
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let title = tab_title(&live.fleet.get(), live.attention(), &live.screen.get());
        document().set_title(&title);
    });

    // Everything below the header is drawn again when the zone of absolute
    // times changes (their text is not reactive to it), header excepted: it
    // holds the switches (and its own times follow the clock anyway).
    let body = move || match kind {
        Kind::Locks => {
            view! { <Overview/><crate::table::States/><crate::table::Controls/><crate::table::LockTable/> }.into_any()
        }
        Kind::Sessions => view! { <Overview/><crate::sessions::SessionsPage/> }.into_any(),
        Kind::Lock => view! { <crate::detail::LockPage/> }.into_any(),
        Kind::Audit => view! { <crate::audit::AuditPage/> }.into_any(),
        Kind::History => view! { <crate::history::HistoryPage/> }.into_any(),
        Kind::Charts => view! { <crate::charts::ChartsPage/> }.into_any(),
        Kind::SignIn => view! { <crate::signin::SignInPage/> }.into_any(),
    };
    let here = move |k: Kind| kind == k;
    let locks_href = move || locks_href(&live.fleet.get());
    let sessions_href = move || sessions_href(&live.fleet.get());
    let history_href = move || fleet_page_href("/history", &live.fleet.get());
    let charts_href = move || fleet_page_href("/charts", &live.fleet.get());
    view! {
        <NoAuthBanner/>
        <header class="top">
            <h1><a href=locks_href>"lockscope"</a></h1>
            // A stranger (the sign-in page) sees the product name and the form only.
            {(!here(Kind::SignIn)).then(|| view! {
                <span class="fleet" data-testid="fleet">{move || live.fleet.get()}</span>
                <nav class="pages">
                    <a href=locks_href data-testid="nav-locks" class:here=here(Kind::Locks) aria-current=here(Kind::Locks).then_some("page")>"locks"</a>
                    " "
                    <a href=sessions_href data-testid="nav-sessions" class:here=here(Kind::Sessions) aria-current=here(Kind::Sessions).then_some("page")>"sessions"</a>
                    " "
                    <a href=history_href data-testid="nav-history" class:here=here(Kind::History) aria-current=here(Kind::History).then_some("page")>"history"</a>
                    " "
                    <a href=charts_href data-testid="nav-charts" class:here=here(Kind::Charts) aria-current=here(Kind::Charts).then_some("page")>"charts"</a>
                    {is_admin.then(|| view! {
                        " "
                        <a href="/audit" data-testid="nav-audit" class:here=here(Kind::Audit) aria-current=here(Kind::Audit).then_some("page")>"audit"</a>
                    })}
                </nav>
                <span class="source" data-testid="source">{move || live.source()}</span>
            })}
            {kind.is_live().then(|| view! { <Indicator/> })}
            <PrefSwitches/>
            <WhoAmI signing_in=here(Kind::SignIn)/>
        </header>
        {move || {
        prefs.local_zone.track();
        let notice = notice.clone();
        view! {
        <main>
            {kind.is_live().then(|| view! { <crate::outage::StoreBanner/> })}
            {notice.map(|entry| view! { <Notice entry/> })}
            {body()}
        </main>
        <footer>
            {here(Kind::Locks).then(|| view! {
                <span data-testid="view-range">{move || range_text(live)}</span>
                <span data-testid="view-total">{move || live.total.get()}</span>
                {move || if live.view.with(|v| v.filter.is_empty()) { "" } else { " matching" }}
                " · "
            })}
            {format!("times on the server's clock, shown in {}", zone_name(live.now.get_untracked()))}
            {kind.is_live().then(|| view! {
                "; browser offset "
                <span data-testid="clock-offset">{move || format!("{:+} ms", live.clock_offset.get())}</span>
                " · last update "
                <span data-testid="lag">{move || format!("{} ms", live.lag_ms.get())}</span>
                " after it reached the server"
            })}
        </footer>
        }
        }}
    }
}

/// Which screen a page shows (its [`Screen`] without the data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Locks,
    Lock,
    Sessions,
    Audit,
    History,
    Charts,
    SignIn,
}

impl Kind {
    fn of(s: &Screen) -> Kind {
        match s {
            Screen::Locks => Kind::Locks,
            Screen::Lock { .. } => Kind::Lock,
            Screen::Sessions { .. } => Kind::Sessions,
            Screen::Audit { .. } => Kind::Audit,
            Screen::History { .. } => Kind::History,
            Screen::Charts { .. } => Kind::Charts,
            Screen::SignIn { .. } => Kind::SignIn,
        }
    }

    /// Kept live over the websocket (the audit and history pages are read once; the sign-in
    /// page has nothing to show yet).
    fn is_live(self) -> bool {
        matches!(self, Kind::Locks | Kind::Lock | Kind::Sessions)
    }
}

/// The browser tab's title: what needs attention first, so a glance at the tab
/// bar tells.
pub fn tab_title(fleet: &str, attention: u64, screen: &Screen) -> String {
    let page = match screen {
        Screen::Locks => String::new(),
        Screen::Lock { detail } => format!("{} · ", detail.name),
        Screen::Sessions { .. } => "sessions · ".into(),
        Screen::Audit { .. } => "audit · ".into(),
        Screen::History { review } => match review.exact_lock() {
            Some(lock) => format!("history of {lock} · "),
            None => "history · ".into(),
        },
        Screen::Charts { charts } => format!("charts {} · ", charts.window.as_str()),
        Screen::SignIn { .. } => "sign in · ".into(),
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

/// Where the data on screen comes from, and how fresh it is.
#[component]
pub(crate) fn Indicator() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let state = move || {
        let now = live.now.get();
        match (live.connection.get(), live.status.get()) {
            (Connection::Static, _) => (
                "static",
                format!("snapshot of {}; live updates need JavaScript", hms(now)),
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
            // What went wrong is the banner's (crate::outage::StoreBanner): the
            // header stays one short line.
            (Connection::Live, StoreStatus::Unreachable { since, .. }) => (
                "store-unreachable",
                format!("store unreachable since {}; showing the last known state", hms(since)),
            ),
            // Read live; the banner says why writes are blocked.
            (Connection::Live, StoreStatus::WritesBlocked { since, .. }) => (
                "store-writes-blocked",
                format!("live; writes to the store blocked since {}", hms(since)),
            ),
        }
    };
    view! {
        <span class="indicator" data-testid="connection" data-state=move || state().0>
            {move || state().1}
        </span>
    }
}

/// The worst cell's icon: its state's, "?" for a fleet whose state is unknown.
fn worst_icon(state: &str) -> &'static str {
    RowState::parse(state).map_or("?", state_icon)
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
    let now = Signal::derive(move || live.now.get());
    let row = move |f: FleetSummary| {
        let current = live.fleet.with(|c| *c == f.name);
        // The fleet on screen counts from its live view, so the overview never
        // disagrees with the rows below it (pages without a view use the summary).
        let from_view = current && live.has_view();
        let counts = move || if from_view { live.counts() } else { f.counts };
        let (state, label) = match &f.status {
            StoreStatus::Live { .. } => ("live", "live".to_string()),
            StoreStatus::Connecting { .. } => ("connecting", "connecting".to_string()),
            StoreStatus::Unreachable { since, .. } => ("unreachable", format!("unreachable since {}", hms(*since))),
            StoreStatus::WritesBlocked { since, .. } => {
                ("writes-blocked", format!("live; writes blocked since {}", hms(*since)))
            }
        };
        // The fleet's colour is its worst lock's, beside the store connection's;
        // a store that is not live leaves it unknown, never healthy, and its
        // counts the last known (crate::outage).
        let status = StoredValue::new(f.status.clone());
        let worst = move || status.with_value(|s| crate::outage::worst(s, &counts()));
        let stale = crate::outage::last_known_title(&f.status);
        let count = move |n: u64| {
            view! {
                {n}
                {stale.map(|_| view! { <span class="last-known-mark" aria-hidden="true">"?"</span> })}
            }
        };
        view! {
            <tr data-testid="fleet-row" data-fleet=f.name.clone() class:current=current data-worst=move || worst().state class:last-known=stale.is_some()>
                <td><a href=locks_href(&f.name)>{f.name.clone()}</a></td>
                <td class="state" data-state=state>
                    {label}
                    // A polled or rescanned fleet: when it last read its store
                    // (past 3× the interval: not live, in words).
                    {f.polled.map(|p| view! {
                        <div class="polled" data-testid="fleet-polled" data-stale=move || p.is_stale(now.get()).to_string()>
                            {move || p.text(now.get())}
                        </div>
                    })}
                    // Not by colour alone: the words say the history has a hole.
                    {f.history.map(|h| view! {
                        <div class="history-off" data-testid="fleet-history" role="status">
                            <span class="icon" aria-hidden="true">"⚠ "</span>{move || h.text(now.get())}
                        </div>
                    })}
                </td>
                <td class="worst" data-testid="fleet-worst" data-state=move || worst().state title=move || worst().title>
                    <span class="icon" aria-hidden="true">{move || worst_icon(worst().state)}</span>
                    {move || worst().text}
                    {stale.map(|_| view! { <span class="last-known-note">" (counts: last known)"</span> })}
                </td>
                <td data-testid="fleet-held" title=stale>{move || count(counts().held)}</td>
                <td data-testid="fleet-expired" title=stale>{move || count(counts().expired)}</td>
                <td data-testid="fleet-orphaned" title=stale>{move || count(counts().orphaned)}</td>
                <td data-testid="fleet-blacklisted" title=stale>{move || count(counts().blacklisted)}</td>
                <td data-testid="fleet-overdue" title=stale>{move || count(counts().overdue)}</td>
                <td data-testid="fleet-malformed" title=stale>{move || count(counts().malformed)}</td>
                <td data-testid="fleet-foreign" title=stale>{move || count(counts().foreign)}</td>
                <td data-testid="fleet-waiters" title=stale>{move || count(counts().waiters)}</td>
                <UnlockerCell unlocker=f.unlocker.clone() now=now/>
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
                        <th title="held by clients of a foreign schema that keeps no times">"foreign"</th>
                        <th>"waiters"</th>
                        <th>"unlocker"</th>
                        <th class="source">"source"</th>
                    </tr>
                </thead>
                <tbody>{move || live.overview.get().into_iter().map(row).collect_view()}</tbody>
            </table>
        </div>
    }
}
