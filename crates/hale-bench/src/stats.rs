//! Latency summaries: percentiles over the recorded samples of one run.
//!
//! Samples are kept whole (a run of 10 s at 10k RPS is 100k `u64`s, under a
//! megabyte) and sorted once, so percentiles are exact rather than bucketed.
//! The nearest-rank definition is used: p-th percentile = the smallest sample
//! with at least p% of the samples at or below it.

use serde::Serialize;
use std::time::Duration;

/// What one load run (one target, one mode, one concurrency) measured.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Requests completed with a 200 and a fully read body.
    pub requests: u64,
    /// Requests that failed (non-200, connection error, short body).
    pub errors: u64,
    /// Completed requests per second over the measured window.
    pub rps: f64,
    /// Full-response latency percentiles, in microseconds.
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// Time to the first body byte (streaming: the first SSE frame), µs.
    pub ttfb_p50_us: f64,
    pub ttfb_p99_us: f64,
    /// The first failure seen (warm-up included), to tell why errors happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// Distinct agents the load named (`--agents-every`; 1 per worker otherwise).
    pub agents: u64,
}

/// Nearest-rank percentile of sorted `samples` (ns), in microseconds; 0 when empty.
pub fn percentile_us(sorted_ns: &[u64], p: f64) -> f64 {
    if sorted_ns.is_empty() {
        return 0.0;
    }
    let n = sorted_ns.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    let idx = rank.clamp(1, n) - 1;
    sorted_ns[idx] as f64 / 1000.0
}

/// Summarises one run. `total_ns` and `ttfb_ns` are unsorted per-request samples.
pub fn summarize(
    mut total_ns: Vec<u64>,
    mut ttfb_ns: Vec<u64>,
    errors: u64,
    window: Duration,
) -> Summary {
    total_ns.sort_unstable();
    ttfb_ns.sort_unstable();
    let secs = window.as_secs_f64();
    let requests = total_ns.len() as u64;
    Summary {
        requests,
        errors,
        rps: if secs > 0.0 {
            requests as f64 / secs
        } else {
            0.0
        },
        p50_us: percentile_us(&total_ns, 50.0),
        p90_us: percentile_us(&total_ns, 90.0),
        p99_us: percentile_us(&total_ns, 99.0),
        max_us: percentile_us(&total_ns, 100.0),
        ttfb_p50_us: percentile_us(&ttfb_ns, 50.0),
        ttfb_p99_us: percentile_us(&ttfb_ns, 99.0),
        first_error: None,
        agents: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let s: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(percentile_us(&s, 50.0), 50.0);
        assert_eq!(percentile_us(&s, 99.0), 99.0);
        assert_eq!(percentile_us(&s, 100.0), 100.0);
        assert_eq!(percentile_us(&s, 0.0), 1.0);
        assert_eq!(percentile_us(&[7000], 99.0), 7.0);
    }

    #[test]
    fn percentile_of_nothing_is_zero() {
        assert_eq!(percentile_us(&[], 50.0), 0.0);
    }

    #[test]
    fn summarize_sorts_and_counts_rps_over_the_window() {
        let total = vec![3000, 1000, 2000, 4000];
        let ttfb = vec![300, 100, 200, 400];
        let s = summarize(total, ttfb, 1, Duration::from_secs(2));
        assert_eq!(s.requests, 4);
        assert_eq!(s.errors, 1);
        assert_eq!(s.rps, 2.0);
        assert_eq!(s.p50_us, 2.0);
        assert_eq!(s.max_us, 4.0);
        assert_eq!(s.ttfb_p50_us, 0.2);
    }
}
