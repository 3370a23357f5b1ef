//! End to end, issue #2's outage scenario in real time (~75 s): the primary
//! is down for 60 s, then healthy, under one request every 4 s. Every request
//! is answered — by the fallback during the outage — and the primary serves
//! again within 15 s of its recovery, found by hale's probes (default
//! `probe_interval` 5 s), not by waiting out its cooldown.

mod common;

use common::*;
use hale_core::config::ProviderKind;
use std::time::{Duration, Instant};

const OUTAGE: Duration = Duration::from_secs(60);
const EVERY: Duration = Duration::from_secs(4);
const BACK_WITHIN: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_down_60s_then_healthy_fallback_serves_then_primary_back_within_15s() {
    let fault = "down:secs=60";
    let (c, h) = pair(fault, ProviderKind::Anthropic, |_| {}).await;
    assert_eq!(
        h.gw.cfg.retry.probe_interval,
        Duration::from_secs(5),
        "the default probe interval"
    );
    let t0 = Instant::now(); // the outage starts with chaos's first request for the model, just after
    let recovered_at = t0 + OUTAGE;
    let mut log: Vec<(Duration, String, u16, Duration)> = Vec::new();
    let mut back: Option<Duration> = None;
    let mut i = 0u32;
    loop {
        let start = t0 + EVERY * i;
        tokio::time::sleep_until(start.into()).await;
        let stream = i % 2 == 1;
        let r = h.openai(ROUTE).stream(stream).send().await;
        let at = start.duration_since(t0);
        log.push((at, r.provider.clone(), r.status, r.elapsed));
        r.assert_complete(&full());
        if start + r.elapsed < recovered_at {
            assert_eq!(
                r.provider, "backup",
                "served by the down primary at +{at:?}? {log:?}"
            );
        } else if r.provider == "primary" && back.is_none() {
            back = Some(at);
        }
        if back.is_some_and(|b| at >= b + EVERY * 2) || at > OUTAGE + BACK_WITHIN + EVERY * 2 {
            break;
        }
        i += 1;
    }
    let back = back.unwrap_or_else(|| panic!("the primary never served again: {log:?}"));
    assert!(
        back <= OUTAGE + BACK_WITHIN,
        "back on the primary at +{back:?}, more than 15 s after its recovery at +60 s: {log:?}"
    );
    // Once back, it stays back.
    for (at, provider, _, _) in &log {
        if *at > back {
            assert_eq!(provider, "primary", "+{at:?}: {log:?}");
        }
    }
    // The outage cost the primary a probe now and then, not a call per request.
    let primary_calls = c.requests_for(fault);
    let requests = log.len() as u64;
    assert!(
        primary_calls < requests + 3,
        "{primary_calls} calls to the primary for {requests} requests"
    );
}
