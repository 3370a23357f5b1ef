//! Stage 2 of config loading: the raw tree becomes a [`Config`].
//!
//! Every check pushes a [`ConfigError`] and carries on, so one run reports
//! every problem; the list is sorted by line at the end. Each section starts
//! from its validated type's default and overrides only the keys given.
//! Provider names are gathered from the raw list first, so a provider that is
//! itself invalid does not also make every reference to it "not defined".
//! Values read from the environment are never put into a message; neither are
//! URLs (they may carry credentials).

use super::{
    ConfigError, ConfigErrors, Map, Nullable, Opt, RawAgent, RawAlerting, RawAuth, RawBreaker,
    RawBudget, RawConfig, RawCooldown, RawEjection, RawEvents, RawGuard, RawHealth, RawPolicy,
    RawPrice, RawProvider, RawRecovery, RawRetry, RawSelfHealing, RawToolNode,
};
use crate::class::ErrorClass;
use crate::config::{
    AgentConfig, AlertChannel, AlertRoute, AlertTarget, AlertingConfig, ApiKey, AuthConfig,
    BreakerConfig, BudgetConfig, CompactionConfig, Config, CooldownConfig, DEFAULT_LISTEN,
    EjectionConfig, EventsConfig, GuardConfig, HealthConfig, Jitter, KeyScope, NatsConfig, Price,
    ProviderConfig, ProviderKind, RecoveryConfig, RetryConfig, RetryPolicy, Secret,
    SelfHealingConfig, Target, WebhookConfig,
};
use crate::event::EventKind;
use serde_saphyr::Spanned;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Stage 2: validates a parsed file into a [`Config`], reporting every problem.
/// `env` looks up the variables named by `api_key_env`, `token_env` and
/// `secret_env`.
pub fn validate(
    raw: &RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let mut cx = Ctx {
        env,
        errors: Vec::new(),
        defined: raw
            .providers
            .iter()
            .flat_map(|l| l.value.iter())
            .filter_map(|p| p.value.name.as_ref().map(|n| n.value.trim().to_owned()))
            .collect(),
    };
    let mut cfg = Config::with_providers(Vec::new());

    if let Some(l) = &raw.listen {
        match l.value.trim().parse::<SocketAddr>() {
            Ok(addr) => cfg.listen = addr,
            Err(_) => cx.at(
                "listen",
                l,
                format!(
                    "`{}` is not a socket address (ip:port, e.g. {DEFAULT_LISTEN})",
                    l.value
                ),
            ),
        }
    }
    if let Some(d) = &raw.data_dir {
        if d.value.trim().is_empty() {
            cx.at("data_dir", d, "must not be empty");
        } else {
            cfg.data_dir = PathBuf::from(&d.value);
        }
    }
    if let Some(s) = &raw.storage {
        let v = s.value.trim();
        if v.starts_with("postgres://") || v.starts_with("postgresql://") {
            cfg.storage = Some(v.to_owned());
        } else {
            // The URL is not echoed: it may hold a password.
            cx.at(
                "storage",
                s,
                "must be a postgres:// or postgresql:// URL (omit it for SQLite in data_dir)",
            );
        }
    }

    cfg.providers = cx.providers(raw);
    if let Some(a) = &raw.auth {
        cfg.auth = cx.auth(&a.value);
    }
    if let Some(l) = &raw.limits
        && let Some(n) = &l.value.max_request_bytes
    {
        if n.value == 0 {
            cx.at("limits.max_request_bytes", n, "must be at least 1");
        } else {
            cfg.limits.max_request_bytes = n.value;
        }
    }
    if let Some(r) = &raw.routes {
        cfg.routes = cx.routes(&r.value, &cfg.providers);
    }
    if let Some(a) = &raw.agents {
        cfg.agents = cx.agents(&a.value);
    }
    if let Some(s) = &raw.self_healing {
        cx.self_healing(&s.value, &mut cfg.self_healing, &mut cfg.compaction);
    }
    if let Some(r) = &raw.retry {
        cfg.retry = cx.retry(&r.value);
    }
    if let Some(c) = &raw.cooldown_ms {
        cfg.cooldown = cooldown(&c.value);
    }
    if let Some(e) = &raw.ejection {
        cfg.ejection = cx.ejection(&e.value);
    }
    if let Some(g) = &raw.guard {
        cfg.guard = cx.guard(&g.value);
    }
    if let Some(h) = &raw.health {
        cfg.health = cx.health(&h.value);
    }
    if let Some(r) = &raw.recovery {
        cfg.recovery = cx.recovery(&r.value);
    }
    if let Some(c) = &raw.compaction {
        cx.compaction(&c.value, raw.self_healing.as_ref(), &mut cfg.compaction);
    }
    if let Some(e) = &raw.events {
        cfg.events = cx.events(&e.value);
    }
    if let Some(p) = &raw.prices {
        cfg.prices = cx.prices(&p.value);
    }
    if let Some(t) = &raw.telemetry {
        if let Some(e) = &t.value.otlp_endpoint {
            let url = e.value.trim();
            if url.starts_with("http://") || url.starts_with("https://") {
                cfg.telemetry.otlp_endpoint = Some(url.trim_end_matches('/').to_owned());
            } else {
                cx.at(
                    "telemetry.otlp_endpoint",
                    e,
                    "must be an http:// or https:// URL (the collector's OTLP/HTTP base)",
                );
            }
        }
        if let Some(n) = &t.value.service_name {
            if n.value.trim().is_empty() {
                cx.at("telemetry.service_name", n, "must not be empty");
            } else {
                cfg.telemetry.service_name = n.value.trim().to_owned();
            }
        }
    }
    if let Some(m) = &raw.memory {
        // Zero is allowed: memory then holds only the active agents and tasks.
        if let Some(n) = &m.value.idle_agents {
            cfg.memory.idle_agents = n.value;
        }
        if let Some(n) = &m.value.idle_tasks {
            cfg.memory.idle_tasks = n.value;
        }
    }
    if let Some(sp) = &raw.storage_pool {
        if let Some(n) = &sp.value.max_connections {
            if n.value == 0 {
                cx.at("storage_pool.max_connections", n, "must be at least 1");
            } else {
                cfg.storage_pool.max_connections = n.value;
            }
        }
        if let Some(ms) = &sp.value.acquire_timeout_ms {
            if ms.value == 0 {
                cx.at("storage_pool.acquire_timeout_ms", ms, "must be at least 1");
            } else {
                cfg.storage_pool.acquire_timeout = Duration::from_millis(ms.value);
            }
        }
    }
    if let Some(j) = &raw.journal {
        if let Some(h) = &j.value.retention_hours {
            if h.value == 0 {
                cx.at("journal.retention_hours", h, "must be at least 1");
            } else {
                cfg.journal.retention = Duration::from_secs(h.value.saturating_mul(3600));
            }
        }
        if let Some(b) = &j.value.bodies {
            cfg.journal.bodies = b.value;
        }
    }

    if let Some(t) = &raw.tool_nodes {
        cfg.tool_nodes = cx.tool_nodes(&t.value);
    }
    if let Some(a) = &raw.alerting {
        cfg.alerting = cx.alerting(&a.value);
    }

    if cx.errors.is_empty() {
        Ok(cfg)
    } else {
        let mut errors = cx.errors;
        errors.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
        Err(ConfigErrors(errors))
    }
}

/// The line a node was written on, if known.
fn line_of<T>(s: &Spanned<T>) -> Option<usize> {
    usize::try_from(s.referenced.line()).ok().filter(|&l| l > 0)
}

/// Whether `s` looks like an `http://` or `https://` URL with a host.
fn is_http_url(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"));
    rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/') && !r.contains(char::is_whitespace))
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// Validation state: the problems found so far and what is needed to check
/// references.
struct Ctx<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    errors: Vec<ConfigError>,
    /// Provider names written in the file (valid or not).
    defined: BTreeSet<String>,
}

impl Ctx<'_> {
    fn err(&mut self, path: impl Into<String>, line: Option<usize>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            path: path.into(),
            line,
            message: message.into(),
        });
    }

    fn at<T>(&mut self, path: impl Into<String>, node: &Spanned<T>, message: impl Into<String>) {
        self.err(path, line_of(node), message);
    }

    /// A required key: reports it missing (at the parent's line) when absent.
    fn required<'r, T>(
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
    fn required_str(
        &mut self,
        parent: &str,
        key: &str,
        v: &Opt<String>,
        parent_line: Option<usize>,
    ) -> Option<String> {
        let s = self.required(parent, key, v, parent_line)?;
        self.non_empty(&format!("{parent}.{key}"), s)
    }

    fn non_empty(&mut self, path: &str, s: &Spanned<String>) -> Option<String> {
        let v = s.value.trim();
        if v.is_empty() {
            self.at(path, s, "must not be empty");
            None
        } else {
            Some(v.to_owned())
        }
    }

    /// A duration in milliseconds over `default`; 0 is refused.
    fn positive_ms(&mut self, path: &str, v: &Opt<u64>, default: Duration) -> Duration {
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
    fn any_ms(v: &Opt<u64>, default: Duration) -> Duration {
        v.as_ref()
            .map_or(default, |s| Duration::from_millis(s.value))
    }

    /// A count over `default` that must be at least 1.
    fn at_least_one(&mut self, path: &str, v: &Opt<u32>, default: u32) -> u32 {
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
    fn fraction(&mut self, path: &str, s: &Spanned<f64>) -> Option<f64> {
        if s.value.is_finite() && s.value > 0.0 && s.value <= 1.0 {
            Some(s.value)
        } else {
            self.at(path, s, format!("{} is outside (0, 1]", s.value));
            None
        }
    }

    /// Reads the secret named by an `*_env` key. Its value never reaches a message.
    fn secret(&mut self, path: &str, var: &Spanned<String>) -> Option<Secret> {
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
    fn provider_ref(&mut self, path: &str, s: &Spanned<String>) -> Option<String> {
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

    fn provider_refs(&mut self, path: &str, list: &Spanned<Vec<Spanned<String>>>) -> Vec<String> {
        list.value
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.provider_ref(&format!("{path}[{i}]"), s))
            .collect()
    }

    fn providers(&mut self, raw: &RawConfig) -> Vec<ProviderConfig> {
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
                other => {
                    self.at(
                        format!("{path}.kind"),
                        k,
                        format!("unknown provider kind `{other}`: expected openai or anthropic"),
                    );
                    None
                }
            });
        let base_url = self
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
            });
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
        if let Some(b) = &r.supports_prefill {
            pc.supports_prefill = b.value;
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

    fn auth(&mut self, raw: &RawAuth) -> AuthConfig {
        let mut auth = AuthConfig::default();
        let Some(keys) = &raw.keys else {
            return auth;
        };
        let mut names: BTreeMap<String, usize> = BTreeMap::new();
        for (i, k) in keys.value.iter().enumerate() {
            let path = format!("auth.keys[{i}]");
            let r = &k.value;
            let kl = line_of(k);
            let name = self.required_str(&path, "name", &r.name, kl);
            if let (Some(n), Some(s)) = (&name, &r.name) {
                match names.get(n) {
                    Some(first) => self.at(
                        format!("{path}.name"),
                        s,
                        format!("duplicate key name `{n}` (also auth.keys[{first}])"),
                    ),
                    None => {
                        names.insert(n.clone(), i);
                    }
                }
            }
            let token = self
                .required(&path, "token_env", &r.token_env, kl)
                .and_then(|t| self.secret(&format!("{path}.token_env"), t));
            if let (Some(t), Some(var)) = (&token, &r.token_env)
                && let Some(j) = auth.keys.iter().position(|k: &ApiKey| k.token == *t)
            {
                self.at(
                    format!("{path}.token_env"),
                    var,
                    format!("gives the same token as auth.keys[{j}]: every key needs its own"),
                );
            }
            let scope = match (&r.scope, &r.agents) {
                (Some(s), None) => match s.value.trim() {
                    "admin" => Some(KeyScope::Admin),
                    other => {
                        self.at(
                            format!("{path}.scope"),
                            s,
                            format!("unknown scope `{other}`: expected admin (or list `agents`)"),
                        );
                        None
                    }
                },
                (None, Some(a)) => {
                    let agents: Vec<String> = a
                        .value
                        .iter()
                        .enumerate()
                        .filter_map(|(j, s)| self.non_empty(&format!("{path}.agents[{j}]"), s))
                        .collect();
                    if a.value.is_empty() {
                        self.at(format!("{path}.agents"), a, "must name at least one agent");
                        None
                    } else {
                        Some(KeyScope::Agents(agents))
                    }
                }
                (Some(s), Some(_)) => {
                    self.at(
                        format!("{path}.scope"),
                        s,
                        "give either `scope: admin` or `agents`, not both",
                    );
                    None
                }
                (None, None) => {
                    self.err(
                        path.clone(),
                        kl,
                        "needs `scope: admin` or a list of `agents`",
                    );
                    None
                }
            };
            if let (Some(name), Some(token), Some(scope)) = (name, token, scope) {
                auth.keys.push(ApiKey { name, token, scope });
            }
        }
        auth
    }

    fn routes(
        &mut self,
        raw: &Map<Vec<Spanned<String>>>,
        providers: &[ProviderConfig],
    ) -> BTreeMap<String, Vec<Target>> {
        let mut routes = BTreeMap::new();
        for (name, targets) in raw {
            let path = format!("routes.{name}");
            if targets.value.is_empty() {
                self.at(&path, targets, "a route needs at least one target");
                continue;
            }
            let mut out = Vec::new();
            for (i, t) in targets.value.iter().enumerate() {
                let tpath = format!("{path}[{i}]");
                let text = t.value.trim();
                let Some((p, m)) = text
                    .split_once('/')
                    .filter(|(p, m)| !p.is_empty() && !m.is_empty())
                else {
                    self.at(
                        &tpath,
                        t,
                        format!("`{text}` is not of the form provider/model"),
                    );
                    continue;
                };
                let pname = Spanned::new(p.to_owned(), t.referenced, t.defined);
                let Some(provider) = self.provider_ref(&tpath, &pname) else {
                    continue;
                };
                if let Some(pc) = providers.iter().find(|pc| pc.name == provider)
                    && !pc.offers(m)
                {
                    self.at(
                        &tpath,
                        t,
                        format!("provider `{provider}` does not list model `{m}` in its models"),
                    );
                    continue;
                }
                out.push(Target {
                    provider,
                    model: m.to_owned(),
                });
            }
            routes.insert(name.clone(), out);
        }
        routes
    }

    fn agents(&mut self, raw: &Map<RawAgent>) -> BTreeMap<String, AgentConfig> {
        let mut agents = BTreeMap::new();
        for (name, a) in raw {
            let path = format!("agents.{name}");
            let r = &a.value;
            let mut ac = AgentConfig::default();
            if let Some(p) = &r.provider {
                ac.provider = self.provider_ref(&format!("{path}.provider"), p);
            }
            if let Some(f) = &r.fallback {
                ac.fallback = Some(self.provider_refs(&format!("{path}.fallback"), f));
            }
            if let Some(b) = &r.budget {
                ac.budget = self.budget(&format!("{path}.budget"), &b.value);
            }
            agents.insert(name.clone(), ac);
        }
        agents
    }

    fn budget(&mut self, path: &str, r: &RawBudget) -> BudgetConfig {
        let mut b = BudgetConfig {
            max_tokens_per_task: r.max_tokens_per_task.as_ref().map(|s| s.value),
            max_tokens_per_agent: r.max_tokens_per_agent.as_ref().map(|s| s.value),
            ..BudgetConfig::default()
        };
        for (key, v, slot) in [
            (
                "max_cost_usd_per_task",
                &r.max_cost_usd_per_task,
                &mut b.max_cost_usd_per_task,
            ),
            (
                "max_cost_usd_per_agent",
                &r.max_cost_usd_per_agent,
                &mut b.max_cost_usd_per_agent,
            ),
        ] {
            if let Some(s) = v {
                if s.value.is_finite() && s.value >= 0.0 {
                    *slot = Some(s.value);
                } else {
                    self.at(
                        format!("{path}.{key}"),
                        s,
                        "must be a finite number of dollars, 0 or more",
                    );
                }
            }
        }
        b
    }

    fn ejection(&mut self, r: &RawEjection) -> EjectionConfig {
        let d = EjectionConfig::default();
        EjectionConfig {
            eject_after: self.at_least_one("ejection.eject_after", &r.eject_after, d.eject_after),
            failure_rate: r
                .failure_rate
                .as_ref()
                .and_then(|f| self.fraction("ejection.failure_rate", f))
                .unwrap_or(d.failure_rate),
            min_calls: self.at_least_one("ejection.min_calls", &r.min_calls, d.min_calls),
            window: self.positive_ms("ejection.window_ms", &r.window_ms, d.window),
            max_ejection: self.positive_ms(
                "ejection.max_ejection_ms",
                &r.max_ejection_ms,
                d.max_ejection,
            ),
        }
    }

    fn self_healing(
        &mut self,
        r: &RawSelfHealing,
        sh: &mut SelfHealingConfig,
        compaction: &mut CompactionConfig,
    ) {
        if let Some(e) = &r.enabled {
            sh.enabled = e.value;
        }
        sh.max_consecutive_failures = self.at_least_one(
            "self_healing.max_consecutive_failures",
            &r.max_consecutive_failures,
            sh.max_consecutive_failures,
        );
        sh.restart_delay = self.positive_ms(
            "self_healing.restart_delay_ms",
            &r.restart_delay_ms,
            sh.restart_delay,
        );
        sh.resume_probe_after = self.positive_ms(
            "self_healing.resume_probe_after_ms",
            &r.resume_probe_after_ms,
            sh.resume_probe_after,
        );
        sh.resume_probe_max = self.positive_ms(
            "self_healing.resume_probe_max_ms",
            &r.resume_probe_max_ms,
            sh.resume_probe_max.max(sh.resume_probe_after),
        );
        if let Some(m) = &r.resume_probe_max_ms
            && sh.resume_probe_max < sh.resume_probe_after
        {
            self.at(
                "self_healing.resume_probe_max_ms",
                m,
                "must not be shorter than resume_probe_after_ms",
            );
        }
        if let Some(t) = &r.compaction_threshold
            && let Some(v) = self.fraction("self_healing.compaction_threshold", t)
        {
            compaction.threshold = v;
        }
        if let Some(b) = &r.circuit_breaker {
            self.breaker(
                "self_healing.circuit_breaker",
                &b.value,
                &mut sh.circuit_breaker,
            );
        }
        if let Some(f) = &r.fallback {
            if let Some(e) = &f.value.enabled {
                sh.fallback_enabled = e.value;
            }
            if let Some(p) = &f.value.providers {
                sh.fallback_providers = self.provider_refs("self_healing.fallback.providers", p);
            }
        }
    }

    /// A nullable count: `null` switches the rule off, 0 is refused.
    fn nullable_count(&mut self, path: &str, v: &Nullable<u32>, slot: &mut Option<u32>) {
        match v {
            None => {}
            Some(None) => *slot = None,
            Some(Some(s)) if s.value == 0 => {
                self.at(path, s, "must be at least 1 (null switches the rule off)")
            }
            Some(Some(s)) => *slot = Some(s.value),
        }
    }

    fn breaker(&mut self, path: &str, r: &RawBreaker, b: &mut BreakerConfig) {
        if let Some(e) = &r.enabled {
            b.enabled = e.value;
        }
        self.nullable_count(
            &format!("{path}.failure_threshold"),
            &r.failure_threshold,
            &mut b.failure_threshold,
        );
        self.nullable_count(
            &format!("{path}.consecutive_failures"),
            &r.consecutive_failures,
            &mut b.consecutive_failures,
        );
        b.window = self.positive_ms(&format!("{path}.window_ms"), &r.window_ms, b.window);
        b.half_open_after = self.positive_ms(
            &format!("{path}.half_open_after_ms"),
            &r.half_open_after_ms,
            b.half_open_after,
        );
        b.max_open = self.positive_ms(&format!("{path}.max_open_ms"), &r.max_open_ms, b.max_open);
        b.half_open_requests = self.at_least_one(
            &format!("{path}.half_open_requests"),
            &r.half_open_requests,
            b.half_open_requests,
        );
        b.success_threshold = self.at_least_one(
            &format!("{path}.success_threshold"),
            &r.success_threshold,
            b.success_threshold,
        );
        match &r.failure_rate {
            None => {}
            Some(None) => b.failure_rate = None,
            Some(Some(s)) => {
                if let Some(v) = self.fraction(&format!("{path}.failure_rate"), s) {
                    b.failure_rate = Some(v);
                }
            }
        }
        b.min_calls = self.at_least_one(&format!("{path}.min_calls"), &r.min_calls, b.min_calls);
        match &r.slow_call_ms {
            None => {}
            Some(None) => b.slow_call = None,
            Some(Some(s)) if s.value == 0 => self.at(
                format!("{path}.slow_call_ms"),
                s,
                "must be greater than 0 (null switches the rule off)",
            ),
            Some(Some(s)) => b.slow_call = Some(Duration::from_millis(s.value)),
        }
    }

    fn retry(&mut self, r: &RawRetry) -> RetryConfig {
        let mut rc = RetryConfig::default();
        rc.max_retry_wait = Self::any_ms(&r.max_retry_wait_ms, rc.max_retry_wait);
        rc.probe_interval = self.positive_ms(
            "retry.probe_interval_ms",
            &r.probe_interval_ms,
            rc.probe_interval,
        );
        rc.turn_deadline = self.positive_ms(
            "retry.turn_deadline_ms",
            &r.turn_deadline_ms,
            rc.turn_deadline,
        );
        if let Some(p) = &r.rate_limit {
            rc.rate_limit = self.policy("retry.rate_limit", &p.value, rc.rate_limit);
        }
        if let Some(p) = &r.server_error {
            rc.server_error = self.policy("retry.server_error", &p.value, rc.server_error);
        }
        if let Some(p) = &r.network {
            rc.network = self.policy("retry.network", &p.value, rc.network);
        }
        rc
    }

    fn policy(&mut self, path: &str, r: &RawPolicy, default: RetryPolicy) -> RetryPolicy {
        let mut p = default;
        if let Some(a) = &r.max_attempts {
            if a.value == 0 {
                self.at(
                    format!("{path}.max_attempts"),
                    a,
                    "must be at least 1 (1 = no retry)",
                );
            } else {
                p.max_attempts = a.value;
            }
        }
        p.initial = Self::any_ms(&r.initial_ms, p.initial);
        p.max = Self::any_ms(&r.max_ms, p.max);
        if p.initial > p.max {
            let (key, line) = match (&r.initial_ms, &r.max_ms) {
                (Some(s), _) => ("initial_ms", line_of(s)),
                (None, Some(s)) => ("max_ms", line_of(s)),
                (None, None) => ("initial_ms", None),
            };
            self.err(
                format!("{path}.{key}"),
                line,
                format!(
                    "initial_ms ({}) is greater than max_ms ({})",
                    ms(p.initial),
                    ms(p.max)
                ),
            );
            p.initial = default.initial;
            p.max = default.max;
        }
        if let Some(j) = &r.jitter {
            match j.value.trim() {
                "full" => p.jitter = Jitter::Full,
                "decorrelated" => p.jitter = Jitter::Decorrelated,
                other => self.at(
                    format!("{path}.jitter"),
                    j,
                    format!("unknown jitter `{other}`: expected full or decorrelated"),
                ),
            }
        }
        p
    }

    fn guard(&mut self, r: &RawGuard) -> GuardConfig {
        let mut g = GuardConfig::default();
        if let Some(v) = &r.max_events {
            g.max_events = v.value;
        }
        if let Some(v) = &r.max_tool_calls {
            g.max_tool_calls = v.value;
        }
        g.task_timeout = Self::any_ms(&r.task_timeout_ms, g.task_timeout);
        if let Some(v) = &r.tool_caps {
            g.tool_caps = v.value.clone();
        }
        if let Some(v) = &r.tool_loop_threshold {
            g.tool_loop_threshold = v.value;
        }
        if let Some(v) = &r.file_edit_loop_threshold {
            g.file_edit_loop_threshold = v.value;
        }
        if let Some(v) = &r.result_loop_threshold {
            g.result_loop_threshold = v.value;
        }
        if let Some(v) = &r.edit_tools {
            for (tool, arg) in &v.value {
                if arg.trim().is_empty() {
                    self.at(
                        format!("guard.edit_tools.{tool}"),
                        v,
                        "must name the argument that holds the path",
                    );
                }
            }
            g.edit_tools = v.value.clone();
        }
        if let Some(v) = &r.read_only_tools {
            g.read_only_tools = v.value.clone();
        }
        g
    }

    fn health(&mut self, r: &RawHealth) -> HealthConfig {
        let mut h = HealthConfig::default();
        h.heartbeat_timeout = self.positive_ms(
            "health.heartbeat_timeout_ms",
            &r.heartbeat_timeout_ms,
            h.heartbeat_timeout,
        );
        h.stale_after = self.positive_ms("health.stale_after_ms", &r.stale_after_ms, h.stale_after);
        h.stuck_after = self.positive_ms("health.stuck_after_ms", &r.stuck_after_ms, h.stuck_after);
        if let Some(n) = &r.nudge {
            if let Some(a) = &n.value.max_attempts {
                h.nudge_max_attempts = a.value;
            }
            h.nudge_interval = self.positive_ms(
                "health.nudge.interval_ms",
                &n.value.interval_ms,
                h.nudge_interval,
            );
        }
        h.escalation_timeout = self.positive_ms(
            "health.escalation_timeout_ms",
            &r.escalation_timeout_ms,
            h.escalation_timeout,
        );
        h
    }

    fn recovery(&mut self, r: &RawRecovery) -> RecoveryConfig {
        let mut rc = RecoveryConfig::default();
        if let Some(v) = &r.max_per_task {
            rc.max_per_task = v.value;
        }
        if let Some(v) = &r.max_per_hour {
            rc.max_per_hour = v.value;
        }
        if let Some(b) = &r.backoff_ms {
            if b.value.is_empty() {
                self.at("recovery.backoff_ms", b, "must list at least one delay");
            } else {
                rc.backoff = b
                    .value
                    .iter()
                    .map(|s| Duration::from_millis(s.value))
                    .collect();
            }
        }
        rc
    }

    fn compaction(
        &mut self,
        r: &super::RawCompaction,
        self_healing: Option<&Spanned<RawSelfHealing>>,
        c: &mut CompactionConfig,
    ) {
        if let Some(w) = &r.warn_at
            && let Some(v) = self.fraction("compaction.warn_at", w)
        {
            if v >= c.threshold {
                let threshold_line = self_healing
                    .and_then(|s| s.value.compaction_threshold.as_ref())
                    .and_then(line_of);
                let mut msg = format!(
                    "warn_at ({v}) must be below self_healing.compaction_threshold ({})",
                    c.threshold
                );
                if let Some(l) = threshold_line {
                    msg.push_str(&format!(" set on line {l}"));
                }
                self.at("compaction.warn_at", w, msg);
            } else {
                c.warn_at = v;
            }
        }
        if let Some(m) = &r.summarizer_model {
            c.summarizer_model = self.non_empty("compaction.summarizer_model", m);
        }
        c.summarizer_max_tokens = self.at_least_one(
            "compaction.summarizer_max_tokens",
            &r.summarizer_max_tokens,
            c.summarizer_max_tokens,
        );
    }

    fn events(&mut self, r: &RawEvents) -> EventsConfig {
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

    /// `alerting:`: channels with their credentials read from the
    /// environment, routes naming defined channels and known kinds.
    fn alerting(&mut self, r: &RawAlerting) -> AlertingConfig {
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
                    let parsed = crate::alert::Severity::parse(v);
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
        c: &serde_saphyr::Spanned<super::RawAlertChannel>,
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
                    url: literal.unwrap_or_else(|| crate::config::PAGERDUTY_EVENTS_URL.to_owned()),
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

    fn prices(&mut self, raw: &Map<RawPrice>) -> BTreeMap<String, Price> {
        let mut prices = BTreeMap::new();
        for (model, p) in raw {
            let path = format!("prices.{model}");
            let pl = line_of(p);
            let mut get = |key: &str, v: &Opt<f64>| -> Option<f64> {
                let s = self.required(&path, key, v, pl)?;
                if s.value.is_finite() && s.value >= 0.0 {
                    Some(s.value)
                } else {
                    self.at(
                        format!("{path}.{key}"),
                        s,
                        "must be a finite price, 0 or more",
                    );
                    None
                }
            };
            let input = get("input_per_mtok", &p.value.input_per_mtok);
            let output = get("output_per_mtok", &p.value.output_per_mtok);
            if let (Some(input_per_mtok), Some(output_per_mtok)) = (input, output) {
                prices.insert(
                    model.clone(),
                    Price {
                        input_per_mtok,
                        output_per_mtok,
                    },
                );
            }
        }
        prices
    }
}

impl Ctx<'_> {
    /// `tool_nodes:` — unique names, a known kind, an http(s) URL.
    fn tool_nodes(&mut self, list: &[Spanned<RawToolNode>]) -> Vec<crate::config::ToolNodeConfig> {
        use crate::config::{ToolNodeConfig, ToolNodeKind};
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
        r: &super::RawNodeBreaker,
    ) -> crate::config::NodeBreakerConfig {
        crate::config::NodeBreakerConfig {
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

/// `cooldown_ms:` over the defaults; one row per configurable class.
fn cooldown(r: &RawCooldown) -> CooldownConfig {
    let mut c = CooldownConfig::default();
    for (v, class) in [
        (&r.auth, ErrorClass::Auth),
        (&r.rate_limit, ErrorClass::RateLimit),
        (&r.billing, ErrorClass::Billing),
        (&r.timeout, ErrorClass::Timeout),
        (&r.overloaded, ErrorClass::Overloaded),
        (&r.model_not_found, ErrorClass::ModelNotFound),
        (&r.network, ErrorClass::Network),
        (&r.stream_broken, ErrorClass::StreamBroken),
        (&r.unknown, ErrorClass::Unknown),
    ] {
        if let Some(s) = v {
            c.by_class.insert(class, Duration::from_millis(s.value));
        }
    }
    c
}
