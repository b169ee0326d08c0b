//! The backtrace recorded with a lock: where in the holder's code `lock` was
//! called. Runtime and library frames are dropped; at most [`MAX_FRAMES`] remain.

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
            if !ty.contains("::") {
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
    frames
        .into_iter()
        .filter(|(sym, _)| !skipped(sym))
        .map(|(sym, at)| {
            let sym = sym.trim_end_matches("::{{closure}}").to_string();
            match at {
                Some(at) => format!("{sym} ({at})"),
                None => sym,
            }
        })
        .take(MAX_FRAMES)
        .collect()
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
}
