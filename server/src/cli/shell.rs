//! `lockscope completions SHELL` and `lockscope man`: the shell completions
//! (clap_complete) and the man pages (clap_mangen), both generated from the
//! command line's one clap definition ([`crate::cli::args::Cli`]), so neither
//! can name a flag the binary does not have.
//!
//! The man page is made by the binary rather than by a `build.rs`: the clap
//! definition pulls in the store's spec parser, the demo's config and the
//! read commands, so a build script would have to compile most of the crate
//! twice; `lockscope man --dir /usr/local/share/man/man1` at install time
//! writes the same pages from the binary being installed.

use std::io::Write;

use anyhow::Context;
use clap::CommandFactory;

use crate::cli::args::{CompletionsArgs, ManArgs};

/// The completion script for `args.shell`, on stdout.
pub fn completions(args: CompletionsArgs) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut crate::cli::args::Cli::command(), "lockscope", &mut out);
    out.flush().context("writing the completions")
}

/// The man page (roff) on stdout, or every page into `--dir`.
pub fn man(args: ManArgs) -> anyhow::Result<()> {
    let mut cmd = crate::cli::args::Cli::command().disable_help_subcommand(true);
    cmd.build();
    match args.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            write_pages(cmd, &dir)
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&page(cmd)?)
                .and_then(|()| out.flush())
                .context("writing the man page")
        }
    }
}

/// `cmd`'s page and, recursively, its subcommands' (`lockscope-get-locks.1`),
/// as `clap_mangen::generate_to` names them.
fn write_pages(cmd: clap::Command, dir: &std::path::Path) -> anyhow::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub.clone(), dir)?;
    }
    let path = dir.join(clap_mangen::Man::new(cmd.clone()).get_filename());
    std::fs::write(&path, page(cmd)?).with_context(|| format!("writing {}", path.display()))
}

/// One page in roff, every character past ASCII written as groff's `\[uXXXX]`
/// (the help's `…` and `→` are otherwise "invalid input characters" to troff).
fn page(cmd: clap::Command) -> anyhow::Result<Vec<u8>> {
    let mut roff = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut roff)
        .context("rendering the man page")?;
    let text = String::from_utf8(roff).context("the man page is not UTF-8")?;
    let mut ascii = String::with_capacity(text.len());
    for c in text.chars() {
        match c.is_ascii() {
            true => ascii.push(c),
            false => ascii.push_str(&format!("\\[u{:04X}]", c as u32)),
        }
    }
    Ok(ascii.into_bytes())
}
