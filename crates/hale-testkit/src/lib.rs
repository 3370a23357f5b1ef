//! Helpers the workspace's integration tests share, kept once here instead of
//! copied into each crate's `tests/common/mod.rs`: free loopback ports and
//! servers on them, recording webhook receivers, polling until a condition
//! holds, GET as JSON or text, child processes killed when dropped, a
//! `nats-server` of a test's own and the JetStream messages it stored, the
//! Python the SDK tests run and the agent CLIs the client tests run.
//!
//! Generic by design: it depends on no hale crate, so every hale crate can
//! take it as a dev-dependency. What a helper needs to know about one crate
//! (which binary to run, what a receiver records) comes in as an argument.

pub mod clis;
pub mod hook;
pub mod http;
pub mod nats;
pub mod net;
pub mod process;
pub mod python;
pub mod wait;

pub use clis::{CLAUDE, CODEX, Cli, GEMINI, cli, cli_or_skip};
pub use hook::hook;
pub use http::{client, get_json, get_text};
pub use nats::{NatsServer, StreamMsg, jetstream_len, jetstream_messages, nats_server_bin};
pub use net::{Served, Stoppable, free_addr, free_port, serve, serve_stoppable, wait_listening};
pub use process::{Proc, Program, wait_exit, wait_ready};
pub use python::{python, python_or_skip, workspace_root};
pub use wait::eventually;

/// reqwest (rustls) needs a process-wide crypto provider; the binaries
/// install ring at start, so the tests do too. Installing twice is harmless.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The chaos provider's deterministic answer of `n` words: `w0 w1 … w{n-1}`.
pub fn words(n: usize) -> String {
    (0..n)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether the tests run under CI (`CI=true`), where a missing tool or
/// service is a failure instead of a skip.
pub fn under_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}
