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
        .route("/turns/{id}", get(turn))
        .merge(crate::api::router())
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

async fn ready(State(gw): State<Arc<Gateway>>) -> Response {
    match gw.store.last_seq().await {
        Ok(_) => (StatusCode::OK, "ready").into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store unavailable: {e}"),
        )
            .into_response(),
    }
}

async fn metrics(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    admin!(gw, peer, headers);
    let now = Instant::now();
    crate::api::deployments::refresh_metrics(&gw, now);
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
