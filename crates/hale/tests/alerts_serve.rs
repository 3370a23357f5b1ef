//! Alerts through the real `hale serve` (issue 12;
//! docs/operations.md, "Alerts"): an
//! agent whose provider (`hale chaos`) keeps failing is paused, then resumes
//! by itself when a trial request succeeds; a PagerDuty receiver on loopback
//! sees a trigger then a resolve with the same dedup key. The channel shows
//! in `/ready`, `/metrics` and `hale doctor` as `pagerduty:oncall`, and the
//! routing key appears in none of them nor in hale's log.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::{hale_bin, start_chaos, start_serve};
use hale_testkit::hook;

const ROUTING_KEY: &str = "pd-e2e-routing-key-7c7c";

async fn start_pagerduty(got: Arc<Mutex<Vec<serde_json::Value>>>) -> String {
    hook("/v2/enqueue", move |_, body| {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        got.lock().unwrap().push(v);
        StatusCode::ACCEPTED
    })
    .await
}

async fn chat(http: &reqwest::Client, base: &str, model: &str) -> reqwest::StatusCode {
    http.post(format!("{base}/v1/chat/completions"))
        .header("x-hale-agent", "pager-agent")
        .json(&serde_json::json!({
            "model": model,
            "messages": [{"role": "user", "content": "hi"}],
        }))
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_paused_then_resumed_pages_pagerduty_with_trigger_then_resolve() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let http = hale_testkit::client(Duration::from_secs(30));
    let got: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let pd_url = start_pagerduty(got.clone()).await;

    let (_chaos, chaos_base) = start_chaos(&http, dir.path()).await;
    let config = format!(
        "\
providers:
  - name: p
    kind: openai
    base_url: {chaos_base}/v1
    default_model: ok
agents:
  pager-agent: {{provider: p}}
retry:
  server_error: {{max_attempts: 1, initial_ms: 10, max_ms: 20}}
self_healing: {{max_consecutive_failures: 2, resume_probe_after_ms: 100, circuit_breaker: {{enabled: false}}}}
alerting:
  dashboard_url: http://hale.example/
  channels:
    oncall: {{kind: pagerduty, url: \"{pd_url}\", routing_key_env: PD_ROUTING_KEY}}
  routes:
    - {{kinds: [agent.paused, health.escalated], channels: [oncall], severity: critical}}
"
    );
    let (hale, base) = start_serve(
        &http,
        dir.path(),
        &config,
        &[("PD_ROUTING_KEY", ROUTING_KEY), ("HALE_LOG", "debug")],
    )
    .await;

    // Failing turns until the agent is paused (423).
    let t0 = Instant::now();
    loop {
        let s = chat(&http, &base, "error-503").await;
        if s == reqwest::StatusCode::LOCKED {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "never paused: {s}");
    }
    // Healthy requests until the automatic trial resumes it.
    let t0 = Instant::now();
    loop {
        if chat(&http, &base, "ok").await.is_success() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "never resumed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let t0 = Instant::now();
    while got.lock().unwrap().len() < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "PagerDuty got {:?}\n{}",
            got.lock().unwrap(),
            hale.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let got = got.lock().unwrap().clone();
    let shape: Vec<(&str, &str)> = got
        .iter()
        .map(|b| {
            (
                b["event_action"].as_str().unwrap_or_default(),
                b["dedup_key"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            ("trigger", "hale:agent:pager-agent"),
            ("resolve", "hale:agent:pager-agent")
        ],
        "{got:#?}"
    );
    assert_eq!(got[0]["routing_key"], ROUTING_KEY);
    assert_eq!(got[0]["payload"]["severity"], "critical");
    assert_eq!(got[0]["payload"]["source"], "hale/agent/pager-agent");
    // The link is to the configured dashboard, not to the address hale
    // listens on (which is what a page's recipient could not reach).
    assert_eq!(
        got[0]["links"][0]["href"],
        "http://hale.example/#agent=pager-agent"
    );

    // The channel in /ready, /metrics and hale doctor, by name only.
    let ready: serde_json::Value = hale_testkit::get_json(&http, &format!("{base}/ready")).await;
    let sink = ready["sinks"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "pagerduty:oncall"))
        .unwrap_or_else(|| panic!("no pagerduty:oncall in /ready: {ready}"));
    assert_eq!(sink["kind"], "pagerduty");
    assert_eq!(sink["dead_letters"], 0);
    let metrics = hale_testkit::get_text(&http, &format!("{base}/metrics")).await;
    assert!(metrics.contains("pagerduty:oncall"), "{metrics}");
    let doctor = std::process::Command::new(hale_bin())
        .args(["doctor", "--url", &base])
        .env_remove("HALE_TOKEN")
        .output()
        .unwrap();
    let doctor_out = String::from_utf8_lossy(&doctor.stdout).into_owned();
    assert!(
        doctor_out.contains("pagerduty:oncall"),
        "{doctor_out}\n{}",
        String::from_utf8_lossy(&doctor.stderr)
    );
    for (what, text) in [
        ("/ready", ready.to_string()),
        ("/metrics", metrics),
        ("doctor", doctor_out),
        ("the log", hale.stderr()),
    ] {
        assert!(!text.contains(ROUTING_KEY), "the routing key in {what}");
    }
}
