//! Keyboard use of the `<details>` the pages use as dialogs (the force-release
//! dialog, the blacklist and lift-blacklist forms): opening one moves focus to
//! its first field, Tab and Shift+Tab stay inside it while it is open, Escape
//! closes it and gives focus back to its summary (where it was opened from).
//! Without JavaScript they stay plain `<details>`, which the keyboard opens and
//! closes too.

use leptos::prelude::*;

/// What a dialog `<details>` does on its `toggle` event: focus the first field
/// of the form it holds once opened.
pub fn on_toggle(node: NodeRef<leptos::html::Details>) {
    #[cfg(feature = "hydrate")]
    if let Some(el) = node.get_untracked() {
        if el.open() {
            if let Ok(Some(field)) = el.query_selector(FIELDS) {
                focus(&field);
            }
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = node;
}

/// What a dialog `<details>` does on `keydown`: Escape closes it (focus back to
/// its summary); Tab wraps around its focusable elements while it is open.
pub fn on_keydown(node: NodeRef<leptos::html::Details>, ev: leptos::ev::KeyboardEvent) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        let Some(el) = node.get_untracked() else { return };
        if !el.open() {
            return;
        }
        match ev.key().as_str() {
            "Escape" => {
                ev.prevent_default();
                ev.stop_propagation();
                el.set_open(false);
                if let Ok(Some(summary)) = el.query_selector(":scope > summary") {
                    focus(&summary);
                }
            }
            "Tab" => {
                let Ok(list) = el.query_selector_all(FOCUSABLE) else {
                    return;
                };
                let items: Vec<web_sys::Element> = (0..list.length())
                    .filter_map(|i| list.item(i))
                    .filter_map(|n| n.dyn_into::<web_sys::Element>().ok())
                    .filter(|e| e.get_client_rects().length() > 0)
                    .collect();
                let (Some(first), Some(last)) = (items.first(), items.last()) else {
                    return;
                };
                let active = document().active_element();
                let at = |e: &web_sys::Element| active.as_ref() == Some(e);
                if ev.shift_key() && at(first) {
                    ev.prevent_default();
                    focus(last);
                } else if !ev.shift_key() && at(last) {
                    ev.prevent_default();
                    focus(first);
                }
            }
            _ => {}
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (node, ev);
}

/// The fields a person fills in (the first one gets focus on opening).
#[cfg(feature = "hydrate")]
const FIELDS: &str = "textarea, input:not([type=hidden]), select";

/// Everything Tab stops at inside a dialog, its summary first.
#[cfg(feature = "hydrate")]
const FOCUSABLE: &str = ":scope > summary, a[href], button:not([disabled]), textarea:not([disabled]), \
     input:not([type=hidden]):not([disabled]), select:not([disabled]), [tabindex]:not([tabindex=\"-1\"])";

#[cfg(feature = "hydrate")]
fn focus(el: &web_sys::Element) {
    use wasm_bindgen::JsCast;
    if let Some(el) = el.dyn_ref::<web_sys::HtmlElement>() {
        let _ = el.focus();
    }
}
