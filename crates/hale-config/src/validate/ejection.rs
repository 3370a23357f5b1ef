//! `ejection:` — when a failing base URL is ejected, and for how long.

use super::ctx::Ctx;
use crate::RawEjection;
use hale_core::config::EjectionConfig;

impl Ctx<'_> {
    pub(super) fn ejection(&mut self, r: &RawEjection) -> EjectionConfig {
        let d = EjectionConfig::default();
        EjectionConfig {
            eject_after: self.at_least_one("ejection.eject_after", &r.eject_after, d.eject_after),
            failure_rate: r
                .failure_rate
                .as_ref()
                .and_then(|f| self.fraction("ejection.failure_rate", f))
                .unwrap_or(d.failure_rate),
            min_calls: self.at_least_one("ejection.min_calls", &r.min_calls, d.min_calls),
            window: self.positive_ms("ejection.window_ms", &r.window_ms, d.window),
            max_ejection: self.positive_ms(
                "ejection.max_ejection_ms",
                &r.max_ejection_ms,
                d.max_ejection,
            ),
        }
    }
}
