//! `agents:` — per-agent provider, fallback list and budget.

use super::ctx::Ctx;
use crate::{Map, RawAgent, RawBudget};
use hale_core::config::{AgentConfig, BudgetConfig};
use std::collections::BTreeMap;

impl Ctx<'_> {
    pub(super) fn agents(&mut self, raw: &Map<RawAgent>) -> BTreeMap<String, AgentConfig> {
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
}
