//! The one redactor: every secret value hale holds, and the masking of it
//! in the text hale shows and stores (docs/operations.md, "Threat model"; the rule is
//! [`hale_core::redact`]).
//!
//! Secrets come from two places. The config's ([`hale_core::redact::configured`]:
//! provider keys and tokens, hale's API keys, webhook and alert secrets)
//! are known at start. Live tokens change while hale runs — a Vertex OAuth
//! token, an Entra token from `token_command`, AWS credentials resolved
//! from the environment, a profile, STS — so the upstream client
//! [`remember`](Redactor::remember)s each one as it is fetched, under its
//! source (`vertex:{provider}`, …), keeping the last
//! [`LIVE_VALUES_KEPT`](hale_core::redact::LIVE_VALUES_KEPT) of each:
//! an attempt still in flight may echo the one before.
//!
//! Where it masks, so that no path is left out:
//!
//! - **where upstream text enters hale**: the upstream client masks every
//!   failure an attempt returns (its message, which becomes the caller's
//!   error, the timeline, the journal, the events and the logs), the error
//!   body before it is classified and cut, and an upstream's error event
//!   inside a stream;
//! - **where hale writes**: the [`Emitter`](crate::emit::Emitter) masks
//!   every event's payload, and the pipeline a turn's journalled timeline
//!   and its `agent.failed` event.
//!
//! Answers that succeeded pass as the provider sent them (hale does not
//! rewrite a model's content).

use hale_core::config::Config;
use hale_core::redact;
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, RwLock};

/// The secret values to mask, shared by the upstream client (which learns
/// the live ones) and the emitter.
#[derive(Default)]
pub struct Redactor {
    state: RwLock<State>,
}

#[derive(Default)]
struct State {
    /// The config's values.
    fixed: Vec<String>,
    /// Live values by source, the newest last.
    live: HashMap<String, VecDeque<String>>,
    /// Every form of every value, in [`redact::order`].
    forms: Arc<[String]>,
}

impl State {
    fn rebuild(&mut self) {
        let mut forms: Vec<String> = self
            .fixed
            .iter()
            .chain(self.live.values().flatten())
            .flat_map(|v| redact::forms(v))
            .collect();
        redact::order(&mut forms);
        self.forms = forms.into();
    }
}

impl Redactor {
    /// A redactor of the config's secrets.
    pub fn from_config(cfg: &Config) -> Self {
        Self::with_values(redact::configured(cfg))
    }

    /// A redactor of these values.
    pub fn with_values<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut state = State {
            fixed: values.into_iter().map(str::to_owned).collect(),
            ..State::default()
        };
        state.rebuild();
        Self {
            state: RwLock::new(state),
        }
    }

    /// A live value of `source` (a token just fetched): masked from now on,
    /// with the last few values before it. Cheap when it is the newest
    /// already (a cached token is remembered on every attempt).
    pub fn remember(&self, source: &str, value: &str) {
        let newest = |s: &State| {
            s.live
                .get(source)
                .and_then(|v| v.back())
                .is_some_and(|v| v == value)
        };
        if newest(&self.state.read().unwrap_or_else(|e| e.into_inner())) {
            return;
        }
        let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
        if newest(&s) {
            return;
        }
        let kept = s.live.entry(source.to_owned()).or_default();
        kept.retain(|v| v != value);
        kept.push_back(value.to_owned());
        while kept.len() > redact::LIVE_VALUES_KEPT {
            kept.pop_front();
        }
        s.rebuild();
    }

    fn forms(&self) -> Arc<[String]> {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .forms
            .clone()
    }

    /// `text` with every secret masked.
    pub fn mask<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let forms = self.forms();
        if forms.is_empty() {
            return Cow::Borrowed(text);
        }
        redact::mask(text, &forms)
    }

    /// Masks `text` where it is.
    pub fn mask_string(&self, text: &mut String) {
        if let Cow::Owned(m) = self.mask(text) {
            *text = m;
        }
    }

    /// Masks every string of `value` (object keys too), where it is.
    pub fn mask_json(&self, value: &mut serde_json::Value) {
        let forms = self.forms();
        if forms.is_empty() {
            return;
        }
        mask_value(value, &forms);
    }
}

fn mask_value(value: &mut serde_json::Value, forms: &[String]) {
    use serde_json::Value;
    match value {
        Value::String(s) => {
            if let Cow::Owned(m) = redact::mask(s, forms) {
                *s = m;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| mask_value(v, forms)),
        Value::Object(map) => {
            let keys: Vec<String> = map
                .keys()
                .filter(|k| matches!(redact::mask(k, forms), Cow::Owned(_)))
                .cloned()
                .collect();
            for k in keys {
                if let Some(v) = map.remove(&k) {
                    map.insert(redact::mask(&k, forms).into_owned(), v);
                }
            }
            map.values_mut().for_each(|v| mask_value(v, forms));
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live value is masked once remembered, with the values before it
    /// up to the bound; older ones are forgotten.
    #[test]
    fn live_values_are_masked_up_to_the_bound() {
        let r = Redactor::with_values(["configured-key"]);
        assert_eq!(r.mask("x configured-key"), "x [redacted]");
        assert_eq!(r.mask("token-0000"), "token-0000");
        let n = hale_core::redact::LIVE_VALUES_KEPT;
        for i in 0..=n {
            r.remember("vertex:v", &format!("token-{i:04}"));
            // Remembering the newest again changes nothing.
            r.remember("vertex:v", &format!("token-{i:04}"));
        }
        assert_eq!(
            r.mask("token-0000"),
            "token-0000",
            "the oldest is forgotten"
        );
        for i in 1..=n {
            assert_eq!(r.mask(&format!("a token-{i:04}")), "a [redacted]");
        }
        // Another source keeps its own.
        r.remember("azure:a", "entra-token-1");
        assert_eq!(r.mask("entra-token-1 token-0001"), "[redacted] [redacted]");
        assert_eq!(r.mask("configured-key"), "[redacted]");
    }

    #[test]
    fn json_strings_and_keys_are_masked() {
        let r = Redactor::with_values(["sekrit-value"]);
        let mut v = serde_json::json!({
            "message": "bad key sekrit-value",
            "sekrit-value": [1, "sekrit-value", {"deep": "x sekrit-value"}],
            "n": 3
        });
        r.mask_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({
                "message": "bad key [redacted]",
                "[redacted]": [1, "[redacted]", {"deep": "x [redacted]"}],
                "n": 3
            })
        );
        let mut s = "sekrit-value!".to_owned();
        r.mask_string(&mut s);
        assert_eq!(s, "[redacted]!");
        // Nothing configured: nothing to do.
        let none = Redactor::default();
        assert!(matches!(none.mask("sekrit-value"), Cow::Borrowed(_)));
    }
}
