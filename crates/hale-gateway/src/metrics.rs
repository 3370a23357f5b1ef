//! Prometheus metrics (docs/operations.md, "Telemetry").
//!
//! One explicit registry, no global state. Labels are low-cardinality only:
//! class names, `provider/model` targets from the config, event kinds — never
//! free text. Gauges that mirror state (breakers, cooldowns, outbox depth) are
//! refreshed when `/metrics` is scraped rather than on every change.
//!
//! A client chooses agent names (`X-Hale-Agent`) and model names (any name
//! a provider with no `models:` list accepts, `provider/model` pins), so
//! every agent, provider and model goes through [`LabelBounds`] before it
//! becomes a label value: a name the config does not know (under `agents:`,
//! a provider's `default_model`/`models`, `routes`) is folded into
//! [`OTHER`]. The number of series is then bounded by the config, whatever
//! the clients send.

use hale_core::class::ErrorClass;
use hale_core::config::{Config, DEFAULT_AGENT, Target};
use hale_core::delivery::SinkState;
use hale_core::event::EventKind;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::time::Duration;

/// The label value of every agent, provider or model the config does not name.
pub const OTHER: &str = "other";

/// The agents, providers and models the config names: the only values those
/// labels take; anything else is [`OTHER`]. The sets hold the config's
/// names only (a client's name is looked up, never added), so they hash
/// with foldhash rather than std's SipHash.
#[derive(Debug, Clone, Default)]
pub struct LabelBounds {
    agents: HashSet<String, foldhash::fast::RandomState>,
    providers: HashSet<String, foldhash::fast::RandomState>,
    models: HashSet<String, foldhash::fast::RandomState>,
}

impl LabelBounds {
    /// The names in `cfg`: agents under `agents:` (and the default agent),
    /// providers, and models (providers' `default_model` and `models`, route
    /// names and route targets' models).
    pub fn from_config(cfg: &Config) -> Self {
        let mut b = Self::default();
        b.agents.insert(DEFAULT_AGENT.to_owned());
        b.agents.extend(cfg.agents.keys().cloned());
        for p in &cfg.providers {
            b.providers.insert(p.name.clone());
            b.models.insert(p.default_model.clone());
            b.models.extend(p.models.iter().cloned());
        }
        for (route, targets) in &cfg.routes {
            b.models.insert(route.clone());
            b.models.extend(targets.iter().map(|t| t.model.clone()));
        }
        b
    }

    /// `agent` when configured, else [`OTHER`].
    pub fn agent<'a>(&self, agent: &'a str) -> &'a str {
        if self.agents.contains(agent) {
            agent
        } else {
            OTHER
        }
    }

    /// `provider` when configured, else [`OTHER`].
    pub fn provider<'a>(&self, provider: &'a str) -> &'a str {
        if self.providers.contains(provider) {
            provider
        } else {
            OTHER
        }
    }

    /// `model` when configured, else [`OTHER`].
    pub fn model<'a>(&self, model: &'a str) -> &'a str {
        if self.models.contains(model) {
            model
        } else {
            OTHER
        }
    }

    /// `provider/model`, each part folded.
    pub fn target(&self, t: &Target) -> String {
        let (provider, model) = (self.provider(&t.provider), self.model(&t.model));
        let mut s = String::with_capacity(provider.len() + 1 + model.len());
        s.push_str(provider);
        s.push('/');
        s.push_str(model);
        s
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    target: String,
    /// `ok` or an error class's name (static: no copy per attempt).
    class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BreakerLabels {
    pub agent: String,
    pub deployment: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeploymentLabels {
    pub deployment: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeploymentStateLabels {
    pub deployment: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    pub sink: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkStateLabels {
    pub sink: String,
    pub state: String,
}

/// The status of one event sink, as the relays report it (its `name` is
/// public and comes from the config: a bounded label).
pub type SinkSample = hale_core::delivery::SinkStatus;

/// Where `/metrics` and `/ready` read the sinks' status and the shed count
/// from (the event relays live outside the gateway; the binary plugs them in).
pub type SinkSource = Box<dyn Fn() -> (Vec<SinkSample>, u64) + Send + Sync>;

/// Labels of the tool-job gauges: a node (from the config or an admin's
/// registration) and/or a tool (capped by the tools runtime, the rest
/// folded into one label); the one a series is not about is empty.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    pub node: String,
    pub tool: String,
}

/// One tool node's figures (docs/operations.md, "Tool jobs").
#[derive(Debug, Clone, PartialEq)]
pub struct ToolNodeSample {
    pub node: String,
    pub availability: f64,
    pub failover_rate: f64,
}

/// One tool's figures (docs/operations.md, "Tool jobs").
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSample {
    pub tool: String,
    pub failover_rate: f64,
    pub degraded_percentage: f64,
}

/// Where `/metrics` reads the tool jobs' figures from (the tools runtime
/// lives outside the gateway; the binary plugs it in).
pub type ToolSource = Box<dyn Fn() -> (Vec<ToolNodeSample>, Vec<ToolSample>) + Send + Sync>;

/// Every metric hale exports.
pub struct Metrics {
    registry: Registry,
    turns: Family<OutcomeLabels, Counter>,
    turns_started: Counter,
    attempts: Family<AttemptLabels, Counter>,
    turn_latency: Histogram,
    attempt_latency: Histogram,
    events: Family<KindLabels, Counter>,
    malformed_chunks: Counter,
    stream_resumes: Counter,
    /// 1 for the current state of each breaker, 0 for the others.
    pub breaker_state: Family<BreakerLabels, Gauge>,
    /// Health per deployment (1 = current state).
    pub deployment_health: Family<DeploymentStateLabels, Gauge>,
    /// Remaining ejection per deployment, in seconds.
    pub deployment_ejected_seconds:
        Family<DeploymentLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// Consecutive failures per deployment.
    pub deployment_consecutive_failures: Family<DeploymentLabels, Gauge>,
    /// Recent success ratio per deployment (absent without calls).
    pub deployment_success_ratio:
        Family<DeploymentLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub outbox_depth: Gauge,
    /// Writes submitted to the store and not yet committed (the journal's
    /// backlog, held in memory).
    pub store_queued_writes: Gauge,
    /// The journal's group commits (transactions) since start: with
    /// `hale_turns_started_total`, how many turns a commit holds — what
    /// the journal's cost per turn depends on (set from the store at a
    /// scrape, [`Metrics::set_store_commits`]).
    pub store_commits: Counter,
    /// Turns that waited for the journal's backlog to shrink, those that
    /// went on after the longest wait, and those that did not wait because
    /// the writer was stuck (`hale_core::memory::journal_wait`).
    pub journal_waits: Counter,
    pub journal_wait_timeouts: Counter,
    pub journal_writer_stuck: Counter,
    /// Answers released before their turn was committed
    /// (`journal.durability: durable`; `hale_core::memory::durable_release`):
    /// the writer was stuck, the bounded wait ran out, or the commit failed.
    pub answers_uncommitted_stuck: Counter,
    pub answers_uncommitted_timeout: Counter,
    pub answers_uncommitted_failed: Counter,
    /// Agents and tasks held in memory (`memory:` bounds the idle ones).
    pub agents_held: Gauge,
    pub tasks_held: Gauge,
    /// Breakers (agent × deployment) held in memory.
    pub breakers_held: Gauge,
    pub dead_letters: Gauge,
    /// Undelivered events shed at the outbox cap since start.
    pub outbox_shed: Gauge,
    /// Labelled by the sink's public name (`nats`, `webhook:<host>`).
    pub sink_delivered: Family<SinkLabels, Gauge>,
    pub sink_failed: Family<SinkLabels, Gauge>,
    pub sink_dead_lettered: Family<SinkLabels, Gauge>,
    pub sink_healthy: Family<SinkLabels, Gauge>,
    /// 1 for the current state of each sink (up, down, half_open), 0 for the others.
    pub sink_state: Family<SinkStateLabels, Gauge>,
    pub sink_backlog: Family<SinkLabels, Gauge>,
    pub sink_oldest_undelivered_age: Family<SinkLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub sink_dead_letters: Family<SinkLabels, Gauge>,
    sink_source: std::sync::OnceLock<SinkSource>,
    /// Tool nodes' availability (1 − faults / calls and health checks).
    pub node_availability: Family<ToolLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// Share of calls moved to another node, per node and per tool.
    pub failover_rate: Family<ToolLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// Percentage of a tool's steps served degraded.
    pub degraded_percentage: Family<ToolLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    tool_source: std::sync::OnceLock<ToolSource>,
    bounds: LabelBounds,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Metrics whose labels are bounded by `cfg` (see [`LabelBounds`]).
    pub fn for_config(cfg: &Config) -> Self {
        Self {
            bounds: LabelBounds::from_config(cfg),
            ..Self::new()
        }
    }

    /// The values agent, provider and model labels may take.
    pub fn bounds(&self) -> &LabelBounds {
        &self.bounds
    }

    /// Metrics that know no names: every agent, provider and model is
    /// labelled [`OTHER`] (the gateway uses [`Metrics::for_config`]).
    pub fn new() -> Self {
        let mut m = Self {
            registry: Registry::with_prefix("hale"),
            turns: Family::<OutcomeLabels, Counter>::default(),
            turns_started: Counter::default(),
            attempts: Family::<AttemptLabels, Counter>::default(),
            turn_latency: Histogram::new(exponential_buckets(0.001, 2.0, 18)),
            attempt_latency: Histogram::new(exponential_buckets(0.001, 2.0, 18)),
            events: Family::<KindLabels, Counter>::default(),
            malformed_chunks: Counter::default(),
            stream_resumes: Counter::default(),
            breaker_state: Family::<BreakerLabels, Gauge>::default(),
            deployment_health: Family::<DeploymentStateLabels, Gauge>::default(),
            deployment_ejected_seconds: Family::<
                DeploymentLabels,
                Gauge<f64, std::sync::atomic::AtomicU64>,
            >::default(),
            deployment_consecutive_failures: Family::<DeploymentLabels, Gauge>::default(),
            deployment_success_ratio: Family::<
                DeploymentLabels,
                Gauge<f64, std::sync::atomic::AtomicU64>,
            >::default(),
            outbox_depth: Gauge::default(),
            store_queued_writes: Gauge::default(),
            store_commits: Counter::default(),
            journal_waits: Counter::default(),
            journal_wait_timeouts: Counter::default(),
            journal_writer_stuck: Counter::default(),
            answers_uncommitted_stuck: Counter::default(),
            answers_uncommitted_timeout: Counter::default(),
            answers_uncommitted_failed: Counter::default(),
            agents_held: Gauge::default(),
            breakers_held: Gauge::default(),
            tasks_held: Gauge::default(),
            dead_letters: Gauge::default(),
            outbox_shed: Gauge::default(),
            sink_delivered: Family::<SinkLabels, Gauge>::default(),
            sink_failed: Family::<SinkLabels, Gauge>::default(),
            sink_dead_lettered: Family::<SinkLabels, Gauge>::default(),
            sink_healthy: Family::<SinkLabels, Gauge>::default(),
            sink_state: Family::<SinkStateLabels, Gauge>::default(),
            sink_backlog: Family::<SinkLabels, Gauge>::default(),
            sink_oldest_undelivered_age: Family::<
                SinkLabels,
                Gauge<f64, std::sync::atomic::AtomicU64>,
            >::default(),
            sink_dead_letters: Family::<SinkLabels, Gauge>::default(),
            sink_source: std::sync::OnceLock::new(),
            node_availability: Family::default(),
            failover_rate: Family::default(),
            degraded_percentage: Family::default(),
            tool_source: std::sync::OnceLock::new(),
            bounds: LabelBounds::default(),
        };
        // Registered family by family, in the order `/metrics` lists them.
        m.register_turns();
        m.register_deployments();
        m.register_journal();
        m.register_memory();
        m.register_delivery();
        m.register_tools();
        m
    }

    /// Registers the turns family: the turns and their attempts.
    fn register_turns(&mut self) {
        self.registry
            .register("turns", "Finished turns by outcome", self.turns.clone());
        self.registry
            .register("turns_started", "Turns started", self.turns_started.clone());
        self.registry.register(
            "attempts",
            "Upstream attempts by target and class (ok = success)",
            self.attempts.clone(),
        );
        self.registry.register(
            "turn_duration_seconds",
            "Turn latency",
            self.turn_latency.clone(),
        );
        self.registry.register(
            "attempt_duration_seconds",
            "Attempt latency",
            self.attempt_latency.clone(),
        );
        self.registry
            .register("events", "Events emitted by kind", self.events.clone());
        self.registry.register(
            "malformed_chunks",
            "Malformed upstream stream chunks skipped",
            self.malformed_chunks.clone(),
        );
        self.registry.register(
            "stream_resumes",
            "Broken streams resumed on another attempt",
            self.stream_resumes.clone(),
        );
    }

    /// Registers the deployments family: the deployments' breakers and health.
    fn register_deployments(&mut self) {
        self.registry.register("breaker_state", "Circuit breakers in each state (1 = a configured agent's breaker is in it; agent=\"other\": how many unconfigured agents' breakers are)", self.breaker_state.clone());
        self.registry.register(
            "deployment_health",
            "Deployment health: healthy, degraded or ejected (1 = current)",
            self.deployment_health.clone(),
        );
        self.registry.register(
            "deployment_ejected_seconds",
            "Remaining ejection per deployment",
            self.deployment_ejected_seconds.clone(),
        );
        self.registry.register(
            "deployment_consecutive_failures",
            "Consecutive failed calls per deployment",
            self.deployment_consecutive_failures.clone(),
        );
        self.registry.register(
            "deployment_success_ratio",
            "Successful calls / calls per deployment in the ejection window",
            self.deployment_success_ratio.clone(),
        );
    }

    /// Registers the journal family: the store's outbox and journal, and answers released before their commit.
    fn register_journal(&mut self) {
        self.registry.register(
            "outbox_depth",
            "Events not yet delivered to every sink",
            self.outbox_depth.clone(),
        );
        self.registry.register(
            "store_queued_writes",
            "Writes submitted to the store and not yet committed",
            self.store_queued_writes.clone(),
        );
        self.registry.register(
            "store_commits",
            "Group commits (transactions) of the journal's writer since start",
            self.store_commits.clone(),
        );
        self.registry.register(
            "journal_waits",
            "Turns that waited for the journal's backlog to shrink before starting",
            self.journal_waits.clone(),
        );
        self.registry.register(
            "journal_wait_timeouts",
            "Turns that went on with the journal's backlog still over its bound",
            self.journal_wait_timeouts.clone(),
        );
        self.registry.register("journal_writer_stuck", "Turns that went on without waiting: the journal's backlog was over its bound and its writer stuck", self.journal_writer_stuck.clone());
        self.registry.register(
            "answers_uncommitted_stuck",
            "Answers released before their turn was committed: the journal's writer was stuck",
            self.answers_uncommitted_stuck.clone(),
        );
        self.registry.register("answers_uncommitted_timeout", "Answers released before their turn was committed: the longest wait for the commit ran out", self.answers_uncommitted_timeout.clone());
        self.registry.register(
            "answers_uncommitted_failed",
            "Answers released although their turn's commit failed",
            self.answers_uncommitted_failed.clone(),
        );
    }

    /// Registers the memory family: what is held in memory.
    fn register_memory(&mut self) {
        self.registry.register(
            "agents_held",
            "Agents held in memory (the rest are in the store only)",
            self.agents_held.clone(),
        );
        self.registry.register(
            "tasks_held",
            "Tasks whose guard and spend are held in memory",
            self.tasks_held.clone(),
        );
        self.registry.register("breakers_held", "Circuit breakers (agent x deployment) held in memory; those at rest are dropped with idle agents", self.breakers_held.clone());
    }

    /// Registers the delivery family: the event sinks' delivery.
    fn register_delivery(&mut self) {
        self.registry.register(
            "dead_letters",
            "Events in the dead-letter table",
            self.dead_letters.clone(),
        );
        self.registry.register(
            "outbox_shed",
            "Undelivered events shed at the outbox cap since start",
            self.outbox_shed.clone(),
        );
        self.registry.register(
            "sink_delivered",
            "Events acknowledged per sink since start",
            self.sink_delivered.clone(),
        );
        self.registry.register(
            "sink_failed",
            "Failed delivery attempts per sink since start",
            self.sink_failed.clone(),
        );
        self.registry.register(
            "sink_dead_lettered",
            "Events dead-lettered per sink since start",
            self.sink_dead_lettered.clone(),
        );
        self.registry.register(
            "sink_healthy",
            "1 when the sink is up (not waiting out an outage)",
            self.sink_healthy.clone(),
        );
        self.registry.register(
            "sink_state",
            "Event sink state (1 = current): up, down (waiting out an outage), half_open (trial)",
            self.sink_state.clone(),
        );
        self.registry.register(
            "sink_backlog",
            "Outbox events committed after the sink's cursor",
            self.sink_backlog.clone(),
        );
        self.registry.register(
            "sink_oldest_undelivered_age_seconds",
            "Age of the oldest event not yet delivered to the sink (0 when caught up)",
            self.sink_oldest_undelivered_age.clone(),
        );
        self.registry.register(
            "sink_dead_letters",
            "Events of the sink in the dead-letter table",
            self.sink_dead_letters.clone(),
        );
    }

    /// Registers the tools family: the tool jobs' nodes and steps.
    fn register_tools(&mut self) {
        self.registry.register(
            "node_availability",
            "Tool node availability: 1 - faults / (calls + health checks)",
            self.node_availability.clone(),
        );
        self.registry.register(
            "failover_rate",
            "Share of tool calls moved to another node, per node or per tool",
            self.failover_rate.clone(),
        );
        self.registry.register(
            "degraded_percentage",
            "Percentage of a tool's steps served degraded",
            self.degraded_percentage.clone(),
        );
    }

    /// Plugs in the event relays' figures (once).
    pub fn set_sink_source(&self, source: SinkSource) {
        let _ = self.sink_source.set(source);
    }

    /// Plugs in the tool jobs' figures (once).
    pub fn set_tool_source(&self, source: ToolSource) {
        let _ = self.tool_source.set(source);
    }

    /// Copies the tool jobs' figures into the gauges (at scrape time); a
    /// node no longer registered loses its series.
    pub fn refresh_tools(&self) {
        let Some(source) = self.tool_source.get() else {
            return;
        };
        let (nodes, tools) = source();
        self.node_availability.clear();
        self.failover_rate.clear();
        self.degraded_percentage.clear();
        for n in nodes {
            let l = ToolLabels {
                node: n.node,
                tool: String::new(),
            };
            self.node_availability.get_or_create(&l).set(n.availability);
            self.failover_rate.get_or_create(&l).set(n.failover_rate);
        }
        for t in tools {
            let l = ToolLabels {
                node: String::new(),
                tool: t.tool,
            };
            self.failover_rate.get_or_create(&l).set(t.failover_rate);
            self.degraded_percentage
                .get_or_create(&l)
                .set(t.degraded_percentage);
        }
    }

    /// The sinks' status and the shed count, if the relays are plugged in.
    pub fn sinks(&self) -> Option<(Vec<SinkSample>, u64)> {
        self.sink_source.get().map(|source| source())
    }

    /// Copies the relays' figures into the gauges (at scrape time).
    pub fn refresh_sinks(&self) {
        let Some((sinks, shed)) = self.sinks() else {
            return;
        };
        let g = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.outbox_shed.set(g(shed));
        for s in sinks {
            let l = SinkLabels {
                sink: s.name.clone(),
            };
            self.sink_delivered.get_or_create(&l).set(g(s.delivered));
            self.sink_failed.get_or_create(&l).set(g(s.failed));
            self.sink_dead_lettered
                .get_or_create(&l)
                .set(g(s.dead_lettered));
            self.sink_healthy
                .get_or_create(&l)
                .set(i64::from(s.state == SinkState::Up));
            for state in SinkState::ALL {
                self.sink_state
                    .get_or_create(&SinkStateLabels {
                        sink: s.name.clone(),
                        state: state.as_str().into(),
                    })
                    .set(i64::from(state == s.state));
            }
            self.sink_backlog.get_or_create(&l).set(g(s.backlog));
            self.sink_oldest_undelivered_age
                .get_or_create(&l)
                .set(s.oldest_undelivered_age_ms.unwrap_or(0) as f64 / 1000.0);
            self.sink_dead_letters
                .get_or_create(&l)
                .set(g(s.dead_letters));
        }
    }

    pub fn turn_started(&self) {
        self.turns_started.inc();
    }

    pub fn turn_finished(&self, ok: bool, latency: Duration) {
        let outcome = if ok { "ok" } else { "failed" };
        self.turns.get_or_create(&OutcomeLabels { outcome }).inc();
        self.turn_latency.observe(latency.as_secs_f64());
    }

    pub fn attempt(&self, target: &Target, class: Option<ErrorClass>, latency: Duration) {
        let class = class.map(ErrorClass::as_str).unwrap_or("ok");
        self.attempts
            .get_or_create(&AttemptLabels {
                target: self.bounds.target(target),
                class,
            })
            .inc();
        self.attempt_latency.observe(latency.as_secs_f64());
    }

    pub fn event(&self, kind: EventKind) {
        self.events
            .get_or_create(&KindLabels {
                kind: kind.as_str(),
            })
            .inc();
    }

    pub fn malformed_chunks(&self, n: u32) {
        self.malformed_chunks.inc_by(u64::from(n));
    }

    pub fn stream_resumed(&self, resumes: u32) {
        self.stream_resumes.inc_by(resumes as u64);
    }

    /// Brings `hale_store_commits_total` up to the store's count of group
    /// commits. A counter only rises: two scrapes racing set it to the
    /// larger of their readings.
    pub fn set_store_commits(&self, commits: u64) {
        self.store_commits
            .inner()
            .fetch_max(commits, std::sync::atomic::Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
