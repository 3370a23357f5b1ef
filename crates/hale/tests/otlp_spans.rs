//! Tracing export (issue 12): `hale serve` with `telemetry.otlp_endpoint`
//! sends its `turn` and `attempt` spans over OTLP/HTTP to a collector — here
//! a loopback receiver that keeps every request. A served turn whose first
//! attempt fails (chaos `flaky:every=1` on the primary) and whose second
//! target serves gives one turn span and two attempt spans, all carrying the
//! turn id hale answered with; they are flushed when hale stops on SIGTERM.

mod common;

use axum::body::Bytes;
use axum::routing::post;
use common::{start_chaos, start_serve};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_and_attempt_spans_reach_the_otlp_collector_with_the_turn_id() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().expect("tempdir");
    let http = hale_testkit::client(Duration::from_secs(30));

    // The collector: keeps (path, content-type, body) of each request.
    type Seen = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;
    let seen: Seen = Arc::default();
    let keep = seen.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |headers: axum::http::HeaderMap, body: Bytes| {
            let keep = keep.clone();
            async move {
                let ct = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                keep.lock()
                    .unwrap()
                    .push(("/v1/traces".into(), ct, body.to_vec()));
                ""
            }
        }),
    );
    let collector = hale_testkit::serve(app).await;

    let (_chaos, chaos_base) = start_chaos(&http, dir.path()).await;
    let config = format!(
        "telemetry: {{otlp_endpoint: {collector}, service_name: hale-otlp-test}}
routes:
  r: [p1/error-503, p1/good]
providers:
  - {{name: p1, kind: openai, base_url: {chaos_base}/v1, default_model: good}}
retry:
  server_error: {{max_attempts: 1, initial_ms: 10, max_ms: 10}}
"
    );
    let (mut hale, base) = start_serve(&http, dir.path(), &config, &[]).await;

    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .header("x-hale-agent", "tracer")
        .json(&serde_json::json!({"model": "r",
                                  "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("chat");
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["x-hale-attempts"],
        "2",
        "a failed attempt, then a served one"
    );
    let turn_id = r.headers()["x-hale-turn-id"]
        .to_str()
        .expect("turn id")
        .to_owned();

    // SIGTERM: hale drains, then flushes the exporter before it exits.
    let pid = hale.child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let t0 = std::time::Instant::now();
    while hale.child.try_wait().expect("wait").is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "hale did not stop after SIGTERM:\n{}",
            hale.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let seen = seen.lock().unwrap().clone();
    assert!(
        !seen.is_empty(),
        "the collector got no export:\n{}",
        hale.stderr()
    );
    assert!(
        seen.iter().all(|(_, ct, _)| ct == "application/x-protobuf"),
        "OTLP/HTTP protobuf: {:?}",
        seen.iter().map(|s| &s.1).collect::<Vec<_>>()
    );
    let all: Vec<u8> = seen.iter().flat_map(|s| s.2.clone()).collect();
    let count = |needle: &[u8]| all.windows(needle.len()).filter(|w| *w == needle).count();
    assert!(
        count(b"hale-otlp-test") >= 1,
        "the service name is exported"
    );
    assert!(count(b"turn") >= 1, "a span named turn");
    assert!(
        count(b"attempt") >= 2,
        "two attempt spans (the failed one and the served one)"
    );
    assert!(
        count(turn_id.as_bytes()) >= 3,
        "the turn id {turn_id} is on the turn span and both attempt spans"
    );
    assert!(count(b"p1/error-503") >= 1 && count(b"p1/good") >= 1);
}
