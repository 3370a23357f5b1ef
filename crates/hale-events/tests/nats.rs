//! NATS JetStream relay against a real `nats-server` started by the test:
//! 100k events with the server killed midway arrive exactly once, in order;
//! a server killed for a long outage (or down at start) while events are
//! produced dead-letters nothing and gets every event once, in order; a
//! message the stream rejects is the only dead letter and a replay delivers it.

mod common;

use std::time::{Duration, Instant};

use async_nats::jetstream;
use common::*;
use hale_core::config::{EventsConfig, NatsConfig};
use hale_core::delivery::{DownBackoff, SinkState};
use hale_core::event::EventKind;
use hale_events::relay::{RelayTuning, Relays};
use hale_events::tasks::TaskSet;
use hale_events::{cli, nats, sse};
use hale_testkit::{jetstream_len, jetstream_messages};

fn nats_cfg(port: u16) -> EventsConfig {
    EventsConfig {
        nats: Some(NatsConfig {
            url: format!("nats://127.0.0.1:{port}"),
            subject_prefix: NatsConfig::DEFAULT_SUBJECT_PREFIX.into(),
            stream: NatsConfig::DEFAULT_STREAM.into(),
        }),
        ..EventsConfig::default()
    }
}

/// Every `Nats-Msg-Id` in the stream, in stream order.
async fn read_stream_ids(port: u16, expect: usize) -> Vec<String> {
    let url = format!("nats://127.0.0.1:{port}");
    let msgs = jetstream_messages(
        &url,
        NatsConfig::DEFAULT_STREAM,
        Some(expect),
        Duration::from_secs(5),
    )
    .await;
    let mut ids = Vec::with_capacity(expect);
    for m in msgs {
        assert!(m.subject.starts_with("hale.events."), "{}", m.subject);
        ids.push(m.id);
    }
    ids
}

async fn stream_len(port: u16) -> u64 {
    jetstream_len(
        &format!("nats://127.0.0.1:{port}"),
        NatsConfig::DEFAULT_STREAM,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_k_events_survive_a_killed_server_exactly_once_in_order() {
    let Some(bin) = nats_server_bin() else { return };
    let port = free_port();
    let nats_dir = tempfile::tempdir().unwrap();
    let mut server = NatsServer::start(&bin, port, nats_dir.path());

    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let evs = events(
        100_000,
        &[
            EventKind::TurnCompleted,
            EventKind::AgentRetry,
            EventKind::GuardLimitHit,
        ],
    );
    commit_all(&store, &evs).await;
    let last = store.last_seq().await.unwrap();

    let tasks = TaskSet::new();
    let started = Instant::now();
    let relays = Relays::start_with(
        store.clone(),
        &nats_cfg(port),
        &tasks,
        RelayTuning::default(),
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(30), "half the events relayed", || {
        let s = store.clone();
        async move { s.sink_cursor(nats::SINK_NAME).await.unwrap() >= last / 2 }
    })
    .await;
    server.kill();
    let at_kill = store.sink_cursor(nats::SINK_NAME).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let server = NatsServer::start(&bin, port, nats_dir.path());
    eventually(Duration::from_secs(45), "every event relayed", || {
        let s = store.clone();
        async move { s.sink_cursor(nats::SINK_NAME).await.unwrap() >= last }
    })
    .await;
    let elapsed = started.elapsed();
    eprintln!(
        "relayed {} events in {elapsed:?} (killed at cursor {at_kill}); stats {:?}",
        evs.len(),
        relays.stats()
    );
    assert!(at_kill < last, "the kill happened midway");
    assert!(
        relays.stats().sinks[0].failed >= 1,
        "the relay saw the outage"
    );
    assert!(
        store.dlq_list(None).await.unwrap().is_empty(),
        "nothing dead-lettered"
    );
    assert_eq!(
        stream_len(server.port).await,
        100_000,
        "exactly once in the stream"
    );
    let ids = read_stream_ids(server.port, evs.len()).await;
    assert_eq!(ids.len(), evs.len());
    let want: Vec<&str> = evs.iter().map(|e| e.id.as_str()).collect();
    let first_bad = ids.iter().zip(&want).position(|(a, b)| a != b);
    assert_eq!(
        first_bad, None,
        "stream order differs from the outbox order"
    );
    tasks.shutdown(Duration::from_secs(5)).await;
}

/// Down-sink waits of 20–200 ms, acks awaited 1 s.
fn outage_tuning() -> RelayTuning {
    RelayTuning {
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(50),
        down_backoff: DownBackoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(200),
        },
        nats_ack_timeout: Duration::from_secs(1),
        ..RelayTuning::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_killed_for_a_long_outage_dead_letters_nothing_and_delivers_in_order() {
    let Some(bin) = nats_server_bin() else { return };
    let port = free_port();
    let nats_dir = tempfile::tempdir().unwrap();
    let mut server = NatsServer::start(&bin, port, nats_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let tasks = TaskSet::new();
    let relays = Relays::start_with(store.clone(), &nats_cfg(port), &tasks, outage_tuning())
        .await
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = produce(store.clone(), stop.clone());
    let delivered = || relays.stats().sinks[0].delivered;
    eventually(
        Duration::from_secs(20),
        "deliveries before the kill",
        || {
            let n = delivered();
            async move { n >= 20 }
        },
    )
    .await;

    // kill -9; the outage lasts until the relay failed OUTAGE_TRIALS trials
    // (each a refused connection, 20–200 ms apart) and at least min_outage().
    server.kill();
    let failed_before = relays.stats().sinks[0].failed;
    let t0 = Instant::now();
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
    assert!(
        during.last_error.as_deref().unwrap().contains("NATS"),
        "{during:?}"
    );
    let outage = t0.elapsed();

    // Restarted on the same port and store directory.
    let server = NatsServer::start(&bin, port, nats_dir.path());
    let at_return = delivered();
    eventually(
        Duration::from_secs(30),
        "deliveries after the restart",
        || {
            let n = delivered();
            async move { n >= at_return + 20 }
        },
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let produced = producer.await.unwrap();
    let last = store.last_seq().await.unwrap();
    eventually(Duration::from_secs(30), "the backlog drained", || {
        let s = store.clone();
        async move { s.sink_cursor(nats::SINK_NAME).await.unwrap() >= last }
    })
    .await;
    let stored = stream_len(server.port).await;
    let ids = read_stream_ids(server.port, usize::try_from(stored).unwrap()).await;
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    let stats = relays.stats().sinks[0].clone();
    eprintln!(
        "NATS killed: outage {outage:?}, {} trials failed; produced {}, in JetStream {} ({} duplicates), dead letters {}",
        stats.failed - failed_before,
        produced.len(),
        ids.len(),
        ids.len() - unique.len(),
        store.dlq_list(None).await.unwrap().len(),
    );
    assert_eq!(ids, produced, "every event once, in order");
    assert!(store.dlq_list(None).await.unwrap().is_empty());
    assert_eq!(stats.dead_lettered, 0);
    assert_eq!(stats.state, SinkState::Up);
    tasks.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_down_at_start_dead_letters_nothing_and_delivers_when_it_comes_up() {
    let Some(bin) = nats_server_bin() else { return };
    let port = free_port(); // nothing listens yet
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let evs = events(5, &[EventKind::AgentFailed, EventKind::RecoveryStarted]);
    commit_all(&store, &evs).await;
    let tasks = TaskSet::new();
    let relays = Relays::start_with(store.clone(), &nats_cfg(port), &tasks, outage_tuning())
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "many failed trials", || {
        let r = relays.clone();
        async move { r.stats().sinks[0].failed >= OUTAGE_TRIALS }
    })
    .await;
    assert!(store.dlq_list(None).await.unwrap().is_empty());
    let st = relays.stats().sinks[0].clone();
    assert_ne!(st.state, SinkState::Up);
    assert_eq!(st.backlog, 5);
    assert_eq!(st.delivered, 0);
    let nats_dir = tempfile::tempdir().unwrap();
    let server = NatsServer::start(&bin, port, nats_dir.path());
    let last = store.last_seq().await.unwrap();
    eventually(Duration::from_secs(30), "every event relayed", || {
        let s = store.clone();
        async move { s.sink_cursor(nats::SINK_NAME).await.unwrap() >= last }
    })
    .await;
    let ids = read_stream_ids(server.port, 5).await;
    let want: Vec<String> = evs.iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids, want);
    assert_eq!(stream_len(server.port).await, 5);
    assert!(store.dlq_list(None).await.unwrap().is_empty());
    tasks.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_rejecting_one_message_dead_letters_only_it_and_replay_delivers() {
    let Some(bin) = nats_server_bin() else { return };
    install_crypto();
    let port = free_port();
    let nats_dir = tempfile::tempdir().unwrap();
    let server = NatsServer::start(&bin, port, nats_dir.path());
    // The stream exists with a 1 KiB message limit.
    let client = async_nats::connect(format!("nats://127.0.0.1:{port}"))
        .await
        .unwrap();
    let js = jetstream::new(client);
    let mut config = async_nats::jetstream::stream::Config {
        name: NatsConfig::DEFAULT_STREAM.into(),
        subjects: vec![format!("{}.>", NatsConfig::DEFAULT_SUBJECT_PREFIX)],
        duplicate_window: nats::DUPLICATE_WINDOW,
        max_message_size: 1024,
        ..Default::default()
    };
    js.create_stream(config.clone()).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let mut evs = events(6, &[EventKind::AgentFailed, EventKind::RecoveryStarted]);
    evs[2].payload = serde_json::json!({ "big": "x".repeat(4096) });
    let big = evs[2].id.clone();
    commit_all(&store, &evs).await;
    let tasks = TaskSet::new();
    let relays = Relays::start_with(store.clone(), &nats_cfg(port), &tasks, outage_tuning())
        .await
        .unwrap();
    let last = evs.len() as i64;
    eventually(Duration::from_secs(20), "every event relayed", || {
        let s = store.clone();
        async move { s.sink_cursor(nats::SINK_NAME).await.unwrap() >= last }
    })
    .await;
    let ids: Vec<String> = evs.iter().map(|e| e.id.clone()).collect();
    let ours =
        |got: Vec<String>| -> Vec<String> { got.into_iter().filter(|i| ids.contains(i)).collect() };
    let dlq = store.dlq_list(Some(nats::SINK_NAME)).await.unwrap();
    assert_eq!(dlq.len(), 1, "{dlq:?}");
    assert_eq!(dlq[0].id, big);
    assert_eq!(dlq[0].attempts, 3);
    assert!(dlq[0].error.contains("maximum"), "{}", dlq[0].error);
    let stored = usize::try_from(stream_len(server.port).await).unwrap();
    let want: Vec<String> = ids.iter().filter(|i| **i != big).cloned().collect();
    assert_eq!(ours(read_stream_ids(server.port, stored).await), want);
    assert_eq!(relays.stats().sinks[0].state, SinkState::Up);

    // The stream takes large messages now: `hale dlq replay ID` delivers it once.
    config.max_message_size = -1;
    js.update_stream(config).await.unwrap();
    let api = serve(sse::router_with_relays(store.clone(), &relays)).await;
    let report = cli::dlq_replay_to(&api, None, vec![big.clone()], false, &mut Vec::new())
        .await
        .unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(report.delivered.len(), 1);
    assert!(
        store
            .dlq_list(Some(nats::SINK_NAME))
            .await
            .unwrap()
            .is_empty()
    );
    let stored = usize::try_from(stream_len(server.port).await).unwrap();
    let got = ours(read_stream_ids(server.port, stored).await);
    assert_eq!(got.iter().filter(|i| **i == big).count(), 1);
    assert_eq!(got.len(), evs.len());
    tasks.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stored_before_a_lost_ack_are_not_duplicated_after_the_duplicate_window() {
    let Some(bin) = nats_server_bin() else { return };
    let port = free_port();
    let nats_dir = tempfile::tempdir().unwrap();
    let server = NatsServer::start(&bin, port, nats_dir.path());
    // A stream whose duplicate window (1 s) is shorter than the "outage" below.
    let client = async_nats::connect(format!("nats://127.0.0.1:{port}"))
        .await
        .unwrap();
    let js = jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: NatsConfig::DEFAULT_STREAM.into(),
        subjects: vec![format!("{}.>", NatsConfig::DEFAULT_SUBJECT_PREFIX)],
        duplicate_window: Duration::from_secs(1),
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let evs = events(10, &[EventKind::AgentPaused, EventKind::AgentResumed]);
    commit_all(&store, &evs).await;
    // A previous relay published the first 4 and died before its cursor moved.
    for e in &evs[..4] {
        let msg = jetstream::message::PublishMessage::build()
            .payload(serde_json::to_vec(e).unwrap().into())
            .message_id(&e.id);
        js.send_publish(format!("hale.events.{}", e.kind.as_str()), msg)
            .await
            .unwrap()
            .await
            .unwrap();
    }
    // Longer than the duplicate window: the server no longer knows those ids.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let tasks = TaskSet::new();
    let _relays = Relays::start_with(store.clone(), &nats_cfg(port), &tasks, outage_tuning())
        .await
        .unwrap();
    let last = store.last_seq().await.unwrap();
    eventually(Duration::from_secs(20), "every event relayed", || {
        let s = store.clone();
        async move { s.sink_cursor(nats::SINK_NAME).await.unwrap() >= last }
    })
    .await;
    let stored = usize::try_from(stream_len(server.port).await).unwrap();
    let ids = read_stream_ids(server.port, stored).await;
    let want: Vec<String> = evs.iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids, want, "each event once, in order");
    tasks.shutdown(Duration::from_secs(5)).await;
}
