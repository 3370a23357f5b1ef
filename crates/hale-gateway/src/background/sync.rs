//! Agent control across instances (docs/operations.md, "Scale-out on
//! PostgreSQL"): an operator's pause, resume, terminate, decision or task reset
//! on any instance holds on every instance within a second.
//!
//! The database row is the truth and the notification only a wake-up. Each
//! control change commits its agent row together with an announcement
//! ([`crate::agents::announce`]
//! ; PostgreSQL `NOTIFY hale_agents`, delivered at commit). Every instance
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
//! What is applied ([`Follower::apply_control`], `Agents::apply_remote`): the pause (who, since, next trial),
//! the counters when no count of this instance is in flight, the failures
//! in a row cleared when the row says resumed, and the terminated tasks; a
//! task reset also clears the task's local guard and spend. A row read while
//! this instance changed the agent's pause itself (an operator's pause
//! answered here while a re-read was on its way) is older than that change
//! and is not applied (`agents::control_epoch`); the change's own
//! announcement follows. On SQLite there is one instance and the listener
//! never yields.
//!
//! Counted once ([`follow_counts`]): every turn's count is added to the row
//! by the database (`hale_core::counts`), which answers with the totals after
//! it; this instance folds them into its cache, so its view includes the
//! other instances' turns as of its own last commit, and pauses the agent
//! when those totals reach the threshold.
//!
//! Converged without traffic ([`follow_agents`], `Heard::Counts`): every
//! transaction that commits counts also notifies the totals after them
//! (`NOTIFY hale_counts`); each instance folds those of the agents it holds
//! (`Tally::observe`: only newer totals, and after its own pending counts
//! are confirmed), so its counters follow every instance's committed turns
//! within a notification's latency.

use std::sync::{Arc, Weak};
use std::time::Duration;

use hale_store::{AgentControl, AgentRecord, Heard, Store, StoreError};
use tokio_util::sync::CancellationToken;

use crate::agents::Agents;
use crate::emit::wall_ms;
use crate::guard::Tasks;
use crate::health::HealthRt;

/// Wait before retrying a failed re-read of the agents.
const REREAD_RETRY: Duration = Duration::from_secs(1);

/// What follows other instances' changes: the agents' cache, the health
/// runtime (terminated tasks) and the tasks' guard state (a task reset).
#[derive(Clone)]
pub struct Follower {
    pub store: Store,
    pub agents: Arc<Agents>,
    pub health: Arc<HealthRt>,
    pub tasks: Arc<Tasks>,
}

impl Follower {
    /// Applies the control state of `row` (as another instance committed it)
    /// to this instance's cache (`Agents::apply_remote`), and its terminated
    /// tasks to the health runtime.
    pub fn apply_control(&self, row: &AgentRecord, read_at: u64) {
        if self.agents.apply_remote(row, read_at) {
            self.health.adopt_terminated(&row.id, &row.state);
        }
    }

    /// Holds `row` in memory unless the agent is there already, with its
    /// terminated tasks.
    fn hold_row(&self, row: AgentRecord) {
        let (id, state) = (row.id.clone(), row.state.clone());
        if self.agents.hold_row(row) {
            self.health.adopt_terminated(&id, &state);
        }
    }
}

/// Follows other instances' agent control changes until `token` is
/// cancelled (a named task of `hale serve`).
pub fn follow_agents(
    f: Follower,
    token: CancellationToken,
) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(follow_agents_inner(f, token))
}

async fn follow_agents_inner(f: Follower, token: CancellationToken) -> anyhow::Result<()> {
    let mut listener = f.store.listen_agents().await?;
    loop {
        let heard = tokio::select! {
            _ = token.cancelled() => return Ok(()),
            h = listener.next() => h,
        };
        match heard {
            Ok(Heard::Reconnected) => reread_all(&f, &token).await,
            Ok(Heard::Counts(counted)) => f.agents.observe(&counted),
            Ok(Heard::Change(change)) => {
                if let Some(task) = &change.task {
                    let _ = f.tasks.reset(&change.agent, task);
                }
                let read_at = crate::agents::control_epoch();
                match f.store.agent(&change.agent).await {
                    Ok(Some(row)) => {
                        // An operator's pause is applied here even to an agent
                        // this instance had shed.
                        if matches!(change.control, Some(AgentControl::Paused { .. })) {
                            f.hold_row(row.clone());
                        }
                        f.apply_control(&row, read_at);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(agent = %change.agent, error = %e, "re-reading a changed agent failed; re-reading all");
                        reread_all(&f, &token).await;
                    }
                }
                if let Some(control) = change.control {
                    f.agents.apply_announced(&change.agent, control);
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
/// `Gateway::new`, so every turn's count is followed).
pub fn follow_counts(
    store: Store,
    agents: Weak<Agents>,
    tasks: Weak<Tasks>,
    counted: tokio::sync::mpsc::UnboundedReceiver<hale_store::Counted>,
) -> futures::future::BoxFuture<'static, ()> {
    Box::pin(follow_counts_inner(store, agents, tasks, counted))
}

async fn follow_counts_inner(
    store: Store,
    agents: Weak<Agents>,
    tasks: Weak<Tasks>,
    mut counted: tokio::sync::mpsc::UnboundedReceiver<hale_store::Counted>,
) {
    while let Some(c) = counted.recv().await {
        let (Some(agents), Some(tasks)) = (agents.upgrade(), tasks.upgrade()) else {
            return;
        };
        if let Some(t) = &c.task {
            tasks.confirm(&c.agent, t);
        }
        // An agent forgotten meanwhile stays forgotten (its row has the totals).
        if agents
            .update_if_held(&c.agent, |rt| rt.confirm(c.n, c.totals))
            .is_none()
        {
            continue;
        }
        let writes = agents.pause_on_counted(&c.agent, wall_ms());
        if !writes.is_empty() {
            store.submit(writes);
        }
    }
}

/// Re-reads every agent row and applies it, a page at a time (the store
/// holds every agent ever seen), retrying a failed page until it succeeds
/// or `token` is cancelled.
async fn reread_all(f: &Follower, token: &CancellationToken) {
    let mut after: Option<String> = None;
    loop {
        let read_at = crate::agents::control_epoch();
        match f
            .store
            .agents_page(after.as_deref(), None, hale_core::pages::PAGE_MAX)
            .await
        {
            Ok(rows) => {
                for row in &rows {
                    f.apply_control(row, read_at);
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
