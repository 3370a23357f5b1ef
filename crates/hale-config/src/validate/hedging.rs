//! `hedging:` — when a silent attempt is hedged on the next target
//! (the rules: `hale_core::hedge`), checked: durations over 0, the floor
//! not over the ceiling, the quantile and the budget's share fractions, the
//! slow rule's factor 0 (off) or at least the hedge factor and its floor not
//! under the hedge floor (so no attempt is slow before its hedge point).

use super::ctx::Ctx;
use crate::RawHedging;
use hale_core::config::HedgingConfig;
use hale_core::hedge::HEDGE_FACTOR;

impl Ctx<'_> {
    pub(super) fn hedging(&mut self, r: &RawHedging) -> HedgingConfig {
        let d = HedgingConfig::default();
        let floor = self.positive_ms("hedging.floor_ms", &r.floor_ms, d.floor);
        let ceiling = self.positive_ms("hedging.ceiling_ms", &r.ceiling_ms, d.ceiling);
        if floor > ceiling {
            let msg = format!(
                "hedging.floor_ms ({}) is over hedging.ceiling_ms ({})",
                floor.as_millis(),
                ceiling.as_millis()
            );
            match (&r.ceiling_ms, &r.floor_ms) {
                (Some(c), _) => self.at("hedging.ceiling_ms", c, msg),
                (None, Some(f)) => self.at("hedging.floor_ms", f, msg),
                (None, None) => {}
            }
        }
        let slow_floor = self.positive_ms("hedging.slow_floor_ms", &r.slow_floor_ms, d.slow_floor);
        if let Some(f) = &r.slow_floor_ms
            && slow_floor < floor
        {
            let msg = format!(
                "hedging.slow_floor_ms ({}) is under hedging.floor_ms ({})",
                slow_floor.as_millis(),
                floor.as_millis()
            );
            self.at("hedging.slow_floor_ms", f, msg);
        }
        let slow_factor = match &r.slow_factor {
            None => d.slow_factor,
            Some(s) if s.value == 0.0 || (s.value.is_finite() && s.value >= HEDGE_FACTOR) => {
                s.value
            }
            Some(s) => {
                let msg = format!("{} is neither 0 (off) nor at least {HEDGE_FACTOR}", s.value);
                self.at("hedging.slow_factor", s, msg);
                d.slow_factor
            }
        };
        HedgingConfig {
            enabled: r.enabled.as_ref().map_or(d.enabled, |b| b.value),
            default_after: self.positive_ms(
                "hedging.default_after_ms",
                &r.default_after_ms,
                d.default_after,
            ),
            floor,
            ceiling,
            quantile: r
                .quantile
                .as_ref()
                .and_then(|q| self.fraction("hedging.quantile", q))
                .unwrap_or(d.quantile),
            history: self.at_least_one("hedging.history", &r.history, d.history as u32) as usize,
            budget_share: r
                .budget_share
                .as_ref()
                .and_then(|q| self.fraction("hedging.budget_share", q))
                .unwrap_or(d.budget_share),
            budget_window: self.positive_ms(
                "hedging.budget_window_ms",
                &r.budget_window_ms,
                d.budget_window,
            ),
            slow_factor,
            slow_floor,
        }
    }
}
