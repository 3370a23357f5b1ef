//! What every relay task of one [`super::Relays`] shares: the store, the
//! tuning, the sinks and the shed count, with the two store writes a relay
//! makes (acknowledging a cursor, dead-lettering an event), and the waits
//! and store-error rule of the relay loops.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hale_core::event::{Event, EventKind};
use hale_store::{Store, StoreError, StoredEvent, Write};
use tokio_util::sync::CancellationToken;

use super::sinks::SinkHandle;
use super::status::Counters;
use super::tuning::RelayTuning;

/// A caught-up relay re-reads the outbox at least this often.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// What the relay tasks, the cap enforcer and [`super::Relays`] share.
pub(super) struct Shared {
    pub(super) store: Store,
    pub(super) tuning: RelayTuning,
    pub(super) max_attempts: u32,
    pub(super) sinks: Vec<SinkHandle>,
    pub(super) shed: AtomicU64,
}

/// Sleeps `d` unless cancelled first; false when cancelled.
pub(super) async fn pause(token: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = token.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

/// Waits for a new commit, the poll interval, or cancellation (false).
pub(super) async fn wait_for_more(
    token: &CancellationToken,
    watch: &mut tokio::sync::watch::Receiver<i64>,
) -> anyhow::Result<bool> {
    tokio::select! {
        _ = token.cancelled() => Ok(false),
        r = watch.changed() => r.map(|_| true).map_err(|_| anyhow::anyhow!("the store was closed")),
        _ = tokio::time::sleep(POLL_INTERVAL) => Ok(true),
    }
}

/// Store errors while relaying: a closed store ends the relay; anything else
/// is logged and retried after a pause.
pub(super) fn store_trouble(sink: &str, e: StoreError) -> anyhow::Result<()> {
    match e {
        StoreError::Closed => Err(anyhow::anyhow!("the store was closed under relay {sink}")),
        other => {
            tracing::warn!(sink, error = %other, "outbox read/ack failed; retrying");
            Ok(())
        }
    }
}

impl Shared {
    pub(super) async fn ack(&self, counters: &Counters, seq: i64) -> anyhow::Result<()> {
        if let Err(e) = self.store.ack_sink(&counters.name, seq).await {
            store_trouble(&counters.name, e)?;
        }
        counters.cursor.store(seq, Ordering::Relaxed);
        Ok(())
    }

    pub(super) async fn dead_letter(
        &self,
        counters: &Counters,
        se: &StoredEvent,
        attempts: u32,
        error: &str,
    ) {
        tracing::warn!(sink = %counters.public, id = %se.event.id, seq = se.seq, attempts, error, "event rejected by the sink; dead-lettered");
        match self
            .store
            .dead_letter(&counters.name, se.seq, attempts, error)
            .await
        {
            Ok(()) => {
                counters.dead_letters.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::error!(sink = %counters.public, id = %se.event.id, error = %e, "cannot dead-letter an event")
            }
        }
        counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
        if se.event.kind != EventKind::SinkDeadLettered {
            let ev = Event::new(
                EventKind::SinkDeadLettered,
                crate::now_ms(),
                &mut rand::rng(),
            )
            .payload(serde_json::json!({
                "sink": counters.public,
                "event_id": se.event.id,
                "event_kind": se.event.kind.as_str(),
                "seq": se.seq,
                "attempts": attempts,
                "error": error,
            }));
            self.store.submit(vec![Write::Event(ev)]);
        }
    }
}
