//! The `hale` binary: CLI glue only.
//!
//! Each subcommand parses its arguments and calls into the library crates
//! (hale-gateway, hale-chaos, hale-store, hale-core). No rule lives here.

mod agents_cmd;
mod cli;
mod demo;
mod demo_tools;
mod jobs_cmd;
mod remote;
mod run;
mod setup;
mod telemetry;

use clap::Parser;

/// mimalloc, returning freed memory at once (hale-alloc says why).
#[global_allocator]
static GLOBAL: hale_alloc::Alloc = hale_alloc::ALLOC;

fn main() -> std::process::ExitCode {
    // Before any thread exists (mimalloc's option setter is not thread safe).
    hale_alloc::purge_at_once();
    hale_alloc::no_huge_pages();
    // First, before any command can build an HTTP client.
    setup::install_crypto();
    let cli = cli::Cli::parse();
    telemetry::init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // An idle worker gives back what its heap holds free (hale-alloc).
        .on_thread_park(hale_alloc::on_idle)
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
