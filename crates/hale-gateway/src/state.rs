//! The gateway's live state: providers' cooldowns and retry budgets, breakers
//! per agent × provider, agents' gate state, and the handles to the store and
//! metrics. The rules that change this state are in hale-core; this module
//! only holds it behind locks that are never held across an `.await`.

use crate::metrics::Metrics;
use hale_core::breaker::SharedBreaker;
use hale_core::clock::Clock;
use hale_core::config::Config;
use hale_core::cooldown::Cooldown;
use hale_core::event::{Event, EventKind};
use hale_core::retry::RetryBudget;
use hale_store::{AgentRecord, Store, Write};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

/// Per-provider runtime state.
pub struct ProviderRt {
    pub cooldown: Mutex<Cooldown>,
    pub budget: Mutex<RetryBudget>,
}

/// Per-agent gate state (mirrored to the store).
#[derive(Debug, Clone)]
pub struct AgentRt {
    pub record: AgentRecord,
}

/// Everything a turn needs, shared by all requests.
pub struct Gateway {
    pub cfg: Arc<Config>,
    pub http: reqwest::Client,
    pub store: Store,
    pub metrics: Metrics,
    pub providers: HashMap<String, ProviderRt>,
    /// agent → provider → breaker: looked up by `&str`, no allocation per turn.
    breakers: RwLock<HashMap<String, HashMap<String, Arc<SharedBreaker>>>>,
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
        // Load the BPE tables off the request path (0.1–0.4 s).
        tokio::task::spawn_blocking(|| hale_tokens::Tokenizer::new().warm());
        let http = reqwest::Client::builder()
            .pool_idle_timeout(std::time::Duration::from_secs(90))
            .tcp_nodelay(true)
            .build()?;
        let now = Instant::now();
        let providers = cfg
            .providers
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    ProviderRt {
                        cooldown: Mutex::new(Cooldown::new()),
                        budget: Mutex::new(RetryBudget::new(&cfg.retry, now)),
                    },
                )
            })
            .collect();
        let records = store.agents().await?;
        let health = crate::health::HealthRt::new(&records);
        let agents = records
            .into_iter()
            .map(|r| (r.id.clone(), AgentRt { record: r }))
            .collect();
        let metrics = Metrics::for_config(&cfg);
        Ok(Arc::new(Self {
            cfg,
            http,
            store,
            metrics,
            providers,
            breakers: RwLock::new(HashMap::new()),
            agents: Mutex::new(agents),
            inflight: Mutex::new(HashMap::new()),
            tasks: Default::default(),
            compactions: Default::default(),
            tokenizer: hale_tokens::Tokenizer::new(),
            token_counts: Default::default(),
            health,
        }))
    }

    /// The breaker of `agent` × `provider`, created on first use.
    pub fn breaker(&self, agent: &str, provider: &str) -> Arc<SharedBreaker> {
        if let Some(b) = self
            .breakers
            .read()
            .expect("breaker map lock")
            .get(agent)
            .and_then(|m| m.get(provider))
        {
            return b.clone();
        }
        self.breakers
            .write()
            .expect("breaker map lock")
            .entry(agent.to_owned())
            .or_default()
            .entry(provider.to_owned())
            .or_insert_with(|| {
                Arc::new(SharedBreaker::new(
                    self.cfg.self_healing.circuit_breaker.clone(),
                ))
            })
            .clone()
    }

    /// Every breaker of one agent, by provider.
    pub fn breakers_of(&self, agent: &str) -> Vec<(String, Arc<SharedBreaker>)> {
        self.breakers
            .read()
            .expect("breaker map lock")
            .get(agent)
            .map(|m| m.iter().map(|(p, b)| (p.clone(), b.clone())).collect())
            .unwrap_or_default()
    }

    /// Every breaker.
    pub fn all_breakers(&self) -> Vec<((String, String), Arc<SharedBreaker>)> {
        self.breakers
            .read()
            .expect("breaker map lock")
            .iter()
            .flat_map(|(a, m)| {
                m.iter()
                    .map(move |(p, b)| ((a.clone(), p.clone()), b.clone()))
            })
            .collect()
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

    /// `Some(consecutive failures)` when the agent is paused (the gate's
    /// check on every request: no copy of the record).
    pub fn paused(&self, agent: &str) -> Option<u32> {
        self.agents
            .lock()
            .expect("agents lock")
            .get(agent)
            .filter(|a| a.record.paused)
            .map(|a| a.record.consecutive_failures)
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
        let rt = map.entry(agent.to_owned()).or_insert_with(|| AgentRt {
            record: new_agent(agent),
        });
        f(&mut rt.record);
        rt.record.clone()
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
