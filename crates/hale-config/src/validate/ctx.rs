//! The validation context every section shares: the problems found so far,
//! the provider names written in the file, the environment lookup, and the
//! checks several sections use (required keys, durations, counts, fractions,
//! secrets, provider references).

use crate::{ConfigError, ConfigErrors, Opt, RawConfig};
use hale_core::config::Secret;
use serde_saphyr::Spanned;
use std::collections::BTreeSet;
use std::time::Duration;

/// The line a node was written on, if known.
pub(super) fn line_of<T>(s: &Spanned<T>) -> Option<usize> {
    usize::try_from(s.referenced.line()).ok().filter(|&l| l > 0)
}

/// Whether `s` looks like an `http://` or `https://` URL with a host.
pub(super) fn is_http_url(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"));
    rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/') && !r.contains(char::is_whitespace))
}

/// Validation state: the problems found so far and what is needed to check
/// references.
pub(super) struct Ctx<'a> {
    pub(super) env: &'a dyn Fn(&str) -> Option<String>,
    errors: Vec<ConfigError>,
    /// Provider names written in the file (valid or not).
    defined: BTreeSet<String>,
}

impl<'a> Ctx<'a> {
    /// A context with no problem yet; the provider names are gathered from
    /// the raw list first, valid or not.
    pub(super) fn new(raw: &RawConfig, env: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Ctx {
            env,
            errors: Vec::new(),
            defined: raw
                .providers
                .iter()
                .flat_map(|l| l.value.iter())
                .filter_map(|p| p.value.name.as_ref().map(|n| n.value.trim().to_owned()))
                .collect(),
        }
    }

    /// The config when nothing was wrong, else every problem sorted by line.
    pub(super) fn finish<T>(self, cfg: T) -> Result<T, ConfigErrors> {
        if self.errors.is_empty() {
            Ok(cfg)
        } else {
            let mut errors = self.errors;
            errors.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
            Err(ConfigErrors(errors))
        }
    }
}

impl Ctx<'_> {
    /// A key hale no longer has: refused, naming what to use instead (docs/configuration.md,
    /// "Removed keys"), rather than the bare "unknown field" an unknown key gets.
    pub(super) fn removed<T>(&mut self, path: &str, node: &Option<Spanned<T>>, instead: &str) {
        if let Some(n) = node {
            self.at(path, n, format!("removed: {instead}"));
        }
    }

    pub(super) fn err(
        &mut self,
        path: impl Into<String>,
        line: Option<usize>,
        message: impl Into<String>,
    ) {
        self.errors.push(ConfigError {
            path: path.into(),
            line,
            message: message.into(),
        });
    }

    pub(super) fn at<T>(
        &mut self,
        path: impl Into<String>,
        node: &Spanned<T>,
        message: impl Into<String>,
    ) {
        self.err(path, line_of(node), message);
    }

    /// A required key: reports it missing (at the parent's line) when absent.
    pub(super) fn required<'r, T>(
        &mut self,
        parent: &str,
        key: &str,
        v: &'r Opt<T>,
        parent_line: Option<usize>,
    ) -> Option<&'r Spanned<T>> {
        if v.is_none() {
            self.err(
                format!("{parent}.{key}"),
                parent_line,
                format!("`{key}` is required"),
            );
        }
        v.as_ref()
    }

    /// A required non-empty string.
    pub(super) fn required_str(
        &mut self,
        parent: &str,
        key: &str,
        v: &Opt<String>,
        parent_line: Option<usize>,
    ) -> Option<String> {
        let s = self.required(parent, key, v, parent_line)?;
        self.non_empty(&format!("{parent}.{key}"), s)
    }

    pub(super) fn non_empty(&mut self, path: &str, s: &Spanned<String>) -> Option<String> {
        let v = s.value.trim();
        if v.is_empty() {
            self.at(path, s, "must not be empty");
            None
        } else {
            Some(v.to_owned())
        }
    }

    /// A duration in milliseconds over `default`; 0 is refused.
    pub(super) fn positive_ms(&mut self, path: &str, v: &Opt<u64>, default: Duration) -> Duration {
        match v {
            None => default,
            Some(s) if s.value == 0 => {
                self.at(path, s, "must be greater than 0");
                default
            }
            Some(s) => Duration::from_millis(s.value),
        }
    }

    /// A duration in milliseconds over `default`; 0 is allowed.
    pub(super) fn any_ms(v: &Opt<u64>, default: Duration) -> Duration {
        v.as_ref()
            .map_or(default, |s| Duration::from_millis(s.value))
    }

    /// A count over `default` that must be at least 1.
    pub(super) fn at_least_one(&mut self, path: &str, v: &Opt<u32>, default: u32) -> u32 {
        match v {
            None => default,
            Some(s) if s.value == 0 => {
                self.at(path, s, "must be at least 1");
                default
            }
            Some(s) => s.value,
        }
    }

    /// A fraction in (0, 1], checked.
    pub(super) fn fraction(&mut self, path: &str, s: &Spanned<f64>) -> Option<f64> {
        if s.value.is_finite() && s.value > 0.0 && s.value <= 1.0 {
            Some(s.value)
        } else {
            self.at(path, s, format!("{} is outside (0, 1]", s.value));
            None
        }
    }

    /// Reads the secret named by an `*_env` key. Its value never reaches a message.
    pub(super) fn secret(&mut self, path: &str, var: &Spanned<String>) -> Option<Secret> {
        let name = var.value.trim();
        if name.is_empty() {
            self.at(path, var, "must name an environment variable");
            return None;
        }
        match (self.env)(name) {
            None => {
                self.at(path, var, format!("environment variable {name} is not set"));
                None
            }
            Some(v) if v.trim().is_empty() => {
                self.at(path, var, format!("environment variable {name} is empty"));
                None
            }
            Some(v) => Some(Secret::new(v)),
        }
    }

    /// Checks that a provider name refers to a defined provider.
    pub(super) fn provider_ref(&mut self, path: &str, s: &Spanned<String>) -> Option<String> {
        let name = s.value.trim();
        if self.defined.contains(name) {
            Some(name.to_owned())
        } else {
            let known: Vec<&str> = self.defined.iter().map(String::as_str).collect();
            self.at(
                path,
                s,
                format!(
                    "provider `{name}` is not defined (providers: {})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            );
            None
        }
    }

    pub(super) fn provider_refs(
        &mut self,
        path: &str,
        list: &Spanned<Vec<Spanned<String>>>,
    ) -> Vec<String> {
        list.value
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.provider_ref(&format!("{path}[{i}]"), s))
            .collect()
    }
}
