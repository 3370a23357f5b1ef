//! `providers[i]` of `kind: vertex` — the project, the location (which gives
//! the endpoint), the publisher (given, or implied by every model's name) and
//! the service-account key; on any other kind these keys are refused rather
//! than ignored. The key file is not read here (hale-core reads no files):
//! the gateway reads it when it builds the provider's token source.

use super::ctx::{Ctx, line_of};
use crate::RawProvider;
use hale_core::config::{ProviderConfig, ProviderKind, Publisher, VertexConfig, VertexCredentials};
use hale_core::vertex;
use serde_saphyr::Spanned;

impl Ctx<'_> {
    /// Sets `pc.vertex` for a vertex provider (and its `base_url` from the
    /// location when none is given); refuses the vertex-only keys on other kinds.
    pub(super) fn vertex(&mut self, path: &str, p: &Spanned<RawProvider>, pc: &mut ProviderConfig) {
        let r = &p.value;
        let vertex_only = [
            ("project", r.project.as_ref().map(line_of)),
            ("location", r.location.as_ref().map(line_of)),
            ("publisher", r.publisher.as_ref().map(line_of)),
            ("credentials_file", r.credentials_file.as_ref().map(line_of)),
        ];
        match pc.kind {
            ProviderKind::Vertex => {}
            ProviderKind::OpenAi
            | ProviderKind::Anthropic
            | ProviderKind::Gemini
            | ProviderKind::Azure
            | ProviderKind::Bedrock => {
                for (key, line) in vertex_only {
                    if let Some(line) = line {
                        self.err(
                            format!("{path}.{key}"),
                            line,
                            format!("`{key}` is for `kind: vertex` providers"),
                        );
                    }
                }
                return;
            }
        }
        let pl = line_of(p);
        if let Some(k) = &r.api_key_env {
            self.at(
                format!("{path}.api_key_env"),
                k,
                "a vertex provider takes no API key: it uses an OAuth2 token from \
                 `credentials_file`, GOOGLE_APPLICATION_CREDENTIALS or the metadata server",
            );
            pc.api_key = None;
        }
        let project = self
            .required_str(path, "project", &r.project, pl)
            .and_then(|v| match vertex::project_problem(&v) {
                Some(problem) => {
                    self.err(
                        format!("{path}.project"),
                        r.project.as_ref().and_then(line_of),
                        problem,
                    );
                    None
                }
                None => Some(v),
            });
        let location = self
            .required_str(path, "location", &r.location, pl)
            .and_then(|v| match vertex::location_problem(&v) {
                Some(problem) => {
                    self.err(
                        format!("{path}.location"),
                        r.location.as_ref().and_then(line_of),
                        problem,
                    );
                    None
                }
                None => Some(v),
            });
        if let Some(u) = &r.base_url
            && let Some(problem) = vertex::base_url_problem(u.value.trim())
        {
            self.at(format!("{path}.base_url"), u, problem);
        }
        let publisher = r.publisher.as_ref().and_then(|s| {
            let v = s.value.trim();
            let got = Publisher::parse(v);
            if got.is_none() {
                self.at(
                    format!("{path}.publisher"),
                    s,
                    format!("unknown publisher `{v}`: expected google or anthropic"),
                );
            }
            got
        });
        if r.publisher.is_none() {
            // Every model this provider names must say whose it is.
            let named = std::iter::once(&pc.default_model).chain(pc.models.iter());
            let unknown: Vec<&String> = named
                .filter(|m| vertex::publisher_of(m).is_none())
                .collect();
            if let Some(m) = unknown.first() {
                self.err(
                    format!("{path}.publisher"),
                    pl,
                    format!(
                        "`publisher` is required: the model `{m}` is neither claude-* (anthropic) \
                         nor gemini-* (google)"
                    ),
                );
            }
        }
        let credentials = match &r.credentials_file {
            Some(f) => self
                .non_empty(&format!("{path}.credentials_file"), f)
                .map_or(VertexCredentials::Default, VertexCredentials::KeyFile),
            None => VertexCredentials::Default,
        };
        let (Some(project), Some(location)) = (project, location) else {
            return;
        };
        if pc.base_url.is_empty() {
            pc.base_url = vertex::base_url(&location);
        }
        let cfg = VertexConfig {
            project,
            location,
            publisher,
            credentials,
        };
        // Claude continues an assistant prefill; Gemini does not.
        pc.supports_prefill = vertex::publisher(&cfg, &pc.default_model) == Publisher::Anthropic;
        pc.vertex = Some(cfg);
    }
}
