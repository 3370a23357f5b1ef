//! The chat routes: a dialect's request in, the turn pipeline
//! ([`crate::pipeline::handle_chat`]), a response or an SSE stream out. A
//! handler per wire dialect; each authorizes at the edge first.

use super::edge::authorize;
use crate::Gateway;
use crate::pipeline;
use crate::proto::{self, Dialect};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::Arc;

/// `POST /v1/chat/completions`: OpenAI's dialect.
pub(super) async fn openai(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    chat(gw, Dialect::OpenAi, peer, headers, body).await
}

/// `POST /v1/messages`: Anthropic's dialect.
pub(super) async fn anthropic(
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

/// `GET /v1/models`: the routes' names and the providers' models.
pub(super) async fn models(
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
