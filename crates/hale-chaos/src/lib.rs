//! hale-chaos: a fault-injecting OpenAI/Anthropic/Gemini-compatible provider
//! (chat completions, messages, the Responses API and Google's
//! `generateContent`).
//!
//! It owns the fake provider that hale's tests, `hale demo` and users'
//! chaos tests point at. The fault is chosen per request from the requested
//! model name (or the `x-chaos-fault` header, or a script), so one server on
//! one port can play a healthy provider and every kind of broken one at once,
//! and each test can spawn its own on port 0. The grammar below is the
//! crate's README, pulled in so the two never drift.
//!
//! Module map: [`fault`] parses the grammar, [`script`] the YAML scripts,
//! [`task`] plays an agent's model through a multi-step tool task (and
//! checks its final answer),
//! `azure` what Azure OpenAI's wire changes (routes' checks, error shapes,
//! filter annotations), `vertex` Vertex AI's (publisher routes, bearer
//! check, the loopback OAuth2 token endpoint), `bedrock` AWS Bedrock's (SigV4 verified, Converse
//! JSON, the binary event stream, a loopback STS),
//! `answer` builds the deterministic answers, `wire` renders the four
//! dialects (with `frame`'s shared pieces; `responses` reads and frames the
//! Responses API, `gemini` Google's Generative Language API), `state` keeps counters, `request` holds what the handlers
//! share (the chaos headers, the connection kill switch), `server` runs the
//! accept loop and handlers.
//!
#![doc = include_str!("../README.md")]

mod answer;
/// The deterministic answer's chunks, for tests that check what a client got.
pub use answer::word_chunks;
mod azure;
mod bedrock;
pub mod fault;
mod frame;
mod gemini;
mod request;
mod responses;
pub mod script;
mod server;
mod state;
pub mod task;
pub mod tools;
mod vertex;
mod wire;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use fault::{Fault, FaultSpec, InBand, SpecError};
pub use request::{APPLIED_HEADER, COMPACTION_HEADER, FAULT_HEADER};
pub use script::{Script, Step, parse_script};
pub use server::MAX_BODY_BYTES;
pub use state::{MAX_KEPT_BODIES, Stats};

/// How a chaos server is set up.
#[derive(Debug, Clone, Default)]
pub struct ChaosConfig {
    /// Per-model fault sequences (`--script FILE`, parsed with [`parse_script`]).
    pub script: Option<Script>,
    /// The key Azure requests (`/openai/…`) must carry, as `api-key` or as
    /// an `Authorization: Bearer` token (`--azure-api-key`); `None`: any
    /// non-empty one. A wrong or missing one gets Azure's 401.
    pub azure_api_key: Option<String>,
    /// A service-account key file's JSON (`--vertex-key FILE`): the token
    /// endpoint (`POST /token`) then takes only assertions issued by its
    /// `client_email` and signed by its key. `None`: any well-formed one.
    pub vertex_key: Option<String>,
    /// The Bedrock API key an `Authorization: Bearer` must equal
    /// (`--bedrock-api-key`); `None`: any non-empty one. A request without a
    /// bearer must carry a SigV4 signature chaos can verify
    /// (`bedrock::DEFAULT_ACCESS_KEY_ID`, or the loopback STS's temporary
    /// credentials).
    pub bedrock_api_key: Option<String>,
}

/// A running chaos server. Dropping the handle stops the server too;
/// [`ChaosHandle::shutdown`] also waits for the accept loop to end.
#[derive(Debug)]
pub struct ChaosHandle {
    /// The bound address (the real port when 0 was asked for).
    pub addr: SocketAddr,
    /// `http://addr/v1`: an OpenAI client's `base_url` (chat completions
    /// and the Responses API).
    pub base_url_openai: String,
    /// `http://addr`: an Anthropic client's `base_url`, and an Azure
    /// provider's (the resource endpoint; chaos serves `/openai/…`).
    pub base_url_anthropic: String,
    /// `http://addr/v1beta`: a Gemini client's `base_url`.
    pub base_url_gemini: String,
    shared: Arc<state::Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl ChaosHandle {
    /// The counters, as `GET /chaos/stats` returns them.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Chat requests received for `model` (the requested model name).
    pub fn requests_for(&self, model: &str) -> u64 {
        self.shared.requests_for(model)
    }

    /// The last request bodies (at most [`MAX_KEPT_BODIES`]), oldest first;
    /// a body that is not JSON is given as a JSON string.
    pub fn last_requests(&self) -> Vec<serde_json::Value> {
        state::parse_bodies(&self.shared.bodies())
    }

    /// Same as `POST /chaos/reset`: clears counters, timers and statistics,
    /// and brings `down-until-reset` models up.
    pub fn reset(&self) {
        self.shared.reset();
    }

    /// Same as `POST /chaos/down`: puts `down-until-reset` models down again.
    /// From now on requests for `model` get the fault `spec` (the
    /// `x-chaos-fault` grammar), or their own again with `None`; the same as
    /// `POST /chaos/override`.
    pub fn set_fault(&self, model: &str, spec: Option<&str>) {
        self.shared.set_override(model, spec.map(str::to_owned));
    }

    pub fn bring_down(&self) {
        self.shared.bring_down();
    }

    /// Stops accepting, drops open connections and waits for the accept loop.
    pub fn shutdown(self) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(self.shutdown_inner())
    }

    async fn shutdown_inner(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ChaosHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Binds `addr` (port 0 picks a free port) and serves in a tokio task.
pub fn spawn(
    addr: SocketAddr,
    cfg: ChaosConfig,
) -> futures::future::BoxFuture<'static, anyhow::Result<ChaosHandle>> {
    Box::pin(spawn_inner(addr, cfg))
}

async fn spawn_inner(addr: SocketAddr, cfg: ChaosConfig) -> anyhow::Result<ChaosHandle> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("hale-chaos: cannot listen on {addr}: {e}"))?;
    spawn_on(listener, cfg)
}

/// Serves on `listener` in a tokio task (a test that held the address
/// before hands it over without a moment where another socket could take it).
pub fn spawn_on(listener: TcpListener, cfg: ChaosConfig) -> anyhow::Result<ChaosHandle> {
    let addr = listener.local_addr()?;
    let shared = Arc::new(shared(cfg)?);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server::run(listener, shared.clone(), async move {
        // A dropped sender also means stop.
        let _ = stopped.await;
    }));
    Ok(ChaosHandle {
        addr,
        base_url_openai: format!("http://{addr}/v1"),
        base_url_anthropic: format!("http://{addr}"),
        base_url_gemini: format!("http://{addr}/v1beta"),
        shared,
        stop: Some(stop),
        task: Some(task),
    })
}

/// Serves on `listener` until `shutdown` resolves (the `hale chaos` command).
pub fn serve(
    listener: TcpListener,
    cfg: ChaosConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    serve_boxed(listener, cfg, Box::pin(shutdown))
}

/// [`serve`]'s future, built here so that the server is compiled once, in
/// this crate, not in each caller's (as `hale_store::BoxFut`).
fn serve_boxed(
    listener: TcpListener,
    cfg: ChaosConfig,
    shutdown: futures::future::BoxFuture<'static, ()>,
) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(async move {
        let shared = Arc::new(shared(cfg)?);
        server::run(listener, shared, shutdown).await
    })
}

fn shared(cfg: ChaosConfig) -> anyhow::Result<state::Shared> {
    let mut s = state::Shared::new(cfg.script);
    s.azure_key = cfg.azure_api_key;
    if let Some(text) = &cfg.vertex_key {
        s.vertex_key = Some(
            vertex::Key::from_json(text)
                .map_err(|e| anyhow::anyhow!("hale-chaos: the vertex key: {e}"))?,
        );
    }
    s.bedrock_key = cfg.bedrock_api_key;
    Ok(s)
}
