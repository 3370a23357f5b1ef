//! Replaying dead letters (`hale dlq replay`, `POST /dlq/replay`) through
//! the running relays' sinks, in seq order, keeping each sink's order.

use std::sync::atomic::Ordering;

use hale_core::delivery::{RejectionStep, Verdict, after_rejection, verdict};
use hale_store::{StoreError, StoredEvent};
use serde::Serialize;

use super::Relays;

/// What a replay did, per event, in seq order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ReplayReport {
    pub delivered: Vec<ReplayItem>,
    /// Failed, or not attempted because an earlier event of the same sink
    /// failed (kept in the dead letters, so order is preserved).
    pub failed: Vec<ReplayItem>,
}

/// One replayed dead letter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ReplayItem {
    pub id: String,
    pub seq: i64,
    pub sink: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Relays {
    /// Re-delivers dead letters — of `sink` or of every sink, all or only
    /// `ids` — in their original seq order with their original ids. An event
    /// leaves the dead letters only once its sink acknowledged it. A
    /// rejection is retried up to `max_delivery_attempts` times; a sink that
    /// is down stops that sink's replay at once. After a failure the rest of
    /// that sink's letters stay put, so order holds.
    pub async fn replay(
        &self,
        sink: Option<&str>,
        ids: Option<&[String]>,
    ) -> anyhow::Result<ReplayReport> {
        let store = &self.shared.store;
        let mut letters = store.dlq_list(sink).await?;
        if let Some(ids) = ids {
            letters.retain(|d| ids.contains(&d.id));
        }
        let mut sinks: Vec<String> = letters.iter().map(|d| d.sink.clone()).collect();
        sinks.sort();
        sinks.dedup();
        let mut report = ReplayReport::default();
        for name in sinks {
            let handle = self.shared.sinks.iter().find(|s| s.counters.name == name);
            let mut stopped: Option<String> = None;
            for d in letters.iter().filter(|d| d.sink == name) {
                let item = |error: Option<String>| ReplayItem {
                    id: d.id.clone(),
                    seq: d.seq,
                    sink: name.clone(),
                    error,
                };
                let Some(handle) = handle else {
                    report.failed.push(item(Some(format!(
                        "no relay for sink {name} runs in this process"
                    ))));
                    continue;
                };
                if let Some(first) = &stopped {
                    report.failed.push(item(Some(format!(
                        "not attempted: earlier event {first} of this sink failed (kept in order)"
                    ))));
                    continue;
                }
                let se = StoredEvent {
                    seq: d.seq,
                    event: d.event.clone(),
                };
                let mut last_err = String::new();
                let mut rejections = 0u32;
                let ok = loop {
                    let e = match handle.deliverer.deliver_one(&se).await {
                        Ok(()) => break true,
                        Err(e) => e,
                    };
                    handle.counters.failed.fetch_add(1, Ordering::Relaxed);
                    match verdict(e.failure) {
                        Verdict::SinkDown => {
                            last_err = format!("sink down: {}", e.message);
                            break false;
                        }
                        Verdict::EventRejected => {
                            last_err = e.message;
                            rejections += 1;
                            match after_rejection(
                                rejections,
                                self.shared.max_attempts,
                                self.shared.tuning.retry_initial,
                                self.shared.tuning.retry_max,
                            ) {
                                RejectionStep::DeadLetter => break false,
                                RejectionStep::RetryAfter(pause) => {
                                    tokio::time::sleep(pause).await;
                                }
                            }
                        }
                    }
                };
                if ok {
                    handle.counters.delivered.fetch_add(1, Ordering::Relaxed);
                    let taken = store
                        .dlq_take(&name, Some(std::slice::from_ref(&d.id)))
                        .await?;
                    let _ = handle.counters.dead_letters.fetch_update(
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                        |n| Some(n.saturating_sub(taken.len() as u64)),
                    );
                    report.delivered.push(item(None));
                } else {
                    let attempts = d.attempts.saturating_add(rejections);
                    match store.dead_letter(&name, d.seq, attempts, &last_err).await {
                        // The event left the outbox since: the old letter stays as it was.
                        Ok(()) | Err(StoreError::NoSuchEvent(_)) => {}
                        Err(e) => {
                            tracing::warn!(sink = %name, id = %d.id, error = %e, "cannot update a dead letter")
                        }
                    }
                    stopped = Some(d.id.clone());
                    report.failed.push(item(Some(last_err)));
                }
            }
        }
        Ok(report)
    }
}
