//! The outbox cap: the oldest undelivered events are shed, counted and
//! reported; and a webhook's open breaker holds events instead of
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
use hale_core::event::EventKind;
use hale_events::relay::{RelayTuning, Relays, webhook_breaker};
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
async fn an_open_breaker_holds_events_instead_of_dead_lettering_them() {
    install_crypto();
    let f = Flaky::default();
    f.down.store(true, Ordering::SeqCst);
    let hook = serve(
        axum::Router::new()
            .route("/h", post(flaky))
            .with_state(f.clone()),
    )
    .await;
    let url = format!("{hook}/h");
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
    let open = Duration::from_millis(1500);
    let tuning = RelayTuning {
        retry_initial: Duration::from_millis(10),
        retry_max: Duration::from_millis(20),
        webhook_breaker: webhook_breaker(open, open),
        ..RelayTuning::default()
    };
    let relays = Relays::start_with(store.clone(), &cfg, &tasks, tuning)
        .await
        .unwrap();
    // The first event uses its 3 attempts and is dead-lettered; that trips
    // the breaker.
    eventually(Duration::from_secs(5), "first event dead-lettered", || {
        let s = store.clone();
        let sink = sink.clone();
        async move { s.dlq_list(Some(&sink)).await.unwrap().len() == 1 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // While open: no request reached the receiver, nothing else dead-lettered.
    assert_eq!(f.requests.load(Ordering::SeqCst), 3);
    assert_eq!(store.dlq_list(Some(&sink)).await.unwrap().len(), 1);
    assert!(!relays.stats().sinks[0].healthy);
    // The receiver returns; after the open period the held events drain in order.
    f.down.store(false, Ordering::SeqCst);
    let last = store.last_seq().await.unwrap();
    eventually(Duration::from_secs(10), "held events delivered", || {
        let s = store.clone();
        let sink = sink.clone();
        async move { s.sink_cursor(&sink).await.unwrap() >= last }
    })
    .await;
    let dlq = store.dlq_list(Some(&sink)).await.unwrap();
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].id, evs[0].id);
    assert!(relays.stats().sinks[0].healthy);
    tasks.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn sinks_dropped_from_the_config_are_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    store
        .register_sink("webhook:http://127.0.0.1:9/gone")
        .await
        .unwrap();
    store.register_sink("someone-else").await.unwrap();
    let tasks = TaskSet::new();
    let _relays = Relays::start(store.clone(), &EventsConfig::default(), &tasks)
        .await
        .unwrap();
    let names: Vec<String> = store
        .sinks()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.sink)
        .collect();
    assert_eq!(names, vec!["someone-else".to_string()]);
    tasks.shutdown(Duration::from_secs(2)).await;
}
