//! The reader's display choices, kept in the browser (`localStorage`): the
//! theme (the system's `prefers-color-scheme`, light or dark) and the zone
//! absolute times are shown in (UTC, or the browser's own).
//!
//! The server knows neither, so it renders the system theme and UTC. The theme
//! is applied before the first paint by [`THEME_SCRIPT`] in the document's head
//! (no flash of the wrong theme); the zone once the page has hydrated, by
//! re-rendering what shows times (`crate::page` tracks [`Prefs::local_zone`]).

use leptos::prelude::*;

/// The `localStorage` key of the theme: "light", "dark" (absent: the system's).
pub const THEME_KEY: &str = "lockscope.theme";
/// The `localStorage` key of the zone: "local" (absent: UTC).
pub const ZONE_KEY: &str = "lockscope.zone";

/// Run in the document's head before anything is drawn: the remembered theme
/// as `data-theme` on `<html>` (style/main.css reads it).
pub const THEME_SCRIPT: &str = "try{var t=localStorage.getItem('lockscope.theme');\
if(t==='light'||t==='dark')document.documentElement.dataset.theme=t}catch(e){}";

/// The choices, as the page's context.
#[derive(Clone, Copy)]
pub struct Prefs {
    /// "system", "light" or "dark".
    pub theme: RwSignal<&'static str>,
    /// Absolute times in the browser's zone (else UTC).
    pub local_zone: RwSignal<bool>,
}

impl Prefs {
    /// The defaults; in the browser, once hydrated, what was remembered.
    pub fn new() -> Prefs {
        let prefs = Prefs {
            theme: RwSignal::new("system"),
            local_zone: RwSignal::new(false),
        };
        #[cfg(feature = "hydrate")]
        Effect::new(move |_| {
            let stored = |key| storage().and_then(|s| s.get_item(key).ok().flatten());
            prefs.theme.set(theme_named(stored(THEME_KEY).as_deref().unwrap_or("")));
            if stored(ZONE_KEY).as_deref() == Some("local") {
                prefs.set_local_zone(true);
            }
        });
        prefs
    }

    fn set_theme(self, name: &str) {
        let theme = theme_named(name);
        self.theme.set(theme);
        #[cfg(feature = "hydrate")]
        {
            let root = document().document_element();
            let saved = storage();
            match theme {
                "system" => {
                    root.map(|r| r.remove_attribute("data-theme"));
                    saved.map(|s| s.remove_item(THEME_KEY));
                }
                t => {
                    root.map(|r| r.set_attribute("data-theme", t));
                    saved.map(|s| s.set_item(THEME_KEY, t));
                }
            }
        }
    }

    fn set_local_zone(self, local: bool) {
        #[cfg(feature = "hydrate")]
        {
            lockscope_model::time::show_in_local(local.then_some(browser_offset as _));
            let saved = storage();
            if local {
                saved.map(|s| s.set_item(ZONE_KEY, "local"));
            } else {
                saved.map(|s| s.remove_item(ZONE_KEY));
            }
        }
        self.local_zone.set(local);
    }
}

impl Default for Prefs {
    fn default() -> Prefs {
        Prefs::new()
    }
}

fn theme_named(name: &str) -> &'static str {
    match name {
        "light" => "light",
        "dark" => "dark",
        _ => "system",
    }
}

#[cfg(feature = "hydrate")]
fn storage() -> Option<web_sys::Storage> {
    window().local_storage().ok().flatten()
}

/// The browser's offset east of UTC at `ms`, in minutes (its own zone rules).
#[cfg(feature = "hydrate")]
fn browser_offset(ms: lockscope_model::time::Millis) -> i32 {
    -(js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(ms as f64)).get_timezone_offset() as i32)
}

/// The two switches, in the page's header. Without JavaScript they do nothing
/// (the page stays in the system theme and UTC), so they are drawn disabled
/// until the page hydrates.
#[component]
pub fn PrefSwitches() -> impl IntoView {
    let prefs = expect_context::<Prefs>();
    let ready = RwSignal::new(false);
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| ready.set(true));
    let theme = move |t: &'static str| move || prefs.theme.get() == t;
    let zone = move |local: bool| move || prefs.local_zone.get() == local;
    view! {
        <span class="prefs" data-testid="prefs">
            <label>
                "theme "
                <select data-testid="pref-theme" disabled=move || !ready.get()
                    on:change=move |ev| prefs.set_theme(&event_target_value(&ev))>
                    <option value="system" prop:selected=theme("system")>"system"</option>
                    <option value="light" prop:selected=theme("light")>"light"</option>
                    <option value="dark" prop:selected=theme("dark")>"dark"</option>
                </select>
            </label>
            <label>
                "times in "
                <select data-testid="pref-zone" disabled=move || !ready.get()
                    on:change=move |ev| prefs.set_local_zone(event_target_value(&ev) == "local")>
                    <option value="utc" prop:selected=zone(false)>"UTC"</option>
                    <option value="local" prop:selected=zone(true)>"my time zone"</option>
                </select>
            </label>
        </span>
    }
}
