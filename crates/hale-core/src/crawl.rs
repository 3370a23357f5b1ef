//! A stream that crawls (issue 43): tokens still arriving, but far below the
//! deployment's usual rate, for long. A failure class of its own
//! ([`ErrorClass::StreamCrawling`](crate::class::ErrorClass::StreamCrawling)),
//! resumed as a cut stream is (docs/operations.md, "Failure classes").
//!
//! This module owns two pure rules; the stream relay in the gateway carries
//! them out:
//!
//! - [`StreamRates`]: a deployment's usual streaming rate, learned from its
//!   finished streams — content bytes over the time from the first content to
//!   the last, summed over its recent streams (a ratio of sums, so a long
//!   stream weighs more than a short one). A stream whose content came within
//!   [`MIN_SAMPLE_SPAN`] is no sample: its rate is the network's burst, not
//!   the model's pace. With fewer than `min_samples` recent samples the
//!   deployment has no usual rate, and its streams are never judged.
//! - [`CrawlWatch`]: one stream's progress, judged at each arrival of
//!   content. Its rate is the content of the last `window`; below `below` ×
//!   the usual rate it is *slow*, and slow for longer than `after` it is
//!   *crawling*. Never before a whole window after the first token.
//!
//! Why judged only when content arrives? A stream that sends nothing is not
//! crawling, it is paused, and a pause is the idle timeout's
//! (`stream_idle_timeout_ms`, a `stream_broken`): a pause shorter than that
//! timeout, followed by content at the usual pace, recovers the window's
//! rate within `below` × `window` and is never judged crawling. What the
//! idle timeout cannot see — a trickle of tokens, each gap under it — is this
//! rule's.
//!
//! Why a deployment's own history and not a fixed rate? Models differ by
//! tens of times in their pace: a fixed floor would either never fire on a
//! fast model or always fire on a slow one. A sample older than
//! [`SAMPLE_MAX_AGE`] is forgotten, so a deployment that became slower for
//! good (its crawling streams never finish, so they teach nothing) is not
//! judged once its history has aged out, and learns its new pace.
//!
//! Time comes in as `now`, so every rule is tested under a fake clock.

pub use crate::config::CrawlingConfig;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The finished streams a deployment keeps (the oldest drops first).
pub const HISTORY: usize = 50;
/// A sample older than this is forgotten.
pub const SAMPLE_MAX_AGE: Duration = Duration::from_secs(600);
/// A finished stream whose content came within less than this (first
/// content to last) is no sample.
pub const MIN_SAMPLE_SPAN: Duration = Duration::from_secs(1);

/// One finished stream: `bytes` of content that came over `span`.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    bytes: u64,
    span: Duration,
}

/// A deployment's recent finished streams, for its usual rate.
#[derive(Debug, Clone, Default)]
pub struct StreamRates {
    samples: VecDeque<Sample>,
}

impl StreamRates {
    /// No history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Learns a finished stream: `bytes` of content after its first content,
    /// which came `span` after it. Returns whether it counted (a span under
    /// [`MIN_SAMPLE_SPAN`] or no content does not).
    pub fn record(&mut self, now: Instant, bytes: u64, span: Duration) -> bool {
        if span < MIN_SAMPLE_SPAN || bytes == 0 {
            return false;
        }
        self.samples.push_back(Sample {
            at: now,
            bytes,
            span,
        });
        while self.samples.len() > HISTORY {
            self.samples.pop_front();
        }
        true
    }

    /// The usual rate in bytes per second: the content of the samples no
    /// older than [`SAMPLE_MAX_AGE`] over their time; `None` with fewer than
    /// `min_samples` of them (at least 1).
    pub fn usual(&self, now: Instant, min_samples: usize) -> Option<f64> {
        let recent = self
            .samples
            .iter()
            .filter(|s| now.saturating_duration_since(s.at) <= SAMPLE_MAX_AGE);
        let (mut n, mut bytes, mut secs) = (0usize, 0u64, 0f64);
        for s in recent {
            n += 1;
            bytes = bytes.saturating_add(s.bytes);
            secs += s.span.as_secs_f64();
        }
        (n >= min_samples.max(1) && secs > 0.0).then(|| bytes as f64 / secs)
    }

    /// How many samples are kept (recent or not).
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// No samples at all.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

/// What [`CrawlWatch::progress`] made of the stream so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// Not judged: the rule is off, the deployment has no usual rate, or a
    /// whole window has not passed since the first token.
    Unjudged,
    /// At least `below` × the usual rate over the window.
    Flowing,
    /// Under it, since `since` (not yet for longer than `after`).
    Slow { since: Instant },
    /// Under it for longer than `after`: a failure.
    Crawling(Crawl),
}

/// The evidence of a crawling stream, for its failure's message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Crawl {
    /// Bytes per second over the last window.
    pub rate: f64,
    /// The deployment's usual bytes per second.
    pub usual: f64,
    /// How long the stream has been slow.
    pub slow_for: Duration,
    pub window: Duration,
}

impl Crawl {
    /// One line for the failure's message (and the timeline row).
    pub fn describe(&self) -> String {
        format!(
            "stream crawling: {:.0} B/s over the last {} ms, under {:.0} % of the deployment's usual {:.0} B/s for {} ms",
            self.rate,
            self.window.as_millis(),
            100.0 * self.rate / self.usual.max(f64::MIN_POSITIVE),
            self.usual,
            self.slow_for.as_millis(),
        )
    }
}

/// One stream's progress since its first content: the cumulative content
/// at each arrival within the last window (and the last one before it),
/// and since when it has been slow.
#[derive(Debug, Clone)]
pub struct CrawlWatch {
    first: Instant,
    last: Instant,
    first_bytes: u64,
    total: u64,
    /// (arrival, cumulative bytes), oldest first; the oldest is the last
    /// arrival at or before the window's start once a window has passed.
    marks: VecDeque<(Instant, u64)>,
    slow_since: Option<Instant>,
}

impl CrawlWatch {
    /// A stream whose first content (`bytes` of it) came at `now`.
    pub fn start(now: Instant, bytes: u64) -> Self {
        Self {
            first: now,
            last: now,
            first_bytes: bytes,
            total: bytes,
            marks: VecDeque::from([(now, bytes)]),
            slow_since: None,
        }
    }

    /// `bytes` of content arrived at `now` (call it for content only: an
    /// event with none is no progress, and a pause is the idle timeout's).
    /// `usual`: the deployment's usual rate ([`StreamRates::usual`]).
    pub fn progress(
        &mut self,
        now: Instant,
        bytes: u64,
        usual: Option<f64>,
        cfg: &CrawlingConfig,
    ) -> Pace {
        self.total = self.total.saturating_add(bytes);
        self.last = now;
        self.marks.push_back((now, self.total));
        let window = cfg.window.max(Duration::from_millis(1));
        let edge = now.checked_sub(window);
        // Keep the last arrival at or before the window's start, drop older ones.
        while let (Some(edge), Some(next)) = (edge, self.marks.get(1))
            && next.0 <= edge
        {
            self.marks.pop_front();
        }
        let usual = usual.filter(|u| u.is_finite() && *u > 0.0);
        let (Some(usual), true) = (usual, cfg.enabled) else {
            self.slow_since = None;
            return Pace::Unjudged;
        };
        if now.saturating_duration_since(self.first) < window {
            return Pace::Unjudged;
        }
        // A whole window has passed: the oldest mark is at or before its start.
        let base = self.marks.front().map_or(self.first_bytes, |m| m.1);
        let rate = (self.total - base) as f64 / window.as_secs_f64();
        if rate >= cfg.below * usual {
            self.slow_since = None;
            return Pace::Flowing;
        }
        let since = *self.slow_since.get_or_insert(now);
        let slow_for = now.saturating_duration_since(since);
        if slow_for > cfg.after {
            Pace::Crawling(Crawl {
                rate,
                usual,
                slow_for,
                window,
            })
        } else {
            Pace::Slow { since }
        }
    }

    /// The finished stream's sample for [`StreamRates::record`]: the content
    /// after the first, and the time from the first content to the last.
    pub fn sample(&self) -> (u64, Duration) {
        (
            self.total - self.first_bytes,
            self.last.saturating_duration_since(self.first),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn cfg() -> CrawlingConfig {
        CrawlingConfig::default()
    }

    /// A history of `n` streams of 1000 bytes each over 1 s: 1000 B/s.
    fn learned(clock: &FakeClock, n: usize) -> StreamRates {
        let mut r = StreamRates::new();
        for _ in 0..n {
            assert!(r.record(clock.now(), 1000, ms(1000)));
        }
        r
    }

    #[test]
    fn usual_rate_table() {
        let clock = FakeClock::default();
        let min = cfg().min_samples;
        // No history, too little history: no usual rate.
        assert_eq!(StreamRates::new().usual(clock.now(), min), None);
        assert_eq!(learned(&clock, min - 1).usual(clock.now(), min), None);
        assert_eq!(learned(&clock, min).usual(clock.now(), min), Some(1000.0));
        // A ratio of sums: 1000 B over 1 s and 9000 B over 9 s are 1000 B/s,
        // whatever the count of each.
        let mut r = StreamRates::new();
        r.record(clock.now(), 9000, ms(9000));
        r.record(clock.now(), 100, ms(1000));
        assert_eq!(r.usual(clock.now(), 2), Some(9100.0 / 10.0));
        // A burst (under MIN_SAMPLE_SPAN) or an empty stream teaches nothing.
        let mut r = StreamRates::new();
        assert!(!r.record(clock.now(), 5000, MIN_SAMPLE_SPAN - ms(1)));
        assert!(!r.record(clock.now(), 0, ms(5000)));
        assert!(r.is_empty());
        // Samples age out: the deployment has no usual rate again.
        let r = learned(&clock, min);
        clock.advance(SAMPLE_MAX_AGE);
        assert_eq!(r.usual(clock.now(), min), Some(1000.0));
        clock.advance(ms(1));
        assert_eq!(r.usual(clock.now(), min), None);
        // The history is bounded.
        let r = learned(&clock, HISTORY + 7);
        assert_eq!(r.len(), HISTORY);
    }

    /// Feeds `bytes` every `gap` for `n` arrivals; returns the verdicts.
    fn feed(
        clock: &FakeClock,
        w: &mut CrawlWatch,
        n: usize,
        gap: Duration,
        bytes: u64,
        usual: Option<f64>,
        cfg: &CrawlingConfig,
    ) -> Vec<Pace> {
        (0..n)
            .map(|_| {
                clock.advance(gap);
                w.progress(clock.now(), bytes, usual, cfg)
            })
            .collect()
    }

    fn crawled(p: &[Pace]) -> bool {
        p.iter().any(|p| matches!(p, Pace::Crawling(_)))
    }

    /// One row per case of the rule (defaults: under 1/5 of the usual over
    /// 5 s, for longer than 10 s; usual 1000 B/s).
    #[test]
    fn crawl_table() {
        let c = cfg();
        let usual = Some(1000.0);
        // (case, gap ms, bytes per arrival, arrivals, usual, crawls)
        type Row = (&'static str, u64, u64, usize, Option<f64>, bool);
        #[rustfmt::skip]
        let rows: Vec<Row> = vec![
            ("the usual pace", 100, 100, 300, usual, false),
            ("a quarter of the usual pace", 100, 25, 300, usual, false),
            ("a tenth of the usual pace for 30 s", 100, 10, 300, usual, true),
            ("a tenth for 14 s: not a whole window plus `after`", 100, 10, 140, usual, false),
            ("a tenth, but no history", 100, 10, 300, None, false),
            ("one word every 2 s (each gap under the idle timeout)", 2000, 20, 15, usual, true),
        ];
        for (case, gap, bytes, n, usual, crawls) in rows {
            let clock = FakeClock::default();
            let mut w = CrawlWatch::start(clock.now(), bytes);
            let got = feed(&clock, &mut w, n, ms(gap), bytes, usual, &c);
            assert_eq!(crawled(&got), crawls, "{case}: {:?}", got.last());
        }
        // Switched off: never judged.
        let off = CrawlingConfig {
            enabled: false,
            ..cfg()
        };
        let clock = FakeClock::default();
        let mut w = CrawlWatch::start(clock.now(), 10);
        let got = feed(&clock, &mut w, 300, ms(100), 10, usual, &off);
        assert!(got.iter().all(|p| *p == Pace::Unjudged), "{got:?}");
    }

    /// The idle timeout's case is not this rule's: a pause under it (25 s of
    /// a 30 s timeout), then the usual pace, is never crawling — and while
    /// nothing arrives, nothing is judged at all.
    #[test]
    fn a_pause_then_the_usual_pace_is_not_crawling() {
        let c = cfg();
        let clock = FakeClock::default();
        let mut w = CrawlWatch::start(clock.now(), 100);
        let usual = Some(1000.0);
        assert!(!crawled(&feed(&clock, &mut w, 50, ms(100), 100, usual, &c)));
        clock.advance(ms(25_000));
        let after = feed(&clock, &mut w, 200, ms(100), 100, usual, &c);
        assert!(matches!(after[0], Pace::Slow { .. }), "{:?}", after[0]);
        assert!(!crawled(&after), "{after:?}");
        assert_eq!(after.last(), Some(&Pace::Flowing));
    }

    /// Slow, back to the usual pace, slow again: `after` counts from the
    /// second slow spell, not the first.
    #[test]
    fn a_recovery_restarts_the_slow_spell() {
        let c = cfg();
        let clock = FakeClock::default();
        let usual = Some(1000.0);
        let mut w = CrawlWatch::start(clock.now(), 10);
        // 5 s to fill the window, then 8 s slow: not yet.
        assert!(!crawled(&feed(&clock, &mut w, 130, ms(100), 10, usual, &c)));
        // 3 s at the usual pace: flowing again.
        let back = feed(&clock, &mut w, 30, ms(100), 100, usual, &c);
        assert_eq!(back.last(), Some(&Pace::Flowing));
        // 12 s slow: the window drains of the usual pace, then 10 s more are needed.
        let again = feed(&clock, &mut w, 120, ms(100), 10, usual, &c);
        assert!(!crawled(&again), "{:?}", again.last());
        let more = feed(&clock, &mut w, 60, ms(100), 10, usual, &c);
        assert!(crawled(&more));
    }

    #[test]
    fn a_finished_stream_samples_what_came_after_its_first_content() {
        let clock = FakeClock::default();
        let mut w = CrawlWatch::start(clock.now(), 40);
        feed(&clock, &mut w, 10, ms(200), 100, None, &cfg());
        assert_eq!(w.sample(), (1000, ms(2000)));
        let mut r = StreamRates::new();
        let (bytes, span) = w.sample();
        assert!(r.record(clock.now(), bytes, span));
        assert_eq!(r.usual(clock.now(), 1), Some(500.0));
    }

    #[test]
    fn the_crawl_names_its_evidence() {
        let c = cfg();
        let clock = FakeClock::default();
        let mut w = CrawlWatch::start(clock.now(), 10);
        let got = feed(&clock, &mut w, 300, ms(100), 10, Some(1000.0), &c);
        let Some(Pace::Crawling(crawl)) = got.iter().find(|p| matches!(p, Pace::Crawling(_)))
        else {
            panic!("no crawl: {got:?}");
        };
        assert_eq!(crawl.rate, 100.0);
        assert!(crawl.slow_for > c.after);
        let line = crawl.describe();
        assert!(
            line.contains("100 B/s") && line.contains("1000 B/s"),
            "{line}"
        );
    }

    proptest! {
        /// Never before a whole window after the first token plus `after`,
        /// whatever arrives.
        #[test]
        fn never_crawling_before_window_plus_after(
            steps in proptest::collection::vec((0u64..3_000, 0u64..500), 0..300),
            usual in 1.0f64..100_000.0,
            window in 1u64..20_000,
            after in 0u64..20_000,
        ) {
            let c = CrawlingConfig { window: ms(window), after: ms(after), ..cfg() };
            let clock = FakeClock::default();
            let t0 = clock.now();
            let mut w = CrawlWatch::start(t0, 1);
            for (dt, bytes) in steps {
                clock.advance(ms(dt));
                if let Pace::Crawling(_) = w.progress(clock.now(), bytes, Some(usual), &c) {
                    prop_assert!(clock.now() - t0 > ms(window + after));
                }
            }
        }

        /// A deployment without history is never judged.
        #[test]
        fn never_judged_without_history(
            steps in proptest::collection::vec((0u64..3_000, 0u64..500), 0..300),
        ) {
            let clock = FakeClock::default();
            let mut w = CrawlWatch::start(clock.now(), 1);
            for (dt, bytes) in steps {
                clock.advance(ms(dt));
                prop_assert_eq!(w.progress(clock.now(), bytes, None, &cfg()), Pace::Unjudged);
            }
        }

        /// A stream at twice `below` × the usual rate or more, arrivals no
        /// more than half a window apart, is never slow.
        #[test]
        fn a_stream_at_pace_is_never_slow(
            usual in 10.0f64..10_000.0,
            factor in 1.0f64..20.0,
            gap in 1u64..2_500,
            n in 1usize..300,
        ) {
            let c = cfg();
            let clock = FakeClock::default();
            let rate = 2.0 * c.below * usual * factor;
            let bytes = (rate * gap as f64 / 1000.0).ceil() as u64;
            let mut w = CrawlWatch::start(clock.now(), bytes);
            for p in feed(&clock, &mut w, n, ms(gap), bytes, Some(usual), &c) {
                prop_assert!(matches!(p, Pace::Unjudged | Pace::Flowing), "{:?}", p);
            }
        }

        /// A steady trickle under `below` × the usual rate is judged
        /// crawling by a window plus `after` plus two gaps after its first token.
        #[test]
        fn a_steady_trickle_is_crawling_in_time(
            usual in 100.0f64..10_000.0,
            gap in 1u64..2_000,
            share in 0.0f64..0.5,
        ) {
            let c = cfg();
            let clock = FakeClock::default();
            // At most `share` × below × usual, counting the window's extra arrival.
            let per_window = share * c.below * usual * c.window.as_secs_f64();
            let arrivals = c.window.as_millis() as f64 / gap as f64 + 1.0;
            let bytes = (per_window / arrivals).floor() as u64;
            let t0 = clock.now();
            let mut w = CrawlWatch::start(t0, bytes);
            let limit = c.window + c.after + ms(2 * gap);
            let mut when = None;
            while clock.now() - t0 <= limit + ms(gap) {
                clock.advance(ms(gap));
                if let Pace::Crawling(_) = w.progress(clock.now(), bytes, Some(usual), &c) {
                    when = Some(clock.now() - t0);
                    break;
                }
            }
            let when = when.expect("judged crawling");
            prop_assert!(when <= limit, "{:?} > {:?}", when, limit);
        }

        /// A pause of any length under the idle timeout, then the usual
        /// pace, is never crawling.
        #[test]
        fn a_pause_is_not_a_crawl(
            pause in 0u64..30_000,
            gap in 1u64..200,
            before in 0usize..200,
            after in 0usize..400,
        ) {
            let c = cfg();
            let usual = 1000.0;
            let bytes = gap; // the usual pace: 1 byte per ms
            let clock = FakeClock::default();
            let mut w = CrawlWatch::start(clock.now(), bytes);
            let mut all = feed(&clock, &mut w, before, ms(gap), bytes, Some(usual), &c);
            clock.advance(ms(pause));
            all.extend(feed(&clock, &mut w, after, ms(gap), bytes, Some(usual), &c));
            prop_assert!(!crawled(&all));
        }
    }
}
