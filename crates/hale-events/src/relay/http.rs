//! The relay of one HTTP sink (a webhook or an alert channel): one event at
//! a time, in order, through the [`Gate`].

use hale_core::event::EventKind;
use hale_store::StoredEvent;

use super::gate::{Gate, HeadStep};
use super::shared::{pause, store_trouble, wait_for_more};
use super::sinks::Deliverer;

/// The relay of one HTTP sink: a webhook or an alert channel.
pub(super) struct HttpRelay {
    pub(super) sink: Deliverer,
    pub(super) kinds: Option<Vec<EventKind>>,
    pub(super) gate: Gate,
}

enum Outcome {
    Done,
    Cancelled,
}

impl HttpRelay {
    pub(super) async fn run(mut self) -> anyhow::Result<()> {
        let sh = self.gate.shared.clone();
        let name = self.gate.counters.name.clone();
        let token = self.gate.token.clone();
        let mut watch = sh.store.watch_seq();
        let Some(mut cursor) = self.gate.initial_cursor().await? else {
            return Ok(());
        };
        loop {
            if token.is_cancelled() {
                return Ok(());
            }
            let target = *watch.borrow_and_update();
            let batch = match sh
                .store
                .events_after(cursor, sh.tuning.batch, self.kinds.as_deref())
                .await
            {
                Ok(b) => b,
                Err(e) => {
                    store_trouble(&name, e)?;
                    if !pause(&token, sh.tuning.retry_max).await {
                        return Ok(());
                    }
                    continue;
                }
            };
            let full = batch.len() >= sh.tuning.batch;
            for se in &batch {
                match self.deliver(se).await {
                    Outcome::Done => {}
                    Outcome::Cancelled => return Ok(()),
                }
                cursor = se.seq;
                self.gate.ack(cursor).await?;
            }
            // A short read covered everything committed up to `target`;
            // events of other kinds up to there are done for this sink.
            if !full && target > cursor {
                cursor = target;
                self.gate.ack(cursor).await?;
            }
            if batch.is_empty() {
                self.gate.counters.clear_head();
                if !wait_for_more(&token, &mut watch).await? {
                    return Ok(());
                }
            }
        }
    }

    /// Delivers one event: waits out a down sink, retries a rejection, and
    /// dead-letters it after the last rejected attempt.
    async fn deliver(&mut self, se: &StoredEvent) -> Outcome {
        self.gate.counters.note_head(se);
        let mut attempts = 0u32;
        loop {
            if !self.gate.wait_turn().await {
                return Outcome::Cancelled;
            }
            let result = tokio::select! {
                _ = self.gate.token.cancelled() => return Outcome::Cancelled,
                r = self.sink.deliver_one(se) => r,
            };
            let e = match result {
                Ok(()) => {
                    self.gate.delivered(1);
                    return Outcome::Done;
                }
                Err(e) => e,
            };
            match self.gate.head_failed(se, &e, &mut attempts).await {
                HeadStep::Retry => {}
                HeadStep::DeadLettered => return Outcome::Done,
                HeadStep::Cancelled => return Outcome::Cancelled,
            }
        }
    }
}
