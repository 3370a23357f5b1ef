//! Target selection (docs/operations.md, "What hale does to a call": Routes and
//! failover): which `provider/model`
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
//! - **Picking never fails without a call while a deployment is untried.**
//!   The first usable deployment wins; a probe that comes before it goes
//!   first (its caller gets a short timeout and moves on at once); when every
//!   untried deployment is ejected or refused by its breaker, the turn fails
//!   open and tries them anyway, best recent success ratio first
//!   ([`Pick::FailOpen`]). Only an operator's trip keeps a deployment out.

use crate::config::{AgentConfig, Config, DEFAULT_AGENT, ProviderConfig, Target};
use crate::deployment::Gate;

/// Why no plan could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    #[error("no providers are configured")]
    NoProviders,
    #[error("provider `{0}` is named in a route or agent chain but not defined under `providers`")]
    UnknownProvider(String),
}

/// [`plan`] by rank: a route's load-balanced group
/// ([`Config::route_ranks`]) is one rank, to be ordered by
/// [`crate::balance::order`]; every other target is a rank of its own.
/// Flattened in order, it is [`plan`].
pub fn plan_ranks(
    config: &Config,
    agent: &str,
    requested_model: &str,
) -> Result<Vec<Vec<Target>>, SelectError> {
    let flat = plan(config, agent, requested_model)?;
    let sizes = match (
        config.routes.get(requested_model),
        config.route_ranks.get(requested_model),
    ) {
        (Some(_), Some(sizes)) => sizes.as_slice(),
        (Some(_) | None, None) | (None, Some(_)) => {
            return Ok(flat.into_iter().map(|t| vec![t]).collect());
        }
    };
    // The route's targets, grouped as written; `plan` kept the first of a
    // target listed twice, so a rank keeps only targets not seen before.
    let route = &config.routes[requested_model];
    let mut seen: Vec<&Target> = Vec::with_capacity(route.len());
    let mut ranks = Vec::with_capacity(sizes.len());
    let mut at = 0;
    for &size in sizes {
        let mut rank = Vec::with_capacity(size);
        for t in route.iter().skip(at).take(size) {
            if !seen.contains(&t) {
                seen.push(t);
                rank.push(t.clone());
            }
        }
        at += size;
        if !rank.is_empty() {
            ranks.push(rank);
        }
    }
    debug_assert_eq!(ranks.concat(), flat);
    Ok(ranks)
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

/// What a deployment's breaker (agent × deployment) says about a call now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerSays {
    /// Closed (or disabled): call.
    Allowed,
    /// Half-open, and this call is its trial.
    Trial,
    /// Open, or half-open with its trials taken.
    Refused,
}

/// One deployment of the plan as the turn sees it now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// The combined gate of its scopes ([`crate::deployment::combine`]).
    pub gate: Gate,
    pub breaker: BreakerSays,
    /// Already tried in this turn (it will not be called again).
    pub tried: bool,
    /// Recent success ratio; `None` without calls (no evidence against it).
    pub success_ratio: Option<f64>,
}

/// Which deployment to try next, as an index into the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// In rotation and its breaker allows the call.
    Normal(usize),
    /// In rotation; the call is its half-open breaker's trial.
    Trial(usize),
    /// Ejected, and this request is its probe: short timeout, move on at once
    /// when it fails and another deployment is left.
    Probe(usize),
    /// Every untried deployment is ejected or refused by its breaker: this
    /// one (best recent success ratio, then plan order) is tried anyway
    /// (fail open).
    FailOpen(usize),
    /// Every deployment was tried (or is forced out by an operator).
    None,
}

/// Whether a candidate can be called without failing open.
pub fn usable(c: &Candidate) -> bool {
    !c.tried
        && match (c.gate, c.breaker) {
            (Gate::Open | Gate::Probe, BreakerSays::Allowed | BreakerSays::Trial) => true,
            (Gate::Open | Gate::Probe, BreakerSays::Refused)
            | (Gate::Ejected { .. } | Gate::Forced, _) => false,
        }
}

/// The deployment a silent attempt is hedged on (`crate::hedge`): the first
/// untried one in plan order in plain rotation — gate open, breaker closed.
/// Never a due probe, a half-open trial or fail-open: those are the turn's
/// own one-at-a-time attempts, and a hedge that took one would spend a
/// probe or a trial on a call the turn may then not make. The candidates are
/// therefore built without taking a probe or a trial (the gateway's
/// `Deployments::peek_candidate`): a breaker that is not closed says
/// [`BreakerSays::Refused`] here.
pub fn hedge_pick(cands: &[Candidate]) -> Option<usize> {
    cands.iter().position(|c| {
        !c.tried
            && match (c.gate, c.breaker) {
                (Gate::Open, BreakerSays::Allowed) => true,
                (Gate::Open, BreakerSays::Trial | BreakerSays::Refused)
                | (Gate::Probe | Gate::Ejected { .. } | Gate::Forced, _) => false,
            }
    })
}

/// What is left of a plan after a failed attempt, for [`moves_on_at_once`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Left {
    /// Another untried deployment is in rotation (and its breaker not open).
    pub healthy: bool,
    /// Another untried deployment has a recent success ratio at least as
    /// good as the failed one's.
    pub as_good: bool,
}

/// Whether a failed probe, half-open trial or fail-open call (`probing`)
/// moves on at once instead of being retried under its class's policy: only
/// to a deployment in rotation or to one with as good a record. The best bet
/// left is the last one standing and is retried; an ordinary
/// attempt is never "probing" and follows its policy.
pub fn moves_on_at_once(probing: bool, left: Left) -> bool {
    probing && (left.healthy || left.as_good)
}

/// Whether a candidate may still be called in this turn at all (untried and
/// not forced out by an operator).
pub fn callable(c: &Candidate) -> bool {
    !c.tried && c.gate != Gate::Forced
}

/// The deployment to try next.
///
/// 1. The first untried deployment in plan order that is in rotation (or
///    whose probe is due) and whose breaker allows the call.
/// 2. Else fail open: of the untried deployments not forced out, the one
///    with the best recent success ratio (no calls counts as 1.0), ties in
///    plan order.
/// 3. Else none: every deployment was tried in this turn.
///
/// It never answers [`Pick::None`] while a callable deployment is left.
pub fn pick(cands: &[Candidate]) -> Pick {
    for (i, c) in cands.iter().enumerate() {
        if !usable(c) {
            continue;
        }
        return match (c.gate, c.breaker) {
            (Gate::Probe, _) => Pick::Probe(i),
            (Gate::Open, BreakerSays::Trial) => Pick::Trial(i),
            (Gate::Open, BreakerSays::Allowed | BreakerSays::Refused)
            | (Gate::Ejected { .. } | Gate::Forced, _) => Pick::Normal(i),
        };
    }
    let mut best: Option<(usize, f64)> = None;
    for (i, c) in cands.iter().enumerate() {
        if !callable(c) {
            continue;
        }
        let ratio = c.success_ratio.unwrap_or(1.0);
        if best.is_none_or(|(_, b)| ratio > b) {
            best = Some((i, ratio));
        }
    }
    match best {
        Some((i, _)) => Pick::FailOpen(i),
        None => Pick::None,
    }
}

/// Why a deployment ahead of the one picked was passed over: the evidence
/// of a skipped primary (seed 003: a result served by another than the first
/// choice because that one was unavailable says which and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Ejected (cooldown or outlier rule) and not this request's probe.
    Ejected,
    /// Its circuit breaker (per agent × deployment) refused the call.
    BreakerOpen,
    /// Tripped by an operator.
    Forced,
}

impl Skip {
    /// The word the timeline shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::Ejected => "ejected",
            Skip::BreakerOpen => "breaker_open",
            Skip::Forced => "tripped",
        }
    }
}

/// Why `c` would not be called now, or `None` when it would be (or was
/// already tried in this turn: a tried deployment is in the timeline).
pub fn skip_reason(c: &Candidate) -> Option<Skip> {
    if c.tried {
        return None;
    }
    match (c.gate, c.breaker) {
        (Gate::Open | Gate::Probe, BreakerSays::Allowed | BreakerSays::Trial) => None,
        (Gate::Open | Gate::Probe, BreakerSays::Refused) => Some(Skip::BreakerOpen),
        (Gate::Ejected { .. }, _) => Some(Skip::Ejected),
        (Gate::Forced, _) => Some(Skip::Forced),
    }
}

/// Deployments passed over, as plan indices with why ([`passed_over`]).
pub type PassedOver = Vec<(usize, Skip)>;

/// The untried deployments ahead of `picked` in plan order that were passed
/// over, each with why. With [`Pick::FailOpen`] the ones ahead of the best
/// bet are all unavailable; they are passed over too.
pub fn passed_over(cands: &[Candidate], picked: usize) -> PassedOver {
    cands
        .iter()
        .enumerate()
        .take(picked)
        .filter_map(|(i, c)| skip_reason(c).map(|s| (i, s)))
        .collect()
}

/// `context_overflow` moves on to a target not known to be smaller: after a
/// target refused the conversation as too long (its window `overflowed`), which
/// targets to leave — those *known* to have a smaller window (`None` = unknown,
/// kept: it may well fit).
pub fn known_smaller_windows(windows: &[Option<u32>], overflowed: u32) -> Vec<bool> {
    windows
        .iter()
        .map(|w| w.is_some_and(|w| w < overflowed))
        .collect()
}

#[cfg(test)]
mod tests {

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
    fn a_routes_ranks_group_its_targets() {
        let mut c = config();
        let (a, b, d) = (
            t("openai", "gpt-4o"),
            t("local", "m"),
            t("anthropic", "claude-sonnet-4"),
        );
        c.routes.insert(
            "lb".into(),
            vec![a.clone(), b.clone(), d.clone(), a.clone()],
        );
        c.route_ranks.insert("lb".into(), vec![2, 1, 1]);
        let cases: &[(&str, Vec<Vec<Target>>)] = &[
            // [[a, b], d, a]: the repeated a is dropped, as `plan` drops it.
            ("lb", vec![vec![a.clone(), b.clone()], vec![d.clone()]]),
            // A route without ranks, and a chain: a rank per target.
            ("smart", vec![vec![d.clone()], vec![t("openai", "gpt-4o")]]),
            (
                "openai/gpt-4o",
                plan(&c, "research", "openai/gpt-4o")
                    .unwrap()
                    .into_iter()
                    .map(|t| vec![t])
                    .collect(),
            ),
        ];
        for (model, want) in cases {
            let ranks = plan_ranks(&c, "research", model).unwrap();
            assert_eq!(&ranks, want, "{model}");
            assert_eq!(ranks.concat(), plan(&c, "research", model).unwrap());
        }
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

    fn ejected(secs: u64, t0: Instant) -> Gate {
        Gate::Ejected {
            until: t0 + Duration::from_secs(secs),
            class: ErrorClass::Overloaded,
        }
    }

    fn c(gate: Gate, breaker: BreakerSays, tried: bool, ratio: Option<f64>) -> Candidate {
        Candidate {
            gate,
            breaker,
            tried,
            success_ratio: ratio,
        }
    }

    fn open() -> Candidate {
        c(Gate::Open, BreakerSays::Allowed, false, None)
    }

    /// Seed 003's evidence of a skipped primary: each unavailable deployment
    /// ahead of the pick is named with why; tried ones, usable ones and those
    /// after the pick are not.
    #[test]
    fn passed_over_names_each_unavailable_deployment_ahead_of_the_pick() {
        let t0 = Instant::now();
        let ejected = c(ejected(30, t0), BreakerSays::Allowed, false, None);
        let refused = c(Gate::Open, BreakerSays::Refused, false, None);
        let forced = c(Gate::Forced, BreakerSays::Allowed, false, None);
        let tried = c(Gate::Open, BreakerSays::Allowed, true, None);
        let probe = c(Gate::Probe, BreakerSays::Allowed, false, None);
        let table: Vec<(Vec<Candidate>, usize, PassedOver)> = vec![
            (vec![open(), ejected], 0, vec![]),
            (vec![ejected, open()], 1, vec![(0, Skip::Ejected)]),
            (vec![refused, open()], 1, vec![(0, Skip::BreakerOpen)]),
            (vec![forced, open()], 1, vec![(0, Skip::Forced)]),
            (vec![tried, open()], 1, vec![]),
            (vec![probe, open()], 0, vec![]),
            (
                vec![ejected, tried, refused, open(), ejected],
                3,
                vec![(0, Skip::Ejected), (2, Skip::BreakerOpen)],
            ),
            // Failing open to the last: the ones ahead are passed over.
            (
                vec![ejected, forced, ejected],
                2,
                vec![(0, Skip::Ejected), (1, Skip::Forced)],
            ),
        ];
        for (cands, picked, want) in table {
            assert_eq!(passed_over(&cands, picked), want, "{cands:?}");
        }
        assert_eq!(Skip::Ejected.as_str(), "ejected");
        assert_eq!(Skip::BreakerOpen.as_str(), "breaker_open");
        assert_eq!(Skip::Forced.as_str(), "tripped");
    }

    #[test]
    fn pick_takes_the_first_deployment_in_rotation() {
        let t0 = Instant::now();
        assert_eq!(pick(&[open(), open()]), Pick::Normal(0));
        let first_ejected = c(ejected(5, t0), BreakerSays::Allowed, false, Some(0.0));
        assert_eq!(pick(&[first_ejected, open()]), Pick::Normal(1));
        let tried = Candidate {
            tried: true,
            ..open()
        };
        assert_eq!(pick(&[tried, open()]), Pick::Normal(1));
        let refused = c(Gate::Open, BreakerSays::Refused, false, None);
        assert_eq!(pick(&[refused, open()]), Pick::Normal(1));
        let trial = c(Gate::Open, BreakerSays::Trial, false, None);
        assert_eq!(pick(&[trial, open()]), Pick::Trial(0));
    }

    #[test]
    fn pick_probes_a_deployment_before_the_first_open_one() {
        let t0 = Instant::now();
        let probe = c(Gate::Probe, BreakerSays::Allowed, false, Some(0.0));
        let out = c(ejected(5, t0), BreakerSays::Allowed, false, Some(0.0));
        assert_eq!(pick(&[out, probe, open()]), Pick::Probe(1));
        // The probe failed: the same request moves on at once.
        let probed = Candidate {
            tried: true,
            ..probe
        };
        assert_eq!(pick(&[out, probed, open()]), Pick::Normal(2));
        // A probe after an open deployment is not taken.
        assert_eq!(pick(&[open(), probe]), Pick::Normal(0));
        // A probe refused by the agent's breaker is not taken either.
        let refused_probe = c(Gate::Probe, BreakerSays::Refused, false, Some(0.0));
        assert_eq!(pick(&[refused_probe, open()]), Pick::Normal(1));
    }

    #[test]
    fn all_out_of_rotation_fails_open_to_the_best_success_ratio() {
        let t0 = Instant::now();
        let a = c(ejected(60, t0), BreakerSays::Allowed, false, Some(0.1));
        let b = c(ejected(5, t0), BreakerSays::Refused, false, Some(0.9));
        let d = c(Gate::Open, BreakerSays::Refused, false, Some(0.5));
        assert_eq!(pick(&[a, b, d]), Pick::FailOpen(1));
        // Ties go to plan order; no calls counts as no evidence against.
        let e = c(ejected(5, t0), BreakerSays::Allowed, false, None);
        let f = c(ejected(5, t0), BreakerSays::Allowed, false, Some(1.0));
        assert_eq!(pick(&[f, e]), Pick::FailOpen(0));
        // The best was tried: the next best.
        let b_tried = Candidate { tried: true, ..b };
        assert_eq!(pick(&[a, b_tried, d]), Pick::FailOpen(2));
        // An operator's trip is never failed open to.
        let forced = c(Gate::Forced, BreakerSays::Allowed, false, Some(1.0));
        assert_eq!(pick(&[forced, a]), Pick::FailOpen(1));
        assert_eq!(pick(&[forced]), Pick::None);
    }

    #[test]
    fn a_failed_probe_moves_on_only_to_a_deployment_in_rotation_or_as_good() {
        let rows = [
            // probing, healthy left, as good left → moves on at once
            (false, false, false, false),
            (false, true, true, false),
            (true, false, false, false), // the best bet left: retried
            (true, true, false, true),
            (true, false, true, true),
            (true, true, true, true),
        ];
        for (probing, healthy, as_good, want) in rows {
            assert_eq!(
                moves_on_at_once(probing, Left { healthy, as_good }),
                want,
                "probing={probing} healthy={healthy} as_good={as_good}"
            );
        }
    }

    #[test]
    fn a_hedge_goes_only_to_a_deployment_in_plain_rotation() {
        let t0 = Instant::now();
        let tried = c(Gate::Open, BreakerSays::Allowed, true, None);
        let probe = c(Gate::Probe, BreakerSays::Allowed, false, None);
        let trial = c(Gate::Open, BreakerSays::Trial, false, None);
        let refused = c(Gate::Open, BreakerSays::Refused, false, None);
        let ejected = c(ejected(30, t0), BreakerSays::Allowed, false, None);
        let forced = c(Gate::Forced, BreakerSays::Allowed, false, None);
        let table: Vec<(&str, Vec<Candidate>, Option<usize>)> = vec![
            ("the next in rotation", vec![tried, open()], Some(1)),
            (
                "past a due probe, a trial and those out of rotation",
                vec![tried, probe, trial, refused, ejected, forced, open()],
                Some(6),
            ),
            (
                "none in plain rotation: no hedge (never fail open)",
                vec![tried, probe, trial, refused, ejected, forced],
                None,
            ),
            ("nothing left", vec![], None),
        ];
        for (name, cands, want) in table {
            assert_eq!(hedge_pick(&cands), want, "{name}");
        }
    }

    #[test]
    fn pick_returns_none_when_all_tried() {
        let t0 = Instant::now();
        let cands = [
            open(),
            c(Gate::Probe, BreakerSays::Allowed, false, None),
            c(ejected(5, t0), BreakerSays::Refused, false, None),
        ];
        let tried: Vec<Candidate> = cands
            .iter()
            .map(|c| Candidate { tried: true, ..*c })
            .collect();
        assert_eq!(pick(&tried), Pick::None);
        assert_eq!(pick(&[]), Pick::None);
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        fn gate() -> impl Strategy<Value = Gate> {
            let t0 = Instant::now();
            prop_oneof![
                Just(Gate::Open),
                Just(Gate::Probe),
                (0u64..100).prop_map(move |s| Gate::Ejected {
                    until: t0 + Duration::from_secs(s),
                    class: ErrorClass::Overloaded,
                }),
                Just(Gate::Forced),
            ]
        }

        fn breaker() -> impl Strategy<Value = BreakerSays> {
            prop_oneof![
                Just(BreakerSays::Allowed),
                Just(BreakerSays::Trial),
                Just(BreakerSays::Refused),
            ]
        }

        fn candidate() -> impl Strategy<Value = Candidate> {
            (
                gate(),
                breaker(),
                any::<bool>(),
                proptest::option::of(0.0f64..=1.0),
            )
                .prop_map(|(gate, breaker, tried, success_ratio)| Candidate {
                    gate,
                    breaker,
                    tried,
                    success_ratio,
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4096))]
            /// Fail open: over every combination of gates,
            /// breakers, tried flags and ratios for up to 4 deployments, the
            /// pick is a callable deployment whenever one exists, never a tried
            /// or forced one, and a usable one beats failing open.
            #[test]
            fn never_none_while_an_untried_deployment_is_callable(cands in proptest::collection::vec(candidate(), 0..=4)) {
                let p = pick(&cands);
                let any_callable = cands.iter().any(callable);
                let any_usable = cands.iter().any(usable);
                match p {
                    Pick::None => prop_assert!(!any_callable),
                    Pick::Normal(i) | Pick::Trial(i) | Pick::Probe(i) => {
                        prop_assert!(usable(&cands[i]));
                        // The first usable in plan order.
                        prop_assert!(!cands[..i].iter().any(usable));
                    }
                    Pick::FailOpen(i) => {
                        prop_assert!(!any_usable);
                        prop_assert!(callable(&cands[i]));
                        let r = cands[i].success_ratio.unwrap_or(1.0);
                        for (j, c) in cands.iter().enumerate() {
                            if callable(c) {
                                let rj = c.success_ratio.unwrap_or(1.0);
                                prop_assert!(rj < r || (rj == r && j >= i));
                            }
                        }
                    }
                }
            }
        }
    }
}
