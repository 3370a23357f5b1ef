//! The HTTP surface: routes, auth, and the admin API (DESIGN §1, §8).
//!
//! `router()` lists every endpoint in one place. Model calls go to
//! [`crate::pipeline::handle_chat`]; everything else is a small read of the
//! gateway's state or store. Auth runs first: a bearer key (or Anthropic's
//! `x-api-key`) maps to a scope; with no keys configured only loopback
//! clients are served. Admin endpoints need an admin key when keys exist.

use crate::error::HaleError;
use crate::pipeline::{self, Caller};
use crate::proto::{self, Dialect};
use crate::state::Gateway;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hale_core::config::KeyScope;
use hale_core::event::EventKind;
use hale_store::Write;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// Every route.
pub fn router(gw: Arc<Gateway>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_openai))
        .route("/v1/messages", post(chat_anthropic))
        .route("/v1/models", get(models))
        .route("/live", get(|| async { "ok" }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/agents", get(agents))
        .route("/agents/{id}", get(agent))
        .route("/agents/{id}/pause", post(pause))
        .route("/agents/{id}/resume", post(resume))
        .route("/turns/{id}", get(turn))
        .merge(crate::health::router())
        .with_state(gw)
}

/// Serves `router(gw)` plus `admin_extra` (routes that need the admin scope,
/// such as the event stream and the dead letters) until `shutdown` resolves,
/// then drains in-flight requests.
pub async fn serve_with(
    gw: Arc<Gateway>,
    admin_extra: Router,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let guarded = admin_extra.layer(axum::middleware::from_fn_with_state(gw.clone(), admin_only));
    let app = router(gw).merge(guarded);
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

/// Refuses a request without the admin scope (when keys are configured).
async fn admin_only(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match admin_refusal(&gw, peer, req.headers()) {
        Some(refusal) => refusal,
        None => next.run(req).await,
    }
}

/// Serves until `shutdown` resolves, then drains in-flight requests.
pub async fn serve(
    gw: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    // Small SSE frames and short answers must not wait for Nagle's algorithm
    // (~40 ms per response with delayed ACKs on the caller's side).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(
        listener,
        router(gw).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

/// Resolves the caller from its key; `admin` requires the admin scope.
pub(crate) fn authorize(
    gw: &Gateway,
    peer: SocketAddr,
    headers: &HeaderMap,
    admin: bool,
) -> Result<Caller, HaleError> {
    let keys = &gw.cfg.auth.keys;
    if keys.is_empty() {
        if peer.ip().is_loopback() {
            return Ok(Caller {
                default_agent: None,
                agents: None,
            });
        }
        return Err(HaleError::forbidden(
            "no API keys are configured: only loopback clients are served",
        ));
    }
    let presented = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim);
    let Some(presented) = presented else {
        return Err(HaleError::unauthorized());
    };
    let key = keys
        .iter()
        .find(|k| constant_time_eq(k.token.expose().as_bytes(), presented.as_bytes()))
        .ok_or_else(HaleError::unauthorized)?;
    match &key.scope {
        KeyScope::Admin => Ok(Caller {
            default_agent: None,
            agents: None,
        }),
        KeyScope::Agents(_) if admin => {
            Err(HaleError::forbidden("this endpoint needs an admin key"))
        }
        KeyScope::Agents(list) => Ok(Caller {
            default_agent: list.first().cloned(),
            agents: Some(list.clone()),
        }),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn chat_openai(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    chat(gw, Dialect::OpenAi, peer, headers, body).await
}

async fn chat_anthropic(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    chat(gw, Dialect::Anthropic, peer, headers, body).await
}

async fn chat(
    gw: Arc<Gateway>,
    dialect: Dialect,
    peer: SocketAddr,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match authorize(&gw, peer, &headers, false) {
        Ok(caller) => pipeline::handle_chat(gw, dialect, caller, headers, body).await,
        Err(e) => e.into_response(dialect),
    }
}

/// The refusal for a caller without the admin scope, if it lacks it.
pub(crate) fn admin_refusal(
    gw: &Gateway,
    peer: SocketAddr,
    headers: &HeaderMap,
) -> Option<Response> {
    authorize(gw, peer, headers, true)
        .err()
        .map(|e| e.into_response(Dialect::OpenAi))
}

macro_rules! admin {
    ($gw:expr, $peer:expr, $headers:expr) => {
        if let Some(refusal) = admin_refusal(&$gw, $peer, &$headers) {
            return refusal;
        }
    };
}

async fn models(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = authorize(&gw, peer, &headers, false) {
        return e.into_response(Dialect::OpenAi);
    }
    let mut ids: Vec<String> = gw.cfg.routes.keys().cloned().collect();
    for p in &gw.cfg.providers {
        ids.push(p.default_model.clone());
        ids.extend(p.models.iter().cloned());
    }
    ids.sort();
    ids.dedup();
    axum::Json(proto::openai::render_models(&ids)).into_response()
}

/// `GET /ready`: 200 when the store answers (503 when not), with each event
/// sink's state, backlog, oldest undelivered age, dead letters and last error
/// (DESIGN §6). Public, so it shows sinks by their public names only (no
/// webhook credentials, paths or query strings). A sink that is down does not
/// make hale unready: its events wait in the outbox.
async fn ready(State(gw): State<Arc<Gateway>>) -> Response {
    let store = gw.store.last_seq().await;
    let sinks: Vec<serde_json::Value> = gw
        .metrics
        .sinks()
        .map(|(sinks, _shed)| sinks)
        .unwrap_or_default()
        .into_iter()
        .map(|s| {
            serde_json::json!({
                "name": s.name,
                "kind": s.kind,
                "state": s.state,
                "backlog": s.backlog,
                "oldest_undelivered_age_ms": s.oldest_undelivered_age_ms,
                "dead_letters": s.dead_letters,
                "last_error": s.last_error,
            })
        })
        .collect();
    let (status, ready, store) = match store {
        Ok(_) => (StatusCode::OK, true, "ok".to_string()),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, false, e.to_string()),
    };
    (
        status,
        axum::Json(serde_json::json!({"ready": ready, "store": store, "sinks": sinks})),
    )
        .into_response()
}

async fn metrics(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    admin!(gw, peer, headers);
    let now = Instant::now();
    for ((agent, provider), b) in gw.all_breakers() {
        let current = b.state(now);
        for s in [
            hale_core::breaker::BreakerState::Closed,
            hale_core::breaker::BreakerState::Open,
            hale_core::breaker::BreakerState::HalfOpen,
            hale_core::breaker::BreakerState::ForcedOpen,
            hale_core::breaker::BreakerState::Disabled,
        ] {
            gw.metrics
                .breaker_state
                .get_or_create(&crate::metrics::BreakerLabels {
                    agent: agent.clone(),
                    provider: provider.clone(),
                    state: s.as_str().into(),
                })
                .set(i64::from(s == current));
        }
    }
    for (name, p) in &gw.providers {
        let snap = p.cooldown.lock().expect("cooldown lock").snapshot(now);
        gw.metrics
            .cooldown_seconds
            .get_or_create(&crate::metrics::ProviderLabels {
                provider: name.clone(),
            })
            .set(snap.remaining_ms as f64 / 1000.0);
    }
    if let Ok(d) = gw.store.outbox_depth().await {
        gw.metrics.outbox_depth.set(d as i64);
    }
    if let Ok(d) = gw.store.dlq_list(None).await {
        gw.metrics.dead_letters.set(d.len() as i64);
    }
    gw.metrics.refresh_sinks();
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        gw.metrics.render(),
    )
        .into_response()
}

fn agent_view(gw: &Gateway, id: &str) -> serde_json::Value {
    let rec = gw.agent_record(id);
    let now = Instant::now();
    let breakers: serde_json::Map<String, serde_json::Value> = gw
        .breakers_of(id)
        .into_iter()
        .map(|(p, b)| (p, serde_json::to_value(b.snapshot(now)).unwrap_or_default()))
        .collect();
    let cooldowns: serde_json::Map<String, serde_json::Value> = gw
        .providers
        .iter()
        .map(|(name, p)| {
            let snap = p.cooldown.lock().expect("cooldown lock").snapshot(now);
            (name.clone(), serde_json::to_value(snap).unwrap_or_default())
        })
        .collect();
    json!({
        "id": rec.id,
        "state": if rec.paused { "paused" } else { "active" },
        "consecutive_failures": rec.consecutive_failures,
        "counters": {
            "turns": rec.turns,
            "failed_turns": rec.failed_turns,
            "tokens_in": rec.tokens_in,
            "tokens_out": rec.tokens_out,
            "cost_usd": rec.cost_usd,
        },
        "last_failure_ms": rec.last_failure_ms,
        "last_seen_ms": rec.last_seen_ms,
        "breakers": breakers,
        "cooldowns": cooldowns,
        "health": gw.health.view(id, now),
        "budget": budget_view(gw, id),
        "detail": rec.state,
    })
}

/// Caps, spend and guard state per task, for `GET /agents/{id}`.
fn budget_view(gw: &Gateway, id: &str) -> serde_json::Value {
    let caps = gw
        .cfg
        .agents
        .get(id)
        .or_else(|| gw.cfg.agents.get(hale_core::config::DEFAULT_AGENT))
        .map(|a| a.budget.clone())
        .unwrap_or_default();
    let rec = gw.agent_record(id);
    let tasks: serde_json::Map<String, serde_json::Value> = gw
        .tasks
        .of_agent(id)
        .into_iter()
        .map(|(task, guard, spend)| (task, json!({ "spend": spend, "guard": guard })))
        .collect();
    json!({
        "caps": {
            "max_tokens_per_task": caps.max_tokens_per_task,
            "max_tokens_per_agent": caps.max_tokens_per_agent,
            "max_cost_usd_per_task": caps.max_cost_usd_per_task,
            "max_cost_usd_per_agent": caps.max_cost_usd_per_agent,
        },
        "agent_spend": { "tokens": rec.tokens_in + rec.tokens_out, "cost_usd": rec.cost_usd },
        "tasks": tasks,
    })
}

async fn agents(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    admin!(gw, peer, headers);
    let mut ids: Vec<String> = gw
        .agents
        .lock()
        .expect("agents lock")
        .keys()
        .cloned()
        .collect();
    for a in gw.cfg.agents.keys() {
        if !ids.contains(a) {
            ids.push(a.clone());
        }
    }
    ids.sort();
    let list: Vec<_> = ids.iter().map(|id| agent_view(&gw, id)).collect();
    axum::Json(json!({ "agents": list })).into_response()
}

async fn agent(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    admin!(gw, peer, headers);
    axum::Json(agent_view(&gw, &id)).into_response()
}

async fn pause(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    admin!(gw, peer, headers);
    set_paused(&gw, &id, true, "paused by an operator").await
}

async fn resume(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    admin!(gw, peer, headers);
    set_paused(&gw, &id, false, "resumed by an operator").await
}

/// Pauses or resumes an agent; the state change and its event commit together.
pub async fn set_paused(gw: &Gateway, id: &str, paused: bool, reason: &str) -> Response {
    let rec = gw.update_agent(id, |a| {
        a.paused = paused;
        if !paused {
            a.consecutive_failures = 0;
        }
    });
    if !paused {
        crate::health::on_resume(gw, id);
    }
    let kind = if paused {
        EventKind::AgentPaused
    } else {
        EventKind::AgentResumed
    };
    let ev = gw
        .event(kind)
        .agent(id)
        .payload(json!({ "reason": reason }));
    gw.metrics.event(kind);
    if let Err(e) = gw
        .store
        .commit(vec![Write::Agent(rec), Write::Event(ev)])
        .await
    {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("could not record the change: {e}"),
        )
            .into_response();
    }
    axum::Json(agent_view(gw, id)).into_response()
}

async fn turn(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    admin!(gw, peer, headers);
    // The journal is group-committed: make sure this turn's row is in.
    let _ = gw.store.flush().await;
    match gw.store.turn(&id).await {
        Ok(Some(t)) => axum::Json(json!({
            "id": t.id,
            "agent": t.agent,
            "task": t.task,
            "status": t.status,
            "model_requested": t.model_requested,
            "provider": t.provider,
            "model": t.model,
            "started_ms": t.started_ms,
            "duration_ms": t.duration_ms,
            "usage": {"input_tokens": t.usage_in, "output_tokens": t.usage_out},
            "error_class": t.error_class,
            "timeline": t.attempts,
        }))
        .into_response(),
        Ok(None) => HaleError::not_found(format!("no turn {id}")).into_response(Dialect::OpenAi),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("store error: {e}"),
        )
            .into_response(),
    }
}
