//! The backtrace recorded with a lock: where in the holder's code `lock` was
//! called. Runtime and library frames are dropped, one function's consecutive
//! frames are one, and locations inside runtime source (macro expansions) are not
//! the caller's; at most [`MAX_FRAMES`] remain (`docs/protocol.md`, `backtrace`).

use std::backtrace::Backtrace;

pub const MAX_FRAMES: usize = 16;

/// Frames from these crates (and their impls) say nothing about the caller.
const RUNTIME_CRATES: &[&str] = &[
    "std",
    "core",
    "alloc",
    "tokio",
    "futures",
    "futures_core",
    "futures_util",
    "tracing",
    "tracing_futures",
    // libtest, which runs a test binary's functions.
    "test",
];

/// Frames of the process's start and of this library.
fn skipped(sym: &str) -> bool {
    if matches!(
        sym,
        "main" | "_start" | "start_thread" | "clone" | "clone3" | "thread_start"
    ) || sym.starts_with("__rust")
        || sym.starts_with("__libc")
    {
        return true;
    }
    // `<X as Trait>::f`: the frame belongs to X's crate; a bare generic
    // parameter (`<F as Future>::poll`) is the runtime driving a future.
    let path = match sym.strip_prefix('<') {
        Some(rest) => {
            let ty = rest.split(" as ").next().unwrap_or(rest);
            // `<&dyn core::ops::Fn<…> as …>`: the crate of the type behind the pointer.
            let ty = ["&", "*", "mut ", "const ", "dyn "]
                .iter()
                .fold(ty, |t, p| t.strip_prefix(p).unwrap_or(t).trim_start());
            // `<fn() -> T as FnOnce<()>>::call_once`: a function pointer called
            // by whoever holds it, a shim of the runtime's.
            if !ty.contains("::") || ty.starts_with("fn(") {
                return true;
            }
            ty
        }
        None => sym,
    };
    let krate = path.split("::").next().unwrap_or(path);
    RUNTIME_CRATES.contains(&krate) || path.starts_with("lockscope_store::client")
}

/// Captures the current backtrace and keeps the caller's frames, innermost first,
/// each as `symbol (file:line)` when the location is known.
pub fn capture() -> Vec<String> {
    trim(&Backtrace::force_capture().to_string())
}

/// Parses `std::backtrace::Backtrace`'s display form.
pub fn trim(text: &str) -> Vec<String> {
    let mut frames: Vec<(String, Option<String>)> = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(at) = t.strip_prefix("at ") {
            if let Some(last) = frames.last_mut() {
                last.1.get_or_insert_with(|| at.to_string());
            }
        } else if let Some((num, sym)) = t.split_once(": ") {
            if num.chars().all(|c| c.is_ascii_digit()) {
                frames.push((sym.to_string(), None));
            }
        }
    }
    // One frame per function: a closure or an async body (`f::{{closure}}`), a
    // `select!` branch inside it and the function itself are one function,
    // consecutive once the runtime's frames between them are gone.
    let mut kept: Vec<(String, Option<String>)> = Vec::new();
    for (sym, at) in frames.into_iter().filter(|(sym, _)| !skipped(sym)) {
        let sym = without_closures(&sym).to_string();
        let at = at.filter(|at| !in_runtime_source(at));
        match kept.last_mut() {
            Some(last) if last.0 == sym => {
                if last.1.is_none() {
                    last.1 = at;
                }
            }
            _ => kept.push((sym, at)),
        }
    }
    kept.into_iter()
        .map(|(sym, at)| match at {
            Some(at) => format!("{sym} ({at})"),
            None => sym,
        })
        .take(MAX_FRAMES)
        .collect()
}

/// `f` for `f::{{closure}}`, `f::{closure#0}` (the newer symbol form), and any
/// number of them.
fn without_closures(sym: &str) -> &str {
    let mut sym = sym;
    loop {
        let trimmed = sym.trim_end_matches("::{{closure}}");
        let trimmed = match trimmed.rsplit_once("::{closure#") {
            Some((f, n))
                if n.strip_suffix('}')
                    .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit())) =>
            {
                f
            }
            _ => trimmed,
        };
        if trimmed == sym {
            return sym;
        }
        sym = trimmed;
    }
}

/// A location in the source of the language runtime or of a runtime crate: the
/// code of a macro (`tokio::select!`, `futures::join!`) expanded into the
/// caller's function, or a standard library function inlined into it. It says
/// nothing about where the caller is, so the frame keeps the next location of
/// the same function (or none).
fn in_runtime_source(at: &str) -> bool {
    let path = at.replace('\\', "/");
    if path.starts_with("/rustc/") || path.contains("/lib/rustlib/src/") {
        return true;
    }
    // `…/.cargo/registry/src/<index>/tokio-1.47.1/src/macros/select.rs:…`
    path.split('/').any(|dir| {
        dir.rsplit_once('-').is_some_and(|(krate, version)| {
            version.starts_with(|c: char| c.is_ascii_digit())
                && RUNTIME_CRATES.contains(&krate.replace('-', "_").as_str())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_callers_frames() {
        let text = "   0: std::backtrace::Backtrace::force_capture
             at /rustc/abc/library/std/src/backtrace.rs:312:13
   1: lockscope_store::client::Session<S>::lock::{{closure}}
             at ./store/src/client/mod.rs:200:5
   2: billing::invoices::run::{{closure}}
             at ./src/invoices.rs:42:18
   3: <core::pin::Pin<P> as core::future::future::Future>::poll
   4: billing::main::{{closure}}
             at ./src/main.rs:9:5
   5: tokio::runtime::park::CachedParkThread::block_on
   6: <F as core::future::into_future::IntoFuture>::into_future
   7: <tokio::runtime::task::Task<S> as Drop>::drop
   8: maintenance::sweep::run
             at ./src/sweep.rs:3:1
   9: main
  10: futures_util::future::FutureExt::poll_unpin
  11: start_thread
             at ./nptl/pthread_create.c:442:8
  12: clone3
  13: <&dyn core::ops::function::Fn<(), Output = i32> + core::marker::Sync as core::ops::function::FnOnce<()>>::call_once
             at /rustc/abc/library/core/src/ops/function.rs:287:21
";
        assert_eq!(
            trim(text),
            vec![
                "billing::invoices::run (./src/invoices.rs:42:18)",
                "billing::main (./src/main.rs:9:5)",
                "maintenance::sweep::run (./src/sweep.rs:3:1)",
            ]
        );
    }

    /// docs/protocol.md: "consecutive frames of one function (after removing
    /// `::{{closure}}`) are collapsed into one" and "a location in the source of the
    /// language runtime or of a runtime crate … is not the caller's — it is a macro
    /// such as `tokio::select!` expanded into the caller". The demo's first frame
    /// pointed into tokio's `select!`; `lockscope lock` recorded `lockscope::main` twice.
    #[test]
    fn select_branches_and_async_main_are_one_frame_each_at_the_callers_line() {
        let text = "   0: std::backtrace::Backtrace::force_capture
             at /rustc/abc/library/std/src/backtrace.rs:312:13
   1: lockscope_store::client::Session<S>::lock::{{closure}}
             at ./store/src/client/mod.rs:200:5
   2: demo::worker::run::{{closure}}::{{closure}}
             at /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tokio-1.47.1/src/macros/select.rs:707:49
   3: demo::worker::run::{{closure}}
             at ./demo/src/worker.rs:88:13
   4: <core::future::poll_fn::PollFn<F> as core::future::future::Future>::poll
             at /rustc/abc/library/core/src/future/poll_fn.rs:151:9
   5: lockscope::cli::lock::{{closure}}
             at /rustc/abc/library/core/src/result.rs:2000:1
   6: lockscope::main::{{closure}}
   7: tokio::runtime::park::CachedParkThread::block_on
             at /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tokio-1.47.1/src/runtime/park.rs:285:60
   8: lockscope::main
             at ./server/src/main.rs:40:1
   9: core::ops::function::FnOnce::call_once
";
        assert_eq!(
            trim(text),
            vec![
                "demo::worker::run (./demo/src/worker.rs:88:13)",
                "lockscope::cli::lock",
                "lockscope::main (./server/src/main.rs:40:1)",
            ]
        );
        assert!(in_runtime_source(
            "/home/u/.cargo/registry/src/x/futures-util-0.3.31/src/async_await/join_mod.rs:1"
        ));
        assert!(!in_runtime_source("./src/tokio-helpers-2/main.rs:1"));
        assert_eq!(without_closures("a::b::{closure#0}::{{closure}}::{closure#12}"), "a::b");
        assert!(skipped(
            "<fn() -> core::result::Result<(), alloc::string::String> as core::ops::function::FnOnce<()>>::call_once"
        ));
        assert!(skipped("test::run_test_in_process"));
    }
}
