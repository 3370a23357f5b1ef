//! The intervention planner (docs/operations.md, "Agent health and
//! supervision"): what hale does about a stuck agent.
//!
//! A stuck agent is first nudged — a reminder the gateway injects into the
//! agent's next request — up to `nudge_max_attempts` times, `nudge_interval`
//! apart. When the last nudge's interval passes with the agent still stuck,
//! hale escalates to an operator and waits `escalation_timeout` for a
//! [`Decision`]: more time (back to watching, nudges reset, no intervention
//! until the extra time is over), hand-off (the agent is paused for a human;
//! automation stops here) or terminate. No decision in time terminates.
//! Recovery to healthy at any point (before a hand-off or termination)
//! resets the plan.
//!
//! The planner only decides; the gateway delivers the nudge, sends the
//! webhook, blocks the task. It keeps one pending nudge at most: a nudge that
//! was never consumed (the agent made no request) is replaced by the next.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::{HealthState, fmt_dur};
use crate::config::HealthConfig;

/// What to do now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Intervention {
    /// A reminder, now pending for the agent's next request (event `health.nudge_sent`).
    Nudge { attempt: u32, message: String },
    /// Ask an operator (event `health.escalated` + webhook).
    Escalate { reason: String },
    /// Block the task, save its state (event `agent.terminated`).
    Terminate { reason: String },
}

/// An operator's answer to an escalation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Leave the agent alone for this long, then watch again with fresh nudges.
    MoreTime(Duration),
    /// Pause the agent for a human; automation stops.
    HandOff,
    /// Terminate the task now.
    Terminate,
}

/// `decide` without an escalation waiting for an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    #[error("no escalation is pending for this agent")]
    NoEscalation,
}

/// Where the planner is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum InterventionPhase {
    Watching,
    /// `n` nudges sent so far.
    Nudging {
        n: u32,
    },
    /// Waiting for an operator since `since` (not serialised: a monotonic instant).
    Escalated {
        #[serde(skip_serializing)]
        since: Instant,
    },
    HandedOff,
    Terminated,
}

/// The per-agent planner.
#[derive(Debug, Clone)]
pub struct Interventions {
    phase: InterventionPhase,
    last_nudge: Option<Instant>,
    /// After `MoreTime`: no intervention before this.
    quiet_until: Option<Instant>,
    pending_nudge: Option<String>,
}

impl Default for Interventions {
    fn default() -> Self {
        Self::new()
    }
}

fn nudge_message(attempt: u32, max: u32) -> String {
    format!(
        "[hale] Reminder {attempt} of {max}: you seem to be stuck — no progress, or the same \
         call repeated. Step back: summarise what you have tried, then try a different \
         approach, or say plainly that you are blocked and why."
    )
}

impl Interventions {
    pub fn new() -> Self {
        Self {
            phase: InterventionPhase::Watching,
            last_nudge: None,
            quiet_until: None,
            pending_nudge: None,
        }
    }

    /// Where the plan is.
    pub fn phase(&self) -> InterventionPhase {
        self.phase
    }

    /// Nothing under way: watching, no nudge pending, no extra time an
    /// operator granted still running.
    pub fn at_rest(&self) -> bool {
        self.phase == InterventionPhase::Watching
            && self.pending_nudge.is_none()
            && self.quiet_until.is_none()
    }

    /// Whether a nudge waits to be injected.
    pub fn has_pending_nudge(&self) -> bool {
        self.pending_nudge.is_some()
    }

    /// The gateway takes the pending nudge to inject it into the agent's
    /// next request; it is delivered once.
    pub fn take_pending_nudge(&mut self) -> Option<String> {
        self.pending_nudge.take()
    }

    fn nudge(&mut self, attempt: u32, cfg: &HealthConfig, now: Instant) -> Intervention {
        let message = nudge_message(attempt, cfg.nudge_max_attempts);
        self.phase = InterventionPhase::Nudging { n: attempt };
        self.last_nudge = Some(now);
        self.pending_nudge = Some(message.clone());
        Intervention::Nudge { attempt, message }
    }

    fn escalate(&mut self, cfg: &HealthConfig, now: Instant) -> Intervention {
        self.phase = InterventionPhase::Escalated { since: now };
        self.pending_nudge = None;
        let reason = if cfg.nudge_max_attempts == 0 {
            "agent is stuck".to_string()
        } else {
            format!(
                "agent still stuck after {} nudge(s), {} apart",
                cfg.nudge_max_attempts,
                fmt_dur(cfg.nudge_interval)
            )
        };
        Intervention::Escalate { reason }
    }

    fn reset(&mut self) {
        self.phase = InterventionPhase::Watching;
        self.last_nudge = None;
        self.quiet_until = None;
        self.pending_nudge = None;
    }

    /// Decides the next step for an agent in `state` at `now`; at most one
    /// intervention per call.
    pub fn plan(
        &mut self,
        cfg: &HealthConfig,
        state: HealthState,
        now: Instant,
    ) -> Option<Intervention> {
        match self.phase {
            InterventionPhase::HandedOff | InterventionPhase::Terminated => return None,
            InterventionPhase::Watching
            | InterventionPhase::Nudging { .. }
            | InterventionPhase::Escalated { .. } => {}
        }
        match state {
            HealthState::Healthy => {
                self.reset();
                return None;
            }
            HealthState::Terminated => {
                self.mark_terminated();
                return None;
            }
            HealthState::Degraded | HealthState::Failing | HealthState::Stuck => {}
        }
        let stuck = state == HealthState::Stuck;
        match self.phase {
            InterventionPhase::Watching => {
                if !stuck || self.quiet_until.is_some_and(|q| now < q) {
                    return None;
                }
                self.quiet_until = None;
                if cfg.nudge_max_attempts == 0 {
                    Some(self.escalate(cfg, now))
                } else {
                    Some(self.nudge(1, cfg, now))
                }
            }
            InterventionPhase::Nudging { n } => {
                let due = self
                    .last_nudge
                    .is_none_or(|t| now.saturating_duration_since(t) >= cfg.nudge_interval);
                if !stuck || !due {
                    return None;
                }
                if n < cfg.nudge_max_attempts {
                    Some(self.nudge(n + 1, cfg, now))
                } else {
                    Some(self.escalate(cfg, now))
                }
            }
            InterventionPhase::Escalated { since } => {
                if now.saturating_duration_since(since) < cfg.escalation_timeout {
                    return None;
                }
                self.phase = InterventionPhase::Terminated;
                Some(Intervention::Terminate {
                    reason: format!(
                        "no operator decision within {} of escalation",
                        fmt_dur(cfg.escalation_timeout)
                    ),
                })
            }
            InterventionPhase::HandedOff | InterventionPhase::Terminated => None,
        }
    }

    /// The earliest instant after which `plan` may act without a change of
    /// state; `None` when only a change of state can move it.
    pub fn next_deadline(&self, cfg: &HealthConfig) -> Option<Instant> {
        match self.phase {
            InterventionPhase::Watching => self.quiet_until,
            InterventionPhase::Nudging { .. } => self.last_nudge.map(|t| t + cfg.nudge_interval),
            InterventionPhase::Escalated { since } => Some(since + cfg.escalation_timeout),
            InterventionPhase::HandedOff | InterventionPhase::Terminated => None,
        }
    }

    /// An operator's decision on the pending escalation.
    pub fn decide(&mut self, d: Decision, now: Instant) -> Result<(), DecideError> {
        match self.phase {
            InterventionPhase::Escalated { .. } => {}
            InterventionPhase::Watching
            | InterventionPhase::Nudging { .. }
            | InterventionPhase::HandedOff
            | InterventionPhase::Terminated => return Err(DecideError::NoEscalation),
        }
        match d {
            Decision::MoreTime(extra) => {
                self.reset();
                self.quiet_until = Some(now + extra);
            }
            Decision::HandOff => {
                self.phase = InterventionPhase::HandedOff;
                self.pending_nudge = None;
            }
            Decision::Terminate => {
                self.phase = InterventionPhase::Terminated;
                self.pending_nudge = None;
            }
        }
        Ok(())
    }

    /// The agent was terminated elsewhere (operator, limit): nothing left to plan.
    pub fn mark_terminated(&mut self) {
        self.phase = InterventionPhase::Terminated;
        self.pending_nudge = None;
    }

    /// Back to watching, whatever the phase (an operator's reset or resume).
    pub fn clear(&mut self) {
        self.reset();
    }
}
