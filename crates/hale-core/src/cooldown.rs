//! Per-provider cooldowns and probing (DESIGN §3 "Cooldowns", "Cooldowns
//! grow", "Probing").
//!
//! A provider that fails with a class that has a cooldown (the `cooldown_ms`
//! table) is skipped for that long. This module keeps that state for one
//! provider and answers, per request, whether the provider may be used
//! ([`Gate::Open`]), should get this one request as a probe ([`Gate::Probe`]),
//! or should be skipped ([`Gate::Skip`]).
//!
//! Why it works so:
//! - **The table is a ceiling, not a sentence.** A rate-limit cooldown starts
//!   at the provider's `Retry-After` (else `rate_limit_initial`) and doubles
//!   only when the provider is rate-limited again during a cooldown or within
//!   the previous cooldown's length after it ended — one 429 is a hiccup, a
//!   string of them is a storm. Other classes take the table value at once.
//! - **Probes end cooldowns early.** Every `probe_interval` one live request
//!   is let through; `gate()` marks that probe as taken, so of many concurrent
//!   callers only one probes. Its success ([`Cooldown::on_success`]) ends the
//!   cooldown; its failure starts a new one (and a new probe schedule).
//!   Classes that do not heal by themselves (auth, billing, model_not_found)
//!   are not probed mid-cooldown: a bad key stays bad until someone fixes it,
//!   so the first request after the cooldown is their probe.
//! - When a provider fails with a second class during a cooldown, the one
//!   that ends later wins: a 30 s network cooldown never shortens a 10 min
//!   auth cooldown.

use crate::class::ErrorClass;
use crate::config::CooldownConfig;
use serde::Serialize;
use std::time::{Duration, Instant};

/// A provider with a failure this recent is `degraded` (when not `down`).
pub const DEGRADED_WINDOW: Duration = Duration::from_secs(60);

/// The longest any cooldown lasts, whatever an (untrusted) `Retry-After` or
/// the config says; keeps `Instant` arithmetic from overflowing.
pub const MAX_COOLDOWN: Duration = Duration::from_secs(24 * 60 * 60);

/// A provider's health, as shown on the dashboard and in `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderHealth {
    Healthy,
    /// A failure within [`DEGRADED_WINDOW`].
    Degraded,
    /// In a cooldown.
    Down,
}

impl ProviderHealth {
    /// A low-cardinality label for metrics, logs and events.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderHealth::Healthy => "healthy",
            ProviderHealth::Degraded => "degraded",
            ProviderHealth::Down => "down",
        }
    }
}

/// May a request go to this provider now?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// No cooldown.
    Open,
    /// In a cooldown, but this request is its probe (short timeout, move on
    /// at once if it fails).
    Probe,
    /// In a cooldown for `class` until `until`.
    Skip { until: Instant, class: ErrorClass },
}

/// A serialisable view of one provider's cooldown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CooldownSnapshot {
    /// The class of the running cooldown, if any.
    pub class: Option<ErrorClass>,
    /// Time left in the cooldown; 0 when none.
    pub remaining_ms: u64,
    pub health: ProviderHealth,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Active {
    class: ErrorClass,
    until: Instant,
    /// The failure or probe the next probe is timed from.
    probe_from: Instant,
}

/// The last rate-limit cooldown, for growth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RateLimitSpell {
    length: Duration,
    /// When it ended (or will end).
    end: Instant,
}

/// One provider's cooldown state.
#[derive(Debug, Clone, Default)]
pub struct Cooldown {
    active: Option<Active>,
    rate_limit: Option<RateLimitSpell>,
    last_failure: Option<Instant>,
}

/// Whether failures of this class say something is wrong with the provider
/// (for `degraded`); a caller's bad request or hale's own limits do not.
fn is_provider_fault(class: ErrorClass) -> bool {
    match class {
        ErrorClass::Network
        | ErrorClass::Timeout
        | ErrorClass::RateLimit
        | ErrorClass::Overloaded
        | ErrorClass::StreamBroken
        | ErrorClass::Auth
        | ErrorClass::Billing
        | ErrorClass::ModelNotFound
        | ErrorClass::Format
        | ErrorClass::Unknown => true,
        ErrorClass::ContextOverflow
        | ErrorClass::ContentPolicy
        | ErrorClass::BadRequest
        | ErrorClass::Budget
        | ErrorClass::Safety
        | ErrorClass::Policy => false,
    }
}

/// Whether a cooldown of this class may end by itself (and so is probed
/// every `probe_interval`), or needs someone to fix something (probed only
/// when the cooldown ends).
pub fn heals_by_itself(class: ErrorClass) -> bool {
    match class {
        ErrorClass::Auth | ErrorClass::Billing | ErrorClass::ModelNotFound => false,
        ErrorClass::Network
        | ErrorClass::Timeout
        | ErrorClass::RateLimit
        | ErrorClass::Overloaded
        | ErrorClass::StreamBroken
        | ErrorClass::ContextOverflow
        | ErrorClass::ContentPolicy
        | ErrorClass::BadRequest
        | ErrorClass::Format
        | ErrorClass::Budget
        | ErrorClass::Safety
        | ErrorClass::Policy
        | ErrorClass::Unknown => true,
    }
}

fn add(now: Instant, d: Duration) -> Instant {
    now.checked_add(d.min(MAX_COOLDOWN)).unwrap_or(now)
}

impl Cooldown {
    /// No cooldown, no recent failure.
    pub fn new() -> Self {
        Self::default()
    }

    /// A failure of `class`; returns the cooldown this failure applied (None
    /// for classes without one). When a longer cooldown is already running,
    /// it keeps running.
    pub fn on_failure(
        &mut self,
        cfg: &CooldownConfig,
        class: ErrorClass,
        retry_after: Option<Duration>,
        now: Instant,
    ) -> Option<Duration> {
        if is_provider_fault(class) {
            self.last_failure = Some(now);
        }
        let ceiling = cfg.for_class(class)?.min(MAX_COOLDOWN);
        let length = if class == ErrorClass::RateLimit {
            let start = retry_after.unwrap_or(cfg.rate_limit_initial);
            let grown = match self.rate_limit {
                Some(prev) if now <= add(prev.end, prev.length) => {
                    start.max(prev.length.saturating_mul(2))
                }
                Some(_) | None => start,
            };
            let length = grown.min(ceiling);
            self.rate_limit = Some(RateLimitSpell {
                length,
                end: add(now, length),
            });
            length
        } else {
            ceiling
        };
        let until = add(now, length);
        let keep_running = self
            .active
            .is_some_and(|a| a.until > until && now < a.until);
        if !keep_running {
            self.active = Some(Active {
                class,
                until,
                probe_from: now,
            });
        }
        // A failure (a failed probe included) restarts the probe schedule.
        if let Some(a) = self.active.as_mut() {
            a.probe_from = now;
        }
        Some(length)
    }

    /// A success. Returns true when it ended a running cooldown (a recovery,
    /// worth a `provider.cooldown` event).
    pub fn on_success(&mut self, now: Instant) -> bool {
        let Some(a) = self.active.take() else {
            return false;
        };
        if a.class == ErrorClass::RateLimit
            && let Some(rl) = self.rate_limit.as_mut()
            && now < rl.end
        {
            rl.end = now;
        }
        now < a.until
    }

    /// Whether a request may go to this provider now. Getting
    /// [`Gate::Probe`] takes the probe: the next one is due `probe_interval`
    /// later, so concurrent callers do not all probe.
    pub fn gate(&mut self, probe_interval: Duration, now: Instant) -> Gate {
        let gate = self.peek(probe_interval, now);
        match gate {
            Gate::Open => self.active = None,
            Gate::Probe => {
                if let Some(a) = self.active.as_mut() {
                    a.probe_from = now;
                }
            }
            Gate::Skip { .. } => {}
        }
        gate
    }

    /// What [`Cooldown::gate`] would answer, without taking a probe.
    pub fn peek(&self, probe_interval: Duration, now: Instant) -> Gate {
        let Some(a) = self.active else {
            return Gate::Open;
        };
        if now >= a.until {
            return Gate::Open;
        }
        let probe_due = now >= add(a.probe_from, probe_interval);
        if heals_by_itself(a.class) && probe_due {
            Gate::Probe
        } else {
            Gate::Skip {
                until: a.until,
                class: a.class,
            }
        }
    }

    /// Down in a cooldown; degraded after a provider fault within
    /// [`DEGRADED_WINDOW`]; else healthy.
    pub fn health(&self, now: Instant) -> ProviderHealth {
        if self.active.is_some_and(|a| now < a.until) {
            return ProviderHealth::Down;
        }
        match self.last_failure {
            Some(t) if now.saturating_duration_since(t) < DEGRADED_WINDOW => {
                ProviderHealth::Degraded
            }
            Some(_) | None => ProviderHealth::Healthy,
        }
    }

    /// A serialisable view at `now`.
    pub fn snapshot(&self, now: Instant) -> CooldownSnapshot {
        let running = self.active.filter(|a| now < a.until);
        CooldownSnapshot {
            class: running.map(|a| a.class),
            remaining_ms: running
                .map(|a| {
                    u64::try_from(a.until.saturating_duration_since(now).as_millis())
                        .unwrap_or(u64::MAX)
                })
                .unwrap_or(0),
            health: self.health(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }
    const PROBE: Duration = Duration::from_secs(10);

    #[test]
    fn each_class_gets_its_table_cooldown() {
        let cfg = CooldownConfig::default();
        let t0 = Instant::now();
        for class in ErrorClass::ALL {
            let mut c = Cooldown::new();
            let applied = c.on_failure(&cfg, class, None, t0);
            if class == ErrorClass::RateLimit {
                assert_eq!(applied, Some(cfg.rate_limit_initial));
                continue;
            }
            assert_eq!(applied, cfg.for_class(class), "{class}");
            match applied {
                Some(d) => {
                    assert!(matches!(c.peek(PROBE, t0), Gate::Skip { class: k, .. } if k == class));
                    assert_eq!(
                        c.peek(PROBE, t0 + d),
                        Gate::Open,
                        "{class} ends after {d:?}"
                    );
                    assert_eq!(c.snapshot(t0).remaining_ms, d.as_millis() as u64);
                }
                None => assert_eq!(c.peek(PROBE, t0), Gate::Open, "{class} has no cooldown"),
            }
        }
    }

    #[test]
    fn rate_limit_starts_at_retry_after() {
        let cfg = CooldownConfig::default();
        let t0 = Instant::now();
        let mut c = Cooldown::new();
        assert_eq!(
            c.on_failure(&cfg, ErrorClass::RateLimit, Some(s(7)), t0),
            Some(s(7))
        );
        assert_eq!(c.snapshot(t0).remaining_ms, 7_000);
        assert_eq!(c.snapshot(t0).class, Some(ErrorClass::RateLimit));
    }

    #[test]
    fn rate_limit_cooldown_doubles_in_a_storm_up_to_the_table_value() {
        let cfg = CooldownConfig::default();
        let cap = cfg
            .for_class(ErrorClass::RateLimit)
            .expect("table has rate_limit");
        let t0 = Instant::now();
        let mut c = Cooldown::new();
        let mut now = t0;
        let mut expected = cfg.rate_limit_initial;
        for _ in 0..10 {
            let applied = c
                .on_failure(&cfg, ErrorClass::RateLimit, None, now)
                .expect("rate limits cool down");
            assert_eq!(applied, expected.min(cap));
            // Rate-limited again just as the cooldown ends.
            now += applied;
            expected = applied * 2;
        }
        assert_eq!(c.snapshot(now).remaining_ms, 0);
        assert_eq!(
            c.on_failure(&cfg, ErrorClass::RateLimit, None, now),
            Some(cap)
        );
    }

    #[test]
    fn rate_limit_growth_resets_after_a_quiet_spell() {
        let cfg = CooldownConfig::default();
        let t0 = Instant::now();
        let mut c = Cooldown::new();
        c.on_failure(&cfg, ErrorClass::RateLimit, Some(s(4)), t0);
        // Within the previous length (4 s) after it ended (t0+4): grows.
        assert_eq!(
            c.on_failure(&cfg, ErrorClass::RateLimit, None, t0 + s(8)),
            Some(s(8))
        );
        // Long after that spell (ended t0+16, +8 s grace): starts over.
        assert_eq!(
            c.on_failure(&cfg, ErrorClass::RateLimit, None, t0 + s(25)),
            Some(cfg.rate_limit_initial)
        );
    }

    #[test]
    fn probe_every_interval_and_only_one_per_interval() {
        let cfg = CooldownConfig::default();
        let t0 = Instant::now();
        let mut c = Cooldown::new();
        c.on_failure(&cfg, ErrorClass::Overloaded, None, t0); // 120 s
        assert!(matches!(c.gate(PROBE, t0 + s(9)), Gate::Skip { .. }));
        assert_eq!(c.gate(PROBE, t0 + s(10)), Gate::Probe);
        // A concurrent caller does not get a second probe.
        assert!(matches!(c.gate(PROBE, t0 + s(10)), Gate::Skip { .. }));
        assert!(matches!(c.gate(PROBE, t0 + s(19)), Gate::Skip { .. }));
        assert_eq!(c.gate(PROBE, t0 + s(20)), Gate::Probe);
        assert!(matches!(c.gate(PROBE, t0 + s(25)), Gate::Skip { .. }));
        // peek does not take the probe.
        assert_eq!(c.peek(PROBE, t0 + s(30)), Gate::Probe);
        assert_eq!(c.peek(PROBE, t0 + s(30)), Gate::Probe);
    }

    #[test]
    fn a_failed_probe_restarts_the_cooldown_and_its_schedule() {
        let cfg = CooldownConfig::default();
        let t0 = Instant::now();
        let mut c = Cooldown::new();
        c.on_failure(&cfg, ErrorClass::Network, None, t0); // 30 s
        assert_eq!(c.gate(PROBE, t0 + s(10)), Gate::Probe);
        c.on_failure(&cfg, ErrorClass::Network, None, t0 + s(11));
        assert!(matches!(c.gate(PROBE, t0 + s(20)), Gate::Skip { .. }));
        assert_eq!(c.gate(PROBE, t0 + s(21)), Gate::Probe);
        assert_eq!(c.snapshot(t0 + s(21)).remaining_ms, 20_000);
    }

    #[test]
    fn no_probe_for_classes_that_do_not_heal_until_expiry() {
        let cfg = CooldownConfig::default();
        let t0 = Instant::now();
        for class in [
            ErrorClass::Auth,
            ErrorClass::Billing,
            ErrorClass::ModelNotFound,
        ] {
            let mut c = Cooldown::new();
            let d = c.on_failure(&cfg, class, None, t0).expect("has a cooldown");
            let mut t = t0;
            while t + PROBE < t0 + d {
                t += PROBE;
                assert_eq!(
                    c.gate(PROBE, t),
                    Gate::Skip {
                        until: t0 + d,
                        class
                    },
                    "{class} at {:?}",
                    t - t0
                );
            }
            assert_eq!(c.gate(PROBE, t0 + d), Gate::Open, "{class} after expiry");
        }
    }

    #[test]
    fn success_ends_the_cooldown() {
        let cfg = CooldownConfig::default();
        let t0 = Instant::now();
        let mut c = Cooldown::new();
        c.on_failure(&cfg, ErrorClass::Overloaded, None, t0);
        assert_eq!(c.gate(PROBE, t0 + s(10)), Gate::Probe);
        assert!(
            c.on_success(t0 + s(11)),
            "the probe's success is a recovery"
        );
        assert_eq!(c.gate(PROBE, t0 + s(11)), Gate::Open);
        assert!(!c.on_success(t0 + s(12)), "nothing left to end");
        // A success after the cooldown already ran out is not a recovery.
        c.on_failure(&cfg, ErrorClass::Network, None, t0 + s(20));
        assert!(!c.on_success(t0 + s(60)));
    }

    #[test]
    fn a_shorter_cooldown_does_not_cut_a_longer_one() {
        let cfg = CooldownConfig::default();
        let t0 = Instant::now();
        let mut c = Cooldown::new();
        c.on_failure(&cfg, ErrorClass::Auth, None, t0); // 600 s
        assert_eq!(
            c.on_failure(&cfg, ErrorClass::Network, None, t0 + s(1)),
            Some(s(30))
        );
        assert_eq!(c.snapshot(t0 + s(1)).class, Some(ErrorClass::Auth));
        assert!(matches!(
            c.gate(PROBE, t0 + s(100)),
            Gate::Skip {
                class: ErrorClass::Auth,
                ..
            }
        ));
        // A longer one replaces a shorter one.
        let mut c = Cooldown::new();
        c.on_failure(&cfg, ErrorClass::Network, None, t0);
        c.on_failure(&cfg, ErrorClass::Billing, None, t0 + s(1));
        assert_eq!(c.snapshot(t0 + s(1)).class, Some(ErrorClass::Billing));
    }

    #[test]
    fn untrusted_huge_retry_after_is_capped_without_panic() {
        let cfg = CooldownConfig::default();
        let t0 = Instant::now();
        let mut c = Cooldown::new();
        let d = c.on_failure(&cfg, ErrorClass::RateLimit, Some(Duration::MAX), t0);
        assert_eq!(d, cfg.for_class(ErrorClass::RateLimit));
    }

    #[test]
    fn health_states() {
        let cfg = CooldownConfig::default();
        let t0 = Instant::now();
        let mut c = Cooldown::new();
        assert_eq!(c.health(t0), ProviderHealth::Healthy);
        c.on_failure(&cfg, ErrorClass::Network, None, t0); // 30 s
        assert_eq!(c.health(t0 + s(29)), ProviderHealth::Down);
        assert_eq!(c.health(t0 + s(30)), ProviderHealth::Degraded);
        assert_eq!(c.health(t0 + DEGRADED_WINDOW), ProviderHealth::Healthy);
        // A failure without a cooldown that is the provider's fault degrades.
        c.on_failure(&cfg, ErrorClass::Format, None, t0 + s(100));
        assert_eq!(c.health(t0 + s(101)), ProviderHealth::Degraded);
        // A caller's bad request does not.
        let mut c = Cooldown::new();
        assert_eq!(c.on_failure(&cfg, ErrorClass::BadRequest, None, t0), None);
        assert_eq!(c.health(t0), ProviderHealth::Healthy);
        let snap = serde_json::to_value(c.snapshot(t0)).unwrap();
        assert_eq!(snap["health"], "healthy");
        assert_eq!(snap["remaining_ms"], 0);
    }
}
