//! Failure injection for event delivery through the real `hale serve`
//! (issue 9 item 8; docs/operations.md, "Events and sinks"): while agents are
//! paused and resumed and turns run, NATS is killed with -9 and the webhook
//! receiver answers 503 for a minute (`HALE_OUTAGE_SECS`, default 60).
//! Afterwards every event is in JetStream and at the webhook, in the same
//! order, with no duplicate in JetStream and no dead letter; during the outage
//! `/ready` shows both sinks down with a backlog.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::{Proc, free_port, start_chaos, wait_ready};
use hale_testkit::{NatsServer, hook, jetstream_messages, nats_server_bin};

/// A webhook receiver: 503 while `down`, else records each event id in
/// arrival order.
#[derive(Clone, Default)]
struct Receiver {
    down: Arc<AtomicBool>,
    refused: Arc<AtomicU64>,
    got: Arc<Mutex<Vec<(String, String, String)>>>,
}

async fn start_receiver(rx: Receiver) -> String {
    hook("/hook", move |_, body| {
        if rx.down.load(Ordering::SeqCst) {
            rx.refused.fetch_add(1, Ordering::SeqCst);
            return StatusCode::SERVICE_UNAVAILABLE;
        }
        let ev: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        rx.got.lock().unwrap().push(ident(&ev));
        StatusCode::OK
    })
    .await
}

/// (id, agent, kind) of an event's JSON.
fn ident(ev: &serde_json::Value) -> (String, String, String) {
    let s = |k: &str| ev[k].as_str().unwrap_or_default().to_owned();
    (s("id"), s("agent"), s("kind"))
}

/// Every message of the stream, in stream order: (Nats-Msg-Id, event).
async fn read_stream(port: u16) -> Vec<(String, (String, String, String))> {
    let url = format!("nats://127.0.0.1:{port}");
    jetstream_messages(&url, "HALE_EVENTS", None, Duration::from_secs(10))
        .await
        .into_iter()
        .map(|m| (m.id.clone(), ident(&m.json())))
        .collect()
}

async fn ready(http: &reqwest::Client, base: &str) -> serde_json::Value {
    hale_testkit::get_json(http, &format!("{base}/ready")).await
}

fn sink<'a>(ready: &'a serde_json::Value, kind: &str) -> &'a serde_json::Value {
    ready["sinks"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["kind"] == kind))
        .unwrap_or_else(|| panic!("no {kind} sink in /ready: {ready}"))
}

type Acked = Arc<Mutex<BTreeMap<(String, String), u64>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_killed_and_webhook_503_for_a_minute_lose_nothing_and_dead_letter_nothing() {
    let Some(nats_bin) = nats_server_bin() else {
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let outage: Duration = Duration::from_secs(
        std::env::var("HALE_OUTAGE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60),
    );
    let dir = tempfile::tempdir().unwrap();
    let http = hale_testkit::client(Duration::from_secs(30));
    let nats_port = free_port();
    let nats_dir = dir.path().join("nats");
    let mut nats = NatsServer::start(&nats_bin, nats_port, &nats_dir);
    let rx = Receiver::default();
    let hook = start_receiver(rx.clone()).await;

    let (_chaos, chaos_base) = start_chaos(&http, dir.path()).await;
    let port = free_port();
    let cfg = dir.path().join("hale.yaml");
    std::fs::write(
        &cfg,
        format!(
            "\
listen: 127.0.0.1:{port}
data_dir: {data}
providers:
  - name: p
    kind: openai
    base_url: {chaos_base}/v1
    default_model: ok
agents:
  default: {{provider: p}}
  agent-0: {{provider: p}}
  agent-1: {{provider: p}}
  turner: {{provider: p}}
retry:
  network: {{max_attempts: 3, initial_ms: 10, max_ms: 20}}
# Each turn's first attempt fails by design: keep the provider in use.
self_healing: {{max_consecutive_failures: 1000, circuit_breaker: {{enabled: false}}}}
events:
  webhooks: [{{url: \"{hook}\"}}]
  nats: {{url: \"nats://127.0.0.1:{nats_port}\"}}
",
            data = dir.path().join("data").display()
        ),
    )
    .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let mut hale = Proc::spawn(
        &["serve", "--config", &cfg.to_string_lossy()],
        dir.path(),
        "serve",
    );
    wait_ready(
        &http,
        &format!("{base}/ready"),
        &mut hale,
        Duration::from_secs(30),
    )
    .await;

    // Producers: two agents paused and resumed, one agent running turns.
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Acked = Arc::default();
    let turns = Arc::new(AtomicU64::new(0));
    let mut producers = Vec::new();
    for w in 0..2 {
        let (http, base, acked, stop) = (http.clone(), base.clone(), acked.clone(), stop.clone());
        producers.push(tokio::spawn(async move {
            let agent = format!("agent-{w}");
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let (action, kind) = if i.is_multiple_of(2) {
                    ("pause", "agent.paused")
                } else {
                    ("resume", "agent.resumed")
                };
                let r = http
                    .post(format!("{base}/agents/{agent}/{action}"))
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success(), "{action}: {}", r.status());
                *acked
                    .lock()
                    .unwrap()
                    .entry((agent.clone(), kind.to_owned()))
                    .or_default() += 1;
                i += 1;
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }));
    }
    {
        let (http, base, turns, stop) = (http.clone(), base.clone(), turns.clone(), stop.clone());
        producers.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                // The first request for each model name is cut before any
                // answer (chaos `reset`): the turn retries (an agent.retry event).
                let model = format!("reset:times=1:tokens={}", i % 2000 + 1);
                i += 1;
                let r = http
                    .post(format!("{base}/v1/chat/completions"))
                    .header("x-hale-agent", "turner")
                    .json(&serde_json::json!({
                        "model": model,
                        "messages": [{"role": "user", "content": "hi"}],
                    }))
                    .send()
                    .await
                    .unwrap();
                if r.status().is_success() {
                    turns.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The outage: NATS killed with -9, the webhook answering 503.
    nats.kill();
    rx.down.store(true, Ordering::SeqCst);
    let t0 = Instant::now();
    let mut seen_down = (false, false);
    while t0.elapsed() < outage {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let r = ready(&http, &base).await;
        let (n, w) = (sink(&r, "nats"), sink(&r, "webhook"));
        for s in [n, w] {
            assert_eq!(s["dead_letters"], 0, "{r}");
        }
        seen_down.0 |= n["state"] != "up" && n["backlog"].as_u64() > Some(0);
        seen_down.1 |= w["state"] != "up" && w["backlog"].as_u64() > Some(0);
    }
    let during = ready(&http, &base).await;
    assert!(
        seen_down.0 && seen_down.1,
        "both sinks seen down with a backlog: {during}"
    );
    let metrics = hale_testkit::get_text(&http, &format!("{base}/metrics")).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("hale_sink_backlog{sink=\"nats\"}") && !l.ends_with(" 0")),
        "{metrics}"
    );

    // NATS restarts on the same port and store; the webhook accepts again.
    let nats = NatsServer::start(&nats_bin, nats_port, &nats_dir);
    rx.down.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    for p in producers {
        p.await.unwrap();
    }
    // Both sinks drain.
    let t1 = Instant::now();
    loop {
        let r = ready(&http, &base).await;
        let (n, w) = (sink(&r, "nats"), sink(&r, "webhook"));
        if n["backlog"] == 0 && w["backlog"] == 0 && n["state"] == "up" && w["state"] == "up" {
            break;
        }
        assert!(
            t1.elapsed() < Duration::from_secs(90),
            "sinks did not drain: {r}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drained_in = t1.elapsed();

    let stream = read_stream(nats_port).await;
    let got = rx.got.lock().unwrap().clone();
    let stream_ids: Vec<&String> = stream.iter().map(|(id, _)| id).collect();
    let unique: HashSet<&String> = stream_ids.iter().copied().collect();
    let mut seen = HashSet::new();
    let hook_first: Vec<&String> = got
        .iter()
        .map(|e| &e.0)
        .filter(|i| seen.insert(*i))
        .collect();
    let dlq: serde_json::Value = hale_testkit::get_json(&http, &format!("{base}/dlq")).await;
    let acked = acked.lock().unwrap().clone();
    let acked_total: u64 = acked.values().sum();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, e) in &stream {
        *kinds.entry(e.2.as_str()).or_default() += 1;
    }
    eprintln!("events in JetStream by kind: {kinds:?}");
    eprintln!(
        "outage {outage:?}: {acked_total} pause/resume acknowledged, {} turns; JetStream {} messages ({} duplicates); webhook {} received ({} duplicates); dead letters {}; 503s {}; drained in {drained_in:?}",
        turns.load(Ordering::SeqCst),
        stream.len(),
        stream.len() - unique.len(),
        got.len(),
        got.len() - hook_first.len(),
        dlq.as_array().map_or(usize::MAX, Vec::len),
        rx.refused.load(Ordering::SeqCst),
    );
    // No duplicate in JetStream; the webhook got the same events in the same order.
    assert_eq!(stream.len(), unique.len(), "duplicates in JetStream");
    assert_eq!(hook_first, stream_ids, "webhook and JetStream differ");
    // Every acknowledged pause/resume has its event.
    for ((agent, kind), n) in &acked {
        let have = stream
            .iter()
            .filter(|(_, e)| &e.1 == agent && &e.2 == kind)
            .count() as u64;
        assert!(
            have >= *n,
            "{agent} {kind}: {have} events for {n} acknowledged"
        );
    }
    assert_eq!(dlq.as_array().map(Vec::len), Some(0), "{dlq}");
    // Turns produced events too (each turn's first attempt is retried).
    assert!(
        kinds.get("agent.retry").copied().unwrap_or(0) > 0,
        "{kinds:?}"
    );
    drop(nats);
}
