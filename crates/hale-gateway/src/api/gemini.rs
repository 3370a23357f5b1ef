//! The Gemini client routes: Google's Generative Language API as agents
//! (Gemini CLI, the `google-genai` SDKs) call it, under `/v1beta/` and
//! `/v1/`.
//!
//! - `POST …/models/{model}:generateContent` and
//!   `:streamGenerateContent?alt=sse`: the turn pipeline, as every chat
//!   route ([`crate::pipeline::handle`]), answered in Gemini's shape; the
//!   model in the URL is the route or model name. A stream asked for
//!   without `alt=sse` is Google's default form, one JSON array of the
//!   chunks written as it grows ([`Framing::JsonArray`]).
//! - `POST …/models/{model}:countTokens`: hale's token count of the request
//!   (`hale_tokens`), `{"totalTokens": N}`, behind the turn's agent gate
//!   ([`crate::pipeline::identify`]) though no provider is called.
//! - `GET …/models` and `GET …/models/{model}`: the routes' and providers'
//!   model names in Google's `Model` shape. `GET /v1/models` is OpenAI's
//!   list too: it answers in Google's shape only for a Google client
//!   ([`hale_core::gemini::is_google_client`]).
//!
//! Axum cannot route on a `:` inside a segment, so the last segment is
//! taken whole and split on its last `:` ([`hale_core::gemini::client_action`]);
//! an unknown action is a 404 in Google's error shape. A Gemini client's key
//! is its `x-goog-api-key` header or `key=` query parameter, accepted
//! wherever a bearer key is ([`super::edge::authorize_with`]).

use super::chat::model_ids;
use super::edge::{GOOG_API_KEY, authorize_with};
use crate::Gateway;
use crate::error::HaleError;
use crate::pipeline::{self, ChatCall};
use crate::wire::Framing;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use hale_core::gemini::{ClientAction, StreamForm};
use hale_proto::Dialect;
use std::net::SocketAddr;
use std::sync::Arc;

/// The query parameters a Gemini client may send, as pairs.
fn query(uri: &Uri) -> Vec<(String, String)> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|q| q.0)
        .unwrap_or_default()
}

fn param<'a>(q: &'a [(String, String)], name: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// `POST /v1beta/models/{model}:{action}` (and under `/v1/`).
pub(super) async fn action(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(segment): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some((model, action)) = hale_core::gemini::client_action(&segment) else {
        return HaleError::not_found(format!(
            "no route for POST {}: hale serves models/{{model}}:generateContent, :streamGenerateContent and :countTokens",
            uri.path()
        ))
        .into_response(Dialect::Gemini);
    };
    let q = query(&uri);
    let caller = match authorize_with(&gw, peer, &headers, param(&q, "key"), false) {
        Ok(caller) => caller,
        Err(e) => return e.into_response(Dialect::Gemini),
    };
    let (stream, framing) = match action {
        ClientAction::Generate | ClientAction::CountTokens => (false, Framing::Sse),
        ClientAction::StreamGenerate => match hale_core::gemini::stream_form(param(&q, "alt")) {
            Ok(StreamForm::Sse) => (true, Framing::Sse),
            Ok(StreamForm::JsonArray) => (true, Framing::JsonArray),
            Err(alt) => {
                return HaleError::bad_request(format!(
                    "unsupported alt={alt}: hale streams Gemini answers as alt=sse or, without alt, as a JSON array"
                ))
                .into_response(Dialect::Gemini);
            }
        },
    };
    let sent = match hale_proto::parse_sent(body.clone()) {
        Ok(v) => v,
        Err(e) => {
            return HaleError::bad_request(format!("request body is not valid JSON: {e}"))
                .into_response(Dialect::Gemini);
        }
    };
    if action == ClientAction::CountTokens {
        // No provider is called, but the route is a model route: the same
        // agent gate as a turn's (an agent the key may not act as is a 403).
        if let Err(e) = pipeline::identify(&caller, &headers) {
            return e.into_response(Dialect::Gemini);
        }
        return count_tokens(sent, &headers, model);
    }
    let req = match hale_proto::parse_gemini_sent(sent, &headers, model, stream) {
        Ok(r) => r,
        Err(e) => {
            return HaleError::bad_request(format!("invalid request: {e}"))
                .into_response(Dialect::Gemini);
        }
    };
    let call = ChatCall {
        dialect: Dialect::Gemini,
        caller,
        headers,
        body,
        req,
        framing,
    };
    // Boxed, as in `chat`: the turn's future is large and axum moves it.
    Box::pin(pipeline::handle(gw, call)).await
}

/// `:countTokens`: the body is a `generateContent` body, or one inside
/// `generateContentRequest` (as the SDKs send it).
fn count_tokens(sent: hale_proto::Sent, headers: &HeaderMap, model: &str) -> Response {
    let inner = sent
        .value
        .get("generateContentRequest")
        .filter(|v| v.is_object())
        .cloned();
    let sent = match inner {
        Some(value) => hale_proto::Sent { value, raw: None },
        None => sent,
    };
    match hale_proto::parse_gemini_sent(sent, headers, model, false) {
        Ok(req) => {
            let total = crate::turn::input_tokens_estimate(&req);
            axum::Json(hale_proto::gemini::render_count(total)).into_response()
        }
        Err(e) => {
            HaleError::bad_request(format!("invalid request: {e}")).into_response(Dialect::Gemini)
        }
    }
}

/// `GET /v1beta/models`: the routes' names and the providers' models.
pub(super) async fn models(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let q = query(&uri);
    if let Err(e) = authorize_with(&gw, peer, &headers, param(&q, "key"), false) {
        return e.into_response(Dialect::Gemini);
    }
    axum::Json(hale_proto::gemini::render_models(&model_ids(&gw))).into_response()
}

/// `GET /v1/models`: Google's list for a Google client, OpenAI's for any other.
pub(super) async fn models_either(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if google_client(&uri, &headers) {
        models(State(gw), ConnectInfo(peer), uri, headers).await
    } else {
        super::chat::models(State(gw), ConnectInfo(peer), headers).await
    }
}

fn google_client(uri: &Uri, headers: &HeaderMap) -> bool {
    let q = query(uri);
    hale_core::gemini::is_google_client(
        headers.contains_key(GOOG_API_KEY),
        param(&q, "key").is_some(),
        headers.contains_key("x-goog-api-client"),
    )
}

/// `GET /v1beta/models/{model}` (and `/v1/models/{model}`): the model in
/// Google's shape. Any name is answered: hale serves a name that is no
/// route through the agent's chain. On `/v1/` a caller that is not a
/// Google client gets OpenAI's model object.
pub(super) async fn model(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(model): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let google = uri.path().starts_with("/v1beta/") || google_client(&uri, &headers);
    let dialect = if google {
        Dialect::Gemini
    } else {
        Dialect::OpenAi
    };
    let q = query(&uri);
    if let Err(e) = authorize_with(&gw, peer, &headers, param(&q, "key"), false) {
        return e.into_response(dialect);
    }
    let model = model.strip_prefix("models/").unwrap_or(&model);
    if google {
        axum::Json(hale_proto::gemini::render_model(model)).into_response()
    } else {
        let list = hale_proto::openai::render_models(&[model.to_owned()]);
        axum::Json(list["data"][0].clone()).into_response()
    }
}
