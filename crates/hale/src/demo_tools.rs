//! `hale demo`'s tool scene: a tool node frozen with SIGSTOP in
//! the middle of a job, and the job finishing on the backup node, degraded,
//! with its execution path shown.
//!
//! The primary node is a `hale chaos` child process (so it can be frozen
//! without freezing the demo); the backup is in-process. The job calls the
//! `slow` tool with an idempotency key, so re-running it on the backup after
//! the timeout is safe. The child is resumed and killed by its own handle.

use anyhow::Context;
use hale_core::config::{Config, ToolNodeConfig, ToolNodeKind};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills (after resuming) the frozen node when dropped.
struct NodeProc(Child);

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.id().to_string()])
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn node(name: &str, url: &str) -> ToolNodeConfig {
    ToolNodeConfig {
        name: name.to_owned(),
        kind: ToolNodeKind::Http,
        url: url.to_owned(),
        deterministic: Vec::new(),
        metadata: Default::default(),
        breaker: Default::default(),
    }
}

/// Runs the scene; returns (ok, what happened, served by, attempts, elapsed).
pub async fn scene(
    store: hale_store::Store,
) -> anyhow::Result<(bool, String, String, String, Duration)> {
    let t0 = Instant::now();
    println!("\n▶ tool node frozen mid-job — SIGSTOP on the primary node while it runs `slow`");
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let listen = format!("127.0.0.1:{port}");
    let child = Command::new(std::env::current_exe()?)
        .args(["chaos", "--listen", &listen])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the primary tool node")?;
    let primary = NodeProc(child);
    let primary_url = format!("http://{listen}");
    let backup =
        hale_chaos::spawn("127.0.0.1:0".parse()?, hale_chaos::ChaosConfig::default()).await?;
    let backup_url = format!("http://{}", backup.addr);
    let http = reqwest::Client::new();
    for i in 0.. {
        if http
            .get(format!("{primary_url}/tools"))
            .send()
            .await
            .is_ok()
        {
            break;
        }
        anyhow::ensure!(i < 200, "the primary tool node did not start");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let mut cfg = Config::with_providers(Vec::new());
    cfg.tool_nodes = vec![node("tools-a", &primary_url), node("tools-b", &backup_url)];
    let tools = hale_tools::Tools::new(&cfg, store)?;
    tools.refresh_all().await;
    let req: hale_tools::model::JobRequest = serde_json::from_value(serde_json::json!({
        "job_id": format!("demo-{}", hale_gateway::state::wall_ms()),
        "steps": [{"step_id": "report", "tool_name": "slow", "arguments": {"ms": 800},
                   "target": {"kind": "local", "failover": true}, "timeout_ms": 4000,
                   "idempotency_key": "demo-report"}]
    }))?;
    let runner = tools.clone();
    let job = tokio::spawn(async move { runner.submit(req).await });
    // Freeze the primary once the call is running on it.
    for i in 0.. {
        let v: serde_json::Value = http
            .get(format!("{primary_url}/chaos/tools/stats"))
            .send()
            .await?
            .json()
            .await?;
        if v["calls"]["slow"] == 1 {
            break;
        }
        anyhow::ensure!(i < 200, "the job never reached the primary node");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = primary.0.id().to_string();
    Command::new("kill").args(["-STOP", &pid]).status()?;
    println!("  SIGSTOP → tools-a (pid {pid}) mid-call");
    let job = match job.await? {
        Ok(s) => s.job,
        Err(e) => anyhow::bail!("the job was refused: {e:?}"),
    };
    for a in &job.timeline {
        println!(
            "  {:<8} {:<8} {:>5} ms  {}{}",
            a.node,
            a.status,
            a.duration_ms,
            a.error.map(|e| e.as_str()).unwrap_or(""),
            a.message
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        );
    }
    println!("  execution_path: {}", job.execution_path.join(" → "));
    println!(
        "  degraded: {} ({})",
        job.degraded,
        job.degraded_reason.as_deref().unwrap_or("")
    );
    let ok =
        job.ok && job.degraded && job.execution_path == ["tools-a (timeout)", "tools-b (success)"];
    drop(primary);
    backup.shutdown().await;
    Ok((
        ok,
        if job.ok {
            "done on the backup".into()
        } else {
            "failed".into()
        },
        job.steps
            .first()
            .and_then(|s| s.node.clone())
            .unwrap_or_default(),
        format!("{} attempts", job.timeline.len()),
        t0.elapsed(),
    ))
}
