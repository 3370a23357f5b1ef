//! `hale agent …`, `hale deployment …`, `hale doctor` and `hale checkpoints
//! list`: thin HTTP clients of a running gateway's admin API
//! (docs/http-api.md). Every command takes `--url` (default
//! [`DEFAULT_URL`](crate::remote::DEFAULT_URL)) and `--token` (default
//! `$HALE_TOKEN`). The output is for people (`agent show` prints the API's
//! JSON). Every failure is one line naming what failed and what to do:
//! an unreachable gateway, a refused token, an unknown agent or deployment.
//! What is printed is what the gateway reported, never more: `resume` names
//! the tasks it did not clear instead of calling the agent healthy.

use crate::remote::{Remote, enc};
use anyhow::bail;
use serde_json::Value;
use std::process::ExitCode;

#[derive(clap::Subcommand, Debug)]
pub enum AgentCmd {
    /// Every agent with its gate and health state.
    List,
    /// One agent in full (JSON).
    Show { name: String },
    /// Pause: its requests get 423 until resumed.
    Pause { name: String },
    /// Resume: lifts a pause and resets the failure count; says which tasks stay stopped.
    Resume { name: String },
    /// Terminate the agent's task (default: its current one): its requests get 410.
    Terminate {
        name: String,
        #[arg(long)]
        task: Option<String>,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Clear a stopped task (safety limit, termination, spend) so its requests are served again.
    ResetTask { name: String, task: String },
}

#[derive(clap::Subcommand, Debug)]
pub enum DeploymentCmd {
    /// Every deployment (provider/model) with its health.
    List,
    /// Force a deployment out of rotation until reset (an outside check knows it is down).
    Trip {
        /// PROVIDER/MODEL (the model may itself contain `/`).
        deployment: String,
    },
    /// Bring a deployment back at once, without waiting for the probe.
    Reset {
        /// PROVIDER/MODEL (the model may itself contain `/`).
        deployment: String,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum CheckpointsCmd {
    /// An agent's checkpoints (of one task, or all), newest first.
    List { agent: String, task: Option<String> },
}

/// Writes a line to stdout; a closed pipe is an error, not a panic.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($t)*)?;
    }};
}

/// A gateway's answer: its status and its JSON body (`null` when it had none).
struct Answer {
    status: reqwest::StatusCode,
    body: Value,
    text: String,
}

impl Answer {
    fn error_type(&self) -> Option<&str> {
        self.body["error"]["type"].as_str()
    }
}

pub(crate) struct Client {
    http: reqwest::Client,
    r: Remote,
}

impl Client {
    pub(crate) fn new(r: Remote) -> anyhow::Result<Self> {
        Ok(Self {
            http: hale_events::cli::http_client(false)?,
            r,
        })
    }

    fn base(&self) -> &str {
        self.r.url.trim_end_matches('/')
    }

    /// Sends one call; an error only when no answer came back.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Answer> {
        let mut rb = self.http.request(method, format!("{}{path}", self.base()));
        if let Some(t) = &self.r.token {
            rb = rb.bearer_auth(t);
        }
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let resp = rb
            .send()
            .await
            .map_err(|e| hale_events::cli::unreachable(&self.r.url, &e))?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(Answer { status, body, text })
    }

    /// Sends one call and turns every refusal into one clear error.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let what = format!("{method} {path}");
        let a = self.send(method, path, body).await?;
        if !a.status.is_success() {
            return Err(hale_events::cli::refused(&what, a.status, &a.text));
        }
        Ok(a.body)
    }

    /// A call about one agent: an unknown agent is a clear error.
    async fn agent_call(
        &self,
        method: reqwest::Method,
        name: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let what = format!("{method} {path}");
        let a = self.send(method, path, body).await?;
        if a.status == reqwest::StatusCode::NOT_FOUND && a.error_type() == Some("agent_not_found") {
            bail!(
                "no agent named `{name}`: the gateway has not seen it and the config does not name it (`hale agent list` shows the known ones)"
            );
        }
        if !a.status.is_success() {
            return Err(hale_events::cli::refused(&what, a.status, &a.text));
        }
        Ok(a.body)
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

/// The agent's stopped tasks with why: `stopped_tasks` of a gateway that
/// reports it, else the terminated tasks of its health view.
fn stopped_tasks(a: &Value) -> Vec<(String, String)> {
    if let Some(list) = a["stopped_tasks"].as_array() {
        return list
            .iter()
            .map(|t| {
                (
                    t["task"].as_str().unwrap_or("?").to_owned(),
                    t["reason"].as_str().unwrap_or("stopped").to_owned(),
                )
            })
            .collect();
    }
    a["health"]["terminated_tasks"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .map(|t| (t.to_owned(), "terminated".to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// One line of an agent for `list` and `doctor`: (ok, text).
pub fn describe(a: &Value, now_ms: u64) -> (bool, String) {
    let id = a["id"].as_str().unwrap_or("?");
    let failures = a["consecutive_failures"].as_u64().unwrap_or(0);
    let last = a["last_failure_ms"]
        .as_u64()
        .map_or("never".to_owned(), |t| ago(t, now_ms));
    let health = a["health"]["state"].as_str().unwrap_or("unknown");
    let stopped = stopped_tasks(a);
    if a["state"] == "paused" {
        let by = match a["pause"]["by"].as_str() {
            Some("auto") => " by auto",
            Some("operator") => " by an operator",
            _ => "",
        };
        let trial = a["pause"]["next_trial_in_ms"]
            .as_u64()
            .map_or(String::new(), |ms| {
                format!(", automatic trial in {}", duration_ms(ms))
            });
        return (
            false,
            format!("{id} ✗ paused{by} ({failures} consecutive failures, last: {last}{trial})"),
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
        _ if !stopped.is_empty() => {
            let shown: Vec<String> = stopped
                .iter()
                .take(3)
                .map(|(t, why)| format!("{t}: {why}"))
                .collect();
            let more = if stopped.len() > 3 { ", …" } else { "" };
            (
                false,
                format!(
                    "{id} ✗ {} stopped task(s) ({}{more}; `hale agent reset-task {id} TASK` clears one)",
                    stopped.len(),
                    shown.join(", ")
                ),
            )
        }
        _ => (true, format!("{id} ✓ {health}")),
    }
}

pub async fn agent(cmd: AgentCmd, remote: Remote) -> anyhow::Result<ExitCode> {
    use reqwest::Method;
    let c = Client::new(remote)?;
    let now = hale_gateway::state::wall_ms();
    match cmd {
        AgentCmd::List => {
            let mut n = 0usize;
            each_agent(&c, |a| {
                n += 1;
                out!("{}", describe(a, now).1);
                Ok(())
            })
            .await?;
            if n == 0 {
                out!("no agents yet");
            }
        }
        AgentCmd::Show { name } => {
            let path = format!("/agents/{}", enc(&name));
            let v = c.agent_call(Method::GET, &name, &path, None).await?;
            out!("{}", serde_json::to_string_pretty(&v)?);
        }
        AgentCmd::Pause { name } => {
            let path = format!("/agents/{}/pause", enc(&name));
            let v = c.agent_call(Method::POST, &name, &path, None).await?;
            // A pause of an agent hale has not seen yet creates it, paused
            // (a kill switch that works before the agent's first request).
            let created = if v["created"] == true {
                " (hale had not seen it: created, paused)"
            } else {
                ""
            };
            out!("paused {name}{created}: its requests get 423 until `hale agent resume {name}`");
        }
        AgentCmd::Resume { name } => {
            let path = format!("/agents/{}/resume", enc(&name));
            let v = c.agent_call(Method::POST, &name, &path, None).await?;
            for line in resume_report(&name, &v) {
                out!("{line}");
            }
        }
        AgentCmd::Terminate { name, task, reason } => {
            let path = format!("/agents/{}/terminate", enc(&name));
            let body = serde_json::json!({"task": task, "reason": reason});
            let v = c.agent_call(Method::POST, &name, &path, Some(body)).await?;
            let task = v["task"].as_str().unwrap_or("?");
            out!(
                "terminated task {task} of {name}: its requests get 410 until `hale agent reset-task {name} {task}`"
            );
        }
        AgentCmd::ResetTask { name, task } => {
            let path = format!("/agents/{}/tasks/{}/reset", enc(&name), enc(&task));
            let v = c.agent_call(Method::POST, &name, &path, None).await?;
            let cleared: Vec<&str> = v["cleared"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if cleared.is_empty() {
                out!("task {task} of {name} was not stopped: nothing to clear");
            } else {
                out!(
                    "reset task {task} of {name}: cleared {}; its requests are served again",
                    cleared.join(", ")
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `hale agent resume` did and did not do, in plain lines, from the
/// `resume` object of the answer. Never claims health it cannot vouch for:
/// tasks that stay stopped are named with the command that clears them.
pub fn resume_report(name: &str, v: &Value) -> Vec<String> {
    let r = &v["resume"];
    if r.is_null() {
        // An older gateway: it lifted the pause but does not say what else
        // may still stop the agent's tasks.
        return vec![format!(
            "resumed {name} (this gateway does not report whether any of its tasks are still stopped; see `hale agent show {name}`)"
        )];
    }
    let mut lines = Vec::new();
    let cleared = r["consecutive_failures_cleared"].as_u64().unwrap_or(0);
    let failures = match cleared {
        0 => String::new(),
        1 => " after 1 failure".to_owned(),
        n => format!(" after {n} failures"),
    };
    if r["was_paused"].as_bool().unwrap_or(false) {
        let by = match r["paused_by"].as_str() {
            Some("auto") => " by auto".to_owned(),
            Some("operator") => " by an operator".to_owned(),
            Some(other) => format!(" by {other}"),
            None => String::new(),
        };
        lines.push(format!("resumed {name} (was paused{by}{failures})"));
    } else if cleared > 0 {
        lines.push(format!(
            "{name} was not paused; cleared {cleared} consecutive failure(s)"
        ));
    } else {
        lines.push(format!("{name} was not paused: nothing to resume"));
    }
    let unblocked: Vec<&str> = r["terminated_tasks_cleared"]
        .as_array()
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !unblocked.is_empty() {
        lines.push(format!(
            "cleared terminated task(s): {}",
            unblocked.join(", ")
        ));
    }
    let stopped = r["still_stopped_tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for t in &stopped {
        let task = t["task"].as_str().unwrap_or("?");
        let reason = t["reason"].as_str().unwrap_or("stopped");
        lines.push(format!(
            "still stopped: task {task} ({reason}) — use `hale agent reset-task {name} {task}`"
        ));
    }
    if stopped.is_empty() {
        lines.push(format!("{name} is accepting requests"));
    }
    lines
}

/// Splits `PROVIDER/MODEL` at the first `/` (a model name may contain more).
pub fn split_deployment(d: &str) -> anyhow::Result<(&str, &str)> {
    match d.split_once('/') {
        Some((p, m)) if !p.is_empty() && !m.is_empty() => Ok((p, m)),
        _ => bail!("`{d}` is not a deployment: name it as PROVIDER/MODEL, e.g. openai/gpt-4o"),
    }
}

/// `1.2s`, `340ms`, `3m 5s`.
pub fn duration_ms(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => format!("{}m {}s", ms / 60_000, ms % 60_000 / 1000),
    }
}

/// One deployment's health as a word, with why and whether an operator forced it.
fn deployment_health(d: &Value) -> String {
    let health = d["health"].as_str().unwrap_or("unknown");
    let mut s = health.to_owned();
    if let Some(class) = d["ejection_class"].as_str()
        && health == "ejected"
    {
        s.push_str(&format!(" ({class})"));
    }
    if d["forced"].as_bool().unwrap_or(false) {
        s.push_str(" [forced]");
    }
    s
}

/// The rows of `hale deployment list`: a header, then one row per deployment.
pub fn deployment_table(list: &[Value]) -> Vec<String> {
    let rows: Vec<[String; 6]> = list
        .iter()
        .map(|d| {
            [
                d["deployment"].as_str().unwrap_or("?").to_owned(),
                deployment_health(d),
                d["consecutive_failures"].as_u64().unwrap_or(0).to_string(),
                d["success_ratio"]
                    .as_f64()
                    .map_or("-".to_owned(), |r| format!("{:.0}%", r * 100.0)),
                match d["ejected_remaining_ms"].as_u64().unwrap_or(0) {
                    0 => "-".to_owned(),
                    ms => duration_ms(ms),
                },
                d["next_probe_ms"]
                    .as_u64()
                    .map_or("-".to_owned(), |ms| format!("in {}", duration_ms(ms))),
            ]
        })
        .collect();
    let header = [
        "DEPLOYMENT",
        "HEALTH",
        "FAILURES",
        "SUCCESS",
        "EJECTED FOR",
        "NEXT PROBE",
    ]
    .map(str::to_owned);
    let mut widths = header.clone().map(|h| h.chars().count());
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    std::iter::once(&header)
        .chain(&rows)
        .map(|r| {
            let cells: Vec<String> = r
                .iter()
                .zip(widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            cells.join("  ").trim_end().to_owned()
        })
        .collect()
}

/// The note for a gateway that predates an endpoint.
const OLDER_GATEWAY: &str = "not reported by this gateway (it is older than this hale)";

pub async fn deployment(cmd: DeploymentCmd, remote: Remote) -> anyhow::Result<ExitCode> {
    use reqwest::Method;
    let c = Client::new(remote)?;
    match cmd {
        DeploymentCmd::List => {
            let a = c.send(Method::GET, "/deployments", None).await?;
            if a.status == reqwest::StatusCode::NOT_FOUND {
                bail!("deployments are {OLDER_GATEWAY}");
            }
            if !a.status.is_success() {
                return Err(hale_events::cli::refused(
                    "GET /deployments",
                    a.status,
                    &a.text,
                ));
            }
            let list = a.body["deployments"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if list.is_empty() {
                out!("no deployments");
            } else {
                for line in deployment_table(&list) {
                    out!("{line}");
                }
            }
        }
        DeploymentCmd::Trip { ref deployment } | DeploymentCmd::Reset { ref deployment } => {
            let (verb, done) = match &cmd {
                DeploymentCmd::Trip { .. } => ("trip", "tripped"),
                DeploymentCmd::Reset { .. } | DeploymentCmd::List => ("reset", "reset"),
            };
            let (provider, model) = split_deployment(deployment)?;
            let path = format!("/deployments/{}/{}/{verb}", enc(provider), enc(model));
            let a = c.send(Method::POST, &path, None).await?;
            if a.status == reqwest::StatusCode::NOT_FOUND {
                if a.text.trim().is_empty() {
                    bail!("deployment control is {OLDER_GATEWAY}");
                }
                let (msg, _) = hale_events::cli::error_parts(a.status, &a.text);
                bail!("no deployment `{deployment}`: {msg} (`hale deployment list` shows them)");
            }
            if !a.status.is_success() {
                return Err(hale_events::cli::refused(
                    &format!("POST {path}"),
                    a.status,
                    &a.text,
                ));
            }
            out!("{done} {deployment}: now {}", deployment_health(&a.body));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per sink of `/ready`'s `sinks`: (needs attention, text).
pub fn describe_sink(s: &Value) -> (bool, String) {
    let name = s["name"].as_str().unwrap_or("?");
    let state = s["state"].as_str().unwrap_or("unknown");
    let backlog = s["backlog"].as_u64().unwrap_or(0);
    let dead = s["dead_letters"].as_u64().unwrap_or(0);
    let mut detail = vec![format!("backlog {backlog}")];
    if let Some(age) = s["oldest_undelivered_age_ms"].as_u64() {
        detail.push(format!("oldest waiting {}", duration_ms(age)));
    }
    if dead > 0 {
        detail.push(format!("{dead} dead letter(s): `hale dlq list`"));
    }
    if let Some(e) = s["last_error"].as_str() {
        detail.push(format!("last error: {e}"));
    }
    let (bad, mark) = match state {
        "up" => (dead > 0, if dead > 0 { "!" } else { "✓" }),
        "half_open" => (dead > 0, "!"),
        _ => (true, "✗"),
    };
    (
        bad,
        format!("{name} {mark} {state} ({})", detail.join(", ")),
    )
}

/// `hale doctor`: the gateway's readiness and its event sinks, the
/// deployments, then one line per agent that is paused, stuck, failing or
/// terminated (and a count of the healthy ones). Exit code 1 when anything
/// needs attention. Sinks and deployments come from endpoints an older
/// gateway lacks: then a note says so instead of failing.
pub async fn doctor(remote: Remote) -> anyhow::Result<ExitCode> {
    use reqwest::Method;
    let c = Client::new(remote.clone())?;
    let now = hale_gateway::state::wall_ms();
    let mut problems = 0usize;

    let ready = c.send(Method::GET, "/ready", None).await?;
    if ready.status.is_success() {
        out!("[gateway] {} ✓ ready", remote.url);
    } else {
        problems += 1;
        let why = ready.body["store"]
            .as_str()
            .map_or_else(|| ready.text.trim().to_owned(), str::to_owned);
        out!(
            "[gateway] {} ✗ not ready ({}: {why})",
            remote.url,
            ready.status
        );
    }
    match ready.body["sinks"].as_array() {
        Some(sinks) if sinks.is_empty() => out!("[sinks] none configured"),
        Some(sinks) => {
            for s in sinks {
                let (bad, line) = describe_sink(s);
                problems += usize::from(bad);
                out!("[sinks] {line}");
            }
        }
        None => out!("[sinks] {OLDER_GATEWAY}"),
    }

    let deps = c.send(Method::GET, "/deployments", None).await?;
    if deps.status == reqwest::StatusCode::NOT_FOUND {
        out!("[deployments] {OLDER_GATEWAY}");
    } else if !deps.status.is_success() {
        return Err(hale_events::cli::refused(
            "GET /deployments",
            deps.status,
            &deps.text,
        ));
    } else {
        let list = deps.body["deployments"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut healthy = 0usize;
        for d in &list {
            let name = d["deployment"].as_str().unwrap_or("?");
            match d["health"].as_str() {
                Some("healthy") => healthy += 1,
                Some("degraded") => out!(
                    "[deployments] {name} ! {} ({} consecutive failures)",
                    deployment_health(d),
                    d["consecutive_failures"].as_u64().unwrap_or(0)
                ),
                _ => {
                    problems += 1;
                    let until = if d["forced"].as_bool().unwrap_or(false) {
                        "until reset".to_owned()
                    } else {
                        format!(
                            "{} left",
                            duration_ms(d["ejected_remaining_ms"].as_u64().unwrap_or(0))
                        )
                    };
                    out!(
                        "[deployments] {name} ✗ {} ({until}; `hale deployment reset {name}` brings it back)",
                        deployment_health(d),
                    );
                }
            }
        }
        out!("[deployments] {healthy} of {} healthy", list.len());
    }

    let cl = c.send(Method::GET, "/cluster", None).await?;
    if cl.status == reqwest::StatusCode::NOT_FOUND {
        out!("[cluster] {OLDER_GATEWAY}");
    } else if !cl.status.is_success() {
        problems += 1;
        out!("[cluster] ✗ {} ({})", cl.status, cl.text.trim());
    } else {
        for line in cluster_lines(&cl.body) {
            out!("[cluster] {line}");
        }
    }

    let (mut healthy, mut listed) = (0usize, 0usize);
    each_agent(&c, |a| {
        listed += 1;
        let (ok, line) = describe(a, now);
        if ok && !line.contains(" ! ") {
            healthy += 1;
            return Ok(());
        }
        if !ok {
            problems += 1;
        }
        out!("[agents] {line}");
        Ok(())
    })
    .await?;
    out!("[agents] {healthy} of {listed} healthy");
    Ok(if problems == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Calls `f` on every agent of `GET /agents`, a page at a time (the list
/// of every agent ever seen may be long; one page is held at once). A
/// gateway from before pages answers the whole list with no `next`.
async fn each_agent(
    c: &Client,
    mut f: impl FnMut(&serde_json::Value) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            Some(a) => format!(
                "/agents?limit={}&after={}",
                hale_core::pages::PAGE_MAX,
                enc(a)
            ),
            None => format!("/agents?limit={}", hale_core::pages::PAGE_MAX),
        };
        let v = c.call(reqwest::Method::GET, &path, None).await?;
        for a in v["agents"].as_array().into_iter().flatten() {
            f(a)?;
        }
        match v["next"].as_str() {
            Some(n) if after.as_deref() != Some(n) => after = Some(n.to_owned()),
            Some(_) | None => return Ok(()),
        }
    }
}

/// The `[cluster]` lines of `hale doctor` from a `GET /cluster` body: one per
/// instance (alive or gone, its heartbeat age) and one per lease (its holder).
fn cluster_lines(v: &serde_json::Value) -> Vec<String> {
    let mut lines = Vec::new();
    let empty = Vec::new();
    let instances = v["instances"].as_array().unwrap_or(&empty);
    for i in instances {
        let alive = i["alive"].as_bool().unwrap_or(false);
        lines.push(format!(
            "instance {} {} {} pid {}{} (heartbeat {} ago)",
            i["id"].as_str().unwrap_or("?"),
            if alive { "✓ alive" } else { "✗ gone" },
            i["addr"].as_str().unwrap_or("?"),
            i["pid"].as_u64().unwrap_or(0),
            if i["this"].as_bool().unwrap_or(false) {
                " (this one)"
            } else {
                ""
            },
            duration_ms(i["heartbeat_age_ms"].as_u64().unwrap_or(0)),
        ));
    }
    for l in v["leases"].as_array().unwrap_or(&empty) {
        let state = if l["expired"].as_bool().unwrap_or(false) {
            "expired".to_owned()
        } else {
            format!(
                "{} left",
                duration_ms(l["expires_in_ms"].as_u64().unwrap_or(0))
            )
        };
        lines.push(format!(
            "lease {} held by {} ({state})",
            l["name"].as_str().unwrap_or("?"),
            l["holder"].as_str().unwrap_or("?"),
        ));
    }
    lines
}

pub async fn checkpoints(cmd: CheckpointsCmd, remote: Remote) -> anyhow::Result<ExitCode> {
    let c = Client::new(remote)?;
    let now = hale_gateway::state::wall_ms();
    let CheckpointsCmd::List { agent, task } = cmd;
    let path = match &task {
        Some(t) => format!("/agents/{}/tasks/{}/checkpoints", enc(&agent), enc(t)),
        None => format!("/agents/{}/checkpoints", enc(&agent)),
    };
    let v = c.call(reqwest::Method::GET, &path, None).await?;
    let list = v["checkpoints"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        out!("no checkpoints");
    }
    for cp in &list {
        let valid = cp["valid"].as_bool().unwrap_or(false);
        out!(
            "{} {} task={} parent={} {}B sha256={} {}",
            if valid { "✓" } else { "✗ CORRUPT" },
            cp["id"].as_str().unwrap_or("?"),
            cp["task"].as_str().unwrap_or("?"),
            cp["parent"].as_str().unwrap_or("-"),
            cp["size"].as_u64().unwrap_or(0),
            cp["sha256"]
                .as_str()
                .map_or("?", |s| s.get(..12).unwrap_or(s)),
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
    fn doctor_cluster_lines_name_instances_and_lease_holders() {
        let v = serde_json::json!({
            "instance": "01A",
            "instances": [
                {"id": "01A", "addr": "127.0.0.1:3000", "pid": 7, "alive": true, "this": true, "heartbeat_age_ms": 1200},
                {"id": "01B", "addr": "127.0.0.1:3001", "pid": 8, "alive": false, "this": false, "heartbeat_age_ms": 60000},
            ],
            "leases": [{"name": "health-monitor", "holder": "01A", "expires_in_ms": 8000, "expired": false}],
        });
        let lines = super::cluster_lines(&v);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].starts_with("instance 01A ✓ alive 127.0.0.1:3000 pid 7 (this one)"),
            "{}",
            lines[0]
        );
        assert!(lines[1].starts_with("instance 01B ✗ gone"), "{}", lines[1]);
        assert!(
            lines[2].starts_with("lease health-monitor held by 01A"),
            "{}",
            lines[2]
        );
    }

    #[test]
    fn the_default_url_is_the_default_listen_address() {
        assert_eq!(
            crate::remote::DEFAULT_URL,
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

    #[test]
    fn resume_names_what_it_cleared_and_the_tasks_still_stopped() {
        let v = json!({"resume": {"was_paused": true, "paused_by": "auto",
            "consecutive_failures_cleared": 3,
            "still_stopped_tasks": [{"task": "t1", "reason": "safety_limit"}]}});
        assert_eq!(
            resume_report("research-agent", &v),
            vec![
                "resumed research-agent (was paused by auto after 3 failures)".to_owned(),
                "still stopped: task t1 (safety_limit) — use `hale agent reset-task research-agent t1`"
                    .to_owned(),
            ]
        );
        let clean = json!({"resume": {"was_paused": false, "paused_by": null,
            "consecutive_failures_cleared": 0, "terminated_tasks_cleared": ["t2"],
            "still_stopped_tasks": []}});
        assert_eq!(
            resume_report("a", &clean),
            vec![
                "a was not paused: nothing to resume".to_owned(),
                "cleared terminated task(s): t2".to_owned(),
                "a is accepting requests".to_owned()
            ]
        );
        // An older gateway's answer: no claim of health.
        let old = resume_report("a", &json!({"id": "a", "health": {"state": "healthy"}}));
        assert!(!old.concat().contains("healthy"), "{old:?}");
    }

    #[test]
    fn a_deployment_splits_at_the_first_slash_only() {
        assert_eq!(
            split_deployment("openai/gpt-4o").unwrap(),
            ("openai", "gpt-4o")
        );
        assert_eq!(
            split_deployment("hf/meta-llama/Llama-3").unwrap(),
            ("hf", "meta-llama/Llama-3")
        );
        assert_eq!(
            crate::remote::enc("meta-llama/Llama-3"),
            "meta-llama%2FLlama-3"
        );
        for bad in ["gpt-4o", "/m", "p/", ""] {
            assert!(split_deployment(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_deployment_table_aligns_columns_and_shows_dashes_for_nothing() {
        let list = vec![
            json!({"deployment": "openai/gpt-4o", "health": "healthy", "consecutive_failures": 0,
                   "success_ratio": null, "ejected_remaining_ms": 0, "next_probe_ms": null}),
            json!({"deployment": "p/m", "health": "ejected", "ejection_class": "overloaded",
                   "forced": true, "consecutive_failures": 4, "success_ratio": 0.25,
                   "ejected_remaining_ms": 12_300, "next_probe_ms": 800}),
        ];
        let t = deployment_table(&list);
        assert_eq!(t.len(), 3);
        assert!(t[0].starts_with("DEPLOYMENT     HEALTH"), "{t:?}");
        assert!(t[1].starts_with("openai/gpt-4o  healthy"), "{t:?}");
        assert!(t[1].ends_with('-'), "{t:?}");
        assert!(
            t[2].contains("ejected (overloaded) [forced]") && t[2].contains("25%"),
            "{t:?}"
        );
        assert!(
            t[2].contains("12.3s") && t[2].ends_with("in 800ms"),
            "{t:?}"
        );
    }

    #[test]
    fn a_sink_that_is_down_or_has_dead_letters_needs_attention() {
        let up = json!({"name": "nats", "state": "up", "backlog": 0, "dead_letters": 0});
        assert_eq!(
            describe_sink(&up),
            (false, "nats ✓ up (backlog 0)".to_owned())
        );
        let down = json!({"name": "webhook:h", "state": "down", "backlog": 12,
            "oldest_undelivered_age_ms": 120_000, "dead_letters": 0, "last_error": "refused"});
        let (bad, line) = describe_sink(&down);
        assert!(bad);
        assert_eq!(
            line,
            "webhook:h ✗ down (backlog 12, oldest waiting 2m 0s, last error: refused)"
        );
    }

    #[test]
    fn an_agent_with_a_stopped_task_is_not_called_healthy() {
        let a = json!({"id": "a", "state": "active", "health": {"state": "healthy"},
            "stopped_tasks": [{"task": "t1", "reason": "safety_limit"}]});
        let (ok, line) = describe(&a, 0);
        assert!(!ok);
        assert_eq!(
            line,
            "a ✗ 1 stopped task(s) (t1: safety_limit; `hale agent reset-task a TASK` clears one)"
        );
        let old = json!({"id": "a", "state": "active",
            "health": {"state": "healthy", "terminated_tasks": ["t9"]}});
        assert!(describe(&old, 0).1.contains("t9: terminated"));
    }
}
