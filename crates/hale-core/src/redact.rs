//! What hale masks in the text it shows and stores: the secret values it
//! holds, exactly, in every form an echo of them takes.
//!
//! An upstream, or a proxy in front of it, may answer a refused request
//! with the credential it received ("invalid key AIza…"): that text becomes
//! hale's error message, the attempt timeline, the journal and the events
//! (docs/operations.md, "Threat model"). Masking key-shaped strings ([`crate::classify`] masks
//! `sk-…`) misses a Gemini key, an Azure `api-key`, a Bedrock API key, an
//! OAuth token. So hale masks the values themselves: every secret of the
//! config ([`configured`]) and every live token it fetched (the gateway's
//! redactor remembers them as they come), each in the forms an echo takes
//! ([`forms`]: as sent, JSON-escaped, percent-encoded), replaced by
//! [`MASK`] ([`mask`]).
//!
//! A value shorter than [`MIN_SECRET_LEN`] is not masked: masking `dev`
//! would garble every message that holds the word, and no provider issues
//! a credential that short.

use crate::config::{AlertTarget, Config};
use std::borrow::Cow;

/// What a secret becomes.
pub const MASK: &str = "[redacted]";

/// The shortest value masked, in bytes.
pub const MIN_SECRET_LEN: usize = 8;

/// How many values of one live source (a provider's OAuth token, Entra
/// token, AWS credentials) are remembered: the current one and those
/// before it, which an attempt still in flight may have sent.
pub const LIVE_VALUES_KEPT: usize = 4;

/// The forms `value` takes in text that echoes it (`None`-free, distinct):
/// as it is, JSON-escaped (with `/` also as `\/`), percent-encoded. Empty
/// when the value is shorter than [`MIN_SECRET_LEN`] (surrounding
/// whitespace aside, which no header carries).
pub fn forms(value: &str) -> Vec<String> {
    let value = value.trim();
    if value.len() < MIN_SECRET_LEN {
        return Vec::new();
    }
    let json = serde_json::to_string(value).unwrap_or_default();
    let json = json
        .get(1..json.len().saturating_sub(1))
        .unwrap_or_default()
        .to_owned();
    let candidates = [
        value.to_owned(),
        json.replace('/', "\\/"),
        json,
        percent_encoding::utf8_percent_encode(value, crate::segment::UNRESERVED).to_string(),
    ];
    let mut out: Vec<String> = Vec::with_capacity(candidates.len());
    for c in candidates {
        if c.len() >= MIN_SECRET_LEN && !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// Sorts forms as [`mask`] wants them: longest first, so a value that holds
/// another is masked whole.
pub fn order(forms: &mut Vec<String>) {
    forms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    forms.dedup();
}

/// `text` with every occurrence of each form replaced by [`MASK`]; `forms`
/// in [`order`]. Borrowed when nothing matched.
pub fn mask<'a>(text: &'a str, forms: &[String]) -> Cow<'a, str> {
    let mut out = Cow::Borrowed(text);
    for f in forms {
        if out.contains(f.as_str()) {
            out = Cow::Owned(out.replace(f.as_str(), MASK));
        }
    }
    out
}

/// The secret values of a config: the providers' keys and tokens (every
/// kind's `api_key_env`, `token_env`), hale's own API keys, the webhook
/// sinks' signing secrets, the alert channels' Slack URLs and PagerDuty
/// routing keys, and a password in the `storage` URL.
pub fn configured(cfg: &Config) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    out.extend(
        cfg.providers
            .iter()
            .filter_map(|p| p.api_key.as_ref().map(|k| k.expose())),
    );
    out.extend(cfg.auth.keys.iter().map(|k| k.token.expose()));
    out.extend(
        cfg.events
            .webhooks
            .iter()
            .filter_map(|w| w.secret.as_ref().map(|s| s.expose())),
    );
    for c in &cfg.alerting.channels {
        match &c.target {
            AlertTarget::Slack { url } => out.push(url.expose()),
            AlertTarget::PagerDuty { routing_key, .. } => out.push(routing_key.expose()),
        }
    }
    if let Some(p) = cfg.storage.as_deref().and_then(url_password) {
        out.push(p);
    }
    out
}

/// The password of `scheme://user:password@host…`, if any.
fn url_password(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let userinfo = authority.rsplit_once('@')?.0;
    userinfo
        .split_once(':')
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ApiKey, KeyScope, ProviderConfig, ProviderKind, Secret, WebhookConfig};

    #[test]
    fn the_forms_of_a_value() {
        for (value, want) in [
            ("short", vec![]),
            ("  short  ", vec![]),
            ("AIzaSyA-1234_abcd.~", vec!["AIzaSyA-1234_abcd.~"]),
            (
                "ab/cd+ef==",
                vec!["ab/cd+ef==", "ab\\/cd+ef==", "ab%2Fcd%2Bef%3D%3D"],
            ),
            (
                "a\"b\\c\nd1",
                vec!["a\"b\\c\nd1", "a\\\"b\\\\c\\nd1", "a%22b%5Cc%0Ad1"],
            ),
            ("abcdefgh", vec!["abcdefgh"]),
        ] {
            assert_eq!(forms(value), want, "{value:?}");
        }
    }

    #[test]
    fn masking_replaces_every_form_longest_first() {
        let mut fs: Vec<String> = ["secret-one", "secret-one-and-more", "s3cr3t/with+slash"]
            .iter()
            .flat_map(|v| forms(v))
            .collect();
        order(&mut fs);
        for (text, want) in [
            ("nothing here", "nothing here"),
            ("key secret-one.", "key [redacted]."),
            ("secret-one-and-more!", "[redacted]!"),
            ("a secret-one b secret-one", "a [redacted] b [redacted]"),
            (
                "json {\"k\":\"s3cr3t\\/with+slash\"}",
                "json {\"k\":\"[redacted]\"}",
            ),
            ("query ?k=s3cr3t%2Fwith%2Bslash&", "query ?k=[redacted]&"),
            ("secret-on", "secret-on"),
        ] {
            assert_eq!(mask(text, &fs), want, "{text}");
        }
        assert!(matches!(mask("nothing", &fs), Cow::Borrowed(_)));
        assert_eq!(mask("secret-one", &[]), "secret-one");
    }

    #[test]
    fn the_secrets_of_a_config() {
        let mut p = ProviderConfig::new("g", ProviderKind::Gemini, "http://x", "m");
        p.api_key = Some(Secret::new("provider-key-1"));
        let mut cfg = Config::with_providers(vec![
            p,
            ProviderConfig::new("o", ProviderKind::OpenAi, "http://x", "m"),
        ]);
        cfg.auth.keys.push(ApiKey {
            name: "admin".into(),
            token: Secret::new("hale-admin-key"),
            scope: KeyScope::Admin,
        });
        cfg.events.webhooks.push(WebhookConfig {
            url: "http://hook".into(),
            secret: Some(Secret::new("webhook-secret")),
            kinds: Vec::new(),
        });
        cfg.alerting.channels.push(crate::config::AlertChannel {
            name: "pd".into(),
            target: AlertTarget::PagerDuty {
                url: "http://pd".into(),
                routing_key: Secret::new("routing-key"),
            },
        });
        cfg.storage = Some("postgres://hale:db-password@127.0.0.1/hale".into());
        assert_eq!(
            configured(&cfg),
            [
                "provider-key-1",
                "hale-admin-key",
                "webhook-secret",
                "routing-key",
                "db-password"
            ]
        );
        for (url, want) in [
            ("postgres://u:p@h/db", Some("p")),
            ("postgres://u@h/db", None),
            ("postgres://h/db?password=x", None),
            ("sqlite://./x.db", None),
            ("postgres://u:@h", None),
        ] {
            assert_eq!(url_password(url), want, "{url}");
        }
    }
}
