//! The job runner: steps in order, each a tool call routed to a node by its
//! target, retried and failed over as `hale_core::tools::decide` says.
//!
//! One step, top to bottom: resolve references to earlier results → order
//! the candidate nodes for the target → call the first (its attempt gets
//! half the step's remaining time when another node could take over, so a
//! frozen node costs at most half) → on failure classify, record on the
//! node's breaker, and ask the core whether to retry here (after backoff),
//! move to the next node at once, or stop. Every attempt is a row of the
//! job's timeline and an entry of its `execution_path`.

use crate::Tools;
use crate::failure::CallFailure;
use crate::model::{Attempt, Job, OfflineBehavior, StepOutcome, StepRequest, Target};
use crate::nodes::Node;
use hale_core::event::EventKind;
use hale_core::tools::{
    self as rules, Candidate, FailedAttempt, NodeHealth, StepDecision, StopReason, ToolError,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How a run of a job's steps ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// Every step succeeded.
    Completed,
    /// A step failed for good.
    Failed,
    /// A step found no node and its `offline_behavior` queues.
    Queue {
        ttl_seconds: u64,
        retry_interval_seconds: u64,
    },
}

/// The order in which nodes are tried for a step (indices into `nodes`).
fn order(
    tools: &Tools,
    target: &Target,
    nodes: &[Candidate<'_>],
    first: bool,
) -> Result<Vec<usize>, String> {
    match target {
        Target::Local { .. } => Ok(rules::order_local(nodes)),
        Target::FailoverChain { nodes: chain } => Ok(rules::order_chain(chain, nodes)),
        Target::LoadBalanced { min_nodes, .. } => {
            let turn = tools.rr.fetch_add(1, Ordering::Relaxed);
            let min = if first { *min_nodes } else { 1 };
            rules::pick_balanced(nodes, min, turn).map_err(|e| {
                format!(
                    "load_balanced needs {} healthy node(s) offering the tool; {} available",
                    e.min_nodes, e.healthy
                )
            })
        }
    }
}

/// Whether a failed attempt may move to another node: the step's
/// `retry.failover` when set, else the target's.
fn failover_allowed(step: &StepRequest) -> bool {
    let target = match &step.target {
        Target::Local { failover } | Target::LoadBalanced { failover, .. } => *failover,
        Target::FailoverChain { .. } => true,
    };
    rules::failover_allowed(step.retry.failover, target)
}

/// A node's health for this step: its own, or `ejected` while the step's
/// own breaker (`breaker`) is open for it.
fn step_health(
    tools: &Tools,
    step: &StepRequest,
    n: &Node,
    now: Instant,
    now_ms: u64,
) -> NodeHealth {
    let h = n.health(now, now_ms);
    match &step.breaker {
        Some(b)
            if h.in_rotation() && tools.step_breakers.open(n.name(), &step.tool_name, b, now) =>
        {
            NodeHealth::Ejected
        }
        Some(_) | None => h,
    }
}

/// The nodes the target would try before `chosen` if every node were well
/// and which were passed over, each with why (`offline`, `ejected`, `open`
/// — the step's own breaker —, `unknown`, `tool_not_found`): the primary of
/// a `failover_chain` (its first nodes), or of `local` (the nodes offering
/// the tool, in config order; a node offers what it listed at its last
/// successful check, so one that never answered is nobody's primary). `load_balanced` has no primary: a pick that
/// avoids a sick node is its normal spread. `chosen` None: every node of
/// the target was passed over.
fn skipped_before(
    tools: &Tools,
    step: &StepRequest,
    chosen: Option<&str>,
) -> Vec<(String, &'static str)> {
    let now = Instant::now();
    let now_ms = crate::wall_ms();
    let why = |n: &Node| {
        rules::skip_reason(
            n.health(now, now_ms),
            step_health(tools, step, n, now, now_ms),
            n.offers(&step.tool_name),
        )
    };
    let nominal: Vec<(String, Option<&'static str>)> = match &step.target {
        Target::FailoverChain { nodes } => nodes
            .iter()
            .map(|name| match tools.registry.get(name) {
                Some(n) => (name.clone(), why(&n)),
                None => (name.clone(), Some("unknown")),
            })
            .collect(),
        Target::Local { .. } => tools
            .registry
            .snapshot()
            .iter()
            .filter(|n| n.offers(&step.tool_name))
            .map(|n| (n.name().to_owned(), why(n)))
            .collect(),
        Target::LoadBalanced { .. } => Vec::new(),
    };
    let mut out = Vec::new();
    for (name, reason) in nominal {
        if Some(name.as_str()) == chosen {
            break;
        }
        if let Some(r) = reason
            && !out.iter().any(|(n, _)| n == &name)
        {
            out.push((name, r));
        }
    }
    out
}

/// The candidates not yet tried, best first.
fn candidates(
    tools: &Tools,
    step: &StepRequest,
    tried: &[String],
    first: bool,
) -> Result<Vec<Arc<Node>>, String> {
    let now = Instant::now();
    let now_ms = crate::wall_ms();
    let all: Vec<Arc<Node>> = tools
        .registry
        .snapshot()
        .into_iter()
        .filter(|n| !tried.iter().any(|t| t == n.name()))
        .collect();
    let view: Vec<Candidate<'_>> = all
        .iter()
        .map(|n| Candidate {
            name: n.name(),
            health: step_health(tools, step, n, now, now_ms),
            offers: n.offers(&step.tool_name),
            in_flight: n.in_flight(),
        })
        .collect();
    let idx = order(tools, &step.target, &view, first)?;
    Ok(idx.into_iter().map(|i| all[i].clone()).collect())
}

/// Runs one call on `node` within `timeout`.
async fn call(
    tools: &Tools,
    node: &Arc<Node>,
    step: &StepRequest,
    args: &Value,
    timeout: Duration,
    job_id: &str,
) -> Result<Value, CallFailure> {
    let _guard = node.start_call();
    let fut = tools.call_node(
        node,
        &step.tool_name,
        args,
        timeout,
        step.idempotency_key.as_deref(),
        job_id,
    );
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(CallFailure::timeout(timeout)),
    }
}

/// Where a step is between its attempts.
struct Progress {
    /// The nodes failed over from.
    tried: Vec<String>,
    attempts: u32,
    failed_over: bool,
    /// The target's first choice(s) passed over before the first attempt.
    skipped: Vec<(String, &'static str)>,
}

/// Runs one step; appends its attempts to the job's timeline and path.
pub async fn run_step(
    tools: &Tools,
    job: &mut Job,
    step: &StepRequest,
    args: Value,
) -> StepOutcome {
    let deadline = Instant::now() + Duration::from_millis(step.timeout_ms);
    let mut p = Progress {
        tried: Vec::new(),
        attempts: 0,
        failed_over: false,
        skipped: Vec::new(),
    };
    // (`load_balanced` has no primary; asking it would also turn its
    // round-robin an extra time.)
    if !matches!(step.target, Target::LoadBalanced { .. }) {
        p.skipped = note_skipped(tools, job, step, &p.tried);
    }
    let mut same: Option<Arc<Node>> = None;
    loop {
        let (node, left_after) = match pick_node(job, tools, step, &p, same.take()) {
            Ok(picked) => picked,
            Err(outcome) => return outcome,
        };
        let now = Instant::now();
        let remaining = deadline.saturating_duration_since(now);
        if remaining.is_zero() {
            return failed(
                step,
                p.attempts,
                ToolError::NetworkTimeout,
                format!("step timeout of {} ms passed", step.timeout_ms),
                false,
            );
        }
        let other_left = failover_allowed(step) && left_after > 0;
        let budget = rules::attempt_budget(remaining, if other_left { 2 } else { 1 });
        p.attempts += 1;
        let started_ms = crate::wall_ms();
        let (outcome, latency) = attempt(tools, step, &node, &args, budget, now, &job.job_id).await;
        let f = match outcome {
            Ok(served) => {
                return succeeded(tools, job, step, &node, &p, (started_ms, latency), served);
            }
            Err(f) => f,
        };
        let error = record_failure(tools, job, step, &node, &f, (started_ms, latency));
        let (decision, maybe) = decide(job, step, &node, (error, &f), p.attempts, other_left);
        match decision {
            StepDecision::RetrySameNode { wait } => {
                let left = deadline.saturating_duration_since(Instant::now());
                if wait >= left {
                    tools
                        .metrics
                        .step(&step.tool_name, p.failed_over, true, false);
                    return failed(
                        step,
                        p.attempts,
                        error,
                        format!(
                            "{}; the step's timeout leaves no time for a retry",
                            f.message
                        ),
                        maybe,
                    );
                }
                tokio::time::sleep(wait).await;
                same = Some(node);
            }
            StepDecision::NextNode => fail_over(tools, job, step, &mut p, &node, (error, &f)),
            StepDecision::Stop(reason) => {
                tools
                    .metrics
                    .step(&step.tool_name, p.failed_over, true, false);
                return stopped(step, p.attempts, (error, &f), maybe, reason);
            }
        }
    }
}

/// The core's decision after a failed attempt (`rules::decide`), and
/// whether the call may have run on the node.
fn decide(
    job: &Job,
    step: &StepRequest,
    node: &Node,
    (error, f): (ToolError, &CallFailure),
    attempts: u32,
    other_left: bool,
) -> (StepDecision, bool) {
    let maybe = rules::maybe_executed(error, f.obs.transport, f.sent);
    let safe = rules::safe_to_rerun(
        node.deterministic(&step.tool_name) || job.request.declares_deterministic(&step.tool_name),
        step.idempotency_key.is_some(),
        step.retry_unsafe,
    );
    let decision = rules::decide(
        &step.retry,
        &FailedAttempt {
            error,
            retry_after: f.retry_after,
            attempts_made: attempts,
            maybe_executed: maybe,
            safe_to_rerun: safe,
            other_node_left: other_left,
        },
    );
    (decision, maybe)
}

/// A step that failed for good, after `attempts`.
fn failed(
    step: &StepRequest,
    attempts: u32,
    error: ToolError,
    message: String,
    maybe: bool,
) -> StepOutcome {
    StepOutcome {
        step_id: step.step_id.clone(),
        ok: false,
        verified: false,
        result: Value::Null,
        node: None,
        attempts,
        maybe_executed: maybe,
        error: Some(error),
        message: Some(message),
    }
}

/// The target's first choice(s) passed over before the first attempt, each
/// a `skipped` row of the timeline and an entry of the path.
fn note_skipped(
    tools: &Tools,
    job: &mut Job,
    step: &StepRequest,
    tried: &[String],
) -> Vec<(String, &'static str)> {
    let chosen = candidates(tools, step, tried, true)
        .ok()
        .and_then(|c| c.first().map(|n| n.name().to_owned()));
    let skipped = skipped_before(tools, step, chosen.as_deref());
    for (name, why) in &skipped {
        job.timeline.push(Attempt {
            step: step.step_id.clone(),
            node: name.clone(),
            timestamp: crate::wall_ms(),
            duration_ms: 0,
            status: "skipped".into(),
            error: None,
            message: Some(format!("skipped: {why}")),
        });
        job.execution_path.push(format!("{name} (skipped: {why})"));
    }
    skipped
}

/// The node of the next attempt (`same` again after a wait, else the first
/// candidate) and how many others are left; `Err` when none is.
fn pick_node(
    job: &Job,
    tools: &Tools,
    step: &StepRequest,
    p: &Progress,
    same: Option<Arc<Node>>,
) -> Result<(Arc<Node>, usize), StepOutcome> {
    if let Some(n) = same {
        let left = candidates(tools, step, &p.tried, false)
            .map(|c| c.iter().filter(|x| x.name() != n.name()).count())
            .unwrap_or(0);
        return Ok((n, left));
    }
    match candidates(tools, step, &p.tried, p.attempts == 0) {
        Ok(c) if !c.is_empty() => {
            let left = c.len() - 1;
            Ok((c[0].clone(), left))
        }
        Ok(_) => {
            let msg = if p.attempts == 0 {
                format!("no node offering `{}` is available", step.tool_name)
            } else {
                format!("no other node offering `{}` is left", step.tool_name)
            };
            let error = if p.attempts == 0 {
                ToolError::NoNodeAvailable
            } else {
                last_error(job, &step.step_id).unwrap_or(ToolError::NoNodeAvailable)
            };
            Err(failed(step, p.attempts, error, msg, false))
        }
        Err(msg) => Err(failed(
            step,
            p.attempts,
            ToolError::NoNodeAvailable,
            msg,
            false,
        )),
    }
}

/// One call on `node` within `budget`, admitted by the node and the step's
/// breaker, its output checked against the tool's schema when it has one
/// (`true`: verified); the outcome and its latency.
async fn attempt(
    tools: &Tools,
    step: &StepRequest,
    node: &Arc<Node>,
    args: &Value,
    budget: Duration,
    now: Instant,
    job_id: &str,
) -> (Result<(Value, bool), CallFailure>, Duration) {
    let _ = node.admit(now);
    if let Some(b) = &step.breaker {
        tools
            .step_breakers
            .admit(node.name(), &step.tool_name, b, now);
    }
    let outcome = call(tools, node, step, args, budget, job_id).await;
    let latency = now.elapsed();
    let outcome =
        outcome.and_then(
            |v| match node.tool(&step.tool_name).and_then(|t| t.output_schema) {
                Some(schema) => rules::validate_output(&schema, &v)
                    .map(|()| (v, true))
                    .map_err(|p| {
                        CallFailure::invalid_output(format!("output breaks the tool's schema: {p}"))
                    }),
                None => Ok((v, false)),
            },
        );
    (outcome, latency)
}

/// One call's outcome recorded on the node's health and on the step's
/// breaker, if it has one: `None` a success, else the failure's class and
/// the node's `Retry-After`.
fn record_call(
    tools: &Tools,
    step: &StepRequest,
    node: &Arc<Node>,
    latency: Duration,
    failure: Option<(ToolError, Option<Duration>)>,
) {
    node.record(Instant::now(), crate::wall_ms(), latency, failure);
    if let Some(b) = &step.breaker {
        tools.step_breakers.record(
            node.name(),
            &step.tool_name,
            b,
            Instant::now(),
            latency,
            failure.map(|(error, _)| error),
        );
    }
}

/// A successful attempt: recorded on the node and the step's breaker, a
/// row of the timeline, the job degraded when it was not the first choice.
fn succeeded(
    tools: &Tools,
    job: &mut Job,
    step: &StepRequest,
    node: &Arc<Node>,
    p: &Progress,
    (started_ms, latency): (u64, Duration),
    (result, verified): (Value, bool),
) -> StepOutcome {
    let attempts = p.attempts;
    record_call(tools, step, node, latency, None);
    job.timeline.push(Attempt {
        step: step.step_id.clone(),
        node: node.name().to_owned(),
        timestamp: started_ms,
        duration_ms: latency.as_millis() as u64,
        status: "success".into(),
        error: None,
        message: None,
    });
    job.execution_path
        .push(format!("{} (success)", node.name()));
    if let Some((primary, why)) = p.skipped.first() {
        job.degrade(format!(
            "Primary node {primary} unavailable ({why}), failed over to {} (step {})",
            node.name(),
            step.step_id
        ));
    }
    if attempts > 1 {
        let first_fail = job
            .timeline
            .iter()
            .rev()
            .find(|a| a.step == step.step_id && a.status != "success")
            .map(|a| {
                format!(
                    "{} ({})",
                    a.node,
                    a.error.map(ToolError::outcome).unwrap_or("error")
                )
            })
            .unwrap_or_default();
        job.degrade(format!(
            "step {}: {} failed; served by {} after {attempts} attempts",
            step.step_id,
            first_fail,
            node.name()
        ));
    }
    tools.metrics.step(
        &step.tool_name,
        p.failed_over || !p.skipped.is_empty(),
        attempts > 1 || !p.skipped.is_empty(),
        true,
    );
    StepOutcome {
        step_id: step.step_id.clone(),
        ok: true,
        verified,
        result,
        node: Some(node.name().to_owned()),
        attempts,
        maybe_executed: false,
        error: None,
        message: None,
    }
}

/// A failed attempt, classified (`rules::classify`): recorded on the node
/// and the step's breaker, a row of the timeline and an entry of the path.
fn record_failure(
    tools: &Tools,
    job: &mut Job,
    step: &StepRequest,
    node: &Arc<Node>,
    f: &CallFailure,
    (started_ms, latency): (u64, Duration),
) -> ToolError {
    let error = rules::classify(&f.obs);
    record_call(tools, step, node, latency, Some((error, f.retry_after)));
    job.timeline.push(Attempt {
        step: step.step_id.clone(),
        node: node.name().to_owned(),
        timestamp: started_ms,
        duration_ms: latency.as_millis() as u64,
        status: "error".into(),
        error: Some(error),
        message: Some(f.message.clone()),
    });
    job.execution_path
        .push(format!("{} ({})", node.name(), error.outcome()));
    error
}

/// Leaves `node` for the next one: counted, noted as `job.failed_over`.
fn fail_over(
    tools: &Tools,
    job: &mut Job,
    step: &StepRequest,
    p: &mut Progress,
    node: &Arc<Node>,
    (error, f): (ToolError, &CallFailure),
) {
    p.failed_over = true;
    tools.metrics.failover_from(node.name());
    job.note(
        EventKind::JobFailedOver,
        json!({
            "job_id": job.job_id, "step_id": step.step_id, "from": node.name(),
            "error": error, "message": f.message,
        }),
    );
    p.tried.push(node.name().to_owned());
}

/// The step's outcome when the core says stop, naming why.
fn stopped(
    step: &StepRequest,
    attempts: u32,
    (error, f): (ToolError, &CallFailure),
    maybe: bool,
    reason: StopReason,
) -> StepOutcome {
    let why = match reason {
        StopReason::NonRetryable => "not retryable",
        StopReason::AttemptsExhausted => "attempts exhausted",
        StopReason::MaybeExecuted => {
            "the call may have run on the node and the tool is not safe to re-run (retry_unsafe: false)"
        }
    };
    failed(
        step,
        attempts,
        error,
        format!("{} ({why})", f.message),
        maybe && reason == StopReason::MaybeExecuted,
    )
}

fn last_error(job: &Job, step: &str) -> Option<ToolError> {
    job.timeline
        .iter()
        .rev()
        .find(|a| a.step == step)
        .and_then(|a| a.error)
}

/// Runs the job's remaining steps (those without an outcome yet).
pub async fn run(tools: &Tools, job: &mut Job) -> RunEnd {
    let steps = job.request.steps.clone();
    for step in steps.iter().skip(job.steps.len()) {
        let lookup = |id: &str| {
            job.steps
                .iter()
                .find(|s| s.step_id == id && s.ok)
                .map(|s| s.result.clone())
        };
        let args = match rules::resolve_refs(&step.arguments, &job.request.input, &lookup) {
            Ok(a) => a,
            Err(msg) => {
                job.steps.push(StepOutcome {
                    step_id: step.step_id.clone(),
                    ok: false,
                    verified: false,
                    result: Value::Null,
                    node: None,
                    attempts: 0,
                    maybe_executed: false,
                    error: Some(ToolError::InvalidInput),
                    message: Some(msg.clone()),
                });
                job.error = Some(format!("step {}: {msg}", step.step_id));
                return RunEnd::Failed;
            }
        };
        let out = run_step(tools, job, step, args).await;
        if out.ok {
            job.result = out.result.clone();
            job.steps.push(out);
            if job.steps.len() < steps.len() {
                // Progress between steps: a restart knows which step was
                // running and never runs a finished one again.
                if let Err(e) = tools.write_progress(job).await {
                    tracing::warn!(job = job.job_id, error = %e, "storing a job's progress failed");
                }
            }
            continue;
        }
        let queueable = matches!(
            out.error,
            Some(ToolError::NoNodeAvailable | ToolError::NodeUnreachable)
        ) && !out.maybe_executed;
        if let (
            OfflineBehavior::Queue {
                ttl_seconds,
                retry_interval_seconds,
            },
            true,
        ) = (step.offline_behavior, queueable)
        {
            job.degrade(format!("step {}: no node available; queued", step.step_id));
            return RunEnd::Queue {
                ttl_seconds,
                retry_interval_seconds,
            };
        }
        job.note(
            EventKind::JobStepFailed,
            json!({
                "job_id": job.job_id, "step_id": step.step_id, "error": out.error,
                "message": out.message, "maybe_executed": out.maybe_executed,
            }),
        );
        job.maybe_executed |= out.maybe_executed;
        job.error = Some(format!(
            "step {}: {}",
            step.step_id,
            out.message.clone().unwrap_or_default()
        ));
        job.steps.push(out);
        return RunEnd::Failed;
    }
    RunEnd::Completed
}
