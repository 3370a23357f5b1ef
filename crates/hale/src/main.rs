//! The `hale` binary: CLI glue only.
//!
//! Each subcommand parses its arguments and calls into the library crates
//! (hale-gateway, hale-chaos, hale-store, hale-core). No rule lives here.

mod agents_cmd;
mod cli;
mod demo;
mod demo_tools;
mod jobs_cmd;
mod run;

use clap::Parser;

/// mimalloc: a turn allocates many small, short-lived buffers (JSON, headers,
/// journal rows); glibc malloc was a fifth of the gateway's CPU under load.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The log filter's environment variable (tracing-subscriber syntax, e.g. `info,hale_gateway=debug`).
const LOG_ENV: &str = "HALE_LOG";

fn main() -> std::process::ExitCode {
    // First, before any command can build an HTTP client (DESIGN §10).
    cli::install_crypto();
    let cli = cli::Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env(LOG_ENV)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: could not start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(cli::run(cli)) {
        Ok(code) => code,
        // The reader of our output went away (`hale events tail | head`):
        // stop quietly, as a process killed by SIGPIPE would.
        Err(e) if is_broken_pipe(&e) => std::process::ExitCode::from(EXIT_BROKEN_PIPE),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The shell's exit status of a process killed by SIGPIPE (128 + 13).
const EXIT_BROKEN_PIPE: u8 = 141;

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
