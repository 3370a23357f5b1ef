//! The HTTP side: a hand-rolled accept loop in front of an axum router, the
//! chat handlers that pick a fault and carry it out, and the `/chaos/*`
//! control endpoints.
//!
//! Why an own accept loop rather than `axum::serve`: the `reset` fault must
//! close a connection *before any response header*, which a handler cannot
//! do. Each connection is served by hyper in its own task, and the task
//! selects on the connection, a per-connection kill switch and the server's
//! shutdown. The handler for a `reset` request flips the switch (found in the
//! request's extensions) and waits; the task then drops the connection, and
//! the client sees the socket close with no status line.
//!
//! A response is planned as a list of steps (frame, sleep, flush, fail) and
//! played by a small stream, so cut, stall, malformed and slow-first-token are
//! all just different plans. A `Fail` step makes the body error, which makes
//! hyper abort the connection mid-body: that is how `cut` drops a stream.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tower::ServiceExt;

use crate::answer::{self, Answer, ChatRequest};
use crate::azure::{self, Flavor};
use crate::bedrock::{self, Api};
use crate::fault::{self, Fault, FaultSpec, InBand};
use crate::frame::Ctx;
use crate::request::{APPLIED_HEADER, COMPACTION_HEADER, ConnKill, FAULT_HEADER};
use crate::state::Shared;
use crate::task::{self, Task, TaskRef};
use crate::wire::{self, Dialect, ErrorKind};
use crate::{gemini, responses, vertex};

/// Largest request body accepted (long contexts are the point of some tests).
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Accepts connections until `shutdown` resolves, then drops every open connection.
pub(crate) async fn run(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let app = router(shared);
    let (stop_tx, stop_rx) = watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(serve_connection(stream, app.clone(), stop_rx.clone()));
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off briefly, keep serving.
                    tracing::debug!(error = %e, "hale-chaos: accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
    drop(stop_tx);
    Ok(())
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    app: Router,
    mut stop: watch::Receiver<()>,
) {
    let kill = Arc::new(Notify::new());
    let ext = ConnKill(kill.clone());
    let svc = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(ext.clone());
        app.clone().oneshot(req)
    });
    let conn =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
    tokio::select! {
        _ = conn => {}
        () = kill.notified() => {}
        _ = stop.changed() => {}
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(openai_chat))
        .route("/chat/completions", post(openai_chat))
        .route("/v1/messages", post(anthropic_chat))
        .route("/v1/responses", post(responses_create))
        .route("/responses", post(responses_create))
        .route("/v1beta/models/{action}", post(gemini_generate))
        .route(
            "/openai/deployments/{deployment}/chat/completions",
            post(azure_deployment_chat),
        )
        .route(
            "/openai/deployments/{deployment}/responses",
            post(azure_deployment_responses),
        )
        .route("/openai/v1/chat/completions", post(azure_v1_chat))
        .route("/openai/v1/responses", post(azure_v1_responses))
        .route(
            "/v1/projects/{project}/locations/{location}/publishers/{publisher}/models/{action}",
            post(vertex_predict),
        )
        .route("/token", post(vertex_token))
        .route("/chaos/vertex/tokens", get(vertex_tokens))
        .route("/chaos/vertex/revoke", post(vertex_revoke))
        .route("/model/{model}/{op}", post(bedrock_call))
        .route("/", post(sts))
        .route("/v1/models", get(models))
        .route("/chaos/stats", get(stats))
        .route("/chaos/requests", get(requests))
        .route("/chaos/reset", post(reset))
        .route("/chaos/down", post(down))
        .route("/chaos/override", post(set_override))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(shared)
        .merge(crate::tools::router(Default::default()))
}

async fn openai_chat(
    State(s): State<Arc<Shared>>,
    kill: Option<Extension<ConnKill>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    chat(Dialect::OpenAi, Flavor::Plain, s, kill, headers, body).await
}

async fn anthropic_chat(
    State(s): State<Arc<Shared>>,
    kill: Option<Extension<ConnKill>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    chat(Dialect::Anthropic, Flavor::Plain, s, kill, headers, body).await
}

async fn responses_create(
    State(s): State<Arc<Shared>>,
    kill: Option<Extension<ConnKill>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    chat(Dialect::Responses, Flavor::Plain, s, kill, headers, body).await
}

/// An Azure request: its credentials and `api-version` checked
/// ([`azure::admit`]), then the one chat path with Azure's flavour.
async fn azure_call(
    dialect: Dialect,
    deployment: Option<String>,
    query: Option<String>,
    s: Arc<Shared>,
    kill: Option<Extension<ConnKill>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err((status, err)) = azure::admit(
        &headers,
        query.as_deref(),
        deployment.is_some(),
        s.azure_key.as_deref(),
    ) {
        s.record_fault("azure-refused");
        return json_response(status, err, "azure-refused");
    }
    chat(
        dialect,
        Flavor::Azure { deployment },
        s,
        kill,
        headers,
        body,
    )
    .await
}

async fn azure_deployment_chat(
    State(s): State<Arc<Shared>>,
    Path(deployment): Path<String>,
    RawQuery(query): RawQuery,
    kill: Option<Extension<ConnKill>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    azure_call(
        Dialect::OpenAi,
        Some(deployment),
        query,
        s,
        kill,
        headers,
        body,
    )
    .await
}

async fn azure_deployment_responses(
    State(s): State<Arc<Shared>>,
    Path(deployment): Path<String>,
    RawQuery(query): RawQuery,
    kill: Option<Extension<ConnKill>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    azure_call(
        Dialect::Responses,
        Some(deployment),
        query,
        s,
        kill,
        headers,
        body,
    )
    .await
}

async fn azure_v1_chat(
    State(s): State<Arc<Shared>>,
    RawQuery(query): RawQuery,
    kill: Option<Extension<ConnKill>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    azure_call(Dialect::OpenAi, None, query, s, kill, headers, body).await
}

async fn azure_v1_responses(
    State(s): State<Arc<Shared>>,
    RawQuery(query): RawQuery,
    kill: Option<Extension<ConnKill>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    azure_call(Dialect::Responses, None, query, s, kill, headers, body).await
}

/// `POST /v1beta/models/{model}:generateContent` (or `:streamGenerateContent`):
/// Google's dialect. A request without `x-goog-api-key` is refused as Google
/// refuses it (403 `PERMISSION_DENIED`).
async fn gemini_generate(
    State(s): State<Arc<Shared>>,
    kill: Option<Extension<ConnKill>>,
    axum::extract::Path(action): axum::extract::Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some((model, stream)) = gemini::split_action(&action) else {
        let msg = format!(
            "hale-chaos: no method in `{action}` (generateContent or streamGenerateContent)"
        );
        return json_response(
            404,
            gemini::error(404, "NOT_FOUND", &msg, serde_json::json!([])),
            "bad-request",
        );
    };
    if !headers.contains_key(gemini::KEY_HEADER) {
        const NO_KEY: &str = "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.";
        return json_response(
            403,
            gemini::error(403, "PERMISSION_DENIED", NO_KEY, serde_json::json!([])),
            "no-key",
        );
    }
    let url = Some((model.to_owned(), stream));
    chat_with(Dialect::Gemini, Flavor::Plain, s, kill, headers, body, url).await
}

/// `POST /v1/projects/{p}/locations/{l}/publishers/{publisher}/models/{model}:{method}`:
/// Vertex AI. The bearer must be a token this server minted (else Google's
/// 401), the body what Vertex takes ([`vertex::body_problem`]); then the one
/// chat path, in Google's dialect or Anthropic's.
async fn vertex_predict(
    State(s): State<Arc<Shared>>,
    kill: Option<Extension<ConnKill>>,
    Path((_project, _location, publisher, action)): Path<(String, String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some((model, method)) = vertex::split_action(&publisher, &action) else {
        let msg = format!("hale-chaos: no such Vertex method `{publisher}/{action}`");
        return json_response(
            404,
            gemini::error(404, "NOT_FOUND", &msg, serde_json::json!([])),
            "bad-request",
        );
    };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let admitted = s
        .vertex_tokens
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .admits(bearer);
    if !admitted {
        s.record_fault("vertex-refused");
        return json_response(401, vertex::unauthenticated(), "vertex-refused");
    }
    let dialect = match method {
        vertex::Method::GenerateContent | vertex::Method::StreamGenerateContent => Dialect::Gemini,
        vertex::Method::RawPredict | vertex::Method::StreamRawPredict => Dialect::Anthropic,
    };
    if let Some(problem) = vertex::body_problem(method, &body) {
        let body = match dialect {
            Dialect::Gemini => {
                gemini::error(400, "INVALID_ARGUMENT", &problem, serde_json::json!([]))
            }
            Dialect::OpenAi | Dialect::Anthropic | Dialect::Responses => {
                wire::bad_request_body(dialect, &problem)
            }
        };
        return json_response(400, body, "bad-request");
    }
    let url = Some((model.to_owned(), method.stream()));
    chat_with(dialect, Flavor::Vertex, s, kill, headers, body, url).await
}

/// `POST /token`: the OAuth2 JWT-bearer grant of a service-account key
/// ([`vertex::check_assertion`]); a token this server then accepts.
async fn vertex_token(
    State(s): State<Arc<Shared>>,
    axum::Form(form): axum::Form<std::collections::HashMap<String, String>>,
) -> Response {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    match vertex::check_assertion(
        form.get("grant_type").map(String::as_str),
        form.get("assertion").map(String::as_str),
        s.vertex_key.as_ref(),
        now,
    ) {
        Ok(claims) => {
            let token = s
                .vertex_tokens
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .mint(&s.tag, claims);
            json_response(200, vertex::token_body(&token), "token")
        }
        Err(why) => json_response(400, vertex::grant_error(&why), "token-refused"),
    }
}

/// `GET /chaos/vertex/tokens`: tokens minted and valid, the grants' claims,
/// requests refused for their token.
async fn vertex_tokens(State(s): State<Arc<Shared>>) -> Json<serde_json::Value> {
    Json(
        s.vertex_tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .view(),
    )
}

/// `POST /chaos/vertex/revoke`: every token minted so far is refused from
/// now on (a client must fetch a new one).
async fn vertex_revoke(State(s): State<Arc<Shared>>) -> StatusCode {
    s.vertex_tokens
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .revoke();
    StatusCode::NO_CONTENT
}

/// `POST /model/{modelId}/{converse|converse-stream|invoke|invoke-with-response-stream}`:
/// AWS Bedrock. The signature (or API key) is checked first
/// ([`bedrock::admit`]); a refused one is Bedrock's 403.
async fn bedrock_call(
    State(s): State<Arc<Shared>>,
    kill: Option<Extension<ConnKill>>,
    Path((model, op)): Path<(String, String)>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some((api, stream)) = bedrock::split_op(&op) else {
        return bedrock_error(
            404,
            "UnknownOperationException",
            &format!("hale-chaos: no Bedrock operation `{op}`"),
            "bad-request",
        );
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost");
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let signed = bedrock::Signed {
        method: "POST",
        url: format!("http://{host}{path}"),
        headers: &headers,
        body: &body,
    };
    if let Err((exception, message)) = bedrock::admit(&signed, s.bedrock_key.as_deref()) {
        s.record_fault("bedrock-refused");
        return bedrock_error(403, exception, &message, "bedrock-refused");
    }
    let dialect = match api {
        // A Converse answer is built as an OpenAI one, framed by `bedrock`.
        Api::Converse => Dialect::OpenAi,
        Api::Invoke => Dialect::Anthropic,
    };
    let url = Some((model, stream));
    chat_with(
        dialect,
        Flavor::Bedrock { api },
        s,
        kill,
        headers,
        body,
        url,
    )
    .await
}

fn bedrock_error(status: u16, exception: &str, message: &str, applied: &'static str) -> Response {
    let body = serde_json::json!({ "message": message }).to_string();
    let mut r = json_response(status, body, applied);
    if let Ok(v) = HeaderValue::from_str(&bedrock::error_type_header(exception)) {
        r.headers_mut().insert("x-amzn-errortype", v);
    }
    r
}

/// `POST /`: a loopback STS for AssumeRoleWithWebIdentity ([`bedrock::assume_role`]).
async fn sts(body: Bytes) -> Response {
    let (status, xml) =
        match bedrock::assume_role(&String::from_utf8_lossy(&body), SystemTime::now()) {
            Ok(xml) => (200, xml),
            Err(e) => e,
        };
    let mut r = Response::new(Body::from(xml));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/xml"));
    r
}

async fn stats(State(s): State<Arc<Shared>>) -> Json<crate::Stats> {
    Json(s.stats())
}

async fn requests(State(s): State<Arc<Shared>>) -> Json<Vec<serde_json::Value>> {
    Json(crate::state::parse_bodies(&s.bodies()))
}

async fn reset(State(s): State<Arc<Shared>>) -> StatusCode {
    s.reset();
    StatusCode::NO_CONTENT
}

/// `POST /chaos/override {"model": M, "fault": SPEC | null}`: from now on
/// requests for `M` get `SPEC` (before any script step or the model name's
/// own fault; an `x-chaos-fault` header still wins), until cleared with
/// `null` or a reset. Lets a soak change faults while traffic flows.
async fn set_override(
    State(s): State<Arc<Shared>>,
    axum::Json(body): axum::Json<OverrideBody>,
) -> Response {
    if let Some(spec) = &body.fault
        && let Err(e) = fault::parse_lenient(spec)
    {
        let msg = format!("hale-chaos: {e}");
        return json_response(
            400,
            wire::bad_request_body(Dialect::OpenAi, &msg),
            "bad-spec",
        );
    }
    s.set_override(&body.model, body.fault);
    StatusCode::NO_CONTENT.into_response()
}

#[derive(serde::Deserialize)]
struct OverrideBody {
    model: String,
    fault: Option<String>,
}

async fn down(State(s): State<Arc<Shared>>) -> StatusCode {
    s.bring_down();
    StatusCode::NO_CONTENT
}

async fn models(headers: HeaderMap) -> Response {
    let anthropic = headers.contains_key("anthropic-version") || headers.contains_key("x-api-key");
    let ids = std::iter::once("chaos").chain(fault::FAULT_NAMES.iter().copied());
    let body = if anthropic {
        let data: Vec<_> = ids
            .map(|id| {
                serde_json::json!({"type": "model", "id": id, "display_name": id,
                                   "created_at": "2025-01-01T00:00:00Z"})
            })
            .collect();
        serde_json::json!({"data": data, "has_more": false, "first_id": "chaos", "last_id": "summarize"})
    } else {
        let data: Vec<_> = ids
            .map(|id| serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": "hale-chaos"}))
            .collect();
        serde_json::json!({"object": "list", "data": data})
    };
    Json(body).into_response()
}

fn json_response(status: u16, body: String, applied: &'static str) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(APPLIED_HEADER, HeaderValue::from_static(applied));
    r
}

fn error_response(
    flavor: &Flavor,
    dialect: Dialect,
    kind: ErrorKind,
    applied: &'static str,
) -> Response {
    match flavor {
        Flavor::Plain | Flavor::Vertex => json_response(
            kind.status_in(dialect),
            wire::error_body(dialect, kind),
            applied,
        ),
        Flavor::Azure { .. } => {
            let (status, body) = azure::error(kind);
            json_response(status, body, applied)
        }
        Flavor::Bedrock { .. } => {
            let (status, exception, body) = bedrock::error(kind);
            let mut r = json_response(status, body, applied);
            if let Ok(v) = HeaderValue::from_str(&bedrock::error_type_header(exception)) {
                r.headers_mut().insert("x-amzn-errortype", v);
            }
            r
        }
    }
}

/// The request headers that carry a credential, echoed by `auth-echo`.
const CREDENTIAL_HEADERS: [&str; 4] = ["authorization", "api-key", "x-goog-api-key", "x-api-key"];

/// `auth-echo`: the provider's 401 in its flavor's shape, its message
/// followed by every credential header the request carried, as it came —
/// the upstream (or proxy) that hands a client's key back in its error.
fn auth_echo(
    flavor: &Flavor,
    dialect: Dialect,
    headers: &HeaderMap,
    applied: &'static str,
) -> Response {
    let (body, exception) = match flavor {
        Flavor::Plain | Flavor::Vertex => (wire::error_body(dialect, ErrorKind::Auth), None),
        Flavor::Azure { .. } => (azure::error(ErrorKind::Auth).1, None),
        Flavor::Bedrock { .. } => {
            let (_, exception, body) = bedrock::error(ErrorKind::Auth);
            (body, Some(exception))
        }
    };
    let carried: Vec<String> = CREDENTIAL_HEADERS
        .iter()
        .filter_map(|h| {
            let v = headers.get(*h)?.to_str().ok()?;
            Some(format!("{h}: {v}"))
        })
        .collect();
    let echo = format!(" (the request carried {})", carried.join(", "));
    let mut v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    // OpenAI's, Anthropic's, Google's and Azure's `error.message`; Bedrock's `message`.
    let at = match v.pointer("/error/message") {
        Some(_) => "/error/message",
        None => "/message",
    };
    if let Some(serde_json::Value::String(m)) = v.pointer_mut(at) {
        m.push_str(&echo);
    }
    let mut r = json_response(401, v.to_string(), applied);
    if let Some(e) = exception
        && let Ok(h) = HeaderValue::from_str(&bedrock::error_type_header(e))
    {
        r.headers_mut().insert("x-amzn-errortype", h);
    }
    r
}

/// One chat request: read it, count it, pick the fault, carry it out.
async fn chat(
    dialect: Dialect,
    flavor: Flavor,
    shared: Arc<Shared>,
    kill: Option<Extension<ConnKill>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    chat_with(dialect, flavor, shared, kill, headers, body, None).await
}

/// [`chat`], with the model and streaming a Gemini URL names (`url`).
async fn chat_with(
    dialect: Dialect,
    flavor: Flavor,
    shared: Arc<Shared>,
    kill: Option<Extension<ConnKill>>,
    headers: HeaderMap,
    body: Bytes,
    url: Option<(String, bool)>,
) -> Response {
    let read = match (dialect, &url) {
        _ if matches!(flavor, Flavor::Bedrock { .. }) => match (&flavor, &url) {
            (Flavor::Bedrock { api: Api::Converse }, Some((model, stream))) => {
                bedrock::read_converse(&body, model, *stream).map(|r| (r, serde_json::Map::new()))
            }
            (Flavor::Bedrock { api: Api::Invoke }, Some((model, stream))) => {
                read_invoke(&body, model, *stream).map(|r| (r, serde_json::Map::new()))
            }
            _ => Err("no model in the URL".to_owned()),
        },
        (Dialect::OpenAi, _) | (Dialect::Anthropic, None) => {
            serde_json::from_slice::<ChatRequest>(&body)
                .map(|r| (r, serde_json::Map::new()))
                .map_err(|e| e.to_string())
        }
        // Vertex's rawPredict: the URL names the model and the method whether to stream.
        (Dialect::Anthropic, Some((model, stream))) => serde_json::from_slice::<ChatRequest>(&body)
            .map(|mut r| {
                r.model = Some(model.clone());
                r.stream = Some(*stream);
                (r, serde_json::Map::new())
            })
            .map_err(|e| e.to_string()),
        (Dialect::Responses, _) => responses::read_request(&body),
        (Dialect::Gemini, Some((model, stream))) => {
            gemini::read_request(&body, model, *stream).map(|r| (r, serde_json::Map::new()))
        }
        (Dialect::Gemini, None) => Err("no model in the URL".to_owned()),
    };
    let (mut req, echo) = match read {
        Ok(r) => r,
        Err(e) => {
            let msg = format!("hale-chaos: cannot read the request body: {e}");
            return json_response(400, wire::bad_request_body(dialect, &msg), "bad-request");
        }
    };
    // On an Azure deployment URL the deployment is the model: it picks the
    // fault and names the answer's model, whatever the body says.
    if let Flavor::Azure {
        deployment: Some(d),
    } = &flavor
    {
        req.model = Some(d.clone());
    }
    let model = req.model.as_deref().unwrap_or("");
    let header = headers.get(FAULT_HEADER).and_then(|v| v.to_str().ok());
    let key: Cow<'_, str> = match header {
        Some(h) => Cow::Owned(format!("{model}\u{1f}{h}")),
        None => Cow::Borrowed(model),
    };
    let now = Instant::now();
    let seen = shared.record(model, &key, &body, now);

    let parsed;
    let ok_spec;
    let overridden = shared.override_for(model);
    let spec: &FaultSpec = match (
        header.or(overridden.as_deref()),
        shared
            .script
            .as_ref()
            .and_then(|s| s.step_for(model, seen.n)),
    ) {
        (Some(h), _) => match fault::parse_lenient(h) {
            Ok(Some(s)) => {
                parsed = s;
                &parsed
            }
            Ok(None) => {
                ok_spec = FaultSpec::ok();
                &ok_spec
            }
            Err(e) => {
                shared.record_fault("bad-spec");
                let msg = format!("hale-chaos: {e}");
                return json_response(400, wire::bad_request_body(dialect, &msg), "bad-spec");
            }
        },
        (None, Some(step)) => step,
        (None, None) => match fault::parse_lenient(model) {
            Ok(Some(s)) => {
                parsed = s;
                &parsed
            }
            Ok(None) => {
                ok_spec = FaultSpec::ok();
                &ok_spec
            }
            Err(e) => {
                shared.record_fault("bad-spec");
                let msg = format!("hale-chaos: {e}");
                return json_response(400, wire::bad_request_body(dialect, &msg), "bad-spec");
            }
        },
    };

    let fault = effective_fault(spec, &req, &shared, seen, now);
    let play = Play::of(spec, model, &req, &headers, fault);
    // A Responses request continuing a response this server does not hold is
    // OpenAI's 404, where an answer would otherwise be (an error fault wins).
    if dialect == Dialect::Responses
        && answers(fault, dialect)
        && let Some(prev) = echo.get("previous_response_id").and_then(|v| v.as_str())
        && !shared.holds_response(prev)
    {
        const NOT_FOUND: &str = "previous-response-not-found";
        shared.record_fault(NOT_FOUND);
        return json_response(404, responses::not_found_body(prev), NOT_FOUND);
    }
    let applied = fault.name();
    shared.record_fault(applied);

    match fault {
        Fault::RateLimit { retry_after } if flavor == Flavor::Vertex => {
            json_response(429, vertex::rate_limit_body(*retry_after), applied)
        }
        Fault::RateLimit { retry_after } => {
            let mut r = error_response(&flavor, dialect, ErrorKind::RateLimit, applied);
            if let Some(secs) = retry_after {
                match flavor {
                    Flavor::Plain | Flavor::Vertex => {
                        r.headers_mut()
                            .insert(header::RETRY_AFTER, HeaderValue::from(*secs));
                    }
                    Flavor::Azure { .. } => azure::retry_headers(r.headers_mut(), *secs),
                    // Bedrock sends no retry header.
                    Flavor::Bedrock { .. } => {}
                }
            }
            r
        }
        Fault::Error500 => error_response(&flavor, dialect, ErrorKind::Server500, applied),
        Fault::Error503 | Fault::Down { .. } | Fault::DownUntilReset | Fault::Flaky { .. } => {
            error_response(&flavor, dialect, ErrorKind::Unavailable503, applied)
        }
        Fault::Error529 => error_response(&flavor, dialect, ErrorKind::Overloaded529, applied),
        Fault::ContextOverflow { .. } => {
            error_response(&flavor, dialect, ErrorKind::ContextOverflow, applied)
        }
        Fault::ContentFilter => match dialect {
            Dialect::OpenAi | Dialect::Anthropic | Dialect::Responses => {
                error_response(&flavor, dialect, ErrorKind::ContentFilter, applied)
            }
            // Google blocks with a 200 (see `gemini::blocked`).
            Dialect::Gemini => gemini_blocked(&req, body.len(), applied),
        },
        Fault::Auth => error_response(&flavor, dialect, ErrorKind::Auth, applied),
        Fault::AuthEcho => auth_echo(&flavor, dialect, &headers, applied),
        Fault::NoPrefill => match dialect {
            Dialect::OpenAi | Dialect::Anthropic => {
                error_response(&flavor, dialect, ErrorKind::NoPrefill, applied)
            }
            // The Responses API has no prefill: a trailing assistant message is
            // no error, and the answer starts afresh (see `answer`); a
            // trailing Gemini `model` turn likewise.
            Dialect::Responses | Dialect::Gemini => answer(
                dialect,
                &flavor,
                &shared,
                &req,
                echo,
                body.len(),
                spec.tokens,
                fault,
                &play,
            ),
        },
        Fault::Reset => {
            if let Some(Extension(k)) = kill {
                k.0.notify_one();
            }
            // The connection task drops the socket; this future is dropped with it.
            std::future::pending().await
        }
        Fault::Hang => std::future::pending().await,
        Fault::Ok
        | Fault::SlowFirstToken { .. }
        | Fault::Cut { .. }
        | Fault::Stall { .. }
        | Fault::SlowStream { .. }
        | Fault::Malformed { .. }
        | Fault::NoDone
        | Fault::StreamError { .. }
        | Fault::Tool { .. }
        | Fault::Summarize => answer(
            dialect,
            &flavor,
            &shared,
            &req,
            echo,
            body.len(),
            spec.tokens,
            fault,
            &play,
        ),
    }
}

/// What an answering request's content is: hale's compaction gets a
/// summary (it carries [`COMPACTION_HEADER`]; so does the `summarize`
/// fault), a task's request its next move, any other the plain answer.
enum Play {
    Summary,
    Task(Task),
    Plain,
}

impl Play {
    fn of(
        spec: &FaultSpec,
        model: &str,
        req: &ChatRequest,
        headers: &HeaderMap,
        fault: &Fault,
    ) -> Play {
        if matches!(fault, Fault::Summarize) || headers.contains_key(COMPACTION_HEADER) {
            return Play::Summary;
        }
        // The task of the spec, else of the model name (a header, an
        // override or a script step shapes a task's answers too).
        let named = || {
            model
                .starts_with(task::TASK_HEAD)
                .then(|| fault::parse_lenient(model).ok().flatten()?.task)
                .flatten()
        };
        match spec.task.or_else(named) {
            Some(TaskRef::Fixed(t)) => Play::Task(t),
            Some(TaskRef::FromPrompt) => Play::Task(req.named_task().unwrap_or(Task {
                seed: 0,
                steps: task::DEFAULT_TASK_STEPS,
            })),
            None => Play::Plain,
        }
    }
}

/// Whether `fault` answers (200, text or a tool call, however shaped) rather
/// than failing before any answer.
fn answers(fault: &Fault, dialect: Dialect) -> bool {
    match fault {
        Fault::Ok
        | Fault::SlowFirstToken { .. }
        | Fault::Cut { .. }
        | Fault::Stall { .. }
        | Fault::SlowStream { .. }
        | Fault::Malformed { .. }
        | Fault::NoDone
        | Fault::StreamError { .. }
        | Fault::Tool { .. }
        | Fault::Summarize => true,
        Fault::NoPrefill => match dialect {
            Dialect::Responses | Dialect::Gemini => true,
            Dialect::OpenAi | Dialect::Anthropic => false,
        },
        Fault::RateLimit { .. }
        | Fault::Error500
        | Fault::Error503
        | Fault::Error529
        | Fault::Reset
        | Fault::Hang
        | Fault::ContextOverflow { .. }
        | Fault::ContentFilter
        | Fault::Auth
        | Fault::AuthEcho
        | Fault::Down { .. }
        | Fault::DownUntilReset
        | Fault::Flaky { .. } => false,
    }
}

/// The fault that applies to this request after `times`, timers and
/// request-dependent conditions; `Ok` when none does.
fn effective_fault<'a>(
    spec: &'a FaultSpec,
    req: &ChatRequest,
    shared: &Shared,
    seen: crate::state::Seen,
    now: Instant,
) -> &'a Fault {
    const OK: &Fault = &Fault::Ok;
    if spec.times.is_some_and(|t| seen.n > t) {
        return OK;
    }
    let f = &spec.fault;
    match f {
        Fault::Down { secs } => {
            if now.duration_since(seen.first_seen) >= Duration::from_secs(*secs) {
                OK
            } else {
                f
            }
        }
        Fault::DownUntilReset => {
            if shared.revived() {
                OK
            } else {
                f
            }
        }
        Fault::Flaky { every } => {
            if seen.n.is_multiple_of(*every.max(&1)) {
                f
            } else {
                OK
            }
        }
        Fault::ContextOverflow { max_chars } => match max_chars {
            Some(max) if req.message_chars() <= *max => OK,
            Some(_) | None => f,
        },
        Fault::NoPrefill => {
            if req.ends_with_assistant() {
                f
            } else {
                OK
            }
        }
        Fault::Ok
        | Fault::RateLimit { .. }
        | Fault::Error500
        | Fault::Error503
        | Fault::Error529
        | Fault::Reset
        | Fault::Hang
        | Fault::SlowFirstToken { .. }
        | Fault::Cut { .. }
        | Fault::Stall { .. }
        | Fault::SlowStream { .. }
        | Fault::Malformed { .. }
        | Fault::NoDone
        | Fault::StreamError { .. }
        | Fault::ContentFilter
        | Fault::Auth
        | Fault::AuthEcho
        | Fault::Tool { .. }
        | Fault::Summarize => f,
    }
}

/// One step of a planned response body.
enum Step {
    Frame(Bytes),
    Sleep(Duration),
    /// Let hyper write out what it has buffered (the body returns `Pending` once).
    Flush,
    /// Make the body fail: hyper aborts the connection.
    Fail,
}

/// Joins frames that are sent back to back into one write: the client sees
/// the same SSE events, hyper does one chunk instead of dozens.
fn coalesce(steps: Vec<Step>) -> Vec<Step> {
    let mut out = Vec::with_capacity(8);
    let mut run: Vec<Bytes> = Vec::new();
    let flush_run = |run: &mut Vec<Bytes>, out: &mut Vec<Step>| match run.len() {
        0 => {}
        1 => out.extend(run.drain(..).map(Step::Frame)),
        _ => {
            let total = run.iter().map(Bytes::len).sum();
            let mut joined = Vec::with_capacity(total);
            for b in run.drain(..) {
                joined.extend_from_slice(&b);
            }
            out.push(Step::Frame(Bytes::from(joined)));
        }
    };
    for step in steps {
        match step {
            Step::Frame(b) => run.push(b),
            other @ (Step::Sleep(_) | Step::Flush | Step::Fail) => {
                flush_run(&mut run, &mut out);
                out.push(other);
            }
        }
    }
    flush_run(&mut run, &mut out);
    out
}

fn play(steps: Vec<Step>) -> Body {
    let stream = futures::stream::unfold(steps.into_iter(), |mut it| async move {
        loop {
            match it.next()? {
                Step::Frame(b) => return Some((Ok(b), it)),
                Step::Sleep(d) => tokio::time::sleep(d).await,
                Step::Flush => tokio::task::yield_now().await,
                Step::Fail => {
                    let e = std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        "hale-chaos: cut",
                    );
                    return Some((Err(e), it));
                }
            }
        }
    });
    Body::from_stream(stream)
}

/// The stream-shaping parameters of an answering fault.
#[derive(Default)]
struct Shape {
    delay: Option<Duration>,
    cut: Option<usize>,
    stall: Option<(usize, Duration)>,
    /// The wait before each piece after the first (`slow-stream`).
    pace: Option<Duration>,
    malformed: Option<usize>,
    no_done: bool,
    stream_error: Option<(usize, InBand)>,
}

impl Shape {
    fn of(f: &Fault) -> Shape {
        let mut s = Shape::default();
        match f {
            Fault::SlowFirstToken { ms } => s.delay = Some(Duration::from_millis(*ms)),
            Fault::Cut { after } => s.cut = Some(*after),
            Fault::Stall { after, ms } => s.stall = Some((*after, Duration::from_millis(*ms))),
            Fault::SlowStream { ms } => s.pace = Some(Duration::from_millis(*ms)),
            Fault::Malformed { at } => s.malformed = Some(*at),
            Fault::NoDone => s.no_done = true,
            Fault::StreamError { after, event } => s.stream_error = Some((*after, *event)),
            Fault::Tool { cut_after, .. } => s.cut = *cut_after,
            Fault::Ok
            | Fault::RateLimit { .. }
            | Fault::Error500
            | Fault::Error503
            | Fault::Error529
            | Fault::Reset
            | Fault::Hang
            | Fault::ContextOverflow { .. }
            | Fault::ContentFilter
            | Fault::Auth
            | Fault::AuthEcho
            | Fault::NoPrefill
            | Fault::Down { .. }
            | Fault::DownUntilReset
            | Fault::Flaky { .. }
            | Fault::Summarize => {}
        }
        s
    }
}

#[allow(clippy::too_many_arguments)]
fn answer(
    dialect: Dialect,
    flavor: &Flavor,
    shared: &Shared,
    req: &ChatRequest,
    echo: serde_json::Map<String, serde_json::Value>,
    body_len: usize,
    tokens: usize,
    fault: &Fault,
    play: &Play,
) -> Response {
    let seq = shared.next_seq();
    // `no-prefill` only gets here on the Responses API: no continuation.
    let prefill = if matches!(fault, Fault::NoPrefill) {
        None
    } else {
        req.prefill()
    };
    let prefill = prefill.as_deref().unwrap_or("");
    let tag = &shared.tag;
    let call_id = || match dialect {
        // The server's tag in every dialect: a conversation failed over
        // between two chaos processes, or continued on one restarted,
        // never meets a call id twice (an agent refuses one reused).
        Dialect::OpenAi | Dialect::Gemini => format!("call_chaos_{tag}_{seq}"),
        Dialect::Anthropic => format!("toolu_chaos_{tag}_{seq}"),
        Dialect::Responses => format!("call_chaos_{tag}_{seq}"),
    };
    let answer = match (play, fault) {
        (Play::Summary, _) => {
            let chunks = answer::text_chunks(&req.summary());
            Answer::text(answer::continue_after(chunks, prefill), req.max_output())
        }
        (Play::Task(t), _) => {
            let (tools, texts) = (req.offered_tools(), req.observed_texts());
            let seen = task::Seen {
                tools: &tools,
                texts: &texts,
                tool_results: req.tool_results(),
            };
            match task::next_move(t, seen) {
                task::Move::Call { name, arguments } => Answer::tool(call_id(), &name, &arguments),
                task::Move::Answer(text) => {
                    let chunks = answer::text_chunks(&text);
                    Answer::text(answer::continue_after(chunks, prefill), req.max_output())
                }
            }
        }
        (
            Play::Plain,
            Fault::Tool {
                name, arguments, ..
            },
        ) => Answer::tool(call_id(), name, arguments),
        (Play::Plain, _) => {
            let chunks = answer::word_chunks(tokens);
            Answer::text(answer::continue_after(chunks, prefill), req.max_output())
        }
    };
    let ctx = Ctx {
        id: match dialect {
            Dialect::OpenAi => format!("chatcmpl-chaos{seq}"),
            Dialect::Anthropic => format!("msg_chaos{seq}"),
            Dialect::Responses => format!("resp_chaos_{tag}_{seq}"),
            Dialect::Gemini => format!("chaos-{tag}-{seq}"),
        },
        model: req.model.clone().unwrap_or_default(),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        input_tokens: (body_len as u64 / 4).max(1),
        include_usage: req.include_usage(),
        item_id: match (dialect, &answer.content) {
            (Dialect::OpenAi | Dialect::Anthropic | Dialect::Gemini, _) => String::new(),
            (Dialect::Responses, answer::Content::Text(_)) => format!("msg_chaos_{tag}_{seq}"),
            (Dialect::Responses, answer::Content::Tool { .. }) => {
                format!("fc_chaos_{tag}_{seq}")
            }
        },
        echo,
    };
    if dialect == Dialect::Responses
        && ctx.echo.get("store") != Some(&serde_json::Value::Bool(false))
    {
        shared.store_response(&ctx.id);
    }
    let shape = Shape::of(fault);
    let applied = fault.name();
    let sent = match shape.cut {
        Some(at) if req.is_stream() => {
            let pieces = answer.pieces().len().max(1) as u64;
            answer.output_tokens * (at as u64).min(pieces) / pieces
        }
        // A non-streamed body is cut half way.
        Some(_) => answer.output_tokens / 2,
        None => answer.output_tokens,
    };
    shared.record_tokens(ctx.input_tokens, sent);
    // Azure's Chat Completions answers carry its content-filter results.
    let azure_chat = dialect == Dialect::OpenAi && matches!(flavor, Flavor::Azure { .. });
    let bedrock = match flavor {
        Flavor::Bedrock { api } => Some(*api),
        Flavor::Plain | Flavor::Azure { .. } | Flavor::Vertex => None,
    };
    if req.is_stream() {
        match bedrock {
            Some(api) => bedrock_stream(api, &ctx, &answer, &shape, applied),
            None => stream_response(dialect, azure_chat, &ctx, &answer, &shape, applied),
        }
    } else {
        match bedrock {
            Some(Api::Converse) if !matches!(fault, Fault::Malformed { .. }) => {
                let body = bedrock::converse_body(&ctx, &answer);
                shaped_full(Bytes::from(body), &shape, applied)
            }
            Some(Api::Converse | Api::Invoke) | None => {
                full_response(dialect, azure_chat, &ctx, &answer, &shape, fault, applied)
            }
        }
    }
}

fn stream_response(
    dialect: Dialect,
    azure_chat: bool,
    ctx: &Ctx,
    a: &Answer,
    shape: &Shape,
    applied: &'static str,
) -> Response {
    let pieces = wire::pieces(dialect, a);
    let len = pieces.len();
    let mut steps = Vec::with_capacity(len + 10);
    // The Responses API's `sequence_number`, across every event of the stream.
    let mut seq = 0u64;
    if let Some(d) = shape.delay {
        steps.push(Step::Sleep(d));
    }
    if azure_chat {
        steps.push(Step::Frame(azure::prompt_filter_frame()));
    }
    steps.extend(
        wire::stream_head(dialect, ctx, a, &mut seq)
            .into_iter()
            .map(Step::Frame),
    );
    let at = |x: Option<usize>| x.map(|x| x.min(len));
    let (cut, malformed) = (at(shape.cut), at(shape.malformed));
    let stream_error = shape.stream_error.map(|(after, ev)| (after.min(len), ev));
    let stall = shape.stall.map(|(after, d)| (after.min(len), d));
    let framer = wire::PieceFramer::new(dialect, ctx, a);
    let mut ended = false;
    for i in 0..=len {
        if malformed == Some(i) {
            steps.push(Step::Frame(wire::malformed_frame(dialect)));
        }
        if cut == Some(i) {
            steps.push(Step::Flush);
            steps.push(Step::Fail);
            ended = true;
            break;
        }
        if let Some((after, which)) = stream_error
            && after == i
        {
            steps.extend(
                wire::error_frames(dialect, ctx, which, &mut seq)
                    .into_iter()
                    .map(Step::Frame),
            );
            ended = true;
            break;
        }
        if let Some((after, d)) = stall
            && after == i
        {
            steps.push(Step::Sleep(d));
        }
        if let Some(p) = pieces.get(i) {
            if let Some(d) = shape.pace.filter(|_| i > 0) {
                steps.push(Step::Sleep(d));
            }
            steps.push(Step::Frame(framer.frame(p, &mut seq)));
        }
    }
    if !ended {
        steps.extend(
            wire::stream_finish(dialect, ctx, a, shape.no_done, &mut seq)
                .into_iter()
                .map(Step::Frame),
        );
    }
    let mut steps = coalesce(steps);
    // The common case (nothing to wait for) is one buffer: send it as a plain body.
    let body = match steps.as_mut_slice() {
        [Step::Frame(b)] => Body::from(std::mem::take(b)),
        _ => play(steps),
    };
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(APPLIED_HEADER, HeaderValue::from_static(applied));
    r
}

/// An InvokeModel body: Anthropic's Messages body as Bedrock takes it — no
/// `model` or `stream` (the URL names them), `anthropic_version`
/// `bedrock-2023-05-31` — read for `model`.
fn read_invoke(body: &[u8], model: &str, stream: bool) -> Result<ChatRequest, String> {
    let m: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(body).map_err(|e| e.to_string())?;
    for key in ["model", "stream"] {
        if m.contains_key(key) {
            return Err(format!("extraneous key [{key}] is not permitted"));
        }
    }
    if m.get("anthropic_version").and_then(|v| v.as_str()) != Some("bedrock-2023-05-31") {
        return Err("anthropic_version must be bedrock-2023-05-31".to_owned());
    }
    let mut req: ChatRequest =
        serde_json::from_value(serde_json::Value::Object(m)).map_err(|e| e.to_string())?;
    req.model = Some(model.to_owned());
    req.stream = Some(stream);
    Ok(req)
}

/// A Bedrock event stream: Converse's events, or InvokeModel's chunks of
/// Anthropic events; a mid-stream error is an exception message.
fn bedrock_stream(
    api: Api,
    ctx: &Ctx,
    a: &Answer,
    shape: &Shape,
    applied: &'static str,
) -> Response {
    let anthropic = Dialect::Anthropic;
    let pieces = a.pieces();
    let len = pieces.len();
    let mut seq = 0u64;
    let mut steps = Vec::with_capacity(len + 10);
    if let Some(d) = shape.delay {
        steps.push(Step::Sleep(d));
    }
    let head = match api {
        Api::Converse => bedrock::converse_head(a),
        Api::Invoke => wire::stream_head(anthropic, ctx, a, &mut seq)
            .iter()
            .map(|b| bedrock::chunks(b))
            .collect(),
    };
    steps.extend(head.into_iter().map(Step::Frame));
    let at = |x: Option<usize>| x.map(|x| x.min(len));
    let (cut, malformed) = (at(shape.cut), at(shape.malformed));
    let stream_error = shape.stream_error.map(|(after, ev)| (after.min(len), ev));
    let stall = shape.stall.map(|(after, d)| (after.min(len), d));
    let framer = wire::PieceFramer::new(anthropic, ctx, a);
    let mut ended = false;
    for i in 0..=len {
        if malformed == Some(i) {
            steps.push(Step::Frame(match api {
                Api::Converse => bedrock::malformed_event(),
                Api::Invoke => bedrock::chunks(&wire::malformed_frame(anthropic)),
            }));
        }
        if cut == Some(i) {
            steps.push(Step::Flush);
            steps.push(Step::Fail);
            ended = true;
            break;
        }
        if let Some((after, which)) = stream_error
            && after == i
        {
            let (kind, msg) = match which {
                InBand::Failed => ("modelStreamErrorException", "The model stream failed."),
                InBand::Error | InBand::Both => (
                    "internalServerException",
                    "The server encountered an internal error while processing the request.",
                ),
            };
            steps.push(Step::Frame(bedrock::exception(kind, msg)));
            ended = true;
            break;
        }
        if let Some((after, d)) = stall
            && after == i
        {
            steps.push(Step::Sleep(d));
        }
        if let Some(p) = pieces.get(i) {
            if let Some(d) = shape.pace.filter(|_| i > 0) {
                steps.push(Step::Sleep(d));
            }
            steps.push(Step::Frame(match api {
                Api::Converse => bedrock::converse_piece(a, p),
                Api::Invoke => bedrock::chunks(&framer.frame(p, &mut seq)),
            }));
        }
    }
    if !ended {
        let finish = match api {
            Api::Converse => bedrock::converse_finish(ctx, a, shape.no_done),
            Api::Invoke => wire::stream_finish(anthropic, ctx, a, shape.no_done, &mut seq)
                .iter()
                .map(|b| bedrock::chunks(b))
                .collect(),
        };
        steps.extend(finish.into_iter().map(Step::Frame));
    }
    let mut steps = coalesce(steps);
    let body = match steps.as_mut_slice() {
        [Step::Frame(b)] => Body::from(std::mem::take(b)),
        _ => play(steps),
    };
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.amazon.eventstream"),
    );
    h.insert(APPLIED_HEADER, HeaderValue::from_static(applied));
    r
}

/// Google's safety block of `req`: a 200, streamed or not.
fn gemini_blocked(req: &ChatRequest, body_len: usize, applied: &'static str) -> Response {
    let ctx = Ctx {
        id: "chaos-blocked".to_owned(),
        model: req.model.clone().unwrap_or_default(),
        created: 0,
        input_tokens: (body_len as u64 / 4).max(1),
        include_usage: false,
        item_id: String::new(),
        echo: serde_json::Map::new(),
    };
    let stream = req.is_stream();
    let mut r = Response::new(Body::from(gemini::blocked(&ctx, stream)));
    let h = r.headers_mut();
    let ty = if stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ty));
    h.insert(APPLIED_HEADER, HeaderValue::from_static(applied));
    r
}

fn full_response(
    dialect: Dialect,
    azure_chat: bool,
    ctx: &Ctx,
    a: &Answer,
    shape: &Shape,
    fault: &Fault,
    applied: &'static str,
) -> Response {
    if matches!(fault, Fault::Malformed { .. }) {
        return json_response(200, wire::malformed_body(dialect).to_owned(), applied);
    }
    let mut body = wire::full_body(dialect, ctx, a);
    if azure_chat {
        body = azure::annotate_full(body);
    }
    shaped_full(Bytes::from(body), shape, applied)
}

/// A complete JSON body, delayed, cut or stalled as `shape` says.
fn shaped_full(body: Bytes, shape: &Shape, applied: &'static str) -> Response {
    if shape.delay.is_none() && shape.cut.is_none() && shape.stall.is_none() {
        let mut r = Response::new(Body::from(body));
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert(APPLIED_HEADER, HeaderValue::from_static(applied));
        return r;
    }
    let total = body.len();
    let half = total / 2;
    let mut steps = Vec::with_capacity(4);
    if let Some(d) = shape.delay {
        steps.push(Step::Sleep(d));
    }
    if shape.cut.is_some() {
        steps.push(Step::Frame(body.slice(..half)));
        steps.push(Step::Flush);
        steps.push(Step::Fail);
    } else if let Some((_, d)) = shape.stall {
        steps.push(Step::Frame(body.slice(..half)));
        steps.push(Step::Sleep(d));
        steps.push(Step::Frame(body.slice(half..)));
    } else {
        steps.push(Step::Frame(body));
    }
    let mut r = Response::new(play(steps));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(total));
    h.insert(APPLIED_HEADER, HeaderValue::from_static(applied));
    r
}
