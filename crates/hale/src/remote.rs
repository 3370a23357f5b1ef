//! How a command reaches a running gateway: the `--url`/`--token` arguments
//! ([`Remote`], default [`DEFAULT_URL`]) and the percent-encoding of the path
//! segments it sends ([`enc`]). Shared by the admin commands (`agent`,
//! `deployment`, `doctor`, `checkpoints`, `jobs`, `nodes`) and `hale run`.

/// Where the commands look for a gateway by default: `hale serve`'s default
/// listen address ([`hale_core::config::DEFAULT_LISTEN`]; a test keeps them equal).
pub const DEFAULT_URL: &str = "http://127.0.0.1:3000";

/// `--url` and `--token`: which gateway a command talks to, with which
/// admin token.
#[derive(clap::Args, Debug, Clone)]
pub struct Remote {
    /// The gateway's base URL.
    #[arg(long, default_value = DEFAULT_URL, global = true)]
    pub url: String,
    /// Admin token (default $HALE_TOKEN).
    #[arg(long, env = "HALE_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
}

/// Percent-encodes a path segment (agent and task names are free text).
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
