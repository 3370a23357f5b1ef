//! What this instance holds in memory over hours (issue 13): the sweep that
//! sheds idle agents, tasks and breakers at rest.
//!
//! The rules are `hale_core::memory`'s. Every instance sheds its own memory
//! every [`SWEEP_EVERY`] ([`run`]); what one sweep drops is decided by the
//! components (`Agents::shed`, `Tasks::shed`,
//! `Deployments::forget_resting_breakers`), composed by the gateway
//! (`Gateway::shed_idle`). Agents that went silent while out of memory are
//! the health monitor's (`crate::health::Monitor::watch_silent`).

use hale_core::memory::SWEEP_EVERY;

/// What one sweep dropped from memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shed {
    pub agents: usize,
    pub tasks: usize,
    /// Breakers at rest (agent × deployment) that no turn held.
    pub breakers: usize,
}

/// Calls `sweep` every [`SWEEP_EVERY`] until it answers `None` (the
/// gateway is gone).
pub async fn run(sweep: impl Fn() -> Option<Shed>) {
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        let Some(shed) = sweep() else { return };
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
