//! The gateway's side of the health history (docs/operations.md, "Health
//! history"): every attempt's outcome and latency is counted per deployment and
//! minute in memory ([`HistoryRt::record`], no database write per turn), and
//! [`run`] flushes the closed minutes once a minute as one group-committed
//! `Write::Minutes`, prunes what is older than the retention every
//! `HISTORY_PRUNE_EVERY`, and at shutdown commits the open minute too.
//! Transitions need nothing here: the store keeps them as their events are
//! appended. The rules are `hale_core::history`.

use std::sync::Mutex;
use std::time::Duration;

use hale_core::config::{HISTORY_FLUSH_EVERY, HISTORY_PRUNE_EVERY, HISTORY_RETENTION, Target};
use hale_core::history::{MinuteAggregator, MinuteRow, prune_cutoff};
use hale_store::{Store, Write};
use tokio_util::sync::CancellationToken;

use crate::emit::wall_ms;

/// Minutes being counted.
#[derive(Debug, Default)]
pub struct HistoryRt {
    minutes: Mutex<MinuteAggregator>,
}

impl HistoryRt {
    /// Counts one attempt on `target` that ended now.
    pub fn record(&self, target: &Target, ok: bool, latency: Duration) {
        let ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
        // `provider/model`, as `Target` displays, without `format!` (a turn
        // records one per attempt).
        let mut key = String::with_capacity(target.provider.len() + 1 + target.model.len());
        key.push_str(&target.provider);
        key.push('/');
        key.push_str(&target.model);
        self.lock().record(&key, wall_ms(), ok, ms);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MinuteAggregator> {
        self.minutes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The minutes closed by `now_ms`, taken out.
    pub fn take_closed(&self, now_ms: u64) -> Vec<MinuteRow> {
        self.lock().take_closed(now_ms)
    }

    /// Every minute, the open one too (at shutdown).
    pub fn take_all(&self) -> Vec<MinuteRow> {
        self.lock().take_all()
    }
}

/// Flushes closed minutes every [`HISTORY_FLUSH_EVERY`] and prunes every
/// [`HISTORY_PRUNE_EVERY`] until `token` is cancelled; then commits what is
/// left (the open minute) before returning.
pub fn run<'a>(
    rt: &'a HistoryRt,
    store: Store,
    token: CancellationToken,
) -> futures::future::BoxFuture<'a, anyhow::Result<()>> {
    Box::pin(run_inner(rt, store, token))
}

async fn run_inner(rt: &HistoryRt, store: Store, token: CancellationToken) -> anyhow::Result<()> {
    let mut flush = tokio::time::interval(HISTORY_FLUSH_EVERY);
    let mut prune = tokio::time::interval(HISTORY_PRUNE_EVERY);
    loop {
        tokio::select! {
            _ = token.cancelled() => {
                let rest = rt.take_all();
                if !rest.is_empty()
                    && let Err(e) = store.commit(vec![Write::Minutes(rest)]).await
                {
                    tracing::warn!(error = %e, "health history: the last minutes were not stored");
                }
                return Ok(());
            }
            _ = flush.tick() => {
                let closed = rt.take_closed(wall_ms());
                if !closed.is_empty() {
                    store.submit(vec![Write::Minutes(closed)]);
                }
            }
            _ = prune.tick() => {
                let cutoff = prune_cutoff(wall_ms(), HISTORY_RETENTION);
                match store.prune_history(cutoff).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(rows = n, "health history: pruned"),
                    Err(e) => tracing::warn!(error = %e, "health history: pruning failed; retrying later"),
                }
            }
        }
    }
}
