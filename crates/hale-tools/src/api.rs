//! The HTTP API of tool jobs (docs/http-api.md, "Tool jobs and nodes"):
//! `POST /jobs`, `GET /jobs/{id}`, `GET /jobs?status=`, `DELETE /jobs/{id}`,
//! `GET /jobs/audit?degraded=`, `GET /jobs/metrics` (also at
//! `GET /v1/metrics`, the path seed 003's monitoring reads), `POST /nodes`,
//! `GET /nodes`, and the MCP front at `/mcp`.
//!
//! A job document may carry `//` and `/* */` comments (seed 003 writes its
//! examples so); they are removed before the strict parse.
//!
//! Handlers only parse, call [`Tools`] and render. Errors keep hale's error
//! shape (`{"error": {"type", "message", "hale": {...}}}`). No route checks
//! auth itself: [`Tools::router`] is merged by the gateway behind its admin
//! check, which is where hale decides who may run tools.

use crate::model::JobRequest;
use crate::{SubmitError, Tools};
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hale_core::config::{NodeBreakerConfig, ToolNodeConfig, ToolNodeKind};
use hale_core::tools::{DEFAULT_LEASE_SECONDS, JobStatus, MAX_ID_LEN};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// Most rows one list or audit read returns.
pub const MAX_LIST: u32 = 1000;
/// Default rows of a list or audit read.
pub const DEFAULT_LIST: u32 = 100;
/// Longest lease a registration may ask for.
pub const MAX_LEASE_SECONDS: u64 = 3600;

impl Tools {
    /// Every route, the MCP front included (tests, embedders).
    pub fn router(self: &Arc<Self>) -> Router {
        self.admin_router().merge(self.mcp_router())
    }

    /// The MCP front alone, at `/mcp`.
    pub fn mcp_router(self: &Arc<Self>) -> Router {
        Router::new().nest_service("/mcp", self.mcp_service(self.mcp_allowed_hosts.clone()))
    }

    /// The admin routes only (`/jobs…`, `/nodes`), without the MCP front:
    /// `hale serve` puts these behind the admin check and `/mcp` behind
    /// any valid key.
    pub fn admin_router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/jobs", post(submit).get(list))
            .route("/jobs/audit", get(audit))
            .route("/jobs/metrics", get(metrics))
            .route("/v1/metrics", get(metrics))
            .route("/jobs/{id}", get(show).delete(cancel))
            .route("/nodes", post(register).get(nodes))
            .with_state(self.clone())
    }
}

/// hale's error shape.
pub fn error(status: StatusCode, kind: &str, message: impl Into<String>, hale: Value) -> Response {
    let mut body = json!({"error": {"type": kind, "message": message.into()}});
    if !hale.is_null() {
        body["error"]["hale"] = hale;
    }
    (status, axum::Json(body)).into_response()
}

fn store_error(e: hale_store::StoreError) -> Response {
    tracing::error!(error = %e, "tool jobs: store failed");
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        format!("the store failed: {e}"),
        Value::Null,
    )
}

/// `body` without JSON comments: `// …` to the end of a line and `/* … */`,
/// outside strings; everything else byte for byte.
pub fn strip_comments(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    let mut in_str = false;
    while i < body.len() {
        let c = body[i];
        if in_str {
            out.push(c);
            if c == b'\\' && i + 1 < body.len() {
                out.push(body[i + 1]);
                i += 2;
                continue;
            }
            in_str = c != b'"';
            i += 1;
            continue;
        }
        match (c, body.get(i + 1)) {
            (b'"', _) => {
                in_str = true;
                out.push(c);
                i += 1;
            }
            (b'/', Some(b'/')) => {
                while i < body.len() && body[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                i += 2;
                while i < body.len() && !(body[i] == b'*' && body.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
                out.push(b' ');
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

async fn submit(State(t): State<Arc<Tools>>, body: axum::body::Bytes) -> Response {
    let body = strip_comments(&body);
    let req: JobRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_job",
                format!("the job does not parse: {e}"),
                Value::Null,
            );
        }
    };
    match t.submit(req).await {
        Ok(s) => {
            let status = match s.job.status {
                JobStatus::Queued | JobStatus::Running => StatusCode::ACCEPTED,
                JobStatus::Completed
                | JobStatus::Failed
                | JobStatus::Expired
                | JobStatus::Cancelled => StatusCode::OK,
            };
            let mut r = (status, axum::Json(&s.job)).into_response();
            if s.replayed {
                r.headers_mut().insert(
                    "x-hale-replayed",
                    axum::http::HeaderValue::from_static("true"),
                );
            }
            r
        }
        Err(SubmitError::Invalid(p)) => error(
            StatusCode::BAD_REQUEST,
            "invalid_job",
            p.join("; "),
            json!({"problems": p}),
        ),
        Err(SubmitError::Reused(job)) => error(
            StatusCode::CONFLICT,
            "job_id_reused",
            format!(
                "job_id `{}` was submitted before with a different request",
                job.job_id
            ),
            json!({"job": job}),
        ),
        Err(SubmitError::Store(e)) => store_error(e),
    }
}

async fn show(State(t): State<Arc<Tools>>, Path(id): Path<String>) -> Response {
    match t.job(&id).await {
        Ok(Some(j)) => axum::Json(j).into_response(),
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            "job_not_found",
            format!("no job `{id}`"),
            Value::Null,
        ),
        Err(e) => store_error(e),
    }
}

#[derive(Deserialize)]
struct ListQuery {
    status: Option<String>,
    limit: Option<u32>,
}

async fn list(State(t): State<Arc<Tools>>, Query(q): Query<ListQuery>) -> Response {
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => match JobStatus::parse(s) {
            Some(s) => Some(s),
            None => {
                let known: Vec<&str> = JobStatus::ALL.iter().map(|s| s.as_str()).collect();
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_status",
                    format!("unknown status `{s}` (one of {})", known.join(", ")),
                    Value::Null,
                );
            }
        },
    };
    let limit = q.limit.unwrap_or(DEFAULT_LIST).min(MAX_LIST);
    match t.store.jobs(status.map(JobStatus::as_str), limit).await {
        Ok(rows) => {
            let jobs: Vec<Value> = rows
                .into_iter()
                .map(|r| {
                    let mut b = r.body;
                    b["status"] = Value::String(r.status);
                    b
                })
                .collect();
            axum::Json(json!({"jobs": jobs})).into_response()
        }
        Err(e) => store_error(e),
    }
}

async fn cancel(State(t): State<Arc<Tools>>, Path(id): Path<String>) -> Response {
    match t.cancel(&id).await {
        Ok(Some((job, true))) => axum::Json(job).into_response(),
        Ok(Some((job, false))) => error(
            StatusCode::CONFLICT,
            "job_not_queued",
            format!(
                "job `{id}` is {}; only a queued job can be cancelled",
                job.status.as_str()
            ),
            Value::Null,
        ),
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            "job_not_found",
            format!("no job `{id}`"),
            Value::Null,
        ),
        Err(e) => store_error(e),
    }
}

#[derive(Deserialize)]
struct AuditQuery {
    degraded: Option<bool>,
    limit: Option<u32>,
}

async fn audit(State(t): State<Arc<Tools>>, Query(q): Query<AuditQuery>) -> Response {
    let limit = q.limit.unwrap_or(DEFAULT_LIST).min(MAX_LIST);
    match t.store.audit(q.degraded, limit).await {
        Ok(rows) => axum::Json(json!({"audit": rows})).into_response(),
        Err(e) => store_error(e),
    }
}

async fn metrics(State(t): State<Arc<Tools>>) -> Response {
    let nodes = t.registry.snapshot();
    axum::Json(t.metrics.snapshot(&nodes, Instant::now(), crate::wall_ms())).into_response()
}

async fn nodes(State(t): State<Arc<Tools>>) -> Response {
    let now = Instant::now();
    let now_ms = crate::wall_ms();
    let list: Vec<_> = t
        .registry
        .snapshot()
        .iter()
        .map(|n| n.view(now, now_ms))
        .collect();
    axum::Json(json!({"nodes": list})).into_response()
}

/// `POST /nodes`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Registration {
    name: String,
    kind: ToolNodeKind,
    url: String,
    #[serde(default)]
    deterministic: Vec<String>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    #[serde(default, alias = "circuit_breaker")]
    breaker: NodeBreakerConfig,
    lease_seconds: Option<u64>,
}

async fn register(State(t): State<Arc<Tools>>, body: axum::body::Bytes) -> Response {
    let r: Registration = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_node",
                format!("the registration does not parse: {e}"),
                Value::Null,
            );
        }
    };
    let mut problems = Vec::new();
    if r.name.trim().is_empty() || r.name.len() > MAX_ID_LEN {
        problems.push(format!("name must be 1 to {MAX_ID_LEN} characters"));
    }
    let url = r.url.trim().trim_end_matches('/').to_owned();
    if reqwest::Url::parse(&url)
        .map(|u| !matches!(u.scheme(), "http" | "https"))
        .unwrap_or(true)
    {
        problems.push("url must be an http:// or https:// URL".into());
    }
    let lease = r.lease_seconds.unwrap_or(DEFAULT_LEASE_SECONDS);
    if lease == 0 || lease > MAX_LEASE_SECONDS {
        problems.push(format!("lease_seconds must be 1 to {MAX_LEASE_SECONDS}"));
    }
    for (key, v) in [
        (
            "failure_threshold",
            r.breaker.failure_threshold.map(u64::from),
        ),
        ("timeout_seconds", r.breaker.timeout_seconds),
        (
            "half_open_requests",
            r.breaker.half_open_requests.map(u64::from),
        ),
    ] {
        if v == Some(0) {
            problems.push(format!("breaker.{key} must be at least 1"));
        }
    }
    if !problems.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_node",
            problems.join("; "),
            Value::Null,
        );
    }
    let cfg = ToolNodeConfig {
        name: r.name.trim().to_owned(),
        kind: r.kind,
        url,
        deterministic: r.deterministic,
        metadata: r.metadata,
        breaker: r.breaker,
    };
    let expires = crate::wall_ms().saturating_add(lease * 1000);
    match t.registry.register(cfg, expires) {
        Ok((node, fresh)) => {
            if fresh {
                t.refresh(&node).await;
            }
            let view = node.view(Instant::now(), crate::wall_ms());
            let status = if fresh {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            (status, axum::Json(view)).into_response()
        }
        Err(crate::nodes::RegisterError::ConfigNode) => error(
            StatusCode::CONFLICT,
            "node_in_config",
            "a node of that name is defined in the config; registrations cannot replace it",
            Value::Null,
        ),
    }
}
