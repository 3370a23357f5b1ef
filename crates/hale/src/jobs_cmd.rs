//! `hale jobs …` and `hale nodes list`: thin HTTP clients of a running
//! gateway's tool-job API (docs/http-api.md, "Tool jobs and nodes"). `submit`
//! reads a job from a file or stdin (`-`) and prints the job's evidence;
//! `audit` prints one JSON object per line, ready for `jq`.

use crate::remote::Remote;
use anyhow::{Context, bail};
use serde_json::Value;
use std::io::Read;
use std::process::ExitCode;

#[derive(clap::Subcommand, Debug)]
pub enum JobsCmd {
    /// Submit a job (JSON, from FILE or `-` for stdin) and print its result and evidence.
    Submit { file: String },
    /// One job's status, result and evidence.
    Show { id: String },
    /// Jobs, newest first.
    List {
        /// Only jobs in this status (running, queued, completed, failed, expired, cancelled).
        #[arg(long)]
        status: Option<String>,
    },
    /// The audit log as JSON lines, newest first.
    Audit {
        /// Only degraded jobs.
        #[arg(long)]
        degraded: bool,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum NodesCmd {
    /// Every tool node with its health and tools.
    List,
}

async fn call(
    r: &Remote,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<(u16, Value)> {
    crate::setup::install_crypto();
    let url = format!("{}{path}", r.url.trim_end_matches('/'));
    let mut rb = reqwest::Client::new().request(method, &url);
    if let Some(t) = &r.token {
        rb = rb.bearer_auth(t);
    }
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let resp = rb
        .send()
        .await
        .with_context(|| format!("cannot reach the gateway at {}", r.url))?;
    let status = resp.status().as_u16();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    if !(200..300).contains(&status) {
        let msg = v["error"]["message"]
            .as_str()
            .map_or_else(|| v.to_string(), str::to_owned);
        bail!("{url}: {status}: {msg}");
    }
    Ok((status, v))
}

/// One line per job: id, status, degraded, path.
fn line(j: &Value) -> String {
    let path: Vec<&str> = j["execution_path"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    format!(
        "{} {}{} [{}]",
        j["job_id"].as_str().unwrap_or("?"),
        j["status"].as_str().unwrap_or("?"),
        if j["degraded"] == true {
            " (degraded)"
        } else {
            ""
        },
        path.join(" → ")
    )
}

pub async fn jobs(cmd: JobsCmd, r: Remote) -> anyhow::Result<ExitCode> {
    match cmd {
        JobsCmd::Submit { file } => {
            let text = if file == "-" {
                let mut s = String::new();
                std::io::stdin()
                    .read_to_string(&mut s)
                    .context("reading the job from stdin")?;
                s
            } else {
                std::fs::read_to_string(&file).with_context(|| format!("reading {file}"))?
            };
            let job: Value =
                serde_json::from_str(&text).with_context(|| format!("{file} is not JSON"))?;
            let (_, v) = call(&r, reqwest::Method::POST, "/jobs", Some(job)).await?;
            println!("{}", serde_json::to_string_pretty(&v)?);
            Ok(if v["ok"] == true || v["status"] == "queued" {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        JobsCmd::Show { id } => {
            let (_, v) = call(
                &r,
                reqwest::Method::GET,
                &format!("/jobs/{}", crate::remote::enc(&id)),
                None,
            )
            .await?;
            println!("{}", serde_json::to_string_pretty(&v)?);
            Ok(ExitCode::SUCCESS)
        }
        JobsCmd::List { status } => {
            let path = match &status {
                Some(s) => format!("/jobs?status={}", crate::remote::enc(s)),
                None => "/jobs".to_owned(),
            };
            let (_, v) = call(&r, reqwest::Method::GET, &path, None).await?;
            let list = v["jobs"].as_array().cloned().unwrap_or_default();
            if list.is_empty() {
                println!("no jobs");
            }
            for j in &list {
                println!("{}", line(j));
            }
            Ok(ExitCode::SUCCESS)
        }
        JobsCmd::Audit { degraded } => {
            let path = if degraded {
                "/jobs/audit?degraded=true"
            } else {
                "/jobs/audit"
            };
            let (_, v) = call(&r, reqwest::Method::GET, path, None).await?;
            for row in v["audit"].as_array().cloned().unwrap_or_default() {
                println!("{}", serde_json::to_string(&row)?);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

pub async fn nodes(cmd: NodesCmd, r: Remote) -> anyhow::Result<ExitCode> {
    match cmd {
        NodesCmd::List => {
            let (_, v) = call(&r, reqwest::Method::GET, "/nodes", None).await?;
            let list = v["nodes"].as_array().cloned().unwrap_or_default();
            if list.is_empty() {
                println!("no tool nodes");
            }
            for n in &list {
                let tools: Vec<&str> = n["tools"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|t| t["name"].as_str()).collect())
                    .unwrap_or_default();
                println!(
                    "{} {} {} {} breaker={} tools=[{}]",
                    n["name"].as_str().unwrap_or("?"),
                    n["kind"].as_str().unwrap_or("?"),
                    n["health"].as_str().unwrap_or("?"),
                    n["url"].as_str().unwrap_or("?"),
                    n["breaker"].as_str().unwrap_or("?"),
                    tools.join(", ")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
