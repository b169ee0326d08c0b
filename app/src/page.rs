//! The lock table page. Every element a test or a person looks for has a
//! `data-testid`; rows carry their lock name in `data-lock`.

use leptos::prelude::*;
use lockscope_model::fleet::Liveness;
use lockscope_model::time::{human_duration, utc_hms};
use lockscope_model::{FleetSummary, LockBody, LockEntry, Page, StoreStatus};

use crate::live::{Connection, LiveView};

/// The HTML document around [`App`], rendered on the server.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <title>"lockscope"</title>
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

/// The page. On the server it reads the [`Page`] the request handler provided as
/// context; during hydration the same value comes from the page itself.
#[component]
pub fn App() -> impl IntoView {
    let page = SharedValue::new(|| use_context::<Page>().unwrap_or_default()).into_inner();
    let live = LiveView::new(page);
    provide_context(live);
    #[cfg(feature = "hydrate")]
    crate::socket::start(live);

    view! {
        <header class="top">
            <h1>"lockscope"</h1>
            <span class="fleet" data-testid="fleet">{move || live.fleet.get()}</span>
            <span class="source" data-testid="source">{move || live.source()}</span>
            <Indicator/>
        </header>
        <main>
            <Overview/>
            <LockTable/>
        </main>
        <footer>
            <span data-testid="lock-count">{move || format!("{} locks", live.names.with(Vec::len))}</span>
            " · times shown on the server's clock (UTC); browser offset "
            <span data-testid="clock-offset">{move || format!("{:+} ms", live.clock_offset.get())}</span>
        </footer>
    }
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
            (Connection::Live, StoreStatus::Live { .. }) => ("live", "live".to_string()),
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

/// One row per fleet: its connection and headline numbers; the name switches to
/// that fleet's table.
#[component]
fn Overview() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let row = move |f: FleetSummary| {
        let current = live.fleet.with(|c| *c == f.name);
        // The fleet on screen counts from its live table, so the overview never
        // disagrees with the rows below it; the others refresh every few seconds.
        let counts = move || if current { live.counts() } else { f.counts };
        let (state, label) = match &f.status {
            StoreStatus::Live { .. } => ("live", "live".to_string()),
            StoreStatus::Connecting { .. } => ("connecting", "connecting".to_string()),
            StoreStatus::Unreachable { since, .. } => {
                ("unreachable", format!("unreachable since {} UTC", utc_hms(*since)))
            }
        };
        view! {
            <tr data-testid="fleet-row" data-fleet=f.name.clone() class:current=current>
                <td><a href=format!("/?fleet={}", f.name)>{f.name.clone()}</a></td>
                <td class="state" data-state=state>{label}</td>
                <td data-testid="fleet-held">{move || counts().held}</td>
                <td data-testid="fleet-overdue">{move || counts().overdue}</td>
                <td data-testid="fleet-expired">{move || counts().expired}</td>
                <td data-testid="fleet-malformed">{move || counts().malformed}</td>
                <td data-testid="fleet-waiters">{move || counts().waiters}</td>
                <td class="source">{f.source}</td>
            </tr>
        }
    };
    view! {
        <table class="overview" data-testid="fleet-overview">
            <thead>
                <tr>
                    <th>"fleet"</th>
                    <th>"store"</th>
                    <th>"held"</th>
                    <th>"overdue"</th>
                    <th>"expired"</th>
                    <th>"malformed"</th>
                    <th>"waiters"</th>
                    <th>"source"</th>
                </tr>
            </thead>
            <tbody>{move || live.overview.get().into_iter().map(row).collect_view()}</tbody>
        </table>
    }
}

#[component]
fn LockTable() -> impl IntoView {
    let live = expect_context::<LiveView>();
    view! {
        <table class="locks" data-testid="lock-table">
            <thead>
                <tr>
                    <th>"lock"</th>
                    <th>"holder"</th>
                    <th>"purpose"</th>
                    <th>"held for"</th>
                    <th>"expires in"</th>
                    <th>"waiters"</th>
                    <th>"fence"</th>
                </tr>
            </thead>
            <tbody>
                <For each=move || live.names.get() key=|name| name.clone() let:name>
                    <LockRow name/>
                </For>
            </tbody>
        </table>
        <Show when=move || live.names.with(Vec::is_empty)>
            <p class="empty" data-testid="empty">"No locks are held."</p>
        </Show>
    }
}

/// One lock. Re-renders only when its own row signal changes (and once a second
/// for the countdowns).
#[component]
fn LockRow(name: String) -> impl IntoView {
    let live = expect_context::<LiveView>();
    let Some(row) = live.row(&name) else {
        return view! { <tr></tr> }.into_any();
    };
    // An arena handle owned by this row's view: dropped when the row unmounts.
    let row = RwSignal::from(row);
    let entry = move || row.get();
    let lock = StoredValue::new(name.clone());
    let waiters = move || lock.with_value(|l| live.waiters_of(l));
    view! {
        <tr data-testid="lock-row" data-lock=name.clone() class=move || row_class(&entry(), live.now.get())>
            {move || cells(entry(), live.now.get())}
            <td class="waiters" data-testid="waiters" title=move || waiters().join("\n")>
                {move || match waiters().len() {
                    0 => String::new(),
                    n => n.to_string(),
                }}
            </td>
            <td class="fence" data-testid="fence">{move || row.with(|e| e.fence)}</td>
        </tr>
    }
    .into_any()
}

fn row_class(e: &LockEntry, now: i64) -> &'static str {
    match &e.body {
        LockBody::Malformed { .. } => "malformed",
        LockBody::Held(r) => match r.liveness(now) {
            Liveness::Healthy => "healthy",
            Liveness::Overdue => "overdue",
            Liveness::Expired => "expired",
        },
    }
}

fn cells(e: LockEntry, now: i64) -> impl IntoView {
    match e.body {
        LockBody::Held(r) => {
            let expires = r.auto_unlock_at - now;
            let expires = if expires >= 0 {
                human_duration(expires)
            } else {
                format!("expired {} ago", human_duration(expires))
            };
            view! {
                <td class="name">{e.name}</td>
                <td class="holder">
                    <span class="session">{r.session}</span>
                    " "
                    <span class="where">{format!("{}@{}:{}", r.service, r.host, r.pid)}</span>
                </td>
                <td class="purpose">{r.purpose}</td>
                <td class="age" data-testid="held-for">{human_duration(now - r.acquired_at)}</td>
                <td class="expires" data-testid="expires-in">{expires}</td>
            }
            .into_any()
        }
        LockBody::Malformed { raw, error } => {
            let preview: String = String::from_utf8_lossy(&raw).chars().take(120).collect();
            view! {
                <td class="name">{e.name}</td>
                <td class="malformed" colspan="4">
                    <strong>"malformed record: "</strong>
                    {error}
                    <code>{preview}</code>
                </td>
            }
            .into_any()
        }
    }
}
