//! The edge every route shares: auth, the admin layer, error shaping,
//! fallbacks and the body limit (docs/operations.md, "Who may call";
//! docs/http-api.md, "Errors").
//!
//! Auth runs first: a bearer key (or Anthropic's `x-api-key`, or Google's
//! `x-goog-api-key` or `key=` query parameter) maps to a scope ([`authorize`] → [`Caller`]); with no keys configured only direct
//! loopback clients are served (the rule is `hale_core::access`). Admin
//! endpoints need an admin key when keys exist ([`admin_refusal`], and the
//! [`admin_only`] layer for routes added by the binary).
//!
//! Before anything else, [`same_site_only`] refuses what a web page on the
//! operator's machine could send a hale without keys (the rule is
//! `hale_core::browser`): a `Host` hale does not answer to (421, DNS
//! rebinding) and an `Origin` that is not hale's own (403, a cross-site
//! request); and [`json_only`], on the model-call routes, a `POST` whose
//! body is not `application/json` (415, in keyed mode too).
//!
//! [`wrap`] puts the edge around the routes: the body limit
//! (`limits.max_request_bytes`), JSON answers for an unknown route (404) and
//! a wrong method (405), and [`shape_errors`], which gives every error no
//! handler shaped (axum's 413, 415, 422 and bad-query 400 rejections,
//! plain-text 5xx) the error shape of the route's dialect: Anthropic's on
//! `/v1/messages`, Google's under `/v1beta/` and on
//! `/v1/models/{model}:{action}`, OpenAI's everywhere else.

use crate::Gateway;
use crate::error::HaleError;
use crate::pipeline::Caller;
use crate::wire::dialect_of;
use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use hale_core::access::{self, Grant};
use hale_core::browser;
use hale_core::config::KeyScope;
use hale_proto::Dialect;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};

/// `routes` plus `admin_extra` (behind [`admin_only`]) and `keyed_extra`
/// (behind [`any_key`]), behind the edge every route shares, outermost
/// first: [`same_site_only`], the body limit, [`shape_errors`] and JSON
/// 404/405 fallbacks.
pub fn wrap(gw: Arc<Gateway>, routes: Router, admin_extra: Router, keyed_extra: Router) -> Router {
    let limit = gw.cfg.limits.max_request_bytes;
    let guarded = admin_extra.layer(axum::middleware::from_fn_with_state(gw.clone(), admin_only));
    let keyed = keyed_extra.layer(axum::middleware::from_fn_with_state(gw.clone(), any_key));
    routes
        .merge(guarded)
        .merge(keyed)
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn_with_state(limit, shape_errors))
        .layer(DefaultBodyLimit::max(
            usize::try_from(limit).unwrap_or(usize::MAX),
        ))
        .layer(axum::middleware::from_fn_with_state(gw, same_site_only))
}

/// Refuses, with no keys configured, a request whose `Host` hale does not
/// answer to (421 `misdirected_request`: a DNS-rebinding page's) or whose
/// `Origin` is not hale's own (403 `forbidden`: a cross-site page's), in
/// the route's error shape ([`browser::decide`]). With keys, or for a
/// request with neither header a browser would send, it passes.
async fn same_site_only(
    State(gw): State<Arc<Gateway>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if !browser::applies(&gw.cfg.auth) {
        return next.run(req).await;
    }
    // A value that is not text stands as U+FFFD, which no rule accepts.
    fn text(v: &HeaderValue) -> &str {
        v.to_str().unwrap_or("\u{fffd}")
    }
    // HTTP/2 names the host in `:authority`, which hyper keeps in the URI.
    let host = req
        .headers()
        .get(HOST)
        .map(text)
        .or_else(|| req.uri().authority().map(|a| a.as_str()));
    let origin = req.headers().get(ORIGIN).map(text);
    let refusal = match browser::decide(&gw.cfg.auth, host, origin) {
        Ok(()) => None,
        Err(r) => Some((r, r.message(host, origin))),
    };
    let Some((refusal, message)) = refusal else {
        return next.run(req).await;
    };
    let (status, kind) = match refusal {
        browser::Refusal::Host => (StatusCode::MISDIRECTED_REQUEST, "misdirected_request"),
        browser::Refusal::Origin => (StatusCode::FORBIDDEN, "forbidden"),
    };
    HaleError::new(status, kind, message).into_response(dialect_of(req.uri().path()))
}

/// On the model-call routes: refuses a `POST` whose body is not declared
/// `application/json` (415 `unsupported_media_type`, in the route's error
/// shape; [`browser::is_json`]) before it is read or authorized. Every
/// dialect's SDK and CLI sends JSON; a page can send `text/plain`, a form
/// or no content type cross-site without a preflight.
pub(super) async fn json_only(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let ct = req.headers().get(CONTENT_TYPE);
    if browser::is_json(ct.and_then(|v| v.to_str().ok())) {
        return next.run(req).await;
    }
    let got = match ct {
        Some(v) => format!("content-type {}", String::from_utf8_lossy(v.as_bytes())),
        None => "no content-type".to_owned(),
    };
    HaleError::from_status(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!("a model call's body must be JSON, sent with content-type: application/json (this request has {got})"),
    )
    .into_response(dialect_of(req.uri().path()))
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
pub(super) async fn admin_only(
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
pub(super) async fn any_key(
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

/// Resolves the caller (`hale_core::access::decide`); `admin` requires the
/// admin scope.
pub fn authorize(
    gw: &Gateway,
    peer: SocketAddr,
    headers: &HeaderMap,
    admin: bool,
) -> Result<Caller, HaleError> {
    authorize_with(gw, peer, headers, None, admin)
}

/// Google's API key header.
pub const GOOG_API_KEY: &str = "x-goog-api-key";

// The headers every call is authorized by, named once: a `&str` name is
// parsed again at every lookup (~300 instructions each, callgrind).
static X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
static X_GOOG_API_KEY: HeaderName = HeaderName::from_static(GOOG_API_KEY);
/// [`access::FORWARDING_HEADERS`] as header names.
static FORWARDING: LazyLock<Vec<HeaderName>> = LazyLock::new(|| {
    access::FORWARDING_HEADERS
        .iter()
        .map(|h| HeaderName::from_static(h))
        .collect()
});

/// [`authorize`], with the `key=` query parameter a Gemini client may
/// send its key in (`query_key`); the key is read from the first place
/// that holds one ([`access::presented_key`]).
pub fn authorize_with(
    gw: &Gateway,
    peer: SocketAddr,
    headers: &HeaderMap,
    query_key: Option<&str>,
    admin: bool,
) -> Result<Caller, HaleError> {
    let text = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let token = access::presented_key(
        text(&AUTHORIZATION).and_then(access::bearer_token),
        text(&X_API_KEY),
        text(&X_GOOG_API_KEY),
        query_key,
    );
    let req = access::Request {
        peer_loopback: access::is_loopback(peer.ip()),
        forwarded: FORWARDING.iter().any(|h| headers.contains_key(h)),
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

/// The refusal for a caller without the admin scope, if it lacks it.
pub fn admin_refusal(gw: &Gateway, peer: SocketAddr, headers: &HeaderMap) -> Option<Response> {
    authorize(gw, peer, headers, true)
        .err()
        .map(|e| e.into_response(Dialect::OpenAi))
}

/// `Some(response)` when the caller may not act as `agent`.
pub fn agent_refusal(
    gw: &Gateway,
    peer: SocketAddr,
    headers: &HeaderMap,
    agent: &str,
) -> Option<Response> {
    let caller: Caller = match authorize(gw, peer, headers, false) {
        Ok(c) => c,
        Err(e) => return Some(e.into_response(Dialect::OpenAi)),
    };
    if let Some(allowed) = &caller.agents
        && !allowed.iter().any(|a| a == agent)
    {
        return Some(
            HaleError::forbidden(format!("this key may not act as agent {agent}"))
                .into_response(Dialect::OpenAi),
        );
    }
    None
}

/// 400 with `msg`.
pub fn bad(msg: impl Into<String>) -> Response {
    HaleError::bad_request(msg).into_response(Dialect::OpenAi)
}

/// 500 for a store error, as plain text (shaped by [`shape_errors`]).
pub fn store_err(e: impl std::fmt::Display) -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("store error: {e}"),
    )
        .into_response()
}
