//! Tool-job metrics (docs/operations.md, "Tool jobs"): `node_availability`,
//! `failover_rate` and `degraded_percentage` per node and per tool, and at the
//! top level the three figures seed 003's monitoring reads with jq —
//! `node_availability` (node → fraction), `failover_rate` (steps that moved to
//! another node, of all steps) and `degraded_percentage` (finished jobs that
//! were degraded, in percent) — served as JSON at `GET /jobs/metrics` and
//! `GET /v1/metrics`.
//!
//! Labels stay bounded: node names come from the config or an admin's
//! registration; tool names come from nodes and from jobs, so at most
//! [`MAX_TOOL_LABELS`] distinct tools are counted and the rest share the
//! label `other`.

use crate::nodes::Node;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

/// Distinct tool names counted before the rest share `other`.
pub const MAX_TOOL_LABELS: usize = 256;

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    steps: u64,
    failed_over: u64,
    degraded: u64,
    failed: u64,
}

/// Counters per tool and per node.
#[derive(Debug, Default)]
pub struct Metrics {
    tools: Mutex<BTreeMap<String, Counts>>,
    /// Attempts on a node that ended by moving to another node.
    node_failovers: Mutex<BTreeMap<String, u64>>,
    jobs: Mutex<BTreeMap<&'static str, u64>>,
    /// Finished jobs, and of them the degraded ones.
    finished: Mutex<(u64, u64)>,
}

fn ratio(n: u64, d: u64) -> f64 {
    if d == 0 { 0.0 } else { n as f64 / d as f64 }
}

impl Metrics {
    /// One finished step of `tool`.
    pub fn step(&self, tool: &str, failed_over: bool, degraded: bool, ok: bool) {
        let mut m = self.tools.lock().unwrap_or_else(|e| e.into_inner());
        let key = if m.contains_key(tool) || m.len() < MAX_TOOL_LABELS {
            tool.to_owned()
        } else {
            "other".to_owned()
        };
        let c = m.entry(key).or_default();
        c.steps += 1;
        c.failed_over += u64::from(failed_over);
        c.degraded += u64::from(degraded);
        c.failed += u64::from(!ok);
    }

    /// An attempt on `node` that moved the step to another node.
    pub fn failover_from(&self, node: &str) {
        *self
            .node_failovers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(node.to_owned())
            .or_default() += 1;
    }

    /// A job reached `status`.
    pub fn job(&self, status: &'static str) {
        *self
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(status)
            .or_default() += 1;
    }

    /// A job finished (completed, failed, expired, cancelled).
    pub fn finished(&self, degraded: bool) {
        let mut f = self.finished.lock().unwrap_or_else(|e| e.into_inner());
        f.0 += 1;
        f.1 += u64::from(degraded);
    }

    /// The JSON of `GET /jobs/metrics` and `GET /v1/metrics`.
    pub fn snapshot(
        &self,
        nodes: &[std::sync::Arc<Node>],
        now: std::time::Instant,
        now_ms: u64,
    ) -> Value {
        let failovers = self
            .node_failovers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let nodes: serde_json::Map<String, Value> = nodes
            .iter()
            .map(|n| {
                let calls = n.calls.load(Ordering::Relaxed);
                let faults = n.node_faults.load(Ordering::Relaxed);
                let checks = n.checks.load(Ordering::Relaxed);
                let checks_failed = n.checks_failed.load(Ordering::Relaxed);
                let seen = calls + checks;
                let availability = if seen == 0 {
                    1.0
                } else {
                    1.0 - ratio(faults + checks_failed, seen)
                };
                let fo = failovers.get(n.name()).copied().unwrap_or(0);
                (
                    n.name().to_owned(),
                    json!({
                        "health": n.health(now, now_ms),
                        "node_availability": availability,
                        "failover_rate": ratio(fo, calls),
                        "calls": calls,
                        "node_faults": faults,
                        "health_checks": checks,
                        "health_checks_failed": checks_failed,
                    }),
                )
            })
            .collect();
        let tools: serde_json::Map<String, Value> = self
            .tools
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(t, c)| {
                (
                    t.clone(),
                    json!({
                        "steps": c.steps,
                        "failover_rate": ratio(c.failed_over, c.steps),
                        "degraded_percentage": 100.0 * ratio(c.degraded, c.steps),
                        "failed": c.failed,
                    }),
                )
            })
            .collect();
        let jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let availability: serde_json::Map<String, Value> = nodes
            .iter()
            .map(|(n, v)| (n.clone(), v["node_availability"].clone()))
            .collect();
        let (steps, failed_over) = self
            .tools
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .fold((0, 0), |(s, f), c| (s + c.steps, f + c.failed_over));
        let (finished, degraded) = *self.finished.lock().unwrap_or_else(|e| e.into_inner());
        json!({
            "node_availability": availability,
            "failover_rate": ratio(failed_over, steps),
            "degraded_percentage": 100.0 * ratio(degraded, finished),
            "nodes": nodes, "tools": tools, "jobs": jobs,
        })
    }
}
