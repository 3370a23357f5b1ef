//! Typed events (docs/operations.md, "Events and sinks").
//!
//! Every action hale takes becomes one [`Event`]: a ULID (time-ordered, so the
//! id is also the delivery order), a wall time, a [`EventKind`], the agent,
//! task and turn it concerns, and a JSON payload. Ids are built from the wall
//! time and random bits passed in, keeping this module pure.

use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};
use ulid::Ulid;

macro_rules! event_kinds {
    ($($variant:ident => $name:literal),* $(,)?) => {
        /// What happened.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum EventKind {
            $(#[serde(rename = $name)] #[doc = $name] $variant,)*
        }

        impl EventKind {
            /// Every kind.
            pub const ALL: &'static [EventKind] = &[$(EventKind::$variant),*];

            /// The dotted name used on the wire, in filters and NATS subjects.
            pub fn as_str(self) -> &'static str {
                match self { $(EventKind::$variant => $name,)* }
            }

            /// Parses a dotted name.
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($name => Some(EventKind::$variant),)* _ => None }
            }
        }
    };
}

event_kinds! {
    AgentFailed => "agent.failed",
    AgentRestarting => "agent.restarting",
    AgentPaused => "agent.paused",
    AgentResumed => "agent.resumed",
    AgentCircuitOpen => "agent.circuit_open",
    AgentFallbackUsed => "agent.fallback_used",
    AgentCompacted => "agent.compacted",
    AgentTerminated => "agent.terminated",
    AgentRetry => "agent.retry",
    TurnHedged => "turn.hedged",
    TurnCompleted => "turn.completed",
    TurnFailed => "turn.failed",
    HealthStateChanged => "health.state_changed",
    HealthNudgeSent => "health.nudge_sent",
    HealthEscalated => "health.escalated",
    HealthDecision => "health.decision",
    RecoveryStarted => "recovery.started",
    RecoveryCompleted => "recovery.completed",
    RecoveryFailed => "recovery.failed",
    BreakerStateChanged => "breaker.state_changed",
    ProviderCooldown => "provider.cooldown",
    ProviderRecovered => "provider.recovered",
    GuardLimitHit => "guard.limit_hit",
    TaskReset => "task.reset",
    BudgetExceeded => "budget.exceeded",
    CheckpointCorrupt => "checkpoint.corrupt",
    OutboxShed => "outbox.shed",
    SinkDeadLettered => "sink.dead_lettered",
    JobSubmitted => "job.submitted",
    JobCompleted => "job.completed",
    JobFailed => "job.failed",
    JobStepFailed => "job.step_failed",
    JobFailedOver => "job.failed_over",
    JobQueued => "job.queued",
    JobExpired => "job.expired",
    JobCancelled => "job.cancelled",
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// ULID; lexicographic order is time order.
    pub id: String,
    /// Milliseconds since the Unix epoch.
    pub time_ms: u64,
    pub kind: EventKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
    #[serde(default)]
    pub payload: serde_json::Value,
}

impl Event {
    /// A new event at `time_ms`, its id drawn from `rng`.
    pub fn new<R: Rng + ?Sized>(kind: EventKind, time_ms: u64, rng: &mut R) -> Self {
        let random: u128 = rng.random::<u128>() & ((1u128 << 80) - 1);
        Self {
            id: Ulid::from_parts(time_ms, random).to_string(),
            time_ms,
            kind,
            agent: None,
            task: None,
            turn: None,
            payload: serde_json::Value::Null,
        }
    }

    pub fn agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }
    pub fn task(mut self, task: impl Into<String>) -> Self {
        self.task = Some(task.into());
        self
    }
    pub fn turn(mut self, turn: impl Into<String>) -> Self {
        self.turn = Some(turn.into());
        self
    }
    pub fn payload(mut self, payload: serde_json::Value) -> Self {
        self.payload = payload;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_by_name() {
        for k in EventKind::ALL {
            assert_eq!(EventKind::parse(k.as_str()), Some(*k));
            let json = serde_json::to_string(k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
        }
        assert_eq!(EventKind::parse("nope"), None);
    }

    #[test]
    fn ids_sort_in_time_order() {
        let mut rng = rand::rng();
        let a = Event::new(EventKind::AgentPaused, 1_000, &mut rng);
        let b = Event::new(EventKind::AgentPaused, 2_000, &mut rng);
        assert!(a.id < b.id);
        assert_eq!(a.id.len(), 26);
    }
}
