//! The outbox's hard cap: every [`super::RelayTuning::shed_interval`] the
//! oldest undelivered events over the cap are shed, counted and reported by
//! an `outbox.shed` event.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use hale_core::event::{Event, EventKind};
use hale_store::{StoreError, Write};
use tokio_util::sync::CancellationToken;

use super::shared::{Shared, pause};

/// Room kept under the outbox cap after a shed, for the `outbox.shed` report.
pub const SHED_HEADROOM: u64 = 1;

pub(super) async fn run_cap(
    shared: Arc<Shared>,
    cap: u64,
    token: CancellationToken,
) -> anyhow::Result<()> {
    loop {
        if !pause(&token, shared.tuning.shed_interval).await {
            return Ok(());
        }
        let shed = match shared.store.shed_over_cap(cap).await {
            // Over the cap: shed SHED_HEADROOM more, so the report below
            // does not itself push the outbox over the cap (which would
            // shed one event and report it again, every interval).
            Ok(n) if n > 0 => match shared
                .store
                .shed_over_cap(cap.saturating_sub(SHED_HEADROOM))
                .await
            {
                Ok(m) => Ok(n + m),
                Err(e) => {
                    tracing::warn!(error = %e, "shedding the report headroom failed");
                    Ok(n)
                }
            },
            other => other,
        };
        match shed {
            Ok(0) => {}
            Ok(n) => {
                let total = shared.shed.fetch_add(n, Ordering::Relaxed) + n;
                let ev = Event::new(EventKind::OutboxShed, crate::now_ms(), &mut rand::rng())
                    .payload(serde_json::json!({ "shed": n, "cap": cap, "total_shed": total }));
                shared.store.submit(vec![Write::Event(ev)]);
            }
            Err(StoreError::Closed) => {
                return Err(anyhow::anyhow!(
                    "the store was closed under the outbox cap task"
                ));
            }
            Err(e) => tracing::warn!(error = %e, "enforcing the outbox cap failed; retrying"),
        }
    }
}
