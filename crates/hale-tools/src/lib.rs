//! hale-tools: the same self-healing for tool calls that hale gives model
//! calls (DESIGN §7) — tool nodes (MCP over Streamable HTTP, or plain HTTP),
//! jobs routed over them with retries, failover, store-and-forward queueing,
//! idempotent `job_id`s and evidence, an audit log, and the HTTP API.
//!
//! Shape: the rules (classification, retry/failover decisions, selection,
//! queue expiry, leases) are in `hale_core::tools`; this crate holds the live
//! state and does the I/O:
//! - [`nodes`] — the registry, each node's breaker and capabilities, the HTTP
//!   client of plain nodes;
//! - [`mcp_client`] — MCP nodes through the official SDK, `rmcp`;
//! - [`runner`] — a job's steps, top to bottom;
//! - [`mcp_front`] — hale as an MCP server at `/mcp`;
//! - [`api`] — the axum handlers (`/jobs…`, `/nodes`), returned by
//!   [`Tools::admin_router`] for the gateway to merge behind its admin
//!   check; `/mcp` comes from [`Tools::mcp_router`], behind any valid key;
//! - [`Tools::spawn_background`] — the capability refresh (every 10 s, also
//!   the node health check) and the store-and-forward queue.
//!
//! A job's state lives in the store (`jobs` table) from submission on, so a
//! `job_id` submitted twice runs once and a queued job survives a restart;
//! a queued job is delivered by whoever wins the store's compare-and-set on
//! its status, so it runs exactly once.

pub mod api;
pub mod mcp_client;
pub mod mcp_front;
pub mod metrics;
pub mod model;
pub mod nodes;
pub mod runner;

use hale_core::clock::Clock;
use hale_core::config::Config;
use hale_core::event::{Event, EventKind};
use hale_core::tools::{self as rules, JobStatus, QueueAction};
use hale_store::{AuditEntry, JobRecord, Store, Write};
use model::{Job, JobRequest, QueueInfo};
use nodes::{CallFailure, Node, Registry};
use runner::RunEnd;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Timeout of one health check (capability listing).
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(3);
/// How often the queue looks for due or expired jobs.
pub const QUEUE_TICK: Duration = Duration::from_millis(500);
/// Queued jobs looked at per tick.
pub const QUEUE_BATCH: u32 = 100;
/// Jobs left `running` looked at per tick (oldest first).
pub const RUNNING_BATCH: u32 = 1000;
/// The reason a job interrupted by a restart carries.
pub const INTERRUPTED_REASON: &str = "interrupted by a restart";

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
    /// `guard.tool_caps`: calls of a tool allowed per agent and task on `/mcp`.
    pub tool_caps: std::collections::BTreeMap<String, u64>,
    /// Calls counted against `tool_caps`, per (agent, task, tool).
    cap_counts: std::sync::Mutex<std::collections::HashMap<(String, String, String), u64>>,
    /// [`rules::INTERRUPTED_GRACE`] in ms; tests shorten it.
    interrupted_grace_ms: AtomicU64,
}

/// Why a submission was refused.
#[derive(Debug)]
pub enum SubmitError {
    /// The request is malformed; every problem.
    Invalid(Vec<String>),
    /// The `job_id` exists with a different request.
    Reused(Box<Job>),
    Store(hale_store::StoreError),
}

/// What a submission returned.
#[derive(Debug)]
pub struct Submitted {
    pub job: Job,
    /// The `job_id` was seen before: nothing ran.
    pub replayed: bool,
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
            mcp_allowed_hosts: allowed_hosts(cfg.listen),
            tool_caps: cfg.guard.tool_caps.clone(),
            cap_counts: Default::default(),
            interrupted_grace_ms: AtomicU64::new(
                u64::try_from(rules::INTERRUPTED_GRACE.as_millis()).unwrap_or(u64::MAX),
            ),
        }))
    }

    /// Counts one call of `tool` for `agent`'s `task` against the tool's
    /// cap (`guard.tool_caps`, DESIGN §1 step 4). `Err(cap)`: the cap is
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

    /// Calls one tool on one node (no retry; the runner decides).
    pub async fn call_node(
        &self,
        node: &Arc<Node>,
        tool: &str,
        args: &Value,
        timeout: Duration,
        idempotency_key: Option<&str>,
        job_id: &str,
    ) -> Result<Value, CallFailure> {
        match node.cfg.kind {
            hale_core::config::ToolNodeKind::Http => {
                nodes::http::call(
                    &self.http,
                    &node.cfg.url,
                    tool,
                    args,
                    timeout,
                    idempotency_key,
                    job_id,
                )
                .await
            }
            hale_core::config::ToolNodeKind::Mcp => {
                mcp_client::call(&self.http, node, tool, args, timeout, idempotency_key).await
            }
        }
    }

    /// Lists one node's tools (its health check).
    pub async fn list_node(&self, node: &Node) -> Result<Vec<nodes::ToolInfo>, CallFailure> {
        match node.cfg.kind {
            hale_core::config::ToolNodeKind::Http => {
                nodes::http::list(&self.http, &node.cfg.url, CHECK_TIMEOUT).await
            }
            hale_core::config::ToolNodeKind::Mcp => {
                mcp_client::list(&self.http, node, CHECK_TIMEOUT).await
            }
        }
    }

    /// Refreshes one node's capabilities; marks it offline when unreachable.
    pub async fn refresh(&self, node: &Node) {
        match self.list_node(node).await {
            Ok(list) => node.set_checked(Some(list)),
            Err(f) => {
                tracing::debug!(node = node.name(), error = %f.message, "tool node health check failed");
                node.set_checked(None);
            }
        }
    }

    /// Refreshes every node at once.
    pub async fn refresh_all(&self) {
        let nodes = self.registry.snapshot();
        futures::future::join_all(nodes.iter().map(|n| self.refresh(n))).await;
    }

    /// Submits a job: validates it, honours an existing `job_id`, runs it
    /// (or queues it) and returns its evidence.
    pub async fn submit(&self, req: JobRequest) -> Result<Submitted, SubmitError> {
        self.submit_as(req, None, None).await
    }

    /// [`Tools::submit`] on behalf of an agent and task (recorded on the job).
    pub async fn submit_as(
        &self,
        req: JobRequest,
        agent: Option<String>,
        task: Option<String>,
    ) -> Result<Submitted, SubmitError> {
        let problems = req.problems();
        if !problems.is_empty() {
            return Err(SubmitError::Invalid(problems));
        }
        let now_ms = wall_ms();
        let mut job = Job::new(req, now_ms);
        job.agent = agent;
        job.task = task;
        let rec = record(&job, None);
        if let Some(existing) = self
            .store
            .insert_job(&rec)
            .await
            .map_err(SubmitError::Store)?
        {
            let stored = decode(&existing).map_err(SubmitError::Store)?;
            if stored.request != job.request {
                return Err(SubmitError::Reused(Box::new(stored)));
            }
            return Ok(Submitted {
                job: stored,
                replayed: true,
            });
        }
        self.emit(
            EventKind::JobSubmitted,
            json!({"job_id": job.job_id, "workflow_id": job.workflow_id, "steps": job.request.steps.len()}),
        );
        let end = runner::run(self, &mut job).await;
        self.finish_run(&mut job, end, None)
            .await
            .map_err(SubmitError::Store)?;
        Ok(Submitted {
            job,
            replayed: false,
        })
    }

    /// Stores the outcome of a run: final (audit + event) or queued.
    async fn finish_run(
        &self,
        job: &mut Job,
        end: RunEnd,
        prev: Option<QueueInfo>,
    ) -> hale_store::Result<()> {
        let now_ms = wall_ms();
        match end {
            RunEnd::Queue {
                ttl_seconds,
                retry_interval_seconds,
            } => {
                let info = match prev {
                    Some(mut q) => {
                        q.deliveries += 1;
                        q
                    }
                    None => QueueInfo {
                        queued_ms: now_ms,
                        ttl_seconds,
                        retry_interval_seconds,
                        deliveries: 0,
                    },
                };
                job.status = JobStatus::Queued;
                job.queue = Some(info);
                let next = rules::next_delivery_ms(now_ms, info.retry_interval_seconds);
                let mut writes = vec![Write::Job(record(job, Some(next)))];
                if prev.is_none() {
                    self.metrics.job("queued");
                    writes.push(Write::Event(
                        Event::new(EventKind::JobQueued, now_ms, &mut rand::rng()).payload(
                            json!({"job_id": job.job_id, "ttl_seconds": info.ttl_seconds,
                                   "retry_interval_seconds": info.retry_interval_seconds}),
                        ),
                    ));
                }
                // The row and its event in one transaction (DESIGN §6).
                self.store.commit(writes).await
            }
            RunEnd::Completed | RunEnd::Failed => {
                let ok = end == RunEnd::Completed;
                job.status = if ok {
                    JobStatus::Completed
                } else {
                    JobStatus::Failed
                };
                job.ok = ok;
                job.verified = ok && job.steps.iter().all(|s| s.verified);
                self.finalize(job, now_ms).await
            }
        }
    }

    /// Writes a job's final state, its audit row and its event, in one
    /// transaction (DESIGN §6: the event commits with the change it reports).
    async fn finalize(&self, job: &mut Job, now_ms: u64) -> hale_store::Result<()> {
        job.finished_ms = Some(now_ms);
        let body = serde_json::to_value(&*job).unwrap_or(Value::Null);
        let mut writes = vec![
            Write::Job(record(job, None)),
            Write::Audit(AuditEntry {
                job_id: job.job_id.clone(),
                time_ms: now_ms,
                status: job.status.as_str().to_owned(),
                degraded: job.degraded,
                body,
            }),
        ];
        let kind = match job.status {
            JobStatus::Completed => Some(EventKind::JobCompleted),
            JobStatus::Failed => Some(EventKind::JobFailed),
            JobStatus::Expired => Some(EventKind::JobExpired),
            JobStatus::Cancelled => Some(EventKind::JobCancelled),
            JobStatus::Running | JobStatus::Queued => None,
        };
        if let Some(kind) = kind {
            self.metrics.job(job.status.as_str());
            writes.push(Write::Event(
                Event::new(kind, now_ms, &mut rand::rng()).payload(json!({
                    "job_id": job.job_id, "workflow_id": job.workflow_id, "ok": job.ok,
                    "degraded": job.degraded, "degraded_reason": job.degraded_reason,
                    "execution_path": job.execution_path, "maybe_executed": job.maybe_executed,
                    "error": job.error,
                })),
            ));
        }
        self.store.commit(writes).await
    }

    /// One job's state.
    pub async fn job(&self, job_id: &str) -> hale_store::Result<Option<Job>> {
        self.store
            .job(job_id)
            .await?
            .map(|r| decode(&r))
            .transpose()
    }

    /// Cancels a queued job. `Ok(None)`: no such job; `Ok(Some((job, false)))`:
    /// the job is not queued (nothing changed).
    pub async fn cancel(&self, job_id: &str) -> hale_store::Result<Option<(Job, bool)>> {
        let now_ms = wall_ms();
        let Some(mut job) = self.job(job_id).await? else {
            return Ok(None);
        };
        if job.status != JobStatus::Queued {
            return Ok(Some((job, false)));
        }
        job.status = JobStatus::Cancelled;
        job.error = Some("cancelled while queued".into());
        if self.settle(&mut job, JobStatus::Queued, now_ms).await? {
            return Ok(Some((job, true)));
        }
        // Another caller moved it first (delivered, expired, cancelled).
        Ok(self.job(job_id).await?.map(|j| (j, false)))
    }

    /// Ends a job that is still in `from` with the state `job` holds,
    /// without running it (expiry, cancel): a compare-and-set of the whole
    /// row, so no reader sees the new status without its reason, then its
    /// audit row and event. False when another caller moved it first.
    async fn settle(
        &self,
        job: &mut Job,
        from: JobStatus,
        now_ms: u64,
    ) -> hale_store::Result<bool> {
        job.finished_ms = Some(now_ms);
        let mut rec = record(job, None);
        rec.updated_ms = now_ms;
        if !self.store.settle_job(from.as_str(), &rec).await? {
            return Ok(false);
        }
        self.finalize(job, now_ms).await?;
        Ok(true)
    }

    /// Sets how long after its step timeouts a job left `running` counts as
    /// interrupted (default [`rules::INTERRUPTED_GRACE`]).
    pub fn set_interrupted_grace(&self, grace: Duration) {
        self.interrupted_grace_ms.store(
            u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Puts back jobs left `running` by a process that died mid-job (at
    /// start, and on every queue pass, once their step timeouts and the
    /// grace have passed so a live peer's job is never taken). The step that
    /// was running is the first without a stored outcome (the runner stores
    /// progress between steps): when it is safe to re-run (deterministic
    /// tool, idempotency key, or `retry_unsafe`) the job is queued again
    /// and resumes at that step; otherwise the job fails with `degraded_reason:
    /// "interrupted by a restart"` and `maybe_executed` on that step — it is
    /// never silently re-run. The store's compare-and-set on the status
    /// decides between processes. Returns how many jobs it put back.
    pub async fn recover_interrupted(&self) -> hale_store::Result<usize> {
        let grace = Duration::from_millis(
            self.interrupted_grace_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        // Only jobs quiet for at least the grace can be interrupted ones
        // (the rule adds each job's step timeouts on top), oldest first.
        let quiet_since =
            wall_ms().saturating_sub(u64::try_from(grace.as_millis()).unwrap_or(u64::MAX));
        let running = self
            .store
            .stale_jobs(JobStatus::Running.as_str(), quiet_since, RUNNING_BATCH)
            .await?;
        let mut touched = 0;
        for rec in running {
            let mut job = match decode(&rec) {
                Ok(j) => j,
                Err(e) => {
                    tracing::error!(job = rec.job_id, error = %e, "running job does not decode; skipped");
                    continue;
                }
            };
            let at = job.steps.len();
            let rest = job.request.steps.get(at..).unwrap_or_default();
            let remaining_ms = rest
                .iter()
                .map(|s| s.timeout_ms)
                .fold(0u64, u64::saturating_add);
            // No step left without an outcome: re-running runs nothing.
            let safe = rest.first().is_none_or(|step| {
                let deterministic = self
                    .registry
                    .snapshot()
                    .iter()
                    .any(|n| n.deterministic(&step.tool_name));
                rules::safe_to_rerun(
                    deterministic,
                    step.idempotency_key.is_some(),
                    step.retry_unsafe,
                )
            });
            let step_id = rest.first().map(|s| s.step_id.clone());
            let now_ms = wall_ms();
            match rules::interrupted_action(rec.updated_ms, remaining_ms, grace, now_ms, safe) {
                rules::Interrupted::StillRunning => {}
                rules::Interrupted::Requeue => {
                    if !self
                        .store
                        .claim_job(&job.job_id, "running", "queued", now_ms)
                        .await?
                    {
                        continue;
                    }
                    let info = job.queue.unwrap_or_else(|| {
                        let (ttl_seconds, retry_interval_seconds) = rest
                            .first()
                            .and_then(|s| match s.offline_behavior {
                                model::OfflineBehavior::Queue {
                                    ttl_seconds,
                                    retry_interval_seconds,
                                } => Some((ttl_seconds, retry_interval_seconds)),
                                model::OfflineBehavior::FailFast => None,
                            })
                            .unwrap_or((
                                rules::DEFAULT_QUEUE_TTL_SECONDS,
                                rules::DEFAULT_QUEUE_RETRY_INTERVAL_SECONDS,
                            ));
                        QueueInfo {
                            queued_ms: now_ms,
                            ttl_seconds,
                            retry_interval_seconds,
                            deliveries: 0,
                        }
                    });
                    job.status = JobStatus::Queued;
                    job.queue = Some(info);
                    job.degrade(format!("{INTERRUPTED_REASON}; re-queued (safe to re-run)"));
                    // Due at once: the next pass delivers it.
                    self.store.update_job(&record(&job, Some(now_ms))).await?;
                    self.metrics.job("queued");
                    self.emit(
                        EventKind::JobQueued,
                        json!({"job_id": job.job_id, "reason": INTERRUPTED_REASON,
                               "step_id": step_id, "ttl_seconds": info.ttl_seconds,
                               "retry_interval_seconds": info.retry_interval_seconds}),
                    );
                    touched += 1;
                }
                rules::Interrupted::Fail => {
                    if !self
                        .store
                        .claim_job(&job.job_id, "running", "failed", now_ms)
                        .await?
                    {
                        continue;
                    }
                    let step_id = step_id.unwrap_or_default();
                    let message = format!(
                        "{INTERRUPTED_REASON}: the call may have executed and is not safe to re-run"
                    );
                    job.steps.push(model::StepOutcome {
                        step_id: step_id.clone(),
                        ok: false,
                        verified: false,
                        result: Value::Null,
                        node: None,
                        attempts: 0,
                        maybe_executed: true,
                        error: None,
                        message: Some(message.clone()),
                    });
                    self.emit(
                        EventKind::JobStepFailed,
                        json!({"job_id": job.job_id, "step_id": step_id,
                               "message": message, "maybe_executed": true}),
                    );
                    job.status = JobStatus::Failed;
                    job.ok = false;
                    job.verified = false;
                    job.maybe_executed = true;
                    job.degraded = true;
                    job.degraded_reason = Some(INTERRUPTED_REASON.into());
                    job.error = Some(format!("step {step_id}: {message}"));
                    self.finalize(&mut job, now_ms).await?;
                    touched += 1;
                }
            }
        }
        Ok(touched)
    }

    /// One pass of the store-and-forward queue: puts back interrupted jobs
    /// ([`Tools::recover_interrupted`]), expires what passed its TTL,
    /// delivers what is due. Returns how many jobs it touched.
    pub async fn queue_tick(&self) -> hale_store::Result<usize> {
        let mut touched = self.recover_interrupted().await?;
        let queued = self.store.queued_jobs(QUEUE_BATCH).await?;
        let mut refreshed = false;
        for rec in queued {
            let mut job = match decode(&rec) {
                Ok(j) => j,
                Err(e) => {
                    tracing::error!(job = rec.job_id, error = %e, "queued job does not decode; skipped");
                    continue;
                }
            };
            let Some(q) = job.queue else { continue };
            let now_ms = wall_ms();
            let next = rec.next_attempt_ms.unwrap_or(0);
            match rules::queue_action(q.queued_ms, q.ttl_seconds, next, now_ms) {
                QueueAction::WaitUntil(_) => {}
                QueueAction::Expire => {
                    job.status = JobStatus::Expired;
                    job.error = Some(format!(
                        "no node took the job within its ttl of {} s",
                        q.ttl_seconds
                    ));
                    if self.settle(&mut job, JobStatus::Queued, now_ms).await? {
                        touched += 1;
                    }
                }
                QueueAction::Deliver => {
                    if !self
                        .store
                        .claim_job(&job.job_id, "queued", "running", now_ms)
                        .await?
                    {
                        continue;
                    }
                    if !refreshed {
                        // A node that came back is seen now, not at the next refresh.
                        self.refresh_all().await;
                        refreshed = true;
                    }
                    job.status = JobStatus::Running;
                    let end = runner::run(self, &mut job).await;
                    self.finish_run(&mut job, end, Some(q)).await?;
                    touched += 1;
                }
            }
        }
        Ok(touched)
    }

    /// The capability refresh (the node health check), until `token`.
    pub async fn refresh_loop(self: Arc<Self>, token: CancellationToken) {
        let mut every = tokio::time::interval(self.refresh_every);
        loop {
            tokio::select! {
                () = token.cancelled() => return,
                _ = every.tick() => self.refresh_all().await,
            }
        }
    }

    /// The store-and-forward queue, until `token`. A failed pass is logged
    /// and retried at the next tick.
    pub async fn queue_loop(self: Arc<Self>, token: CancellationToken) {
        let mut every = tokio::time::interval(QUEUE_TICK);
        loop {
            tokio::select! {
                () = token.cancelled() => return,
                _ = every.tick() => {
                    if let Err(e) = self.queue_tick().await {
                        tracing::warn!(error = %e, "tool job queue: a pass failed; retrying");
                    }
                }
            }
        }
    }

    /// Starts both loops on the runtime; both stop on `token`.
    pub fn spawn_background(
        self: &Arc<Self>,
        token: CancellationToken,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        vec![
            tokio::spawn(self.clone().refresh_loop(token.clone())),
            tokio::spawn(self.clone().queue_loop(token)),
        ]
    }
}

/// The Host headers the MCP front accepts: loopback names and the listen
/// address; any when hale listens on every interface (its clients then use
/// names hale cannot know, and API keys are what protects it).
fn allowed_hosts(listen: std::net::SocketAddr) -> Vec<String> {
    if listen.ip().is_unspecified() {
        return Vec::new();
    }
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
    let ip = listen.ip().to_string();
    if !hosts.contains(&ip) {
        hosts.push(ip);
    }
    hosts
}

/// The stored row of a job.
pub(crate) fn record(job: &Job, next_attempt_ms: Option<u64>) -> JobRecord {
    JobRecord {
        job_id: job.job_id.clone(),
        status: job.status.as_str().to_owned(),
        next_attempt_ms,
        updated_ms: wall_ms(),
        body: serde_json::to_value(job).unwrap_or(Value::Null),
    }
}

/// A stored row back into a job; the row's status wins over the body's.
fn decode(rec: &JobRecord) -> hale_store::Result<Job> {
    let mut job: Job =
        serde_json::from_value(rec.body.clone()).map_err(|e| hale_store::StoreError::Corrupt {
            table: "jobs",
            id: rec.job_id.clone(),
            detail: e.to_string(),
        })?;
    if let Some(s) = JobStatus::parse(&rec.status) {
        job.status = s;
    }
    Ok(job)
}
