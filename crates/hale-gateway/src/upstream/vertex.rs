//! Google Vertex AI's side of an attempt (`kind: vertex`): the publisher
//! URL of a model, the body Vertex wants for a Claude model, and the OAuth2
//! bearer token. The rules (URL, publisher, when a refused token is fetched
//! again) are `hale_core::vertex`'s; this file carries them out.
//!
//! Tokens come from the maintained `gcp_auth` crate: a service-account key
//! (`credentials_file`, else the file `GOOGLE_APPLICATION_CREDENTIALS`
//! names), signed into a JWT-bearer grant sent to the key's `token_uri`, or
//! else the metadata server of a GCP VM. `gcp_auth` caches a token until
//! shortly before it expires and fetches the next; hale only adds the
//! refusal rule: after a 401 the provider's token source is built again,
//! so the next token is fetched fresh, not read from the cache.
//!
//! [`Tokens`] is part of the upstream client's `Credentials`, built once from the config
//! (one source per vertex provider, by name), not a process-wide map. A
//! token never reaches a log, an event or an error: failures are a
//! [`TokenError`] naming what failed.

use gcp_auth::TokenProvider;
use hale_core::config::{Config, ProviderConfig, ProviderKind, VertexConfig, VertexCredentials};
use hale_core::vertex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The token sources of the config's vertex providers, by provider name.
#[derive(Default)]
pub struct Tokens {
    by_provider: HashMap<String, Source>,
}

/// One provider's token source: built on first use (a key file: at start)
/// and again after a refusal. `generation` counts the builds, so that
/// several attempts refused with the same token rebuild it once.
struct Source {
    credentials: VertexCredentials,
    current: tokio::sync::Mutex<Option<(u64, Arc<dyn TokenProvider>)>>,
}

/// A token to send, and which build of the source it came from.
pub(super) struct Bearer {
    token: Arc<gcp_auth::Token>,
    generation: u64,
}

impl Bearer {
    pub(super) fn token(&self) -> &str {
        self.token.as_str()
    }
}

/// Why no token could be had: safe to show (no token, no key material).
#[derive(Debug)]
pub(super) struct TokenError(pub(super) String);

impl Tokens {
    /// One source per vertex provider. A `credentials_file` (or the file
    /// `GOOGLE_APPLICATION_CREDENTIALS` names) is read now, so a missing or
    /// unreadable key stops the start with its provider named.
    pub fn new(cfg: &Config) -> anyhow::Result<Self> {
        let mut by_provider = HashMap::new();
        for p in &cfg.providers {
            let (ProviderKind::Vertex, Some(v)) = (p.kind, &p.vertex) else {
                continue;
            };
            let first = build_from_key(&v.credentials).map_err(|e| {
                anyhow::anyhow!("provider `{}`: the service-account key: {e}", p.name)
            })?;
            by_provider.insert(
                p.name.clone(),
                Source {
                    credentials: v.credentials.clone(),
                    current: tokio::sync::Mutex::new(first.map(|s| (0, s))),
                },
            );
        }
        Ok(Self { by_provider })
    }

    /// A token for `provider`, within `limit`.
    pub(super) async fn bearer(
        &self,
        provider: &ProviderConfig,
        limit: Duration,
    ) -> Result<Bearer, TokenError> {
        let Some(src) = self.by_provider.get(&provider.name) else {
            return Err(TokenError(format!(
                "no token source for the vertex provider `{}`",
                provider.name
            )));
        };
        let (generation, source) = {
            let mut cur = src.current.lock().await;
            if cur.is_none() {
                let built = build(&src.credentials, limit).await?;
                *cur = Some((0, built));
            }
            match cur.as_ref() {
                Some((g, s)) => (*g, s.clone()),
                None => return Err(TokenError("no Vertex token source".into())),
            }
        };
        match tokio::time::timeout(limit, source.token(&[vertex::SCOPE])).await {
            Err(_) => Err(TokenError("the Vertex token request timed out".into())),
            Ok(Err(e)) => Err(TokenError(format!("no Vertex token: {e}"))),
            Ok(Ok(token)) => Ok(Bearer { token, generation }),
        }
    }

    /// A 401 for `bearer`: its source is built again, so the next token is
    /// fetched, not read from the cache (once per build: concurrent
    /// refusals of the same token rebuild it once).
    pub(super) async fn refused(&self, provider: &ProviderConfig, bearer: &Bearer) {
        let Some(src) = self.by_provider.get(&provider.name) else {
            return;
        };
        let mut cur = src.current.lock().await;
        let Some((g, _)) = cur.as_ref() else { return };
        if *g != bearer.generation {
            return;
        }
        let next = g + 1;
        match build(&src.credentials, Duration::from_secs(30)).await {
            Ok(s) => *cur = Some((next, s)),
            // Built again on the next attempt.
            Err(_) => *cur = None,
        }
    }
}

/// The token source of a key file, read now; `None` for the metadata
/// server (built on first use: it asks the server for a token).
fn build_from_key(c: &VertexCredentials) -> Result<Option<Arc<dyn TokenProvider>>, String> {
    match c {
        VertexCredentials::KeyFile(path) => gcp_auth::CustomServiceAccount::from_file(path)
            .map(|s| Some(Arc::new(s) as Arc<dyn TokenProvider>))
            .map_err(|e| format!("cannot use {path}: {e}")),
        VertexCredentials::Default => match gcp_auth::CustomServiceAccount::from_env() {
            Ok(Some(s)) => Ok(Some(Arc::new(s))),
            Ok(None) => Ok(None),
            Err(e) => Err(format!(
                "cannot use the key GOOGLE_APPLICATION_CREDENTIALS names: {e}"
            )),
        },
    }
}

/// The token source: the key file's, else the metadata server's.
async fn build(
    c: &VertexCredentials,
    limit: Duration,
) -> Result<Arc<dyn TokenProvider>, TokenError> {
    if let Some(s) = build_from_key(c).map_err(TokenError)? {
        return Ok(s);
    }
    match tokio::time::timeout(limit, gcp_auth::MetadataServiceAccount::new()).await {
        Err(_) => Err(TokenError(
            "the metadata server did not answer in time (no credentials_file, no GOOGLE_APPLICATION_CREDENTIALS)".into(),
        )),
        Ok(Err(e)) => Err(TokenError(format!(
            "no credentials_file, no GOOGLE_APPLICATION_CREDENTIALS and no metadata server: {e}"
        ))),
        Ok(Ok(s)) => Ok(Arc::new(s)),
    }
}

/// The attempt's URL for `model` (refused: [`vertex::path`]).
pub(super) fn url(
    provider: &ProviderConfig,
    v: &VertexConfig,
    model: &str,
    stream: bool,
) -> Result<String, hale_core::segment::Refusal> {
    Ok(format!(
        "{}{}",
        provider.base_url,
        vertex::path(v, model, stream)?
    ))
}

/// A Claude body as Vertex wants it: Anthropic's Messages body without
/// `model` (the URL names it), with Vertex's `anthropic_version`.
pub(super) fn anthropic_body(body: &serde_json::Value) -> serde_json::Value {
    serde_json::Value::Object(hale_proto::anthropic::platform_body(
        body,
        vertex::ANTHROPIC_VERSION,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_claude_body_loses_its_model_and_gains_the_vertex_version() {
        let b = json!({"model": "claude-x", "max_tokens": 5, "messages": [], "anthropic_version": "2023-06-01"});
        let v = anthropic_body(&b);
        assert!(v.get("model").is_none(), "{v}");
        assert_eq!(v["anthropic_version"], vertex::ANTHROPIC_VERSION);
        assert_eq!(v["max_tokens"], 5);
    }
}
