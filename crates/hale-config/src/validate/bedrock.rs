//! `providers[i]` of `kind: bedrock` — the `region` (required), `api`
//! (`converse` or `invoke`; unset: by model id), and the credentials:
//! `auth: sigv4` (the default, with an optional shared-file `profile`) or
//! `auth: api_key` (a Bedrock API key from `api_key_env`, by default
//! `AWS_BEARER_TOKEN_BEDROCK`). `region` and `profile` are refused on other
//! kinds rather than ignored.

use super::ctx::{Ctx, line_of};
use crate::RawProvider;
use hale_core::bedrock;
use hale_core::config::{BedrockApi, BedrockAuth, BedrockConfig, ProviderConfig, ProviderKind};
use serde_saphyr::Spanned;

impl Ctx<'_> {
    /// Sets `pc.bedrock` for a bedrock provider; refuses the bedrock-only
    /// keys on other kinds.
    pub(super) fn bedrock(
        &mut self,
        path: &str,
        p: &Spanned<RawProvider>,
        pc: &mut ProviderConfig,
    ) {
        let r = &p.value;
        match pc.kind {
            ProviderKind::Bedrock => {}
            ProviderKind::OpenAi
            | ProviderKind::Anthropic
            | ProviderKind::Gemini
            | ProviderKind::Azure
            | ProviderKind::Vertex => {
                for (key, line) in [
                    ("region", r.region.as_ref().map(line_of)),
                    ("profile", r.profile.as_ref().map(line_of)),
                ] {
                    if let Some(line) = line {
                        self.err(
                            format!("{path}.{key}"),
                            line,
                            format!("`{key}` is for `kind: bedrock` providers"),
                        );
                    }
                }
                return;
            }
        }
        let region = match &r.region {
            None => {
                self.err(
                    format!("{path}.region"),
                    line_of(p),
                    "a bedrock provider needs `region` (e.g. us-east-1)",
                );
                String::new()
            }
            Some(g) => {
                let v = g.value.trim();
                if let Some(problem) = bedrock::region_problem(v) {
                    self.at(format!("{path}.region"), g, problem);
                }
                v.to_owned()
            }
        };
        let api = r.api.as_ref().and_then(|a| match a.value.trim() {
            "converse" => Some(BedrockApi::Converse),
            "invoke" => Some(BedrockApi::Invoke),
            // providers.rs names any other value.
            _ => None,
        });
        let auth = match r.auth.as_ref().map(|a| (a, a.value.trim())) {
            None | Some((_, "sigv4")) => {
                if let Some(k) = &r.api_key_env {
                    self.at(
                        format!("{path}.api_key_env"),
                        k,
                        "`auth: sigv4` signs with AWS credentials: set `auth: api_key` to send a Bedrock API key",
                    );
                }
                // A key read by providers.rs is not sent with SigV4.
                pc.api_key = None;
                let profile = r
                    .profile
                    .as_ref()
                    .and_then(|s| self.non_empty(&format!("{path}.profile"), s));
                BedrockAuth::SigV4 { profile }
            }
            Some((_, "api_key")) => {
                if let Some(s) = &r.profile {
                    self.at(
                        format!("{path}.profile"),
                        s,
                        "`profile` is for `auth: sigv4` (an API key needs no AWS profile)",
                    );
                }
                if r.api_key_env.is_none() {
                    match (self.env)(bedrock::DEFAULT_KEY_ENV) {
                        Some(v) if !v.trim().is_empty() => {
                            pc.api_key = Some(hale_core::config::Secret::new(v.trim()));
                        }
                        Some(_) | None => self.err(
                            format!("{path}.api_key_env"),
                            line_of(p),
                            format!(
                                "`auth: api_key` needs a Bedrock API key: set {} or name another variable in `api_key_env`",
                                bedrock::DEFAULT_KEY_ENV
                            ),
                        ),
                    }
                }
                BedrockAuth::ApiKey
            }
            Some((a, other)) => {
                self.at(
                    format!("{path}.auth"),
                    a,
                    format!("unknown auth `{other}`: expected sigv4 or api_key"),
                );
                BedrockAuth::ApiKey
            }
        };
        pc.bedrock = Some(BedrockConfig { region, api, auth });
    }
}
