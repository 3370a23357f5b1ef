//! Health of many agents: a name → slot map, the slots, and a schedule.
//!
//! Built for 100k agents heartbeating at once:
//! - a heartbeat for a known agent is one hash-map lookup and O(1) counter
//!   updates, with no allocation (the dirty list below has room reserved for
//!   every slot);
//! - `evaluate_all` touches only agents that heartbeated (or were changed by
//!   a setter) since the last call — the dirty list — and agents whose next
//!   time-based deadline has passed — a min-heap of deadlines. An agent that
//!   is quiet and far from any deadline costs nothing. Heap entries are lazy:
//!   each slot remembers the deadline of its live entry, older duplicates are
//!   skipped when popped, and because heartbeats only push deadlines later, a
//!   live entry is always a lower bound (popping early just re-checks).
//! - names are stored once (`Arc<str>` shared by the map and the slot).
//! - an agent may leave ([`HealthRegistry::forget_if_quiet`]) when nothing
//!   is under way for it; its slot goes on a free list and is reused by the
//!   next new agent, so the slots are bounded by the agents held, not by
//!   every agent ever seen. Heap entries of a freed slot are stale (they
//!   no longer match its `scheduled`) and are skipped like any other; when
//!   stale entries outnumber the live ones, the heap is rebuilt without
//!   them ([`HealthRegistry::scheduled_entries`]), so it too is sized by the
//!   agents held. Left lazy, it held every agent seen within `stale_after`
//!   (10 minutes: ~66k entries at 110 new agents a second, ~1.6 MB).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::{
    AgentHealth, DecideError, Decision, HealthSnapshot, HealthState, Heartbeat, Intervention,
    InterventionPhase, Interventions, StateChange,
};
use crate::config::HealthConfig;
use crate::memory::SHED_AFTER_IDLE;

/// Stale heap entries tolerated beyond the live ones before a rebuild
/// (a small registry is never rebuilt).
pub const HEAP_SLACK: usize = 64;

/// What `evaluate_all` reports for one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthOutput {
    /// Emit `health.state_changed`.
    StateChanged(StateChange),
    /// Act on it (nudge pending, escalate, terminate).
    Intervention(Intervention),
}

#[derive(Debug)]
struct Slot {
    name: Arc<str>,
    health: AgentHealth,
    interventions: Interventions,
    /// Deadline of this slot's live heap entry.
    scheduled: Option<Instant>,
    dirty: bool,
}

impl Slot {
    /// Nothing under way for this agent at `now` (see `forget_if_quiet`).
    fn quiet(&self, now: Instant) -> bool {
        match self.health.state() {
            HealthState::Healthy | HealthState::Degraded => self.interventions.at_rest(),
            // Its final state is in the agent's row: the gateway wrote it
            // when it terminated, and a minute is many group commits.
            HealthState::Terminated => {
                now.saturating_duration_since(self.health.state_since) >= SHED_AFTER_IDLE
                    && (self.interventions.phase() == InterventionPhase::Terminated
                        || self.interventions.at_rest())
            }
            HealthState::Stuck | HealthState::Failing => false,
        }
    }
}

/// The health of every agent the gateway held.
#[derive(Debug, Default)]
pub struct HealthRegistry {
    index: HashMap<Arc<str>, u32>,
    /// `None`: a freed slot, its index in `free`.
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    dirty: Vec<u32>,
    heap: BinaryHeap<Reverse<(Instant, u32)>>,
    /// Reused by `evaluate_all` so a steady state allocates nothing.
    due: Vec<u32>,
    name_bytes: usize,
}

impl HealthRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of agents.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Number of slots, freed ones included (what the registry's memory is
    /// sized by).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The slot of `agent`, registering it (healthy at `now`) when new.
    pub fn register(&mut self, agent: &str, now: Instant) -> u32 {
        if let Some(&i) = self.index.get(agent) {
            return i;
        }
        let name: Arc<str> = Arc::from(agent);
        self.name_bytes += agent.len();
        let slot = Slot {
            name: name.clone(),
            health: AgentHealth::new(now),
            interventions: Interventions::new(),
            scheduled: None,
            dirty: false,
        };
        let i = match self.free.pop() {
            Some(i) => {
                if let Some(s) = self.slots.get_mut(i as usize) {
                    *s = Some(slot);
                }
                i
            }
            None => {
                self.slots.push(Some(slot));
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        self.index.insert(name, i);
        // Room for every slot to be dirty at once: marking never allocates.
        self.dirty
            .reserve(self.slots.len().saturating_sub(self.dirty.len()));
        self.due
            .reserve(self.slots.len().saturating_sub(self.due.len()));
        self.mark_dirty(i);
        i
    }

    /// Registers `agent` as last heard from at `at` (an agent read back from
    /// the store after `at`'s silence): its time-based signals run from
    /// then. A known agent is left as it is. Returns whether it was new.
    pub fn register_silent(&mut self, agent: &str, at: Instant) -> bool {
        if self.index.contains_key(agent) {
            return false;
        }
        self.register(agent, at);
        true
    }

    /// Drops `agent` when nothing is under way for it: healthy or degraded
    /// with the planner watching (no nudge pending, no extra time granted),
    /// or terminated a minute ago or more (its final state is in its row,
    /// `SHED_AFTER_IDLE`); never stuck, failing
    /// or handed off. An evaluation still owed (dirty) is dropped with it:
    /// the caller sheds only agents with no turn in flight, idle for at
    /// least `SHED_AFTER_IDLE_MIN` (seconds; the monitor is woken by every
    /// finished turn), whose last turn the monitor, where it runs, has
    /// judged. Returns whether it is gone (an unknown agent: true, there is
    /// nothing to keep).
    pub fn forget_if_quiet(&mut self, agent: &str, now: Instant) -> bool {
        let Some(&i) = self.index.get(agent) else {
            return true;
        };
        let quiet = self
            .slots
            .get(i as usize)
            .and_then(Option::as_ref)
            .is_some_and(|s| s.quiet(now));
        if !quiet {
            return false;
        }
        self.index.remove(agent);
        if let Some(s) = self.slots.get_mut(i as usize) {
            if s.as_ref().is_some_and(|s| s.dirty) {
                self.dirty.retain(|&d| d != i);
            }
            *s = None;
        }
        self.name_bytes = self.name_bytes.saturating_sub(agent.len());
        self.free.push(i);
        self.drop_stale_entries();
        true
    }

    /// Heap entries, stale ones included (what the schedule's memory is
    /// sized by): at most twice the live ones plus [`HEAP_SLACK`].
    pub fn scheduled_entries(&self) -> usize {
        self.heap.len()
    }

    /// Rebuilds the heap without its stale entries (a freed slot's, or a
    /// later duplicate of a slot's live deadline) once they outnumber the
    /// live ones: O(entries), after at least as many entries went stale, so
    /// O(1) per forgotten agent amortised.
    fn drop_stale_entries(&mut self) {
        let live = self.index.len();
        if self.heap.len() <= 2 * live + HEAP_SLACK {
            return;
        }
        let slots = &self.slots;
        self.heap.retain(|&Reverse((t, i))| {
            slots
                .get(i as usize)
                .and_then(Option::as_ref)
                .is_some_and(|s| s.scheduled == Some(t))
        });
        // Capacity follows: a heap that once held a burst's entries gives
        // the room back.
        if self.heap.capacity() > 4 * self.heap.len() + HEAP_SLACK {
            self.heap.shrink_to(2 * self.heap.len() + HEAP_SLACK);
        }
    }

    fn mark_dirty(&mut self, i: u32) {
        if let Some(Some(slot)) = self.slots.get_mut(i as usize)
            && !slot.dirty
        {
            slot.dirty = true;
            self.dirty.push(i);
        }
    }

    fn slot_mut(&mut self, agent: &str) -> Option<(u32, &mut Slot)> {
        let i = *self.index.get(agent)?;
        self.slots
            .get_mut(i as usize)
            .and_then(Option::as_mut)
            .map(|s| (i, s))
    }

    /// Records a heartbeat; registers an unknown agent first (the only case
    /// that allocates).
    pub fn heartbeat(&mut self, agent: &str, hb: &Heartbeat<'_>, now: Instant) {
        let i = match self.index.get(agent) {
            Some(&i) => i,
            None => self.register(agent, now),
        };
        if let Some(Some(slot)) = self.slots.get_mut(i as usize) {
            slot.health.heartbeat(hb, now);
        }
        self.mark_dirty(i);
    }

    /// The breaker of `agent`'s provider opened or closed. Unknown agent: no-op.
    pub fn set_breaker_open(&mut self, agent: &str, open: bool) {
        if let Some((i, slot)) = self.slot_mut(agent) {
            slot.health.set_breaker_open(open);
            self.mark_dirty(i);
        }
    }

    /// The gateway could not make `agent`'s context fit. Unknown agent: no-op.
    pub fn set_context_exhausted(&mut self, agent: &str, v: bool) {
        if let Some((i, slot)) = self.slot_mut(agent) {
            slot.health.set_context_exhausted(v);
            self.mark_dirty(i);
        }
    }

    /// The pending nudge for `agent`, taken (delivered once).
    pub fn take_pending_nudge(&mut self, agent: &str) -> Option<String> {
        self.slot_mut(agent)?.1.interventions.take_pending_nudge()
    }

    /// An operator's decision; `Terminate` also terminates the agent's health
    /// and returns that change.
    pub fn decide(
        &mut self,
        agent: &str,
        d: Decision,
        now: Instant,
    ) -> Result<Option<StateChange>, DecideError> {
        let Some((i, slot)) = self.slot_mut(agent) else {
            return Err(DecideError::NoEscalation);
        };
        slot.interventions.decide(d, now)?;
        let change = match d {
            Decision::Terminate => slot
                .health
                .terminate("terminated by operator decision", now),
            Decision::MoreTime(_) | Decision::HandOff => None,
        };
        self.mark_dirty(i);
        Ok(change)
    }

    /// Terminates `agent` (operator or limit). Unknown agent: `None`.
    pub fn terminate(&mut self, agent: &str, reason: &str, now: Instant) -> Option<StateChange> {
        let (i, slot) = self.slot_mut(agent)?;
        let change = slot.health.terminate(reason, now);
        slot.interventions.mark_terminated();
        self.mark_dirty(i);
        change
    }

    /// Resets `agent` to healthy and watching (operator reset / resume).
    pub fn reset(&mut self, agent: &str, now: Instant) -> Option<StateChange> {
        let (i, slot) = self.slot_mut(agent)?;
        let change = slot.health.reset(now);
        slot.interventions.clear();
        self.mark_dirty(i);
        change
    }

    pub fn state(&self, agent: &str) -> Option<HealthState> {
        let i = *self.index.get(agent)?;
        self.slot(i).map(|s| s.health.state())
    }

    pub fn phase(&self, agent: &str) -> Option<InterventionPhase> {
        let i = *self.index.get(agent)?;
        self.slot(i).map(|s| s.interventions.phase())
    }

    pub fn snapshot(&self, agent: &str, now: Instant) -> Option<HealthSnapshot> {
        let i = *self.index.get(agent)?;
        self.slot(i).map(|s| s.health.snapshot(now))
    }

    fn slot(&self, i: u32) -> Option<&Slot> {
        self.slots.get(i as usize).and_then(Option::as_ref)
    }

    /// Every agent's name and state, in slot order.
    pub fn states(&self) -> impl Iterator<Item = (&str, HealthState)> {
        self.slots
            .iter()
            .flatten()
            .map(|s| (&*s.name, s.health.state()))
    }

    /// Evaluates the agents that changed or whose deadline passed, appending
    /// every state change and intervention to `out`.
    pub fn evaluate_all(
        &mut self,
        cfg: &HealthConfig,
        now: Instant,
        out: &mut Vec<(Arc<str>, HealthOutput)>,
    ) {
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        due.append(&mut self.dirty);
        while let Some(&Reverse((t, i))) = self.heap.peek() {
            if t > now {
                break;
            }
            self.heap.pop();
            let Some(Some(slot)) = self.slots.get_mut(i as usize) else {
                continue; // a freed slot
            };
            if slot.scheduled != Some(t) {
                continue; // a stale duplicate
            }
            slot.scheduled = None;
            if !slot.dirty {
                slot.dirty = true;
                due.push(i);
            }
        }
        for &i in &due {
            let Some(Some(slot)) = self.slots.get_mut(i as usize) else {
                continue;
            };
            slot.dirty = false;
            evaluate_slot(slot, cfg, now, out);
            if let Some(d) = deadline(&slot.health, &slot.interventions, cfg, now)
                && slot.scheduled.is_none_or(|s| d < s)
            {
                // Never schedule in the past: the next call picks it up.
                let d = d.max(now);
                slot.scheduled = Some(d);
                self.heap.push(Reverse((d, i)));
            }
        }
        self.due = due;
        self.drop_stale_entries();
    }

    /// The earliest instant at which [`evaluate_all`](Self::evaluate_all)
    /// has time-based work: the first live entry of the schedule (stale
    /// entries on top are dropped). It is the earliest [`deadline`] of the
    /// agents evaluated so far, or earlier: a heartbeat since only moved an
    /// agent's deadline later, and evaluating then just schedules it again.
    /// Agents changed since the last evaluation (the dirty list) are not in
    /// it until evaluated. `None`: no agent has a deadline.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&Reverse((t, i))) = self.heap.peek() {
            let live = self
                .slots
                .get(i as usize)
                .and_then(Option::as_ref)
                .is_some_and(|s| s.scheduled == Some(t));
            if live {
                return Some(t);
            }
            self.heap.pop();
        }
        None
    }

    /// Estimated bytes per agent: slot, map entry, name, heap and dirty
    /// entries, counting reserved capacity.
    pub fn mem_per_agent(&self) -> usize {
        let n = self.index.len().max(1);
        let slots = self.slots.capacity() * size_of::<Option<Slot>>()
            + self.free.capacity() * size_of::<u32>();
        // hashbrown: one control byte per bucket; buckets ≈ capacity × 8/7.
        let buckets = self.index.capacity() * 8 / 7;
        let map = buckets * (size_of::<(Arc<str>, u32)>() + 1);
        // Arc<str>: two counters beside the bytes, rounded up by the allocator.
        let names = self.name_bytes + self.index.len() * 2 * size_of::<usize>();
        let heap = self.heap.capacity() * size_of::<Reverse<(Instant, u32)>>();
        let lists = (self.dirty.capacity() + self.due.capacity()) * size_of::<u32>();
        let pending: usize = self
            .slots
            .iter()
            .flatten()
            .filter(|s| s.interventions.has_pending_nudge())
            .count()
            * 256;
        (slots + map + names + heap + lists + pending) / n
    }
}

/// The earliest instant after `now` at which one agent's health or
/// intervention may change with no heartbeat and no setter: stale
/// (`last_heartbeat + stale_after`), stuck (`last_progress + stuck_after`),
/// the next nudge, the end of an escalation or of a quiet time. `None`: only
/// a heartbeat or a setter can change it. The monitor sleeps until the
/// earliest one over every agent ([`HealthRegistry::next_deadline`],
/// [`super::next_wake`]).
pub fn deadline(
    health: &AgentHealth,
    interventions: &Interventions,
    cfg: &HealthConfig,
    now: Instant,
) -> Option<Instant> {
    [
        health.next_deadline(cfg, now),
        interventions.next_deadline(cfg),
    ]
    .into_iter()
    .flatten()
    .min()
}

fn evaluate_slot(
    slot: &mut Slot,
    cfg: &HealthConfig,
    now: Instant,
    out: &mut Vec<(Arc<str>, HealthOutput)>,
) {
    if let Some(change) = slot.health.evaluate(cfg, now) {
        out.push((slot.name.clone(), HealthOutput::StateChanged(change)));
    }
    if let Some(iv) = slot.interventions.plan(cfg, slot.health.state(), now) {
        let terminate_reason = match &iv {
            Intervention::Terminate { reason } => Some(reason.clone()),
            Intervention::Nudge { .. } | Intervention::Escalate { .. } => None,
        };
        out.push((slot.name.clone(), HealthOutput::Intervention(iv)));
        if let Some(reason) = terminate_reason
            && let Some(change) = slot.health.terminate(&reason, now)
        {
            out.push((slot.name.clone(), HealthOutput::StateChanged(change)));
        }
    }
}
