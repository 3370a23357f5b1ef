//! `retry:` — the retry policy per error family (attempts, backoff bounds,
//! jitter), the wait and probe limits and the turn deadline.

use super::ctx::{Ctx, line_of};
use crate::{RawPolicy, RawRetry};
use hale_core::config::{Jitter, RetryConfig, RetryPolicy};
use std::time::Duration;

impl Ctx<'_> {
    pub(super) fn retry(&mut self, r: &RawRetry) -> RetryConfig {
        let mut rc = RetryConfig::default();
        rc.max_retry_wait = Self::any_ms(&r.max_retry_wait_ms, rc.max_retry_wait);
        rc.probe_interval = self.positive_ms(
            "retry.probe_interval_ms",
            &r.probe_interval_ms,
            rc.probe_interval,
        );
        rc.turn_deadline = self.positive_ms(
            "retry.turn_deadline_ms",
            &r.turn_deadline_ms,
            rc.turn_deadline,
        );
        if let Some(p) = &r.rate_limit {
            rc.rate_limit = self.policy("retry.rate_limit", &p.value, rc.rate_limit);
        }
        if let Some(p) = &r.server_error {
            rc.server_error = self.policy("retry.server_error", &p.value, rc.server_error);
        }
        if let Some(p) = &r.network {
            rc.network = self.policy("retry.network", &p.value, rc.network);
        }
        rc
    }

    fn policy(&mut self, path: &str, r: &RawPolicy, default: RetryPolicy) -> RetryPolicy {
        let mut p = default;
        if let Some(a) = &r.max_attempts {
            if a.value == 0 {
                self.at(
                    format!("{path}.max_attempts"),
                    a,
                    "must be at least 1 (1 = no retry)",
                );
            } else {
                p.max_attempts = a.value;
            }
        }
        p.initial = Self::any_ms(&r.initial_ms, p.initial);
        p.max = Self::any_ms(&r.max_ms, p.max);
        if p.initial > p.max {
            let (key, line) = match (&r.initial_ms, &r.max_ms) {
                (Some(s), _) => ("initial_ms", line_of(s)),
                (None, Some(s)) => ("max_ms", line_of(s)),
                (None, None) => ("initial_ms", None),
            };
            self.err(
                format!("{path}.{key}"),
                line,
                format!(
                    "initial_ms ({}) is greater than max_ms ({})",
                    ms(p.initial),
                    ms(p.max)
                ),
            );
            p.initial = default.initial;
            p.max = default.max;
        }
        if let Some(j) = &r.jitter {
            match j.value.trim() {
                "full" => p.jitter = Jitter::Full,
                "decorrelated" => p.jitter = Jitter::Decorrelated,
                other => self.at(
                    format!("{path}.jitter"),
                    j,
                    format!("unknown jitter `{other}`: expected full or decorrelated"),
                ),
            }
        }
        p
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}
