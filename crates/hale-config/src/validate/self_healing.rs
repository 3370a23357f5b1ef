//! `self_healing:` — restarts, resume probes, the compaction threshold, the
//! circuit breaker (whose rules `null` switches off) and the fallback.

use super::ctx::Ctx;
use crate::{Nullable, RawBreaker, RawSelfHealing};
use hale_core::config::{BreakerConfig, CompactionConfig, SelfHealingConfig};
use std::time::Duration;

impl Ctx<'_> {
    pub(super) fn self_healing(
        &mut self,
        r: &RawSelfHealing,
        sh: &mut SelfHealingConfig,
        compaction: &mut CompactionConfig,
    ) {
        if let Some(e) = &r.enabled {
            sh.enabled = e.value;
        }
        sh.max_consecutive_failures = self.at_least_one(
            "self_healing.max_consecutive_failures",
            &r.max_consecutive_failures,
            sh.max_consecutive_failures,
        );
        self.removed(
            "self_healing.restart_delay_ms",
            &r.restart_delay_ms,
            "use recovery.backoff_ms (the waits of `hale run` before each restart)",
        );
        sh.resume_probe_after = self.positive_ms(
            "self_healing.resume_probe_after_ms",
            &r.resume_probe_after_ms,
            sh.resume_probe_after,
        );
        sh.resume_probe_max = self.positive_ms(
            "self_healing.resume_probe_max_ms",
            &r.resume_probe_max_ms,
            sh.resume_probe_max.max(sh.resume_probe_after),
        );
        if let Some(m) = &r.resume_probe_max_ms
            && sh.resume_probe_max < sh.resume_probe_after
        {
            self.at(
                "self_healing.resume_probe_max_ms",
                m,
                "must not be shorter than resume_probe_after_ms",
            );
        }
        if let Some(t) = &r.compaction_threshold
            && let Some(v) = self.fraction("self_healing.compaction_threshold", t)
        {
            compaction.threshold = v;
        }
        if let Some(b) = &r.circuit_breaker {
            self.breaker(
                "self_healing.circuit_breaker",
                &b.value,
                &mut sh.circuit_breaker,
            );
        }
        if let Some(f) = &r.fallback {
            if let Some(e) = &f.value.enabled {
                sh.fallback_enabled = e.value;
            }
            if let Some(p) = &f.value.providers {
                sh.fallback_providers = self.provider_refs("self_healing.fallback.providers", p);
            }
        }
    }

    /// A nullable count: `null` switches the rule off, 0 is refused.
    fn nullable_count(&mut self, path: &str, v: &Nullable<u32>, slot: &mut Option<u32>) {
        match v {
            None => {}
            Some(None) => *slot = None,
            Some(Some(s)) if s.value == 0 => {
                self.at(path, s, "must be at least 1 (null switches the rule off)")
            }
            Some(Some(s)) => *slot = Some(s.value),
        }
    }

    fn breaker(&mut self, path: &str, r: &RawBreaker, b: &mut BreakerConfig) {
        if let Some(e) = &r.enabled {
            b.enabled = e.value;
        }
        self.nullable_count(
            &format!("{path}.failure_threshold"),
            &r.failure_threshold,
            &mut b.failure_threshold,
        );
        self.nullable_count(
            &format!("{path}.consecutive_failures"),
            &r.consecutive_failures,
            &mut b.consecutive_failures,
        );
        b.window = self.positive_ms(&format!("{path}.window_ms"), &r.window_ms, b.window);
        b.half_open_after = self.positive_ms(
            &format!("{path}.half_open_after_ms"),
            &r.half_open_after_ms,
            b.half_open_after,
        );
        b.max_open = self.positive_ms(&format!("{path}.max_open_ms"), &r.max_open_ms, b.max_open);
        b.half_open_requests = self.at_least_one(
            &format!("{path}.half_open_requests"),
            &r.half_open_requests,
            b.half_open_requests,
        );
        b.success_threshold = self.at_least_one(
            &format!("{path}.success_threshold"),
            &r.success_threshold,
            b.success_threshold,
        );
        match &r.failure_rate {
            None => {}
            Some(None) => b.failure_rate = None,
            Some(Some(s)) => {
                if let Some(v) = self.fraction(&format!("{path}.failure_rate"), s) {
                    b.failure_rate = Some(v);
                }
            }
        }
        b.min_calls = self.at_least_one(&format!("{path}.min_calls"), &r.min_calls, b.min_calls);
        match &r.slow_call_ms {
            None => {}
            Some(None) => b.slow_call = None,
            Some(Some(s)) if s.value == 0 => self.at(
                format!("{path}.slow_call_ms"),
                s,
                "must be greater than 0 (null switches the rule off)",
            ),
            Some(Some(s)) => b.slow_call = Some(Duration::from_millis(s.value)),
        }
    }
}
