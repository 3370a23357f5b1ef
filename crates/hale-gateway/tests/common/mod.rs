//! The end-to-end harness shared by the `e2e_*` tests.
//!
//! Each test builds its own world: chaos providers (and, for statuses chaos
//! cannot produce, a one-route [`Stub`] provider) on `127.0.0.1:0`, a config
//! built in code, a gateway serving on `127.0.0.1:0` over a temporary data
//! directory. Nothing is global and no port is fixed, so the tests run in
//! parallel. Calls go through reqwest exactly as an agent's would, and the
//! reply is decoded from either wire dialect, streaming or not, into one
//! [`Reply`] the tests assert on.
#![allow(dead_code)]

use futures::StreamExt;
use hale_chaos::{ChaosConfig, ChaosHandle};
use hale_core::config::{Config, ProviderConfig, ProviderKind, Target};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The chaos deterministic answer of `n` words: `w0 w1 … w{n-1}`.
#[allow(unused_imports)]
pub use hale_testkit::words;

/// The default chaos answer (60 words).
pub fn full() -> String {
    words(60)
}

/// reqwest (rustls) needs a process-wide crypto provider; the binary installs
/// it at start, so the tests do too.
#[allow(unused_imports)]
pub use hale_testkit::install_crypto;

/// A chaos server of its own.
pub async fn chaos() -> ChaosHandle {
    install_crypto();
    hale_chaos::spawn("127.0.0.1:0".parse().expect("addr"), ChaosConfig::default())
        .await
        .expect("chaos starts")
}

/// A chaos server with a script (YAML: model → steps).
pub async fn chaos_script(yaml: &str) -> ChaosHandle {
    let script = hale_chaos::parse_script(yaml).expect("script parses");
    hale_chaos::spawn(
        "127.0.0.1:0".parse().expect("addr"),
        ChaosConfig {
            script: Some(script),
            ..Default::default()
        },
    )
    .await
    .expect("chaos starts")
}

/// Timeouts every test provider starts with: short enough that a wrong turn
/// fails a test in seconds rather than minutes, long enough for a loaded CI box.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(5);

/// `p` with every timeout [`TEST_TIMEOUT`].
pub fn with_test_timeouts(mut p: ProviderConfig) -> ProviderConfig {
    p.timeout = TEST_TIMEOUT;
    p.first_token_timeout = TEST_TIMEOUT;
    p.stream_idle_timeout = TEST_TIMEOUT;
    p
}

/// An OpenAI-kind provider pointing at `chaos`.
pub fn openai(name: &str, chaos: &ChaosHandle, model: &str) -> ProviderConfig {
    with_test_timeouts(ProviderConfig::new(
        name,
        ProviderKind::OpenAi,
        &chaos.base_url_openai,
        model,
    ))
}

/// An Anthropic-kind provider pointing at `chaos`.
pub fn anthropic(name: &str, chaos: &ChaosHandle, model: &str) -> ProviderConfig {
    with_test_timeouts(ProviderConfig::new(
        name,
        ProviderKind::Anthropic,
        &chaos.base_url_anthropic,
        model,
    ))
}

/// A Gemini-kind provider pointing at `chaos` (with a key: chaos refuses
/// a Gemini request without `x-goog-api-key`).
pub fn gemini(name: &str, chaos: &ChaosHandle, model: &str) -> ProviderConfig {
    let mut p = with_test_timeouts(ProviderConfig::new(
        name,
        ProviderKind::Gemini,
        &chaos.base_url_gemini,
        model,
    ));
    p.api_key = Some(hale_core::config::Secret::new("k-gemini-test".to_owned()));
    p
}

/// An Azure-kind provider pointing at `chaos`'s Azure routes: deployment
/// URLs (`api_version` set), each model its own deployment, any `api-key`.
pub fn azure(name: &str, chaos: &ChaosHandle, model: &str) -> ProviderConfig {
    let mut p = with_test_timeouts(ProviderConfig::new(
        name,
        ProviderKind::Azure,
        &chaos.base_url_anthropic,
        model,
    ));
    p.api_key = Some(hale_core::config::Secret::new("azure-test-key"));
    p.azure = Some(hale_core::config::AzureConfig {
        api_version: Some("2024-10-21".into()),
        deployments: Default::default(),
        auth: hale_core::config::AzureAuth::ApiKey,
    });
    p
}

/// A Bedrock-kind provider pointing at `chaos`'s Bedrock routes with a
/// Bedrock API key (chaos takes any bearer); the model id decides
/// Converse or InvokeModel (`anthropic.` ids), unless `api` is set after.
pub fn bedrock(name: &str, chaos: &ChaosHandle, model: &str) -> ProviderConfig {
    let mut p = with_test_timeouts(ProviderConfig::new(
        name,
        ProviderKind::Bedrock,
        &chaos.base_url_anthropic,
        model,
    ));
    p.api_key = Some(hale_core::config::Secret::new("bedrock-test-key"));
    p.bedrock = Some(hale_core::config::BedrockConfig {
        region: "us-east-1".into(),
        api: None,
        auth: hale_core::config::BedrockAuth::ApiKey,
    });
    p
}

/// How long [`Hale::turn`] waits for a streamed turn's journal row.
pub const JOURNAL_WAIT: Duration = Duration::from_secs(3);

/// The route every test calls.
pub const ROUTE: &str = "r";

/// A config with these providers and one route [`ROUTE`] over them in order,
/// each serving its provider's default model. No fallback chain beyond the route.
pub fn config(providers: Vec<ProviderConfig>) -> Config {
    let targets = providers
        .iter()
        .map(|p| Target {
            provider: p.name.clone(),
            model: p.default_model.clone(),
        })
        .collect();
    let mut cfg = Config::with_providers(providers);
    cfg.routes.insert(ROUTE.to_owned(), targets);
    cfg
}

/// A running gateway over a data directory.
pub struct Hale {
    pub base: String,
    pub http: reqwest::Client,
    pub gw: Arc<hale_gateway::Gateway>,
    pub store: hale_store::Store,
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Hale {
    /// Starts a gateway over a fresh temporary data directory.
    pub async fn start(cfg: Config) -> Hale {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let mut h = Self::start_in(cfg, &dir).await;
        h._tmp = Some(tmp);
        h
    }

    /// Starts a gateway over `dir` (kept by the caller, e.g. across a restart).
    pub async fn start_in(mut cfg: Config, dir: &Path) -> Hale {
        install_crypto();
        cfg.data_dir = dir.to_path_buf();
        let cfg = Arc::new(cfg);
        let store = hale_store::Store::open(None, dir, (&cfg.events).into())
            .await
            .expect("store opens");
        let gw = hale_gateway::Gateway::new(cfg, store.clone())
            .await
            .expect("gateway");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(hale_gateway::http::serve(gw.clone(), listener, async {
            let _ = stopped.await;
        }));
        let http = hale_testkit::client(Duration::from_secs(120));
        Hale {
            base,
            http,
            gw,
            store,
            dir: dir.to_path_buf(),
            _tmp: None,
            stop: Some(stop),
            server: Some(server),
        }
    }

    /// Stops serving, flushes and closes the store.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
        let _ = self.store.flush().await;
        self.store.close().await;
    }

    /// An OpenAI-shaped chat call.
    pub fn openai(&self, model: &str) -> Call<'_> {
        Call::new(self, Dialect::OpenAi, model)
    }

    /// An Anthropic-shaped chat call.
    pub fn anthropic(&self, model: &str) -> Call<'_> {
        Call::new(self, Dialect::Anthropic, model)
    }

    /// `GET path` as JSON.
    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("GET");
        let s = r.status().as_u16();
        (s, r.json().await.unwrap_or(Value::Null))
    }

    /// `GET path` as text.
    pub async fn get_text(&self, path: &str) -> (u16, String) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("GET");
        let s = r.status().as_u16();
        (s, r.text().await.unwrap_or_default())
    }

    /// The value of the unlabelled metric `name` on `/metrics` (a counter
    /// or gauge), and the whole text for a failing assertion's message.
    pub async fn metric(&self, name: &str) -> (u64, String) {
        let (s, text) = self.get_text("/metrics").await;
        assert_eq!(s, 200, "{text}");
        let v = metric_in(&text, name);
        (v, text)
    }

    /// `POST path` (empty body) as JSON.
    pub async fn post_json(&self, path: &str) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .send()
            .await
            .expect("POST");
        let s = r.status().as_u16();
        (s, r.json().await.unwrap_or(Value::Null))
    }

    /// The turn's record from `GET /turns/{id}`.
    ///
    /// A streamed turn is journalled by the relay task after the stream's last
    /// frame went out, so a caller that asks right after `[DONE]` can race it:
    /// this waits up to [`JOURNAL_WAIT`] for the row (see the report).
    pub async fn turn(&self, id: &str) -> Value {
        let t0 = Instant::now();
        loop {
            let (s, v) = self.get_json(&format!("/turns/{id}")).await;
            if s == 404 && t0.elapsed() < JOURNAL_WAIT {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            assert_eq!(s, 200, "GET /turns/{id}: {v}");
            return v;
        }
    }

    /// The turn's timeline rows.
    pub async fn timeline(&self, id: &str) -> Vec<Value> {
        self.turn(id).await["timeline"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    OpenAi,
    Anthropic,
}

/// A chat call being built.
pub struct Call<'a> {
    hale: &'a Hale,
    dialect: Dialect,
    body: Value,
    headers: Vec<(String, String)>,
}

impl<'a> Call<'a> {
    fn new(hale: &'a Hale, dialect: Dialect, model: &str) -> Self {
        let body = match dialect {
            Dialect::OpenAi => json!({
                "model": model,
                "messages": [{"role": "user", "content": "Tell me something useful."}],
            }),
            Dialect::Anthropic => json!({
                "model": model,
                "max_tokens": 1024,
                "messages": [{"role": "user", "content": "Tell me something useful."}],
            }),
        };
        Self {
            hale,
            dialect,
            body,
            headers: Vec::new(),
        }
    }

    pub fn stream(mut self, on: bool) -> Self {
        self.body["stream"] = json!(on);
        self
    }

    /// OpenAI `stream_options.include_usage: true`.
    pub fn include_usage(mut self) -> Self {
        self.body["stream_options"] = json!({"include_usage": true});
        self
    }

    pub fn agent(self, agent: &str) -> Self {
        self.header("x-hale-agent", agent)
    }

    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.to_owned(), v.to_owned()));
        self
    }

    /// Replaces the user message's text.
    pub fn user(mut self, text: &str) -> Self {
        self.body["messages"] = json!([{"role": "user", "content": text}]);
        self
    }

    pub fn body_mut(&mut self) -> &mut Value {
        &mut self.body
    }

    pub async fn send(self) -> Reply {
        let path = match self.dialect {
            Dialect::OpenAi => "/v1/chat/completions",
            Dialect::Anthropic => "/v1/messages",
        };
        let stream = self.body["stream"].as_bool().unwrap_or(false);
        let t0 = Instant::now();
        let mut rb = self
            .hale
            .http
            .post(format!("{}{path}", self.hale.base))
            .json(&self.body);
        for (k, v) in &self.headers {
            rb = rb.header(k, v);
        }
        let resp = rb.send().await.expect("the gateway answers");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let h = |k: &str| {
            headers
                .get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        let mut reply = Reply {
            status,
            turn_id: h("x-hale-turn-id"),
            provider: h("x-hale-provider"),
            model_header: h("x-hale-model"),
            attempts: h("x-hale-attempts"),
            degraded: h("x-hale-degraded"),
            headers: headers.clone(),
            elapsed: Duration::ZERO,
            first_byte: None,
            raw: String::new(),
            json: Value::Null,
            text: String::new(),
            model: String::new(),
            finish: None,
            usage: None,
            done: false,
            error: None,
            stream,
        };
        if stream && status == 200 {
            let mut s = resp.bytes_stream();
            let mut raw = Vec::new();
            while let Some(chunk) = s.next().await {
                match chunk {
                    Ok(c) => {
                        if reply.first_byte.is_none() {
                            reply.first_byte = Some(t0.elapsed());
                        }
                        raw.extend_from_slice(&c);
                    }
                    Err(e) => {
                        reply.error = Some(json!({"transport": e.to_string()}));
                        break;
                    }
                }
            }
            reply.raw = String::from_utf8_lossy(&raw).into_owned();
            reply.decode_sse(self.dialect);
        } else {
            reply.raw = resp.text().await.unwrap_or_default();
            reply.json = serde_json::from_str(&reply.raw).unwrap_or(Value::Null);
            reply.decode_json(self.dialect);
        }
        reply.elapsed = t0.elapsed();
        reply
    }
}

/// A decoded reply from the gateway.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub turn_id: String,
    pub provider: String,
    pub model_header: String,
    pub attempts: String,
    pub degraded: String,
    pub headers: reqwest::header::HeaderMap,
    pub elapsed: Duration,
    pub first_byte: Option<Duration>,
    pub raw: String,
    /// The JSON body (non-stream replies and errors).
    pub json: Value,
    /// Answer text (all content deltas joined, or the message content).
    pub text: String,
    /// The response's `model` field.
    pub model: String,
    /// finish_reason / stop_reason.
    pub finish: Option<String>,
    /// (input, output) tokens.
    pub usage: Option<(u64, u64)>,
    /// Saw `data: [DONE]` (OpenAI) or `message_stop` (Anthropic).
    pub done: bool,
    /// An error object (an error body, or an in-band stream error).
    pub error: Option<Value>,
    pub stream: bool,
}

impl Reply {
    fn decode_json(&mut self, dialect: Dialect) {
        let v = self.json.clone();
        if let Some(e) = v.get("error") {
            self.error = Some(e.clone());
            return;
        }
        self.model = v["model"].as_str().unwrap_or("").to_owned();
        match dialect {
            Dialect::OpenAi => {
                self.text = v
                    .pointer("/choices/0/message/content")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                self.finish = v
                    .pointer("/choices/0/finish_reason")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if let Some(u) = v.get("usage") {
                    self.usage = Some((
                        u["prompt_tokens"].as_u64().unwrap_or(0),
                        u["completion_tokens"].as_u64().unwrap_or(0),
                    ));
                }
            }
            Dialect::Anthropic => {
                self.text = v["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|b| b["text"].as_str())
                    .collect();
                self.finish = v["stop_reason"].as_str().map(str::to_owned);
                if let Some(u) = v.get("usage") {
                    self.usage = Some((
                        u["input_tokens"].as_u64().unwrap_or(0),
                        u["output_tokens"].as_u64().unwrap_or(0),
                    ));
                }
            }
        }
    }

    fn decode_sse(&mut self, dialect: Dialect) {
        let raw = self.raw.clone();
        let mut event: Option<String> = None;
        for line in raw.lines() {
            if line.is_empty() {
                event = None;
                continue;
            }
            if let Some(e) = line.strip_prefix("event:") {
                event = Some(e.trim().to_owned());
                continue;
            }
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let data = data.trim_start();
            if data == "[DONE]" {
                self.done = true;
                continue;
            }
            let Ok(v) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            if v.get("error").is_some() && v["type"].as_str() != Some("message_start") {
                self.error = Some(v["error"].clone());
                continue;
            }
            match dialect {
                Dialect::OpenAi => {
                    if let Some(m) = v["model"].as_str() {
                        self.model = m.to_owned();
                    }
                    if let Some(t) = v
                        .pointer("/choices/0/delta/content")
                        .and_then(Value::as_str)
                    {
                        self.text.push_str(t);
                    }
                    if let Some(f) = v
                        .pointer("/choices/0/finish_reason")
                        .and_then(Value::as_str)
                    {
                        self.finish = Some(f.to_owned());
                    }
                    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
                        self.usage = Some((
                            u["prompt_tokens"].as_u64().unwrap_or(0),
                            u["completion_tokens"].as_u64().unwrap_or(0),
                        ));
                    }
                }
                Dialect::Anthropic => {
                    let ty = v["type"]
                        .as_str()
                        .or(event.as_deref())
                        .unwrap_or("")
                        .to_owned();
                    match ty.as_str() {
                        "message_start" => {
                            self.model = v
                                .pointer("/message/model")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_owned();
                            if let Some(i) = v
                                .pointer("/message/usage/input_tokens")
                                .and_then(Value::as_u64)
                            {
                                self.usage = Some((i, self.usage.map(|u| u.1).unwrap_or(0)));
                            }
                        }
                        "content_block_delta" => {
                            if let Some(t) = v.pointer("/delta/text").and_then(Value::as_str) {
                                self.text.push_str(t);
                            }
                        }
                        "message_delta" => {
                            if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str)
                            {
                                self.finish = Some(r.to_owned());
                            }
                            if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
                                let input = u["input_tokens"]
                                    .as_u64()
                                    .or(self.usage.map(|x| x.0))
                                    .unwrap_or(0);
                                self.usage =
                                    Some((input, u["output_tokens"].as_u64().unwrap_or(0)));
                            }
                        }
                        "message_stop" => self.done = true,
                        "error" => self.error = Some(v["error"].clone()),
                        _ => {}
                    }
                }
            }
        }
    }

    /// The error's `type`, if the reply is an error.
    pub fn error_type(&self) -> String {
        self.error
            .as_ref()
            .and_then(|e| e["type"].as_str())
            .unwrap_or("")
            .to_owned()
    }

    /// The error's `message`, if the reply is an error.
    pub fn error_message(&self) -> String {
        self.error
            .as_ref()
            .and_then(|e| e["message"].as_str())
            .unwrap_or("")
            .to_owned()
    }

    /// A 200 whose text is exactly `expected` and that ended as complete.
    #[track_caller]
    pub fn assert_complete(&self, expected: &str) {
        assert_eq!(self.status, 200, "status; body: {}", self.raw);
        assert!(
            self.error.is_none(),
            "unexpected error: {:?}\nraw: {}",
            self.error,
            self.raw
        );
        assert_eq!(self.text, expected, "answer text; raw: {}", self.raw);
        assert!(self.finish.is_some(), "no finish reason; raw: {}", self.raw);
        if self.stream {
            assert!(
                self.done,
                "stream did not end with [DONE]/message_stop; raw: {}",
                self.raw
            );
        }
    }
}

/// The targets of a turn's timeline rows, in order.
pub fn targets_of(timeline: &[Value]) -> Vec<String> {
    timeline
        .iter()
        .map(|r| r["target"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// The classes of a turn's timeline rows (`ok` for a success).
pub fn classes_of(timeline: &[Value]) -> Vec<String> {
    timeline
        .iter()
        .map(|r| r["class"].as_str().unwrap_or("ok").to_owned())
        .collect()
}

/// A provider that answers every request with one fixed status and body,
/// for statuses chaos has no fault for (402, 404 model). Counts its requests.
pub struct Stub {
    pub base_url: String,
    pub hits: Arc<AtomicU64>,
    /// Every request body received, in order.
    pub bodies: Arc<std::sync::Mutex<Vec<Value>>>,
    _served: hale_testkit::Served,
}

impl Stub {
    pub async fn start(status: u16, body: Value) -> Stub {
        use axum::http::StatusCode;
        let hits = Arc::new(AtomicU64::new(0));
        let bodies: Arc<std::sync::Mutex<Vec<Value>>> = Arc::default();
        let h = hits.clone();
        let b = bodies.clone();
        let body = Arc::new(body);
        let handler = move |axum::Json(received): axum::Json<Value>| {
            let h = h.clone();
            let b = b.clone();
            let body = body.clone();
            async move {
                h.fetch_add(1, Ordering::SeqCst);
                b.lock().expect("bodies lock").push(received);
                (
                    StatusCode::from_u16(status).expect("status"),
                    axum::Json((*body).clone()),
                )
            }
        };
        let app = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(handler.clone()))
            .route("/v1/messages", axum::routing::post(handler));
        let served = hale_testkit::serve_stoppable(app).await;
        Stub {
            base_url: format!("http://{}/v1", served.addr),
            hits,
            bodies,
            _served: served,
        }
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }

    /// An OpenAI-kind provider pointing at this stub.
    pub fn provider(&self, name: &str, model: &str) -> ProviderConfig {
        with_test_timeouts(ProviderConfig::new(
            name,
            ProviderKind::OpenAi,
            &self.base_url,
            model,
        ))
    }
}

/// The backup's model in [`pair`] worlds (chaos answers it normally).
pub const BACKUP_MODEL: &str = "backup-model";

/// The usual world: one chaos server; route [`ROUTE`] = `primary` (OpenAI
/// kind, model = `fault`) then `backup` (`backup_kind`, model
/// [`BACKUP_MODEL`]); `tweak` adjusts the config before the gateway starts.
pub async fn pair(
    fault: &str,
    backup_kind: ProviderKind,
    tweak: impl FnOnce(&mut Config),
) -> (ChaosHandle, Hale) {
    let c = chaos().await;
    let primary = openai("primary", &c, fault);
    let backup = match backup_kind {
        ProviderKind::OpenAi => openai("backup", &c, BACKUP_MODEL),
        ProviderKind::Anthropic => anthropic("backup", &c, BACKUP_MODEL),
        ProviderKind::Gemini => gemini("backup", &c, BACKUP_MODEL),
        ProviderKind::Azure => azure("backup", &c, BACKUP_MODEL),
        // Its token flow needs a service-account key: crates/hale/tests/sdk_vertex.rs.
        ProviderKind::Vertex => panic!("pair: no vertex backup here (see sdk_vertex.rs)"),
        ProviderKind::Bedrock => bedrock("backup", &c, BACKUP_MODEL),
    };
    let mut cfg = config(vec![primary, backup]);
    tweak(&mut cfg);
    let h = Hale::start(cfg).await;
    (c, h)
}

/// Both `false` and `true`, for tests that run streaming and not.
pub const MODES: [bool; 2] = [false, true];

/// The provider called `name` in `cfg`, to tune it.
pub fn prov<'a>(cfg: &'a mut Config, name: &str) -> &'a mut ProviderConfig {
    cfg.providers
        .iter_mut()
        .find(|p| p.name == name)
        .expect("provider in config")
}

/// The value of the unlabelled metric `name` in a Prometheus text; panics,
/// showing the text, when it is not there.
pub fn metric_in(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in {text}"))
}
