//! The health routes (docs/operations.md, "Agent health and supervision"):
//! heartbeats (`POST /agents/{id}/heartbeat`), an operator's decision on an
//! escalation (`POST /agents/{id}/decide`), termination
//! (`POST /agents/{id}/terminate`), a task's state
//! (`GET /agents/{id}/tasks/{task}`) and recovery
//! (`POST /agents/{id}/tasks/{task}/recover`). The runtime they drive is
//! [`crate::health`].
//!
//! A heartbeat's body is parsed with borrowed strings, so a heartbeat of a
//! known agent allocates nothing beyond the request itself.

use super::edge::{admin_refusal, agent_refusal, bad, store_err};
use crate::Gateway;
use crate::error::HaleError;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hale_core::event::EventKind;
use hale_core::health::{Decision, Heartbeat};
use hale_proto::Dialect;
use serde::Deserialize;
use serde_json::json;
use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct HeartbeatBody<'a> {
    #[serde(borrow, default)]
    task: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    phase: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    progress: Option<Cow<'a, str>>,
    #[serde(default)]
    tokens: Option<u64>,
    #[serde(default)]
    errors: Option<u64>,
}

pub(super) async fn heartbeat(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    if let Some(r) = agent_refusal(&gw, peer, &headers, &id) {
        return r;
    }
    let hb: HeartbeatBody<'_> = if body.is_empty() {
        HeartbeatBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => return bad(format!("invalid heartbeat: {e}")),
        }
    };
    gw.health.heartbeat(
        &id,
        &Heartbeat {
            task: hb.task.as_deref(),
            phase: hb.phase.as_deref(),
            progress: hb.progress.as_deref(),
            tokens: hb.tokens,
            errors: hb.errors,
            fingerprint: None,
            failed: None,
        },
        Instant::now(),
    );
    StatusCode::NO_CONTENT.into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecideBody {
    /// `more_time`, `hand_off` or `terminate`.
    decision: String,
    /// For `more_time`; default `health.stuck_after`.
    #[serde(default)]
    more_time_ms: Option<u64>,
    #[serde(default)]
    reason: Option<String>,
}

pub(super) async fn decide(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    if let Some(r) = admin_refusal(&gw, peer, &headers) {
        return r;
    }
    let b: DecideBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return bad(format!(
                "invalid decision: {e}; expected {{\"decision\": \"more_time\"|\"hand_off\"|\"terminate\"}}"
            ));
        }
    };
    let d = match b.decision.as_str() {
        "more_time" => Decision::MoreTime(
            b.more_time_ms
                .map_or(gw.cfg.health.stuck_after, Duration::from_millis),
        ),
        "hand_off" => Decision::HandOff,
        "terminate" => Decision::Terminate,
        other => {
            return bad(format!(
                "unknown decision {other:?}: use more_time, hand_off or terminate"
            ));
        }
    };
    let now = Instant::now();
    let result = gw.health.decide(&id, d, now);
    let change = match result {
        Ok(c) => c,
        Err(e) => {
            return HaleError::new(StatusCode::CONFLICT, "no_escalation", e.to_string())
                .into_response(Dialect::OpenAi);
        }
    };
    let task = gw
        .health
        .current_task(&id)
        .unwrap_or_else(|| crate::guard::DEFAULT_TASK.to_owned());
    let reason = b
        .reason
        .unwrap_or_else(|| format!("operator decided {}", b.decision));
    gw.emit(gw.event(EventKind::HealthDecision).agent(&id).task(&task).payload(json!({
        "decision": b.decision,
        "more_time_ms": match d { Decision::MoreTime(t) => Some(t.as_millis() as u64), Decision::HandOff | Decision::Terminate => None },
        "reason": reason,
    })));
    if let Some(c) = change {
        gw.emit(
            gw.event(EventKind::HealthStateChanged)
                .agent(&id)
                .task(&task)
                .payload(json!({
                    "from": c.from, "to": c.to, "signal": c.signal, "reason": c.reason,
                })),
        );
    }
    match d {
        Decision::Terminate => gw.health.block_task(&gw.agents, &id, &task, &reason, now),
        Decision::HandOff => {
            return super::agents::operator_pause(
                &gw,
                &id,
                "handed off to a human by an operator decision",
            )
            .await;
        }
        Decision::MoreTime(_) => {}
    }
    let _ = gw.store.flush().await;
    axum::Json(json!({"agent": id, "decision": b.decision, "health": gw.health.view(&id, now)}))
        .into_response()
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TerminateBody {
    #[serde(default)]
    task: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

pub(super) async fn terminate(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    gw.load_agent(&id).await;
    if let Some(r) = super::agents::refusal(&gw, peer, &headers, &id) {
        return r;
    }
    let b: TerminateBody = if body.is_empty() {
        TerminateBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => return bad(format!("invalid body: {e}")),
        }
    };
    let task = b
        .task
        .or_else(|| gw.health.current_task(&id))
        .unwrap_or_else(|| crate::guard::DEFAULT_TASK.to_owned());
    let reason = b
        .reason
        .unwrap_or_else(|| "terminated by an operator".to_owned());
    gw.health.terminate(&gw.agents, &id, &task, &reason);
    if let Err(e) = gw.store.flush().await {
        return store_err(e);
    }
    axum::Json(json!({"agent": id, "task": task, "terminated": true, "health": gw.health.view(&id, Instant::now())}))
        .into_response()
}

pub(super) async fn task_view(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((id, task)): Path<(String, String)>,
) -> Response {
    if let Some(r) = agent_refusal(&gw, peer, &headers, &id) {
        return r;
    }
    axum::Json(gw.health.task_view(&id, &task)).into_response()
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RecoverBody {
    /// Why: `crash` (with an exit code), `terminated`, …
    #[serde(default)]
    cause: Option<String>,
}

pub(super) async fn recover(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((id, task)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if let Some(r) = admin_refusal(&gw, peer, &headers) {
        return r;
    }
    let b: RecoverBody = if body.is_empty() {
        RecoverBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => return bad(format!("invalid body: {e}")),
        }
    };
    match gw
        .health
        .plan_recovery(
            &gw.agents,
            &id,
            &task,
            b.cause.as_deref().unwrap_or("crash"),
        )
        .await
    {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => store_err(e),
    }
}
