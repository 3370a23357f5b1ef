//! What every command shares before it starts: the process's TLS crypto
//! provider ([`install_crypto`]) and loading a config file from disk
//! ([`load_config`]).

use anyhow::Context;
use hale_core::config::Config;
use std::path::Path;

/// Loads and validates a config file, with env lookups from the process.
pub fn load_config(path: &Path) -> anyhow::Result<Config> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    hale_config::load(&text, &|k| std::env::var(k).ok())
        .map_err(|e| anyhow::anyhow!("invalid config {}:\n{e}", path.display()))
}

/// Installs the one TLS crypto provider (ring). `main` calls it once,
/// before any command runs, so no code path builds a client without it.
pub fn install_crypto() {
    // An error only means a provider is already installed: that one serves.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
