//! The NATS relay: pipelined publishes (a window, then their acks in order)
//! with the slow start after a failed window, through the [`Gate`] and the
//! sink's connection cache.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use hale_core::delivery::{Verdict, verdict};
use hale_store::StoredEvent;

use super::gate::{Gate, HeadStep};
use super::shared::{pause, store_trouble, wait_for_more};
use super::sinks::NatsConn;
use crate::DeliveryError;

pub(super) struct NatsRelay {
    pub(super) conn: Arc<NatsConn>,
    pub(super) gate: Gate,
}

impl NatsRelay {
    pub(super) async fn run(mut self) -> anyhow::Result<()> {
        let sh = self.gate.shared.clone();
        let name = self.gate.counters.name.clone();
        let token = self.gate.token.clone();
        let mut watch = sh.store.watch_seq();
        let Some(mut cursor) = self.gate.initial_cursor().await? else {
            return Ok(());
        };
        // Rejections of the first undelivered event (by seq).
        let mut attempts: HashMap<i64, u32> = HashMap::new();
        let mut slow_start = false;
        loop {
            if token.is_cancelled() {
                return Ok(());
            }
            watch.borrow_and_update();
            let batch = match sh.store.events_after(cursor, sh.tuning.batch, None).await {
                Ok(b) => b,
                Err(e) => {
                    store_trouble(&name, e)?;
                    if !pause(&token, sh.tuning.retry_max).await {
                        return Ok(());
                    }
                    continue;
                }
            };
            if batch.is_empty() {
                self.gate.counters.clear_head();
                if !wait_for_more(&token, &mut watch).await? {
                    return Ok(());
                }
                continue;
            }
            let mut i = 0;
            while i < batch.len() {
                self.gate.counters.note_head(&batch[i]);
                if !self.gate.wait_turn().await {
                    return Ok(());
                }
                let sink = tokio::select! {
                    _ = token.cancelled() => return Ok(()),
                    r = self.conn.get_fresh() => r,
                };
                let sink = match sink {
                    Ok((s, fresh)) => {
                        // A new connection (start, or after an outage): skip
                        // what the stream stored before the acks were lost.
                        let pending =
                            &batch[i..(i + sh.tuning.nats_window.max(1)).min(batch.len())];
                        let stored = if fresh {
                            let ids: Vec<&str> =
                                pending.iter().map(|se| se.event.id.as_str()).collect();
                            tokio::select! {
                                _ = token.cancelled() => return Ok(()),
                                n = s.stored_prefix(&ids) => n,
                            }
                        } else {
                            0
                        };
                        if stored > 0 {
                            tracing::info!(
                                stored,
                                "NATS: the stream already holds the next events; skipping them"
                            );
                            for se in &pending[..stored] {
                                attempts.remove(&se.seq);
                            }
                            self.gate.delivered(stored as u64);
                            cursor = pending[stored - 1].seq;
                            self.gate.ack(cursor).await?;
                            i += stored;
                            continue;
                        }
                        s
                    }
                    Err(e) => {
                        // No connection: the first pending event's attempt failed.
                        match self.head_failed(&batch[i], &e, &mut attempts).await {
                            HeadStep::Retry => slow_start = true,
                            HeadStep::DeadLettered => {
                                cursor = batch[i].seq;
                                self.gate.ack(cursor).await?;
                                i += 1;
                            }
                            HeadStep::Cancelled => return Ok(()),
                        }
                        continue;
                    }
                };
                let window = if slow_start {
                    1
                } else {
                    sh.tuning.nats_window.max(1)
                };
                let chunk = &batch[i..(i + window).min(batch.len())];
                let results = tokio::select! {
                    _ = token.cancelled() => return Ok(()),
                    r = sink.publish_window(chunk) => r,
                };
                // The acknowledged prefix of the window, and the first failure.
                let mut acked = 0usize;
                let mut head: Option<DeliveryError> = None;
                for r in results {
                    match r {
                        Ok(()) if head.is_none() => acked += 1,
                        // Published after the failed one: republished from
                        // the head (the stream deduplicates by id).
                        Ok(()) => {}
                        Err(e) if head.is_none() => head = Some(e),
                        Err(_) => {
                            self.gate.counters.failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                if acked > 0 {
                    for se in &chunk[..acked] {
                        attempts.remove(&se.seq);
                    }
                    self.gate.delivered(acked as u64);
                    cursor = chunk[acked - 1].seq;
                    self.gate.ack(cursor).await?;
                    i += acked;
                }
                match head {
                    None => slow_start = false,
                    Some(e) => {
                        let se = &chunk[acked];
                        self.gate.counters.note_head(se);
                        match self.head_failed(se, &e, &mut attempts).await {
                            HeadStep::Retry => slow_start = true,
                            HeadStep::DeadLettered => {
                                cursor = se.seq;
                                self.gate.ack(cursor).await?;
                                i += 1;
                            }
                            HeadStep::Cancelled => return Ok(()),
                        }
                    }
                }
            }
            // Forget attempt counts of events now behind the cursor.
            attempts.retain(|seq, _| *seq > cursor);
        }
    }

    /// [`Gate::head_failed`] with the rejection count kept per seq; a down
    /// sink also drops the connection (the next try reconnects).
    async fn head_failed(
        &mut self,
        se: &StoredEvent,
        e: &DeliveryError,
        attempts: &mut HashMap<i64, u32>,
    ) -> HeadStep {
        if verdict(e.failure) == Verdict::SinkDown {
            self.conn.reset().await;
        }
        let n = attempts.entry(se.seq).or_insert(0);
        let step = self.gate.head_failed(se, e, n).await;
        if matches!(step, HeadStep::DeadLettered) {
            attempts.remove(&se.seq);
        }
        step
    }
}
