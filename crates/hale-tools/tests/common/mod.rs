//! Test harness: real chaos tool nodes on loopback, a real store in a temp
//! dir, the tools router served on a loopback port, jobs sent over HTTP.
#![allow(dead_code)]

use hale_core::config::{Config, ToolNodeConfig, ToolNodeKind};
use hale_core::event::EventKind;
use hale_store::{Store, StoreOptions};
use hale_tools::Tools;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub struct Node {
    pub chaos: hale_chaos::ChaosHandle,
    pub url: String,
}

/// A chaos tool node on a free loopback port.
pub async fn node() -> Node {
    node_at("127.0.0.1:0".parse().unwrap()).await
}

pub async fn node_at(addr: SocketAddr) -> Node {
    // The tests' own reqwest clients need the TLS crypto provider that
    // `Tools::new` installs; a test may set a fault before building hale.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let chaos = hale_chaos::spawn(addr, hale_chaos::ChaosConfig::default())
        .await
        .expect("chaos node starts");
    let url = format!("http://{}", chaos.addr);
    Node { chaos, url }
}

impl Node {
    /// Sets the node's fault (`ok` clears it).
    pub async fn fault(&self, spec: &str) {
        let r = reqwest::Client::new()
            .post(format!("{}/chaos/tools/fault", self.url))
            .json(&json!({"spec": spec}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204, "setting fault {spec}");
    }

    /// Executions of `tool` on this node.
    pub async fn calls(&self, tool: &str) -> u64 {
        let v: Value = reqwest::get(format!("{}/chaos/tools/stats", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["calls"][tool].as_u64().unwrap_or(0)
    }
}

/// A loopback address nothing listens on (yet).
#[allow(unused_imports)]
pub use hale_testkit::free_addr;

pub fn http_node(name: &str, url: &str) -> ToolNodeConfig {
    ToolNodeConfig {
        name: name.to_owned(),
        kind: ToolNodeKind::Http,
        url: url.to_owned(),
        deterministic: Vec::new(),
        metadata: Default::default(),
        breaker: Default::default(),
    }
}

pub struct Hale {
    pub url: String,
    pub tools: Arc<Tools>,
    pub store: Store,
    token: CancellationToken,
    server: tokio::task::JoinHandle<()>,
}

/// The tools runtime over a SQLite store in `dir`, served on loopback,
/// capabilities refreshed once; background tasks only when `background`.
pub async fn hale(dir: &Path, nodes: Vec<ToolNodeConfig>, background: bool) -> Hale {
    hale_with(dir, nodes, background, |_| {}).await
}

/// [`hale`] with the config adjusted by `adjust`.
pub async fn hale_with(
    dir: &Path,
    nodes: Vec<ToolNodeConfig>,
    background: bool,
    adjust: impl FnOnce(&mut Config),
) -> Hale {
    let mut cfg = Config::with_providers(Vec::new());
    cfg.tool_nodes = nodes;
    adjust(&mut cfg);
    let store = Store::open_sqlite(dir, StoreOptions::default())
        .await
        .unwrap();
    let tools = Tools::new(&cfg, store.clone()).unwrap();
    tools.refresh_all().await;
    let token = CancellationToken::new();
    if background {
        tools.spawn_background(token.clone());
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = tools.router();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Hale {
        url,
        tools,
        store,
        token,
        server,
    }
}

impl Hale {
    /// Stops the background tasks and the server, and closes the store:
    /// what a process exit leaves behind is what the next one finds.
    pub async fn stop(self) {
        self.token.cancel();
        self.server.abort();
        let _ = self.server.await;
        self.store.flush().await.unwrap();
        self.store.close().await;
    }

    pub async fn submit(&self, job: Value) -> (u16, Value) {
        let r = reqwest::Client::new()
            .post(format!("{}/jobs", self.url))
            .json(&job)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap())
    }

    /// Posts a job document as written (comments and all).
    pub async fn submit_text(&self, body: &str) -> (u16, Value, bool) {
        let r = reqwest::Client::new()
            .post(format!("{}/jobs", self.url))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let replayed = r.headers().get("x-hale-replayed").is_some();
        (status, r.json().await.unwrap(), replayed)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = reqwest::get(format!("{}{path}", self.url)).await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap())
    }

    /// The kinds of events in the outbox, in order.
    pub async fn event_kinds(&self) -> Vec<EventKind> {
        self.store.flush().await.unwrap();
        self.store
            .events_after(0, 10_000, None)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.event.kind)
            .collect()
    }

    /// Polls `GET /jobs/{id}` until its status is `want` (at most ~20 s).
    pub async fn wait_status(&self, id: &str, want: &str) -> Value {
        for _ in 0..200 {
            let (_, j) = self.get(&format!("/jobs/{id}")).await;
            if j["status"] == want {
                return j;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("job {id} never reached {want}");
    }
}

/// A one-step job.
pub fn one_step(job_id: &str, tool: &str, args: Value, target: Value) -> Value {
    json!({"job_id": job_id, "steps": [{
        "step_id": "s1", "tool_name": tool, "arguments": args, "target": target,
        "timeout_ms": 5000
    }]})
}
