//! One-step tool jobs through hale vs calling the tool node directly.
//!
//! `cargo run --release -p hale-tools --example jobs_bench [N]`
//!
//! An in-process `hale chaos` tool node (`echo`, no fault), hale's tools
//! runtime over SQLite (WAL, the embedded default: every job is inserted,
//! updated, audited, and its events go through the outbox) served on
//! loopback, and a client that sends N calls at concurrency 1 and 32: once
//! to `POST {node}/tools/echo`, once as `POST /jobs` through hale. Prints p50
//! and p99 of both, the added latency, and calls per second.

use hale_core::config::{Config, ToolNodeConfig, ToolNodeKind};
use hale_store::{Store, StoreOptions};
use hale_tools::Tools;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

async fn run(
    client: &reqwest::Client,
    n: usize,
    c: usize,
    make: Arc<dyn Fn(u64) -> (String, serde_json::Value) + Send + Sync>,
) -> (Vec<Duration>, Duration) {
    let next = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..c {
        let (client, next, make) = (client.clone(), next.clone(), make.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i as usize >= n {
                    return lat;
                }
                let (url, body) = make(i);
                let s = Instant::now();
                let r = client.post(&url).json(&body).send().await.expect("send");
                assert!(r.status().is_success(), "{}", r.status());
                let v: serde_json::Value = r.json().await.expect("json");
                assert!(v.get("error").is_none(), "{v}");
                lat.push(s.elapsed());
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    let wall = t0.elapsed();
    all.sort();
    (all, wall)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let node =
        hale_chaos::spawn("127.0.0.1:0".parse()?, hale_chaos::ChaosConfig::default()).await?;
    let node_url = format!("http://{}", node.addr);
    let dir = tempfile::tempdir()?;
    let mut cfg = Config::with_providers(Vec::new());
    cfg.tool_nodes = vec![ToolNodeConfig {
        name: "n".into(),
        kind: ToolNodeKind::Http,
        url: node_url.clone(),
        deterministic: Vec::new(),
        metadata: Default::default(),
        breaker: Default::default(),
    }];
    let store = Store::open_sqlite(dir.path(), StoreOptions::default()).await?;
    let tools = Tools::new(&cfg, store.clone())?;
    tools.refresh_all().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hale_url = format!("http://{}", listener.local_addr()?);
    let app = tools.router();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(64)
        .build()?;

    let direct_url = format!("{node_url}/tools/echo");
    let direct: Arc<dyn Fn(u64) -> (String, serde_json::Value) + Send + Sync> =
        Arc::new(move |i| (direct_url.clone(), json!({"i": i})));
    let jobs_url = format!("{hale_url}/jobs");
    let round = Arc::new(AtomicU64::new(0));
    println!(
        "| concurrency | direct p50 | direct p99 | via hale p50 | via hale p99 | added p50 | direct calls/s | hale jobs/s |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    // Warm-up: connections, SQLite pages, the allocator.
    {
        let r = round.fetch_add(1, Ordering::Relaxed);
        let u = jobs_url.clone();
        let via: Arc<dyn Fn(u64) -> (String, serde_json::Value) + Send + Sync> = Arc::new(
            move |i| {
                (
                    u.clone(),
                    json!({"job_id": format!("w{r}-{i}"), "steps": [{"step_id": "s", "tool_name": "echo", "arguments": {"i": i}}]}),
                )
            },
        );
        run(&client, 300, 8, direct.clone()).await;
        run(&client, 300, 8, via).await;
    }
    for c in [1usize, 32] {
        let r = round.fetch_add(1, Ordering::Relaxed);
        let u = jobs_url.clone();
        let via: Arc<dyn Fn(u64) -> (String, serde_json::Value) + Send + Sync> = Arc::new(
            move |i| {
                (
                    u.clone(),
                    json!({"job_id": format!("b{r}-{i}"), "steps": [{"step_id": "s", "tool_name": "echo", "arguments": {"i": i}}]}),
                )
            },
        );
        let (d, dw) = run(&client, n, c, direct.clone()).await;
        let (h, hw) = run(&client, n, c, via).await;
        println!(
            "| {c} | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms | {:.0} | {:.0} |",
            pct(&d, 0.5),
            pct(&d, 0.99),
            pct(&h, 0.5),
            pct(&h, 0.99),
            pct(&h, 0.5) - pct(&d, 0.5),
            n as f64 / dw.as_secs_f64(),
            n as f64 / hw.as_secs_f64(),
        );
    }
    let audited = store.audit(None, 1).await?;
    anyhow::ensure!(!audited.is_empty(), "jobs were audited");
    store.flush().await?;
    store.close().await;
    Ok(())
}
