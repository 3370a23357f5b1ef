//! `events:` — webhook sinks (URL, secret, kinds), the NATS sink, the outbox
//! cap and the fsync mode.

use super::ctx::{Ctx, is_http_url, line_of};
use crate::RawEvents;
use hale_core::config::{EventsConfig, NatsConfig, WebhookConfig};
use hale_core::event::EventKind;

impl Ctx<'_> {
    pub(super) fn events(&mut self, r: &RawEvents) -> EventsConfig {
        let mut ev = EventsConfig::default();
        if let Some(hooks) = &r.webhooks {
            for (i, h) in hooks.value.iter().enumerate() {
                let path = format!("events.webhooks[{i}]");
                let url = self
                    .required(&path, "url", &h.value.url, line_of(h))
                    .and_then(|u| {
                        if is_http_url(u.value.trim()) {
                            Some(u.value.trim().to_owned())
                        } else {
                            self.at(
                                format!("{path}.url"),
                                u,
                                "must be an http:// or https:// URL",
                            );
                            None
                        }
                    });
                let secret = h
                    .value
                    .secret_env
                    .as_ref()
                    .and_then(|s| self.secret(&format!("{path}.secret_env"), s));
                let mut kinds = Vec::new();
                for (j, k) in h
                    .value
                    .kinds
                    .iter()
                    .flat_map(|l| l.value.iter().enumerate())
                {
                    let name = k.value.trim();
                    match EventKind::parse(name) {
                        Some(kind) => kinds.push(kind.as_str().to_owned()),
                        None => self.at(
                            format!("{path}.kinds[{j}]"),
                            k,
                            format!("unknown event kind `{name}`"),
                        ),
                    }
                }
                if let Some(url) = url {
                    ev.webhooks.push(WebhookConfig { url, secret, kinds });
                }
            }
        }
        if let Some(n) = &r.nats {
            let nl = line_of(n);
            let url = self
                .required("events.nats", "url", &n.value.url, nl)
                .and_then(|u| {
                    let v = u.value.trim().to_ascii_lowercase();
                    if ["nats://", "tls://", "ws://", "wss://"]
                        .iter()
                        .any(|s| v.strip_prefix(s).is_some_and(|r| !r.is_empty()))
                    {
                        Some(u.value.trim().to_owned())
                    } else {
                        self.at(
                            "events.nats.url",
                            u,
                            "must be a nats://, tls://, ws:// or wss:// URL",
                        );
                        None
                    }
                });
            let subject_prefix = match &n.value.subject_prefix {
                Some(s) => self.non_empty("events.nats.subject_prefix", s),
                None => Some(NatsConfig::DEFAULT_SUBJECT_PREFIX.to_owned()),
            };
            let stream = match &n.value.stream {
                Some(s) => self.non_empty("events.nats.stream", s).and_then(|v| {
                    if v.contains(|c: char| c.is_whitespace() || matches!(c, '.' | '*' | '>')) {
                        self.at(
                            "events.nats.stream",
                            s,
                            "a JetStream stream name cannot contain spaces, `.`, `*` or `>`",
                        );
                        None
                    } else {
                        Some(v)
                    }
                }),
                None => Some(NatsConfig::DEFAULT_STREAM.to_owned()),
            };
            if let (Some(url), Some(subject_prefix), Some(stream)) = (url, subject_prefix, stream) {
                ev.nats = Some(NatsConfig {
                    url,
                    subject_prefix,
                    stream,
                });
            }
        }
        if let Some(c) = &r.outbox_cap {
            if c.value == 0 {
                self.at("events.outbox_cap", c, "must be at least 1");
            } else {
                ev.outbox_cap = c.value;
            }
        }
        if let Some(f) = &r.fsync {
            match f.value.trim() {
                "always" => ev.fsync_always = true,
                "default" => ev.fsync_always = false,
                other => self.at(
                    "events.fsync",
                    f,
                    format!("unknown fsync mode `{other}`: expected always or default"),
                ),
            }
        }
        ev
    }
}
