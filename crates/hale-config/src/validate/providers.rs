//! `providers:` — each provider's name, kind, URL, models, key and timeouts;
//! names are unique and may not contain `/`.

use super::ctx::{Ctx, is_http_url, line_of};
use crate::{RawConfig, RawProvider};
use hale_core::bedrock;
use hale_core::config::{ProviderApi, ProviderConfig, ProviderKind};
use serde_saphyr::Spanned;
use std::collections::BTreeMap;

impl Ctx<'_> {
    pub(super) fn providers(&mut self, raw: &RawConfig) -> Vec<ProviderConfig> {
        let Some(list) = &raw.providers else {
            self.err("providers", None, "at least one provider is required");
            return Vec::new();
        };
        if list.value.is_empty() {
            self.at("providers", list, "at least one provider is required");
            return Vec::new();
        }
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut out = Vec::new();
        for (i, p) in list.value.iter().enumerate() {
            let path = format!("providers[{i}]");
            if let Some(name) = &p.value.name {
                let n = name.value.trim().to_owned();
                match seen.get(&n) {
                    Some(first) => self.at(
                        format!("{path}.name"),
                        name,
                        format!("duplicate provider name `{n}` (also providers[{first}])"),
                    ),
                    None => {
                        seen.insert(n, i);
                    }
                }
            }
            if let Some(pc) = self.provider(&path, p) {
                out.push(pc);
            }
        }
        out
    }

    fn provider(&mut self, path: &str, p: &Spanned<RawProvider>) -> Option<ProviderConfig> {
        let r = &p.value;
        let pl = line_of(p);
        let name = self.required_str(path, "name", &r.name, pl);
        if let (Some(n), Some(s)) = (&name, &r.name)
            && n.contains('/')
        {
            self.at(
                format!("{path}.name"),
                s,
                "must not contain `/` (targets are written provider/model)",
            );
        }
        let kind = self
            .required(path, "kind", &r.kind, pl)
            .and_then(|k| match k.value.trim() {
                "openai" => Some(ProviderKind::OpenAi),
                "anthropic" => Some(ProviderKind::Anthropic),
                "gemini" => Some(ProviderKind::Gemini),
                "azure" => Some(ProviderKind::Azure),
                "vertex" => Some(ProviderKind::Vertex),
                "bedrock" => Some(ProviderKind::Bedrock),
                other => {
                    self.at(
                        format!("{path}.kind"),
                        k,
                        format!(
                            "unknown provider kind `{other}`: expected openai, anthropic, azure, bedrock, gemini or vertex"
                        ),
                    );
                    None
                }
            });
        // A bedrock provider's default is its region's endpoint (a missing
        // region is named by validate/bedrock.rs).
        let default_base = match kind {
            Some(ProviderKind::Bedrock) => Some(bedrock::default_base_url(
                r.region.as_ref().map_or("", |g| g.value.trim()),
            )),
            Some(k) => k.default_base_url().map(str::to_owned),
            None => None,
        };
        let base_url = match (&r.base_url, default_base) {
            (None, Some(d)) => Some(d),
            // A vertex provider's comes from its `location` (validate/vertex.rs).
            (None, None) if kind == Some(ProviderKind::Vertex) => Some(String::new()),
            (Some(_), _) | (None, None) => self
                .required(path, "base_url", &r.base_url, pl)
                .and_then(|u| {
                    if is_http_url(u.value.trim()) {
                        Some(u.value.trim().to_owned())
                    } else {
                        self.at(
                            format!("{path}.base_url"),
                            u,
                            "must be an http:// or https:// URL",
                        );
                        None
                    }
                }),
        };
        let models: Vec<String> = r
            .models
            .iter()
            .flat_map(|l| l.value.iter().enumerate())
            .filter_map(|(i, m)| self.non_empty(&format!("{path}.models[{i}]"), m))
            .collect();
        let default_model = match &r.default_model {
            Some(m) => self.non_empty(&format!("{path}.default_model"), m),
            None => match models.first() {
                Some(first) => Some(first.clone()),
                None => {
                    self.err(
                        format!("{path}.default_model"),
                        pl,
                        "`default_model` is required (or list `models`; the first is the default)",
                    );
                    None
                }
            },
        };
        let api_key = r
            .api_key_env
            .as_ref()
            .and_then(|v| self.secret(&format!("{path}.api_key_env"), v));
        let (name, kind, base_url, default_model) = (name?, kind?, base_url?, default_model?);
        let mut pc = ProviderConfig::new(&name, kind, &base_url, &default_model);
        pc.api_key = api_key;
        self.azure(path, p, &mut pc);
        self.vertex(path, p, &mut pc);
        self.bedrock(path, p, &mut pc);
        pc.models = models;
        pc.timeout = self.positive_ms(&format!("{path}.timeout_ms"), &r.timeout_ms, pc.timeout);
        pc.first_token_timeout = self.positive_ms(
            &format!("{path}.first_token_timeout_ms"),
            &r.first_token_timeout_ms,
            pc.first_token_timeout,
        );
        pc.stream_idle_timeout = self.positive_ms(
            &format!("{path}.stream_idle_timeout_ms"),
            &r.stream_idle_timeout_ms,
            pc.stream_idle_timeout,
        );
        if let Some(a) = &r.api {
            match (a.value.trim(), kind) {
                // validate/bedrock.rs reads a bedrock provider's `api`.
                ("converse" | "invoke", ProviderKind::Bedrock) => {}
                (other, ProviderKind::Bedrock) => self.at(
                    format!("{path}.api"),
                    a,
                    format!(
                        "unknown api `{other}` for `kind: bedrock`: expected converse or invoke"
                    ),
                ),
                ("chat", _) => {}
                ("responses", ProviderKind::OpenAi | ProviderKind::Azure) => {
                    pc.api = ProviderApi::Responses
                }
                (
                    "responses",
                    ProviderKind::Anthropic | ProviderKind::Gemini | ProviderKind::Vertex,
                ) => self.at(
                    format!("{path}.api"),
                    a,
                    "`api: responses` is for `kind: openai` and `kind: azure` providers",
                ),
                (other, _) => self.at(
                    format!("{path}.api"),
                    a,
                    format!("unknown api `{other}`: expected chat or responses"),
                ),
            }
        }
        if let Some(b) = &r.supports_prefill {
            if b.value && pc.api == ProviderApi::Responses {
                // The Responses API answers a trailing assistant message
                // afresh rather than continuing it.
                self.at(
                    format!("{path}.supports_prefill"),
                    b,
                    "`api: responses` providers take no assistant prefill",
                );
            } else {
                pc.supports_prefill = b.value;
            }
        }
        if let Some(w) = &r.context_windows {
            for (model, n) in &w.value {
                if n.value == 0 {
                    self.at(
                        format!("{path}.context_windows.{model}"),
                        n,
                        "must be greater than 0",
                    );
                } else {
                    pc.context_windows.insert(model.clone(), n.value);
                }
            }
        }
        Some(pc)
    }
}
