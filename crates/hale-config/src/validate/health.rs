//! `health:` — heartbeat, stale and stuck timeouts, nudges and escalation.

use super::ctx::Ctx;
use crate::RawHealth;
use hale_core::config::HealthConfig;

impl Ctx<'_> {
    pub(super) fn health(&mut self, r: &RawHealth) -> HealthConfig {
        let mut h = HealthConfig::default();
        self.removed(
            "health.heartbeat_timeout_ms",
            &r.heartbeat_timeout_ms,
            "use health.stale_after_ms (no heartbeat and no call for this long: stale)",
        );
        h.stale_after = self.positive_ms("health.stale_after_ms", &r.stale_after_ms, h.stale_after);
        h.stuck_after = self.positive_ms("health.stuck_after_ms", &r.stuck_after_ms, h.stuck_after);
        if let Some(n) = &r.nudge {
            if let Some(a) = &n.value.max_attempts {
                h.nudge_max_attempts = a.value;
            }
            h.nudge_interval = self.positive_ms(
                "health.nudge.interval_ms",
                &n.value.interval_ms,
                h.nudge_interval,
            );
        }
        h.escalation_timeout = self.positive_ms(
            "health.escalation_timeout_ms",
            &r.escalation_timeout_ms,
            h.escalation_timeout,
        );
        h
    }
}
