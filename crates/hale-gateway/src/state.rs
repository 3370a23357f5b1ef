//! The gateway's live state: the components a turn needs (deployments'
//! health, breakers and retry budgets; agents' gate state; tasks' guard and
//! spend; compaction caches; health), and the handles to the store and
//! metrics. The rules that change this state are in hale-core; this module
//! only holds it behind locks that are never held across an `.await`.

use crate::metrics::Metrics;
use hale_core::clock::Clock;
use hale_core::config::Config;
use hale_core::counts::{Count, Counters, Tally};
use hale_core::event::{Event, EventKind};
use hale_core::pause::{Pause, PausedBy};
use hale_store::{AgentRecord, Store, Write};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

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
        self.pause = pause;
        self.record.paused = pause.is_some();
        if !self.record.state.is_object() {
            self.record.state = serde_json::json!({});
        }
        self.record.state["pause"] = serde_json::to_value(pause).unwrap_or_default();
    }
}

/// Everything a turn needs, shared by all requests.
pub struct Gateway {
    pub cfg: Arc<Config>,
    pub http: reqwest::Client,
    pub store: Store,
    pub metrics: Metrics,
    /// Deployments' health, breakers (agent × deployment), retry budgets.
    pub deployments: crate::deployments::Deployments,
    /// Boxed: the table's empty slots (hashbrown grows at 7/8 full, so
    /// just after a growth more than half are empty) then cost a pointer
    /// each, not a whole agent's state.
    pub agents: Mutex<HashMap<String, Box<AgentRt>>>,
    /// Idempotency keys being served right now, with their request's hash: a
    /// duplicate of the same request waits on the watch.
    pub inflight: Mutex<HashMap<String, (String, tokio::sync::watch::Receiver<bool>)>>,
    /// Per-task guard and spend.
    pub tasks: crate::guardrails::Tasks,
    /// Stored compactions by message prefix.
    pub compactions: crate::compact::PrefixCache,
    pub tokenizer: hale_tokens::Tokenizer,
    /// Token counts of message texts already seen.
    pub token_counts: crate::compact::TokenCache,
    /// Agent health, interventions, recovery (DESIGN §5).
    pub health: crate::health::HealthRt,
    /// Per-deployment minutes of the health history, counted in memory.
    pub history: crate::history::HistoryRt,
}

/// What one [`Gateway::shed_idle`] dropped from memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shed {
    pub agents: usize,
    pub tasks: usize,
    /// Breakers at rest (agent × deployment) that no turn held.
    pub breakers: usize,
}

/// Milliseconds since the Unix epoch.
pub fn wall_ms() -> u64 {
    hale_core::clock::SystemClock.wall_ms()
}

impl Gateway {
    /// Builds the state; loads agents from the store.
    pub async fn new(cfg: Arc<Config>, store: Store) -> anyhow::Result<Arc<Self>> {
        // One TLS crypto library (ring) for every client; a provider already installed is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // No BPE table is loaded here: each loads on the first request that
        // may be near its compaction threshold in its family (hale-tokens).
        let http = reqwest::Client::builder()
            .pool_idle_timeout(std::time::Duration::from_secs(90))
            .tcp_nodelay(true)
            .build()?;
        let deployments = crate::deployments::Deployments::new(cfg.clone(), Instant::now());
        // Paused agents, agents never seen, and the most recently seen up to
        // the idle bound; the rest are read back when they return.
        let records = store.agents_to_hold(cfg.memory.idle_agents).await?;
        let health = crate::health::HealthRt::new(&records);
        let agents = records
            .into_iter()
            .map(|r| (r.id.clone(), Box::new(AgentRt::new(r))))
            .collect();
        let metrics = Metrics::for_config(&cfg);
        let counted = store.counted();
        let gw = Arc::new(Self {
            cfg,
            http,
            store,
            metrics,
            deployments,
            agents: Mutex::new(agents),
            inflight: Mutex::new(HashMap::new()),
            tasks: Default::default(),
            compactions: Default::default(),
            tokenizer: hale_tokens::Tokenizer::new(),
            token_counts: Default::default(),
            health,
            history: Default::default(),
        });
        tokio::spawn(crate::sync::follow_counts(Arc::downgrade(&gw), counted));
        tokio::spawn(crate::memory::run(Arc::downgrade(&gw)));
        Ok(gw)
    }

    /// A new event at the current wall time.
    pub fn event(&self, kind: EventKind) -> Event {
        Event::new(kind, wall_ms(), &mut rand::rng())
    }

    /// Records an event that is not tied to a state change (group-committed, no wait).
    pub fn emit(&self, ev: Event) {
        self.metrics.event(ev.kind);
        self.store.submit(vec![Write::Event(ev)]);
    }

    /// Whether hale knows `agent`: it was seen (a turn or a heartbeat), or
    /// the config names it.
    pub fn agent_known(&self, agent: &str) -> bool {
        self.cfg.agents.contains_key(agent)
            || self.agents.lock().expect("agents lock").contains_key(agent)
            || self.health.knows(agent)
    }

    /// An agent's record (a fresh one when unknown).
    pub fn agent_record(&self, agent: &str) -> AgentRecord {
        self.agents
            .lock()
            .expect("agents lock")
            .get(agent)
            .map(|a| a.record.clone())
            .unwrap_or_else(|| new_agent(agent))
    }

    /// Queues every agent's latest record for the store (at shutdown).
    pub fn persist_agents(&self) {
        let writes: Vec<Write> = self
            .agents
            .lock()
            .expect("agents lock")
            .values()
            .map(|a| Write::Agent(a.record.clone()))
            .collect();
        self.store.submit(writes);
    }

    /// Applies `f` to an agent's record and returns the updated copy.
    pub fn update_agent(&self, agent: &str, f: impl FnOnce(&mut AgentRecord)) -> AgentRecord {
        let mut map = self.agents.lock().expect("agents lock");
        let rt = map
            .entry(agent.to_owned())
            .or_insert_with(|| Box::new(AgentRt::new(new_agent(agent))));
        f(&mut rt.record);
        rt.record.clone()
    }

    /// Applies `f` to an agent's runtime state (record and pause) and
    /// returns what it returned and the updated record.
    pub fn update_agent_rt<R>(
        &self,
        agent: &str,
        f: impl FnOnce(&mut AgentRt) -> R,
    ) -> (R, AgentRecord) {
        let mut map = self.agents.lock().expect("agents lock");
        let rt = map
            .entry(agent.to_owned())
            .or_insert_with(|| Box::new(AgentRt::new(new_agent(agent))));
        let r = f(rt);
        (r, rt.record.clone())
    }

    /// Sheds idle agents and tasks beyond `memory.idle_agents` /
    /// `memory.idle_tasks` (`hale_core::memory`): an agent with no turn in
    /// flight ([`TurnHold`]), unseen for [`hale_core::memory::shed_after`]
    /// its pace (5 s to a minute), not paused, with nothing under way in the
    /// health runtime ([`crate::health::HealthRt::forget`]), the least
    /// recently seen first; the tasks of the agents that left go with them.
    /// Their rows stay in the store; [`Gateway::load_agent`] reads one back
    /// before its next turn or admin call, and the health monitor reads back
    /// one that stays silent ([`crate::memory::watch_silent`]). Breakers go
    /// too ([`crate::deployments::Deployments::forget_resting_breakers`]):
    /// those of the agents that left, unless one holds a failure, and any at
    /// rest; one per agent × deployment, they would otherwise pile up with
    /// agents that came and went. Called every [`hale_core::memory::SWEEP_EVERY`]
    /// by every instance ([`crate::memory::run`]).
    pub fn shed_idle(&self, now_ms: u64, now: Instant) -> Shed {
        let idle: Vec<(u64, String)> = self
            .agents
            .lock()
            .expect("agents lock")
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
                .filter(|(_, id)| self.health.forget(id, now))
                .collect();
        let mut left = std::collections::HashSet::new();
        let mut stayed = Vec::new();
        {
            let mut map = self.agents.lock().expect("agents lock");
            for (seen, id) in gone {
                let unchanged = map
                    .get(&id)
                    .is_some_and(|a| a.may_leave() && a.record.last_seen_ms == Some(seen));
                if unchanged {
                    map.remove(&id);
                    left.insert(id);
                } else if let Some(a) = map.get(&id) {
                    stayed.push((id.clone(), a.record.state.clone()));
                }
            }
        }
        // Seen again meanwhile: it stays; its terminated tasks, dropped from
        // the health runtime with it, are taken back from its record (its
        // health slot comes back with its next heartbeat).
        for (id, state) in stayed {
            crate::health::adopt_terminated(self, &id, &state);
        }
        let tasks = self.tasks.shed(now, self.cfg.memory.idle_tasks, &left);
        let breakers = self.deployments.forget_resting_breakers(now, &left);
        Shed {
            agents: left.len(),
            tasks,
            breakers,
        }
    }

    /// Holds `agent` in memory while the returned hold lives: a turn takes
    /// one when it starts and drops it when it ends, whatever the way out
    /// (an answer, an error, a client gone mid-stream), so the agent's state
    /// a turn will touch again never leaves under it, however long the turn.
    /// An agent not in memory is not added: a new agent is held from its
    /// first finished turn, and until then it has nothing to shed (a request
    /// refused before its turn must not leave an entry behind).
    pub fn hold_turn(self: &Arc<Self>, agent: &str) -> TurnHold {
        let counted = self.update_agent_if_held(agent, |rt| {
            rt.in_flight = rt.in_flight.saturating_add(1);
        });
        TurnHold {
            gw: self.clone(),
            agent: agent.to_owned(),
            counted: counted.is_some(),
        }
    }

    /// Whether `agent` is held in memory.
    pub fn holds(&self, agent: &str) -> bool {
        self.agents.lock().expect("agents lock").contains_key(agent)
    }

    /// Holds `row` in memory unless the agent is there already (a newer
    /// view). Returns whether it was added.
    pub fn hold_row(&self, row: AgentRecord) -> bool {
        let id = row.id.clone();
        let added = {
            let mut map = self.agents.lock().expect("agents lock");
            match map.entry(id.clone()) {
                std::collections::hash_map::Entry::Occupied(_) => false,
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(Box::new(AgentRt::new(row.clone())));
                    true
                }
            }
        };
        if added {
            // Its terminated tasks stay blocked.
            crate::health::adopt_terminated(self, &id, &row.state);
        }
        added
    }

    /// Makes sure `agent`'s record is in memory: one that was shed
    /// ([`Gateway::shed_idle`]) is read back from the store, with its
    /// terminated tasks. An
    /// agent the store does not know stays absent (it is new). A store
    /// error is logged and the turn goes on as for a new agent.
    pub async fn load_agent(&self, agent: &str) {
        if self.agents.lock().expect("agents lock").contains_key(agent) {
            return;
        }
        match self.store.agent(agent).await {
            Ok(Some(rec)) => {
                self.hold_row(rec);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(agent, error = %e, "reading a forgotten agent back failed"),
        }
    }

    /// Applies `f` to an agent's runtime state when it is in memory (a
    /// forgotten agent is not brought back: its row is the truth).
    pub fn update_agent_if_held<R>(
        &self,
        agent: &str,
        f: impl FnOnce(&mut AgentRt) -> R,
    ) -> Option<R> {
        self.agents
            .lock()
            .expect("agents lock")
            .get_mut(agent)
            .map(|rt| f(rt))
    }

    /// The agent's pause, if any (a copy).
    pub fn pause_of(&self, agent: &str) -> Option<Pause> {
        self.agents
            .lock()
            .expect("agents lock")
            .get(agent)
            .and_then(|a| a.pause)
    }
}

/// A turn under way for an agent ([`Gateway::hold_turn`]).
pub struct TurnHold {
    gw: Arc<Gateway>,
    agent: String,
    /// The agent was held when the turn began, and counts this turn.
    counted: bool,
}

impl Drop for TurnHold {
    fn drop(&mut self) {
        if self.counted {
            self.gw.update_agent_if_held(&self.agent, |rt| {
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
