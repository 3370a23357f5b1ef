//! What this instance holds in memory over hours (issue 13): the sweep that
//! sheds idle agents and tasks, and the health monitor's watch over agents
//! that went silent while out of memory.
//!
//! The rules are `hale_core::memory`'s. Every instance sheds its own memory
//! every [`SWEEP_EVERY`] ([`run`]); only the instance holding the health monitor's
//! lease reads silent agents back ([`watch_silent`]), because only it
//! judges them. Silence is read from the agents' rows (`last_seen_ms`, set
//! by every counted turn on any instance), walked in order with a cursor,
//! so each silence is read once, in batches, however many agents the store
//! holds.

use crate::state::{Gateway, Shed, wall_ms};
use hale_core::memory::{
    SILENT_BATCH, SILENT_BATCHES_PER_CHECK, SWEEP_EVERY, SilenceCursor, silent_since,
};
use std::sync::Weak;
use std::time::{Duration, Instant};

/// Sheds idle agents, tasks and breakers at rest every [`SWEEP_EVERY`]
/// until the gateway is dropped.
pub async fn run(gw: Weak<Gateway>) {
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        let Some(gw) = gw.upgrade() else { return };
        let shed = gw.shed_idle(wall_ms(), Instant::now());
        if shed != Shed::default() {
            tracing::debug!(
                agents = shed.agents,
                tasks = shed.tasks,
                breakers = shed.breakers,
                "idle state shed"
            );
        }
    }
}

/// Where the silence check of a monitor started at `now_ms` begins: agents
/// seen from `stuck_after` before it (an older silence was an earlier
/// monitor's to judge; a restart never watched agents it had not seen).
pub fn silence_cursor(gw: &Gateway, now_ms: u64) -> SilenceCursor {
    SilenceCursor::starting_at(silent_since(now_ms, gw.cfg.health.stuck_after).unwrap_or(0))
}

/// Reads back the agents silent for `health.stuck_after` that are not
/// watched here (shed from memory, or seen only by another instance) and
/// watches them as last heard from at their last turn, so the monitor's
/// next evaluation judges them stuck as if they had stayed. Paused agents
/// are skipped (a pause is not a silence to judge). A store error is logged
/// and the cursor stays, so the next check tries again. Returns how many it
/// started watching.
pub async fn watch_silent(
    gw: &Gateway,
    cursor: &mut SilenceCursor,
    now_ms: u64,
    now: Instant,
) -> usize {
    let Some(until) = silent_since(now_ms, gw.cfg.health.stuck_after) else {
        return 0;
    };
    let mut watched = 0;
    for _ in 0..SILENT_BATCHES_PER_CHECK {
        let rows = match gw
            .store
            .agents_seen_between(cursor, until, SILENT_BATCH)
            .await
        {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "looking for silent agents failed");
                return watched;
            }
        };
        let full = rows.len() == SILENT_BATCH;
        for row in rows {
            let Some(seen) = row.last_seen_ms else {
                continue;
            };
            cursor.advance(seen, &row.id);
            if row.paused || gw.health.knows(&row.id) {
                continue;
            }
            let id = row.id.clone();
            gw.hold_row(row);
            let silent_for = Duration::from_millis(now_ms.saturating_sub(seen));
            let at = now.checked_sub(silent_for).unwrap_or(now);
            if gw.health.watch_silent(&id, at) {
                watched += 1;
            }
        }
        if !full {
            break;
        }
    }
    if watched > 0 {
        gw.health.wake();
    }
    watched
}
