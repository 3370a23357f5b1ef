//! Health history: what is kept, how per-minute figures are added up, and
//! when old history goes (docs/operations.md, "Health history": 30 days).
//!
//! Two kinds of history. *Transitions* are events that change or act on
//! the state of an agent, a deployment or a breaker ([`is_transition`]):
//! they are already written to the outbox in the transaction of their state
//! change, so the store keeps a copy of those rows. *Minutes* are
//! per-deployment call counts, failures and latency per wall-clock minute;
//! a turn must not cost a database write, so they are added up in memory
//! ([`MinuteAggregator`]) and flushed once a minute as one write of every
//! closed minute ([`MinuteAggregator::take_closed`]). Two instances sharing
//! one PostgreSQL flush the same minute of the same deployment; rows are
//! therefore additive ([`MinuteRow::merge`]) and the store adds them up.
//!
//! Pruning ([`prune_cutoff`]) drops both kinds older than the retention
//! ([`crate::config::HISTORY_RETENTION`] by default) at whole minutes, so a
//! minute is never half pruned. Pure: `now` is an argument.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::event::EventKind;

/// One minute, in milliseconds: the resolution of per-deployment history.
pub const MINUTE_MS: u64 = 60_000;

/// The start of the minute holding `time_ms`.
pub fn minute_of(time_ms: u64) -> u64 {
    time_ms - time_ms % MINUTE_MS
}

/// History older than this instant (ms) is pruned: `now - retention`,
/// rounded down to a whole minute. A retention longer than the epoch keeps
/// everything.
pub fn prune_cutoff(now_ms: u64, retention: Duration) -> u64 {
    let keep = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
    minute_of(now_ms.saturating_sub(keep))
}

/// Whether an event of `kind` is kept in the health history: a state
/// transition (paused, resumed, escalated, ejected, recovered, breaker
/// changes…) or an intervention (nudge, decision, recovery, reset).
/// Exhaustive: a new kind must be placed.
pub fn is_transition(kind: EventKind) -> bool {
    use EventKind as K;
    match kind {
        K::AgentPaused
        | K::AgentResumed
        | K::AgentCircuitOpen
        | K::AgentTerminated
        | K::AgentRestarting
        | K::HealthStateChanged
        | K::HealthNudgeSent
        | K::HealthEscalated
        | K::HealthDecision
        | K::RecoveryStarted
        | K::RecoveryCompleted
        | K::RecoveryFailed
        | K::BreakerStateChanged
        | K::ProviderCooldown
        | K::ProviderRecovered
        | K::GuardLimitHit
        | K::TaskReset
        | K::BudgetExceeded => true,
        // Per-turn and per-job traffic (counted in minutes, or in the job
        // audit) and the event spine's own reports.
        K::AgentFailed
        | K::AgentFallbackUsed
        | K::AgentCompacted
        | K::AgentRetry
        | K::TurnHedged
        | K::TurnCompleted
        | K::TurnFailed
        | K::CheckpointCorrupt
        | K::OutboxShed
        | K::SinkDeadLettered
        | K::JobSubmitted
        | K::JobCompleted
        | K::JobFailed
        | K::JobStepFailed
        | K::JobFailedOver
        | K::JobQueued
        | K::JobExpired
        | K::JobCancelled => false,
    }
}

/// One deployment's calls in one minute. Additive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MinuteRow {
    pub deployment: String,
    pub minute_ms: u64,
    pub calls: u64,
    pub failures: u64,
    /// Sum of the calls' latencies; `avg_ms` is this over `calls`.
    pub latency_sum_ms: u64,
}

impl MinuteRow {
    /// Adds another count of the same deployment and minute.
    pub fn merge(&mut self, other: &MinuteRow) {
        self.calls += other.calls;
        self.failures += other.failures;
        self.latency_sum_ms += other.latency_sum_ms;
    }

    /// Successful calls over calls; `None` for a minute without calls.
    pub fn success_ratio(&self) -> Option<f64> {
        (self.calls > 0)
            .then(|| (self.calls - self.failures.min(self.calls)) as f64 / self.calls as f64)
    }

    /// Mean latency; `None` for a minute without calls.
    pub fn avg_ms(&self) -> Option<u64> {
        (self.calls > 0).then(|| self.latency_sum_ms / self.calls)
    }
}

/// One minute as `GET /history` shows it: the counts with the success
/// ratio and mean latency worked out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MinutePoint {
    pub deployment: String,
    pub minute_ms: u64,
    pub calls: u64,
    pub failures: u64,
    pub success_ratio: Option<f64>,
    pub avg_ms: Option<u64>,
}

impl From<&MinuteRow> for MinutePoint {
    fn from(r: &MinuteRow) -> Self {
        MinutePoint {
            deployment: r.deployment.clone(),
            minute_ms: r.minute_ms,
            calls: r.calls,
            failures: r.failures,
            success_ratio: r.success_ratio(),
            avg_ms: r.avg_ms(),
        }
    }
}

/// Per-deployment minutes being counted, in memory: minute, then
/// deployment, so counting a call to a deployment already seen this minute
/// looks it up by `&str` and allocates nothing (it runs on every attempt).
#[derive(Debug, Default)]
pub struct MinuteAggregator {
    open: BTreeMap<u64, BTreeMap<String, MinuteRow>>,
}

impl MinuteAggregator {
    /// Counts one call to `deployment` that ended at `at_ms`.
    pub fn record(&mut self, deployment: &str, at_ms: u64, ok: bool, latency_ms: u64) {
        let minute_ms = minute_of(at_ms);
        let minute = self.open.entry(minute_ms).or_default();
        let row = match minute.get_mut(deployment) {
            Some(row) => row,
            None => minute
                .entry(deployment.to_owned())
                .or_insert_with(|| MinuteRow {
                    deployment: deployment.to_owned(),
                    minute_ms,
                    calls: 0,
                    failures: 0,
                    latency_sum_ms: 0,
                }),
        };
        row.calls += 1;
        row.failures += u64::from(!ok);
        row.latency_sum_ms = row.latency_sum_ms.saturating_add(latency_ms);
    }

    /// Removes and returns every minute that ended before `now_ms` (the
    /// current minute stays open), oldest first.
    pub fn take_closed(&mut self, now_ms: u64) -> Vec<MinuteRow> {
        let still_open = self.open.split_off(&minute_of(now_ms));
        flatten(std::mem::replace(&mut self.open, still_open))
    }

    /// Removes and returns every minute, the open one too (at shutdown).
    pub fn take_all(&mut self) -> Vec<MinuteRow> {
        flatten(std::mem::take(&mut self.open))
    }

    /// (Deployment, minute) rows being counted.
    pub fn len(&self) -> usize {
        self.open.values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

/// Rows oldest minute first, by deployment within a minute.
fn flatten(minutes: BTreeMap<u64, BTreeMap<String, MinuteRow>>) -> Vec<MinuteRow> {
    minutes
        .into_values()
        .flat_map(BTreeMap::into_values)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HISTORY_RETENTION;

    const T0: u64 = 1_700_000_040_000; // a whole minute

    #[test]
    fn minute_of_floors_to_the_minute() {
        for (t, want) in [
            (T0, T0),
            (T0 + 1, T0),
            (T0 + 59_999, T0),
            (T0 + 60_000, T0 + 60_000),
            (0, 0),
        ] {
            assert_eq!(minute_of(t), want, "{t}");
        }
    }

    #[test]
    fn retention_is_thirty_days() {
        assert_eq!(HISTORY_RETENTION, Duration::from_secs(30 * 24 * 3600));
    }

    #[test]
    fn prune_cutoff_under_a_fake_clock() {
        let day = 24 * 3600 * 1000;
        let now = T0 + 40 * day + 12_345;
        let table = [
            // (now, retention, cutoff)
            (now, HISTORY_RETENTION, minute_of(now - 30 * day)),
            (now, Duration::from_secs(60), minute_of(now - 60_000)),
            (now, Duration::ZERO, minute_of(now)),
            // retention longer than the clock: keep everything
            (5_000, HISTORY_RETENTION, 0),
            (now, Duration::MAX, 0),
        ];
        for (now, retention, want) in table {
            assert_eq!(prune_cutoff(now, retention), want, "{now} {retention:?}");
        }
        // Something at exactly the cutoff is kept; a millisecond older goes.
        let cut = prune_cutoff(now, HISTORY_RETENTION);
        assert!(cut <= now - 30 * day && now - 30 * day - cut < MINUTE_MS);
    }

    #[test]
    fn transitions_are_state_changes_and_interventions_not_traffic() {
        let kept = [
            EventKind::AgentPaused,
            EventKind::AgentResumed,
            EventKind::HealthEscalated,
            EventKind::HealthNudgeSent,
            EventKind::BreakerStateChanged,
            EventKind::ProviderCooldown,
            EventKind::ProviderRecovered,
        ];
        let not = [
            EventKind::TurnCompleted,
            EventKind::AgentRetry,
            EventKind::JobCompleted,
            EventKind::SinkDeadLettered,
        ];
        for k in kept {
            assert!(is_transition(k), "{k}");
        }
        for k in not {
            assert!(!is_transition(k), "{k}");
        }
    }

    #[test]
    fn aggregator_counts_per_deployment_and_minute_and_flushes_closed_minutes_only() {
        let mut a = MinuteAggregator::default();
        a.record("p/a", T0 + 1_000, true, 100);
        a.record("p/a", T0 + 2_000, false, 300);
        a.record("p/b", T0 + 59_999, true, 50);
        a.record("p/a", T0 + 60_000, true, 10);
        assert_eq!(a.len(), 3);
        // Still in minute T0: nothing closed.
        assert!(a.take_closed(T0 + 59_999).is_empty());
        let closed = a.take_closed(T0 + 60_001);
        assert_eq!(
            closed,
            vec![
                MinuteRow {
                    deployment: "p/a".into(),
                    minute_ms: T0,
                    calls: 2,
                    failures: 1,
                    latency_sum_ms: 400
                },
                MinuteRow {
                    deployment: "p/b".into(),
                    minute_ms: T0,
                    calls: 1,
                    failures: 0,
                    latency_sum_ms: 50
                },
            ]
        );
        assert_eq!(closed[0].success_ratio(), Some(0.5));
        assert_eq!(closed[0].avg_ms(), Some(200));
        // The open minute stays until it closes or shutdown takes it.
        assert_eq!(a.len(), 1);
        assert_eq!(a.take_all()[0].minute_ms, T0 + 60_000);
        assert!(a.is_empty());
    }

    #[test]
    fn rows_merge_additively_and_empty_minutes_have_no_ratio() {
        let mut r = MinuteRow {
            deployment: "d".into(),
            minute_ms: T0,
            calls: 3,
            failures: 1,
            latency_sum_ms: 30,
        };
        r.merge(&MinuteRow {
            deployment: "d".into(),
            minute_ms: T0,
            calls: 1,
            failures: 1,
            latency_sum_ms: 10,
        });
        assert_eq!((r.calls, r.failures, r.latency_sum_ms), (4, 2, 40));
        assert_eq!(r.success_ratio(), Some(0.5));
        let empty = MinuteRow {
            deployment: "d".into(),
            minute_ms: T0,
            calls: 0,
            failures: 0,
            latency_sum_ms: 0,
        };
        assert_eq!((empty.success_ratio(), empty.avg_ms()), (None, None));
    }
}
