//! Pausing an agent and resuming it automatically (docs/operations.md, "What
//! hale does to a call": Pause that heals itself).
//!
//! Why it works so:
//! - **Only a named agent is paused.** `max_consecutive_failures` failed
//!   turns in a row (failures that are not the caller's input) pause an agent
//!   that has an identity (`X-Hale-Agent` or a key's default agent). Traffic
//!   with no identity belongs to no agent loop: pausing it would stop every
//!   unrelated client of the gateway, so its failures are counted only.
//! - **A pause heals itself.** After `resume_probe_after` one request of the
//!   paused agent is let through as a trial; its success resumes the agent
//!   (`agent.resumed`, `by: auto`), its failure doubles the wait, up to
//!   `resume_probe_max` — a crash-loop backoff, so a paused agent costs one
//!   upstream call per wait, never a flood, and never needs a person to come
//!   back once its providers answer.
//! - **An operator's pause is final** until an operator resumes.
//! - Admitting a trial schedules the next one at once (as if it failed), so
//!   of many concurrent requests only one is the trial. Times are wall-clock
//!   milliseconds: a pause outlives a restart.

use crate::config::SelfHealingConfig;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Who paused the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PausedBy {
    /// An operator (API or CLI): never lifted automatically.
    Operator,
    /// hale, after consecutive failed turns: lifted by a successful trial.
    Auto,
}

impl PausedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            PausedBy::Operator => "operator",
            PausedBy::Auto => "auto",
        }
    }
}

/// Whether a failed turn pauses the agent now.
pub fn should_pause(
    cfg: &SelfHealingConfig,
    named: bool,
    already_paused: bool,
    consecutive_failures: u32,
) -> bool {
    cfg.enabled && named && !already_paused && consecutive_failures >= cfg.max_consecutive_failures
}

/// The wait before the next trial after `failed_trials` failed ones:
/// `resume_probe_after × 2^failed_trials`, at most `resume_probe_max`.
pub fn trial_delay(cfg: &SelfHealingConfig, failed_trials: u32) -> Duration {
    let factor = 1u32.checked_shl(failed_trials.min(31)).unwrap_or(u32::MAX);
    cfg.resume_probe_after
        .saturating_mul(factor)
        .min(cfg.resume_probe_max.max(cfg.resume_probe_after))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A running pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    pub by: PausedBy,
    pub since_ms: u64,
    /// Trials that failed since the pause began.
    #[serde(default)]
    pub failed_trials: u32,
    /// When the next trial may go through (`None` for an operator's pause).
    #[serde(default)]
    pub next_trial_ms: Option<u64>,
}

/// What the agent gate does with a request of a paused agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Refused with 423; `next_trial_in_ms` when an automatic trial is due later.
    Refuse { next_trial_in_ms: Option<u64> },
    /// Let through as the trial of an automatic pause.
    Trial,
}

impl Pause {
    /// A pause by hale after failures at `now_ms`.
    pub fn auto(cfg: &SelfHealingConfig, now_ms: u64) -> Self {
        Self {
            by: PausedBy::Auto,
            since_ms: now_ms,
            failed_trials: 0,
            next_trial_ms: Some(now_ms.saturating_add(ms(trial_delay(cfg, 0)))),
        }
    }

    /// A pause by an operator at `now_ms`.
    pub fn operator(now_ms: u64) -> Self {
        Self {
            by: PausedBy::Operator,
            since_ms: now_ms,
            failed_trials: 0,
            next_trial_ms: None,
        }
    }

    /// Refuse, or let this request through as the trial. A trial schedules
    /// the next one at once, as if it will fail, so concurrent requests are
    /// refused meanwhile.
    pub fn admit(&mut self, cfg: &SelfHealingConfig, now_ms: u64) -> Admit {
        match (self.by, self.next_trial_ms) {
            (PausedBy::Auto, Some(at)) if now_ms >= at => {
                let next = trial_delay(cfg, self.failed_trials.saturating_add(1));
                self.next_trial_ms = Some(now_ms.saturating_add(ms(next)));
                Admit::Trial
            }
            (PausedBy::Auto, Some(at)) => Admit::Refuse {
                next_trial_in_ms: Some(at - now_ms),
            },
            (PausedBy::Auto, None) | (PausedBy::Operator, _) => Admit::Refuse {
                next_trial_in_ms: None,
            },
        }
    }

    /// The trial failed at `now_ms`: the pause goes on and the wait doubles.
    pub fn trial_failed(&mut self, cfg: &SelfHealingConfig, now_ms: u64) {
        if self.by == PausedBy::Auto {
            self.failed_trials = self.failed_trials.saturating_add(1);
            self.next_trial_ms =
                Some(now_ms.saturating_add(ms(trial_delay(cfg, self.failed_trials))));
        }
    }

    /// Until the next trial, for views.
    pub fn next_trial_in_ms(&self, now_ms: u64) -> Option<u64> {
        self.next_trial_ms.map(|at| at.saturating_sub(now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SelfHealingConfig {
        SelfHealingConfig::default()
    }

    #[test]
    fn only_a_named_agent_is_paused_at_the_threshold() {
        let c = cfg();
        let n = c.max_consecutive_failures;
        assert!(!should_pause(&c, true, false, n - 1));
        assert!(should_pause(&c, true, false, n));
        assert!(should_pause(&c, true, false, n + 1));
        assert!(
            !should_pause(&c, false, false, n + 10),
            "no identity, no pause"
        );
        assert!(!should_pause(&c, true, true, n), "already paused");
        let off = SelfHealingConfig {
            enabled: false,
            ..cfg()
        };
        assert!(!should_pause(&off, true, false, n));
    }

    #[test]
    fn trial_delay_doubles_up_to_the_max() {
        let c = cfg();
        let s = Duration::from_secs;
        let got: Vec<Duration> = (0..6).map(|n| trial_delay(&c, n)).collect();
        assert_eq!(got, [s(30), s(60), s(120), s(240), s(300), s(300)]);
        assert_eq!(trial_delay(&c, u32::MAX), s(300));
    }

    #[test]
    fn an_automatic_pause_lets_one_trial_through_after_the_wait() {
        let c = cfg();
        let t0 = 1_000_000;
        let mut p = Pause::auto(&c, t0);
        assert_eq!(
            p.admit(&c, t0 + 29_999),
            Admit::Refuse {
                next_trial_in_ms: Some(1)
            }
        );
        assert_eq!(p.admit(&c, t0 + 30_000), Admit::Trial);
        // A concurrent request while the trial runs is refused.
        assert!(matches!(p.admit(&c, t0 + 30_001), Admit::Refuse { .. }));
        // The trial failed: next in 60 s, then 120 s.
        p.trial_failed(&c, t0 + 31_000);
        assert!(matches!(p.admit(&c, t0 + 90_999), Admit::Refuse { .. }));
        assert_eq!(p.admit(&c, t0 + 91_000), Admit::Trial);
        p.trial_failed(&c, t0 + 91_000);
        assert_eq!(p.next_trial_in_ms(t0 + 91_000), Some(120_000));
        assert_eq!(p.failed_trials, 2);
    }

    #[test]
    fn a_trial_that_never_reports_still_allows_the_next_one() {
        let c = cfg();
        let t0 = 0;
        let mut p = Pause::auto(&c, t0);
        assert_eq!(p.admit(&c, 30_000), Admit::Trial);
        // No verdict (the caller went away): the next trial is already scheduled.
        assert_eq!(p.admit(&c, 30_000 + 60_000), Admit::Trial);
    }

    #[test]
    fn an_operators_pause_is_never_lifted_automatically() {
        let c = cfg();
        let mut p = Pause::operator(0);
        for t in [0, 30_000, 3_600_000, u64::MAX / 2] {
            assert_eq!(
                p.admit(&c, t),
                Admit::Refuse {
                    next_trial_in_ms: None
                }
            );
        }
        p.trial_failed(&c, 10);
        assert_eq!(p.next_trial_ms, None);
    }

    #[test]
    fn a_pause_round_trips_through_json() {
        let p = Pause::auto(&cfg(), 5);
        let v = serde_json::to_value(p).unwrap();
        assert_eq!(v["by"], "auto");
        let back: Pause = serde_json::from_value(v).unwrap();
        assert_eq!(back, p);
    }
}
