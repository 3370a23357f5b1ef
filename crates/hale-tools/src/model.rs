//! The wire shapes of jobs: what `POST /jobs` accepts and what `GET /jobs/{id}`
//! returns (the job's state, which is also the body stored in the `jobs`
//! table and the audit log).
//!
//! Requests are parsed strictly (`deny_unknown_fields`): a misspelt key in a
//! job is a 400 naming it, not a silently ignored setting.

use hale_core::config::NodeBreakerConfig;
use hale_core::event::Event;
use hale_core::tools::{
    DEFAULT_QUEUE_RETRY_INTERVAL_SECONDS, DEFAULT_QUEUE_TTL_SECONDS, DEFAULT_STEP_TIMEOUT_MS,
    JobStatus, MAX_ID_LEN, MAX_STEPS, StepRetry, ToolError,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    pub job_id: String,
    /// A label of the job, or — when `steps` is empty — the name of a
    /// configured workflow (`workflows:`) whose steps the job runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
    /// The workflow's parameters: `${input.a.b}` in a step's arguments.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
    /// Tool declarations (`{"tool_id": "tool:unit_convert", "deterministic":
    /// true}`): a deterministic tool is safe to re-run in this job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDecl>,
    /// Empty when `workflow_id` names a configured workflow.
    #[serde(default)]
    pub steps: Vec<StepRequest>,
}

/// A tool declaration of seed 003: `tool_id` is `tool:NAME` (or `NAME`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDecl {
    pub tool_id: String,
    /// Same output for the same input: safe to retry and fail over even
    /// after a call that may have run.
    #[serde(default)]
    pub deterministic: bool,
}

impl JobRequest {
    /// Whether the job declares `tool` deterministic.
    pub fn declares_deterministic(&self, tool: &str) -> bool {
        self.tools
            .iter()
            .any(|t| t.deterministic && hale_core::tools::tool_of_id(&t.tool_id) == tool)
    }
}

/// One step: a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepRequest {
    pub step_id: String,
    pub tool_name: String,
    /// JSON arguments; a string `${steps.ID.result.path}` is replaced by an
    /// earlier step's result.
    #[serde(default = "empty_object")]
    pub arguments: Value,
    #[serde(default)]
    pub target: Target,
    #[serde(default)]
    pub retry: StepRetry,
    #[serde(default)]
    pub offline_behavior: OfflineBehavior,
    /// The whole step's deadline, every attempt and failover included.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// Re-run a non-deterministic call that may have executed.
    #[serde(default)]
    pub retry_unsafe: bool,
    /// Passed to the node as `Idempotency-Key` (HTTP) or `_meta` (MCP);
    /// makes the call safe to re-run anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// A breaker for this step's tool on each node it calls (`circuit_breaker`
    /// is an alias): after `failure_threshold` node faults of the tool on a
    /// node, the node is skipped for the tool (`skipped: open`) for
    /// `timeout_seconds`, then `half_open_requests` trials.
    #[serde(
        default,
        alias = "circuit_breaker",
        skip_serializing_if = "Option::is_none"
    )]
    pub breaker: Option<NodeBreakerConfig>,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

fn default_timeout() -> u64 {
    DEFAULT_STEP_TIMEOUT_MS
}

fn yes() -> bool {
    true
}

fn one() -> usize {
    1
}

/// Where a step runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Target {
    /// The best healthy node offering the tool; with `failover`, the next.
    Local {
        #[serde(default = "yes")]
        failover: bool,
    },
    /// The named nodes, in order.
    FailoverChain { nodes: Vec<String> },
    /// Spread over the healthy nodes; fewer than `min_nodes` is an error (or a queue).
    LoadBalanced {
        #[serde(default = "one")]
        min_nodes: usize,
        #[serde(default = "yes")]
        failover: bool,
    },
}

impl Default for Target {
    fn default() -> Self {
        Target::Local { failover: true }
    }
}

impl Target {
    /// The label used in `execution_path`.
    pub fn label(&self) -> &'static str {
        match self {
            Target::Local { .. } => "local",
            Target::FailoverChain { .. } => "failover_chain",
            Target::LoadBalanced { .. } => "load_balanced",
        }
    }
}

/// What a step does when no node can take it. Without `mode`, a TTL or an
/// interval means `queue` (seed 003 writes `{"ttl_seconds": 3600}`) and
/// nothing means `fail_fast`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(
    tag = "mode",
    rename_all = "snake_case",
    deny_unknown_fields,
    try_from = "RawOffline"
)]
pub enum OfflineBehavior {
    /// Fail the job at once.
    #[default]
    FailFast,
    /// Keep the job durably and deliver it when a node is back.
    Queue {
        #[serde(default = "default_ttl")]
        ttl_seconds: u64,
        #[serde(default = "default_interval")]
        retry_interval_seconds: u64,
    },
}

/// `offline_behavior` as written, `mode` optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOffline {
    mode: Option<String>,
    ttl_seconds: Option<u64>,
    retry_interval_seconds: Option<u64>,
}

impl TryFrom<RawOffline> for OfflineBehavior {
    type Error = String;

    fn try_from(r: RawOffline) -> Result<Self, String> {
        let timed = r.ttl_seconds.is_some() || r.retry_interval_seconds.is_some();
        let queue = || OfflineBehavior::Queue {
            ttl_seconds: r.ttl_seconds.unwrap_or_else(default_ttl),
            retry_interval_seconds: r.retry_interval_seconds.unwrap_or_else(default_interval),
        };
        match r.mode.as_deref() {
            Some("queue") => Ok(queue()),
            None if timed => Ok(queue()),
            Some("fail_fast") | None if !timed => Ok(OfflineBehavior::FailFast),
            Some("fail_fast") | None => Err(
                "offline_behavior: ttl_seconds and retry_interval_seconds need mode `queue`".into(),
            ),
            Some(other) => Err(format!(
                "offline_behavior: unknown mode `{other}`, expected `queue` or `fail_fast`"
            )),
        }
    }
}

fn default_ttl() -> u64 {
    DEFAULT_QUEUE_TTL_SECONDS
}

fn default_interval() -> u64 {
    DEFAULT_QUEUE_RETRY_INTERVAL_SECONDS
}

impl JobRequest {
    /// Every problem with the request, for one 400.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let id_ok = |s: &str| !s.trim().is_empty() && s.len() <= MAX_ID_LEN;
        if !id_ok(&self.job_id) {
            out.push(format!("job_id must be 1 to {MAX_ID_LEN} characters"));
        }
        if let Some(w) = &self.workflow_id
            && !id_ok(w)
        {
            out.push(format!("workflow_id must be 1 to {MAX_ID_LEN} characters"));
        }
        if self.steps.is_empty() && self.workflow_id.is_some() {
            out.push(format!(
                "workflow_id `{}` names no configured workflow, and the job has no steps",
                self.workflow_id.as_deref().unwrap_or_default()
            ));
        } else if self.steps.is_empty() || self.steps.len() > MAX_STEPS {
            out.push(format!("steps must hold 1 to {MAX_STEPS} steps"));
        }
        for (i, t) in self.tools.iter().enumerate() {
            if !id_ok(&t.tool_id) {
                out.push(format!(
                    "tools[{i}].tool_id must be 1 to {MAX_ID_LEN} characters"
                ));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, s) in self.steps.iter().enumerate() {
            if !id_ok(&s.step_id) {
                out.push(format!(
                    "steps[{i}].step_id must be 1 to {MAX_ID_LEN} characters"
                ));
            } else if !seen.insert(s.step_id.as_str()) {
                out.push(format!("steps[{i}].step_id `{}` is used twice", s.step_id));
            }
            if !id_ok(&s.tool_name) {
                out.push(format!(
                    "steps[{i}].tool_name must be 1 to {MAX_ID_LEN} characters"
                ));
            } else if let Some(r) = hale_core::segment::problem(&s.tool_name) {
                // An HTTP node's URL names the tool (`{url}/tools/{name}`).
                out.push(format!(
                    "steps[{i}].tool_name {r} (it becomes a path segment of a node's URL)"
                ));
            }
            if s.timeout_ms == 0 {
                out.push(format!("steps[{i}].timeout_ms must be greater than 0"));
            }
            for p in s.retry.problems() {
                out.push(format!("steps[{i}].{p}"));
            }
            match &s.target {
                Target::FailoverChain { nodes } if nodes.is_empty() => {
                    out.push(format!(
                        "steps[{i}].target.nodes must name at least one node"
                    ));
                }
                Target::LoadBalanced { min_nodes: 0, .. } => {
                    out.push(format!("steps[{i}].target.min_nodes must be at least 1"));
                }
                Target::Local { .. }
                | Target::FailoverChain { .. }
                | Target::LoadBalanced { .. } => {}
            }
            if let Some(b) = &s.breaker {
                for (key, v) in [
                    ("failure_threshold", b.failure_threshold.map(u64::from)),
                    ("timeout_seconds", b.timeout_seconds),
                    ("half_open_requests", b.half_open_requests.map(u64::from)),
                ] {
                    if v == Some(0) {
                        out.push(format!("steps[{i}].breaker.{key} must be at least 1"));
                    }
                }
            }
            if let OfflineBehavior::Queue { ttl_seconds: 0, .. } = s.offline_behavior {
                out.push(format!(
                    "steps[{i}].offline_behavior.ttl_seconds must be at least 1"
                ));
            }
        }
        out
    }
}

/// One attempt of a step, a row of the job's timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub step: String,
    pub node: String,
    /// Milliseconds since the Unix epoch.
    pub timestamp: u64,
    pub duration_ms: u64,
    /// `success` or `error`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The outcome of one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepOutcome {
    pub step_id: String,
    pub ok: bool,
    /// The result was checked against the tool's output schema.
    pub verified: bool,
    #[serde(default)]
    pub result: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub attempts: u32,
    pub maybe_executed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A queued job's schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueInfo {
    pub queued_ms: u64,
    pub ttl_seconds: u64,
    pub retry_interval_seconds: u64,
    /// Deliveries tried so far.
    pub deliveries: u32,
}

/// A job's state and evidence: `GET /jobs/{id}`, the stored body, the audit row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub job_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
    /// The agent the job ran for (`X-Hale-Agent` or the key's default, on `/mcp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The task it belongs to (`X-Hale-Task` or the MCP session, on `/mcp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    pub status: JobStatus,
    pub ok: bool,
    /// Every step's result was verified against an output schema.
    pub verified: bool,
    /// The last step's result.
    pub result: serde_json::Value,
    /// `target:node (outcome)` per attempt, in order.
    pub execution_path: Vec<String>,
    pub degraded: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded_reason: Option<String>,
    pub maybe_executed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub steps: Vec<StepOutcome>,
    pub timeline: Vec<Attempt>,
    pub submitted_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueInfo>,
    /// The request, kept so a queued job can be delivered after a restart.
    pub request: JobRequest,
    /// `job.*` events of this run not yet written: they go into the store
    /// with the next write of the job's row, in its transaction.
    #[serde(skip)]
    pub pending: Vec<Event>,
}

impl Job {
    /// A job just submitted.
    pub fn new(request: JobRequest, now_ms: u64) -> Self {
        Job {
            job_id: request.job_id.clone(),
            workflow_id: request.workflow_id.clone(),
            agent: None,
            task: None,
            status: JobStatus::Running,
            ok: false,
            verified: false,
            result: serde_json::Value::Null,
            execution_path: Vec::new(),
            degraded: false,
            degraded_reason: None,
            maybe_executed: false,
            error: None,
            steps: Vec::new(),
            timeline: Vec::new(),
            submitted_ms: now_ms,
            finished_ms: None,
            queue: None,
            request,
            pending: Vec::new(),
        }
    }

    /// Notes a `job.*` event; it is written with the job's next row write.
    pub fn note(&mut self, kind: hale_core::event::EventKind, payload: Value) {
        use hale_core::clock::Clock as _;
        let now = hale_core::clock::SystemClock.wall_ms();
        self.pending
            .push(Event::new(kind, now, &mut rand::rng()).payload(payload));
    }

    /// Marks the job degraded, keeping the first reason.
    pub fn degrade(&mut self, reason: impl Into<String>) {
        if !self.degraded {
            self.degraded = true;
            self.degraded_reason = Some(reason.into());
        }
    }
}
