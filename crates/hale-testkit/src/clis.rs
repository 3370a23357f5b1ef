//! The agent CLIs the client tests drive hale with (Codex, Claude Code,
//! Gemini CLI):
//! an environment variable naming the binary, else the pinned install in
//! `.clis/` at the workspace root (scripts/test.sh makes it with `npm ci`
//! from `scripts/clis/`). A CLI counts as present when `--version` runs and
//! names the pinned version, so a stale install is not tested by accident.

use std::path::PathBuf;
use std::process::Command;

/// One pinned agent CLI: its npm binary name, the environment variable that
/// may name another binary, and the version `--version` must print.
#[derive(Debug, Clone, Copy)]
pub struct Cli {
    pub bin: &'static str,
    pub env: &'static str,
    pub version: &'static str,
}

/// The Codex CLI (npm `@openai/codex`), as pinned in `scripts/clis/package.json`.
pub const CODEX: Cli = Cli {
    bin: "codex",
    env: "HALE_CODEX",
    version: "0.169.0",
};

/// Claude Code (npm `@anthropic-ai/claude-code`), as pinned in `scripts/clis/package.json`.
pub const CLAUDE: Cli = Cli {
    bin: "claude",
    env: "HALE_CLAUDE",
    version: "2.1.328",
};

/// Gemini CLI (npm `@google/gemini-cli`), as pinned in `scripts/clis/package.json`.
pub const GEMINI: Cli = Cli {
    bin: "gemini",
    env: "HALE_GEMINI",
    version: "0.61.0",
};

/// The CLI's binary, or why there is none.
pub fn cli(c: Cli) -> Result<PathBuf, String> {
    let candidate = match std::env::var_os(c.env) {
        Some(p) => PathBuf::from(p),
        None => crate::workspace_root()
            .join(".clis/node_modules/.bin")
            .join(c.bin),
    };
    let out = Command::new(&candidate).arg("--version").output();
    match out {
        Ok(o) if o.status.success() && String::from_utf8_lossy(&o.stdout).contains(c.version) => {
            Ok(candidate)
        }
        Ok(o) => Err(format!(
            "{} at {} is not version {} (it says {:?}; run scripts/test.sh, or set {})",
            c.bin,
            candidate.display(),
            c.version,
            String::from_utf8_lossy(&o.stdout).trim(),
            c.env
        )),
        Err(e) => Err(format!(
            "no {} at {} ({e}; run scripts/test.sh to install the pinned CLIs into .clis/, or set {})",
            c.bin,
            candidate.display(),
            c.env
        )),
    }
}

/// [`cli`], or None after printing why the test is skipped (a failure
/// instead under `CI=true`).
pub fn cli_or_skip(c: Cli) -> Option<PathBuf> {
    match cli(c) {
        Ok(p) => Some(p),
        Err(why) if crate::under_ci() => panic!("CI=true and {why}"),
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}
