//! `memory:` — how many idle agents and tasks stay in memory.

use crate::RawMemory;
use hale_core::memory::MemoryConfig;

/// `memory:` over the defaults. Zero is allowed: memory then holds only the
/// active agents and tasks.
pub(super) fn memory(r: &RawMemory, memory: &mut MemoryConfig) {
    if let Some(n) = &r.idle_agents {
        memory.idle_agents = n.value;
    }
    if let Some(n) = &r.idle_tasks {
        memory.idle_tasks = n.value;
    }
}
