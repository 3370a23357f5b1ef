//! The tool-job runtime ([`Tools`]): the live state the HTTP handlers, the
//! runner and the background tasks share — store, node registry, HTTP
//! client, metrics, the `/mcp` front's settings and tool-call caps — with the
//! two things every part needs: the clock ([`wall_ms`]) and emitting an
//! event; and what the config adds to jobs: the named workflows, the audit
//! log's file, the breakers of steps that bring their own. What `Tools`
//! does is in the modules by concern: `jobs`, `queue`, `node_calls`,
//! `background`, `api`, `mcp_front`.

use crate::metrics;
use crate::model::{JobRequest, StepRequest, ToolDecl};
use crate::nodes::Registry;
use hale_core::clock::Clock;
use hale_core::config::Config;
use hale_core::event::{Event, EventKind};
use hale_core::tools as rules;
use hale_store::{Store, Write};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Milliseconds since the Unix epoch.
pub fn wall_ms() -> u64 {
    hale_core::clock::SystemClock.wall_ms()
}

/// The tool-job runtime, shared by the HTTP handlers and background tasks.
pub struct Tools {
    pub store: Store,
    pub registry: Registry,
    pub http: reqwest::Client,
    pub metrics: metrics::Metrics,
    /// Round-robin counter of `load_balanced`.
    pub(crate) rr: AtomicU64,
    /// How often capabilities are refreshed.
    pub refresh_every: Duration,
    /// Host headers the MCP front accepts (empty: any).
    pub mcp_allowed_hosts: Vec<String>,
    /// `limits.max_request_bytes`: the largest body the MCP front reads,
    /// as every other route (its library's own cap is 4 MiB).
    pub mcp_body_limit: usize,
    /// `guard.tool_caps`: calls of a tool allowed per agent and task on `/mcp`.
    pub tool_caps: std::collections::BTreeMap<String, u64>,
    /// Calls counted against `tool_caps`, per (agent, task, tool).
    cap_counts: std::sync::Mutex<std::collections::HashMap<(String, String, String), u64>>,
    /// [`rules::INTERRUPTED_GRACE`] in ms; tests shorten it.
    pub(crate) interrupted_grace_ms: AtomicU64,
    /// `workflows:`, parsed: what a job naming one by `workflow_id` runs.
    pub workflows: BTreeMap<String, Workflow>,
    /// `tool_jobs.audit_log`: the audit log's JSON-lines file, if any.
    pub(crate) audit_file: Option<crate::audit_file::AuditFile>,
    /// Breakers of steps that set `breaker`, per (node, tool, numbers).
    pub(crate) step_breakers: crate::step_breakers::StepBreakers,
}

/// A configured workflow, parsed into job steps.
#[derive(Debug, Clone, PartialEq)]
pub struct Workflow {
    pub steps: Vec<StepRequest>,
    pub tools: Vec<ToolDecl>,
}

/// Parses `workflows:` into steps; an error names the workflow and step.
fn parse_workflows(cfg: &Config) -> anyhow::Result<BTreeMap<String, Workflow>> {
    let mut out = BTreeMap::new();
    for (name, w) in &cfg.workflows {
        let mut steps = Vec::new();
        for (i, v) in w.steps.iter().enumerate() {
            let step: StepRequest = serde_json::from_value(v.clone())
                .map_err(|e| anyhow::anyhow!("workflows.{name}.steps[{i}]: {e}"))?;
            steps.push(step);
        }
        let mut tools = Vec::new();
        for (i, v) in w.tools.iter().enumerate() {
            let t: ToolDecl = serde_json::from_value(v.clone())
                .map_err(|e| anyhow::anyhow!("workflows.{name}.tools[{i}]: {e}"))?;
            tools.push(t);
        }
        let probe = JobRequest {
            job_id: "probe".into(),
            workflow_id: Some(name.clone()),
            input: Value::Null,
            tools: tools.clone(),
            steps: steps.clone(),
        };
        let problems = probe.problems();
        if !problems.is_empty() {
            anyhow::bail!("workflows.{name}: {}", problems.join("; "));
        }
        out.insert(name.clone(), Workflow { steps, tools });
    }
    Ok(out)
}

impl Tools {
    /// The runtime for `cfg.tool_nodes` over `store`.
    pub fn new(cfg: &Config, store: Store) -> anyhow::Result<Arc<Self>> {
        // One TLS crypto library (ring) for every client; one already installed is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()?;
        Ok(Arc::new(Tools {
            store,
            registry: Registry::new(&cfg.tool_nodes),
            http,
            metrics: metrics::Metrics::default(),
            rr: AtomicU64::new(0),
            refresh_every: rules::CAPABILITY_REFRESH,
            mcp_allowed_hosts: allowed_hosts(cfg.listen, &cfg.auth.allowed_hosts),
            mcp_body_limit: usize::try_from(cfg.limits.max_request_bytes).unwrap_or(usize::MAX),
            tool_caps: cfg.guard.tool_caps.clone(),
            cap_counts: Default::default(),
            interrupted_grace_ms: AtomicU64::new(
                u64::try_from(rules::INTERRUPTED_GRACE.as_millis()).unwrap_or(u64::MAX),
            ),
            workflows: parse_workflows(cfg)?,
            audit_file: cfg
                .tool_jobs
                .audit_log
                .clone()
                .map(crate::audit_file::AuditFile::new),
            step_breakers: Default::default(),
        }))
    }

    /// Counts one call of `tool` for `agent`'s `task` against the tool's
    /// cap (`guard.tool_caps`). `Err(cap)`: the cap is
    /// reached and the call must not run (it is not counted).
    pub fn take_tool_call(&self, agent: &str, task: &str, tool: &str) -> Result<(), u64> {
        let Some(&cap) = self.tool_caps.get(tool) else {
            return Ok(());
        };
        let mut counts = self.cap_counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts
            .entry((agent.to_owned(), task.to_owned(), tool.to_owned()))
            .or_default();
        if *n >= cap {
            return Err(cap);
        }
        *n += 1;
        Ok(())
    }

    /// Records an event through the outbox (group-committed, no wait).
    pub fn emit(&self, kind: EventKind, payload: Value) {
        let ev = Event::new(kind, wall_ms(), &mut rand::rng()).payload(payload);
        self.store.submit(vec![Write::Event(ev)]);
    }
}

/// The Host headers the MCP front accepts: loopback names, the listen
/// address and the configured names (`auth.allowed_hosts`, also accepted
/// by the edge's rule, `hale_core::browser`); any when hale listens on
/// every interface (its clients then use names hale cannot know, and API
/// keys are what protects it).
fn allowed_hosts(listen: std::net::SocketAddr, configured: &[String]) -> Vec<String> {
    if listen.ip().is_unspecified() {
        return Vec::new();
    }
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
    let ip = listen.ip().to_string();
    for name in std::iter::once(&ip).chain(configured) {
        if !hosts.contains(name) {
            hosts.push(name.clone());
        }
    }
    hosts
}
