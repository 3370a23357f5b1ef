//! Webhooks: signatures; a flaky receiver getting everything in order; a
//! receiver down for a long outage (503, or its port closed) getting every
//! event in order with nothing dead-lettered; events the receiver rejects
//! (400) dead-lettered alone and replayed in order with their ids.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use common::*;
use hale_core::config::{EventsConfig, Secret, WebhookConfig};
use hale_core::delivery::{DownBackoff, SinkState};
use hale_core::event::{Event, EventKind};
use hale_events::relay::{RelayTuning, Relays};
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
    /// Answer 503 to everything.
    down: bool,
    /// Answer 400 to everything.
    reject_all: bool,
    /// Answer 400 to these events.
    reject_ids: std::collections::HashSet<String>,
    /// Requests answered 503 or 400.
    refused: u32,
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
        rx.refused += 1;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let ev: Event = serde_json::from_slice(&body).unwrap();
    if rx.reject_all || rx.reject_ids.contains(&ev.id) {
        rx.refused += 1;
        return StatusCode::BAD_REQUEST;
    }
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
    fast_tuning_to(Duration::from_millis(100))
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
async fn rejected_events_are_dead_lettered_then_replay_delivers_in_order() {
    install_crypto();
    let rx = Receiver::default();
    rx.inner.lock().unwrap().reject_all = true;
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
    // Each dead letter was reported by a sink.dead_lettered event. The
    // report is submitted after its dead letter is stored, so the last one
    // may not be queued yet when the rows are seen: wait for all four.
    eventually(
        Duration::from_secs(20),
        "every dead letter reported",
        || {
            let s = store.clone();
            async move {
                s.flush().await.unwrap();
                s.events_after(0, 100, Some(&[EventKind::SinkDeadLettered]))
                    .await
                    .unwrap()
                    .len()
                    == 4
            }
        },
    )
    .await;
    let reports = store
        .events_after(0, 100, Some(&[EventKind::SinkDeadLettered]))
        .await
        .unwrap();
    assert_eq!(reports.len(), 4, "and no more");

    assert_eq!(relays.stats().sinks[0].dead_letters, 4);
    // The receiver accepts them now; `hale dlq list` shows them, `replay --all` delivers.
    rx.inner.lock().unwrap().reject_all = false;
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
    rx.inner.lock().unwrap().reject_all = true;
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
    // Still rejected: replay fails, nothing leaves the DLQ, later ones not attempted.
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
    // A receiver that is down stops the replay at once.
    rx.inner.lock().unwrap().down = true;
    let before = rx.inner.lock().unwrap().requests;
    let report = cli::dlq_replay_to(&api, None, vec![], true, &mut Vec::new())
        .await
        .unwrap();
    assert_eq!(report.failed.len(), 3);
    assert!(
        report.failed[0]
            .error
            .as_deref()
            .unwrap()
            .contains("sink down"),
        "{report:?}"
    );
    assert_eq!(rx.inner.lock().unwrap().requests, before + 1);
    // Accepting again: replay only the second id.
    {
        let mut r = rx.inner.lock().unwrap();
        r.down = false;
        r.reject_all = false;
    }
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

/// Down-sink waits of 20–200 ms: an outage of [`OUTAGE_TRIALS`] failed
/// trials spans many of them.
fn outage_tuning() -> RelayTuning {
    RelayTuning {
        retry_initial: Duration::from_millis(10),
        retry_max: Duration::from_millis(20),
        down_backoff: DownBackoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(200),
        },
        webhook_timeout: Duration::from_secs(2),
        ..RelayTuning::default()
    }
}

fn receiver_app(rx: &Receiver) -> axum::Router {
    axum::Router::new()
        .route("/hook", post(receive))
        .with_state(rx.clone())
}

#[derive(Clone, Copy, Debug)]
enum Outage {
    /// The receiver answers 503.
    Status503,
    /// The receiver's port is closed (connection refused), then reopened.
    Refused,
}

/// Events produced continuously through an outage of the receiver: every
/// one arrives, in order, and nothing is dead-lettered.
async fn outage_drains_in_order(outage: Outage) {
    install_crypto();
    let rx = Receiver::default();
    let port = free_port();
    let mut server = Stoppable::start(receiver_app(&rx), port).await;
    let url = format!("http://127.0.0.1:{port}/hook");
    let sink = format!("webhook:{url}");
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let tasks = TaskSet::new();
    let relays = Relays::start_with(store.clone(), &cfg(&url, vec![]), &tasks, outage_tuning())
        .await
        .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = produce(store.clone(), stop.clone());
    let accepted = || rx.inner.lock().unwrap().accepted.len();
    eventually(
        Duration::from_secs(20),
        "deliveries before the outage",
        || {
            let n = accepted();
            async move { n >= 20 }
        },
    )
    .await;

    // The outage: it lasts until the relay failed OUTAGE_TRIALS trials.
    let failed_before = relays.stats().sinks[0].failed;
    match outage {
        Outage::Status503 => rx.inner.lock().unwrap().down = true,
        Outage::Refused => server.stop().await,
    }
    let t0 = std::time::Instant::now();
    eventually(
        Duration::from_secs(60) + min_outage(),
        "many failed trials",
        || {
            let r = relays.clone();
            async move { r.stats().sinks[0].failed >= failed_before + OUTAGE_TRIALS }
        },
    )
    .await;
    while t0.elapsed() < min_outage() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let during = relays.stats().sinks[0].clone();
    assert!(
        store.dlq_list(None).await.unwrap().is_empty(),
        "dead-lettered during the outage"
    );
    assert_ne!(during.state, SinkState::Up, "{during:?}");
    assert!(during.backlog > 0, "{during:?}");
    assert!(during.oldest_undelivered_age_ms.is_some(), "{during:?}");
    assert!(during.last_error.is_some(), "{during:?}");
    let outage_len = t0.elapsed();

    // The receiver returns; production goes on a little, then stops.
    match outage {
        Outage::Status503 => rx.inner.lock().unwrap().down = false,
        Outage::Refused => server = Stoppable::start(receiver_app(&rx), port).await,
    }
    let at_return = accepted();
    eventually(
        Duration::from_secs(30),
        "deliveries after the outage",
        || {
            let n = accepted();
            async move { n >= at_return + 20 }
        },
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let produced = producer.await.unwrap();
    let last = store.last_seq().await.unwrap();
    eventually(Duration::from_secs(30), "the backlog drained", || {
        let s = store.clone();
        let sink = sink.clone();
        async move { s.sink_cursor(&sink).await.unwrap() >= last }
    })
    .await;
    let got = rx.inner.lock().unwrap().accepted.clone();
    let stats = relays.stats().sinks[0].clone();
    eprintln!(
        "{outage:?}: outage {outage_len:?}, {} trials failed; produced {}, received {} ({} duplicates), dead letters {}",
        stats.failed - failed_before,
        produced.len(),
        got.len(),
        got.len() - first_arrivals(&got).len(),
        store.dlq_list(None).await.unwrap().len(),
    );
    assert_eq!(first_arrivals(&got), produced, "every event, in order");
    assert!(store.dlq_list(None).await.unwrap().is_empty());
    assert_eq!(stats.dead_lettered, 0);
    assert_eq!(stats.state, SinkState::Up);
    assert_eq!(stats.backlog, 0);
    server.stop().await;
    tasks.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_503_for_a_long_outage_dead_letters_nothing_and_drains_in_order() {
    outage_drains_in_order(Outage::Status503).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_refusing_connections_for_a_long_outage_dead_letters_nothing_and_drains_in_order() {
    outage_drains_in_order(Outage::Refused).await;
}

#[tokio::test]
async fn webhook_400_for_one_event_dead_letters_only_that_event() {
    install_crypto();
    let rx = Receiver::default();
    let evs = events(20, &[EventKind::AgentPaused, EventKind::AgentResumed]);
    let bad = evs[7].id.clone();
    rx.inner.lock().unwrap().reject_ids.insert(bad.clone());
    let hook = serve(receiver_app(&rx)).await;
    let url = format!("{hook}/hook");
    let sink = format!("webhook:{url}");
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    commit_all(&store, &evs).await;
    let tasks = TaskSet::new();
    let relays = Relays::start_with(store.clone(), &cfg(&url, vec![]), &tasks, fast_tuning())
        .await
        .unwrap();
    let last = store.last_seq().await.unwrap();
    eventually(
        Duration::from_secs(20),
        "the cursor reaches the end",
        || {
            let s = store.clone();
            let sink = sink.clone();
            async move { s.sink_cursor(&sink).await.unwrap() >= last }
        },
    )
    .await;
    // Every other event arrived, in order; only the rejected one is a dead letter.
    let ours = |ids: &[String]| -> Vec<String> {
        first_arrivals(ids)
            .into_iter()
            .filter(|i| evs.iter().any(|e| &e.id == i))
            .collect()
    };
    let want: Vec<String> = evs
        .iter()
        .map(|e| e.id.clone())
        .filter(|i| *i != bad)
        .collect();
    assert_eq!(ours(&rx.inner.lock().unwrap().accepted), want);
    let dlq = store.dlq_list(Some(&sink)).await.unwrap();
    assert_eq!(dlq.len(), 1, "{dlq:?}");
    assert_eq!(dlq[0].id, bad);
    assert_eq!(dlq[0].attempts, 3);
    assert!(dlq[0].error.contains("400"), "{}", dlq[0].error);
    let st = relays.stats().sinks[0].clone();
    assert_eq!((st.dead_letters, st.dead_lettered), (1, 1));
    assert_eq!(st.state, SinkState::Up);

    // The receiver accepts it now: a replay over HTTP delivers it, once.
    rx.inner.lock().unwrap().reject_ids.clear();
    let api = serve(sse::router_with_relays(store.clone(), &relays)).await;
    let report = cli::dlq_replay_to(&api, None, vec![bad.clone()], false, &mut Vec::new())
        .await
        .unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(report.delivered.len(), 1);
    assert_eq!(report.delivered[0].id, bad);
    let accepted = rx.inner.lock().unwrap().accepted.clone();
    assert_eq!(accepted.iter().filter(|i| **i == bad).count(), 1);
    assert!(store.dlq_list(Some(&sink)).await.unwrap().is_empty());
    assert_eq!(relays.stats().sinks[0].dead_letters, 0);
    // Nothing is left to replay.
    let report = cli::dlq_replay_to(&api, None, vec![], true, &mut Vec::new())
        .await
        .unwrap();
    assert!(report.delivered.is_empty() && report.failed.is_empty());
    tasks.shutdown(Duration::from_secs(5)).await;
}
