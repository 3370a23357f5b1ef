//! Agent control across instances (DESIGN §8 "Scale-out"): an operator's
//! pause, resume, terminate, decision or task reset on any instance holds on
//! every instance within a second.
//!
//! The database row is the truth and the notification only a wake-up. Each
//! control change commits its agent row together with an [`announce`]ment
//! (PostgreSQL `NOTIFY hale_agents`, delivered at commit). Every instance
//! runs [`follow_agents`]: on a notification it re-reads that agent's row
//! and applies its control state to the local cache, which the turn path
//! keeps reading — no database round trip per request. After every
//! (re)connect of the listener it re-reads every agent, since PostgreSQL
//! does not keep notifications for a disconnected listener.
//!
//! An operator's pause or resume also carries the state it set in the
//! announcement, applied over the row: the row can be older than the change
//! when another instance wrote the agent's whole record from a turn it
//! served just before it heard (last writer wins); the instance that applies
//! the announced state writes it back with its next write of the agent.
//!
//! What is applied ([`apply_control`]): the pause (who, since, next trial),
//! the counters when no count of this instance is in flight, the failures
//! in a row cleared when the row says resumed, and the terminated tasks; a
//! task reset also clears the task's local guard and spend. On SQLite there
//! is one instance and the listener never yields.
//!
//! Counted once ([`follow_counts`]): every turn's count is added to the row
//! by the database (`hale_core::counts`), which answers with the totals after
//! it; this instance folds them into its cache, so its view includes the
//! other instances' turns as of its own last commit, and pauses the agent
//! when those totals reach the threshold.

use std::sync::Arc;
use std::time::Duration;

use hale_core::counts::Count;
use hale_store::{AgentChange, AgentControl, AgentRecord, Heard, StoreError, Write};
use tokio_util::sync::CancellationToken;

use crate::state::{AgentRt, Gateway};

/// Wait before retrying a failed re-read of the agents.
const REREAD_RETRY: Duration = Duration::from_secs(1);

/// The write that announces a control change of `agent` (and the reset of
/// `task`) to the other instances; commit it with the change.
pub fn announce(agent: &str, task: Option<&str>) -> Write {
    announce_control(agent, task, None)
}

/// [`announce`] of an operator's pause or resume, carrying the state it set
/// (applied over a row that a stale write from another instance may have
/// overwritten; see [`AgentChange::control`]).
pub fn announce_control(agent: &str, task: Option<&str>, control: Option<AgentControl>) -> Write {
    Write::Announce(AgentChange {
        agent: agent.to_owned(),
        task: task.map(str::to_owned),
        control,
        schema: None,
    })
}

/// Applies an announced control state over the cache (after the row) and
/// writes the agent's record back, so a row a stale write overwrote holds
/// the operator's change again.
fn apply_announced(gw: &Gateway, agent: &str, control: AgentControl) {
    // An agent not in memory has no stale state here to correct (a paused
    // one was taken in by the caller).
    let Some(rec) = gw.update_agent_if_held(agent, |rt| {
        match control {
            AgentControl::Paused { pause } => rt.set_pause(Some(pause)),
            AgentControl::Active => {
                rt.set_pause(None);
                // Local only: the resuming instance wrote the clear; this one is
                // dropped from the view at the next confirmation, which has it.
                rt.count(Count::clear());
            }
        }
        rt.record.clone()
    }) else {
        return;
    };
    gw.store.submit(vec![Write::Agent(rec)]);
}

/// Applies the control state of `row` (as another instance committed it) to
/// this instance's cache. An agent not in memory (shed, `hale_core::memory`)
/// stays out — its row is the truth and is read back on its next request —
/// unless it is paused: a pause is held in memory (its resume is timed here).
pub fn apply_control(gw: &Gateway, row: &AgentRecord) {
    if !gw.holds(&row.id) {
        if row.paused {
            gw.hold_row(row.clone());
        }
        return;
    }
    let fresh = AgentRt::new(row.clone());
    gw.update_agent_rt(&row.id, |rt| {
        let was_paused = rt.pause.is_some();
        rt.set_pause(fresh.pause);
        rt.reread(row);
        if was_paused && fresh.pause.is_none() {
            rt.count(Count::clear());
        }
        if !rt.record.state.is_object() {
            rt.record.state = serde_json::json!({});
        }
        rt.record.state["health"] = row.state["health"].clone();
    });
    crate::health::adopt_terminated(gw, &row.id, &row.state);
}

/// Follows other instances' agent control changes until `token` is
/// cancelled (a named task of `hale serve`).
pub async fn follow_agents(gw: Arc<Gateway>, token: CancellationToken) -> anyhow::Result<()> {
    let mut listener = gw.store.listen_agents().await?;
    loop {
        let heard = tokio::select! {
            _ = token.cancelled() => return Ok(()),
            h = listener.next() => h,
        };
        match heard {
            Ok(Heard::Reconnected) => reread_all(&gw, &token).await,
            Ok(Heard::Change(change)) => {
                if let Some(task) = &change.task {
                    let _ = gw.tasks.reset(&change.agent, task);
                }
                match gw.store.agent(&change.agent).await {
                    Ok(Some(row)) => {
                        // An operator's pause is applied here even to an agent
                        // this instance had shed.
                        if matches!(change.control, Some(AgentControl::Paused { .. })) {
                            gw.hold_row(row.clone());
                        }
                        apply_control(&gw, &row);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(agent = %change.agent, error = %e, "re-reading a changed agent failed; re-reading all");
                        reread_all(&gw, &token).await;
                    }
                }
                if let Some(control) = change.control {
                    apply_announced(&gw, &change.agent, control);
                }
            }
            Err(StoreError::Closed) if token.is_cancelled() => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Folds the totals the database answered to this instance's counts into
/// the cache (agents' counters, tasks' spend), and pauses an agent whose
/// failures in a row reached the threshold through other instances' turns.
/// Runs until the store's writer stops or the gateway is gone (started by
/// [`Gateway::new`], so every turn's count is followed).
pub(crate) async fn follow_counts(
    gw: std::sync::Weak<Gateway>,
    mut counted: tokio::sync::mpsc::UnboundedReceiver<hale_store::Counted>,
) {
    while let Some(c) = counted.recv().await {
        let Some(gw) = gw.upgrade() else { return };
        if let Some(t) = &c.task {
            gw.tasks.confirm(&c.agent, t);
        }
        // An agent forgotten meanwhile stays forgotten (its row has the totals).
        if gw
            .update_agent_if_held(&c.agent, |rt| rt.confirm(c.n, c.totals))
            .is_none()
        {
            continue;
        }
        let writes = crate::agents::pause_on_counted(&gw, &c.agent, crate::state::wall_ms());
        if !writes.is_empty() {
            gw.store.submit(writes);
        }
    }
}

/// Re-reads every agent row and applies it, a page at a time (the store
/// holds every agent ever seen), retrying a failed page until it succeeds
/// or `token` is cancelled.
async fn reread_all(gw: &Gateway, token: &CancellationToken) {
    let mut after: Option<String> = None;
    loop {
        match gw
            .store
            .agents_page(after.as_deref(), None, hale_core::pages::PAGE_MAX)
            .await
        {
            Ok(rows) => {
                for row in &rows {
                    apply_control(gw, row);
                }
                match rows.last() {
                    Some(last) if rows.len() == hale_core::pages::PAGE_MAX => {
                        after = Some(last.id.clone());
                    }
                    Some(_) | None => return,
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "re-reading the agents failed; retrying");
                tokio::select! {
                    _ = token.cancelled() => return,
                    _ = tokio::time::sleep(REREAD_RETRY) => {}
                }
            }
        }
    }
}
