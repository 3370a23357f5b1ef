//! `alerting:` — the dashboard URL, the Slack and PagerDuty channels with
//! their credentials, and the routes from event kinds to channels.

use super::ctx::{Ctx, is_http_url, line_of};
use crate::{RawAlertChannel, RawAlerting};
use hale_core::config::{AlertChannel, AlertRoute, AlertTarget, AlertingConfig, Secret};
use hale_core::event::EventKind;
use std::collections::BTreeSet;

impl Ctx<'_> {
    /// `alerting:`: channels with their credentials read from the
    /// environment, routes naming defined channels and known kinds.
    pub(super) fn alerting(&mut self, r: &RawAlerting) -> AlertingConfig {
        let mut out = AlertingConfig::default();
        if let Some(d) = &r.dashboard_url {
            let v = d.value.trim();
            if is_http_url(v) {
                out.dashboard_url = Some(v.to_owned());
            } else {
                self.at(
                    "alerting.dashboard_url",
                    d,
                    "must be an http:// or https:// URL",
                );
            }
        }
        // Names written (valid or not), so a broken channel does not also
        // make every route naming it "not defined".
        let written: BTreeSet<&str> = r
            .channels
            .iter()
            .flat_map(|m| m.value.keys())
            .map(|k| k.as_str())
            .collect();
        for (name, c) in r.channels.iter().flat_map(|m| m.value.iter()) {
            let path = format!("alerting.channels.{name}");
            if let Some(ch) = self.alert_channel(&path, name, c) {
                out.channels.push(ch);
            }
        }
        for (i, route) in r.routes.iter().flat_map(|l| l.value.iter().enumerate()) {
            let path = format!("alerting.routes[{i}]");
            let line = line_of(route);
            let route = &route.value;
            let mut kinds = Vec::new();
            if let Some(list) = self.required(&path, "kinds", &route.kinds, line) {
                if list.value.is_empty() {
                    self.at(
                        format!("{path}.kinds"),
                        list,
                        "must name at least one event kind",
                    );
                }
                for (j, k) in list.value.iter().enumerate() {
                    let name = k.value.trim();
                    match EventKind::parse(name) {
                        Some(kind) => kinds.push(kind),
                        None => self.at(
                            format!("{path}.kinds[{j}]"),
                            k,
                            format!("unknown event kind `{name}`"),
                        ),
                    }
                }
            }
            let mut channels = Vec::new();
            if let Some(list) = self.required(&path, "channels", &route.channels, line) {
                if list.value.is_empty() {
                    self.at(
                        format!("{path}.channels"),
                        list,
                        "must name at least one channel",
                    );
                }
                for (j, c) in list.value.iter().enumerate() {
                    let name = c.value.trim();
                    if written.contains(name) {
                        channels.push(name.to_owned());
                    } else {
                        let known: Vec<&str> = written.iter().copied().collect();
                        self.at(
                            format!("{path}.channels[{j}]"),
                            c,
                            format!(
                                "channel `{name}` is not defined in alerting.channels (defined: {})",
                                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                            ),
                        );
                    }
                }
            }
            let severity = self
                .required(&path, "severity", &route.severity, line)
                .and_then(|s| {
                    let v = s.value.trim();
                    let parsed = hale_core::severity::Severity::parse(v);
                    if parsed.is_none() {
                        self.at(
                            format!("{path}.severity"),
                            s,
                            format!(
                                "unknown severity `{v}`: expected critical, error, warning or info"
                            ),
                        );
                    }
                    parsed
                });
            if let Some(severity) = severity {
                out.routes.push(AlertRoute {
                    kinds,
                    channels,
                    severity,
                });
            }
        }
        out
    }

    fn alert_channel(
        &mut self,
        path: &str,
        name: &str,
        c: &serde_saphyr::Spanned<RawAlertChannel>,
    ) -> Option<AlertChannel> {
        let line = line_of(c);
        let raw = &c.value;
        if name.trim().is_empty() || name.contains(char::is_whitespace) {
            self.err(
                path,
                line,
                "a channel name must be non-empty without spaces",
            );
            return None;
        }
        let kind = self.required_str(path, "kind", &raw.kind, line)?;
        let url = |cx: &mut Self| -> Option<Option<String>> {
            match &raw.url {
                None => Some(None),
                Some(u) if is_http_url(u.value.trim()) => Some(Some(u.value.trim().to_owned())),
                Some(u) => {
                    cx.at(
                        format!("{path}.url"),
                        u,
                        "must be an http:// or https:// URL",
                    );
                    None
                }
            }
        };
        match kind.as_str() {
            "slack" => {
                if let Some(k) = &raw.routing_key_env {
                    self.at(format!("{path}.routing_key_env"), k, "only a pagerduty channel takes a routing key");
                }
                let from_env = raw
                    .url_env
                    .as_ref()
                    .and_then(|v| self.secret(&format!("{path}.url_env"), v));
                let literal = url(self)?;
                match (from_env, literal, &raw.url_env) {
                    (Some(u), None, _) => Some(AlertTarget::Slack { url: u }),
                    (None, Some(u), None) => Some(AlertTarget::Slack { url: Secret::new(u) }),
                    (None, None, None) => {
                        self.err(path, line, "a slack channel needs `url_env` (or `url`)");
                        None
                    }
                    (Some(_), Some(_), _) | (None, Some(_), Some(_)) => {
                        self.err(path, line, "give either `url_env` or `url`, not both");
                        None
                    }
                    // url_env given but unset: already reported.
                    (None, None, Some(_)) => None,
                }
            }
            "pagerduty" => {
                if let Some(k) = &raw.url_env {
                    self.at(format!("{path}.url_env"), k, "a pagerduty channel takes `url` (the Events API endpoint) and `routing_key_env`");
                }
                let literal = url(self)?;
                let key = self
                    .required(path, "routing_key_env", &raw.routing_key_env, line)
                    .and_then(|v| self.secret(&format!("{path}.routing_key_env"), v))?;
                Some(AlertTarget::PagerDuty {
                    url: literal.unwrap_or_else(|| hale_core::config::PAGERDUTY_EVENTS_URL.to_owned()),
                    routing_key: key,
                })
            }
            other => {
                let k = raw.kind.as_ref().map(line_of).unwrap_or(line);
                self.err(format!("{path}.kind"), k, format!("unknown channel kind `{other}`: expected slack or pagerduty"));
                None
            }
        }
        .map(|target| AlertChannel {
            name: name.to_owned(),
            target,
        })
    }
}
