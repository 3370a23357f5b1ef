//! `tool_nodes:` — each tool node's unique name, kind, URL, deterministic
//! tools, metadata and breaker.

use super::ctx::{Ctx, is_http_url, line_of};
use crate::{Opt, RawNodeBreaker, RawToolNode};
use serde_saphyr::Spanned;
use std::collections::BTreeSet;

impl Ctx<'_> {
    /// `tool_nodes:` — unique names, a known kind, an http(s) URL.
    pub(super) fn tool_nodes(
        &mut self,
        list: &[Spanned<RawToolNode>],
    ) -> Vec<hale_core::config::ToolNodeConfig> {
        use hale_core::config::{ToolNodeConfig, ToolNodeKind};
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for (i, n) in list.iter().enumerate() {
            let path = format!("tool_nodes[{i}]");
            let line = line_of(n);
            let name = self.required_str(&path, "name", &n.value.name, line);
            if let (Some(name), Some(raw)) = (&name, &n.value.name)
                && !seen.insert(name.clone())
            {
                self.at(
                    format!("{path}.name"),
                    raw,
                    format!("duplicate tool node name `{name}`"),
                );
            }
            let kind = self
                .required(&path, "kind", &n.value.kind, line)
                .and_then(|k| match k.value.trim() {
                    "mcp" => Some(ToolNodeKind::Mcp),
                    "http" => Some(ToolNodeKind::Http),
                    other => {
                        self.at(
                            format!("{path}.kind"),
                            k,
                            format!("unknown kind `{other}` (expected mcp or http)"),
                        );
                        None
                    }
                });
            let url = self
                .required(&path, "url", &n.value.url, line)
                .and_then(|u| {
                    if is_http_url(u.value.trim()) {
                        Some(u.value.trim().trim_end_matches('/').to_owned())
                    } else {
                        self.at(
                            format!("{path}.url"),
                            u,
                            "must be an http:// or https:// URL",
                        );
                        None
                    }
                });
            let deterministic = n
                .value
                .deterministic
                .as_ref()
                .map(|l| l.value.iter().map(|s| s.value.trim().to_owned()).collect())
                .unwrap_or_default();
            let metadata = n
                .value
                .metadata
                .as_ref()
                .map(|m| m.value.clone())
                .unwrap_or_default();
            let breaker = n
                .value
                .breaker
                .as_ref()
                .map(|b| self.node_breaker(&format!("{path}.breaker"), &b.value))
                .unwrap_or_default();
            if let (Some(name), Some(kind), Some(url)) = (name, kind, url) {
                out.push(ToolNodeConfig {
                    name,
                    kind,
                    url,
                    deterministic,
                    metadata,
                    breaker,
                });
            }
        }
        out
    }

    /// `tool_nodes[].breaker` — each number at least 1 (unset keeps the
    /// default of `tools::node_breaker_config`).
    fn node_breaker(
        &mut self,
        path: &str,
        r: &RawNodeBreaker,
    ) -> hale_core::config::NodeBreakerConfig {
        hale_core::config::NodeBreakerConfig {
            failure_threshold: self
                .count_from_one(&format!("{path}.failure_threshold"), &r.failure_threshold),
            timeout_seconds: self
                .count_from_one(&format!("{path}.timeout_seconds"), &r.timeout_seconds)
                .map(u64::from),
            half_open_requests: self
                .count_from_one(&format!("{path}.half_open_requests"), &r.half_open_requests),
        }
    }

    /// A whole number from 1 to `u32::MAX`, or an error at its line.
    fn count_from_one(&mut self, path: &str, v: &Opt<i64>) -> Option<u32> {
        let s = v.as_ref()?;
        match u32::try_from(s.value) {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                self.at(
                    path,
                    s,
                    format!("must be a whole number from 1 to {}", u32::MAX),
                );
                None
            }
        }
    }
}
