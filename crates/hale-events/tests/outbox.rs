//! The outbox cap: the oldest undelivered events are shed, counted and
//! reported; and a down webhook's breaker holds events instead of
//! dead-lettering them.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use common::*;
use hale_core::config::{EventsConfig, WebhookConfig};
use hale_core::delivery::{DownBackoff, SinkState};
use hale_core::event::EventKind;
use hale_events::relay::{RelayTuning, Relays};
use hale_events::tasks::TaskSet;

#[tokio::test]
async fn over_the_cap_the_oldest_are_shed_counted_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let evs = events(30, &[EventKind::AgentFailed]);
    commit_all(&store, &evs).await;
    let tasks = TaskSet::new();
    let cfg = EventsConfig {
        outbox_cap: 10,
        ..EventsConfig::default()
    };
    let tuning = RelayTuning {
        shed_interval: Duration::from_millis(30),
        ..RelayTuning::default()
    };
    let relays = Relays::start_with(store.clone(), &cfg, &tasks, tuning)
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "a shed", || {
        let r = relays.clone();
        async move { r.stats().shed > 0 }
    })
    .await;
    store.flush().await.unwrap();
    // 30 events, cap 10, one slot kept for the report: 21 shed.
    assert_eq!(relays.stats().shed, 21);
    let left = store.events_after(0, 100, None).await.unwrap();
    assert_eq!(left.len(), 10);
    // The newest 9 survive, in order, then the report.
    let ids: Vec<&str> = left[..9].iter().map(|s| s.event.id.as_str()).collect();
    let want: Vec<&str> = evs[21..].iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, want);
    let report = &left[9].event;
    assert_eq!(report.kind, EventKind::OutboxShed);
    assert_eq!(report.payload["shed"], 21);
    assert_eq!(report.payload["cap"], 10);
    // The report does not itself cause another shed.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(relays.stats().shed, 21);
    tasks.shutdown(Duration::from_secs(2)).await;
}

#[derive(Clone, Default)]
struct Flaky {
    down: Arc<AtomicBool>,
    requests: Arc<AtomicU32>,
}

async fn flaky(State(f): State<Flaky>) -> StatusCode {
    f.requests.fetch_add(1, Ordering::SeqCst);
    if f.down.load(Ordering::SeqCst) {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

#[tokio::test]
async fn a_down_webhook_is_waited_out_behind_its_breaker_and_nothing_is_dead_lettered() {
    install_crypto();
    let f = Flaky::default();
    f.down.store(true, Ordering::SeqCst);
    let hook = serve(
        axum::Router::new()
            .route("/h", post(flaky))
            .with_state(f.clone()),
    )
    .await;
    let url = format!("{hook}/h?token=secret");
    let sink = format!("webhook:{url}");
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let evs = events(3, &[EventKind::AgentPaused]);
    commit_all(&store, &evs).await;
    let tasks = TaskSet::new();
    let cfg = EventsConfig {
        webhooks: vec![WebhookConfig {
            url: url.clone(),
            secret: None,
            kinds: vec![],
        }],
        ..EventsConfig::default()
    };
    // Each wait of the down sink is 1.5–3 s (equal jitter).
    let wait = Duration::from_secs(3);
    let tuning = RelayTuning {
        retry_initial: Duration::from_millis(10),
        retry_max: Duration::from_millis(20),
        down_backoff: DownBackoff {
            initial: wait,
            max: wait,
        },
        ..RelayTuning::default()
    };
    let relays = Relays::start_with(store.clone(), &cfg, &tasks, tuning)
        .await
        .unwrap();
    // The first 503 makes the sink down.
    eventually(Duration::from_secs(5), "the sink is down", || {
        let r = relays.clone();
        async move { r.stats().sinks[0].state == SinkState::Down }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // While down: one request so far, nothing else attempted, nothing dead-lettered.
    assert_eq!(f.requests.load(Ordering::SeqCst), 1);
    assert!(store.dlq_list(Some(&sink)).await.unwrap().is_empty());
    let st = relays.stats().sinks[0].clone();
    assert_eq!(st.state, SinkState::Down);
    assert_eq!(st.backlog, 3);
    assert!(st.oldest_undelivered_age_ms.is_some(), "{st:?}");
    assert_eq!(st.dead_letters, 0);
    // The public name and the last error carry no path or query (secrets).
    assert_eq!(
        st.name,
        format!("webhook:{}", hook.trim_start_matches("http://"))
    );
    let err = st.last_error.unwrap();
    assert!(err.contains("503"), "{err}");
    assert!(!err.contains("secret") && !err.contains("/h"), "{err}");
    // The receiver returns; after the wait the held events drain in order.
    f.down.store(false, Ordering::SeqCst);
    let last = store.last_seq().await.unwrap();
    eventually(Duration::from_secs(10), "held events delivered", || {
        let s = store.clone();
        let sink = sink.clone();
        async move { s.sink_cursor(&sink).await.unwrap() >= last }
    })
    .await;
    assert!(store.dlq_list(Some(&sink)).await.unwrap().is_empty());
    let st = relays.stats().sinks[0].clone();
    assert_eq!(st.state, SinkState::Up);
    assert_eq!(st.backlog, 0);
    assert_eq!(st.oldest_undelivered_age_ms, None);
    assert_eq!(st.last_error, None);
    assert_eq!(st.delivered, 3);
    assert_eq!(f.requests.load(Ordering::SeqCst), 4);
    tasks.shutdown(Duration::from_secs(2)).await;
}
