//! The HTTP surface: routes, auth, and the admin API (DESIGN §1, §8).
//!
//! `router()` lists every endpoint in one place. Model calls go to
//! [`crate::pipeline::handle_chat`]; everything else is a small read of the
//! gateway's state or store. Auth runs first: a bearer key (or Anthropic's
//! `x-api-key`) maps to a scope; with no keys configured only direct
//! loopback clients are served (the rule is `hale_core::access`). Admin
//! endpoints need an admin key when keys exist.
//!
//! [`app`] is what is served: the routes, plus the edge every route shares —
//! the body limit (`limits.max_request_bytes`), JSON answers for an unknown
//! route (404) and a wrong method (405), and [`shape_errors`], which gives
//! every error no handler shaped (axum's 413, 415, 422 and bad-query 400
//! rejections, plain-text 5xx) the error shape of the route's dialect:
//! Anthropic's on `/v1/messages`, OpenAI's everywhere else. Serving refuses
//! to start on a non-loopback address without keys
//! (`hale_core::access::exposure_refusal`).

use crate::error::HaleError;
use crate::pipeline::{self, Caller};
use crate::proto::{self, Dialect};
use crate::state::Gateway;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hale_core::access::{self, Grant};
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

/// `router(gw)` plus `admin_extra` (routes that need the admin scope, such
/// as the event stream and the dead letters), behind the edge every route
/// shares: the body limit, JSON 404/405 fallbacks and [`shape_errors`].
pub fn app(gw: Arc<Gateway>, admin_extra: Router) -> Router {
    app_keyed(gw, admin_extra, Router::new())
}

/// [`app`] plus `keyed_extra`: routes any valid key may use (admin or
/// agent-scoped, as the chat routes), such as the MCP front. The caller's
/// scope is put in the request's extensions as a [`KeyScope`] (`Admin` for
/// an admin key or a trusted loopback caller) for the route to honour.
pub fn app_keyed(gw: Arc<Gateway>, admin_extra: Router, keyed_extra: Router) -> Router {
    let limit = gw.cfg.limits.max_request_bytes;
    let guarded = admin_extra.layer(axum::middleware::from_fn_with_state(gw.clone(), admin_only));
    let keyed = keyed_extra.layer(axum::middleware::from_fn_with_state(gw.clone(), any_key));
    router(gw)
        .merge(guarded)
        .merge(keyed)
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn_with_state(limit, shape_errors))
        .layer(DefaultBodyLimit::max(
            usize::try_from(limit).unwrap_or(usize::MAX),
        ))
}

/// Serves [`app`] until `shutdown` resolves, then drains in-flight requests.
/// Refuses to start (`PermissionDenied`) on a non-loopback address when no
/// keys are configured, unless `auth.insecure_no_auth` is set.
pub async fn serve_with(
    gw: Arc<Gateway>,
    admin_extra: Router,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_keyed(gw, admin_extra, Router::new(), listener, shutdown).await
}

/// [`serve_with`] plus routes any valid key may use (see [`app_keyed`]).
pub async fn serve_keyed(
    gw: Arc<Gateway>,
    admin_extra: Router,
    keyed_extra: Router,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    if let Some(refusal) = access::exposure_refusal(&gw.cfg.auth, listener.local_addr()?) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            refusal,
        ));
    }
    let app = app_keyed(gw, admin_extra, keyed_extra);
    // Small SSE frames and short answers must not wait for Nagle's algorithm
    // (~40 ms per response with delayed ACKs on the caller's side).
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

/// The wire dialect of a path: its errors are in that dialect's shape.
fn dialect_of(path: &str) -> Dialect {
    if path == "/v1/messages" || path.starts_with("/v1/messages/") {
        Dialect::Anthropic
    } else {
        Dialect::OpenAi
    }
}

/// 404 for a path no route serves.
async fn no_route(method: Method, uri: Uri) -> Response {
    HaleError::not_found(format!("no route for {method} {}", uri.path()))
        .into_response(dialect_of(uri.path()))
}

/// 405 for a route served with other methods (axum adds the `Allow` header).
async fn wrong_method(method: Method, uri: Uri) -> Response {
    HaleError::from_status(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}", uri.path()),
    )
    .into_response(dialect_of(uri.path()))
}

/// How much of an unshaped error body is kept as the message.
const UNSHAPED_BODY_MAX: usize = 16 * 1024;

/// Gives an error response that is not JSON (axum's extractor rejections,
/// the body limit's 413, a handler's plain-text 5xx) the error shape of the
/// route's dialect, keeping its status, its headers (e.g. `Allow`) and its
/// text as the message. Successes and JSON errors pass untouched.
async fn shape_errors(
    State(limit): State<u64>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let dialect = dialect_of(req.uri().path());
    let resp = next.run(req).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, UNSHAPED_BODY_MAX)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let err = if status == StatusCode::PAYLOAD_TOO_LARGE {
        HaleError::request_too_large(limit)
    } else if text.is_empty() {
        HaleError::from_status(
            status,
            status.canonical_reason().unwrap_or("request refused"),
        )
    } else {
        HaleError::from_status(status, text)
    };
    let mut shaped = err.into_response(dialect);
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    parts.headers.remove(axum::http::header::CONTENT_TYPE);
    shaped.headers_mut().extend(parts.headers);
    shaped
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

/// Refuses a request without a valid key (when keys are configured); passes
/// the caller's scope on as a [`KeyScope`] extension.
async fn any_key(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match authorize(&gw, peer, req.headers(), false) {
        Ok(caller) => {
            let scope = match caller.agents {
                None => KeyScope::Admin,
                Some(list) => KeyScope::Agents(list),
            };
            req.extensions_mut().insert(scope);
            next.run(req).await
        }
        Err(e) => e.into_response(Dialect::OpenAi),
    }
}

/// Serves [`app`] with no admin extras; see [`serve_with`].
pub async fn serve(
    gw: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(gw, Router::new(), listener, shutdown).await
}

/// Resolves the caller (`hale_core::access::decide`); `admin` requires the
/// admin scope.
pub(crate) fn authorize(
    gw: &Gateway,
    peer: SocketAddr,
    headers: &HeaderMap,
    admin: bool,
) -> Result<Caller, HaleError> {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(access::bearer_token)
        .or_else(|| {
            headers
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
        });
    let req = access::Request {
        peer_loopback: access::is_loopback(peer.ip()),
        forwarded: access::FORWARDING_HEADERS
            .iter()
            .any(|h| headers.contains_key(*h)),
        token,
        admin,
    };
    match access::decide(&gw.cfg.auth, &req) {
        Ok(Grant::Trusted) => Ok(Caller {
            default_agent: None,
            agents: None,
        }),
        Ok(Grant::Key(key)) => match &key.scope {
            KeyScope::Admin => Ok(Caller {
                default_agent: None,
                agents: None,
            }),
            KeyScope::Agents(list) => Ok(Caller {
                default_agent: list.first().cloned(),
                agents: Some(list.clone()),
            }),
        },
        Err(r) if r.unauthenticated() => Err(HaleError::unauthorized()),
        Err(r) => Err(HaleError::forbidden(r.message())),
    }
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
    crate::api::deployments::refresh_metrics(&gw, now);
    if let Ok(d) = gw.store.outbox_depth().await {
        gw.metrics.outbox_depth.set(d as i64);
    }
    if let Ok(d) = gw.store.dlq_list(None).await {
        gw.metrics.dead_letters.set(d.len() as i64);
    }
    let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    gw.metrics
        .store_queued_writes
        .set(i64::try_from(gw.store.queued()).unwrap_or(i64::MAX));
    gw.metrics
        .agents_held
        .set(gauge(gw.agents.lock().expect("agents lock").len()));
    gw.metrics.tasks_held.set(gauge(gw.tasks.len()));
    gw.metrics
        .breakers_held
        .set(gauge(gw.deployments.breakers_held()));
    gw.metrics.refresh_sinks();
    gw.metrics.refresh_tools();
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
