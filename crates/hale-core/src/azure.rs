//! Azure OpenAI's wire rules (`kind: azure`): which URL an attempt goes to,
//! which model name its body carries, and when an Entra ID token is fetched
//! again. Pure: the gateway's upstream client asks and carries out.
//!
//! Azure serves OpenAI's two dialects (Chat Completions and the Responses
//! API) in two URL schemes:
//!
//! - **deployment URLs** (`api_version` set):
//!   `{base_url}/openai/deployments/{deployment}/chat/completions?api-version=…`
//!   (and `…/responses?api-version=…`). The deployment in the URL picks the
//!   model; the body's `model` is not read, so hale leaves the client's
//!   bytes as they came.
//! - **the v1 API** (no `api_version`): `{base_url}/openai/v1/chat/completions`
//!   and `{base_url}/openai/v1/responses`, the deployment named in the
//!   body's `model`, as on OpenAI.
//!
//! Health scopes as for every kind (docs/operations.md, "What hale does to a
//! call"): a bad key or token marks the provider, a resource that cannot be
//! reached marks the `base_url` (one resource, one region), everything else the
//! deployment (`provider/model`).

use crate::config::{AzureConfig, ProviderApi};
use crate::segment::{Refusal, Segment};
use std::time::{Duration, Instant};

/// The header an Azure API key travels in.
pub const API_KEY_HEADER: &str = "api-key";

/// The deployment serving `model`: its entry in `deployments`, else the
/// model name itself.
pub fn deployment<'a>(cfg: &'a AzureConfig, model: &'a str) -> &'a str {
    cfg.deployments.get(model).map_or(model, String::as_str)
}

/// The path and query after `base_url` of an attempt at `model` through
/// `api`. On deployment URLs the deployment is one encoded path segment
/// ([`crate::segment`]): a model `deployments` does not map is the
/// client's string, refused when it cannot be one.
pub fn path(cfg: &AzureConfig, api: ProviderApi, model: &str) -> Result<String, Refusal> {
    let op = match api {
        ProviderApi::Chat => "chat/completions",
        ProviderApi::Responses => "responses",
    };
    match &cfg.api_version {
        Some(v) => Ok(format!(
            "/openai/deployments/{}/{op}?api-version={v}",
            Segment::new(deployment(cfg, model))?
        )),
        None => Ok(format!("/openai/v1/{op}")),
    }
}

/// The `model` the request body carries for `model`: on deployment URLs the
/// URL names the deployment, so the body keeps hale's model name (the
/// client's bytes stay whole when it asked for that model); on the v1 API
/// the body names the deployment.
pub fn body_model<'a>(cfg: &'a AzureConfig, model: &'a str) -> &'a str {
    match cfg.api_version {
        Some(_) => model,
        None => deployment(cfg, model),
    }
}

/// Whether an Entra token fetched at `fetched` (never: `None`) must be
/// fetched again at `now`: when there is none, when it is `refresh` old, or
/// when the provider refused it (`refused`, a 401 since it was fetched).
pub fn token_due(fetched: Option<Instant>, now: Instant, refresh: Duration, refused: bool) -> bool {
    match fetched {
        None => true,
        Some(at) => refused || now.saturating_duration_since(at) >= refresh,
    }
}

/// What is wrong with a deployment name (`None`: it is fine). It becomes a
/// URL path segment: no `/`, `?`, `#`, `%`, whitespace or control characters.
pub fn deployment_name_problem(name: &str) -> Option<&'static str> {
    if name.trim().is_empty() {
        Some("must not be empty")
    } else if name
        .chars()
        .any(|c| matches!(c, '/' | '?' | '#' | '%') || c.is_whitespace() || c.is_control())
    {
        Some("must not contain `/`, `?`, `#`, `%` or whitespace (it is a URL path segment)")
    } else {
        None
    }
}

/// What is wrong with an `api_version` (`None`: it is fine). It becomes a
/// query value: no `&`, `#`, `?`, whitespace or control characters.
pub fn api_version_problem(v: &str) -> Option<&'static str> {
    if v.trim().is_empty() {
        Some("must not be empty (leave `api_version` out for the v1 API)")
    } else if v
        .chars()
        .any(|c| matches!(c, '&' | '#' | '?' | '=') || c.is_whitespace() || c.is_control())
    {
        Some("must be a version such as 2024-10-21 (no `&`, `#`, `?`, `=` or whitespace)")
    } else {
        None
    }
}

/// What is wrong with an azure `base_url` (`None`: it is fine): it is the
/// resource's endpoint (`https://{resource}.openai.azure.com`), and hale
/// adds `/openai/…` itself.
pub fn base_url_problem(url: &str) -> Option<&'static str> {
    let path = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split_once('/')
        .map_or("", |(_, p)| p);
    let path = path.trim_end_matches('/');
    if path == "openai" || path.starts_with("openai/") || path.contains("/openai") {
        Some(
            "is the resource endpoint, e.g. https://{resource}.openai.azure.com: \
             leave out `/openai/…`, hale adds it",
        )
    } else if url.contains('?') || url.contains('#') {
        Some("must have no query or fragment (`api_version` gives the api-version)")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AzureAuth;
    use std::collections::BTreeMap;

    fn cfg(version: Option<&str>) -> AzureConfig {
        AzureConfig {
            api_version: version.map(str::to_owned),
            deployments: BTreeMap::from([("gpt-4o".to_owned(), "prod-4o".to_owned())]),
            auth: AzureAuth::ApiKey,
        }
    }

    /// (api_version, api, model) → path, body model.
    #[test]
    fn urls_and_body_models() {
        let rows = [
            (
                Some("2024-10-21"),
                ProviderApi::Chat,
                "gpt-4o",
                "/openai/deployments/prod-4o/chat/completions?api-version=2024-10-21",
                "gpt-4o",
            ),
            (
                Some("2025-04-01-preview"),
                ProviderApi::Responses,
                "gpt-4o",
                "/openai/deployments/prod-4o/responses?api-version=2025-04-01-preview",
                "gpt-4o",
            ),
            (
                Some("2024-10-21"),
                ProviderApi::Chat,
                "o3-mini",
                "/openai/deployments/o3-mini/chat/completions?api-version=2024-10-21",
                "o3-mini",
            ),
            (
                None,
                ProviderApi::Chat,
                "gpt-4o",
                "/openai/v1/chat/completions",
                "prod-4o",
            ),
            (
                None,
                ProviderApi::Responses,
                "o3-mini",
                "/openai/v1/responses",
                "o3-mini",
            ),
        ];
        for (version, api, model, want_path, want_body) in rows {
            let c = cfg(version);
            assert_eq!(
                path(&c, api, model).as_deref(),
                Ok(want_path),
                "{version:?} {api:?} {model}"
            );
            assert_eq!(body_model(&c, model), want_body, "{version:?} {model}");
        }
    }

    /// A model `deployments` does not map is the client's string: one
    /// encoded segment on deployment URLs, refused when it has a dot part;
    /// on the v1 API it is only in the body.
    #[test]
    fn a_clients_model_is_one_encoded_deployment_segment() {
        let c = cfg(Some("2024-10-21"));
        for (model, want) in [
            (
                "gpt-4o/embeddings?api-version=2023-05-15#",
                Ok(
                    "/openai/deployments/gpt-4o%2Fembeddings%3Fapi-version%3D2023-05-15%23/chat/completions?api-version=2024-10-21",
                ),
            ),
            (
                "x?key=k",
                Ok("/openai/deployments/x%3Fkey%3Dk/chat/completions?api-version=2024-10-21"),
            ),
            ("../../x", Err(Refusal::DotPart)),
            ("..", Err(Refusal::DotPart)),
            ("%2e%2e", Err(Refusal::DotPart)),
        ] {
            assert_eq!(
                path(&c, ProviderApi::Chat, model),
                want.map(str::to_owned),
                "{model}"
            );
            assert_eq!(
                path(&cfg(None), ProviderApi::Chat, model).as_deref(),
                Ok("/openai/v1/chat/completions")
            );
        }
    }

    #[test]
    fn a_token_is_fetched_when_missing_old_or_refused() {
        let t0 = Instant::now();
        let refresh = Duration::from_secs(60);
        let rows = [
            (None, 0, false, true),
            (Some(t0), 0, false, false),
            (Some(t0), 59, false, false),
            (Some(t0), 60, false, true),
            (Some(t0), 61, false, true),
            (Some(t0), 1, true, true),
        ];
        for (fetched, after, refused, want) in rows {
            let now = t0 + Duration::from_secs(after);
            assert_eq!(
                token_due(fetched, now, refresh, refused),
                want,
                "{fetched:?} +{after}s refused={refused}"
            );
        }
    }

    #[test]
    fn names_versions_and_base_urls() {
        for (name, ok) in [
            ("prod-4o", true),
            ("gpt-4o.mini_2", true),
            ("rate-limit:retry_after=2", true),
            ("", false),
            (" ", false),
            ("a/b", false),
            ("a?b", false),
            ("a b", false),
            ("a%2f", false),
        ] {
            assert_eq!(deployment_name_problem(name).is_none(), ok, "{name:?}");
        }
        for (v, ok) in [
            ("2024-10-21", true),
            ("2025-04-01-preview", true),
            ("preview", true),
            ("", false),
            ("2024&x=1", false),
            ("a b", false),
        ] {
            assert_eq!(api_version_problem(v).is_none(), ok, "{v:?}");
        }
        for (u, ok) in [
            ("https://res.openai.azure.com", true),
            ("https://res.openai.azure.com/", true),
            ("https://res.cognitiveservices.azure.com", true),
            ("http://127.0.0.1:9000", true),
            ("http://127.0.0.1:9000/proxy", true),
            ("https://res.openai.azure.com/openai", false),
            ("https://res.openai.azure.com/openai/v1", false),
            ("https://res.openai.azure.com/openai/deployments/x", false),
            ("https://res.openai.azure.com?api-version=1", false),
        ] {
            assert_eq!(base_url_problem(u).is_none(), ok, "{u:?}");
        }
    }
}
