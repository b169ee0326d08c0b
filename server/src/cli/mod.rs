//! The `lockscope` binary's command line and its subcommands other than `serve`.
//!
//! - [`args`]: the command line (every flag with its environment fallback).
//! - [`admin`]: `lockscope admin`, the admin actions through a server's JSON API.
//! - [`get`]: `lockscope get locks|sessions` and `lockscope describe lock`, the
//!   read commands through a server's list API.
//! - [`history`]: `lockscope history export`, read from the history's database.
//! - [`locks`]: `lockscope lock` and `lockscope unlock`, from the shell through the store.
//! - [`demo`]: `lockscope demo`, a simulated fleet of workers over the client library.
//! - [`watch`]: `lockscope watch locks`, a fleet's changes from a server's websocket.
//! - [`shell`]: `lockscope completions` and `lockscope man`, from the clap definition.

pub mod admin;
pub mod args;
pub mod demo;
pub mod get;
pub mod history;
pub mod locks;
pub mod shell;
pub mod watch;
