//! hale-gateway: the HTTP adapter around hale-core.
//!
//! It owns the OpenAI/Anthropic-compatible proxy, the provider clients, the
//! turn pipeline that asks hale-core what to do at every step and does it, and
//! the admin API. Decisions live in hale-core; this crate carries them out.
//!
//! Layers, each importing only the ones below it (`scripts/import_circles.py`):
//!
//! - [`api`]: axum handlers only — every route, the edge (auth, errors,
//!   limits), the chat dialects in and out. Nothing below imports it.
//! - [`pipeline`]: the whole turn, top to bottom; the one module that
//!   composes components for a turn.
//! - [`turn`] (the attempt loop), [`relay`] (streaming and mid-stream
//!   recovery), [`compaction`] (which calls the attempt loop for summaries).
//! - [`background`]: the loops that run beside the requests and compose
//!   components (memory sweep, cross-instance sync).
//! - Components, each built from the config, an [`emit::Emitter`] and what
//!   it owns: [`deployments`], [`agents`], [`health`], [`guard`],
//!   [`idempotency`], [`history`].
//! - [`upstream`], [`wire`], [`error`], [`metrics`], [`emit`],
//!   [`secrets`] (the one redactor of secrets in what hale shows and
//!   stores): the leaves.
//!
//! The wire dialects (parsing and rendering requests, answers and streams)
//! are the crate [`hale_proto`], below all of these.
//!
//! [`Gateway`] is a plain struct of the components, built once at start.

pub mod agents;
pub mod api;
pub mod background;
pub mod compaction;
pub mod deployments;
pub mod emit;
pub mod error;
pub mod guard;
pub mod health;
pub mod history;
pub mod idempotency;
pub mod metrics;
pub mod paces;
pub mod pipeline;
pub mod relay;
pub mod responses;
pub mod secrets;
pub mod turn;
pub mod upstream;
pub mod wire;

use crate::agents::Agents;
use crate::background::memory::Shed;
use crate::compaction::Compaction;
use crate::deployments::Deployments;
use crate::emit::{Emitter, wall_ms};
use crate::guard::Tasks;
use crate::health::{HealthRt, Monitor};
use crate::history::HistoryRt;
use crate::idempotency::Idempotency;
use crate::metrics::Metrics;
use crate::paces::Paces;
use hale_core::config::Config;
use hale_core::event::{Event, EventKind};
use hale_store::{AgentRecord, Store};
use std::sync::Arc;
use std::time::Instant;

/// Everything a turn needs, shared by all requests: the components, built
/// once at start.
pub struct Gateway {
    pub cfg: Arc<Config>,
    /// The provider clients: HTTP, the vertex providers' token sources, the
    /// azure providers' Entra tokens and the bedrock providers' AWS credentials.
    pub upstream: upstream::Client,
    pub store: Store,
    pub metrics: Arc<Metrics>,
    /// The store and the metrics, as the components receive them.
    pub emitter: Emitter,
    /// Deployments' health, breakers (agent × deployment), retry budgets.
    pub deployments: Deployments,
    /// Agents' records, gate and pauses.
    pub agents: Arc<Agents>,
    /// Idempotency keys being served.
    pub idempotency: Arc<Idempotency>,
    /// Per-task guard and spend.
    pub tasks: Arc<Tasks>,
    /// Stored compactions, token counts, tokenizers.
    pub compaction: Compaction,
    /// Agent health, interventions, recovery.
    pub health: Arc<HealthRt>,
    /// Per-deployment minutes of the health history, counted in memory.
    pub history: HistoryRt,
    /// Each deployment's usual streaming rate, for the crawl rule.
    pub paces: Paces,
}

impl Gateway {
    /// Builds the components; loads agents from the store; starts the
    /// loops that follow the store's counts and shed idle state.
    pub fn new(
        cfg: Arc<Config>,
        store: Store,
    ) -> futures::future::BoxFuture<'static, anyhow::Result<Arc<Self>>> {
        Box::pin(Self::new_inner(cfg, store))
    }

    async fn new_inner(cfg: Arc<Config>, store: Store) -> anyhow::Result<Arc<Self>> {
        // One TLS crypto library (ring) for every client; a provider already installed is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // The one redactor: the config's secrets now, live tokens as the
        // upstream client fetches them; the emitter masks with it too.
        let secrets = Arc::new(secrets::Redactor::from_config(&cfg));
        let upstream = upstream::Client::new(&cfg, secrets.clone())?;
        let deployments = Deployments::new(cfg.clone(), Instant::now());
        // Paused agents, agents never seen, and the most recently seen up to
        // the idle bound; the rest are read back when they return.
        let records = store.agents_to_hold(cfg.memory.idle_agents).await?;
        let metrics = Arc::new(Metrics::for_config(&cfg));
        let emitter = Emitter::new(store.clone(), metrics.clone(), secrets);
        let health = Arc::new(HealthRt::new(cfg.clone(), emitter.clone(), &records));
        let agents = Arc::new(Agents::new(cfg.clone(), emitter.clone(), records));
        let counted = store.counted();
        let gw = Arc::new(Self {
            upstream,
            idempotency: Arc::new(Idempotency::new(store.clone())),
            tasks: Arc::new(Tasks::new(cfg.clone(), emitter.clone())),
            compaction: Compaction::new(cfg.clone(), emitter.clone()),
            store,
            metrics,
            emitter,
            deployments,
            agents,
            health,
            history: HistoryRt::default(),
            paces: Paces::new(&cfg.crawling),
            cfg,
        });
        tokio::spawn(background::sync::follow_counts(
            gw.store.clone(),
            Arc::downgrade(&gw.agents),
            Arc::downgrade(&gw.tasks),
            counted,
        ));
        let weak = Arc::downgrade(&gw);
        tokio::spawn(background::memory::run(move || {
            weak.upgrade()
                .map(|gw| gw.shed_idle(wall_ms(), Instant::now()))
        }));
        Ok(gw)
    }

    /// A new event at the current wall time.
    pub fn event(&self, kind: EventKind) -> Event {
        self.emitter.event(kind)
    }

    /// Records an event that is not tied to a state change (group-committed, no wait).
    pub fn emit(&self, ev: Event) {
        self.emitter.emit(ev);
    }

    /// The components the attempt loop of one turn uses.
    pub fn env(&self) -> turn::Env<'_> {
        turn::Env {
            cfg: &self.cfg,
            upstream: &self.upstream,
            emit: &self.emitter,
            deployments: &self.deployments,
            history: &self.history,
            health: &self.health,
            paces: &self.paces,
        }
    }

    /// What the health monitor works on ([`health::monitor`]).
    pub fn monitor(&self) -> Monitor {
        Monitor {
            cfg: self.cfg.clone(),
            store: self.store.clone(),
            health: self.health.clone(),
            agents: self.agents.clone(),
        }
    }

    /// What follows other instances' changes ([`background::sync::follow_agents`]).
    pub fn follower(&self) -> background::sync::Follower {
        background::sync::Follower {
            store: self.store.clone(),
            agents: self.agents.clone(),
            health: self.health.clone(),
            tasks: self.tasks.clone(),
        }
    }

    /// Whether hale knows `agent`: it was seen (a turn or a heartbeat), or
    /// the config names it.
    pub fn agent_known(&self, agent: &str) -> bool {
        self.agents.known(agent) || self.health.knows(agent)
    }

    /// An agent's record (a fresh one when unknown).
    pub fn agent_record(&self, agent: &str) -> AgentRecord {
        self.agents.record(agent)
    }

    /// Queues every agent's latest record for the store (at shutdown).
    pub fn persist_agents(&self) {
        self.agents.persist();
    }

    /// Whether `agent` is held in memory.
    pub fn holds(&self, agent: &str) -> bool {
        self.agents.holds(agent)
    }

    /// Holds `agent` in memory while the returned hold lives
    /// ([`Agents::hold_turn`]).
    pub fn hold_turn(&self, agent: &str) -> agents::TurnHold {
        self.agents.hold_turn(agent)
    }

    /// Holds `row` in memory unless the agent is there already (a newer
    /// view), with its terminated tasks. Returns whether it was added.
    pub fn hold_row(&self, row: AgentRecord) -> bool {
        let (id, state) = (row.id.clone(), row.state.clone());
        let added = self.agents.hold_row(row);
        if added {
            // Its terminated tasks stay blocked.
            self.health.adopt_terminated(&id, &state);
        }
        added
    }

    /// Makes sure `agent`'s record is in memory: one that was shed
    /// ([`Gateway::shed_idle`]) is read back from the store, with its
    /// terminated tasks. An agent the store does not know stays absent (it
    /// is new). A store error is logged and the turn goes on as for a new
    /// agent.
    pub fn load_agent<'a>(&'a self, agent: &'a str) -> futures::future::BoxFuture<'a, ()> {
        Box::pin(self.load_agent_inner(agent))
    }

    async fn load_agent_inner(&self, agent: &str) {
        if self.agents.holds(agent) {
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

    /// Sheds idle agents and tasks beyond `memory.idle_agents` /
    /// `memory.idle_tasks` (`hale_core::memory`): an agent with no turn in
    /// flight, unseen for [`hale_core::memory::shed_after`] its pace (5 s to
    /// a minute), not paused, with nothing under way in the health runtime
    /// ([`HealthRt::forget`]), the least recently seen first
    /// ([`Agents::shed`]); the tasks of the agents that left go with them.
    /// Their rows stay in the store; [`Gateway::load_agent`] reads one back
    /// before its next turn or admin call, and the health monitor reads back
    /// one that stays silent ([`Monitor::watch_silent`]). Breakers go too
    /// ([`Deployments::forget_resting_breakers`]): those of the agents that
    /// left, unless one holds a failure, and any at rest; one per agent ×
    /// deployment, they would otherwise pile up with agents that came and
    /// went; and deployments' health at rest ([`Deployments::forget_resting_scopes`]).
    /// Called every [`hale_core::memory::SWEEP_EVERY`] by every
    /// instance ([`background::memory::run`]).
    pub fn shed_idle(&self, now_ms: u64, now: Instant) -> Shed {
        let shed = self.agents.shed(now_ms, |id| self.health.forget(id, now));
        // Seen again meanwhile: it stays; its terminated tasks, dropped from
        // the health runtime with it, are taken back from its record (its
        // health slot comes back with its next heartbeat).
        for (id, state) in shed.stayed {
            self.health.adopt_terminated(&id, &state);
        }
        let tasks = self.tasks.shed(now, self.cfg.memory.idle_tasks, &shed.left);
        let breakers = self.deployments.forget_resting_breakers(now, &shed.left);
        self.deployments.forget_resting_scopes(now);
        Shed {
            agents: shed.left.len(),
            tasks,
            breakers,
        }
    }
}

impl From<&Arc<Gateway>> for Monitor {
    fn from(gw: &Arc<Gateway>) -> Self {
        gw.monitor()
    }
}

impl From<Arc<Gateway>> for Monitor {
    fn from(gw: Arc<Gateway>) -> Self {
        gw.monitor()
    }
}

// ------------------------------------------------------------ older paths
//
// The paths the hale CLI and the benches used before the layers (issue 26),
// kept as aliases so their callers need no change.

/// Old path of [`emit::wall_ms`].
pub mod state {
    pub use crate::emit::wall_ms;
}

/// Old path of the server entry points, now in [`api`].
pub mod http {
    pub use crate::api::{app, app_keyed, serve, serve_keyed, serve_with};
}

/// Old path of [`guard`].
pub mod guardrails {
    pub use crate::guard::{CallSeen, DEFAULT_TASK, Tasks, tool_calls};
}

/// Old path of [`background::sync`].
pub mod sync {
    use crate::Gateway;
    use std::sync::Arc;
    use tokio_util::sync::CancellationToken;

    /// Follows other instances' agent control changes until `token` is
    /// cancelled ([`crate::background::sync::follow_agents`]).
    pub fn follow_agents(
        gw: Arc<Gateway>,
        token: CancellationToken,
    ) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
        Box::pin(follow_agents_inner(gw, token))
    }

    async fn follow_agents_inner(gw: Arc<Gateway>, token: CancellationToken) -> anyhow::Result<()> {
        crate::background::sync::follow_agents(gw.follower(), token).await
    }
}
