//! `recovery:` — how often an agent may be recovered and the backoff between
//! recoveries.

use super::ctx::Ctx;
use crate::RawRecovery;
use hale_core::config::RecoveryConfig;
use std::time::Duration;

impl Ctx<'_> {
    pub(super) fn recovery(&mut self, r: &RawRecovery) -> RecoveryConfig {
        let mut rc = RecoveryConfig::default();
        if let Some(v) = &r.max_per_task {
            rc.max_per_task = v.value;
        }
        if let Some(v) = &r.max_per_hour {
            rc.max_per_hour = v.value;
        }
        if let Some(b) = &r.backoff_ms {
            if b.value.is_empty() {
                self.at("recovery.backoff_ms", b, "must list at least one delay");
            } else {
                rc.backoff = b
                    .value
                    .iter()
                    .map(|s| Duration::from_millis(s.value))
                    .collect();
            }
        }
        rc
    }
}
