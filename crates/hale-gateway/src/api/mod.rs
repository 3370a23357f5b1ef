//! The HTTP surface (docs/http-api.md): axum handlers only. Nothing below
//! imports this module; each handler authorizes at the edge ([`edge`]),
//! asks the pipeline (a chat call) or a component, and renders.
//!
//! [`router`] lists every route in one place (the model calls apart, behind
//! [`edge::json_only`]); [`app`] is what is served: the routes behind the
//! edge every route shares. Serving refuses to start
//! on a non-loopback address without keys
//! (`hale_core::access::exposure_refusal`).
//!
//! - [`chat`]: a dialect's request in → the pipeline → a response or SSE out.
//! - [`gemini`]: the same for Gemini clients (`/v1beta/models/{model}:{action}`,
//!   under `/v1/` too), with `countTokens` and Google's model list.
//! - [`agents`], [`deployments`], [`health`], [`checkpoints`], [`history`]:
//!   the admin and agent APIs over the components.
//! - [`responses`]: the Responses API's stored responses (GET, DELETE, input items).
//! - [`dashboard`]: the page; [`ops`]: `/live`, `/ready`, `/metrics`, `/turns/{id}`.

pub mod agents;
pub mod chat;
pub mod checkpoints;
pub mod dashboard;
pub mod deployments;
pub mod edge;
pub mod gemini;
pub mod health;
pub mod history;
pub mod ops;
pub mod responses;

use crate::Gateway;
use axum::Router;
use axum::routing::{get, post};
use futures::future::BoxFuture;
use hale_core::access;
use std::net::SocketAddr;
use std::sync::Arc;

/// Every route.
pub fn router(gw: Arc<Gateway>) -> Router {
    // Model calls, in each wire dialect: a `POST` must be JSON (`edge::json_only`).
    let model_calls = Router::new()
        .route("/v1/chat/completions", post(chat::openai))
        .route("/v1/messages", post(chat::anthropic))
        .route("/v1/responses", post(chat::responses))
        // Google's Generative Language API (Gemini CLI, google-genai):
        // `{model}:{action}` is one segment, split by the handler.
        .route(
            "/v1beta/models/{model}",
            get(gemini::model).post(gemini::action),
        )
        .route(
            "/v1/models/{model}",
            get(gemini::model).post(gemini::action),
        )
        .route_layer(axum::middleware::from_fn(edge::json_only));
    Router::new()
        .merge(model_calls)
        .route(
            "/v1/responses/{id}",
            get(responses::get).delete(responses::delete),
        )
        .route(
            "/v1/responses/{id}/input_items",
            get(responses::input_items),
        )
        .route("/v1/models", get(gemini::models_either))
        .route("/v1beta/models", get(gemini::models))
        // Operations.
        .route("/live", get(|| async { "ok" }))
        .route("/ready", get(ops::ready))
        .route("/metrics", get(ops::metrics))
        .route("/turns/{id}", get(ops::turn))
        // Agents (admin).
        .route("/agents", get(agents::list))
        .route("/agents/{id}", get(agents::show))
        .route("/agents/{id}/pause", post(agents::pause))
        .route("/agents/{id}/resume", post(agents::resume))
        .route("/agents/{id}/tasks/{task}/reset", post(agents::reset_task))
        // Agent health: heartbeats, decisions, termination, recovery.
        .route("/agents/{id}/heartbeat", post(health::heartbeat))
        .route("/agents/{id}/decide", post(health::decide))
        .route("/agents/{id}/terminate", post(health::terminate))
        .route("/agents/{id}/tasks/{task}", get(health::task_view))
        .route("/agents/{id}/tasks/{task}/recover", post(health::recover))
        // Checkpoints.
        .route(
            "/agents/{id}/tasks/{task}/checkpoints",
            post(checkpoints::put).get(checkpoints::list_task),
        )
        .route(
            "/agents/{id}/tasks/{task}/checkpoints/{cp}",
            get(checkpoints::get),
        )
        .route("/agents/{id}/checkpoints", get(checkpoints::list_agent))
        // Deployments (admin).
        .route("/deployments", get(deployments::list))
        .route(
            "/deployments/{provider}/{model}/trip",
            post(deployments::trip),
        )
        .route(
            "/deployments/{provider}/{model}/reset",
            post(deployments::reset),
        )
        // Health history (admin) and the dashboard.
        .route("/history", get(history::history))
        .route("/", get(dashboard::index))
        .route("/dashboard/{file}", get(dashboard::asset))
        .with_state(gw)
}

/// `router(gw)` plus `admin_extra` (routes that need the admin scope, such
/// as the event stream and the dead letters), behind the edge every route
/// shares ([`edge::wrap`]): the body limit, JSON 404/405 fallbacks and
/// error shaping.
pub fn app(gw: Arc<Gateway>, admin_extra: Router) -> Router {
    app_keyed(gw, admin_extra, Router::new())
}

/// [`app`] plus `keyed_extra`: routes any valid key may use (admin or
/// agent-scoped, as the chat routes), such as the MCP front. The caller's
/// scope is put in the request's extensions as a [`KeyScope`](hale_core::config::KeyScope) (`Admin` for
/// an admin key or a trusted loopback caller) for the route to honour.
pub fn app_keyed(gw: Arc<Gateway>, admin_extra: Router, keyed_extra: Router) -> Router {
    edge::wrap(gw.clone(), router(gw), admin_extra, keyed_extra)
}

/// Serves [`app`] until `shutdown` resolves, then drains in-flight requests.
/// Refuses to start (`PermissionDenied`) on a non-loopback address when no
/// keys are configured, unless `auth.insecure_no_auth` is set.
pub fn serve_with(
    gw: Arc<Gateway>,
    admin_extra: Router,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> BoxFuture<'static, std::io::Result<()>> {
    serve_keyed(gw, admin_extra, Router::new(), listener, shutdown)
}

/// [`serve_with`] plus routes any valid key may use (see [`app_keyed`]).
pub fn serve_keyed(
    gw: Arc<Gateway>,
    admin_extra: Router,
    keyed_extra: Router,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> BoxFuture<'static, std::io::Result<()>> {
    serve_boxed(gw, admin_extra, keyed_extra, listener, Box::pin(shutdown))
}

/// [`serve_keyed`]'s future, built here: the server's code (axum, hyper) is
/// compiled once, in this crate, not in each caller's ([`hale_store::BoxFut`]).
fn serve_boxed(
    gw: Arc<Gateway>,
    admin_extra: Router,
    keyed_extra: Router,
    listener: tokio::net::TcpListener,
    shutdown: BoxFuture<'static, ()>,
) -> BoxFuture<'static, std::io::Result<()>> {
    Box::pin(serve_keyed_inner(
        gw,
        admin_extra,
        keyed_extra,
        listener,
        shutdown,
    ))
}

async fn serve_keyed_inner(
    gw: Arc<Gateway>,
    admin_extra: Router,
    keyed_extra: Router,
    listener: tokio::net::TcpListener,
    shutdown: BoxFuture<'static, ()>,
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

/// Serves [`app`] with no admin extras; see [`serve_with`].
pub fn serve(
    gw: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> BoxFuture<'static, std::io::Result<()>> {
    serve_with(gw, Router::new(), listener, shutdown)
}
