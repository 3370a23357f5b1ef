//! Each deployment's usual streaming rate, for the crawl rule
//! (docs/configuration.md, "crawling"; the rules: [`hale_core::crawl`]).
//!
//! The stream relay asks it for a deployment's usual rate when an attempt
//! starts serving, judges the stream itself ([`hale_core::crawl::CrawlWatch`]),
//! and hands back what a stream that finished teaches. This component owns
//! the rates behind one short lock (never held across an `.await`), apart
//! from the deployments' health: a rate is learned from successes only and
//! asked once per serving attempt, so it shares no lock with the hot path of
//! every attempt. It knows nothing of HTTP, turns or events.

use hale_core::config::CrawlingConfig;
use hale_core::crawl::{CrawlWatch, MIN_SAMPLE_SPAN, StreamRates};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Deployment key (`provider/model`) → its recent finished streams.
pub struct Paces {
    cfg: CrawlingConfig,
    rates: Mutex<HashMap<String, StreamRates>>,
}

impl Paces {
    pub fn new(cfg: &CrawlingConfig) -> Self {
        Self {
            cfg: cfg.clone(),
            rates: Mutex::new(HashMap::new()),
        }
    }

    fn rates(&self) -> std::sync::MutexGuard<'_, HashMap<String, StreamRates>> {
        // No rule panics while holding the lock, so the map is consistent.
        self.rates.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The rule's settings.
    pub fn config(&self) -> &CrawlingConfig {
        &self.cfg
    }

    /// The usual rate (bytes per second) of `deployment`'s streams; `None`
    /// when crawling is off or the deployment has too little history, and
    /// then its streams are not judged.
    pub fn usual(&self, deployment: &str, now: Instant) -> Option<f64> {
        if !self.cfg.enabled {
            return None;
        }
        self.rates()
            .get(deployment)?
            .usual(now, self.cfg.min_samples)
    }

    /// A stream on `deployment` finished: its pace is learned.
    pub fn finished(&self, deployment: &str, watch: &CrawlWatch, now: Instant) {
        let (bytes, span) = watch.sample();
        if !self.cfg.enabled || span < MIN_SAMPLE_SPAN {
            // Not a sample: no entry made for it.
            return;
        }
        self.rates()
            .entry(deployment.to_owned())
            .or_default()
            .record(now, bytes, span);
    }
}
