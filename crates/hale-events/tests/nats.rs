//! NATS JetStream relay against a real `nats-server` started by the test:
//! 100k events with the server killed midway arrive exactly once, in order;
//! a server down past the attempts sends events to the DLQ and a replay
//! delivers them.

mod common;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer};
use common::*;
use futures::StreamExt;
use hale_core::config::{EventsConfig, NatsConfig};
use hale_core::event::EventKind;
use hale_events::relay::{RelayTuning, Relays};
use hale_events::tasks::TaskSet;
use hale_events::{cli, nats, sse};

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
    let client = async_nats::connect(format!("nats://127.0.0.1:{port}"))
        .await
        .unwrap();
    let js = jetstream::new(client);
    let stream = js.get_stream(NatsConfig::DEFAULT_STREAM).await.unwrap();
    let c = stream
        .create_consumer(consumer::pull::Config {
            ack_policy: consumer::AckPolicy::None,
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut msgs = c.messages().await.unwrap();
    let mut ids = Vec::with_capacity(expect);
    while ids.len() < expect {
        let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(5), msgs.next()).await else {
            break;
        };
        let m = m.unwrap();
        let id = m
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Msg-Id"))
            .map(|v| v.as_str().to_string())
            .unwrap_or_default();
        assert!(m.subject.starts_with("hale.events."), "{}", m.subject);
        ids.push(id);
    }
    ids
}

async fn stream_len(port: u16) -> u64 {
    let client = async_nats::connect(format!("nats://127.0.0.1:{port}"))
        .await
        .unwrap();
    let js = jetstream::new(client);
    let mut stream = js.get_stream(NatsConfig::DEFAULT_STREAM).await.unwrap();
    stream.info().await.unwrap().state.messages
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_down_past_the_attempts_dead_letters_and_replay_delivers() {
    let Some(bin) = nats_server_bin() else { return };
    install_crypto();
    let port = free_port(); // nothing listens yet
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let evs = events(5, &[EventKind::AgentFailed, EventKind::RecoveryStarted]);
    commit_all(&store, &evs).await;
    let tasks = TaskSet::new();
    let tuning = RelayTuning {
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(50),
        nats_ack_timeout: Duration::from_millis(500),
        ..RelayTuning::default()
    };
    let relays = Relays::start_with(store.clone(), &nats_cfg(port), &tasks, tuning)
        .await
        .unwrap();
    let ids: Vec<String> = evs.iter().map(|e| e.id.clone()).collect();
    let ours = |dlq: Vec<hale_store::DeadLetter>| -> Vec<hale_store::DeadLetter> {
        dlq.into_iter().filter(|d| ids.contains(&d.id)).collect()
    };
    eventually(
        Duration::from_secs(20),
        "every event dead-lettered for nats",
        || {
            let s = store.clone();
            let ids = ids.clone();
            async move {
                let dlq = s.dlq_list(Some(nats::SINK_NAME)).await.unwrap();
                dlq.iter().filter(|d| ids.contains(&d.id)).count() == 5
            }
        },
    )
    .await;
    // The relay's own sink.dead_lettered reports may be dead-lettered too
    // (not chained further); only ours are checked.
    let dlq = ours(store.dlq_list(Some(nats::SINK_NAME)).await.unwrap());
    assert_eq!(dlq.iter().map(|d| d.id.clone()).collect::<Vec<_>>(), ids);
    assert!(dlq.iter().all(|d| d.attempts == 3));
    assert!(dlq[0].error.contains("NATS"), "{}", dlq[0].error);
    let stats = relays.stats();
    assert!(stats.sinks[0].dead_lettered >= 5);
    assert!(!stats.sinks[0].healthy);

    // NATS comes up; `hale dlq replay --all` delivers in order with the same ids.
    let nats_dir = tempfile::tempdir().unwrap();
    let server = NatsServer::start(&bin, port, nats_dir.path());
    let api = serve(sse::router_with_relays(store.clone(), &relays)).await;
    // Replay by id, as `hale dlq replay ID..` does.
    let mut out = Vec::new();
    let report = cli::dlq_replay_to(&api, None, ids.clone(), false, &mut out)
        .await
        .unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(
        report
            .delivered
            .iter()
            .map(|d| d.id.clone())
            .collect::<Vec<_>>(),
        ids
    );
    assert!(ours(store.dlq_list(Some(nats::SINK_NAME)).await.unwrap()).is_empty());
    // The stream holds them in the original order (the sink.dead_lettered
    // reports relayed meanwhile may interleave; filter them out).
    let stored = usize::try_from(stream_len(server.port).await).unwrap();
    let got = read_stream_ids(server.port, stored).await;
    let got: Vec<String> = got.into_iter().filter(|i| ids.contains(i)).collect();
    assert_eq!(got, ids);
    tasks.shutdown(Duration::from_secs(5)).await;
}
