//! `providers[i]` of `kind: azure` — the resource endpoint, `api_version`,
//! the model → deployment map and the credentials (`api_key_env`, or
//! `auth: entra` with `token_env` or `token_command`); on any other kind
//! these keys are refused rather than ignored.

use super::ctx::{Ctx, line_of};
use crate::RawProvider;
use hale_core::azure;
use hale_core::config::{
    AzureAuth, AzureConfig, DEFAULT_AZURE_TOKEN_REFRESH, ProviderConfig, ProviderKind,
};
use serde_saphyr::Spanned;

impl Ctx<'_> {
    /// Sets `pc.azure` for an azure provider; refuses the azure-only keys
    /// on other kinds.
    pub(super) fn azure(&mut self, path: &str, p: &Spanned<RawProvider>, pc: &mut ProviderConfig) {
        let r = &p.value;
        let azure_only = [
            ("api_version", r.api_version.as_ref().map(line_of)),
            ("deployments", r.deployments.as_ref().map(line_of)),
            ("auth", r.auth.as_ref().map(line_of)),
            ("token_env", r.token_env.as_ref().map(line_of)),
            ("token_command", r.token_command.as_ref().map(line_of)),
            ("token_refresh_ms", r.token_refresh_ms.as_ref().map(line_of)),
        ];
        match pc.kind {
            ProviderKind::Azure => {}
            ProviderKind::OpenAi
            | ProviderKind::Anthropic
            | ProviderKind::Gemini
            | ProviderKind::Vertex
            | ProviderKind::Bedrock => {
                // `auth` is a bedrock key too (validate/bedrock.rs reads it).
                let bedrock = pc.kind == ProviderKind::Bedrock;
                for (key, line) in azure_only
                    .into_iter()
                    .filter(|(k, _)| !(bedrock && *k == "auth"))
                {
                    if let Some(line) = line {
                        self.err(
                            format!("{path}.{key}"),
                            line,
                            format!("`{key}` is for `kind: azure` providers"),
                        );
                    }
                }
                return;
            }
        }
        if let Some(u) = &r.base_url
            && let Some(problem) = azure::base_url_problem(u.value.trim())
        {
            self.at(format!("{path}.base_url"), u, problem);
        }
        let api_version =
            r.api_version
                .as_ref()
                .and_then(|v| match azure::api_version_problem(v.value.trim()) {
                    Some(problem) => {
                        self.at(format!("{path}.api_version"), v, problem);
                        None
                    }
                    None => Some(v.value.trim().to_owned()),
                });
        let mut deployments = std::collections::BTreeMap::new();
        for (model, d) in r.deployments.iter().flat_map(|m| m.value.iter()) {
            let at = format!("{path}.deployments.{model}");
            if model.trim().is_empty() {
                self.at(at, d, "the model name must not be empty");
            } else if let Some(problem) = azure::deployment_name_problem(d.value.trim()) {
                self.at(at, d, format!("the deployment name {problem}"));
            } else {
                deployments.insert(model.trim().to_owned(), d.value.trim().to_owned());
            }
        }
        let entra = match r.auth.as_ref().map(|a| (a, a.value.trim())) {
            None | Some((_, "api_key")) => false,
            Some((_, "entra")) => true,
            Some((a, other)) => {
                self.at(
                    format!("{path}.auth"),
                    a,
                    format!("unknown auth `{other}`: expected api_key or entra"),
                );
                false
            }
        };
        let auth = if entra {
            if let Some(k) = &r.api_key_env {
                self.at(
                    format!("{path}.api_key_env"),
                    k,
                    "`auth: entra` takes no `api_key_env`: give `token_env` or `token_command`",
                );
            }
            match (&r.token_env, &r.token_command) {
                (Some(env), None) => {
                    if let Some(t) = &r.token_refresh_ms {
                        self.at(
                            format!("{path}.token_refresh_ms"),
                            t,
                            "`token_refresh_ms` is for `token_command` (a `token_env` token is read once)",
                        );
                    }
                    pc.api_key = self.secret(&format!("{path}.token_env"), env);
                    AzureAuth::EntraToken
                }
                (None, Some(cmd)) => {
                    let command = self
                        .non_empty(&format!("{path}.token_command"), cmd)
                        .unwrap_or_default();
                    let refresh = self.positive_ms(
                        &format!("{path}.token_refresh_ms"),
                        &r.token_refresh_ms,
                        DEFAULT_AZURE_TOKEN_REFRESH,
                    );
                    AzureAuth::EntraCommand { command, refresh }
                }
                (Some(env), Some(_)) => {
                    self.at(
                        format!("{path}.token_env"),
                        env,
                        "give one of `token_env` and `token_command`, not both",
                    );
                    AzureAuth::EntraToken
                }
                (None, None) => {
                    self.err(
                        format!("{path}.auth"),
                        line_of(p),
                        "`auth: entra` needs `token_env` (a token) or `token_command` (a command printing one)",
                    );
                    AzureAuth::EntraToken
                }
            }
        } else {
            for (key, line) in &azure_only[3..] {
                if let Some(line) = line {
                    self.err(
                        format!("{path}.{key}"),
                        *line,
                        format!("`{key}` is for `auth: entra`"),
                    );
                }
            }
            if r.api_key_env.is_none() {
                self.err(
                    format!("{path}.api_key_env"),
                    line_of(p),
                    "an azure provider needs `api_key_env` (or `auth: entra`)",
                );
            }
            AzureAuth::ApiKey
        };
        pc.azure = Some(AzureConfig {
            api_version,
            deployments,
            auth,
        });
    }
}
