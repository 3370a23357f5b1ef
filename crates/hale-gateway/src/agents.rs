//! Agents: their records held in memory, their gate and failure counting
//! (docs/operations.md, "What hale does to a call": Pause that
//! heals itself), and every way an agent is paused or resumed, in one place.
//!
//! The rules are hale-core's [`hale_core::pause`]: a *named* agent is paused
//! after `max_consecutive_failures` failed turns; an automatic pause lets one
//! trial request through after `resume_probe_after` (doubling per failed
//! trial) and a successful trial resumes the agent; an operator's pause holds
//! until an operator resumes. [`Agents`] applies them to the records it
//! holds and reports each change as an event that commits with the record.
//! The pause paths are all methods here: [`Agents::admit`] (the gate),
//! [`Agents::after_turn`] (a turn's verdict), [`Agents::pause_on_counted`]
//! (other instances' failures), [`Agents::pause`] and [`Agents::resume`]
//! (an operator), [`Agents::apply_remote`] and [`Agents::apply_announced`]
//! (another instance's change), and [`Agents::shed`] never sheds a paused one.

use crate::emit::Emitter;
use crate::error::HaleError;
use hale_core::config::Config;
use hale_core::counts::{Count, Counters, Streak, Tally};
use hale_core::event::{Event, EventKind};
use hale_core::pause::{self, Admit, Pause, PausedBy};
use hale_store::{AgentChange, AgentControl, AgentRecord, CountWrite, Write};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What the gate decided for a request of a non-paused or paused agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Not paused.
    Serve,
    /// Paused automatically; this request is the trial that may resume it.
    Trial,
}

/// How a turn ended, for the agent's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    /// Failed for a reason that counts against the agent (not the caller's input).
    Failed,
    /// Failed on the caller's input (content policy, bad request): no verdict.
    CallerFault,
}

/// What a finished turn changed in the agent's gate.
pub struct AfterTurn {
    pub record: AgentRecord,
    /// `agent.paused` / `agent.resumed` to commit with the record.
    pub events: Vec<Event>,
    /// The pause or the trial's resume announced to the other instances
    /// ([`announce_control`]), to commit with the record: they apply it at
    /// once instead of serving the agent until their own counts catch up.
    pub announce: Option<Write>,
    /// The turn's count and its number, to write as a
    /// [`hale_store::Write::Count`] (the database adds it to the row).
    pub count: (u64, Count),
}

/// A finished turn, as the agent gate sees it.
#[derive(Debug, Clone, Copy)]
pub struct Finished<'a> {
    pub agent: &'a str,
    pub turn_id: &'a str,
    /// The agent has an identity (it may be paused).
    pub named: bool,
    pub admission: Admission,
    pub outcome: Outcome,
    pub now_ms: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
}

/// Per-agent gate state (mirrored to the store; the pause also lives in
/// the record's `state.pause`, so it outlives a restart).
///
/// The record's counters (failures in a row, turns, tokens, cost) are the
/// view of [`AgentRt::tally`]: what the database last confirmed plus this
/// instance's counts not confirmed yet (`hale_core::counts`), so several
/// instances count one agent's turns once.
#[derive(Debug, Clone)]
pub struct AgentRt {
    pub record: AgentRecord,
    pub pause: Option<Pause>,
    tally: Tally<Counters>,
    /// Turns of this agent name it (it may be paused).
    pub named: bool,
    /// Its turns under way ([`TurnHold`]): an agent with one is never shed.
    in_flight: u32,
    /// Its usual gap between turns, in ms (`hale_core::memory::next_gap`):
    /// how soon after its last turn it may be shed.
    gap_ms: Option<u64>,
    /// The [`control_epoch`] of its last pause change here: a row read
    /// before it is older than this instance's own change
    /// ([`Agents::apply_remote`]).
    control_at: u64,
    /// An operator's pause or resume made here and not committed yet
    /// ([`Agents::pause`], [`Agents::resume`], [`Agents::control_committed`]):
    /// no row read meanwhile can be newer.
    control_uncommitted: u32,
}

/// Numbers every change of a pause made in this process, in order.
static CONTROL_EPOCH: AtomicU64 = AtomicU64::new(0);

/// The newest pause change's number so far: read it before reading agent
/// rows, and pass it to [`Agents::apply_remote`] with them, so a row read
/// while this instance changed the agent's pause does not undo the change.
pub fn control_epoch() -> u64 {
    CONTROL_EPOCH.load(Ordering::SeqCst)
}

/// The counters of a record.
pub(crate) fn counters_of(r: &AgentRecord) -> Counters {
    Counters {
        consecutive_failures: r.consecutive_failures,
        turns: r.turns,
        failed_turns: r.failed_turns,
        tokens_in: r.tokens_in,
        tokens_out: r.tokens_out,
        cost_usd: r.cost_usd,
    }
}

impl AgentRt {
    /// Counts a turn (or an operator's reset) locally; returns its number,
    /// to write with it ([`hale_store::Write::Count`]).
    pub fn count(&mut self, c: Count) -> u64 {
        let n = self.tally.count(c);
        self.sync_counters();
        n
    }

    /// The database applied count `n` and holds `totals` after it.
    pub fn confirm(&mut self, n: u64, totals: Counters) {
        self.tally.confirm(n, totals);
        self.sync_counters();
    }

    /// Totals another commit announced (`NOTIFY hale_counts`), folded in
    /// when newer ([`Tally::observe`]).
    pub fn observe(&mut self, totals: Counters) {
        if self.tally.observe(totals) {
            self.sync_counters();
        }
    }

    /// Adopts the counters of a row re-read from the database when no count
    /// of this instance is in flight (they cannot be older than the view then).
    pub fn reread(&mut self, row: &AgentRecord) {
        if self.tally.reread(counters_of(row)) {
            self.sync_counters();
        }
    }

    fn sync_counters(&mut self) {
        let v = self.tally.view();
        let r = &mut self.record;
        r.consecutive_failures = v.consecutive_failures;
        r.turns = v.turns;
        r.failed_turns = v.failed_turns;
        r.tokens_in = v.tokens_in;
        r.tokens_out = v.tokens_out;
        r.cost_usd = v.cost_usd;
    }

    pub(crate) fn new(record: AgentRecord) -> Self {
        let pause = record.paused.then(|| {
            serde_json::from_value::<Pause>(record.state["pause"].clone()).unwrap_or(
                // Paused by an older hale, which paused only for failures.
                Pause {
                    by: if record.consecutive_failures > 0 {
                        PausedBy::Auto
                    } else {
                        PausedBy::Operator
                    },
                    since_ms: record.last_failure_ms.unwrap_or(0),
                    failed_trials: 0,
                    next_trial_ms: Some(0),
                },
            )
        });
        let tally = Tally::new(counters_of(&record));
        Self {
            record,
            pause,
            tally,
            named: false,
            in_flight: 0,
            gap_ms: None,
            control_at: 0,
            control_uncommitted: 0,
        }
    }

    /// Nothing in memory needs it: not paused (its resume is timed here)
    /// and no turn of it under way.
    fn may_leave(&self) -> bool {
        self.pause.is_none() && !self.record.paused && self.in_flight == 0
    }

    /// A turn of this agent ended at `now_ms`: its last turn and its pace.
    pub fn seen(&mut self, now_ms: u64) {
        self.gap_ms = hale_core::memory::next_gap(self.gap_ms, self.record.last_seen_ms, now_ms);
        self.record.last_seen_ms = Some(now_ms);
    }

    /// Sets (or clears) the pause, in the record too.
    pub fn set_pause(&mut self, pause: Option<Pause>) {
        self.control_at = CONTROL_EPOCH.fetch_add(1, Ordering::SeqCst) + 1;
        self.pause = pause;
        self.record.paused = pause.is_some();
        if !self.record.state.is_object() {
            self.record.state = serde_json::json!({});
        }
        self.record.state["pause"] = serde_json::to_value(pause).unwrap_or_default();
    }
}

/// The agents held in memory, their gate and their pauses.
pub struct Agents {
    cfg: Arc<Config>,
    emit: Emitter,
    /// Boxed: the table's empty slots (hashbrown grows at 7/8 full, so
    /// just after a growth more than half are empty) then cost a pointer
    /// each, not a whole agent's state.
    map: Mutex<HashMap<String, Box<AgentRt>>>,
}

/// Agent ids whose state [`Agents::shed`] dropped, and those it kept
/// because they were seen again meanwhile (with their record's state).
#[derive(Debug, Default)]
pub struct ShedAgents {
    pub left: std::collections::HashSet<String>,
    pub stayed: Vec<(String, serde_json::Value)>,
}

/// What an operator's resume cleared ([`Agents::resume`]).
pub struct Resumed {
    /// The pause it lifted, if any.
    pub was: Option<Pause>,
    /// The failures in a row it cleared.
    pub cleared: u32,
    /// The count, record, event and announcement to commit together.
    pub writes: Vec<Write>,
}

impl Agents {
    /// The agents of `records` (read from the store at start) held in memory.
    pub fn new(cfg: Arc<Config>, emit: Emitter, records: Vec<AgentRecord>) -> Self {
        let map = records
            .into_iter()
            .map(|r| (r.id.clone(), Box::new(AgentRt::new(r))))
            .collect();
        Self {
            cfg,
            emit,
            map: Mutex::new(map),
        }
    }

    /// The map of held agents, locked (tests and the metrics read it).
    pub fn lock(
        &self,
    ) -> std::sync::LockResult<std::sync::MutexGuard<'_, HashMap<String, Box<AgentRt>>>> {
        self.map.lock()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Box<AgentRt>>> {
        self.map.lock().expect("agents lock")
    }

    /// How many agents are held.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether no agent is held.
    pub fn is_empty(&self) -> bool {
        self.map().is_empty()
    }

    /// Whether the config names `agent` or it is held here.
    pub fn known(&self, agent: &str) -> bool {
        self.cfg.agents.contains_key(agent) || self.map().contains_key(agent)
    }

    /// An agent's record (a fresh one when unknown).
    pub fn record(&self, agent: &str) -> AgentRecord {
        self.map()
            .get(agent)
            .map(|a| a.record.clone())
            .unwrap_or_else(|| new_agent(agent))
    }

    /// Queues every agent's latest record for the store (at shutdown).
    pub fn persist(&self) {
        let writes: Vec<Write> = self
            .map()
            .values()
            .map(|a| Write::Agent(a.record.clone()))
            .collect();
        self.emit.store.submit(writes);
    }

    /// Applies `f` to an agent's record and returns the updated copy.
    pub fn update(&self, agent: &str, f: impl FnOnce(&mut AgentRecord)) -> AgentRecord {
        let mut map = self.map();
        // Looked up by `&str` first: a held agent's id is not copied.
        let rt = match map.get_mut(agent) {
            Some(rt) => rt,
            None => map
                .entry(agent.to_owned())
                .or_insert_with(|| Box::new(AgentRt::new(new_agent(agent)))),
        };
        f(&mut rt.record);
        rt.record.clone()
    }

    /// Applies `f` to an agent's runtime state (record and pause) and
    /// returns what it returned and the updated record.
    pub fn update_rt<R>(&self, agent: &str, f: impl FnOnce(&mut AgentRt) -> R) -> (R, AgentRecord) {
        let mut map = self.map();
        // Looked up by `&str` first: a held agent's id is not copied.
        let rt = match map.get_mut(agent) {
            Some(rt) => rt,
            None => map
                .entry(agent.to_owned())
                .or_insert_with(|| Box::new(AgentRt::new(new_agent(agent)))),
        };
        let r = f(rt);
        (r, rt.record.clone())
    }

    /// Applies `f` to an agent's runtime state when it is in memory (a
    /// forgotten agent is not brought back: its row is the truth).
    pub fn update_if_held<R>(&self, agent: &str, f: impl FnOnce(&mut AgentRt) -> R) -> Option<R> {
        self.map().get_mut(agent).map(|rt| f(rt))
    }

    /// Folds the totals other commits announced into the agents held here
    /// (one not held is read back from its row when it returns).
    pub fn observe(&self, counted: &[hale_store::AgentTotals]) {
        let mut map = self.map();
        for c in counted {
            if let Some(rt) = map.get_mut(&c.agent) {
                rt.observe(c.totals);
            }
        }
    }

    /// Whether `agent` is held in memory.
    pub fn holds(&self, agent: &str) -> bool {
        self.map().contains_key(agent)
    }

    /// Holds `row` in memory unless the agent is there already (a newer
    /// view). Returns whether it was added (the caller then takes its
    /// terminated tasks into the health runtime).
    pub fn hold_row(&self, row: AgentRecord) -> bool {
        let mut map = self.map();
        match map.entry(row.id.clone()) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(Box::new(AgentRt::new(row)));
                true
            }
        }
    }

    /// The agent's pause, if any (a copy).
    pub fn pause_of(&self, agent: &str) -> Option<Pause> {
        self.map().get(agent).and_then(|a| a.pause)
    }

    /// Holds `agent` in memory while the returned hold lives: a turn takes
    /// one when it starts and drops it when it ends, whatever the way out
    /// (an answer, an error, a client gone mid-stream), so the agent's state
    /// a turn will touch again never leaves under it, however long the turn.
    /// An agent not in memory is not added: a new agent is held from its
    /// first finished turn, and until then it has nothing to shed (a request
    /// refused before its turn must not leave an entry behind).
    pub fn hold_turn(self: &Arc<Self>, agent: &str) -> TurnHold {
        let counted = self.update_if_held(agent, |rt| {
            rt.in_flight = rt.in_flight.saturating_add(1);
        });
        TurnHold {
            agents: self.clone(),
            agent: agent.to_owned(),
            counted: counted.is_some(),
        }
    }

    /// Sheds idle agents beyond `memory.idle_agents` (`hale_core::memory`):
    /// an agent with no turn in flight ([`TurnHold`]), unseen for
    /// [`hale_core::memory::shed_after`] its pace, not paused, and that
    /// `may_leave` lets go (nothing under way for it in the health runtime),
    /// the least recently seen first. One seen again meanwhile stays, with
    /// its record's state.
    pub fn shed(&self, now_ms: u64, may_leave: impl Fn(&str) -> bool) -> ShedAgents {
        let idle: Vec<(u64, String)> = self
            .map()
            .iter()
            .filter_map(|(id, a)| {
                let t = a.record.last_seen_ms?;
                (a.may_leave() && hale_core::memory::idle_enough(t, now_ms, a.gap_ms))
                    .then(|| (t, id.clone()))
            })
            .collect();
        let gone: Vec<(u64, String)> =
            hale_core::memory::to_shed(idle, self.cfg.memory.idle_agents)
                .into_iter()
                .filter(|(_, id)| may_leave(id))
                .collect();
        let mut out = ShedAgents::default();
        let mut map = self.map();
        for (seen, id) in gone {
            let unchanged = map
                .get(&id)
                .is_some_and(|a| a.may_leave() && a.record.last_seen_ms == Some(seen));
            if unchanged {
                map.remove(&id);
                out.left.insert(id);
            } else if let Some(a) = map.get(&id) {
                out.stayed.push((id.clone(), a.record.state.clone()));
            }
        }
        out
    }

    // ------------------------------------------------------------ the gate

    /// The agent gate: serve, let through as a pause's trial, or refuse (423).
    pub fn admit(&self, agent: &str, now_ms: u64) -> Result<Admission, HaleError> {
        let mut map = self.map();
        let Some(rt) = map.get_mut(agent) else {
            return Ok(Admission::Serve);
        };
        let Some(mut p) = rt.pause else {
            return Ok(Admission::Serve);
        };
        match p.admit(&self.cfg.self_healing, now_ms) {
            Admit::Trial => {
                rt.set_pause(Some(p));
                Ok(Admission::Trial)
            }
            Admit::Refuse { next_trial_in_ms } => Err(HaleError::agent_paused(
                agent,
                rt.record.consecutive_failures,
                p.by,
                next_trial_in_ms,
            )),
        }
    }

    /// Counts a finished turn (turns, tokens, cost; the failures in a row
    /// cleared or extended — `hale_core::counts`), pauses a named agent at the
    /// threshold, and settles a pause's trial.
    pub fn after_turn(&self, f: Finished<'_>) -> AfterTurn {
        let Finished {
            agent,
            turn_id,
            named,
            admission,
            outcome,
            now_ms,
            tokens_in,
            tokens_out,
            cost_usd,
        } = f;
        let cfg = &self.cfg.self_healing;
        let streak = match outcome {
            Outcome::Succeeded => Streak::Clear,
            Outcome::Failed => Streak::Extend,
            Outcome::CallerFault => Streak::Keep,
        };
        let count = Count::turn(streak, tokens_in, tokens_out, cost_usd);
        let ((paused, resumed, n), record) = self.update_rt(agent, |rt| {
            let n = rt.count(count);
            rt.named |= named;
            rt.seen(now_ms);
            let mut paused = None;
            let mut resumed = None;
            match outcome {
                Outcome::Succeeded => {
                    if admission == Admission::Trial
                        && let Some(p) = rt.pause.filter(|p| p.by == PausedBy::Auto)
                    {
                        rt.set_pause(None);
                        resumed = Some(p);
                    }
                }
                Outcome::Failed => {
                    rt.record.last_failure_ms = Some(now_ms);
                    match rt.pause {
                        Some(mut p) if admission == Admission::Trial => {
                            p.trial_failed(cfg, now_ms);
                            rt.set_pause(Some(p));
                        }
                        Some(_) => {}
                        None if pause::should_pause(
                            cfg,
                            named,
                            false,
                            rt.record.consecutive_failures,
                        ) =>
                        {
                            let p = Pause::auto(cfg, now_ms);
                            rt.set_pause(Some(p));
                            paused = Some(p);
                        }
                        None => {}
                    }
                }
                Outcome::CallerFault => {}
            }
            (paused, resumed, n)
        });
        let mut events = Vec::new();
        if let Some(p) = paused {
            events.push(
                self.emit
                    .event(EventKind::AgentPaused)
                    .agent(agent)
                    .turn(turn_id)
                    .payload(serde_json::json!({
                        "by": p.by,
                        "reason": format!("{} consecutive failed turns", record.consecutive_failures),
                        "next_trial_in_ms": p.next_trial_in_ms(now_ms),
                    })),
            );
        }
        if let Some(p) = resumed {
            events.push(
                self.emit
                    .event(EventKind::AgentResumed)
                    .agent(agent)
                    .turn(turn_id)
                    .payload(serde_json::json!({
                        "by": "auto",
                        "reason": "a trial request succeeded",
                        "paused_ms": now_ms.saturating_sub(p.since_ms),
                        "failed_trials": p.failed_trials,
                    })),
            );
        }
        for e in &events {
            self.emit.metrics.event(e.kind);
        }
        let announce = match (paused, resumed) {
            (Some(pause), _) => Some(AgentControl::Paused { pause }),
            (None, Some(_)) => Some(AgentControl::Active),
            (None, None) => None,
        }
        .map(|c| announce_control(agent, None, Some(c)));
        AfterTurn {
            record,
            events,
            announce,
            count: (n, count),
        }
    }

    /// Another instance's turns, learned from the totals the database answered
    /// to one of this instance's counts, brought the failures in a row to the
    /// threshold: pause the agent as its own failed turn would have, and
    /// announce it. Returns the writes to commit (none when nothing changes).
    pub fn pause_on_counted(&self, agent: &str, now_ms: u64) -> Vec<Write> {
        let cfg = &self.cfg.self_healing;
        let (paused, record) = self.update_rt(agent, |rt| {
            let due = pause::should_pause(
                cfg,
                rt.named,
                rt.pause.is_some(),
                rt.record.consecutive_failures,
            );
            due.then(|| {
                let p = Pause::auto(cfg, now_ms);
                rt.set_pause(Some(p));
                p
            })
        });
        let Some(p) = paused else {
            return Vec::new();
        };
        let ev = self
            .emit
            .event(EventKind::AgentPaused)
            .agent(agent)
            .payload(serde_json::json!({
                "by": p.by,
                "reason": format!(
                    "{} consecutive failed turns (counted across instances)",
                    record.consecutive_failures
                ),
                "next_trial_in_ms": p.next_trial_in_ms(now_ms),
            }));
        self.emit.metrics.event(ev.kind);
        vec![
            Write::Agent(record),
            Write::Event(ev),
            announce_control(agent, None, Some(AgentControl::Paused { pause: p })),
        ]
    }

    /// An operator's pause (also a hand-off decision), held until an
    /// operator resumes. Returns the record, event and announcement to
    /// commit together.
    pub fn pause(&self, id: &str, reason: &str, now_ms: u64) -> Vec<Write> {
        let pause = Pause::operator(now_ms);
        let ((), rec) = self.update_rt(id, |rt| {
            rt.set_pause(Some(pause));
            rt.control_uncommitted += 1;
        });
        let ev = self
            .emit
            .event(EventKind::AgentPaused)
            .agent(id)
            .payload(serde_json::json!({ "by": PausedBy::Operator, "reason": reason }));
        self.emit.metrics.event(ev.kind);
        vec![
            Write::Agent(rec),
            Write::Event(ev),
            announce_control(id, None, Some(AgentControl::Paused { pause })),
        ]
    }

    /// An operator's resume: the pause lifted and the failures in a row
    /// cleared (the health runtime's part is the caller's).
    pub fn resume(&self, id: &str, now_ms: u64) -> Resumed {
        let ((was, cleared, n), rec) = self.update_rt(id, |rt| {
            let was = rt.pause;
            let cleared = rt.record.consecutive_failures;
            rt.set_pause(None);
            rt.control_uncommitted += 1;
            let n = rt.count(Count::clear());
            (was, cleared, n)
        });
        let ev = self
            .emit
            .event(EventKind::AgentResumed)
            .agent(id)
            .payload(serde_json::json!({
                "by": PausedBy::Operator,
                "reason": "resumed by an operator",
                "was_paused_by": was.map(|p| p.by),
            }));
        self.emit.metrics.event(ev.kind);
        let writes = vec![
            Write::Count(CountWrite {
                agent: id.to_owned(),
                n,
                count: Count::clear(),
                task: None,
                now_ms,
            }),
            Write::Agent(rec),
            Write::Event(ev),
            announce_control(id, None, Some(AgentControl::Active)),
        ];
        Resumed {
            was,
            cleared,
            writes,
        }
    }

    /// The commit of an operator's pause or resume of `id` made by
    /// [`Agents::pause`] / [`Agents::resume`] returned (committed or failed):
    /// rows read from now on may carry it.
    pub fn control_committed(&self, id: &str) {
        self.update_if_held(id, |rt| {
            rt.control_uncommitted = rt.control_uncommitted.saturating_sub(1);
            rt.control_at = CONTROL_EPOCH.fetch_add(1, Ordering::SeqCst) + 1;
        });
    }

    /// Applies the control state of `row` (as another instance committed it)
    /// to this instance's cache. An agent not in memory (shed,
    /// `hale_core::memory`) stays out — its row is the truth and is read back
    /// on its next request — unless it is paused: a pause is held in memory
    /// (its resume is timed here). Returns whether the row was applied (the
    /// caller then takes its terminated tasks into the health runtime).
    ///
    /// `read_at` is the [`control_epoch`] read before the row was: a row
    /// read while this instance changed the agent's pause (an operator's
    /// pause answered here while the row was on its way) is older than the
    /// change and is not applied — the change's own announcement follows.
    pub fn apply_remote(&self, row: &AgentRecord, read_at: u64) -> bool {
        if !self.holds(&row.id) {
            return row.paused && self.hold_row(row.clone());
        }
        let fresh = AgentRt::new(row.clone());
        let newer_here = self
            .update_if_held(&row.id, |rt| {
                rt.control_uncommitted > 0 || rt.control_at > read_at
            })
            .unwrap_or(false);
        if newer_here {
            return false;
        }
        self.update_rt(&row.id, |rt| {
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
        true
    }

    /// Applies an announced control state over the cache (after the row) and
    /// writes the agent's record back, so a row a stale write overwrote holds
    /// the operator's change again.
    pub fn apply_announced(&self, agent: &str, control: AgentControl) {
        // An agent not in memory has no stale state here to correct (a paused
        // one was taken in by the caller).
        let Some(rec) = self.update_if_held(agent, |rt| {
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
        self.emit.store.submit(vec![Write::Agent(rec)]);
    }
}

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

/// A turn under way for an agent ([`Agents::hold_turn`]).
pub struct TurnHold {
    agents: Arc<Agents>,
    agent: String,
    /// The agent was held when the turn began, and counts this turn.
    counted: bool,
}

impl Drop for TurnHold {
    fn drop(&mut self) {
        if self.counted {
            self.agents.update_if_held(&self.agent, |rt| {
                rt.in_flight = rt.in_flight.saturating_sub(1);
            });
        }
    }
}

impl std::fmt::Debug for TurnHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnHold")
            .field("agent", &self.agent)
            .finish()
    }
}

/// The record of an agent hale has not seen before.
fn new_agent(id: &str) -> AgentRecord {
    AgentRecord {
        id: id.to_owned(),
        paused: false,
        consecutive_failures: 0,
        turns: 0,
        failed_turns: 0,
        tokens_in: 0,
        tokens_out: 0,
        cost_usd: 0.0,
        last_failure_ms: None,
        last_seen_ms: None,
        state: serde_json::Value::Null,
    }
}
