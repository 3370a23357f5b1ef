//! `hale agent …`, `hale doctor` and `hale checkpoints list`: thin HTTP
//! clients of a running gateway's admin API (DESIGN §10). Every command takes
//! `--url` (default [`DEFAULT_URL`]) and `--token` (default `$HALE_TOKEN`).
//! The output is for people; `--json` on `agent` prints the API's JSON.

use anyhow::{Context, bail};
use serde_json::Value;
use std::process::ExitCode;

/// Where the commands look for a gateway by default: `hale serve`'s default
/// listen address ([`hale_core::config::DEFAULT_LISTEN`]; a test keeps them equal).
pub const DEFAULT_URL: &str = "http://127.0.0.1:3000";

#[derive(clap::Args, Debug, Clone)]
pub struct Remote {
    /// The gateway's base URL.
    #[arg(long, default_value = DEFAULT_URL, global = true)]
    pub url: String,
    /// Admin token (default $HALE_TOKEN).
    #[arg(long, env = "HALE_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
}

#[derive(clap::Subcommand, Debug)]
pub enum AgentCmd {
    /// Every agent with its gate and health state.
    List,
    /// One agent in full (JSON).
    Show { name: String },
    /// Pause: its requests get 423 until resumed.
    Pause { name: String },
    /// Resume: resets the failure count, health, and unblocks terminated tasks.
    Resume { name: String },
    /// Terminate the agent's task (default: its current one): its requests get 410.
    Terminate {
        name: String,
        #[arg(long)]
        task: Option<String>,
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum CheckpointsCmd {
    /// An agent's checkpoints (of one task, or all), newest first.
    List { agent: String, task: Option<String> },
}

struct Client {
    http: reqwest::Client,
    r: Remote,
}

impl Client {
    fn new(r: Remote) -> Self {
        crate::cli::install_crypto();
        Self {
            http: reqwest::Client::new(),
            r,
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.r.url.trim_end_matches('/'));
        let mut rb = self.http.request(method, &url);
        if let Some(t) = &self.r.token {
            rb = rb.bearer_auth(t);
        }
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let resp = rb
            .send()
            .await
            .with_context(|| format!("cannot reach the gateway at {}", self.r.url))?;
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let msg = v["error"]["message"]
                .as_str()
                .map_or_else(|| v.to_string(), str::to_owned);
            bail!("{url}: {status}: {msg}");
        }
        Ok(v)
    }
}

/// "14m ago", "3h ago", "just now".
pub fn ago(then_ms: u64, now_ms: u64) -> String {
    let s = now_ms.saturating_sub(then_ms) / 1000;
    match s {
        0..=4 => "just now".to_owned(),
        5..=59 => format!("{s}s ago"),
        60..=3599 => format!("{}m ago", s / 60),
        3600..=86_399 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

/// One line of an agent for `list` and `doctor`: (ok, text).
pub fn describe(a: &Value, now_ms: u64) -> (bool, String) {
    let id = a["id"].as_str().unwrap_or("?");
    let failures = a["consecutive_failures"].as_u64().unwrap_or(0);
    let last = a["last_failure_ms"]
        .as_u64()
        .map_or("never".to_owned(), |t| ago(t, now_ms));
    let health = a["health"]["state"].as_str().unwrap_or("unknown");
    let terminated = a["health"]["terminated_tasks"]
        .as_array()
        .map_or(0, Vec::len);
    if a["state"] == "paused" {
        return (
            false,
            format!("{id} ✗ paused ({failures} consecutive failures, last: {last})"),
        );
    }
    match health {
        "stuck" | "failing" | "terminated" => {
            let signal = a["health"]["snapshot"]["signal"].as_str().unwrap_or("");
            (
                false,
                format!(
                    "{id} ✗ {health} ({signal}; {failures} consecutive failures, last failure: {last})"
                ),
            )
        }
        "degraded" => {
            let signal = a["health"]["snapshot"]["signal"].as_str().unwrap_or("");
            (
                true,
                format!("{id} ! degraded ({signal}, last failure: {last})"),
            )
        }
        _ if terminated > 0 => (
            false,
            format!("{id} ✗ {terminated} terminated task(s) (last failure: {last})"),
        ),
        _ => (true, format!("{id} ✓ {health}")),
    }
}

pub async fn agent(cmd: AgentCmd, remote: Remote) -> anyhow::Result<ExitCode> {
    let c = Client::new(remote);
    let now = hale_gateway::state::wall_ms();
    match cmd {
        AgentCmd::List => {
            let v = c.call(reqwest::Method::GET, "/agents", None).await?;
            let list = v["agents"].as_array().cloned().unwrap_or_default();
            if list.is_empty() {
                println!("no agents yet");
            }
            for a in &list {
                println!("{}", describe(a, now).1);
            }
        }
        AgentCmd::Show { name } => {
            let v = c
                .call(
                    reqwest::Method::GET,
                    &format!("/agents/{}", crate::run::enc(&name)),
                    None,
                )
                .await?;
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        AgentCmd::Pause { name } => {
            let v = c
                .call(
                    reqwest::Method::POST,
                    &format!("/agents/{}/pause", crate::run::enc(&name)),
                    None,
                )
                .await?;
            println!("{}", describe(&v, now).1);
        }
        AgentCmd::Resume { name } => {
            let v = c
                .call(
                    reqwest::Method::POST,
                    &format!("/agents/{}/resume", crate::run::enc(&name)),
                    None,
                )
                .await?;
            println!("{}", describe(&v, now).1);
        }
        AgentCmd::Terminate { name, task, reason } => {
            let body = serde_json::json!({"task": task, "reason": reason});
            let v = c
                .call(
                    reqwest::Method::POST,
                    &format!("/agents/{}/terminate", crate::run::enc(&name)),
                    Some(body),
                )
                .await?;
            println!(
                "{name}: task {} terminated",
                v["task"].as_str().unwrap_or("?")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `hale doctor`: the gateway's readiness, then one line per agent that is
/// paused, stuck, failing or terminated (and a count of the healthy ones).
/// Exit code 1 when anything needs attention.
pub async fn doctor(remote: Remote) -> anyhow::Result<ExitCode> {
    let c = Client::new(remote.clone());
    let now = hale_gateway::state::wall_ms();
    let mut problems = 0usize;
    match c
        .http
        .get(format!("{}/ready", remote.url.trim_end_matches('/')))
        .send()
        .await
    {
        Ok(r) if r.status().is_success() => println!("[gateway] {} ✓ ready", remote.url),
        Ok(r) => {
            problems += 1;
            println!("[gateway] {} ✗ not ready ({})", remote.url, r.status());
        }
        Err(e) => {
            println!("[gateway] {} ✗ unreachable ({e})", remote.url);
            return Ok(ExitCode::FAILURE);
        }
    }
    let v = c.call(reqwest::Method::GET, "/agents", None).await?;
    let list = v["agents"].as_array().cloned().unwrap_or_default();
    let mut healthy = 0usize;
    for a in &list {
        let (ok, line) = describe(a, now);
        if ok && !line.contains(" ! ") {
            healthy += 1;
            continue;
        }
        if !ok {
            problems += 1;
        }
        println!("[agents] {line}");
    }
    println!("[agents] {healthy} of {} healthy", list.len());
    Ok(if problems == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub async fn checkpoints(cmd: CheckpointsCmd, remote: Remote) -> anyhow::Result<ExitCode> {
    let c = Client::new(remote);
    let now = hale_gateway::state::wall_ms();
    let CheckpointsCmd::List { agent, task } = cmd;
    let path = match &task {
        Some(t) => format!(
            "/agents/{}/tasks/{}/checkpoints",
            crate::run::enc(&agent),
            crate::run::enc(t)
        ),
        None => format!("/agents/{}/checkpoints", crate::run::enc(&agent)),
    };
    let v = c.call(reqwest::Method::GET, &path, None).await?;
    let list = v["checkpoints"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        println!("no checkpoints");
    }
    for cp in &list {
        let valid = cp["valid"].as_bool().unwrap_or(false);
        println!(
            "{} {} task={} parent={} {}B sha256={} {}",
            if valid { "✓" } else { "✗ CORRUPT" },
            cp["id"].as_str().unwrap_or("?"),
            cp["task"].as_str().unwrap_or("?"),
            cp["parent"].as_str().unwrap_or("-"),
            cp["size"].as_u64().unwrap_or(0),
            cp["sha256"].as_str().map_or("?", |s| &s[..s.len().min(12)]),
            cp["created_ms"]
                .as_u64()
                .map_or(String::new(), |t| ago(t, now)),
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_default_url_is_the_default_listen_address() {
        assert_eq!(
            super::DEFAULT_URL,
            format!("http://{}", hale_core::config::DEFAULT_LISTEN)
        );
    }
    use super::*;
    use serde_json::json;

    #[test]
    fn doctor_line_for_a_paused_agent_names_failures_and_last_failure_time() {
        let now = 10_000_000;
        let a = json!({"id": "research-agent", "state": "paused", "consecutive_failures": 3,
                       "last_failure_ms": now - 14 * 60_000, "health": {"state": "failing"}});
        assert_eq!(
            describe(&a, now),
            (
                false,
                "research-agent ✗ paused (3 consecutive failures, last: 14m ago)".to_owned()
            )
        );
    }

    #[test]
    fn stuck_and_healthy_agents_are_described() {
        let now = 5_000_000;
        let stuck = json!({"id": "s", "state": "active", "consecutive_failures": 0,
                           "health": {"state": "stuck", "snapshot": {"signal": "repeated_calls"}}});
        let (ok, line) = describe(&stuck, now);
        assert!(!ok);
        assert!(line.starts_with("s ✗ stuck (repeated_calls"), "{line}");
        let fine = json!({"id": "f", "state": "active", "health": {"state": "healthy"}});
        assert_eq!(describe(&fine, now), (true, "f ✓ healthy".to_owned()));
    }
}
