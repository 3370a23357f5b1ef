//! Google Vertex AI's wire rules (`kind: vertex`): which publisher serves a
//! model, the URL of an attempt, what a project, location and base URL may
//! be, and when a refused OAuth2 token is fetched again. Pure: the
//! gateway's upstream client asks and carries out (`upstream/vertex.rs`).
//!
//! Vertex serves two wire dialects under one URL scheme,
//! `{base}/v1/projects/{project}/locations/{location}/publishers/{publisher}/models/{model}:{method}`:
//!
//! - **Google's models** (Gemini): `:generateContent`, and
//!   `:streamGenerateContent?alt=sse` for a stream — the Generative
//!   Language API's body and answers (hale-proto's `gemini/`).
//! - **Anthropic's models** (Claude): `:rawPredict` and `:streamRawPredict`
//!   with Anthropic's Messages body, without `model` (the URL names it) and
//!   with `anthropic_version: "vertex-2023-10-16"`; the answers and events
//!   are Anthropic's.
//!
//! The base URL follows the location: `global` is
//! `https://aiplatform.googleapis.com`, any region `r` is
//! `https://r-aiplatform.googleapis.com`. Errors are Google's shape
//! (`RESOURCE_EXHAUSTED`, `UNAVAILABLE`, …) read by [`crate::classify`], and
//! for Claude Anthropic's bodies too; safety blocks are [`crate::gemini`]'s.
//! Health scopes as for every kind (docs/operations.md, "What hale does to a
//! call"): a refused token marks the provider, an unreachable endpoint the base
//! URL (one region), the rest the deployment.

use crate::config::{Publisher, VertexConfig};
use crate::segment::{self, Refusal, Segment};

/// The OAuth2 scope hale asks a token for.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The `anthropic_version` a Claude body on Vertex carries.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// The location whose endpoint has no region prefix.
pub const GLOBAL: &str = "global";

impl Publisher {
    /// The publisher's URL segment.
    pub fn as_str(self) -> &'static str {
        match self {
            Publisher::Google => "google",
            Publisher::Anthropic => "anthropic",
        }
    }

    /// A `publisher:` value.
    pub fn parse(s: &str) -> Option<Publisher> {
        match s {
            "google" => Some(Publisher::Google),
            "anthropic" => Some(Publisher::Anthropic),
            _other => None,
        }
    }
}

/// The publisher a model's name implies: `claude-*` is Anthropic's,
/// `gemini-*` Google's (a `publishers/…/models/` prefix is looked through);
/// any other name names none (`publisher:` must then be given).
pub fn publisher_of(model: &str) -> Option<Publisher> {
    let m = model.rsplit('/').next().unwrap_or(model);
    if m.starts_with("claude-") {
        Some(Publisher::Anthropic)
    } else if m.starts_with("gemini-") {
        Some(Publisher::Google)
    } else {
        None
    }
}

/// The publisher serving `model` at this provider: the configured one, else
/// the model's own ([`publisher_of`]). `None` only for a model validation
/// did not see (a client's model name): it is served as Google's.
pub fn publisher(cfg: &VertexConfig, model: &str) -> Publisher {
    cfg.publisher
        .or_else(|| publisher_of(model))
        .unwrap_or(Publisher::Google)
}

/// The endpoint of `location`.
pub fn base_url(location: &str) -> String {
    if location == GLOBAL {
        "https://aiplatform.googleapis.com".to_owned()
    } else {
        format!("https://{location}-aiplatform.googleapis.com")
    }
}

/// The path and query after the base URL of an attempt at `model`: its
/// last `/` part (a `publishers/…/models/` prefix is looked through) is one
/// encoded path segment ([`crate::segment`], `@` kept); a model with a dot
/// part, or an empty last part, is refused.
pub fn path(cfg: &VertexConfig, model: &str, stream: bool) -> Result<String, Refusal> {
    if let Some(r) = segment::problem(model) {
        return Err(r);
    }
    let publisher = publisher(cfg, model);
    let method = match (publisher, stream) {
        (Publisher::Google, false) => "generateContent",
        (Publisher::Google, true) => "streamGenerateContent?alt=sse",
        (Publisher::Anthropic, false) => "rawPredict",
        (Publisher::Anthropic, true) => "streamRawPredict",
    };
    Ok(format!(
        "/v1/projects/{}/locations/{}/publishers/{}/models/{}:{method}",
        cfg.project,
        cfg.location,
        publisher.as_str(),
        Segment::keeping_at(model.rsplit('/').next().unwrap_or(model))?,
    ))
}

/// Whether an attempt answered 401 is sent again with a freshly fetched
/// token: once, when the token it carried was the cached one (`refetched`
/// false). A second 401 is the provider's `auth` failure.
pub fn resend_after_refusal(status: u16, refetched: bool) -> bool {
    status == 401 && !refetched
}

/// What is wrong with a `project` (`None`: it is fine): a Google Cloud
/// project id (6–30 characters: lowercase letters, digits, `-`), or a
/// project number; it becomes a URL path segment.
pub fn project_problem(p: &str) -> Option<&'static str> {
    if p.is_empty() {
        Some("must not be empty")
    } else if !p
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        Some("must be a project id or number (lowercase letters, digits and `-`)")
    } else {
        None
    }
}

/// What is wrong with a `location` (`None`: it is fine): `global` or a
/// region such as `us-east5` (lowercase letters, digits, `-`); it becomes
/// part of the host name and a URL path segment.
pub fn location_problem(l: &str) -> Option<&'static str> {
    if l.is_empty() {
        Some("must not be empty (a region such as us-east5, or global)")
    } else if !l
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        || l.starts_with('-')
        || l.ends_with('-')
    {
        Some("must be a region such as us-east5, or global")
    } else {
        None
    }
}

/// What is wrong with a vertex `base_url` (`None`: it is fine): it is the
/// endpoint alone, and hale adds `/v1/projects/…` itself.
pub fn base_url_problem(url: &str) -> Option<&'static str> {
    let path = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split_once('/')
        .map_or("", |(_, p)| p)
        .trim_end_matches('/');
    if path == "v1" || path.starts_with("v1/") || path.contains("/projects/") {
        Some(
            "is the endpoint, e.g. https://us-east5-aiplatform.googleapis.com: \
             leave out `/v1/projects/…`, hale adds it",
        )
    } else if url.contains('?') || url.contains('#') {
        Some("must have no query or fragment")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::VertexCredentials;

    fn cfg(location: &str, publisher: Option<Publisher>) -> VertexConfig {
        VertexConfig {
            project: "my-proj".into(),
            location: location.into(),
            publisher,
            credentials: VertexCredentials::Default,
        }
    }

    #[test]
    fn publishers_of_model_names() {
        use Publisher::{Anthropic, Google};
        for (model, want) in [
            ("claude-sonnet-4@20250514", Some(Anthropic)),
            ("claude-3-5-haiku", Some(Anthropic)),
            ("gemini-2.5-pro", Some(Google)),
            ("gemini-2.0-flash-001", Some(Google)),
            ("publishers/google/models/gemini-2.5-flash", Some(Google)),
            ("llama-3.1-405b", None),
            ("claude", None),
            ("", None),
        ] {
            assert_eq!(publisher_of(model), want, "{model}");
        }
        // The configured publisher wins; an unknown name is Google's.
        assert_eq!(
            publisher(&cfg("us-east5", Some(Anthropic)), "my-tuned"),
            Anthropic
        );
        assert_eq!(publisher(&cfg("us-east5", None), "my-tuned"), Google);
        assert_eq!(
            publisher(&cfg("us-east5", Some(Google)), "claude-x"),
            Google
        );
    }

    /// (location, publisher, model, stream) → base URL, path.
    #[test]
    fn urls() {
        let rows = [
            (
                "global",
                None,
                "gemini-2.5-flash",
                false,
                "https://aiplatform.googleapis.com",
                "/v1/projects/my-proj/locations/global/publishers/google/models/gemini-2.5-flash:generateContent",
            ),
            (
                "us-central1",
                None,
                "gemini-2.5-flash",
                true,
                "https://us-central1-aiplatform.googleapis.com",
                "/v1/projects/my-proj/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            ),
            (
                "us-east5",
                None,
                "claude-sonnet-4@20250514",
                false,
                "https://us-east5-aiplatform.googleapis.com",
                "/v1/projects/my-proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:rawPredict",
            ),
            (
                "europe-west1",
                None,
                "claude-opus-4",
                true,
                "https://europe-west1-aiplatform.googleapis.com",
                "/v1/projects/my-proj/locations/europe-west1/publishers/anthropic/models/claude-opus-4:streamRawPredict",
            ),
            (
                "us-east5",
                Some(Publisher::Anthropic),
                "tool:name=f:times=1",
                true,
                "https://us-east5-aiplatform.googleapis.com",
                "/v1/projects/my-proj/locations/us-east5/publishers/anthropic/models/tool%3Aname%3Df%3Atimes%3D1:streamRawPredict",
            ),
            (
                "global",
                None,
                "a b/c?d",
                false,
                "https://aiplatform.googleapis.com",
                "/v1/projects/my-proj/locations/global/publishers/google/models/c%3Fd:generateContent",
            ),
        ];
        for (location, publisher, model, stream, want_base, want_path) in rows {
            let c = cfg(location, publisher);
            assert_eq!(base_url(location), want_base, "{location}");
            assert_eq!(
                path(&c, model, stream).as_deref(),
                Ok(want_path),
                "{location} {model}"
            );
        }
        // A dot part anywhere, or no last part, is refused (docs/operations.md, "Threat model").
        let c = cfg("global", None);
        for (model, want) in [
            ("..", Refusal::DotPart),
            ("x/../gemini-2.5-pro", Refusal::DotPart),
            ("gemini-2.5-pro/.", Refusal::DotPart),
            ("%2e%2e", Refusal::DotPart),
            ("gemini/", Refusal::Empty),
            ("", Refusal::Empty),
        ] {
            assert_eq!(path(&c, model, false), Err(want), "{model}");
        }
    }

    #[test]
    fn a_refused_token_is_fetched_again_once() {
        for (status, refetched, want) in [
            (401, false, true),
            (401, true, false),
            (403, false, false),
            (429, false, false),
            (200, false, false),
        ] {
            assert_eq!(
                resend_after_refusal(status, refetched),
                want,
                "{status} {refetched}"
            );
        }
    }

    #[test]
    fn projects_locations_and_base_urls() {
        for (p, ok) in [
            ("my-proj", true),
            ("123456789012", true),
            ("", false),
            ("My-Proj", false),
            ("a/b", false),
            ("a b", false),
        ] {
            assert_eq!(project_problem(p).is_none(), ok, "{p:?}");
        }
        for (l, ok) in [
            ("global", true),
            ("us-east5", true),
            ("europe-west4", true),
            ("", false),
            ("US-EAST5", false),
            ("us-east5.evil.com/x", false),
            ("-x", false),
        ] {
            assert_eq!(location_problem(l).is_none(), ok, "{l:?}");
        }
        for (u, ok) in [
            ("https://us-east5-aiplatform.googleapis.com", true),
            ("https://aiplatform.googleapis.com/", true),
            ("http://127.0.0.1:9000", true),
            ("https://aiplatform.googleapis.com/v1", false),
            ("https://x/v1/projects/p/locations/l", false),
            ("https://x?a=1", false),
        ] {
            assert_eq!(base_url_problem(u).is_none(), ok, "{u:?}");
        }
    }
}
