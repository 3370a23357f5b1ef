//! `GET /history` (issue 12): attempts counted per deployment and minute in
//! memory reach the store through the history task (here at its shutdown,
//! which commits the open minute), transitions are there as their events
//! were appended, and the JSON has the shape the dashboard draws from.

mod common;

use common::*;
use hale_core::config::Target;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_shows_minutes_per_deployment_and_the_agents_transitions() {
    let c = chaos().await;
    let mut cfg = config(vec![
        openai("bad", &c, "auth"),
        anthropic("good", &c, "fine"),
    ]);
    let t = |p: &str, m: &str| Target {
        provider: p.into(),
        model: m.into(),
    };
    cfg.routes.insert("broken".into(), vec![t("bad", "auth")]);
    cfg.routes.insert("healthy".into(), vec![t("good", "fine")]);
    let h = Hale::start(cfg).await;
    let token = CancellationToken::new();
    let task = {
        let (gw, store, token) = (h.gw.clone(), h.store.clone(), token.clone());
        tokio::spawn(async move { hale_gateway::history::run(&gw.history, store, token).await })
    };
    for _ in 0..2 {
        let r = h.openai("healthy").agent("fine-agent").send().await;
        assert_eq!(r.status, 200, "{}", r.raw);
    }
    let max = h.gw.cfg.self_healing.max_consecutive_failures;
    for _ in 0..max {
        let r = h.openai("broken").agent("ag").send().await;
        assert_eq!(r.status, 503, "{}", r.raw);
    }
    // Shutdown of the history task commits the minute still open.
    token.cancel();
    task.await.unwrap().unwrap();
    h.store.flush().await.unwrap();

    let (status, all) = h.get_json("/history").await;
    assert_eq!(status, 200, "{all}");
    let minutes = all["minutes"].as_array().unwrap();
    let of = |d: &str| -> Vec<&Value> { minutes.iter().filter(|m| m["deployment"] == d).collect() };
    let good: u64 = of("good/fine")
        .iter()
        .map(|m| m["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(good, 2, "{all}");
    assert!(
        of("good/fine")
            .iter()
            .all(|m| m["failures"] == 0 && m["success_ratio"] == 1.0)
    );
    let bad = of("bad/auth");
    assert!(!bad.is_empty(), "{all}");
    assert!(
        bad.iter()
            .all(|m| m["success_ratio"] == 0.0 && m["calls"] == m["failures"])
    );
    for m in minutes {
        for k in [
            "deployment",
            "minute_ms",
            "calls",
            "failures",
            "success_ratio",
            "avg_ms",
        ] {
            assert!(m.get(k).is_some(), "{k} in {m}");
        }
        assert_eq!(m["minute_ms"].as_u64().unwrap() % 60_000, 0);
    }
    let kinds: Vec<&str> = all["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"agent.paused"), "{kinds:?}");
    assert!(!kinds.contains(&"turn.completed"), "{kinds:?}");

    // Filters and a bad range.
    let (_, ag) = h.get_json("/history?agent=fine-agent").await;
    assert!(ag["transitions"].as_array().unwrap().is_empty(), "{ag}");
    let (_, dep) = h.get_json("/history?deployment=good/fine").await;
    assert!(
        dep["minutes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["deployment"] == "good/fine")
    );
    let (status, _) = h.get_json("/history?from=5&to=1").await;
    assert_eq!(status, 400);
    let (status, _) = h.get_json("/history?since=1").await;
    assert_eq!(status, 400);
    h.stop().await;
}
