//! The part every relay shares ([`Gate`]): the sink's breaker and counters,
//! and the failure rule of the module docs of [`super`] — wait out a down
//! sink, retry a rejected event, dead-letter it after the last attempt.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use hale_core::delivery::{
    RejectionStep, SinkBreaker, SinkState, Verdict, after_rejection, verdict,
};
use hale_store::StoredEvent;
use tokio_util::sync::CancellationToken;

use super::shared::{Shared, pause, store_trouble};
use super::status::Counters;
use crate::DeliveryError;

/// What a relay does with the first undelivered event after it failed.
pub(super) enum HeadStep {
    /// Try it again (the breaker says when).
    Retry,
    /// It was dead-lettered: move the cursor past it.
    DeadLettered,
    Cancelled,
}

/// The part every relay shares: the sink's breaker, its counters and the
/// rule of the module docs.
pub(super) struct Gate {
    pub(super) shared: Arc<Shared>,
    pub(super) counters: Arc<Counters>,
    breaker: SinkBreaker,
    pub(super) token: CancellationToken,
}

impl Gate {
    pub(super) fn new(
        shared: Arc<Shared>,
        counters: Arc<Counters>,
        token: CancellationToken,
    ) -> Self {
        let breaker = SinkBreaker::new(shared.tuning.down_backoff);
        Gate {
            shared,
            counters,
            breaker,
            token,
        }
    }

    /// Waits while the sink is down; false when cancelled meanwhile.
    pub(super) async fn wait_turn(&self) -> bool {
        loop {
            match self.breaker.wait(Instant::now()) {
                Some(wait) => {
                    self.counters.set_state(SinkState::Down);
                    if !pause(&self.token, wait).await {
                        return false;
                    }
                }
                None => {
                    self.counters.set_state(self.breaker.state(Instant::now()));
                    return true;
                }
            }
        }
    }

    /// The sink acknowledged `n` events.
    pub(super) fn delivered(&mut self, n: u64) {
        self.breaker.on_success();
        self.counters.delivered.fetch_add(n, Ordering::Relaxed);
        self.counters.set_error(None);
        self.counters.set_state(SinkState::Up);
    }

    /// `se`, the first undelivered event, failed with `e` (its
    /// `attempts`-th rejection so far is counted here).
    pub(super) async fn head_failed(
        &mut self,
        se: &StoredEvent,
        e: &DeliveryError,
        attempts: &mut u32,
    ) -> HeadStep {
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        self.counters.set_error(Some(&e.message));
        let v = verdict(e.failure);
        self.breaker.on_failure(v, Instant::now(), &mut rand::rng());
        match v {
            Verdict::SinkDown => {
                tracing::debug!(sink = %self.counters.public, id = %se.event.id, failures = self.breaker.failures(), error = %e, "sink down");
                self.counters.set_state(SinkState::Down);
                HeadStep::Retry
            }
            Verdict::EventRejected => {
                self.counters.set_state(SinkState::Up);
                *attempts += 1;
                tracing::debug!(sink = %self.counters.public, id = %se.event.id, attempts = *attempts, error = %e, "event rejected");
                let sh = &self.shared;
                match after_rejection(
                    *attempts,
                    sh.max_attempts,
                    sh.tuning.retry_initial,
                    sh.tuning.retry_max,
                ) {
                    RejectionStep::DeadLetter => {
                        sh.dead_letter(&self.counters, se, *attempts, &e.message)
                            .await;
                        HeadStep::DeadLettered
                    }
                    RejectionStep::RetryAfter(d) => {
                        if pause(&self.token, d).await {
                            HeadStep::Retry
                        } else {
                            HeadStep::Cancelled
                        }
                    }
                }
            }
        }
    }

    /// The sink's cursor from the store, retried while the store has trouble.
    pub(super) async fn initial_cursor(&self) -> anyhow::Result<Option<i64>> {
        let sh = &self.shared;
        loop {
            match sh.store.sink_cursor(&self.counters.name).await {
                Ok(c) => return Ok(Some(c)),
                Err(e) => {
                    store_trouble(&self.counters.name, e)?;
                    if !pause(&self.token, sh.tuning.retry_max).await {
                        return Ok(None);
                    }
                }
            }
        }
    }

    pub(super) async fn ack(&self, seq: i64) -> anyhow::Result<()> {
        self.shared.ack(&self.counters, seq).await
    }
}
