//! Alert channels as outbox sinks, against local receivers on loopback
//! standing in for Slack and PagerDuty: the payload shapes; a PagerDuty
//! trigger then resolve with the same dedup key; a channel down for 30 s
//! (refused, then 503, then 429) draining in order with nothing
//! dead-lettered; a 4xx rejection dead-lettering that one alert only; no
//! URL or routing key in sink names, errors or stats.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use common::*;
use hale_core::alert::Severity;
use hale_core::config::{
    AlertChannel, AlertRoute, AlertTarget, AlertingConfig, EventsConfig, Secret,
};
use hale_core::delivery::{SinkKind, SinkState};
use hale_core::event::{Event, EventKind};
use hale_events::relay::{RelayTuning, Relays};
use hale_events::tasks::TaskSet;
use serde_json::{Value, json};

const ROUTING_KEY: &str = "pd-routing-key-0f0f0f";
const SLACK_PATH: &str = "/services/T000/B000/slacksecretpath";

/// What a receiver answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Up,
    Answer(StatusCode),
}

#[derive(Clone)]
struct Receiver {
    inner: Arc<Mutex<Rx>>,
}

struct Rx {
    mode: Mode,
    /// Bodies whose text contains this are answered 400.
    reject_containing: Option<String>,
    requests: u32,
    accepted: Vec<Value>,
}

impl Receiver {
    fn new() -> Self {
        Receiver {
            inner: Arc::new(Mutex::new(Rx {
                mode: Mode::Up,
                reject_containing: None,
                requests: 0,
                accepted: Vec::new(),
            })),
        }
    }
    fn accepted(&self) -> Vec<Value> {
        self.inner.lock().unwrap().accepted.clone()
    }
    fn set_mode(&self, m: Mode) {
        self.inner.lock().unwrap().mode = m;
    }
}

async fn receive(State(r): State<Receiver>, body: String) -> StatusCode {
    let mut rx = r.inner.lock().unwrap();
    rx.requests += 1;
    if let Mode::Answer(s) = rx.mode {
        return s;
    }
    if rx
        .reject_containing
        .as_deref()
        .is_some_and(|n| body.contains(n))
    {
        return StatusCode::BAD_REQUEST;
    }
    let v: Value = serde_json::from_str(&body).expect("a JSON body");
    rx.accepted.push(v);
    StatusCode::ACCEPTED
}

fn app(rx: &Receiver, path: &str) -> axum::Router {
    axum::Router::new()
        .route(path, post(receive))
        .with_state(rx.clone())
}

fn fast_tuning() -> RelayTuning {
    fast_tuning_to(Duration::from_millis(200))
}

/// The routes of docs/operations.md's `alerting:` example, with
/// `agent.paused` also paging `oncall`.
fn alerting(slack_url: &str, pd_url: &str) -> AlertingConfig {
    AlertingConfig {
        dashboard_url: Some("http://127.0.0.1:3000/".into()),
        channels: vec![
            AlertChannel {
                name: "ops-slack".into(),
                target: AlertTarget::Slack {
                    url: Secret::new(slack_url),
                },
            },
            AlertChannel {
                name: "oncall".into(),
                target: AlertTarget::PagerDuty {
                    url: pd_url.into(),
                    routing_key: Secret::new(ROUTING_KEY),
                },
            },
        ],
        routes: vec![
            AlertRoute {
                kinds: vec![EventKind::HealthEscalated, EventKind::RecoveryFailed],
                channels: vec!["ops-slack".into(), "oncall".into()],
                severity: Severity::Critical,
            },
            AlertRoute {
                kinds: vec![EventKind::AgentPaused, EventKind::AgentCircuitOpen],
                channels: vec!["ops-slack".into(), "oncall".into()],
                severity: Severity::Warning,
            },
        ],
    }
}

fn ev(kind: EventKind, agent: &str, payload: Value) -> Event {
    Event::new(kind, now_ms(), &mut rand::rng())
        .agent(agent)
        .payload(payload)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

async fn caught_up(store: &hale_store::Store, sink: &str, within: Duration) {
    let last = store.last_seq().await.unwrap();
    eventually(within, &format!("{sink} cursor reaches the end"), || {
        let s = store.clone();
        let sink = sink.to_owned();
        async move { s.sink_cursor(&sink).await.unwrap() >= last }
    })
    .await;
}

#[tokio::test]
async fn slack_and_pagerduty_get_their_payloads_and_pagerduty_resolves_with_the_same_dedup_key() {
    install_crypto();
    let slack = Receiver::new();
    let pd = Receiver::new();
    let slack_url = format!("{}{SLACK_PATH}", serve(app(&slack, SLACK_PATH)).await);
    let pd_url = format!("{}/v2/enqueue", serve(app(&pd, "/v2/enqueue")).await);
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let evs = vec![
        ev(
            EventKind::AgentPaused,
            "research",
            json!({"by": "auto", "reason": "3 consecutive failed turns"}),
        ),
        ev(EventKind::TurnCompleted, "research", json!({})),
        ev(
            EventKind::AgentResumed,
            "research",
            json!({"by": "auto", "reason": "a trial request succeeded"}),
        ),
        ev(
            EventKind::HealthEscalated,
            "writer",
            json!({"reason": "stuck"}),
        ),
    ];
    commit_all(&store, &evs).await;
    let tasks = TaskSet::new();
    let relays = Relays::start_with_alerting(
        store.clone(),
        &EventsConfig::default(),
        &alerting(&slack_url, &pd_url),
        &tasks,
        fast_tuning(),
    )
    .await
    .unwrap();
    caught_up(&store, "slack:ops-slack", Duration::from_secs(20)).await;
    caught_up(&store, "pagerduty:oncall", Duration::from_secs(20)).await;

    // PagerDuty: trigger, resolve (same key), trigger of another agent.
    let got = pd.accepted();
    let shape: Vec<(&str, &str)> = got
        .iter()
        .map(|b| {
            (
                b["event_action"].as_str().unwrap(),
                b["dedup_key"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            ("trigger", "hale:agent:research"),
            ("resolve", "hale:agent:research"),
            ("trigger", "hale:agent:writer"),
        ]
    );
    for b in &got {
        assert_eq!(b["routing_key"], ROUTING_KEY);
    }
    let t = &got[0];
    assert_eq!(
        t["payload"]["summary"],
        "agent research paused: 3 consecutive failed turns"
    );
    assert_eq!(t["payload"]["severity"], "warning");
    assert_eq!(t["payload"]["source"], "hale/agent/research");
    assert_eq!(t["payload"]["custom_details"]["by"], "auto");
    assert_eq!(t["payload"]["custom_details"]["event_id"], evs[0].id);
    assert_eq!(
        t["links"][0]["href"],
        "http://127.0.0.1:3000/#agent=research"
    );
    assert_eq!(got[2]["payload"]["severity"], "critical");

    // Slack: one message per alert, with text and blocks.
    let msgs = slack.accepted();
    assert_eq!(msgs.len(), 3, "{msgs:#?}");
    let texts: Vec<&str> = msgs.iter().map(|m| m["text"].as_str().unwrap()).collect();
    assert!(
        texts[0].contains("[WARNING] agent research paused"),
        "{texts:?}"
    );
    assert!(
        texts[1].contains("[RESOLVED] resolved: agent research resumed"),
        "{texts:?}"
    );
    assert!(
        texts[2].contains("[CRITICAL] agent writer escalated"),
        "{texts:?}"
    );
    for m in &msgs {
        let blocks = m["blocks"].as_array().unwrap();
        assert_eq!(blocks[0]["type"], "section");
        assert!(m["blocks"].to_string().contains("open the dashboard"));
    }

    // Names and stats show the channel, never the URL or the key.
    let stats = relays.stats();
    let names: Vec<(&str, SinkKind)> = stats
        .sinks
        .iter()
        .map(|s| (s.name.as_str(), s.kind))
        .collect();
    assert_eq!(
        names,
        vec![
            ("slack:ops-slack", SinkKind::Slack),
            ("pagerduty:oncall", SinkKind::PagerDuty)
        ]
    );
    let shown = serde_json::to_string(&stats).unwrap();
    assert!(!shown.contains("slacksecretpath") && !shown.contains(ROUTING_KEY));
    assert!(store.dlq_list(None).await.unwrap().is_empty());
    assert!(tasks.shutdown(Duration::from_secs(5)).await.is_empty());
}

/// How long the PagerDuty receiver is down in the outage test.
const OUTAGE: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_pagerduty_channel_down_for_30s_drains_in_order_with_nothing_dead_lettered() {
    install_crypto();
    let pd = Receiver::new();
    let port = free_port();
    let pd_url = format!("http://127.0.0.1:{port}/v2/enqueue");
    let slack = Receiver::new();
    let slack_url = format!("{}{SLACK_PATH}", serve(app(&slack, SLACK_PATH)).await);
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let tasks = TaskSet::new();
    let relays = Relays::start_with_alerting(
        store.clone(),
        &EventsConfig::default(),
        &alerting(&slack_url, &pd_url),
        &tasks,
        fast_tuning(),
    )
    .await
    .unwrap();
    // Agents pause and resume all through the outage.
    let mut sent = Vec::new();
    let started = Instant::now();
    let mut server: Option<Stoppable> = None;
    let mut i = 0usize;
    while started.elapsed() < OUTAGE {
        let elapsed = started.elapsed();
        // First third refused (nothing listens), then 503, then 429.
        if elapsed >= OUTAGE / 3 && server.is_none() {
            pd.set_mode(Mode::Answer(StatusCode::SERVICE_UNAVAILABLE));
            server = Some(Stoppable::start(app(&pd, "/v2/enqueue"), port).await);
        }
        if elapsed >= OUTAGE * 2 / 3 {
            pd.set_mode(Mode::Answer(StatusCode::TOO_MANY_REQUESTS));
        }
        let agent = format!("agent-{}", i % 3);
        let kind = if (i / 3).is_multiple_of(2) {
            EventKind::AgentPaused
        } else {
            EventKind::AgentResumed
        };
        let e = ev(kind, &agent, json!({"i": i}));
        sent.push((kind, agent));
        commit_all(&store, &[e]).await;
        i += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let down = relays
        .stats()
        .sinks
        .into_iter()
        .find(|s| s.name == "pagerduty:oncall")
        .unwrap();
    assert_eq!(down.state, SinkState::Down);
    assert!(down.backlog > 0);
    assert!(down.oldest_undelivered_age_ms.is_some());
    let err = down.last_error.unwrap_or_default();
    assert!(
        err.contains("pagerduty:oncall") && err.contains("429"),
        "{err}"
    );
    assert!(pd.inner.lock().unwrap().requests > 3);
    assert!(pd.accepted().is_empty());

    pd.set_mode(Mode::Up);
    caught_up(&store, "pagerduty:oncall", Duration::from_secs(60)).await;
    let got: Vec<(String, String)> = pd
        .accepted()
        .iter()
        .map(|b| {
            (
                b["event_action"].as_str().unwrap().to_owned(),
                b["dedup_key"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = sent
        .iter()
        .map(|(k, a)| {
            let action = match k {
                EventKind::AgentPaused => "trigger",
                EventKind::AgentResumed => "resolve",
                other => panic!("the producer sends no {other}"),
            };
            (action.to_owned(), format!("hale:agent:{a}"))
        })
        .collect();
    // At least once: a redelivery may repeat one; first arrivals are in order.
    let mut firsts = Vec::new();
    let mut n = 0;
    for g in &got {
        if n < want.len() && *g == want[n] {
            firsts.push(g.clone());
            n += 1;
        }
    }
    assert_eq!(firsts, want, "received {got:?}");
    assert!(store.dlq_list(None).await.unwrap().is_empty());
    let st = relays.stats();
    assert!(
        st.sinks
            .iter()
            .all(|s| s.dead_lettered == 0 && s.state == SinkState::Up)
    );
    if let Some(mut s) = server {
        s.stop().await;
    }
    tasks.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_4xx_rejection_dead_letters_that_alert_only_and_the_rest_go_on_in_order() {
    install_crypto();
    let pd = Receiver::new();
    pd.inner.lock().unwrap().reject_containing = Some("hale:agent:bad".into());
    let slack = Receiver::new();
    let slack_url = format!("{}{SLACK_PATH}", serve(app(&slack, SLACK_PATH)).await);
    let pd_url = format!("{}/v2/enqueue", serve(app(&pd, "/v2/enqueue")).await);
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let evs = vec![
        ev(EventKind::AgentPaused, "good", json!({})),
        ev(EventKind::AgentPaused, "bad", json!({})),
        ev(EventKind::AgentResumed, "good", json!({})),
    ];
    commit_all(&store, &evs).await;
    let tasks = TaskSet::new();
    let _relays = Relays::start_with_alerting(
        store.clone(),
        &EventsConfig::default(),
        &alerting(&slack_url, &pd_url),
        &tasks,
        fast_tuning(),
    )
    .await
    .unwrap();
    caught_up(&store, "pagerduty:oncall", Duration::from_secs(20)).await;
    let keys: Vec<String> = pd
        .accepted()
        .iter()
        .map(|b| {
            format!(
                "{} {}",
                b["event_action"].as_str().unwrap(),
                b["dedup_key"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        keys,
        vec!["trigger hale:agent:good", "resolve hale:agent:good"]
    );
    let dlq = store.dlq_list(Some("pagerduty:oncall")).await.unwrap();
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].id, evs[1].id);
    assert!(
        dlq[0].error.contains("pagerduty:oncall answered 400"),
        "{}",
        dlq[0].error
    );
    assert!(!dlq[0].error.contains(ROUTING_KEY));
    // Slack took all three.
    caught_up(&store, "slack:ops-slack", Duration::from_secs(20)).await;
    assert_eq!(slack.accepted().len(), 3);
    tasks.shutdown(Duration::from_secs(5)).await;
}
