//! `lockscope`: runs the dashboard, takes and releases a lock from the shell,
//! runs a demo fleet of workers, makes API tokens, or calls a server's admin API.
//! The body is [`lockscope::start`], in the library.

fn main() -> std::process::ExitCode {
    lockscope::start::main()
}
