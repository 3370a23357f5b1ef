//! `crawling:` — when a stream far below its deployment's usual rate is a
//! failure (the rule: `hale_core::crawl`), checked: `below` a fraction,
//! durations over 0, at least one sample.

use super::ctx::Ctx;
use crate::RawCrawling;
use hale_core::config::CrawlingConfig;

impl Ctx<'_> {
    pub(super) fn crawling(&mut self, r: &RawCrawling) -> CrawlingConfig {
        let d = CrawlingConfig::default();
        CrawlingConfig {
            enabled: r.enabled.as_ref().map_or(d.enabled, |b| b.value),
            below: r
                .below
                .as_ref()
                .and_then(|f| self.fraction("crawling.below", f))
                .unwrap_or(d.below),
            after: self.positive_ms("crawling.after_ms", &r.after_ms, d.after),
            window: self.positive_ms("crawling.window_ms", &r.window_ms, d.window),
            min_samples: self.at_least_one(
                "crawling.min_samples",
                &r.min_samples,
                d.min_samples as u32,
            ) as usize,
        }
    }
}
