//! The harness of the tool-job tests that drive the real `hale serve`: chaos
//! tool nodes on loopback (the chaos crate's tool node servers, in the
//! test's runtime, so a test sets their faults and reads their counts), a
//! config file written as an operator writes it (`tool_nodes`, `workflows`,
//! `tool_jobs`), one storage backend per run — SQLite in the test's
//! directory or a fresh schema of the test PostgreSQL — and the HTTP calls
//! a client of the jobs API makes. `hale serve` runs with the test's
//! directory as its working directory, so relative paths in the config
//! (the audit log's) land there.
#![allow(dead_code)]

use crate::common::{Proc, free_port, hale_bin};
use crate::store_common::{PgScratch, drop_schema, pg_scratch};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// Where `hale serve` keeps its state.
#[derive(Clone, Copy, Debug)]
pub enum Backend {
    /// SQLite in the test's data directory.
    Sqlite,
    /// A fresh schema of the test PostgreSQL (`HALE_TEST_PG_URL`, default
    /// `postgres://postgres@127.0.0.1:5432/test`): unreachable, the test is
    /// skipped with the reason printed, unless `CI=true`, where it fails.
    Postgres,
}

/// A chaos tool node on loopback.
pub struct Node {
    pub chaos: hale_chaos::ChaosHandle,
    pub url: String,
}

/// A chaos tool node on a free loopback port.
pub async fn node() -> Node {
    hale_testkit::install_crypto();
    let chaos = hale_chaos::spawn(
        "127.0.0.1:0".parse().expect("an address"),
        hale_chaos::ChaosConfig::default(),
    )
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
            .expect("chaos answers");
        assert_eq!(r.status(), 204, "setting fault {spec}");
    }

    async fn stats(&self) -> Value {
        hale_testkit::get_json(
            &reqwest::Client::new(),
            &format!("{}/chaos/tools/stats", self.url),
        )
        .await
    }

    /// Executions of `tool` on this node.
    pub async fn calls(&self, tool: &str) -> u64 {
        self.stats().await["calls"][tool].as_u64().unwrap_or(0)
    }

    /// Stops the node and holds its address (see [`Offline`]) so it stays
    /// down for the rest of the test. A client's connection may have taken
    /// the freed port as its own end in the meantime (it does not listen,
    /// so the address still refuses connections): then the address is held
    /// once that connection is gone, or not at all if it outlives ~2 s.
    pub async fn die(self) -> Offline {
        let addr = self.chaos.addr;
        self.chaos.shutdown().await;
        for _ in 0..100 {
            let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
            // Its closed connections may linger in TIME_WAIT on this address.
            socket.set_reuseaddr(true).expect("SO_REUSEADDR");
            if socket.bind(addr).is_ok() {
                return offline_from(socket);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let refused = tokio::net::TcpStream::connect(addr)
            .await
            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused);
        assert!(
            refused,
            "another server listens on {addr} since the node stopped"
        );
        Offline {
            addr,
            url: format!("http://{addr}"),
            _socket: None,
        }
    }

    /// Faults of `spec` the node applied (a faulted call does not run the tool).
    pub async fn faults(&self, spec: &str) -> u64 {
        self.stats().await["faults"][spec].as_u64().unwrap_or(0)
    }
}

/// A `tool_nodes` entry of kind `http` (YAML flow map).
pub fn http_node(name: &str, url: &str) -> String {
    format!("{{name: \"{name}\", kind: http, url: \"{url}\"}}")
}

/// [`http_node`] with more keys, e.g. `breaker: {failure_threshold: 1}`.
pub fn http_node_with(name: &str, url: &str, more: &str) -> String {
    format!("{{name: \"{name}\", kind: http, url: \"{url}\", {more}}}")
}

/// Waits (up to 30 s) until `proc` answers on `url`: `false` when the port
/// was not its own (it could not listen, or another process answers).
async fn serving(http: &reqwest::Client, url: &str, proc: &mut Proc) -> bool {
    let pid = proc.child.id();
    for _ in 0..600 {
        if let Ok(Some(status)) = proc.child.try_wait() {
            let err = proc.stderr();
            assert!(
                err.contains("cannot listen"),
                "hale serve exited with {status} before it was ready:\n{err}"
            );
            return false;
        }
        if let Ok(r) = http.get(format!("{url}/cluster")).send().await
            && r.status().is_success()
            && let Ok(v) = r.json::<Value>().await
        {
            let this = v["instances"]
                .as_array()
                .and_then(|i| i.iter().find(|i| i["this"] == true))
                .and_then(|i| i["pid"].as_u64());
            if this.is_some() {
                return this == Some(u64::from(pid));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{url}: hale serve not ready after 30 s:\n{}", proc.stderr());
}

/// A loopback address where nothing listens, held so no other test's server
/// takes it: a socket bound to it that never listens (a connection is
/// refused). Dropping it frees the address.
pub struct Offline {
    pub addr: SocketAddr,
    pub url: String,
    _socket: Option<tokio::net::TcpSocket>,
}

impl Offline {
    /// A chaos tool node comes up on this address, taken over from the
    /// held socket (no moment where another socket could take the port).
    pub fn come_online(self) -> Node {
        let socket = self
            ._socket
            .unwrap_or_else(|| panic!("{} was not held", self.addr));
        let listener = socket.listen(1024).expect("listen on the held address");
        let chaos = hale_chaos::spawn_on(listener, hale_chaos::ChaosConfig::default())
            .expect("chaos node starts");
        Node {
            chaos,
            url: self.url,
        }
    }
}

/// A loopback address where nothing listens, until the [`Offline`] is dropped.
pub fn offline() -> Offline {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind("127.0.0.1:0".parse().expect("an address"))
        .expect("a free loopback port");
    offline_from(socket)
}

fn offline_from(socket: tokio::net::TcpSocket) -> Offline {
    let addr = socket.local_addr().expect("bound");
    Offline {
        addr,
        url: format!("http://{addr}"),
        _socket: Some(socket),
    }
}

/// A running `hale serve` with its directory and storage.
pub struct Hale {
    pub url: String,
    pub http: reqwest::Client,
    pub backend: Backend,
    proc: Proc,
    pg: Option<PgScratch>,
    dir: tempfile::TempDir,
}

impl Hale {
    /// Starts `hale serve` on `backend` with `nodes` as `tool_nodes` and
    /// `extra` (more top-level YAML) in its config file, and waits until it
    /// is ready and has checked every node once. `None`: PostgreSQL is not
    /// there (and `CI` is not `true`); the reason is printed.
    pub async fn start(backend: Backend, nodes: &[String], extra: &str) -> Option<Hale> {
        let pg = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(pg_scratch().await?),
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = pg
            .as_ref()
            .map(|p| format!("storage: \"{}\"\n", p.url))
            .unwrap_or_default();
        let nodes_yaml = if nodes.is_empty() {
            "tool_nodes: []\n".to_owned()
        } else {
            let mut s = "tool_nodes:\n".to_owned();
            for n in nodes {
                s.push_str(&format!("  - {n}\n"));
            }
            s
        };
        let http = hale_testkit::client(Duration::from_secs(60));
        // A port free a moment ago may be taken before `hale serve` binds
        // it (by another test's server), and then the answer on it is not
        // this process's: each attempt checks the pid `GET /cluster` names.
        for attempt in 0.. {
            let port = free_port();
            let yaml = format!(
                "\
listen: 127.0.0.1:{port}
data_dir: {data}
{storage}providers:
  - {{name: p, kind: openai, base_url: \"http://127.0.0.1:9/v1\", default_model: m}}
{nodes_yaml}{extra}
",
                data = dir.path().join("data").display(),
            );
            std::fs::write(dir.path().join("hale.yaml"), yaml).expect("config written");
            let mut cmd = std::process::Command::new(hale_bin());
            cmd.args(["serve", "--config", "hale.yaml"])
                .current_dir(dir.path());
            let mut proc = Proc::start(cmd, dir.path(), "serve");
            let url = format!("http://127.0.0.1:{port}");
            if !serving(&http, &url, &mut proc).await {
                assert!(attempt < 5, "no free port for hale:\n{}", proc.stderr());
                eprintln!("port {port} was taken before hale serve bound it; another port");
                continue;
            }
            let h = Hale {
                url,
                http,
                backend,
                proc,
                pg,
                dir,
            };
            h.wait_checked(nodes.len()).await;
            return Some(h);
        }
        unreachable!("the loop returns or panics")
    }

    /// The test's directory: `hale serve`'s working directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// What `hale serve` wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.proc.stderr()
    }

    /// Waits until the first health check of each of the `n` config nodes
    /// is done (`hale serve` checks them at start, then every
    /// `hale_core::tools::CAPABILITY_REFRESH`).
    async fn wait_checked(&self, n: usize) {
        for _ in 0..400 {
            let m = self.metrics().await;
            let nodes = m["nodes"].as_object().cloned().unwrap_or_default();
            if nodes.len() == n
                && nodes
                    .values()
                    .all(|v| v["health_checks"].as_u64() >= Some(1))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "the nodes were never all checked: {}\n{}",
            self.metrics().await,
            self.stderr()
        );
    }

    /// Waits (up to 30 s: a refresh period and a check's timeout) until the
    /// health check has marked `node` offline.
    pub async fn wait_offline(&self, node: &str) {
        for _ in 0..600 {
            let (_, v) = self.get("/nodes").await;
            let health = v["nodes"]
                .as_array()
                .and_then(|ns| ns.iter().find(|n| n["name"] == node))
                .map(|n| n["health"].clone());
            if health == Some(json!("offline")) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{node} was never seen offline\n{}", self.stderr());
    }

    /// Kills `hale serve` and drops its PostgreSQL schema.
    pub async fn stop(mut self) {
        self.kill();
        if let Some(pg) = self.pg.take() {
            drop_schema(&pg).await;
        }
    }

    fn kill(&mut self) {
        let _ = self.proc.child.kill();
        let _ = self.proc.child.wait();
    }

    /// `POST /jobs` with `job` as JSON.
    pub async fn submit(&self, job: Value) -> (u16, Value) {
        let (status, v, _) = self.submit_text(&job.to_string()).await;
        (status, v)
    }

    /// `POST /jobs` with a job document as written (comments and all):
    /// the status, the body and whether it was a replay (`x-hale-replayed`).
    pub async fn submit_text(&self, body: &str) -> (u16, Value, bool) {
        let r = self
            .http
            .post(format!("{}/jobs", self.url))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .expect("POST /jobs");
        let status = r.status().as_u16();
        let replayed = r.headers().get("x-hale-replayed").is_some();
        let v = r.json().await.expect("POST /jobs answers JSON");
        (status, v, replayed)
    }

    /// `GET path`: the status and the JSON body.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .http
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let status = r.status().as_u16();
        (
            status,
            r.json()
                .await
                .unwrap_or_else(|e| panic!("GET {path}: not JSON: {e}")),
        )
    }

    /// `GET /v1/metrics`.
    pub async fn metrics(&self) -> Value {
        self.get("/v1/metrics").await.1
    }

    /// The kinds of the events in the outbox, oldest first (`GET /events`
    /// without following).
    pub async fn event_kinds(&self) -> Vec<String> {
        let text = hale_testkit::get_text(
            &self.http,
            &format!("{}/events?follow=false&tail=100000", self.url),
        )
        .await;
        text.lines()
            .filter_map(|l| l.strip_prefix("event:"))
            .map(|k| k.trim().to_owned())
            .collect()
    }

    /// Polls `GET /jobs/{id}` until its status is `want` (at most ~30 s).
    pub async fn wait_status(&self, id: &str, want: &str) -> Value {
        let mut last = Value::Null;
        for _ in 0..300 {
            let (_, j) = self.get(&format!("/jobs/{id}")).await;
            if j["status"] == want {
                return j;
            }
            last = j;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("job {id} never reached {want}: {last}\n{}", self.stderr());
    }
}

/// A test that fails before [`Hale::stop`] still leaves no schema behind.
impl Drop for Hale {
    fn drop(&mut self) {
        self.kill();
        if let Some(pg) = self.pg.take() {
            let _ = std::thread::spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    rt.block_on(drop_schema(&pg));
                }
            })
            .join();
        }
    }
}

/// A one-step job.
pub fn one_step(job_id: &str, tool: &str, args: Value, target: Value) -> Value {
    json!({"job_id": job_id, "steps": [{
        "step_id": "s1", "tool_name": tool, "arguments": args, "target": target,
        "timeout_ms": 5000
    }]})
}

/// Runs `body` on SQLite and on PostgreSQL at the same time (their waits
/// overlap), each to its end; then fails with each failure's message
/// prefixed by its backend (each panic's location is printed above it).
pub async fn on_both<F, Fut>(body: F)
where
    F: Fn(Backend) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let runs = [
        (Backend::Sqlite, tokio::spawn(body(Backend::Sqlite))),
        (Backend::Postgres, tokio::spawn(body(Backend::Postgres))),
    ];
    let mut failures = Vec::new();
    for (backend, run) in runs {
        if let Err(e) = run.await {
            let msg = match e.try_into_panic() {
                Ok(p) => p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "a panic without a message".to_owned()),
                Err(e) => e.to_string(),
            };
            failures.push(format!("on {backend:?}: {msg}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Generates, in a module `sqlite_and_postgres`, one test per body
/// `name(Backend)` that runs it on both backends ([`on_both`]): one body,
/// two backends, one test named for the behaviour (declare this module
/// with `#[macro_use]`).
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite_and_postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    $crate::tool_jobs::on_both(super::$name).await
                }
            )*
        }
    };
}
