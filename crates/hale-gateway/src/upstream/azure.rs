//! Azure OpenAI's side of an attempt (`kind: azure`): the URL of the
//! deployment or the v1 API, and the credentials — the `api-key` header, or
//! a Microsoft Entra ID token as a bearer. The rules (URL, body model, when
//! a token is due) are `hale_core::azure`'s; this file carries them out.
//!
//! An Entra token from `token_command` is kept per provider ([`Tokens`],
//! part of the upstream client's `Credentials`, not a process-wide map) and fetched
//! again when `hale_core::azure::token_due` says so (too old, or refused
//! with a 401). One fetch at a time per provider: attempts that find the
//! token due wait for the one fetching it rather than each running the
//! command. The token never reaches a log, an event or an error; a failed
//! command is a [`TokenError`] (the caller makes it an `auth` failure of the
//! provider), without the command's output.

use super::http_client::Post;
use crate::secrets::Redactor;
use hale_core::azure;
use hale_core::config::{AzureAuth, AzureConfig, ProviderConfig, Secret};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The attempt's URL for `model` (refused: [`azure::path`]).
pub(super) fn url(
    provider: &ProviderConfig,
    az: &AzureConfig,
    model: &str,
) -> Result<String, hale_core::segment::Refusal> {
    Ok(format!(
        "{}{}",
        provider.base_url,
        azure::path(az, provider.api, model)?
    ))
}

/// A fetched Entra token.
struct Held {
    token: Secret,
    fetched: Instant,
    refused: bool,
}

type Slot = Arc<tokio::sync::Mutex<Option<Held>>>;

/// A token slot's key: the provider's name, endpoint and command.
type SlotKey = (String, String, String);

/// The Entra tokens of `azure` providers with a `token_command`, one slot
/// per provider: by its name, endpoint and command, so a reloaded config
/// that points the same name elsewhere (or runs another command) never
/// sends the old token. Held in the upstream client's `Credentials` beside the Vertex
/// tokens and the Bedrock keychain.
#[derive(Default)]
pub struct Tokens {
    slots: Mutex<HashMap<SlotKey, Slot>>,
}

/// Why no Entra token could be had: safe to show (no token, no output).
#[derive(Debug)]
pub(super) struct TokenError(pub(super) String);

impl Tokens {
    fn slot(&self, provider: &ProviderConfig, command: &str) -> Slot {
        let key = (
            provider.name.clone(),
            provider.base_url.clone(),
            command.to_owned(),
        );
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default()
            .clone()
    }

    /// Sets the provider's credentials on `post`; a token fetched is
    /// remembered by `secrets` (masked wherever hale shows text).
    pub(super) async fn authorize(
        &self,
        post: &mut Post,
        provider: &ProviderConfig,
        az: &AzureConfig,
        secrets: &Redactor,
    ) -> Result<(), TokenError> {
        match (&az.auth, &provider.api_key) {
            (AzureAuth::ApiKey, Some(k)) => post.secret(azure::API_KEY_HEADER, k.expose()),
            (AzureAuth::EntraToken, Some(t)) => post.bearer(t.expose()),
            // Validation requires the key or token; none is sent without one.
            (AzureAuth::ApiKey | AzureAuth::EntraToken, None) => {}
            (AzureAuth::EntraCommand { command, refresh }, _) => {
                let slot = self.slot(provider, command);
                let mut held = slot.lock().await;
                let now = Instant::now();
                let due = azure::token_due(
                    held.as_ref().map(|h| h.fetched),
                    now,
                    *refresh,
                    held.as_ref().is_some_and(|h| h.refused),
                );
                if due {
                    let token = run_token_command(command, provider.timeout).await?;
                    secrets.remember(&format!("azure:{}", provider.name), token.expose());
                    *held = Some(Held {
                        token,
                        fetched: now,
                        refused: false,
                    });
                }
                match held.as_ref() {
                    Some(h) => post.bearer(h.token.expose()),
                    None => return Err(token_failure("no Entra token")),
                }
            }
        }
        Ok(())
    }

    /// A 401 from the provider: a command's token is fetched again next time.
    pub(super) async fn refused(&self, provider: &ProviderConfig, az: &AzureConfig) {
        match &az.auth {
            AzureAuth::EntraCommand { command, .. } => {
                if let Some(h) = self.slot(provider, command).lock().await.as_mut() {
                    h.refused = true;
                }
            }
            AzureAuth::ApiKey | AzureAuth::EntraToken => {}
        }
    }
}

/// Runs `command` with `sh -c`; its trimmed stdout is the token.
async fn run_token_command(command: &str, limit: Duration) -> Result<Secret, TokenError> {
    let run = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(limit, run).await {
        Err(_) => return Err(token_failure("the Entra token_command timed out")),
        Ok(Err(e)) => {
            return Err(token_failure(&format!(
                "the Entra token_command could not run: {}",
                e.kind()
            )));
        }
        Ok(Ok(out)) => out,
    };
    let token = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() {
        return Err(token_failure(&format!(
            "the Entra token_command failed ({})",
            out.status
        )));
    }
    if token.is_empty() {
        return Err(token_failure("the Entra token_command printed no token"));
    }
    Ok(Secret::new(token))
}

fn token_failure(message: &str) -> TokenError {
    TokenError(message.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hale_core::config::ProviderKind;

    fn provider(name: &str, command: &str) -> (ProviderConfig, AzureConfig) {
        let p = ProviderConfig::new(name, ProviderKind::Azure, "http://127.0.0.1:9", "gpt-4o");
        let az = AzureConfig {
            api_version: None,
            deployments: Default::default(),
            auth: AzureAuth::EntraCommand {
                command: command.to_owned(),
                refresh: Duration::from_secs(3600),
            },
        };
        (p, az)
    }

    fn post() -> Post {
        Post::raw_json(
            Ok(http::Uri::from_static("http://127.0.0.1:9/x")),
            bytes::Bytes::new(),
        )
    }

    async fn bearer(tokens: &Tokens, p: &ProviderConfig, az: &AzureConfig) -> String {
        let mut post = post();
        tokens
            .authorize(&mut post, p, az, &Redactor::default())
            .await
            .expect("authorized");
        post.headers()["authorization"]
            .to_str()
            .expect("ascii")
            .to_owned()
    }

    /// The command runs once, its token is kept, and runs again after a 401.
    #[tokio::test]
    async fn a_token_command_is_run_once_and_again_after_a_refusal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let count = dir.path().join("n");
        // Prints tok-1, tok-2, … one more each run.
        let cmd = format!(
            "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; echo \" tok-$n \"",
            c = count.display()
        );
        let (p, az) = provider("azure", &cmd);
        let tokens = Tokens::default();
        for _ in 0..3 {
            assert_eq!(bearer(&tokens, &p, &az).await, "Bearer tok-1");
        }
        tokens.refused(&p, &az).await;
        assert_eq!(bearer(&tokens, &p, &az).await, "Bearer tok-2");
        // Each owner holds its own tokens: another client runs the command.
        assert_eq!(bearer(&Tokens::default(), &p, &az).await, "Bearer tok-3");
    }

    /// A token the command printed is masked by the redactor from then on.
    #[tokio::test]
    async fn a_fetched_token_is_remembered_by_the_redactor() {
        let (p, az) = provider("azure-remembered", "echo entra-token-xyz");
        let secrets = Redactor::default();
        Tokens::default()
            .authorize(&mut post(), &p, &az, &secrets)
            .await
            .expect("authorized");
        assert_eq!(secrets.mask("got entra-token-xyz"), "got [redacted]");
    }

    /// A provider of the same name reloaded with another command (or
    /// endpoint) gets that command's token, not the one kept before.
    #[tokio::test]
    async fn a_reloaded_provider_with_another_command_does_not_reuse_the_old_token() {
        let tokens = Tokens::default();
        let (p, az) = provider("azure", "echo tok-old");
        assert_eq!(bearer(&tokens, &p, &az).await, "Bearer tok-old");
        let (p, az) = provider("azure", "echo tok-new");
        assert_eq!(bearer(&tokens, &p, &az).await, "Bearer tok-new");
        // The same name and command at another endpoint: fetched again.
        let dir = tempfile::tempdir().expect("tempdir");
        let count = dir.path().join("n");
        let cmd = format!(
            "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; echo tok-$n",
            c = count.display()
        );
        let (p, az) = provider("azure-moved", &cmd);
        assert_eq!(bearer(&tokens, &p, &az).await, "Bearer tok-1");
        let mut moved = p.clone();
        moved.base_url = "http://127.0.0.1:10".into();
        assert_eq!(
            bearer(&tokens, &moved, &az).await,
            "Bearer tok-2",
            "fetched again for the new endpoint"
        );
    }

    /// A failing command is an error whose message holds no output.
    #[tokio::test]
    async fn a_failing_token_command_is_an_error_without_its_output() {
        let tokens = Tokens::default();
        let (p, az) = provider("azure-token-fail", "echo secret-output; exit 3");
        let f = tokens
            .authorize(&mut post(), &p, &az, &Redactor::default())
            .await
            .expect_err("a failure");
        assert!(f.0.contains("failed"), "{}", f.0);
        assert!(!f.0.contains("secret-output"), "{}", f.0);
        let (p, az) = provider("azure-token-empty", "true");
        let f = tokens
            .authorize(&mut post(), &p, &az, &Redactor::default())
            .await
            .expect_err("a failure");
        assert!(f.0.contains("no token"), "{}", f.0);
    }

    /// An `api-key` provider's key goes as the `api-key` header, marked
    /// sensitive.
    #[tokio::test]
    async fn an_api_key_is_a_sensitive_header() {
        let (mut p, mut az) = provider("azure-key", "true");
        az.auth = AzureAuth::ApiKey;
        p.api_key = Some(Secret::new("azure-key-1"));
        let mut post = post();
        Tokens::default()
            .authorize(&mut post, &p, &az, &Redactor::default())
            .await
            .expect("authorized");
        let v = &post.headers()[azure::API_KEY_HEADER];
        assert_eq!(v, "azure-key-1");
        assert!(v.is_sensitive());
    }
}
