//! Token and cost budgets per agent and per task
//! (docs/configuration.md, `agents.<name>.budget`).
//!
//! [`check`] is asked before a turn is sent upstream, with what the agent and
//! the task have spent so far. A spend *at or over* a cap is a hit: the turn
//! would only add to it, so it is refused with 402 `budget_exceeded`, and the
//! refusal is final for that scope. The task scope is checked before the agent
//! scope (the narrower cap names the more useful culprit), and tokens before
//! cost within a scope. [`cost`] prices a turn from a [`Price`] in USD per
//! million tokens. Pure: no state, no clock.

use crate::config::{BudgetConfig, Price};
use crate::guard::group_thousands;
use serde::Serialize;

/// What has been spent so far in one scope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spend {
    pub tokens: u64,
    pub cost_usd: f64,
}

impl Spend {
    /// Adds one turn's usage.
    pub fn add(&mut self, tokens: u64, cost_usd: f64) {
        self.tokens = self.tokens.saturating_add(tokens);
        if cost_usd.is_finite() && cost_usd > 0.0 {
            self.cost_usd += cost_usd;
        }
    }
}

/// Which cap was hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetScope {
    Agent,
    Task,
}

impl BudgetScope {
    fn as_str(self) -> &'static str {
        match self {
            BudgetScope::Agent => "agent",
            BudgetScope::Task => "task",
        }
    }
}

/// A cap reached.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetHit {
    pub scope: BudgetScope,
    /// `"tokens"` or `"cost"`.
    pub kind: &'static str,
    pub limit: f64,
    pub spent: f64,
    pub message: String,
}

/// Refuses the turn when the task or the agent is at or over one of its caps.
pub fn check(cfg: &BudgetConfig, agent: &Spend, task: &Spend) -> Result<(), BudgetHit> {
    let scopes = [
        (
            BudgetScope::Task,
            task,
            cfg.max_tokens_per_task,
            cfg.max_cost_usd_per_task,
        ),
        (
            BudgetScope::Agent,
            agent,
            cfg.max_tokens_per_agent,
            cfg.max_cost_usd_per_agent,
        ),
    ];
    for (scope, spend, max_tokens, max_cost) in scopes {
        if let Some(max) = max_tokens
            && spend.tokens >= max
        {
            let message = format!(
                "Budget exceeded: the {} used {} tokens of its cap of {} tokens.",
                scope.as_str(),
                group_thousands(spend.tokens),
                group_thousands(max)
            );
            return Err(BudgetHit {
                scope,
                kind: "tokens",
                limit: max as f64,
                spent: spend.tokens as f64,
                message,
            });
        }
        if let Some(max) = max_cost
            && spend.cost_usd >= max
        {
            let message = format!(
                "Budget exceeded: the {} spent ${:.4} of its cap of ${:.4}.",
                scope.as_str(),
                spend.cost_usd,
                max
            );
            return Err(BudgetHit {
                scope,
                kind: "cost",
                limit: max,
                spent: spend.cost_usd,
                message,
            });
        }
    }
    Ok(())
}

/// USD for a turn: tokens × price per million. Non-finite or negative prices count as 0.
pub fn cost(price: Price, input_tokens: u64, output_tokens: u64) -> f64 {
    let rate = |p: f64| if p.is_finite() && p > 0.0 { p } else { 0.0 };
    (input_tokens as f64 * rate(price.input_per_mtok)
        + output_tokens as f64 * rate(price.output_per_mtok))
        / 1_000_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spend(tokens: u64, cost_usd: f64) -> Spend {
        Spend { tokens, cost_usd }
    }

    #[test]
    fn caps_hit_at_or_over_and_pass_below() {
        struct Row {
            name: &'static str,
            cfg: BudgetConfig,
            agent: Spend,
            task: Spend,
            expect: Option<(BudgetScope, &'static str)>,
        }
        let task_tokens = BudgetConfig {
            max_tokens_per_task: Some(1000),
            ..Default::default()
        };
        let agent_cost = BudgetConfig {
            max_cost_usd_per_agent: Some(2.0),
            ..Default::default()
        };
        let rows = [
            Row {
                name: "no caps",
                cfg: BudgetConfig::default(),
                agent: spend(u64::MAX, 1e9),
                task: spend(u64::MAX, 1e9),
                expect: None,
            },
            Row {
                name: "task tokens below",
                cfg: task_tokens.clone(),
                agent: spend(0, 0.0),
                task: spend(999, 0.0),
                expect: None,
            },
            Row {
                name: "task tokens at",
                cfg: task_tokens.clone(),
                agent: spend(0, 0.0),
                task: spend(1000, 0.0),
                expect: Some((BudgetScope::Task, "tokens")),
            },
            Row {
                name: "task tokens over",
                cfg: task_tokens,
                agent: spend(0, 0.0),
                task: spend(1001, 0.0),
                expect: Some((BudgetScope::Task, "tokens")),
            },
            Row {
                name: "agent cost below",
                cfg: agent_cost.clone(),
                agent: spend(0, 1.99),
                task: spend(0, 0.0),
                expect: None,
            },
            Row {
                name: "agent cost at",
                cfg: agent_cost.clone(),
                agent: spend(0, 2.0),
                task: spend(0, 0.0),
                expect: Some((BudgetScope::Agent, "cost")),
            },
            Row {
                name: "task before agent",
                cfg: BudgetConfig {
                    max_tokens_per_agent: Some(10),
                    max_cost_usd_per_task: Some(1.0),
                    ..Default::default()
                },
                agent: spend(10, 0.0),
                task: spend(0, 1.0),
                expect: Some((BudgetScope::Task, "cost")),
            },
            Row {
                name: "agent tokens",
                cfg: BudgetConfig {
                    max_tokens_per_agent: Some(2_000_000),
                    ..Default::default()
                },
                agent: spend(2_000_000, 0.0),
                task: spend(5, 0.0),
                expect: Some((BudgetScope::Agent, "tokens")),
            },
        ];
        for r in rows {
            let got = check(&r.cfg, &r.agent, &r.task);
            match (got, r.expect) {
                (Ok(()), None) => {}
                (Err(h), Some((scope, kind))) => {
                    assert_eq!((h.scope, h.kind), (scope, kind), "{}", r.name);
                    assert!(h.spent >= h.limit, "{}", r.name);
                }
                (got, want) => panic!("{}: got {got:?}, want {want:?}", r.name),
            }
        }
    }

    #[test]
    fn hit_message_is_readable() {
        let cfg = BudgetConfig {
            max_tokens_per_agent: Some(2_000_000),
            ..Default::default()
        };
        let h = check(&cfg, &spend(2_000_123, 0.0), &spend(0, 0.0)).unwrap_err();
        assert_eq!(
            h.message,
            "Budget exceeded: the agent used 2,000,123 tokens of its cap of 2,000,000 tokens."
        );
    }

    #[test]
    fn cost_is_per_million_tokens() {
        let p = Price {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
        };
        assert!((cost(p, 1_000_000, 0) - 3.0).abs() < 1e-12);
        assert!((cost(p, 2000, 1000) - (0.006 + 0.015)).abs() < 1e-12);
        assert_eq!(cost(p, 0, 0), 0.0);
        let bad = Price {
            input_per_mtok: f64::NAN,
            output_per_mtok: -1.0,
        };
        assert_eq!(cost(bad, 10, 10), 0.0);
    }

    #[test]
    fn spend_adds_and_ignores_nonsense_costs() {
        let mut s = Spend::default();
        s.add(10, 0.5);
        s.add(u64::MAX, f64::NAN);
        assert_eq!(s.tokens, u64::MAX);
        assert_eq!(s.cost_usd, 0.5);
    }
}
