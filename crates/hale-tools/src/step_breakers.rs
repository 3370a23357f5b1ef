//! Breakers a step brings itself (`breaker`, alias `circuit_breaker`, in a
//! job's step): one per (node, tool, numbers), beside the node's own
//! breaker. While a step's breaker is open for a node, that node is skipped
//! for the tool (`node (skipped: open)` in the path) by every step with the
//! same numbers; its node faults on that tool open it.
//!
//! Bounded: at most [`MAX_STEP_BREAKERS`] exist; past that, a step's
//! breaker numbers are not tracked (the node's own breaker still is).

use hale_core::breaker::{BreakerState, CallOutcome, SharedBreaker};
use hale_core::config::NodeBreakerConfig;
use hale_core::tools::ToolError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most step breakers kept.
pub const MAX_STEP_BREAKERS: usize = 4096;

type Key = (String, String, NodeBreakerConfig);

/// The step breakers of one runtime.
#[derive(Default)]
pub(crate) struct StepBreakers {
    map: Mutex<HashMap<Key, Arc<SharedBreaker>>>,
}

impl StepBreakers {
    fn get(&self, node: &str, tool: &str, cfg: &NodeBreakerConfig) -> Option<Arc<SharedBreaker>> {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let key = (node.to_owned(), tool.to_owned(), *cfg);
        if let Some(b) = m.get(&key) {
            return Some(b.clone());
        }
        if m.len() >= MAX_STEP_BREAKERS {
            return None;
        }
        let b = Arc::new(SharedBreaker::new(
            hale_core::tools::node_breaker_config_for(cfg),
        ));
        m.insert(key, b.clone());
        Some(b)
    }

    /// Whether the step's breaker for `node` refuses calls now.
    pub(crate) fn open(
        &self,
        node: &str,
        tool: &str,
        cfg: &NodeBreakerConfig,
        now: Instant,
    ) -> bool {
        let Some(b) = self.get(node, tool, cfg) else {
            return false;
        };
        let s = b.snapshot(now);
        match s.state {
            BreakerState::Open => s.open_remaining_ms > 0,
            BreakerState::ForcedOpen => true,
            BreakerState::HalfOpen => s.trials_in_flight > 0,
            BreakerState::Closed | BreakerState::Disabled => false,
        }
    }

    /// Takes a trial when the step's breaker is half-open.
    pub(crate) fn admit(&self, node: &str, tool: &str, cfg: &NodeBreakerConfig, now: Instant) {
        if let Some(b) = self.get(node, tool, cfg) {
            let _ = b.allow(now);
        }
    }

    /// Records a call's outcome: a success, or a node fault (other failures
    /// say nothing about the node and are not counted).
    pub(crate) fn record(
        &self,
        node: &str,
        tool: &str,
        cfg: &NodeBreakerConfig,
        now: Instant,
        latency: Duration,
        err: Option<ToolError>,
    ) {
        let Some(b) = self.get(node, tool, cfg) else {
            return;
        };
        let mut rng = rand::rng();
        match err {
            None => {
                b.record(now, CallOutcome::Success { latency }, &mut rng);
            }
            Some(e) if e.node_fault() => {
                b.record(
                    now,
                    CallOutcome::Failure {
                        class: e.class(),
                        latency,
                        retry_after: None,
                    },
                    &mut rng,
                );
            }
            Some(_) => {}
        }
    }
}
