//! Provider clients: one attempt against one provider.
//!
//! An attempt renders the request for the provider's dialect (the client's
//! own JSON, patched, when the dialects match: [`hale_proto::fidelity`]), sends
//! it with the provider's key, and turns whatever comes back into either a
//! response, a live stream of canonical events, or a [`Failure`] already
//! classified by hale-core. Timeouts are applied here because they are a
//! property of the wire (headers, first token, idle gap), but what a timeout
//! *means* is decided by the classifier.

use futures::{Stream, StreamExt};
use hale_core::class::ErrorClass;
use hale_core::classify::{self, Classified, Observation, Transport};
use hale_core::config::{Config, ProviderApi, ProviderConfig, ProviderKind, Publisher};
use hale_core::segment::Refusal;
use hale_proto::{ChatRequest, ChatResponse, Dialect, StreamEvent};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

mod azure;
pub mod bedrock;
mod credentials;
mod http_client;
mod vertex;

use crate::secrets::Redactor;
use credentials::Credentials;
use http_client::{Body, HttpClient, Post};
use std::sync::Arc;

/// The Anthropic API version hale speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// The header carrying a `kind: gemini` provider's key (never the URL's `key=`,
/// which would put it in every log line of a proxy).
pub const GEMINI_KEY_HEADER: &str = "x-goog-api-key";
/// The most of an upstream error body hale reads (bigger bodies are cut).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// A classified failed attempt.
#[derive(Debug, Clone)]
pub struct Failure {
    pub class: ErrorClass,
    pub retry_after: Option<Duration>,
    pub status: Option<u16>,
    /// The provider's reason, safe to show (no keys, no request headers).
    pub message: String,
    /// The connection could not be made at all (refused, DNS): the failure
    /// marks the `base_url`, not only the deployment.
    pub connect_failed: bool,
}

impl Failure {
    pub fn from_classified(c: Classified, status: Option<u16>) -> Self {
        Self {
            class: c.class,
            retry_after: c.retry_after,
            status,
            message: c.message,
            connect_failed: false,
        }
    }

    /// A Gemini answer that is no answer (a safety block, an unusable
    /// call), as hale-core's rule names it; it came with a 200.
    pub fn from_gemini(f: hale_core::gemini::AnswerFailure) -> Self {
        Self {
            class: f.class,
            retry_after: None,
            status: None,
            message: f.message,
            connect_failed: false,
        }
    }

    /// A model that cannot be placed in the provider's URL
    /// ([`model_refused`]): the caller's request, refused before it is
    /// sent (a 400, never held against the provider).
    pub fn refused(message: String) -> Self {
        Self::from_classified(
            Classified {
                class: ErrorClass::BadRequest,
                retry_after: None,
                code: None,
                message,
            },
            None,
        )
    }

    /// The provider's credentials could not be had (an Entra token command
    /// failed): an `auth` failure, which marks the provider.
    pub fn auth(message: String) -> Self {
        Self::from_classified(
            Classified {
                class: ErrorClass::Auth,
                retry_after: None,
                code: None,
                message,
            },
            None,
        )
    }

    /// A failure below HTTP (no response).
    pub fn transport(t: Transport, detail: &str) -> Self {
        let c = classify::classify(&Observation {
            status: None,
            retry_after: None,
            retry_after_ms: None,
            body: None,
            transport: Some(t),
            now_wall: SystemTime::now(),
        });
        let mut f = Self::from_classified(c, None);
        f.connect_failed = t.failed_to_connect();
        if t.needs_detail() && !detail.is_empty() {
            // The cause chain (no URL in it): which certificate check failed.
            f.message = format!("{}: {detail}", f.message);
        } else if f.message.is_empty() {
            f.message = detail.to_owned();
        }
        f
    }
}

/// A stream of canonical events from a provider. `Err` items are faults that
/// end the stream (cut, stall, upstream error event); malformed chunks are
/// reported as `Ok(None)` so the relay can count and skip them.
pub type EventStream =
    Pin<Box<dyn Stream<Item = Result<Option<Vec<StreamEvent>>, Failure>> + Send>>;

/// What a successful attempt produced.
pub enum Answer {
    Complete(Reply),
    Stream(EventStream),
}

/// A complete answer: what hale reads of it, and the provider's body as it
/// came, in the provider's dialect.
#[derive(Debug, Clone)]
pub struct Reply {
    pub answer: ChatResponse,
    pub body: bytes::Bytes,
    pub dialect: Dialect,
}

impl Reply {
    /// The provider's body, for a caller of its dialect when it names the
    /// model that served: every choice, `logprobs`, `system_fingerprint`,
    /// usage details and blocks hale does not model reach the caller as the
    /// provider sent them. `None`: hale renders the answer.
    pub fn body_for(&self, caller: Dialect) -> Option<&bytes::Bytes> {
        (self.dialect == caller && !self.answer.model.is_empty()).then_some(&self.body)
    }
}

/// The header that marks hale's own compaction requests (its summariser
/// calls, [`Purpose::Compaction`]) to every provider kind: a header, not a
/// body field, so the body a provider sees is the request's own. A test
/// provider (`hale chaos`) answers such a request with a summary and tells
/// it from an agent's turn by this mark alone, not by the prompt's wording.
pub const COMPACTION_HEADER: &str = "x-hale-compaction";

/// Whom an attempt is for: an agent's turn, or hale's own compaction
/// (sent with [`COMPACTION_HEADER`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Purpose {
    #[default]
    Agent,
    Compaction,
}

/// How long the attempt may take for headers (a probe uses a shorter timeout).
pub struct AttemptLimits {
    pub headers: Duration,
    pub stream_idle: Duration,
}

/// The dialect a provider speaks: its kind's, and for `openai` and `azure`
/// its `api`'s; for `vertex` its default model's publisher's, for
/// `bedrock` its default model's API ([`dialect_for`] gives a model's).
pub fn dialect_of(provider: &ProviderConfig) -> Dialect {
    dialect_for(provider, &provider.default_model)
}

/// The dialect an attempt at `model` speaks: [`dialect_of`] but for
/// `vertex`, where the model's publisher decides (Claude: Anthropic's
/// Messages, Gemini: Google's `generateContent`), and `bedrock`, where
/// the model decides the API (`hale_core::bedrock::api_for`: Converse, or
/// Anthropic's Messages through InvokeModel).
pub fn dialect_for(provider: &ProviderConfig, model: &str) -> Dialect {
    match (provider.kind, provider.api) {
        (ProviderKind::Bedrock, ProviderApi::Chat | ProviderApi::Responses) => {
            let configured = provider.bedrock.as_ref().and_then(|b| b.api);
            match hale_core::bedrock::api_for(configured, model) {
                hale_core::config::BedrockApi::Converse => Dialect::Bedrock,
                hale_core::config::BedrockApi::Invoke => Dialect::Anthropic,
            }
        }
        (ProviderKind::OpenAi | ProviderKind::Azure, ProviderApi::Chat) => Dialect::OpenAi,
        (ProviderKind::OpenAi | ProviderKind::Azure, ProviderApi::Responses) => Dialect::Responses,
        // Config validation keeps `api: responses` to `openai` providers.
        (ProviderKind::Anthropic, ProviderApi::Chat | ProviderApi::Responses) => Dialect::Anthropic,
        (ProviderKind::Gemini, ProviderApi::Chat | ProviderApi::Responses) => Dialect::Gemini,
        (ProviderKind::Vertex, ProviderApi::Chat | ProviderApi::Responses) => {
            match provider
                .vertex
                .as_ref()
                .map(|v| hale_core::vertex::publisher(v, model))
            {
                Some(Publisher::Anthropic) => Dialect::Anthropic,
                Some(Publisher::Google) | None => Dialect::Gemini,
            }
        }
    }
}

/// The chat endpoint of `provider` as text. Gemini names the model and
/// whether to stream in the URL; the other dialects in the body.
fn endpoint_str(provider: &ProviderConfig, model: &str, stream: bool) -> Result<String, Refusal> {
    let path = match dialect_of(provider) {
        // A bedrock provider's URL is built per attempt (`bedrock::url`).
        Dialect::Bedrock => {
            hale_core::bedrock::path(hale_core::config::BedrockApi::Converse, model, stream)?
        }
        Dialect::OpenAi => "/chat/completions".to_owned(),
        Dialect::Anthropic => "/v1/messages".to_owned(),
        Dialect::Responses => "/responses".to_owned(),
        Dialect::Gemini => hale_core::gemini::path(model, stream)?,
    };
    Ok(format!("{}{path}", provider.base_url))
}

/// The URL of an attempt at `model`, for every provider kind. A model the
/// URL names (Azure's deployment URLs, Gemini, Vertex, Bedrock) is one
/// encoded path segment, or refused ([`hale_core::segment`]): a client's
/// string never adds a segment, a query or a fragment of its own.
pub fn url(provider: &ProviderConfig, model: &str, stream: bool) -> Result<String, Refusal> {
    match (&provider.vertex, &provider.azure, &provider.bedrock) {
        (Some(v), _, _) => vertex::url(provider, v, model, stream),
        (None, Some(az), _) => azure::url(provider, az, model),
        (None, None, Some(bc)) => bedrock::url(provider, bc, model, stream),
        (None, None, None) => endpoint_str(provider, model, stream),
    }
}

/// Why `model` cannot be sent to `provider`, for the caller's 400 (`None`:
/// it can). Only kinds whose URL names the model refuse one.
pub fn model_refused(provider: &ProviderConfig, model: &str) -> Option<String> {
    match provider.kind {
        ProviderKind::OpenAi | ProviderKind::Anthropic => None,
        ProviderKind::Azure
        | ProviderKind::Gemini
        | ProviderKind::Vertex
        | ProviderKind::Bedrock => url(provider, model, false)
            .err()
            .map(|r| refusal_message(provider, model, r)),
    }
}

fn refusal_message(provider: &ProviderConfig, model: &str, r: Refusal) -> String {
    format!(
        "model {model:?} cannot be sent to provider `{}`: it becomes one path segment of the provider's URL, so it {r}",
        provider.name
    )
}

/// The chat endpoint of `provider`, parsed once per base URL and kind, not
/// per attempt (formatting and parsing it was ~1.5 % of a turn's
/// instructions); the parser's reason when it is not a URL, a refusal when
/// the model cannot be in it ([`url`]). The map holds one entry per
/// configured provider's base URL.
fn endpoint(
    provider: &ProviderConfig,
    model: &str,
    stream: bool,
) -> Result<Result<http::Uri, http_client::SendError>, Refusal> {
    use std::collections::HashMap;
    use std::sync::{LazyLock, RwLock};
    type Uris = RwLock<HashMap<String, http::Uri>>;
    static OPENAI: LazyLock<Uris> = LazyLock::new(Default::default);
    static ANTHROPIC: LazyLock<Uris> = LazyLock::new(Default::default);
    static RESPONSES: LazyLock<Uris> = LazyLock::new(Default::default);
    let map = match dialect_of(provider) {
        Dialect::OpenAi => &OPENAI,
        Dialect::Anthropic => &ANTHROPIC,
        Dialect::Responses => &RESPONSES,
        // The model is in a Gemini or Bedrock URL: parsed per attempt.
        Dialect::Gemini | Dialect::Bedrock => {
            return Ok(http_client::uri(&endpoint_str(provider, model, stream)?));
        }
    };
    if let Some(u) = map
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&provider.base_url)
    {
        return Ok(Ok(u.clone()));
    }
    let uri = http_client::uri(&endpoint_str(provider, model, stream)?);
    if let Ok(u) = &uri {
        map.write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(provider.base_url.clone(), u.clone());
    }
    Ok(uri)
}

/// One attempt as sent: its outcome, and what hale changed or dropped from
/// the client's request to send it (the attempt's `changes` in the timeline).
pub struct Sent {
    pub result: Result<Answer, Failure>,
    pub changes: Vec<String>,
}

/// The provider clients' shared parts, built once from the config: the
/// HTTP client ([`http_client`]: hyper-util, reqwest where a proxy variable
/// applies), the providers' [`Credentials`] (the one home of every token
/// hale fetches) and the redactor that masks them.
pub struct Client {
    http: HttpClient,
    creds: Credentials,
    /// The gateway's one redactor ([`crate::secrets`]): every token fetched
    /// is remembered in it, and every failure an attempt returns masked.
    pub secrets: Arc<Redactor>,
}

impl Client {
    /// Builds the HTTP client (the ring crypto provider installed first,
    /// as [`crate::Gateway`] does) and the providers' credentials
    /// ([`Credentials::new`]).
    pub fn new(cfg: &Config, secrets: Arc<Redactor>) -> anyhow::Result<Self> {
        Ok(Self {
            http: HttpClient::new()?,
            creds: Credentials::new(cfg)?,
            secrets,
        })
    }
}

/// Sends one attempt. `prefill` is delivered text to continue from.
///
/// The body is the client's own when the provider speaks its dialect
/// ([`hale_proto::render_for`], built as [`hale_proto::prepare`]: the JSON only when
/// read): hale patches in only what it changed, and
/// forwards the client's provider-feature headers (`anthropic-beta`,
/// `anthropic-version`, `OpenAI-Beta`) to a provider of their kind.
///
/// An `azure` provider's body names the model as Azure wants it
/// ([`hale_core::azure::body_model`]): on deployment URLs hale's model (so
/// the client's bytes stay whole), on the v1 API the deployment. A
/// `vertex` provider's dialect is its model's publisher's
/// ([`dialect_for`]); a Claude body loses `model` and gains Vertex's
/// `anthropic_version`.
pub async fn send(
    client: &Client,
    provider: &ProviderConfig,
    req: &ChatRequest,
    model: &str,
    prefill: Option<&str>,
    limits: &AttemptLimits,
    purpose: Purpose,
) -> Sent {
    let body_model = match &provider.azure {
        Some(az) => hale_core::azure::body_model(az, model),
        None => model,
    };
    let dialect = dialect_for(provider, model);
    let out = hale_proto::prepare(dialect, req, body_model, prefill);
    let mut result = attempt(client, provider, model, &out, req.stream, purpose, limits).await;
    // Whatever the upstream (or a proxy) put in its failure — the
    // credential it was sent, echoed — is masked before hale shows or
    // stores it (crate::secrets).
    if let Err(f) = &mut result {
        client.secrets.mask_string(&mut f.message);
    }
    Sent {
        result,
        changes: out.changes,
    }
}

/// The request of one attempt, with its credentials (and hale's
/// [`COMPACTION_HEADER`] when it is for compaction); for a vertex provider
/// also the token it carries (a 401 refuses that one).
async fn request(
    client: &Client,
    provider: &ProviderConfig,
    model: &str,
    out: &hale_proto::Prepared<'_>,
    stream: bool,
    purpose: Purpose,
    limits: &AttemptLimits,
) -> Result<(http::Request<bytes::Bytes>, Option<vertex::Bearer>), Failure> {
    let mark = |post: &mut Post| match purpose {
        Purpose::Compaction => post.header(COMPACTION_HEADER, "1"),
        Purpose::Agent => {}
    };
    let unsendable = |e: http_client::SendError| Failure::transport(e.transport(), &e.redacted());
    let refused = |r: Refusal| Failure::refused(refusal_message(provider, model, r));
    if let Some(v) = &provider.vertex {
        let uri = http_client::uri(&url(provider, model, stream).map_err(refused)?);
        let mut post = match hale_core::vertex::publisher(v, model) {
            Publisher::Anthropic => Post::json(uri, &vertex::anthropic_body(out.body())),
            Publisher::Google => match &out.raw {
                Some(raw) => Post::raw_json(uri, raw.clone()),
                None => Post::json(uri, out.body()),
            },
        };
        let bearer = client
            .creds
            .vertex
            .bearer(provider, limits.headers)
            .await
            .map_err(|vertex::TokenError(why)| Failure::auth(why))?;
        client
            .secrets
            .remember(&format!("vertex:{}", provider.name), bearer.token());
        post.bearer(bearer.token());
        // The version is in the body on Vertex; the betas go as headers.
        for (k, v) in &out.headers {
            if *k != hale_proto::fidelity::ANTHROPIC_VERSION {
                post.header(k, v);
            }
        }
        mark(&mut post);
        return Ok((post.finish().map_err(unsendable)?, Some(bearer)));
    }
    let uri = match (&provider.azure, &provider.bedrock) {
        // Azure's URL names the deployment (the model), Bedrock's the model
        // and the API: built per attempt.
        (Some(_), _) | (None, Some(_)) => {
            http_client::uri(&url(provider, model, stream).map_err(refused)?)
        }
        (None, None) => endpoint(provider, model, stream).map_err(refused)?,
    };
    let dialect = dialect_for(provider, model);
    let mut post = match (&out.raw, &provider.bedrock, dialect) {
        // InvokeModel takes Anthropic's body without `model`, with
        // `anthropic_version`: the client's fields otherwise as they came
        // (`out.body()` is the client's bytes as JSON when `raw` is set).
        (_, Some(_), Dialect::Anthropic) => {
            let beta = out
                .headers
                .iter()
                .find(|(k, _)| *k == "anthropic-beta")
                .map(|(_, v)| v.as_str());
            Post::json(uri, &bedrock::invoke_body(out.body(), beta))
        }
        // The client's own bytes: hale changed nothing in the body.
        (Some(raw), _, _) => Post::raw_json(uri, raw.clone()),
        (None, _, _) => Post::json(uri, out.body()),
    };
    match (provider.kind, &provider.api_key) {
        (ProviderKind::OpenAi, Some(k)) => post.bearer(k.expose()),
        (ProviderKind::Anthropic, Some(k)) => post.secret("x-api-key", k.expose()),
        (ProviderKind::Gemini, Some(k)) => post.secret(GEMINI_KEY_HEADER, k.expose()),
        // Set below, or on the built request (a signature covers the whole of it).
        (ProviderKind::Azure | ProviderKind::Vertex | ProviderKind::Bedrock, _) | (_, None) => {}
    }
    if let Some(az) = &provider.azure {
        client
            .creds
            .azure
            .authorize(&mut post, provider, az, &client.secrets)
            .await
            .map_err(|azure::TokenError(why)| Failure::auth(why))?;
    }
    let client_version = out
        .headers
        .iter()
        .any(|(k, _)| *k == hale_proto::fidelity::ANTHROPIC_VERSION);
    if provider.kind == ProviderKind::Anthropic && !client_version {
        post.header(hale_proto::fidelity::ANTHROPIC_VERSION, ANTHROPIC_VERSION);
    }
    // Bedrock takes Anthropic's feature headers in the body (above).
    if provider.bedrock.is_none() {
        for (k, v) in &out.headers {
            post.header(k, v);
        }
    }
    if provider.bedrock.is_some() && stream {
        post.header("accept", "application/vnd.amazon.eventstream");
    }
    // Before Bedrock signs the built request: the mark is signed with it.
    mark(&mut post);
    Ok((post.finish().map_err(unsendable)?, None))
}

async fn attempt(
    client: &Client,
    provider: &ProviderConfig,
    model: &str,
    out: &hale_proto::Prepared<'_>,
    stream: bool,
    purpose: Purpose,
    limits: &AttemptLimits,
) -> Result<Answer, Failure> {
    let dialect = dialect_for(provider, model);
    let mut refetched = false;
    let resp = loop {
        let (mut request, bearer) =
            request(client, provider, model, out, stream, purpose, limits).await?;
        // Bedrock signs the built request: the signature covers all of it.
        if let Some(bc) = &provider.bedrock {
            client
                .creds
                .bedrock
                .authorize(
                    client.http.reqwest(),
                    provider,
                    bc,
                    &mut request,
                    &client.secrets,
                )
                .await
                .map_err(|bedrock::CredentialError(why)| Failure::auth(why))?;
        }
        let sent_at = std::time::Instant::now();
        let resp = match tokio::time::timeout(limits.headers, client.http.send(request)).await {
            Err(_) => {
                return Err(Failure::transport(
                    Transport::HeadersTimeout,
                    "no response headers in time",
                ));
            }
            // No response byte came: how long the upstream was silent before the
            // failure decides whether a close was a blip or a hang (hale-core).
            Ok(Err(e)) => {
                let t = e
                    .transport()
                    .after_silence(sent_at.elapsed(), provider.first_byte_expectation());
                return Err(Failure::transport(t, &e.redacted()));
            }
            Ok(Ok(r)) => r,
        };
        // A vertex token refused: fetched again and sent once more.
        if let Some(b) = &bearer
            && hale_core::vertex::resend_after_refusal(resp.status().as_u16(), refetched)
        {
            client.creds.vertex.refused(provider, b).await;
            refetched = true;
            continue;
        }
        break resp;
    };
    let status = resp.status().as_u16();
    if !resp.status().is_success() {
        let header = |name| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let retry_after = header(http::header::RETRY_AFTER.as_str());
        let retry_after_ms = classify::RETRY_AFTER_MS_HEADERS
            .iter()
            .find_map(|name| header(name));
        if status == 401
            && let Some(az) = &provider.azure
        {
            client.creds.azure.refused(provider, az).await;
        }
        let error_type = header(hale_core::bedrock::ERROR_TYPE_HEADER);
        // Masked before it is classified: the classifier cuts the message,
        // which could leave part of a secret that straddles the cut.
        let read = read_capped(resp.into_body(), limits.headers).await;
        let body = client.secrets.mask(&read);
        let obs = Observation {
            status: Some(status),
            retry_after: retry_after.as_deref(),
            retry_after_ms: retry_after_ms.as_deref(),
            body: Some(&body),
            transport: None,
            now_wall: SystemTime::now(),
        };
        let c = match &provider.bedrock {
            Some(bc) => {
                let named = hale_core::bedrock::error_type(error_type.as_deref(), &body);
                let refused = named
                    .as_deref()
                    .and_then(hale_core::bedrock::exception_of)
                    .is_some_and(hale_core::bedrock::refetch_credentials);
                if refused {
                    client.creds.bedrock.refused(provider, bc).await;
                }
                hale_core::bedrock::classify(&obs, named.as_deref())
            }
            None => classify::classify(&obs),
        };
        return Err(Failure::from_classified(c, Some(status)));
    }
    if stream {
        Ok(Answer::Stream(match &provider.bedrock {
            Some(_) => bedrock_stream(
                resp.into_body(),
                dialect,
                limits.stream_idle,
                client.secrets.clone(),
            ),
            None => event_stream(
                resp.into_body(),
                dialect,
                limits.stream_idle,
                client.secrets.clone(),
            ),
        }))
    } else {
        use http_body_util::BodyExt;
        let bytes = match tokio::time::timeout(limits.headers, resp.into_body().collect()).await {
            Err(_) => {
                return Err(Failure::transport(
                    Transport::HeadersTimeout,
                    "response body did not arrive in time",
                ));
            }
            // The headers said 2xx and the body broke off before its end
            // (nothing was parsed yet). Nothing reached the caller, so this
            // is a body cut: the classifier makes it retryable on the same
            // target.
            Ok(Err(e)) => return Err(Failure::transport(Transport::BodyCut, &e.to_string())),
            Ok(Ok(b)) => b.to_bytes(),
        };
        // OpenAI's and Anthropic's answers are read straight from the bytes
        // (a `Value` tree only for an odd one: `parse_response_bytes`).
        let parsed = match dialect {
            Dialect::OpenAi => {
                hale_proto::openai::parse_response_bytes(&bytes).map_err(|e| e.to_string())
            }
            Dialect::Anthropic => {
                hale_proto::anthropic::parse_response_bytes(&bytes).map_err(|e| e.to_string())
            }
            Dialect::Responses => {
                let value = serde_json::from_slice::<serde_json::Value>(&bytes);
                // A `failed` Responses answer (a 2xx) is the provider's error.
                if let Ok(v) = &value
                    && v.get("status").and_then(serde_json::Value::as_str) == Some("failed")
                    && let Some(body) = hale_proto::responses::error_body(
                        Some("response.failed"),
                        &serde_json::json!({ "response": v }).to_string(),
                    )
                {
                    return Err(stream_error(
                        &client.secrets.mask(&body),
                        "the response failed",
                    ));
                }
                value.map_err(|e| e.to_string()).and_then(|v| {
                    hale_proto::responses::parse_response(&v).map_err(|e| e.to_string())
                })
            }
            Dialect::Gemini => {
                let value = serde_json::from_slice::<serde_json::Value>(&bytes);
                // A Gemini safety block (or unusable answer) comes as a 200.
                if let Ok(v) = &value
                    && let Some(f) = hale_proto::gemini::answer_failure(v)
                {
                    return Err(Failure::from_gemini(f));
                }
                value
                    .map_err(|e| e.to_string())
                    .and_then(|v| hale_proto::gemini::parse_response(&v).map_err(|e| e.to_string()))
            }
            // Converse names no model: the one in the URL served.
            Dialect::Bedrock => serde_json::from_slice::<serde_json::Value>(&bytes)
                .map_err(|e| e.to_string())
                .and_then(|v| {
                    hale_proto::bedrock::parse_response(&v)
                        .map(|mut a| {
                            a.model = model.to_owned();
                            a
                        })
                        .map_err(|e| e.to_string())
                }),
        };
        match parsed {
            Ok(answer) => Ok(Answer::Complete(Reply {
                answer,
                body: bytes,
                dialect,
            })),
            Err(e) => Err(Failure::transport(
                Transport::MalformedBody,
                &format!("unparsable response body: {e}"),
            )),
        }
    }
}

/// Reads at most [`MAX_ERROR_BODY`] of an error body, within `limit`.
async fn read_capped(body: Body, limit: Duration) -> String {
    let mut out = Vec::new();
    let mut s = http_body_util::BodyDataStream::new(body);
    let read = async {
        while let Some(Ok(chunk)) = s.next().await {
            out.extend_from_slice(&chunk);
            if out.len() >= MAX_ERROR_BODY {
                out.truncate(MAX_ERROR_BODY);
                break;
            }
        }
    };
    let _ = tokio::time::timeout(limit, read).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Decodes an upstream SSE body into canonical events, with the idle timeout.
fn event_stream(
    body: Body,
    dialect: Dialect,
    idle: Duration,
    secrets: Arc<Redactor>,
) -> EventStream {
    let decoder = match dialect {
        Dialect::OpenAi => Decoder::OpenAi(hale_proto::openai::StreamDecoder::new()),
        Dialect::Anthropic => Decoder::Anthropic(hale_proto::anthropic::StreamDecoder::new()),
        Dialect::Responses => Decoder::Responses(hale_proto::responses::StreamDecoder::new()),
        Dialect::Gemini => Decoder::Gemini(hale_proto::gemini::StreamDecoder::new()),
        // Bedrock's streams are event streams (`bedrock_stream`).
        Dialect::Bedrock => Decoder::Converse(hale_proto::bedrock::StreamDecoder::new()),
    };
    Box::pin(Events {
        sse: Box::pin(sse_stream::SseByteStream::new(
            http_body_util::BodyDataStream::new(body),
        )),
        decoder,
        idle,
        stall: Box::pin(tokio::time::sleep(idle)),
        armed: false,
        ended: false,
        secrets,
    })
}

/// The decoder of the provider's dialect.
enum Decoder {
    OpenAi(hale_proto::openai::StreamDecoder),
    Anthropic(hale_proto::anthropic::StreamDecoder),
    Responses(hale_proto::responses::StreamDecoder),
    Gemini(hale_proto::gemini::StreamDecoder),
    /// Bedrock's ConverseStream (event-stream messages as [`bedrock_sse`]
    /// gives them).
    Converse(hale_proto::bedrock::StreamDecoder),
    /// Bedrock's InvokeModelWithResponseStream of an Anthropic model: each
    /// chunk an Anthropic event.
    Invoke(hale_proto::anthropic::StreamDecoder),
}

/// The SSE event name [`bedrock_sse`] gives an event-stream exception (its
/// exception type in the event's `id`); only the two Bedrock decoders read it.
const BEDROCK_EXCEPTION: &str = ":exception";

/// One event-stream message as the SSE event a [`Decoder`] reads: an event
/// by its type and payload; an InvokeModel `chunk` as the Anthropic event it
/// carries (named by its `type`); an exception as [`BEDROCK_EXCEPTION`].
fn bedrock_sse(frame: bedrock::Frame) -> sse_stream::Sse {
    match frame {
        bedrock::Frame::Exception { kind, payload } => sse_stream::Sse::default()
            .event(BEDROCK_EXCEPTION)
            .id(kind)
            .data(String::from_utf8_lossy(&payload).into_owned()),
        bedrock::Frame::Event { kind, payload } if kind == "chunk" => {
            match bedrock::chunk_json(&payload) {
                Ok(json) => {
                    let data = String::from_utf8_lossy(&json).into_owned();
                    let name = serde_json::from_str::<serde_json::Value>(&data)
                        .ok()
                        .and_then(|v| v.get("type")?.as_str().map(str::to_owned))
                        .unwrap_or_default();
                    sse_stream::Sse::default().event(name).data(data)
                }
                // Counted and skipped as a malformed event.
                Err(_) => sse_stream::Sse::default()
                    .event("chunk")
                    .data("{not a chunk"),
            }
        }
        bedrock::Frame::Event { kind, payload } => sse_stream::Sse::default()
            .event(kind)
            .data(String::from_utf8_lossy(&payload).into_owned()),
    }
}

/// A Bedrock event stream read into SSE events, as they arrive.
fn bedrock_frames(body: Body) -> impl Stream<Item = Result<sse_stream::Sse, bedrock::FrameError>> {
    let state = (
        Box::pin(http_body_util::BodyDataStream::new(body)),
        bedrock::FrameReader::new(),
        false,
    );
    futures::stream::unfold(state, |(mut body, mut reader, mut done)| async move {
        loop {
            if let Some(f) = reader.next_frame() {
                let item = f.map(bedrock_sse);
                return Some((item, (body, reader, done)));
            }
            if done {
                return None;
            }
            match body.next().await {
                Some(Ok(chunk)) => reader.push(&chunk),
                Some(Err(e)) => {
                    done = true;
                    reader = bedrock::FrameReader::new();
                    let cut = bedrock::FrameError(e.to_string());
                    return Some((Err(cut), (body, reader, done)));
                }
                None if reader.pending() => {
                    done = true;
                    return Some((
                        Err(bedrock::FrameError(
                            "the stream ended inside a message".into(),
                        )),
                        (body, bedrock::FrameReader::new(), done),
                    ));
                }
                None => return None,
            }
        }
    })
}

/// Decodes a Bedrock event stream (Converse, or an Anthropic model through
/// InvokeModel: `dialect`) into canonical events, with the idle timeout.
fn bedrock_stream(
    body: Body,
    dialect: Dialect,
    idle: Duration,
    secrets: Arc<Redactor>,
) -> EventStream {
    Box::pin(Events {
        sse: Box::pin(bedrock_frames(body)),
        decoder: bedrock_decoder(dialect),
        idle,
        stall: Box::pin(tokio::time::sleep(idle)),
        armed: false,
        ended: false,
        secrets,
    })
}

fn bedrock_decoder(dialect: Dialect) -> Decoder {
    match dialect {
        Dialect::Anthropic => Decoder::Invoke(hale_proto::anthropic::StreamDecoder::new()),
        Dialect::Bedrock | Dialect::OpenAi | Dialect::Responses | Dialect::Gemini => {
            Decoder::Converse(hale_proto::bedrock::StreamDecoder::new())
        }
    }
}

/// A Bedrock event stream's bytes, whole, through the decoding path of a
/// live stream (framing, chunks, the dialect's decoder): one item per
/// message, an `Err` ending it. For the fuzz target and tests.
pub fn decode_bedrock_stream(
    bytes: &[u8],
    invoke: bool,
) -> Vec<Result<Option<Vec<StreamEvent>>, Failure>> {
    let dialect = if invoke {
        Dialect::Anthropic
    } else {
        Dialect::Bedrock
    };
    let mut decoder = bedrock_decoder(dialect);
    let mut reader = bedrock::FrameReader::new();
    reader.push(bytes);
    let mut out = Vec::new();
    while let Some(f) = reader.next_frame() {
        let item = match f {
            Ok(frame) => decoder.decode(&bedrock_sse(frame), &Redactor::default()),
            Err(e) => Err(Failure::transport(Transport::StreamCut, &e.to_string())),
        };
        let end = item.is_err();
        out.push(item);
        if end {
            break;
        }
    }
    out
}

/// An upstream event stream being decoded: one item per SSE event.
///
/// The idle timeout is one timer for the stream's life, moved to `idle`
/// after each request for the next event. A `tokio::time::timeout` per
/// event, as before, set a timer in the wheel and took it out again for
/// every token; moving a pending timer later is one atomic store.
struct Events<S> {
    sse: Pin<Box<S>>,
    decoder: Decoder,
    idle: Duration,
    stall: Pin<Box<tokio::time::Sleep>>,
    /// `stall` is set for the event being waited for.
    armed: bool,
    ended: bool,
    /// Masks the upstream's text in a failure ([`crate::secrets`]).
    secrets: Arc<Redactor>,
}

impl<S, E> Stream for Events<S>
where
    S: Stream<Item = Result<sse_stream::Sse, E>>,
    E: std::fmt::Display,
{
    type Item = Result<Option<Vec<StreamEvent>>, Failure>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        if !this.armed {
            let deadline = tokio::time::Instant::now() + this.idle;
            this.stall.as_mut().reset(deadline);
            this.armed = true;
        }
        let next = match this.sse.as_mut().poll_next(cx) {
            Poll::Ready(next) => next,
            Poll::Pending => {
                if this.stall.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.ended = true;
                return Poll::Ready(Some(Err(Failure::transport(
                    Transport::StreamStalled,
                    "stream stalled past the idle timeout",
                ))));
            }
        };
        this.armed = false;
        let item = match next {
            None => {
                this.ended = true;
                return Poll::Ready(None);
            }
            Some(Err(e)) => Err(Failure::transport(
                Transport::StreamCut,
                &format!("stream cut: {e}"),
            )),
            Some(Ok(ev)) => this.decoder.decode(&ev, &this.secrets),
        };
        this.ended = item.is_err();
        // Whatever the upstream put in its failure is masked (crate::secrets).
        let item = item.map_err(|mut f| {
            this.secrets.mask_string(&mut f.message);
            f
        });
        Poll::Ready(Some(item))
    }
}

impl Decoder {
    /// One SSE event: its canonical events, `Ok(None)` for a malformed one
    /// (the relay counts and skips it), `Err` for an upstream error event
    /// (read with `secrets` masked, before its message is cut).
    fn decode(
        &mut self,
        ev: &sse_stream::Sse,
        secrets: &Redactor,
    ) -> Result<Option<Vec<StreamEvent>>, Failure> {
        let Some(data) = ev.data.as_deref() else {
            return Ok(Some(Vec::new()));
        };
        if matches!(self, Decoder::Converse(_) | Decoder::Invoke(_))
            && ev.event.as_deref() == Some(BEDROCK_EXCEPTION)
        {
            return Err(bedrock_exception(ev.id.as_deref(), &secrets.mask(data)));
        }
        let decoded = match self {
            Decoder::OpenAi(d) => d.decode(ev.event.as_deref(), data),
            Decoder::Anthropic(d) | Decoder::Invoke(d) => d.decode(ev.event.as_deref(), data),
            Decoder::Responses(d) => d.decode(ev.event.as_deref(), data),
            Decoder::Gemini(d) => d.decode(data),
            Decoder::Converse(d) => d.decode(ev.event.as_deref().unwrap_or(""), data.as_bytes()),
        };
        match decoded {
            Ok(evs) => Ok(Some(evs)),
            Err(e) => {
                let data = &*secrets.mask(data);
                // A Responses `error` or `response.failed` event, in the
                // shape the classifier reads (the `type` names it, with or
                // without an SSE event name).
                let responses = match self {
                    Decoder::Responses(_) => {
                        hale_proto::responses::error_body(ev.event.as_deref(), data)
                    }
                    Decoder::Gemini(_) => return gemini_chunk_failure(data, &e.to_string()),
                    Decoder::OpenAi(_)
                    | Decoder::Anthropic(_)
                    | Decoder::Converse(_)
                    | Decoder::Invoke(_) => None,
                };
                match responses {
                    Some(body) => Err(stream_error(&body, &e.to_string())),
                    None if ev.event.as_deref() == Some("error") => {
                        Err(stream_error(data, &e.to_string()))
                    }
                    None => Ok(None),
                }
            }
        }
    }
}

/// A Gemini chunk the decoder refused: Google's error shape (classified
/// from its body), a safety block or unusable answer (hale-core's rule),
/// or else a malformed chunk (`Ok(None)`, counted and skipped).
fn gemini_chunk_failure(data: &str, fallback: &str) -> Result<Option<Vec<StreamEvent>>, Failure> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(data) else {
        return Ok(None);
    };
    if v.get("error").is_some() {
        return Err(stream_error(data, fallback));
    }
    match hale_proto::gemini::answer_failure(&v) {
        Some(f) => Err(Failure::from_gemini(f)),
        None => Ok(None),
    }
}

/// An exception inside a Bedrock event stream (`kind` its
/// `:exception-type`, `payload` its `{"message"}`), classified by
/// hale-core's Bedrock rule; one it does not know is a broken stream.
fn bedrock_exception(kind: Option<&str>, payload: &str) -> Failure {
    let mut obs = Observation::new(SystemTime::now());
    obs.body = Some(payload);
    let c = hale_core::bedrock::classify(&obs, kind);
    let mut f = Failure::from_classified(c, None);
    if f.class == ErrorClass::Unknown {
        f.class = ErrorClass::StreamBroken;
    }
    if f.message.is_empty() {
        f.message = format!("Bedrock stream exception {}", kind.unwrap_or("(unnamed)"));
    }
    f
}

/// An upstream's error event (or failed answer) `body`, classified; one
/// the classifier does not know is a broken stream.
fn stream_error(body: &str, fallback: &str) -> Failure {
    let c = classify::classify(&Observation {
        status: None,
        retry_after: None,
        retry_after_ms: None,
        body: Some(body),
        transport: None,
        now_wall: SystemTime::now(),
    });
    let mut f = Failure::from_classified(c, None);
    if f.class == ErrorClass::Unknown {
        f.class = ErrorClass::StreamBroken;
    }
    if f.message.is_empty() {
        f.message = fallback.to_owned();
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use tokio::time::{Instant, sleep};

    const IDLE: Duration = Duration::from_secs(10);

    /// Two gateways' upstream clients, built from one config in one
    /// process, each fetch and keep their own Entra token and register it
    /// with their own redactor: no slot is shared between them.
    #[tokio::test]
    async fn two_clients_in_one_process_keep_separate_entra_tokens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let count = dir.path().join("n");
        // Prints entra-tok-1, entra-tok-2, … one more each run.
        let command = format!(
            "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; echo entra-tok-$n",
            c = count.display()
        );
        let mut p =
            ProviderConfig::new("azure", ProviderKind::Azure, "http://127.0.0.1:9", "gpt-4o");
        let az = hale_core::config::AzureConfig {
            api_version: None,
            deployments: Default::default(),
            auth: hale_core::config::AzureAuth::EntraCommand {
                command,
                refresh: Duration::from_secs(3600),
            },
        };
        p.azure = Some(az.clone());
        let cfg = Config::with_providers(vec![p.clone()]);
        async fn bearer(
            client: &Client,
            p: &ProviderConfig,
            az: &hale_core::config::AzureConfig,
        ) -> String {
            let mut post = Post::raw_json(
                Ok(http::Uri::from_static("http://127.0.0.1:9/x")),
                bytes::Bytes::new(),
            );
            client
                .creds
                .azure
                .authorize(&mut post, p, az, &client.secrets)
                .await
                .expect("authorized");
            post.headers()["authorization"]
                .to_str()
                .expect("ascii")
                .to_owned()
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let a = Client::new(&cfg, Arc::new(Redactor::default())).expect("client a");
        let b = Client::new(&cfg, Arc::new(Redactor::default())).expect("client b");
        assert_eq!(bearer(&a, &p, &az).await, "Bearer entra-tok-1");
        assert_eq!(
            bearer(&b, &p, &az).await,
            "Bearer entra-tok-2",
            "b ran the command itself"
        );
        // Each keeps its own token from then on.
        assert_eq!(bearer(&a, &p, &az).await, "Bearer entra-tok-1");
        assert_eq!(bearer(&b, &p, &az).await, "Bearer entra-tok-2");
        // Each token is masked by the redactor of the client that fetched it.
        assert_eq!(
            a.secrets.mask("entra-tok-1 entra-tok-2"),
            "[redacted] entra-tok-2"
        );
        assert_eq!(
            b.secrets.mask("entra-tok-1 entra-tok-2"),
            "entra-tok-1 [redacted]"
        );
    }

    /// An upstream that sends one text chunk after each of `gaps`, then ends.
    fn upstream(
        gaps: Vec<Duration>,
    ) -> impl Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> {
        futures::stream::unfold(gaps.into_iter(), |mut gaps| async move {
            let gap = gaps.next()?;
            sleep(gap).await;
            let chunk = r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#;
            Some((Ok(sse_stream::Sse::default().data(chunk)), gaps))
        })
    }

    fn events(gaps: Vec<Duration>) -> EventStream {
        Box::pin(Events {
            sse: Box::pin(upstream(gaps)),
            decoder: Decoder::OpenAi(hale_proto::openai::StreamDecoder::new()),
            idle: IDLE,
            stall: Box::pin(tokio::time::sleep(IDLE)),
            armed: false,
            ended: false,
            secrets: Arc::default(),
        })
    }

    mod urls {
        use super::super::*;
        use hale_core::config::{
            AzureAuth, AzureConfig, BedrockAuth, BedrockConfig, VertexConfig, VertexCredentials,
        };
        use percent_encoding::percent_decode_str;
        use proptest::prelude::*;

        const BASE: &str = "https://res.example.com/base";
        const VERSION: &str = "2024-10-21";

        /// Where a provider kind's URL puts the model, and what it adds.
        enum Place {
            /// Not in the URL: the path is exactly these segments.
            Nowhere(&'static [&'static str]),
            /// `before`, then the model's segment, then `after`.
            Segment {
                before: Vec<String>,
                after: &'static [&'static str],
            },
            /// `before`, then the model's segment followed by `:{method}`.
            Method {
                before: Vec<String>,
                method: &'static str,
            },
        }

        /// One configured provider of each kind and URL scheme.
        fn providers() -> Vec<ProviderConfig> {
            use ProviderKind::*;
            let mut out = vec![
                ProviderConfig::new("openai", OpenAi, BASE, "gpt-4o"),
                ProviderConfig::new("anthropic", Anthropic, BASE, "claude"),
                ProviderConfig::new("gemini", Gemini, BASE, "gemini-2.5-flash"),
            ];
            let mut responses = ProviderConfig::new("responses", OpenAi, BASE, "gpt-4o");
            responses.api = ProviderApi::Responses;
            out.push(responses);
            for (name, version, api) in [
                ("azure-deployments", Some(VERSION), ProviderApi::Chat),
                (
                    "azure-deployments-responses",
                    Some(VERSION),
                    ProviderApi::Responses,
                ),
                ("azure-v1", None, ProviderApi::Chat),
            ] {
                let mut p = ProviderConfig::new(name, Azure, BASE, "gpt-4o");
                p.api = api;
                p.azure = Some(AzureConfig {
                    api_version: version.map(str::to_owned),
                    deployments: [("mapped".to_owned(), "prod-4o".to_owned())].into(),
                    auth: AzureAuth::ApiKey,
                });
                out.push(p);
            }
            let mut v = ProviderConfig::new("vertex", Vertex, BASE, "gemini-2.5-pro");
            v.vertex = Some(VertexConfig {
                project: "my-proj".into(),
                location: "us-east5".into(),
                publisher: None,
                credentials: VertexCredentials::Default,
            });
            out.push(v);
            let mut b = ProviderConfig::new("bedrock", Bedrock, BASE, "amazon.nova-pro-v1:0");
            b.bedrock = Some(BedrockConfig {
                region: "us-east-1".into(),
                api: None,
                auth: BedrockAuth::ApiKey,
            });
            out.push(b);
            out
        }

        /// The path a provider's URL must have for `model` (segments after
        /// the base's), the client's string each names, and its query.
        fn expected(
            p: &ProviderConfig,
            model: &str,
            stream: bool,
        ) -> (Place, String, Option<String>) {
            let segs = |s: &[&str]| s.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
            match (p.kind, &p.azure, &p.vertex, &p.bedrock) {
                (ProviderKind::Azure, Some(az), _, _) => match &az.api_version {
                    Some(v) => (
                        Place::Segment {
                            before: segs(&["openai", "deployments"]),
                            after: match p.api {
                                ProviderApi::Chat => &["chat", "completions"],
                                ProviderApi::Responses => &["responses"],
                            },
                        },
                        hale_core::azure::deployment(az, model).to_owned(),
                        Some(format!("api-version={v}")),
                    ),
                    None => (
                        Place::Nowhere(&["openai", "v1", "chat", "completions"]),
                        String::new(),
                        None,
                    ),
                },
                (ProviderKind::Gemini, ..) => (
                    Place::Method {
                        before: segs(&["models"]),
                        method: if stream {
                            "streamGenerateContent"
                        } else {
                            "generateContent"
                        },
                    },
                    model.strip_prefix("models/").unwrap_or(model).to_owned(),
                    stream.then(|| "alt=sse".to_owned()),
                ),
                (ProviderKind::Vertex, _, Some(v), _) => {
                    let publisher = hale_core::vertex::publisher(v, model);
                    let method = match (publisher, stream) {
                        (Publisher::Google, false) => "generateContent",
                        (Publisher::Google, true) => "streamGenerateContent",
                        (Publisher::Anthropic, false) => "rawPredict",
                        (Publisher::Anthropic, true) => "streamRawPredict",
                    };
                    let google_stream = publisher == Publisher::Google && stream;
                    (
                        Place::Method {
                            before: segs(&[
                                "v1",
                                "projects",
                                "my-proj",
                                "locations",
                                "us-east5",
                                "publishers",
                                publisher.as_str(),
                                "models",
                            ]),
                            method,
                        },
                        model.rsplit('/').next().unwrap_or(model).to_owned(),
                        google_stream.then(|| "alt=sse".to_owned()),
                    )
                }
                (ProviderKind::Bedrock, _, _, Some(bc)) => {
                    let op: &'static [&'static str] =
                        match (hale_core::bedrock::api_for(bc.api, model), stream) {
                            (hale_core::config::BedrockApi::Converse, false) => &["converse"],
                            (hale_core::config::BedrockApi::Converse, true) => &["converse-stream"],
                            (hale_core::config::BedrockApi::Invoke, false) => &["invoke"],
                            (hale_core::config::BedrockApi::Invoke, true) => {
                                &["invoke-with-response-stream"]
                            }
                        };
                    (
                        Place::Segment {
                            before: segs(&["model"]),
                            after: op,
                        },
                        model.to_owned(),
                        None,
                    )
                }
                (ProviderKind::OpenAi, ..) => match p.api {
                    ProviderApi::Chat => (
                        Place::Nowhere(&["chat", "completions"]),
                        String::new(),
                        None,
                    ),
                    ProviderApi::Responses => (Place::Nowhere(&["responses"]), String::new(), None),
                },
                (ProviderKind::Anthropic, ..) => {
                    (Place::Nowhere(&["v1", "messages"]), String::new(), None)
                }
                (ProviderKind::Azure | ProviderKind::Vertex | ProviderKind::Bedrock, ..) => {
                    unreachable!("each kind is built with its settings")
                }
            }
        }

        fn decoded(s: &str) -> String {
            percent_decode_str(s).decode_utf8_lossy().into_owned()
        }

        /// Arbitrary strings, and strings built of the pieces an attacker
        /// would use: separators, dots, escapes, queries and fragments.
        fn model() -> impl Strategy<Value = String> {
            let piece = prop_oneof![
                Just("/"),
                Just("\\"),
                Just("."),
                Just(".."),
                Just("?"),
                Just("#"),
                Just("&"),
                Just("="),
                Just("%"),
                Just("%2e"),
                Just("%2F"),
                Just("%25"),
                Just(":"),
                Just("@"),
                Just(" "),
                Just("\u{0}"),
                Just("é"),
                Just("models/"),
                Just("publishers/google/models/"),
                Just("api-version=2023-05-15"),
                Just("key=k"),
                Just("gpt-4o"),
                Just("mapped"),
                Just("claude-x"),
                Just("anthropic.claude-3"),
                Just("embeddings"),
            ];
            prop_oneof![
                any::<String>(),
                proptest::collection::vec(piece, 0..8).prop_map(|v| v.concat()),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2048))]

            /// Issue 42: for every provider kind, whatever model a client
            /// names, the URL an attempt is sent to has exactly the path
            /// segments of its kind — the client's string at most one of
            /// them, which decodes back to it — the kind's own query or
            /// none, and no fragment; the `url` crate (which reqwest and
            /// most proxies' rules follow) and `http::Uri` read the same
            /// and normalise nothing. Or the model is refused, exactly when
            /// it is empty or has a `.` or `..` part.
            #[test]
            fn a_clients_model_is_at_most_one_segment_of_any_providers_url(model in model(), stream in any::<bool>()) {
                for p in providers() {
                    let (place, named, query) = expected(&p, &model, stream);
                    let refusal = match &place {
                        Place::Nowhere(_) => None,
                        Place::Segment { .. } | Place::Method { .. } => {
                            hale_core::segment::problem(&model).or_else(|| hale_core::segment::problem(&named))
                        }
                    };
                    let got = url(&p, &model, stream);
                    prop_assert_eq!(got.as_ref().err().copied(), refusal, "{}: {:?}", p.name, model);
                    prop_assert_eq!(model_refused(&p, &model).is_some(), refusal.is_some());
                    let Ok(text) = got else { continue };
                    let parsed = reqwest::Url::parse(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
                    prop_assert_eq!(parsed.as_str(), text.as_str(), "the url crate changed nothing");
                    prop_assert_eq!(parsed.fragment(), None);
                    prop_assert_eq!(parsed.query().map(str::to_owned), query.clone(), "{}", text);
                    let segments: Vec<&str> = parsed.path_segments().map(Iterator::collect).unwrap_or_default();
                    prop_assert_eq!(segments[0], "base");
                    let rest = &segments[1..];
                    match &place {
                        Place::Nowhere(want) => prop_assert_eq!(rest, *want),
                        Place::Segment { before, after } => {
                            prop_assert_eq!(rest.len(), before.len() + 1 + after.len(), "{}", text);
                            prop_assert_eq!(&rest[..before.len()], &before[..]);
                            prop_assert_eq!(decoded(rest[before.len()]), named.clone());
                            prop_assert_eq!(&rest[before.len() + 1..], *after);
                        }
                        Place::Method { before, method } => {
                            prop_assert_eq!(rest.len(), before.len() + 1, "{}", text);
                            prop_assert_eq!(&rest[..before.len()], &before[..]);
                            let (seg, m) = rest[before.len()].rsplit_once(':').unwrap_or(("", ""));
                            prop_assert_eq!(m, *method);
                            prop_assert_eq!(decoded(seg), named.clone());
                        }
                    }
                    // What is sent: the request target hale builds from it.
                    let uri = http_client::uri(&text).map_err(|e| TestCaseError::fail(e.redacted()))?;
                    prop_assert_eq!(uri.path(), parsed.path());
                    prop_assert_eq!(uri.query(), parsed.query());
                }
            }
        }

        /// The issue's own examples: an Azure deployment URL keeps its
        /// endpoint and API version; Bedrock's dot segments are refused.
        #[test]
        fn the_issues_examples() {
            let ps = providers();
            let by = |n: &str| ps.iter().find(|p| p.name == n).expect("provider");
            let az = by("azure-deployments");
            assert_eq!(
                url(az, "gpt-4o/embeddings?api-version=2023-05-15#", false).as_deref(),
                Ok(
                    "https://res.example.com/base/openai/deployments/gpt-4o%2Fembeddings%3Fapi-version%3D2023-05-15%23/chat/completions?api-version=2024-10-21"
                )
            );
            assert_eq!(
                url(az, "x?key=k", false).as_deref(),
                Ok(
                    "https://res.example.com/base/openai/deployments/x%3Fkey%3Dk/chat/completions?api-version=2024-10-21"
                )
            );
            let why = model_refused(az, "../../x").expect("refused");
            assert!(
                why.contains("provider `azure-deployments`") && why.contains("`..`"),
                "{why}"
            );
            for m in [".", "..", "../x"] {
                assert_eq!(url(by("bedrock"), m, false), Err(Refusal::DotPart), "{m}");
            }
            // Not in the URL of an OpenAI provider: nothing to refuse.
            assert_eq!(model_refused(by("openai"), ".."), None);
        }
    }

    /// A TLS handshake failure is a network failure to connect (it marks
    /// the `base_url`) and keeps its reason: which certificate
    /// check failed is what an operator needs.
    #[test]
    fn a_tls_failure_is_a_failure_to_connect_with_its_reason() {
        let f = Failure::transport(Transport::Tls, "invalid peer certificate: UnknownIssuer");
        assert_eq!(f.class, ErrorClass::Network);
        assert!(f.connect_failed);
        assert_eq!(
            f.message,
            "tls handshake failed: invalid peer certificate: UnknownIssuer"
        );
        // Other transports keep their label; a reset is not a failure to connect.
        let f = Failure::transport(Transport::ConnectReset, "connection reset by peer");
        assert_eq!(f.message, "connection reset");
        assert!(!f.connect_failed);
    }

    /// A Responses upstream's `response.failed` and `error` events end the
    /// stream as upstream errors classified from their bodies (with or
    /// without an SSE event name); a garbage line is skipped as malformed.
    #[test]
    fn responses_error_events_are_classified_upstream_errors() {
        let failed = r#"{"type":"response.failed","sequence_number":9,"response":{"id":"resp_1","status":"failed","error":{"code":"rate_limit_exceeded","message":"Rate limit reached, try again in 2s"}}}"#;
        let error = r#"{"type":"error","sequence_number":9,"code":"server_error","message":"The server had an error","param":null}"#;
        let overflow = r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"context_length_exceeded","message":"Your input exceeds the context window of this model."}}}"#;
        for (event, data, class) in [
            (Some("response.failed"), failed, ErrorClass::RateLimit),
            (None, failed, ErrorClass::RateLimit),
            (Some("error"), error, ErrorClass::Overloaded),
            (None, error, ErrorClass::Overloaded),
            (
                Some("response.failed"),
                overflow,
                ErrorClass::ContextOverflow,
            ),
        ] {
            let mut d = Decoder::Responses(hale_proto::responses::StreamDecoder::new());
            let mut ev = sse_stream::Sse::default().data(data);
            if let Some(name) = event {
                ev = ev.event(name);
            }
            let f = d
                .decode(&ev, &Redactor::default())
                .expect_err("an upstream error");
            assert_eq!(f.class, class, "{event:?} {data}: {f:?}");
            assert!(!f.message.is_empty());
        }
        let mut d = Decoder::Responses(hale_proto::responses::StreamDecoder::new());
        let garbage = sse_stream::Sse::default().data("{not json");
        assert!(matches!(d.decode(&garbage, &Redactor::default()), Ok(None)));
    }

    fn texts(item: &Result<Option<Vec<StreamEvent>>, Failure>) -> usize {
        match item {
            Ok(Some(evs)) => evs
                .iter()
                .filter(|e| matches!(e, StreamEvent::TextDelta(_)))
                .count(),
            Ok(None) | Err(_) => 0,
        }
    }

    /// A stream that runs far longer than the idle timeout, each gap under
    /// it, is never called stalled: the one timer moves with every event.
    #[tokio::test(start_paused = true)]
    async fn a_long_stream_with_short_gaps_never_stalls() {
        let gaps = vec![IDLE * 9 / 10; 100];
        let start = Instant::now();
        let items: Vec<_> = events(gaps).collect().await;
        assert_eq!(items.len(), 100);
        assert!(items.iter().all(|i| texts(i) == 1), "{:?}", items.last());
        assert!(start.elapsed() >= IDLE * 90, "{:?}", start.elapsed());
    }

    /// A gap longer than the idle timeout ends the stream with a stall,
    /// `idle` after the request for the next event, and nothing after it.
    #[tokio::test(start_paused = true)]
    async fn a_gap_past_the_idle_timeout_is_a_stall_at_the_timeout() {
        let short = IDLE / 2;
        let mut s = events(vec![short, short, short, IDLE * 3, short]);
        for _ in 0..3 {
            let item = s.next().await.expect("an event");
            assert_eq!(texts(&item), 1);
        }
        let asked = Instant::now();
        let item = s.next().await.expect("the stall");
        let failure = item.expect_err("a stall");
        assert_eq!(failure.class, ErrorClass::StreamBroken, "{failure:?}");
        let waited = asked.elapsed();
        assert!(
            waited >= IDLE && waited < IDLE + Duration::from_millis(5),
            "{waited:?}"
        );
        assert!(s.next().await.is_none(), "the stream ends at the stall");
    }

    /// The idle window opens when the next event is asked for: a caller
    /// that reads slowly, with events waiting, is not taken for a stall.
    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_is_not_a_stalled_upstream() {
        // Each event comes a moment after it is asked for, so the timer is
        // looked at while waiting, well after the previous event.
        let mut s = events(vec![IDLE / 100; 5]);
        for _ in 0..5 {
            let item = s.next().await.expect("an event");
            assert_eq!(texts(&item), 1);
            sleep(IDLE * 3).await;
        }
        assert!(s.next().await.is_none());
    }
}
