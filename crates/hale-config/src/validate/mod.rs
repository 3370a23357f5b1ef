//! Stage 2 of config loading: the raw tree becomes a [`Config`].
//!
//! Every check pushes a [`ConfigError`](super::ConfigError) and carries on, so
//! one run reports every problem; the list is sorted by line at the end. Each
//! section starts from its validated type's default and overrides only the
//! keys given. Provider names are gathered from the raw list first, so a
//! provider that is itself invalid does not also make every reference to it
//! "not defined". Values read from the environment are never put into a
//! message; neither are URLs (they may carry credentials).
//!
//! This file only walks the sections in order; each section's checks live in
//! the module named after it, on the shared [`ctx::Ctx`].

mod agents;
mod alerting;
mod auth;
mod azure;
mod bedrock;
mod compaction;
mod cooldown;
mod crawling;
mod ctx;
mod ejection;
mod events;
mod guard;
mod health;
mod hedging;
mod memory;
mod prices;
mod providers;
mod recovery;
mod retry;
mod routes;
mod self_healing;
mod server;
mod storage;
mod telemetry;
mod tool_jobs;
mod tool_nodes;
mod vertex;

use super::{ConfigErrors, RawConfig};
use ctx::Ctx;
use hale_core::config::Config;

/// Stage 2: validates a parsed file into a [`Config`], reporting every problem.
/// `env` looks up the variables named by `api_key_env`, `token_env` and
/// `secret_env`.
pub fn validate(
    raw: &RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let mut cx = Ctx::new(raw, env);
    let mut cfg = Config::with_providers(Vec::new());

    if let Some(l) = &raw.listen {
        cx.listen(l, &mut cfg.listen);
    }
    if let Some(d) = &raw.data_dir {
        cx.data_dir(d, &mut cfg.data_dir);
    }
    if let Some(s) = &raw.storage {
        cx.storage(s, &mut cfg.storage);
    }

    cfg.providers = cx.providers(raw);
    if let Some(a) = &raw.auth {
        cfg.auth = cx.auth(&a.value);
    }
    if let Some(l) = &raw.limits {
        cx.limits(&l.value, &mut cfg.limits);
    }
    if let Some(r) = &raw.routes {
        let routes = cx.routes(&r.value, &cfg.providers);
        cfg.routes = routes.targets;
        cfg.route_ranks = routes.ranks;
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
        cfg.cooldown = cooldown::cooldown(&c.value);
    }
    if let Some(e) = &raw.ejection {
        cfg.ejection = cx.ejection(&e.value);
    }
    if let Some(h) = &raw.hedging {
        cfg.hedging = cx.hedging(&h.value);
    }
    if let Some(c) = &raw.crawling {
        cfg.crawling = cx.crawling(&c.value);
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
        cx.compaction(&c.value, &mut cfg.compaction);
    }
    if let Some(e) = &raw.events {
        cfg.events = cx.events(&e.value);
    }
    if let Some(p) = &raw.prices {
        cfg.prices = cx.prices(&p.value);
    }
    if let Some(t) = &raw.telemetry {
        cx.telemetry(&t.value, &mut cfg.telemetry);
    }
    if let Some(m) = &raw.memory {
        memory::memory(&m.value, &mut cfg.memory);
    }
    if let Some(sp) = &raw.storage_pool {
        cx.storage_pool(&sp.value, &mut cfg.storage_pool);
    }
    if let Some(j) = &raw.journal {
        cx.journal(&j.value, &mut cfg.journal);
    }

    if let Some(t) = &raw.tool_nodes {
        cfg.tool_nodes = cx.tool_nodes(&t.value);
    }
    if let Some(t) = &raw.tool_jobs {
        cfg.tool_jobs = cx.tool_jobs(&t.value);
    }
    if let Some(w) = &raw.workflows {
        cfg.workflows = cx.workflows(&w.value);
    }
    if let Some(a) = &raw.alerting {
        cfg.alerting = cx.alerting(&a.value);
    }

    cx.finish(cfg)
}
