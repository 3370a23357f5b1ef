//! Shared test helpers: a store in a tempdir, events, free ports, servers.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use hale_core::event::{Event, EventKind};
use hale_store::{Store, StoreOptions, Write};

pub async fn store(dir: &Path) -> Store {
    Store::open_sqlite(dir, StoreOptions::default())
        .await
        .expect("open store")
}

/// `n` events with increasing times, kinds cycling through `kinds`.
pub fn events(n: usize, kinds: &[EventKind]) -> Vec<Event> {
    let mut rng = rand::rng();
    let base = 1_700_000_000_000u64;
    (0..n)
        .map(|i| {
            Event::new(kinds[i % kinds.len()], base + i as u64, &mut rng)
                .agent("a1")
                .payload(serde_json::json!({ "i": i }))
        })
        .collect()
}

pub async fn commit_all(store: &Store, evs: &[Event]) {
    for chunk in evs.chunks(2000) {
        store
            .commit(chunk.iter().cloned().map(Write::Event).collect())
            .await
            .expect("commit");
    }
}

// Ports, servers, polling and a nats-server of the test's own: the
// workspace's shared test kit.
#[allow(unused_imports)]
pub use hale_testkit::{
    NatsServer, Stoppable, eventually, free_port, install_crypto, nats_server_bin, serve,
};

/// Commits one event every few milliseconds until `stop`; returns the ids in
/// commit (= outbox) order.
pub fn produce(
    store: Store,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let kinds = [
            EventKind::AgentPaused,
            EventKind::AgentResumed,
            EventKind::TurnCompleted,
        ];
        let mut ids = Vec::new();
        let mut i = 0usize;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_millis() as u64;
            let ev = Event::new(kinds[i % kinds.len()], now, &mut rand::rng())
                .agent("producer")
                .payload(serde_json::json!({ "i": i }));
            ids.push(ev.id.clone());
            store.commit(vec![Write::Event(ev)]).await.expect("commit");
            i += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        ids
    })
}

/// How long an outage test keeps its sink down at least, beyond the trial
/// count it waits for: `HALE_OUTAGE_SECS` (default 0; 60 reproduces the
/// issue's minute-long outage).
pub fn min_outage() -> Duration {
    Duration::from_secs(
        std::env::var("HALE_OUTAGE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
    )
}

/// Failed trials of a down sink an outage test waits for: many more than
/// the attempts that would dead-letter an event.
pub const OUTAGE_TRIALS: u64 = 20;

/// Relay tuning for outage tests: retries from 20 ms to 100 ms, a down sink
/// probed from 20 ms up to `down_max`, so a test's outage takes seconds.
pub fn fast_tuning_to(down_max: Duration) -> hale_events::relay::RelayTuning {
    hale_events::relay::RelayTuning {
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(100),
        down_backoff: hale_core::delivery::DownBackoff {
            initial: Duration::from_millis(20),
            max: down_max,
        },
        ..hale_events::relay::RelayTuning::default()
    }
}
