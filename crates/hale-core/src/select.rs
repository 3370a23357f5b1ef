//! Target selection (DESIGN §3 "Routes", §1 step 8): which `provider/model`
//! targets a request may go to, in order ([`plan`]), and which of them to try
//! next given their cooldown/breaker gates ([`pick`]).
//!
//! Why it works so:
//! - **Routes first, then the agent's chain.** A request's `model` that names
//!   a route gets exactly that route's targets. Otherwise the agent's primary
//!   provider and its fallbacks serve it; a fallback serves the *same* model
//!   when it offers it, else its own default model, so failing over never
//!   sends a model name to a provider that does not know it.
//! - **`provider/model` pins the first target.** When the model is exactly
//!   `provider/model` of a known provider, that target goes first and the
//!   chain's others follow. A name whose first segment is not a provider
//!   (`meta-llama/Llama-3`) is an ordinary model name.
//! - **Plans have no duplicates**: the same `provider/model` twice would only
//!   retry a failing target under another name.
//! - **Picking never fails without a call while a target is untried.** The
//!   first usable target wins; a probe that comes before it goes first (its
//!   caller gets a short timeout and moves on at once); when every target is
//!   cooling down, the one whose cooldown ends soonest is tried anyway, and
//!   the caller is told so ([`Pick::LastResort`]).

use crate::config::{AgentConfig, Config, DEFAULT_AGENT, ProviderConfig, Target};
use crate::cooldown::Gate;

/// Why no plan could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    #[error("no providers are configured")]
    NoProviders,
    #[error("provider `{0}` is named in a route or agent chain but not defined under `providers`")]
    UnknownProvider(String),
}

/// The ordered targets for a request of `agent` asking for `requested_model`.
///
/// - `requested_model` is a route name → that route's targets;
/// - else the agent's chain: its provider (`agents[agent].provider`, else
///   `agents["default"].provider`, else the first provider), then its
///   fallbacks (`agents[agent].fallback`, else — for an agent without an
///   entry — `agents["default"].fallback`, else
///   `self_healing.fallback_providers` when `fallback_enabled`), each serving
///   `requested_model` when it offers it, else its `default_model`;
/// - `requested_model` exactly `provider/model` of a known provider → that
///   target first, then the chain's others (serving `model` by the same rule).
///
/// No target appears twice.
pub fn plan(
    config: &Config,
    agent: &str,
    requested_model: &str,
) -> Result<Vec<Target>, SelectError> {
    if config.providers.is_empty() {
        return Err(SelectError::NoProviders);
    }
    if let Some(route) = config.routes.get(requested_model) {
        let mut out = Vec::with_capacity(route.len());
        for t in route {
            if config.provider(&t.provider).is_none() {
                return Err(SelectError::UnknownProvider(t.provider.clone()));
            }
            push_unique(&mut out, t.clone());
        }
        if out.is_empty() {
            return Err(SelectError::NoProviders);
        }
        return Ok(out);
    }

    let pinned = requested_model
        .split_once('/')
        .filter(|(p, m)| !m.is_empty() && config.provider(p).is_some());
    let model = pinned.map_or(requested_model, |(_, m)| m);

    let mut out = Vec::new();
    if let Some((p, m)) = pinned {
        out.push(Target {
            provider: p.to_owned(),
            model: m.to_owned(),
        });
    }
    for name in chain(config, agent) {
        let p = config
            .provider(name)
            .ok_or_else(|| SelectError::UnknownProvider(name.to_owned()))?;
        push_unique(&mut out, serving(p, model));
    }
    Ok(out)
}

/// The agent's provider names: primary, then fallbacks.
fn chain<'c>(config: &'c Config, agent: &str) -> Vec<&'c str> {
    let default_agent = config.agents.get(DEFAULT_AGENT);
    let own: Option<&AgentConfig> = config.agents.get(agent);
    let effective = own.or(default_agent);
    let primary = own
        .and_then(|a| a.provider.as_deref())
        .or_else(|| default_agent.and_then(|a| a.provider.as_deref()))
        .or_else(|| config.providers.first().map(|p| p.name.as_str()));
    let fallback: Vec<&str> = match effective.and_then(|a| a.fallback.as_ref()) {
        Some(list) => list.iter().map(String::as_str).collect(),
        None if config.self_healing.fallback_enabled => config
            .self_healing
            .fallback_providers
            .iter()
            .map(String::as_str)
            .collect(),
        None => Vec::new(),
    };
    primary.into_iter().chain(fallback).collect()
}

/// The target `p` serves for `model`: that model when offered, else its default.
fn serving(p: &ProviderConfig, model: &str) -> Target {
    let model = if !model.is_empty() && p.offers(model) {
        model
    } else {
        p.default_model.as_str()
    };
    Target {
        provider: p.name.clone(),
        model: model.to_owned(),
    }
}

fn push_unique(out: &mut Vec<Target>, t: Target) {
    if !out.contains(&t) {
        out.push(t);
    }
}

/// Which target to try next, as an index into the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// A target with no cooldown.
    Normal(usize),
    /// A cooling-down target whose probe is due: short timeout, move on at
    /// once on failure.
    Probe(usize),
    /// Every untried target is cooling down: this one's cooldown ends soonest.
    /// Tried anyway rather than failing without a call.
    LastResort(usize),
    /// Every target has been tried.
    None,
}

/// Given the gates of the plan's targets (in plan order) and which were
/// already tried this turn (`tried[i]`; missing entries count as untried),
/// the target to try next.
pub fn pick(gates: &[Gate], tried: &[bool]) -> Pick {
    let untried = |i: usize| !tried.get(i).copied().unwrap_or(false);
    let mut soonest: Option<(usize, std::time::Instant)> = None;
    for (i, gate) in gates.iter().enumerate() {
        if !untried(i) {
            continue;
        }
        match *gate {
            Gate::Open => return Pick::Normal(i),
            Gate::Probe => return Pick::Probe(i),
            Gate::Skip { until, .. } => {
                if soonest.is_none_or(|(_, best)| until < best) {
                    soonest = Some((i, until));
                }
            }
        }
    }
    match soonest {
        Some((i, _)) => Pick::LastResort(i),
        None => Pick::None,
    }
}

/// Whether a [`Pick::LastResort`] may be called: when the turn has made no
/// attempt yet (one call beats failing without any), or when it is resuming a
/// stream that broke mid-answer (the target that broke may still finish it).
/// Otherwise every target cooling down or refused by its breaker ends the turn.
pub fn last_resort_allowed(attempts_made: usize, resuming: bool) -> bool {
    attempts_made == 0 || resuming
}

/// DESIGN §2 `context_overflow`: after a target refused the conversation as
/// too long (its window `overflowed`), which targets to leave — those *known*
/// to have a smaller window (`None` = unknown, kept: it may well fit).
pub fn known_smaller_windows(windows: &[Option<u32>], overflowed: u32) -> Vec<bool> {
    windows
        .iter()
        .map(|w| w.is_some_and(|w| w < overflowed))
        .collect()
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_last_resort_only_before_any_attempt_or_when_resuming_a_stream() {
        assert!(last_resort_allowed(0, false));
        assert!(!last_resort_allowed(2, false));
        assert!(last_resort_allowed(2, true));
    }

    #[test]
    fn after_an_overflow_only_targets_known_to_be_smaller_are_left() {
        let w = [Some(8_192), Some(128_000), None, Some(200_000)];
        assert_eq!(
            known_smaller_windows(&w, 128_000),
            [true, false, false, false]
        );
    }
    use super::*;
    use crate::class::ErrorClass;
    use crate::config::ProviderKind;
    use std::time::{Duration, Instant};

    fn provider(name: &str, default_model: &str, models: &[&str]) -> ProviderConfig {
        let mut p = ProviderConfig::new(name, ProviderKind::OpenAi, "http://x", default_model);
        p.models = models.iter().map(|m| m.to_string()).collect();
        p
    }

    fn t(p: &str, m: &str) -> Target {
        Target {
            provider: p.to_owned(),
            model: m.to_owned(),
        }
    }

    /// openai (gpt-4o, gpt-4o-mini), anthropic (claude-sonnet-4), local (any model).
    fn config() -> Config {
        let mut c = Config::with_providers(vec![
            provider("openai", "gpt-4o", &["gpt-4o", "gpt-4o-mini"]),
            provider("anthropic", "claude-sonnet-4", &["claude-sonnet-4"]),
            provider("local", "llama3", &[]),
        ]);
        c.routes.insert(
            "smart".into(),
            vec![t("anthropic", "claude-sonnet-4"), t("openai", "gpt-4o")],
        );
        c.agents.insert(
            "research".into(),
            AgentConfig {
                provider: Some("openai".into()),
                fallback: Some(vec!["anthropic".into(), "local".into()]),
                ..AgentConfig::default()
            },
        );
        c
    }

    #[test]
    fn a_route_name_gives_its_targets() {
        let c = config();
        assert_eq!(
            plan(&c, "research", "smart").unwrap(),
            vec![t("anthropic", "claude-sonnet-4"), t("openai", "gpt-4o")]
        );
    }

    #[test]
    fn a_route_to_an_undefined_provider_is_an_error() {
        let mut c = config();
        c.routes.insert("bad".into(), vec![t("ghost", "m")]);
        assert_eq!(
            plan(&c, "research", "bad"),
            Err(SelectError::UnknownProvider("ghost".into()))
        );
    }

    #[test]
    fn chain_is_primary_then_fallbacks() {
        let c = config();
        assert_eq!(
            plan(&c, "research", "gpt-4o-mini").unwrap(),
            vec![
                t("openai", "gpt-4o-mini"),
                // anthropic does not offer it: its default model.
                t("anthropic", "claude-sonnet-4"),
                // local offers any model: the same one.
                t("local", "gpt-4o-mini"),
            ]
        );
    }

    #[test]
    fn fallback_serves_same_model_when_offered_else_default() {
        let c = config();
        let p = plan(&c, "research", "claude-sonnet-4").unwrap();
        assert_eq!(
            p,
            vec![
                t("openai", "gpt-4o"),
                t("anthropic", "claude-sonnet-4"),
                t("local", "claude-sonnet-4"),
            ]
        );
    }

    #[test]
    fn unknown_agent_uses_default_agent_then_first_provider() {
        let mut c = config();
        // No default agent: the first provider, plus self_healing fallbacks.
        c.self_healing.fallback_providers = vec!["anthropic".into()];
        assert_eq!(
            plan(&c, "nobody", "gpt-4o").unwrap(),
            vec![t("openai", "gpt-4o"), t("anthropic", "claude-sonnet-4")]
        );
        c.self_healing.fallback_enabled = false;
        assert_eq!(
            plan(&c, "nobody", "gpt-4o").unwrap(),
            vec![t("openai", "gpt-4o")]
        );
        // With a default agent naming a provider.
        c.agents.insert(
            DEFAULT_AGENT.into(),
            AgentConfig {
                provider: Some("local".into()),
                ..AgentConfig::default()
            },
        );
        assert_eq!(plan(&c, "nobody", "").unwrap(), vec![t("local", "llama3")]);
    }

    #[test]
    fn agent_without_provider_inherits_default_agents_provider() {
        let mut c = config();
        c.agents.insert(
            DEFAULT_AGENT.into(),
            AgentConfig {
                provider: Some("anthropic".into()),
                ..AgentConfig::default()
            },
        );
        c.agents.insert(
            "writer".into(),
            AgentConfig {
                fallback: Some(vec!["openai".into()]),
                ..AgentConfig::default()
            },
        );
        assert_eq!(
            plan(&c, "writer", "gpt-4o").unwrap(),
            vec![t("anthropic", "claude-sonnet-4"), t("openai", "gpt-4o")]
        );
    }

    #[test]
    fn provider_slash_model_goes_first_then_the_chain() {
        let c = config();
        assert_eq!(
            plan(&c, "research", "anthropic/claude-sonnet-4").unwrap(),
            vec![
                t("anthropic", "claude-sonnet-4"),
                t("openai", "gpt-4o"),
                t("local", "claude-sonnet-4"),
            ]
        );
        // A first segment that is not a provider is part of a model name.
        assert_eq!(
            plan(&c, "research", "meta-llama/Llama-3").unwrap(),
            vec![
                t("openai", "gpt-4o"),
                t("anthropic", "claude-sonnet-4"),
                t("local", "meta-llama/Llama-3"),
            ]
        );
    }

    #[test]
    fn plans_have_no_duplicates() {
        let mut c = config();
        c.agents.insert(
            "loop".into(),
            AgentConfig {
                provider: Some("openai".into()),
                fallback: Some(vec![
                    "openai".into(),
                    "anthropic".into(),
                    "anthropic".into(),
                ]),
                ..AgentConfig::default()
            },
        );
        assert_eq!(
            plan(&c, "loop", "gpt-4o").unwrap(),
            vec![t("openai", "gpt-4o"), t("anthropic", "claude-sonnet-4")]
        );
        assert_eq!(
            plan(&c, "loop", "openai/gpt-4o").unwrap(),
            vec![t("openai", "gpt-4o"), t("anthropic", "claude-sonnet-4")]
        );
    }

    #[test]
    fn unknown_provider_in_a_chain_is_an_error() {
        let mut c = config();
        c.agents.insert(
            "broken".into(),
            AgentConfig {
                provider: Some("openai".into()),
                fallback: Some(vec!["ghost".into()]),
                ..AgentConfig::default()
            },
        );
        let err = plan(&c, "broken", "gpt-4o").unwrap_err();
        assert_eq!(err, SelectError::UnknownProvider("ghost".into()));
        assert!(err.to_string().contains("`ghost`"));
    }

    #[test]
    fn no_providers_is_an_error() {
        let c = Config::with_providers(Vec::new());
        assert_eq!(plan(&c, "any", "gpt-4o"), Err(SelectError::NoProviders));
    }

    fn skip(secs: u64, t0: Instant) -> Gate {
        Gate::Skip {
            until: t0 + Duration::from_secs(secs),
            class: ErrorClass::Overloaded,
        }
    }

    #[test]
    fn pick_takes_the_first_open_target() {
        let t0 = Instant::now();
        assert_eq!(pick(&[Gate::Open, Gate::Open], &[]), Pick::Normal(0));
        assert_eq!(
            pick(&[skip(5, t0), Gate::Open], &[false, false]),
            Pick::Normal(1)
        );
        assert_eq!(
            pick(&[Gate::Open, Gate::Open], &[true, false]),
            Pick::Normal(1)
        );
    }

    #[test]
    fn pick_probes_a_target_before_the_first_open_one() {
        let t0 = Instant::now();
        let gates = [skip(5, t0), Gate::Probe, Gate::Open];
        assert_eq!(pick(&gates, &[]), Pick::Probe(1));
        // The probe failed: the same request moves on at once.
        assert_eq!(pick(&gates, &[false, true]), Pick::Normal(2));
        // A probe after an open target is not taken.
        assert_eq!(pick(&[Gate::Open, Gate::Probe], &[]), Pick::Normal(0));
    }

    #[test]
    fn pick_falls_back_to_the_soonest_cooldown() {
        let t0 = Instant::now();
        let gates = [skip(60, t0), skip(5, t0), skip(30, t0)];
        assert_eq!(pick(&gates, &[]), Pick::LastResort(1));
        assert_eq!(pick(&gates, &[false, true, false]), Pick::LastResort(2));
    }

    #[test]
    fn pick_returns_none_when_all_tried() {
        let t0 = Instant::now();
        let gates = [Gate::Open, Gate::Probe, skip(5, t0)];
        assert_eq!(pick(&gates, &[true, true, true]), Pick::None);
        assert_eq!(pick(&[], &[]), Pick::None);
    }
}
