//! The one home for the credentials hale fetches as it runs: the OAuth2
//! token sources of `vertex` providers, the Entra tokens an `azure`
//! provider's `token_command` prints, and the AWS keychain of `bedrock`
//! providers. [`Credentials`] is built once from the config and owned by the
//! gateway's [`upstream::Client`](super::Client), never a process-wide
//! static: two gateways in one process (tests build several) hold separate
//! tokens. Each token fetched is remembered by the gateway's redactor
//! ([`crate::secrets`]), which each kind's `authorize` is handed.

use super::{azure, bedrock, vertex};
use hale_core::config::Config;

/// The credentials of one gateway's providers, one part per kind.
pub struct Credentials {
    pub(super) vertex: vertex::Tokens,
    pub(super) azure: azure::Tokens,
    /// The AWS credentials of `bedrock` providers, resolved and refreshed
    /// across attempts.
    pub(super) bedrock: bedrock::Keychain,
}

impl Credentials {
    /// The token sources of the config's vertex providers (reading their
    /// key files: a bad one stops the start, its provider named); Entra
    /// tokens and AWS credentials are fetched at a provider's first attempt.
    pub(super) fn new(cfg: &Config) -> anyhow::Result<Self> {
        Ok(Self {
            vertex: vertex::Tokens::new(cfg)?,
            azure: azure::Tokens::default(),
            bedrock: bedrock::Keychain::default(),
        })
    }
}
