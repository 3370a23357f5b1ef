//! A route's targets of equal rank, end to end (issue 43: latency-aware
//! choice; docs/configuration.md, "routes"; the rule: `hale_core::balance`).
//!
//! `hale chaos` plays two deployments; `hale serve` has route
//! `lb: [[a/…, b/…]]`, one rank of two.
//!
//! - One answers its first token after 400 ms, the other at once — neither
//!   slow enough to be hedged or ejected. The slow one is listed first, so
//!   a plain ordered plan would send it every turn; once each pace is known,
//!   the fast one serves every turn.
//! - Both answer at once: they share the turns.

mod common;

use common::{start_chaos, start_serve};
use std::time::Duration;

fn config(chaos: &str, a_model: &str, b_model: &str) -> String {
    format!(
        "\
routes:
  lb: [[a/{a_model}, b/{b_model}]]
providers:
  - name: a
    kind: openai
    base_url: {chaos}/v1
    default_model: {a_model}
  - name: b
    kind: openai
    base_url: {chaos}/v1
    default_model: {b_model}
"
    )
}

/// `n` turns on route `lb`, one after another: how many each provider served.
async fn serve_turns(http: &reqwest::Client, base: &str, n: usize) -> Vec<String> {
    let mut served = Vec::with_capacity(n);
    for i in 0..n {
        let r = http
            .post(format!("{base}/v1/chat/completions"))
            .json(&serde_json::json!({
                "model": "lb",
                "stream": i % 2 == 0,
                "messages": [{"role": "user", "content": format!("turn {i}")}],
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let provider = r
            .headers()
            .get("x-hale-provider")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(!r.text().await.unwrap().is_empty());
        served.push(provider);
    }
    served
}

/// Fails with the plan's order kept (every turn on the slow `a`).
#[tokio::test]
async fn issue43_a_rank_of_two_sends_turns_to_the_faster() {
    let http = hale_testkit::client(Duration::from_secs(60));
    let dir = tempfile::tempdir().unwrap();
    let (_chaos, chaos) = start_chaos(&http, dir.path()).await;
    let cfg = config(&chaos, "slow-first-token:ms=400", "ok");
    let (_hale, base) = start_serve(&http, dir.path(), &cfg, &[]).await;
    let served = serve_turns(&http, &base, 30).await;
    // Each is tried at most once or twice while its pace is unknown; from
    // then on the fast one first.
    let on_slow = served.iter().filter(|p| *p == "a").count();
    assert!(
        on_slow <= 2,
        "the slow deployment served {on_slow} of 30: {served:?}"
    );
    assert!(
        served[5..].iter().all(|p| p == "b"),
        "a turn after the fifth went to the slow deployment: {served:?}"
    );
}

/// Fails with no balancing (every turn on `a`). That a hair's difference
/// does not decide is `hale_core::balance`'s table (`MARGIN`); here the two
/// paces' samples cross often enough either way.
#[tokio::test]
async fn issue43_a_rank_of_two_of_the_same_pace_shares_the_turns() {
    let http = hale_testkit::client(Duration::from_secs(60));
    let dir = tempfile::tempdir().unwrap();
    let (_chaos, chaos) = start_chaos(&http, dir.path()).await;
    let cfg = config(&chaos, "ok", "ok:tokens=16");
    let (_hale, base) = start_serve(&http, dir.path(), &cfg, &[]).await;
    let served = serve_turns(&http, &base, 40).await;
    for p in ["a", "b"] {
        let n = served.iter().filter(|s| *s == p).count();
        // Each of 40 turns a coin toss: fewer than 8 is a 1-in-100,000 draw.
        assert!(n >= 8, "{p} served {n} of 40: {served:?}");
    }
}
