//! The chat routes: a dialect's request in (auth at the edge, then the body
//! parsed into the canonical [`ChatCall`]), the turn pipeline
//! ([`crate::pipeline::handle`]), a response or an SSE stream out (rendered
//! in the caller's dialect by `crate::wire`). A handler per wire dialect;
//! Gemini's, whose URL names the model and the action, are in [`super::gemini`].

use super::edge::authorize;
use crate::Gateway;
use crate::error::HaleError;
use crate::pipeline::{self, ChatCall};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use hale_proto::Dialect;
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

/// `POST /v1/responses`: the OpenAI Responses API's dialect.
pub(super) async fn responses(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    chat(gw, Dialect::Responses, peer, headers, body).await
}

/// Auth, then the request parsed from its dialect, then the turn.
async fn chat(
    gw: Arc<Gateway>,
    dialect: Dialect,
    peer: SocketAddr,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let caller = match authorize(&gw, peer, &headers, false) {
        Ok(caller) => caller,
        Err(e) => return e.into_response(dialect),
    };
    let sent = match hale_proto::parse_sent(body.clone()) {
        Ok(v) => v,
        Err(e) => {
            return HaleError::bad_request(format!("request body is not valid JSON: {e}"))
                .into_response(dialect);
        }
    };
    // The request keeps the client's JSON and provider-feature headers (same-dialect fidelity).
    let req = match hale_proto::parse_request_sent(dialect, sent, &headers) {
        Ok(r) => r,
        Err(e) => {
            return HaleError::bad_request(format!("invalid request: {e}")).into_response(dialect);
        }
    };
    let call = ChatCall {
        dialect,
        caller,
        headers,
        body,
        req,
        framing: crate::wire::Framing::Sse,
    };
    // Boxed: the turn's future is ~8 KB (the attempt's HTTP client state
    // in it), and axum's layers move the handler's future several times
    // before its first poll; boxed, each move copies a pointer (memcpy
    // was ~9k instructions per turn under callgrind).
    Box::pin(pipeline::handle(gw, call)).await
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
    axum::Json(hale_proto::openai::render_models(&model_ids(&gw))).into_response()
}

/// The names a model list answers: the routes' and the providers' models.
pub(super) fn model_ids(gw: &Gateway) -> Vec<String> {
    let mut ids: Vec<String> = gw.cfg.routes.keys().cloned().collect();
    for p in &gw.cfg.providers {
        ids.push(p.default_model.clone());
        ids.extend(p.models.iter().cloned());
    }
    ids.sort();
    ids.dedup();
    ids
}
