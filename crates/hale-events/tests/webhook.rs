//! Webhooks: signatures, a flaky receiver getting everything in order, a dead
//! receiver's events dead-lettered and replayed in order with their ids.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use common::*;
use hale_core::config::{EventsConfig, Secret, WebhookConfig};
use hale_core::event::{Event, EventKind};
use hale_events::relay::{RelayTuning, Relays, webhook_breaker};
use hale_events::tasks::TaskSet;
use hale_events::webhook::{self, VerifyError};
use hale_events::{cli, sse};

const SECRET: &str = "s3cret";

#[test]
fn sign_verify_round_trip_and_rejections() {
    let body = br#"{"id":"x"}"#;
    let header = webhook::sign(SECRET.as_bytes(), 1_000, body);
    assert!(header.starts_with("t=1000,v1="));
    let tol = webhook::DEFAULT_TOLERANCE;
    assert_eq!(
        webhook::verify(SECRET.as_bytes(), &header, body, 1_010, tol),
        Ok(())
    );
    // Stale: older than the tolerance (a replayed request).
    assert!(matches!(
        webhook::verify(
            SECRET.as_bytes(),
            &header,
            body,
            1_000 + tol.as_secs() + 1,
            tol
        ),
        Err(VerifyError::Stale { .. })
    ));
    // Tampered body, wrong secret, tampered timestamp.
    assert_eq!(
        webhook::verify(SECRET.as_bytes(), &header, br#"{"id":"y"}"#, 1_010, tol),
        Err(VerifyError::Mismatch)
    );
    assert_eq!(
        webhook::verify(b"other", &header, body, 1_010, tol),
        Err(VerifyError::Mismatch)
    );
    let moved = header.replace("t=1000", "t=1005");
    assert_eq!(
        webhook::verify(SECRET.as_bytes(), &moved, body, 1_010, tol),
        Err(VerifyError::Mismatch)
    );
    assert!(matches!(
        webhook::verify(SECRET.as_bytes(), "garbage", body, 1_010, tol),
        Err(VerifyError::Malformed(_))
    ));
}

/// A receiver that fails the first requests of chosen events (or all while `down`), verifies
/// every signature and records the event ids it accepted.
#[derive(Clone, Default)]
struct Receiver {
    inner: Arc<Mutex<Rx>>,
}

#[derive(Default)]
struct Rx {
    /// Per event id: how many more requests carrying it fail.
    fail_ids: std::collections::HashMap<String, u32>,
    down: bool,
    requests: u32,
    accepted: Vec<String>,
    bad_signatures: u32,
}

async fn receive(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut rx = r.inner.lock().unwrap();
    rx.requests += 1;
    let sig = headers
        .get(webhook::SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if webhook::verify(
        SECRET.as_bytes(),
        sig,
        &body,
        now,
        webhook::DEFAULT_TOLERANCE,
    )
    .is_err()
    {
        rx.bad_signatures += 1;
        return StatusCode::UNAUTHORIZED;
    }
    if rx.down {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let ev: Event = serde_json::from_slice(&body).unwrap();
    if let Some(n) = rx.fail_ids.get_mut(&ev.id)
        && *n > 0
    {
        *n -= 1;
        return StatusCode::BAD_GATEWAY;
    }
    let header_id = headers
        .get(webhook::EVENT_ID_HEADER)
        .unwrap()
        .to_str()
        .unwrap();
    assert_eq!(header_id, ev.id);
    rx.accepted.push(ev.id);
    StatusCode::OK
}

fn fast_tuning() -> RelayTuning {
    RelayTuning {
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(100),
        webhook_breaker: webhook_breaker(Duration::from_millis(100), Duration::from_millis(200)),
        ..RelayTuning::default()
    }
}

fn cfg(url: &str, kinds: Vec<String>) -> EventsConfig {
    EventsConfig {
        webhooks: vec![WebhookConfig {
            url: url.to_string(),
            secret: Some(Secret::new(SECRET)),
            kinds,
        }],
        ..EventsConfig::default()
    }
}

/// First arrivals, deduplicated by id, in arrival order.
fn first_arrivals(ids: &[String]) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    ids.iter()
        .filter(|i| seen.insert((*i).clone()))
        .cloned()
        .collect()
}

#[tokio::test]
async fn flaky_receiver_gets_everything_in_order() {
    install_crypto();
    let rx = Receiver::default();
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let evs = events(60, &[EventKind::AgentPaused, EventKind::AgentFailed]);
    {
        // Three outages, each of 2 failed requests (fewer than the 3 attempts).
        let mut r = rx.inner.lock().unwrap();
        for i in [0, 30, 45] {
            r.fail_ids.insert(evs[i].id.clone(), 2);
        }
    }
    let hook = serve(
        axum::Router::new()
            .route("/hook", post(receive))
            .with_state(rx.clone()),
    )
    .await;
    let url = format!("{hook}/hook");
    commit_all(&store, &evs[..30]).await;
    let tasks = TaskSet::new();
    let relays = Relays::start_with(store.clone(), &cfg(&url, vec![]), &tasks, fast_tuning())
        .await
        .unwrap();
    // More events while it relays.
    commit_all(&store, &evs[30..45]).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    commit_all(&store, &evs[45..]).await;
    let last = store.last_seq().await.unwrap();
    eventually(
        Duration::from_secs(20),
        "webhook cursor reaches the end",
        || {
            let s = store.clone();
            let sink = format!("webhook:{url}");
            async move { s.sink_cursor(&sink).await.unwrap() >= last }
        },
    )
    .await;
    let (bad, accepted) = {
        let r = rx.inner.lock().unwrap();
        (r.bad_signatures, r.accepted.clone())
    };
    assert_eq!(bad, 0);
    let want: Vec<String> = evs.iter().map(|e| e.id.clone()).collect();
    assert_eq!(first_arrivals(&accepted), want);
    assert!(store.dlq_list(None).await.unwrap().is_empty());
    let stats = relays.stats();
    assert_eq!(stats.sinks[0].delivered, 60);
    assert_eq!(stats.sinks[0].failed, 6);
    assert!(tasks.shutdown(Duration::from_secs(5)).await.is_empty());
}

#[tokio::test]
async fn webhook_kinds_filter_skips_other_kinds() {
    install_crypto();
    let rx = Receiver::default();
    let hook = serve(
        axum::Router::new()
            .route("/hook", post(receive))
            .with_state(rx.clone()),
    )
    .await;
    let url = format!("{hook}/hook");
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let evs = events(
        20,
        &[
            EventKind::AgentPaused,
            EventKind::AgentFailed,
            EventKind::TurnCompleted,
        ],
    );
    commit_all(&store, &evs).await;
    let tasks = TaskSet::new();
    let _relays = Relays::start_with(
        store.clone(),
        &cfg(&url, vec!["agent.paused".into(), "turn.completed".into()]),
        &tasks,
        fast_tuning(),
    )
    .await
    .unwrap();
    let last = store.last_seq().await.unwrap();
    eventually(
        Duration::from_secs(10),
        "cursor past the filtered events",
        || {
            let s = store.clone();
            let sink = format!("webhook:{url}");
            async move { s.sink_cursor(&sink).await.unwrap() >= last }
        },
    )
    .await;
    let want: Vec<String> = evs
        .iter()
        .filter(|e| e.kind != EventKind::AgentFailed)
        .map(|e| e.id.clone())
        .collect();
    assert_eq!(rx.inner.lock().unwrap().accepted, want);
    tasks.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn dead_receiver_dead_letters_then_replay_delivers_in_order() {
    install_crypto();
    let rx = Receiver::default();
    rx.inner.lock().unwrap().down = true;
    let hook = serve(
        axum::Router::new()
            .route("/hook", post(receive))
            .with_state(rx.clone()),
    )
    .await;
    let url = format!("{hook}/hook");
    let sink = format!("webhook:{url}");
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let evs = events(4, &[EventKind::AgentCircuitOpen]);
    commit_all(&store, &evs).await;
    let tasks = TaskSet::new();
    let relays = Relays::start_with(
        store.clone(),
        &cfg(&url, vec!["agent.circuit_open".into()]),
        &tasks,
        fast_tuning(),
    )
    .await
    .unwrap();
    let last = evs.len();
    eventually(Duration::from_secs(20), "every event dead-lettered", || {
        let s = store.clone();
        let sink = sink.clone();
        async move { s.dlq_list(Some(&sink)).await.unwrap().len() == last }
    })
    .await;
    let dlq = store.dlq_list(Some(&sink)).await.unwrap();
    assert_eq!(
        dlq.iter().map(|d| d.id.clone()).collect::<Vec<_>>(),
        evs.iter().map(|e| e.id.clone()).collect::<Vec<_>>()
    );
    assert!(dlq.iter().all(|d| d.attempts == 3), "{dlq:?}");
    assert!(rx.inner.lock().unwrap().accepted.is_empty());
    // Each dead letter was reported by a sink.dead_lettered event (submitted
    // without waiting: flush first).
    store.flush().await.unwrap();
    let reports = store
        .events_after(0, 100, Some(&[EventKind::SinkDeadLettered]))
        .await
        .unwrap();
    assert_eq!(reports.len(), 4);

    // The receiver comes back; `hale dlq list` shows them, `replay --all` delivers.
    rx.inner.lock().unwrap().down = false;
    let api = serve(sse::router_with_relays(store.clone(), &relays)).await;
    let mut out = Vec::new();
    let listed = cli::dlq_list_to(&api, None, &mut out).await.unwrap();
    assert_eq!(listed.len(), 4);
    assert!(String::from_utf8(out).unwrap().contains(&evs[0].id));
    let mut out = Vec::new();
    let report = cli::dlq_replay_to(&api, None, vec![], true, &mut out)
        .await
        .unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    let want: Vec<String> = evs.iter().map(|e| e.id.clone()).collect();
    assert_eq!(
        report
            .delivered
            .iter()
            .map(|d| d.id.clone())
            .collect::<Vec<_>>(),
        want
    );
    // Replayed in original order with the same ids; the DLQ is empty.
    let accepted = rx.inner.lock().unwrap().accepted.clone();
    assert_eq!(first_arrivals(&accepted), want);
    assert!(store.dlq_list(Some(&sink)).await.unwrap().is_empty());
    tasks.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn replay_of_one_id_and_failed_replay_keeps_order() {
    install_crypto();
    let rx = Receiver::default();
    rx.inner.lock().unwrap().down = true;
    let hook = serve(
        axum::Router::new()
            .route("/hook", post(receive))
            .with_state(rx.clone()),
    )
    .await;
    let url = format!("{hook}/hook");
    let sink = format!("webhook:{url}");
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let evs = events(3, &[EventKind::AgentCircuitOpen]);
    commit_all(&store, &evs).await;
    let tasks = TaskSet::new();
    let relays = Relays::start_with(
        store.clone(),
        &cfg(&url, vec!["agent.circuit_open".into()]),
        &tasks,
        fast_tuning(),
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(20), "every event dead-lettered", || {
        let s = store.clone();
        let sink = sink.clone();
        async move { s.dlq_list(Some(&sink)).await.unwrap().len() == 3 }
    })
    .await;
    let api = serve(sse::router_with_relays(store.clone(), &relays)).await;
    // Still down: replay fails, nothing leaves the DLQ, later ones not attempted.
    let report = cli::dlq_replay_to(&api, None, vec![], true, &mut Vec::new())
        .await
        .unwrap();
    assert!(report.delivered.is_empty());
    assert_eq!(report.failed.len(), 3);
    assert!(
        report.failed[1]
            .error
            .as_deref()
            .unwrap()
            .contains("not attempted")
    );
    assert_eq!(store.dlq_list(Some(&sink)).await.unwrap().len(), 3);
    // Back up: replay only the second id.
    rx.inner.lock().unwrap().down = false;
    let report = cli::dlq_replay_to(&api, None, vec![evs[1].id.clone()], false, &mut Vec::new())
        .await
        .unwrap();
    assert_eq!(report.delivered.len(), 1);
    assert_eq!(report.delivered[0].id, evs[1].id);
    let left: Vec<String> = store
        .dlq_list(Some(&sink))
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(left, vec![evs[0].id.clone(), evs[2].id.clone()]);
    // A replay request naming neither ids nor all is refused.
    let err = cli::dlq_replay_to(&api, None, vec![], false, &mut Vec::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("400"), "{err}");
    tasks.shutdown(Duration::from_secs(5)).await;
}
