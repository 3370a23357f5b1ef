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
        }
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
    pub agents: Mutex<HashMap<String, AgentRt>>,
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
        let records = store.agents().await?;
        let health = crate::health::HealthRt::new(&records);
        let agents = records
            .into_iter()
            .map(|r| (r.id.clone(), AgentRt::new(r)))
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
            .or_insert_with(|| AgentRt::new(new_agent(agent)));
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
            .or_insert_with(|| AgentRt::new(new_agent(agent)));
        let r = f(rt);
        (r, rt.record.clone())
    }

    /// Drops from memory the agents idle for [`hale_core::pause::IDLE_AGENT_TTL`]
    /// ([`hale_core::pause::may_forget`]: not paused, no state in the
    /// record). Their rows stay in the store; [`Gateway::load_agent`] reads
    /// one back before its next turn or admin call, so its counters go on
    /// from the stored row instead of restarting at zero. Called by the
    /// health monitor about once a minute; returns how many were dropped.
    pub fn forget_idle_agents(&self, now_ms: u64) -> usize {
        let mut map = self.agents.lock().expect("agents lock");
        let before = map.len();
        map.retain(|_, a| {
            !hale_core::pause::may_forget(
                a.pause.is_some() || a.record.paused,
                !a.record.state.is_null(),
                a.record.last_seen_ms,
                now_ms,
            )
        });
        before - map.len()
    }

    /// Makes sure `agent`'s record is in memory: one that was forgotten
    /// ([`Gateway::forget_idle_agents`]) is read back from the store. An
    /// agent the store does not know stays absent (it is new). A store
    /// error is logged and the turn goes on as for a new agent.
    pub async fn load_agent(&self, agent: &str) {
        if self.agents.lock().expect("agents lock").contains_key(agent) {
            return;
        }
        match self.store.agent(agent).await {
            Ok(Some(rec)) => {
                self.agents
                    .lock()
                    .expect("agents lock")
                    .entry(agent.to_owned())
                    .or_insert_with(|| AgentRt::new(rec));
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
            .map(f)
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
