//! The browser's entry point: `scripts/build-site.sh` builds this crate for
//! `wasm32-unknown-unknown` with `hydrate`, and the page's script calls
//! [`hydrate`], which takes over the server-rendered document (lockscope-app's
//! [`App`](lockscope_app::App)). Without `hydrate` (the workspace's host builds)
//! it is empty.
// The page's view type nests past the compiler's default depth of 128 when
// the wasm build computes its hydration future's layout.
#![recursion_limit = "256"]

#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(lockscope_app::App);
}
