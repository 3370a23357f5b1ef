//! The rules of tool jobs across nodes (docs/operations.md, "Tool jobs"), pure.
//!
//! A tool call that failed is described as a [`ToolObservation`] (HTTP status,
//! transport failure, whether the output broke its schema) and classified
//! into a [`ToolError`] — the names users write in a step's
//! `retryable_errors` / `non_retryable_errors` — each mapped onto the one
//! [`ErrorClass`] table (docs/operations.md, "Failure classes"), so node
//! breakers and cooldowns account tool failures exactly like provider failures.
//!
//! The step loop in `hale-tools` asks [`decide`] after every failed attempt
//! and carries the answer out. Why it decides so:
//! - **The caller's own fault is final.** `InvalidInput` (400/422) fails the
//!   same way on any node: it is neither retried nor failed over.
//! - **Side effects are not repeated blindly.** A call that may have run on
//!   the node (a timeout or a reset after the request was sent) is re-run,
//!   here or elsewhere, only when that is safe: the tool is deterministic,
//!   the call carries an idempotency key the node sees, or the step says
//!   `retry_unsafe: true`. Otherwise the step stops and its result says
//!   `maybe_executed`.
//! - **Backoff is for the same node.** Moving to another node happens at
//!   once (a silent node stays silent; another may answer now); a retry on
//!   the same node waits `backoff_ms · backoff_multiplier^(n−2)` before attempt
//!   `n`, capped by `max_backoff_ms` — 0, 500, 1000 ms for 500 × 2 — or the
//!   node's `Retry-After` when that is longer.
//!
//! Node selection for the three target kinds ([`order_local`],
//! [`order_chain`], [`pick_balanced`]), node health, leases and the
//! store-and-forward queue's retry/expiry decisions are here too. Time comes
//! in as milliseconds since the epoch (leases and queued jobs outlive the
//! process) or as durations; nothing reads a clock.

use crate::class::ErrorClass;
use crate::classify::Transport;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Default attempts of a step, across nodes, the first included.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Default wait before the first retry on the same node.
pub const DEFAULT_BACKOFF_MS: u64 = 500;
/// Default growth of the wait per retry.
pub const DEFAULT_BACKOFF_MULTIPLIER: f64 = 2.0;
/// Default cap of one wait.
pub const DEFAULT_MAX_BACKOFF_MS: u64 = 10_000;
/// Default timeout of one attempt of a step.
pub const DEFAULT_STEP_TIMEOUT_MS: u64 = 30_000;
/// Default time a queued step is kept before `job.expired`.
pub const DEFAULT_QUEUE_TTL_SECONDS: u64 = 3600;
/// Default interval between deliveries of a queued job.
pub const DEFAULT_QUEUE_RETRY_INTERVAL_SECONDS: u64 = 5;
/// Default lease of a node registered with `POST /nodes`.
pub const DEFAULT_LEASE_SECONDS: u64 = 30;
/// How often capabilities are refreshed (the node health check).
pub const CAPABILITY_REFRESH: Duration = Duration::from_secs(10);
/// Most tools one node may list; the rest are ignored (metrics labels and
/// memory stay bounded whatever a node says).
pub const MAX_TOOLS_PER_NODE: usize = 256;
/// Most steps in one job.
pub const MAX_STEPS: usize = 64;
/// Longest id (job, step, workflow, node, tool name) accepted from a caller.
pub const MAX_ID_LEN: usize = 200;

/// What went wrong with a tool call, in the names a step's retry lists use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ToolError {
    /// No answer within the attempt timeout (the request was sent).
    NetworkTimeout,
    /// Connection refused, reset, DNS: the node could not be reached.
    NodeUnreachable,
    /// 500, 502, 503, 504, 529: the node is overloaded or broken.
    CapacityExceeded,
    /// 429.
    RateLimited,
    /// 400, 422: the arguments are wrong; they are wrong on every node.
    InvalidInput,
    /// The output is not JSON or does not match the tool's output schema.
    SchemaValidationFailed,
    /// 404, or the node does not list the tool.
    ToolNotFound,
    /// 401, 403: the node refuses this call.
    MissingCapability,
    /// No node (or fewer than `min_nodes`) could take the step.
    NoNodeAvailable,
    /// Anything else.
    Unknown,
}

impl ToolError {
    /// Every name, in declaration order.
    pub const ALL: [ToolError; 10] = [
        ToolError::NetworkTimeout,
        ToolError::NodeUnreachable,
        ToolError::CapacityExceeded,
        ToolError::RateLimited,
        ToolError::InvalidInput,
        ToolError::SchemaValidationFailed,
        ToolError::ToolNotFound,
        ToolError::MissingCapability,
        ToolError::NoNodeAvailable,
        ToolError::Unknown,
    ];

    /// The name written in configs, requests, results and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolError::NetworkTimeout => "NetworkTimeout",
            ToolError::NodeUnreachable => "NodeUnreachable",
            ToolError::CapacityExceeded => "CapacityExceeded",
            ToolError::RateLimited => "RateLimited",
            ToolError::InvalidInput => "InvalidInput",
            ToolError::SchemaValidationFailed => "SchemaValidationFailed",
            ToolError::ToolNotFound => "ToolNotFound",
            ToolError::MissingCapability => "MissingCapability",
            ToolError::NoNodeAvailable => "NoNodeAvailable",
            ToolError::Unknown => "Unknown",
        }
    }

    /// Parses [`ToolError::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == s)
    }

    /// The outcome word of an `execution_path` entry (`node_a (timeout)`).
    pub fn outcome(self) -> &'static str {
        match self {
            ToolError::NetworkTimeout => "timeout",
            ToolError::NodeUnreachable => "unreachable",
            ToolError::CapacityExceeded => "capacity_exceeded",
            ToolError::RateLimited => "rate_limited",
            ToolError::InvalidInput => "invalid_input",
            ToolError::SchemaValidationFailed => "schema_validation_failed",
            ToolError::ToolNotFound => "tool_not_found",
            ToolError::MissingCapability => "missing_capability",
            ToolError::NoNodeAvailable => "no_node_available",
            ToolError::Unknown => "error",
        }
    }

    /// The failure class (the row of the class table) this failure belongs to.
    pub fn class(self) -> ErrorClass {
        match self {
            ToolError::NetworkTimeout => ErrorClass::Timeout,
            ToolError::NodeUnreachable => ErrorClass::Network,
            ToolError::CapacityExceeded => ErrorClass::Overloaded,
            ToolError::RateLimited => ErrorClass::RateLimit,
            ToolError::InvalidInput => ErrorClass::BadRequest,
            ToolError::SchemaValidationFailed => ErrorClass::Format,
            ToolError::ToolNotFound => ErrorClass::ModelNotFound,
            ToolError::MissingCapability => ErrorClass::Auth,
            ToolError::NoNodeAvailable => ErrorClass::Policy,
            ToolError::Unknown => ErrorClass::Unknown,
        }
    }

    /// Retried by default (unreachable, timeout, 503, 429 are;
    /// invalid arguments, missing capability, not found, bad output are not).
    pub fn retryable_by_default(self) -> bool {
        match self {
            ToolError::NetworkTimeout
            | ToolError::NodeUnreachable
            | ToolError::CapacityExceeded
            | ToolError::RateLimited
            | ToolError::Unknown => true,
            ToolError::InvalidInput
            | ToolError::SchemaValidationFailed
            | ToolError::ToolNotFound
            | ToolError::MissingCapability
            | ToolError::NoNodeAvailable => false,
        }
    }

    /// Whether another node may succeed where this one failed, even when the
    /// failure is not worth retrying on the same node: a node lacking the
    /// tool or the permission says nothing about the others. Bad arguments
    /// fail everywhere.
    pub fn other_node_may_succeed(self) -> bool {
        match self {
            ToolError::NetworkTimeout
            | ToolError::NodeUnreachable
            | ToolError::CapacityExceeded
            | ToolError::RateLimited
            | ToolError::SchemaValidationFailed
            | ToolError::ToolNotFound
            | ToolError::MissingCapability
            | ToolError::Unknown => true,
            ToolError::InvalidInput | ToolError::NoNodeAvailable => false,
        }
    }

    /// Whether this failure says something about the node's health (counts
    /// against its breaker and ejection).
    pub fn node_fault(self) -> bool {
        match self {
            ToolError::NetworkTimeout
            | ToolError::NodeUnreachable
            | ToolError::CapacityExceeded
            | ToolError::RateLimited
            | ToolError::SchemaValidationFailed
            | ToolError::Unknown => true,
            ToolError::InvalidInput
            | ToolError::ToolNotFound
            | ToolError::MissingCapability
            | ToolError::NoNodeAvailable => false,
        }
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the adapter saw of one failed tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ToolObservation {
    /// The HTTP status (or the MCP error mapped onto one), if an answer came.
    pub status: Option<u16>,
    /// What went wrong below HTTP.
    pub transport: Option<Transport>,
    /// A 2xx whose output is not JSON or breaks the tool's output schema.
    pub output_invalid: bool,
}

/// Classifies one failed tool call. A status decides over a transport
/// failure; a 2xx with invalid output is `SchemaValidationFailed`.
pub fn classify(obs: &ToolObservation) -> ToolError {
    if let Some(s) = obs.status {
        return match s {
            200..=299 if obs.output_invalid => ToolError::SchemaValidationFailed,
            400 | 422 => ToolError::InvalidInput,
            401 | 403 => ToolError::MissingCapability,
            404 | 405 => ToolError::ToolNotFound,
            408 => ToolError::NetworkTimeout,
            429 => ToolError::RateLimited,
            500..=599 => ToolError::CapacityExceeded,
            _ => match obs.transport {
                Some(t) => of_transport(t),
                None => ToolError::Unknown,
            },
        };
    }
    if obs.output_invalid {
        return ToolError::SchemaValidationFailed;
    }
    match obs.transport {
        Some(t) => of_transport(t),
        None => ToolError::Unknown,
    }
}

fn of_transport(t: Transport) -> ToolError {
    match t {
        Transport::ConnectReset | Transport::ConnectRefused | Transport::Dns | Transport::Tls => {
            ToolError::NodeUnreachable
        }
        Transport::HeadersTimeout
        | Transport::FirstTokenTimeout
        | Transport::SilentHangUp
        | Transport::StreamStalled
        | Transport::StreamCrawling => ToolError::NetworkTimeout,
        Transport::StreamCut | Transport::StreamEndedWithoutFinish | Transport::BodyCut => {
            ToolError::NodeUnreachable
        }
        Transport::MalformedBody => ToolError::SchemaValidationFailed,
        Transport::Other => ToolError::Unknown,
    }
}

/// Whether the call may have run on the node although no answer came: the
/// request was sent and then the wait timed out, or the connection broke
/// after it was sent. A refused connection never reached the tool.
pub fn maybe_executed(err: ToolError, transport: Option<Transport>, sent: bool) -> bool {
    if !sent {
        return false;
    }
    match err {
        ToolError::NetworkTimeout => true,
        ToolError::NodeUnreachable => matches!(
            transport,
            Some(
                Transport::ConnectReset
                    | Transport::StreamCut
                    | Transport::StreamEndedWithoutFinish
                    | Transport::BodyCut
            )
        ),
        ToolError::CapacityExceeded
        | ToolError::RateLimited
        | ToolError::InvalidInput
        | ToolError::SchemaValidationFailed
        | ToolError::ToolNotFound
        | ToolError::MissingCapability
        | ToolError::NoNodeAvailable
        | ToolError::Unknown => false,
    }
}

/// Whether a call may be run again after it may have executed: the tool is
/// deterministic, the call carries an idempotency key the node sees, or the
/// step explicitly allows it.
pub fn safe_to_rerun(deterministic: bool, idempotency_key: bool, retry_unsafe: bool) -> bool {
    deterministic || idempotency_key || retry_unsafe
}

/// A step's retry policy, as written in a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StepRetry {
    pub max_attempts: u32,
    pub backoff_ms: u64,
    pub backoff_multiplier: f64,
    pub max_backoff_ms: u64,
    /// When not empty, only these errors are retried.
    pub retryable_errors: Vec<ToolError>,
    /// These errors stop the step at once: no retry, no failover.
    pub non_retryable_errors: Vec<ToolError>,
    /// Seed 003's `retry.failover`: `false` keeps every attempt on the node
    /// chosen first, `true` lets a failed attempt move to another node
    /// offering the tool. Unset: the target decides ([`failover_allowed`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failover: Option<bool>,
}

/// Whether a failed attempt may move to another node: `retry.failover` when
/// the step sets it, else the target's own `failover` (a `failover_chain`
/// always moves on).
pub fn failover_allowed(retry_failover: Option<bool>, target_failover: bool) -> bool {
    retry_failover.unwrap_or(target_failover)
}

impl Default for StepRetry {
    fn default() -> Self {
        Self {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            backoff_ms: DEFAULT_BACKOFF_MS,
            backoff_multiplier: DEFAULT_BACKOFF_MULTIPLIER,
            max_backoff_ms: DEFAULT_MAX_BACKOFF_MS,
            retryable_errors: Vec::new(),
            non_retryable_errors: Vec::new(),
            failover: None,
        }
    }
}

impl StepRetry {
    /// Problems with the policy, for a 400 naming the field.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.max_attempts == 0 {
            out.push("retry.max_attempts must be at least 1".to_owned());
        }
        if !(self.backoff_multiplier.is_finite() && self.backoff_multiplier >= 1.0) {
            out.push("retry.backoff_multiplier must be a number >= 1".to_owned());
        }
        if self.max_backoff_ms < self.backoff_ms {
            out.push("retry.max_backoff_ms must be >= retry.backoff_ms".to_owned());
        }
        out
    }

    /// Whether this policy retries `err` (on the same node).
    pub fn retries(&self, err: ToolError) -> bool {
        if self.non_retryable_errors.contains(&err) {
            return false;
        }
        if self.retryable_errors.is_empty() {
            err.retryable_by_default()
        } else {
            self.retryable_errors.contains(&err)
        }
    }
}

/// The wait before attempt `attempt` (1-based) of a step on the same node:
/// none before the first, then `backoff_ms · multiplier^(attempt−2)`, capped
/// by `max_backoff_ms`.
pub fn backoff(policy: &StepRetry, attempt: u32) -> Duration {
    if attempt <= 1 {
        return Duration::ZERO;
    }
    let exp = i32::try_from(attempt - 2).unwrap_or(i32::MAX);
    let ms = (policy.backoff_ms as f64) * policy.backoff_multiplier.max(1.0).powi(exp);
    let capped = if ms.is_finite() {
        ms.min(policy.max_backoff_ms as f64)
    } else {
        policy.max_backoff_ms as f64
    };
    Duration::from_millis(capped.max(0.0) as u64)
}

/// What the step loop knows when an attempt has just failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailedAttempt {
    pub error: ToolError,
    /// The node's `Retry-After`, if it gave one.
    pub retry_after: Option<Duration>,
    /// Attempts made in this step, the failed one included.
    pub attempts_made: u32,
    /// The call may have run on the node ([`maybe_executed`]).
    pub maybe_executed: bool,
    /// Running it again is safe ([`safe_to_rerun`]).
    pub safe_to_rerun: bool,
    /// The target allows moving to another node and one is left untried.
    pub other_node_left: bool,
}

/// Why a step stopped without a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The error is in `non_retryable_errors`, or not retried by default and
    /// no other node could help.
    NonRetryable,
    /// `max_attempts` were made.
    AttemptsExhausted,
    /// The call may have run and re-running it is not safe.
    MaybeExecuted,
}

/// The answer of [`decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepDecision {
    /// Try the same node again after `wait`.
    RetrySameNode { wait: Duration },
    /// Move to the next node at once.
    NextNode,
    /// Stop the step.
    Stop(StopReason),
}

/// Retry here, move on, or stop — after one failed attempt of a step.
pub fn decide(policy: &StepRetry, f: &FailedAttempt) -> StepDecision {
    if policy.non_retryable_errors.contains(&f.error) {
        return StepDecision::Stop(StopReason::NonRetryable);
    }
    if f.maybe_executed && !f.safe_to_rerun {
        return StepDecision::Stop(StopReason::MaybeExecuted);
    }
    if f.attempts_made >= policy.max_attempts {
        return StepDecision::Stop(StopReason::AttemptsExhausted);
    }
    if !f.error.other_node_may_succeed() {
        return StepDecision::Stop(StopReason::NonRetryable);
    }
    let retry_here = policy.retries(f.error);
    // A node lacking the tool, the permission or a valid output says nothing
    // about the others: move on even though it is not retried here.
    if f.other_node_left && (retry_here || !f.error.retryable_by_default()) {
        return StepDecision::NextNode;
    }
    if retry_here {
        let wait = backoff(policy, f.attempts_made + 1).max(f.retry_after.unwrap_or_default());
        return StepDecision::RetrySameNode { wait };
    }
    StepDecision::Stop(StopReason::NonRetryable)
}

/// Why a node a step would have tried first was passed over (seed 003's
/// evidence of a skipped primary), or `None` when it was usable: `node` is
/// the node's own health, `for_step` the same with the step's own breaker
/// applied (an open step breaker reads `ejected` there only), `offers`
/// whether the node listed the tool at its last check.
pub fn skip_reason(node: NodeHealth, for_step: NodeHealth, offers: bool) -> Option<&'static str> {
    match (for_step, node) {
        (NodeHealth::Offline, _) => Some("offline"),
        _ if !offers => Some("tool_not_found"),
        (NodeHealth::Ejected, NodeHealth::Ejected) => Some("ejected"),
        (NodeHealth::Ejected, NodeHealth::Healthy | NodeHealth::Degraded | NodeHealth::Offline) => {
            Some("open")
        }
        (NodeHealth::Healthy | NodeHealth::Degraded, _) => None,
    }
}

/// A node's health, as shown by `GET /nodes` and used for selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeHealth {
    /// In rotation, no recent failure.
    Healthy,
    /// In rotation, with recent failures.
    Degraded,
    /// Skipped by other jobs (cooldown or breaker open); tried only when
    /// nothing else is left.
    Ejected,
    /// Its lease lapsed, or it is unreachable at the health check: not used.
    Offline,
}

impl NodeHealth {
    /// A low-cardinality label.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeHealth::Healthy => "healthy",
            NodeHealth::Degraded => "degraded",
            NodeHealth::Ejected => "ejected",
            NodeHealth::Offline => "offline",
        }
    }

    /// Whether the node takes calls in normal rotation.
    pub fn in_rotation(self) -> bool {
        match self {
            NodeHealth::Healthy | NodeHealth::Degraded => true,
            NodeHealth::Ejected | NodeHealth::Offline => false,
        }
    }
}

/// Combines what is known of a node into its health: offline wins, then an
/// ejection (cooldown or open breaker), then recent failures.
pub fn node_health(online: bool, ejected: bool, recent_failure: bool) -> NodeHealth {
    match (online, ejected, recent_failure) {
        (false, _, _) => NodeHealth::Offline,
        (true, true, _) => NodeHealth::Ejected,
        (true, false, true) => NodeHealth::Degraded,
        (true, false, false) => NodeHealth::Healthy,
    }
}

/// Whether a registered node's lease has lapsed at `now_ms`.
pub fn lease_expired(expires_ms: Option<u64>, now_ms: u64) -> bool {
    expires_ms.is_some_and(|e| now_ms >= e)
}

/// What selection needs to know of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub name: &'a str,
    pub health: NodeHealth,
    /// The node lists the tool.
    pub offers: bool,
    /// Calls in flight on it now.
    pub in_flight: u32,
}

fn rank(h: NodeHealth) -> u8 {
    match h {
        NodeHealth::Healthy => 0,
        NodeHealth::Degraded => 1,
        NodeHealth::Ejected => 2,
        NodeHealth::Offline => 3,
    }
}

/// Target `local`: the nodes offering the tool, best first — healthy, then
/// degraded, then ejected (fail open: an ejected node is still tried when
/// nothing better is left); fewer calls in flight first within a rank, then
/// config order. Offline nodes are never tried. Returns indices into `nodes`.
pub fn order_local(nodes: &[Candidate<'_>]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].offers && nodes[i].health != NodeHealth::Offline)
        .collect();
    idx.sort_by_key(|&i| (rank(nodes[i].health), nodes[i].in_flight, i));
    idx
}

/// Target `failover_chain`: the named nodes in the chain's order; an ejected
/// one moves behind the others (still tried last), offline or unknown ones
/// are left out. Returns indices into `nodes`.
pub fn order_chain(chain: &[String], nodes: &[Candidate<'_>]) -> Vec<usize> {
    let mut idx: Vec<usize> = chain
        .iter()
        .filter_map(|name| nodes.iter().position(|n| n.name == name))
        .filter(|&i| nodes[i].offers && nodes[i].health != NodeHealth::Offline)
        .collect();
    idx.dedup();
    // Stable: chain order is kept within "in rotation" and "ejected".
    idx.sort_by_key(|&i| u8::from(!nodes[i].health.in_rotation()));
    idx
}

/// Why `load_balanced` cannot run a step now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotEnoughNodes {
    pub healthy: usize,
    pub min_nodes: usize,
}

/// Target `load_balanced`: the nodes in rotation offering the tool, the one
/// to call first chosen by fewest calls in flight and then round-robin
/// (`turn` is a counter the caller increments per call), the others after
/// it in rotation order. Fewer than `min_nodes` in rotation is an error (the
/// caller fails fast or queues, per `offline_behavior`).
pub fn pick_balanced(
    nodes: &[Candidate<'_>],
    min_nodes: usize,
    turn: u64,
) -> Result<Vec<usize>, NotEnoughNodes> {
    let ready: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].offers && nodes[i].health.in_rotation())
        .collect();
    if ready.is_empty() || ready.len() < min_nodes {
        return Err(NotEnoughNodes {
            healthy: ready.len(),
            min_nodes,
        });
    }
    let n = ready.len();
    let start = (turn % n as u64) as usize;
    let least = ready.iter().map(|&i| nodes[i].in_flight).min().unwrap_or(0);
    // Rotate from the round-robin start, then prefer the least loaded.
    let mut order: Vec<usize> = (0..n).map(|k| ready[(start + k) % n]).collect();
    order.sort_by_key(|&i| u8::from(nodes[i].in_flight > least));
    Ok(order)
}

/// What the background queue does with one queued job at `now_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueAction {
    /// Past its TTL: drop it and emit `job.expired`.
    Expire,
    /// Its next delivery is due: try now.
    Deliver,
    /// Not yet; check again at this time.
    WaitUntil(u64),
}

/// The queue's decision for a job queued at `queued_ms` with `ttl_seconds`,
/// whose next delivery is due at `next_attempt_ms`.
pub fn queue_action(
    queued_ms: u64,
    ttl_seconds: u64,
    next_attempt_ms: u64,
    now_ms: u64,
) -> QueueAction {
    let expires = queued_ms.saturating_add(ttl_seconds.saturating_mul(1000));
    if now_ms >= expires {
        QueueAction::Expire
    } else if now_ms >= next_attempt_ms {
        QueueAction::Deliver
    } else {
        QueueAction::WaitUntil(next_attempt_ms.min(expires))
    }
}

/// When a queued job is tried next after a delivery that found no node.
pub fn next_delivery_ms(now_ms: u64, retry_interval_seconds: u64) -> u64 {
    now_ms.saturating_add(retry_interval_seconds.max(1).saturating_mul(1000))
}

/// The status of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Running,
    Queued,
    Completed,
    Failed,
    Expired,
    Cancelled,
}

impl JobStatus {
    /// Every status.
    pub const ALL: [JobStatus; 6] = [
        JobStatus::Running,
        JobStatus::Queued,
        JobStatus::Completed,
        JobStatus::Failed,
        JobStatus::Expired,
        JobStatus::Cancelled,
    ];

    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Running => "running",
            JobStatus::Queued => "queued",
            JobStatus::Completed => "completed",
            JobStatus::Failed => "failed",
            JobStatus::Expired => "expired",
            JobStatus::Cancelled => "cancelled",
        }
    }

    /// Parses [`JobStatus::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|j| j.as_str() == s)
    }

    /// Whether nothing more will happen to the job.
    pub fn is_final(self) -> bool {
        match self {
            JobStatus::Completed
            | JobStatus::Failed
            | JobStatus::Expired
            | JobStatus::Cancelled => true,
            JobStatus::Running | JobStatus::Queued => false,
        }
    }
}

/// The MCP front's name for a node's tool (the documented prefix rule):
/// `tools/list` is the union of the nodes' tools by name, and a tool keeps
/// its plain name while every node listing it agrees on its input schema
/// (they are replicas of one tool). When nodes list the same name with
/// different input schemas (`clash`), each node's variant is exposed as
/// `{node}__{tool}` and a call to that name goes to that node only.
pub fn front_name(node: &str, tool: &str, clash: bool) -> String {
    if clash {
        format!("{node}__{tool}")
    } else {
        tool.to_owned()
    }
}

/// Splits a front name made by [`front_name`] back into (node, tool); a
/// plain name gives `(None, name)`.
pub fn split_front_name<'a>(name: &'a str, known_nodes: &[&str]) -> (Option<&'a str>, &'a str) {
    if let Some((node, tool)) = name.split_once("__")
        && known_nodes.contains(&node)
        && !tool.is_empty()
    {
        return (Some(node), tool);
    }
    (None, name)
}

/// The time one attempt may take out of what is left of the step's
/// timeout: half when another node could still take over (so a frozen node
/// costs at most half the step and the next node gets the rest), all of it
/// for the last candidate.
pub fn attempt_budget(remaining: Duration, candidates_left: usize) -> Duration {
    if candidates_left > 1 {
        remaining / 2
    } else {
        remaining
    }
}

/// Extra time, after the step timeouts a job still had, before a job found
/// `running` in the store counts as interrupted (its process died): enough
/// for a health check and store writes of a live peer sharing the store.
pub const INTERRUPTED_GRACE: Duration = Duration::from_secs(30);

/// What becomes of a job found `running` in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupted {
    /// Its step timeouts (plus the grace) have not passed since its last
    /// write: a live process may still be running it. Left alone.
    StillRunning,
    /// The step that was running is safe to re-run: queued again.
    Requeue,
    /// The step may have executed and is not safe to re-run: failed, with
    /// `maybe_executed`. Never silently re-run.
    Fail,
}

/// Decides for a job left `running`: `updated_ms` is its last write,
/// `remaining_timeout_ms` the sum of the timeouts of the step that was
/// running and those after it, `safe` whether that step may run again
/// ([`safe_to_rerun`]).
pub fn interrupted_action(
    updated_ms: u64,
    remaining_timeout_ms: u64,
    grace: Duration,
    now_ms: u64,
    safe: bool,
) -> Interrupted {
    let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
    let dead_after = updated_ms
        .saturating_add(remaining_timeout_ms)
        .saturating_add(grace_ms);
    if now_ms < dead_after {
        Interrupted::StillRunning
    } else if safe {
        Interrupted::Requeue
    } else {
        Interrupted::Fail
    }
}

/// A node's breaker: ejected after 3 consecutive node faults (or 5 within a
/// minute), one trial after 10 s. Which failures count is decided by
/// [`ToolError::node_fault`] before recording, so every class counts here.
pub fn node_breaker_config() -> crate::config::BreakerConfig {
    crate::config::BreakerConfig {
        consecutive_failures: Some(3),
        counted_classes: ErrorClass::ALL.to_vec(),
        ..crate::config::BreakerConfig::default()
    }
}

/// [`node_breaker_config`] with a node's own numbers over it:
/// `failure_threshold` → consecutive faults that trip, `timeout_seconds` →
/// `half_open_after`, `half_open_requests` → trials while half-open.
pub fn node_breaker_config_for(
    own: &crate::config::NodeBreakerConfig,
) -> crate::config::BreakerConfig {
    let mut b = node_breaker_config();
    if let Some(n) = own.failure_threshold {
        b.consecutive_failures = Some(n);
    }
    if let Some(s) = own.timeout_seconds {
        b.half_open_after = std::time::Duration::from_secs(s);
    }
    if let Some(n) = own.half_open_requests {
        b.half_open_requests = n;
    }
    b
}

/// Replaces references in a step's arguments: a string that is exactly
/// `${steps.ID.result}` or `${steps.ID.result.a.b}` becomes that earlier
/// step's JSON value, and `${input}` or `${input.a.b}` the job's `input` (a
/// workflow's parameters); an array index is a number segment. Anything
/// else is left as written. A reference to a step that has not run, or to a
/// path that does not exist, is an error naming it.
pub fn resolve_refs(
    args: &serde_json::Value,
    input: &serde_json::Value,
    results: &dyn Fn(&str) -> Option<serde_json::Value>,
) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    match args {
        Value::String(s) => {
            let Some(inner) = s.strip_prefix("${").and_then(|r| r.strip_suffix('}')) else {
                return Ok(args.clone());
            };
            let mut parts = inner.split('.');
            let mut v = match (parts.next(), parts.next()) {
                (Some("input"), first) => {
                    let mut v = input.clone();
                    for seg in first.into_iter().chain(parts.by_ref()) {
                        v = descend(&v, seg)
                            .ok_or_else(|| format!("`{s}`: no `{seg}` in the job's input"))?;
                    }
                    return Ok(v);
                }
                (Some("steps"), Some(id)) if parts.next() == Some("result") => {
                    results(id).ok_or_else(|| format!("`{s}`: step `{id}` has no result"))?
                }
                _ => return Ok(args.clone()),
            };
            for seg in parts {
                v = descend(&v, seg).ok_or_else(|| format!("`{s}`: no `{seg}` in the result"))?;
            }
            Ok(v)
        }
        Value::Array(a) => a
            .iter()
            .map(|x| resolve_refs(x, input, results))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Object(m) => {
            let mut out = serde_json::Map::new();
            for (k, x) in m {
                out.insert(k.clone(), resolve_refs(x, input, results)?);
            }
            Ok(Value::Object(out))
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(args.clone()),
    }
}

/// One step down a JSON value: an object's key or an array's index.
fn descend(v: &serde_json::Value, seg: &str) -> Option<serde_json::Value> {
    use serde_json::Value;
    match v {
        Value::Object(m) => m.get(seg).cloned(),
        Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i).cloned()),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => None,
    }
}

/// The tool name of a seed-003 `tool_id` (`tool:unit_convert` →
/// `unit_convert`); a plain name is itself.
pub fn tool_of_id(tool_id: &str) -> &str {
    tool_id.strip_prefix("tool:").unwrap_or(tool_id)
}

/// Checks a tool's output against its output schema: the subset of JSON
/// Schema tools use in practice — `type` (one or a list), `required`,
/// `properties`, `items`, `enum`. Other keywords are not checked. Returns
/// the first problem, with its JSON path.
pub fn validate_output(
    schema: &serde_json::Value,
    value: &serde_json::Value,
) -> Result<(), String> {
    check(schema, value, "$", 0)
}

fn check(
    schema: &serde_json::Value,
    v: &serde_json::Value,
    path: &str,
    depth: usize,
) -> Result<(), String> {
    use serde_json::Value;
    if depth > 32 {
        return Ok(());
    }
    let Value::Object(s) = schema else {
        return Ok(());
    };
    let type_ok = |t: &str| match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => true,
    };
    match s.get("type") {
        Some(Value::String(t)) if !type_ok(t) => return Err(format!("{path}: expected {t}")),
        Some(Value::Array(ts)) if !ts.iter().any(|t| t.as_str().is_none_or(type_ok)) => {
            return Err(format!(
                "{path}: type not among {}",
                Value::Array(ts.clone())
            ));
        }
        Some(_) | None => {}
    }
    if let Some(Value::Array(allowed)) = s.get("enum")
        && !allowed.contains(v)
    {
        return Err(format!("{path}: not one of the allowed values"));
    }
    if let Value::Object(obj) = v {
        if let Some(Value::Array(req)) = s.get("required") {
            for r in req.iter().filter_map(Value::as_str) {
                if !obj.contains_key(r) {
                    return Err(format!("{path}: `{r}` is required"));
                }
            }
        }
        if let Some(Value::Object(props)) = s.get("properties") {
            for (k, sub) in props {
                if let Some(x) = obj.get(k) {
                    check(sub, x, &format!("{path}.{k}"), depth + 1)?;
                }
            }
        }
    }
    if let (Value::Array(items), Some(sub)) = (v, s.get("items")) {
        for (i, x) in items.iter().enumerate() {
            check(sub, x, &format!("{path}[{i}]"), depth + 1)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
