//! `hale-bench health`: seed 004's performance targets, measured (issue 28,
//! BENCHMARKS.md "Agent health").
//!
//! Starts `hale chaos` and `hale serve` (release binary, separate processes)
//! with the seed's health timings divided by `--scale N` (heartbeat interval
//! 5 min, stale 10 min, stuck 30 min, nudges 10 min apart ×3, escalation
//! 15 min, recovery backoff 1/2/4 min), then runs a fleet of agents against
//! it on loopback:
//!
//! - **healthy**: a heartbeat with new progress and a model turn every
//!   heartbeat interval;
//! - **slow**: long tool calls (0.7 × stuck) with heartbeats whose progress
//!   moves, then long thinks (a 0.6 × stuck model call, `slow-first-token`)
//!   while heartbeats keep coming with the same progress;
//! - **stuck**: heartbeats and model turns, but the progress never changes;
//! - **looping**: the identical model request again and again;
//! - **silent**: healthy for a few heartbeat intervals, then silent (no
//!   heartbeat, no call): judged stale at its last heartbeat + stale, stuck
//!   at its last progress + stuck; the table shows how late against those
//!   deadlines (the monitor sleeps until the earliest one any agent has);
//! - **crash-looping**: `hale run` supervising `hale-bench health-child`,
//!   which checkpoints and crashes twice, and must resume from the newest
//!   checkpoint each time.
//!
//! Detections and interventions are timed from `GET /events` (the events'
//! `time_ms`, hale's wall clock on this machine) against the instant the
//! agent met the seed's definition of stuck: its last progress + the stuck
//! time, or the send of its third identical request. Heartbeat and
//! health-check (`GET /agents/{id}`) latencies are the client's round trips.
//! Everything is bounded: the fleet stops at a computed end, `hale run`
//! processes are killed past it, the whole run past a hard deadline.

use crate::procs;
use anyhow::{Context, bail};
use clap::Parser;
use futures::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The seed's schedule (ADR-110 §2, §3, §5, §7), in seconds.
const SEED_HEARTBEAT_S: f64 = 300.0;
const SEED_STALE_S: f64 = 600.0;
const SEED_STUCK_S: f64 = 1800.0;
const SEED_NUDGE_S: f64 = 600.0;
const SEED_NUDGES: u32 = 3;
const SEED_ESCALATION_S: f64 = 900.0;
const SEED_BACKOFF_S: [f64; 3] = [60.0, 120.0, 240.0];
/// The seed's targets ("Performance Requirements").
const TARGET_DETECT_S: f64 = 300.0;
const TARGET_FP: f64 = 0.01;
const TARGET_RECOVERY: f64 = 0.95;
const TARGET_MTTI_S: f64 = 600.0;
const TARGET_CHECK_MS: f64 = 100.0;
const TARGET_HEARTBEAT_MS: f64 = 50.0;
const TARGET_CONCURRENT: u64 = 100;
const TARGET_TRANSITION_MS: f64 = 1000.0;
/// A silent agent's change of state after its deadline (the seed's "state
/// transition < 1 s", not scaled).
const TARGET_SILENT_MS: f64 = 1000.0;

#[derive(Parser, Debug, Clone, Serialize)]
#[command(
    name = "hale-bench health",
    about = "a fleet of agents against hale serve: seed 004's health targets, time-scaled"
)]
pub struct HealthArgs {
    /// The time scale: the seed's heartbeat, stale, stuck, nudge, escalation
    /// and backoff timings (and the targets that are timings of them) are
    /// divided by it.
    #[arg(long, default_value_t = 30.0)]
    pub scale: f64,
    #[arg(long, default_value_t = 700)]
    pub healthy: usize,
    #[arg(long, default_value_t = 200)]
    pub slow: usize,
    #[arg(long, default_value_t = 50)]
    pub stuck: usize,
    #[arg(long, default_value_t = 40)]
    pub looping: usize,
    /// Agents that stop heartbeating and calling after a few intervals.
    #[arg(long, default_value_t = 100)]
    pub silent: usize,
    /// Agents under `hale run` that crash twice and resume from checkpoints.
    #[arg(long, default_value_t = 10)]
    pub crashing: usize,
    /// hale's storage: a `postgres://` URL (its database must exist and be
    /// empty or hale's); default SQLite in the run's temporary directory.
    #[arg(long)]
    pub storage: Option<String>,
    /// The hale binary; default: `hale` next to this binary, or target/release/hale.
    #[arg(long)]
    pub hale_bin: Option<PathBuf>,
    /// Where to write the results as JSON.
    #[arg(long, default_value = "target/hale-health.json")]
    pub out: PathBuf,
}

/// The timings of one run (the seed's, divided by the scale).
#[derive(Debug, Clone, Copy, Serialize)]
struct Timings {
    #[serde(serialize_with = "ser_ms")]
    heartbeat: Duration,
    #[serde(serialize_with = "ser_ms")]
    stale: Duration,
    #[serde(serialize_with = "ser_ms")]
    stuck: Duration,
    #[serde(serialize_with = "ser_ms")]
    nudge: Duration,
    #[serde(serialize_with = "ser_ms")]
    escalation: Duration,
    backoff_ms: [u64; 3],
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

impl Timings {
    fn new(scale: f64) -> Self {
        let d = |s: f64| Duration::from_secs_f64(s / scale);
        Self {
            heartbeat: d(SEED_HEARTBEAT_S),
            stale: d(SEED_STALE_S),
            stuck: d(SEED_STUCK_S),
            nudge: d(SEED_NUDGE_S),
            escalation: d(SEED_ESCALATION_S),
            backoff_ms: SEED_BACKOFF_S.map(|s| (s * 1000.0 / scale).round().max(1.0) as u64),
        }
    }

    /// How long the fleet runs: a stuck agent's whole path (stuck, every
    /// nudge, the escalation, termination) and two heartbeats more.
    fn run_for(&self) -> Duration {
        self.stuck + self.nudge * SEED_NUDGES + self.escalation + self.heartbeat * 2
    }

    /// hale's config for these timings (appended to the generated one).
    fn yaml(&self, think: Duration) -> String {
        let ms = |d: Duration| d.as_millis().max(1) as u64;
        format!(
            "    timeout_ms: {timeout}\n\
             health:\n  \
               stale_after_ms: {stale}\n  \
               stuck_after_ms: {stuck}\n  \
               nudge: {{max_attempts: {SEED_NUDGES}, interval_ms: {nudge}}}\n  \
               escalation_timeout_ms: {esc}\n\
             recovery: {{max_per_task: 3, max_per_hour: 5, backoff_ms: [{b0}, {b1}, {b2}]}}\n",
            timeout = (ms(think) * 2).max(60_000),
            stale = ms(self.stale),
            stuck = ms(self.stuck),
            nudge = ms(self.nudge),
            esc = ms(self.escalation),
            b0 = self.backoff_ms[0],
            b1 = self.backoff_ms[1],
            b2 = self.backoff_ms[2],
        )
    }
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Healthy,
    Slow,
    Stuck,
    Looping,
    Silent,
    Crashing,
}

/// What the fleet recorded, shared by its tasks.
#[derive(Default)]
struct Book {
    kinds: HashMap<String, Kind>,
    /// Agent → the wall ms at which it met the seed's definition of stuck.
    stuck_at_ms: HashMap<String, u64>,
    /// Looping agent → the wall ms its third identical request was sent.
    loop_third_ms: HashMap<String, u64>,
    /// Silent agent → the wall ms its last heartbeat was sent (its last
    /// contact: the deadlines are this + stale, + stuck; sent a few ms
    /// before hale took it, so a lateness measured from it is an upper bound).
    silent_since_ms: HashMap<String, u64>,
    heartbeat_ns: Vec<u64>,
    heartbeat_errors: u64,
    check_ns: Vec<u64>,
    check_errors: u64,
    turn_errors: u64,
    /// Agents that got 410 task_terminated.
    saw_410: u64,
}

/// One event of interest, as read from `GET /events`.
#[derive(Debug, Clone)]
struct Ev {
    kind: String,
    agent: String,
    time_ms: u64,
    to: Option<String>,
}

struct Fleet {
    http: reqwest::Client,
    base: String,
    t: Timings,
    end: Instant,
    book: Mutex<Book>,
}

impl Fleet {
    async fn heartbeat(&self, agent: &str, body: Value) -> bool {
        let t0 = Instant::now();
        let r = self
            .http
            .post(format!("{}/agents/{agent}/heartbeat", self.base))
            .json(&body)
            .send()
            .await;
        let ns = t0.elapsed().as_nanos() as u64;
        let ok = matches!(&r, Ok(r) if r.status().as_u16() == 204);
        let mut b = self.book.lock().expect("book");
        if ok {
            b.heartbeat_ns.push(ns);
        } else {
            b.heartbeat_errors += 1;
        }
        ok
    }

    /// One model turn; `Ok(false)` when the task was terminated (410).
    async fn turn(&self, agent: &str, model: &str, text: &str) -> anyhow::Result<bool> {
        let r = self
            .http
            .post(format!("{}/v1/chat/completions", self.base))
            .header("x-hale-agent", agent)
            .header("x-hale-task", "work")
            .json(&json!({"model": model, "messages": [{"role": "user", "content": text}]}))
            .send()
            .await;
        match r {
            Ok(r) if r.status().as_u16() == 410 => {
                self.book.lock().expect("book").saw_410 += 1;
                Ok(false)
            }
            Ok(r) if r.status().is_success() => {
                let _ = r.bytes().await;
                Ok(true)
            }
            Ok(_) | Err(_) => {
                self.book.lock().expect("book").turn_errors += 1;
                Ok(true)
            }
        }
    }

    fn live(&self) -> bool {
        Instant::now() < self.end
    }

    async fn sleep(&self, d: Duration) {
        let until = (Instant::now() + d).min(self.end);
        tokio::time::sleep_until(until.into()).await;
    }
}

fn hb(phase: &str, progress: &str) -> Value {
    json!({"task": "work", "phase": phase, "progress": progress})
}

async fn healthy(f: Arc<Fleet>, agent: String, offset: Duration) {
    f.sleep(offset).await;
    let mut k = 0u64;
    while f.live() {
        k += 1;
        f.heartbeat(&agent, hb("work", &format!("step {k}"))).await;
        let _ = f
            .turn(&agent, "ok:tokens=8", &format!("{agent} step {k}"))
            .await;
        f.sleep(f.t.heartbeat).await;
    }
}

async fn slow(f: Arc<Fleet>, agent: String, offset: Duration, think_model: String) {
    f.sleep(offset).await;
    let mut n = 0u64;
    while f.live() {
        n += 1;
        // A long tool call, reporting how far it got at every heartbeat.
        let tool_end = Instant::now() + f.t.stuck.mul_f64(0.7);
        let mut j = 0u32;
        while f.live() && Instant::now() < tool_end {
            j += 1;
            f.heartbeat(&agent, hb("tool", &format!("tool call {n}: part {j}")))
                .await;
            f.sleep(
                f.t.heartbeat
                    .min(tool_end.saturating_duration_since(Instant::now())),
            )
            .await;
        }
        if !f.live() {
            break;
        }
        // A long think: the progress says so once; heartbeats keep coming.
        f.heartbeat(&agent, hb("think", &format!("thinking {n}")))
            .await;
        let beats = {
            let (f, agent) = (f.clone(), agent.clone());
            tokio::spawn(async move {
                loop {
                    f.sleep(f.t.heartbeat).await;
                    if !f.live() {
                        break;
                    }
                    f.heartbeat(&agent, hb("think", &format!("thinking {n}")))
                        .await;
                }
            })
        };
        let _ = f
            .turn(&agent, &think_model, &format!("{agent} think {n}"))
            .await;
        beats.abort();
    }
}

async fn stuck(f: Arc<Fleet>, agent: String, offset: Duration) {
    f.sleep(offset).await;
    let sent = wall_ms();
    if !f.heartbeat(&agent, hb("work", "waiting for a lock")).await {
        return;
    }
    f.book
        .lock()
        .expect("book")
        .stuck_at_ms
        .insert(agent.clone(), sent + f.t.stuck.as_millis() as u64);
    let mut k = 0u64;
    while f.live() {
        f.sleep(f.t.heartbeat).await;
        k += 1;
        f.heartbeat(&agent, hb("work", "waiting for a lock")).await;
        // It keeps calling the model (so a nudge reaches it), never moving on.
        match f
            .turn(&agent, "ok:tokens=8", &format!("{agent} poll {k}"))
            .await
        {
            Ok(true) => {}
            Ok(false) | Err(_) => break,
        }
    }
}

async fn silent(f: Arc<Fleet>, agent: String, offset: Duration, rounds: u64) {
    f.sleep(offset).await;
    for k in 1..=rounds {
        if !f.live() {
            return;
        }
        let _ = f
            .turn(&agent, "ok:tokens=8", &format!("{agent} step {k}"))
            .await;
        // The heartbeat after the turn is its last contact.
        let sent = wall_ms();
        if f.heartbeat(&agent, hb("work", &format!("step {k}"))).await {
            f.book
                .lock()
                .expect("book")
                .silent_since_ms
                .insert(agent.clone(), sent);
        }
        if k < rounds {
            f.sleep(f.t.heartbeat).await;
        }
    }
    // Silent from here: no heartbeat, no call.
}

async fn looping(f: Arc<Fleet>, agent: String, offset: Duration) {
    f.sleep(offset).await;
    let text = format!("{agent}: run the same tool again");
    let mut k = 0u32;
    while f.live() {
        k += 1;
        f.heartbeat(&agent, json!({"task": "work"})).await;
        if k == 3 {
            let now = wall_ms();
            let mut b = f.book.lock().expect("book");
            b.loop_third_ms.insert(agent.clone(), now);
            b.stuck_at_ms.insert(agent.clone(), now);
        }
        match f.turn(&agent, "ok:tokens=8", &text).await {
            Ok(true) => {}
            Ok(false) | Err(_) => break,
        }
        f.sleep(f.t.heartbeat / 2).await;
    }
}

/// Health checks: `GET /agents/{id}` of agents of the fleet, in turn.
async fn checker(f: Arc<Fleet>, agents: Vec<String>) {
    // Every agent has started after one heartbeat interval.
    f.sleep(f.t.heartbeat).await;
    let mut i = 0usize;
    while f.live() && !agents.is_empty() {
        let a = &agents[i % agents.len()];
        i += 1;
        let t0 = Instant::now();
        let r = f.http.get(format!("{}/agents/{a}", f.base)).send().await;
        let ok = match r {
            Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
            Ok(_) | Err(_) => false,
        };
        let ns = t0.elapsed().as_nanos() as u64;
        {
            let mut b = f.book.lock().expect("book");
            if ok {
                b.check_ns.push(ns);
            } else {
                b.check_errors += 1;
            }
        }
        f.sleep(Duration::from_millis(20)).await;
    }
}

/// Agents hale holds a health state for, by paging `GET /agents`.
async fn concurrent_agents(http: &reqwest::Client, base: &str) -> anyhow::Result<u64> {
    let mut after: Option<String> = None;
    let mut n = 0u64;
    for _ in 0..100 {
        let mut url = format!("{base}/agents?limit=1000");
        if let Some(a) = &after {
            url.push_str(&format!("&after={a}"));
        }
        let v: Value = http.get(url).send().await?.json().await?;
        for a in v["agents"].as_array().into_iter().flatten() {
            if a["health"]["state"].is_string() {
                n += 1;
            }
        }
        match v["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    Ok(n)
}

/// Reads `GET /events` until `stop`, keeping the kinds of interest.
async fn read_events(
    http: reqwest::Client,
    base: String,
    out: Arc<Mutex<Vec<Ev>>>,
    stop: tokio_util_cancel::Stop,
) -> anyhow::Result<()> {
    let kinds = "health.state_changed,health.nudge_sent,health.escalated,agent.terminated,recovery.started,recovery.completed,recovery.failed";
    let r = http
        .get(format!("{base}/events?kind={kinds}"))
        .timeout(Duration::from_secs(3600))
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("GET /events answered {}", r.status());
    }
    let mut body = r.bytes_stream();
    let mut buf = String::new();
    loop {
        let chunk = tokio::select! {
            c = body.next() => c,
            () = stop.wait() => return Ok(()),
        };
        let Some(chunk) = chunk else {
            return Ok(());
        };
        buf.push_str(&String::from_utf8_lossy(&chunk?));
        while let Some(nl) = buf.find('\n') {
            let line: String = buf.drain(..=nl).collect();
            let Some(data) = line.trim_end().strip_prefix("data:") else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(data.trim()) else {
                continue;
            };
            out.lock().expect("events").push(Ev {
                kind: v["kind"].as_str().unwrap_or_default().to_owned(),
                agent: v["agent"].as_str().unwrap_or_default().to_owned(),
                time_ms: v["time_ms"].as_u64().unwrap_or(0),
                to: v["payload"]["to"].as_str().map(str::to_owned),
            });
        }
    }
}

/// A one-shot stop signal (a watch channel).
mod tokio_util_cancel {
    #[derive(Clone)]
    pub struct Stop(tokio::sync::watch::Receiver<bool>);
    pub fn new() -> (tokio::sync::watch::Sender<bool>, Stop) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (tx, Stop(rx))
    }
    impl Stop {
        pub async fn wait(&self) {
            let mut rx = self.0.clone();
            let _ = rx.wait_for(|v| *v).await;
        }
    }
}

/// One crash-looping agent's outcome.
#[derive(Debug, Serialize)]
struct CrashOutcome {
    agent: String,
    exit: Option<i32>,
    /// Restarts that resumed from the checkpoint the previous run wrote.
    resumed: u32,
    /// Restarts needed (crashes).
    crashes: u32,
}

const CHILD_CRASHES: u32 = 2;

async fn crash_looper(
    bin: PathBuf,
    me: PathBuf,
    base: String,
    work: PathBuf,
    agent: String,
    deadline: Instant,
) -> CrashOutcome {
    let out = work.join(format!("{agent}.jsonl"));
    let child = tokio::process::Command::new(&bin)
        .args(["run", "--agent", &agent, "--task", "job", "--url", &base])
        .arg("--log-dir")
        .arg(work.join("runs"))
        .arg("--")
        .arg(&me)
        .args(["health-child", "--crashes", &CHILD_CRASHES.to_string()])
        .arg("--out")
        .arg(&out)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn();
    let exit = match child {
        Ok(mut c) => {
            match tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), c.wait())
                .await
            {
                Ok(Ok(s)) => s.code(),
                Ok(Err(_)) | Err(_) => {
                    let _ = c.kill().await;
                    None
                }
            }
        }
        Err(_) => None,
    };
    let lines = std::fs::read_to_string(&out).unwrap_or_default();
    let mut resumed = 0;
    for l in lines.lines() {
        let Ok(v) = serde_json::from_str::<Value>(l) else {
            continue;
        };
        let restart = v["restart"].as_u64().unwrap_or(0);
        if restart > 0 && v["checkpoint_step"].as_u64() == Some(restart) {
            resumed += 1;
        }
    }
    CrashOutcome {
        agent,
        exit,
        resumed,
        crashes: CHILD_CRASHES,
    }
}

#[derive(Parser, Debug)]
#[command(name = "hale-bench health-child", hide = true)]
pub struct ChildArgs {
    #[arg(long)]
    crashes: u32,
    #[arg(long)]
    out: PathBuf,
}

/// The crash-looping agent `hale run` supervises: on start `r` it records
/// the checkpoint it resumed from, makes a turn, stores checkpoint `r + 1`
/// and crashes (exit 1) until `r` reaches `--crashes`, then exits 0.
/// Returns the exit code.
pub async fn child(args: ChildArgs) -> anyhow::Result<i32> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let env = |k: &str| std::env::var(k).with_context(|| format!("{k} is not set"));
    let (url, agent, task) = (env("HALE_URL")?, env("HALE_AGENT")?, env("HALE_TASK")?);
    let restart: u64 = env("HALE_RESTART")?.parse()?;
    let step = match std::env::var("HALE_CHECKPOINT") {
        Ok(p) => {
            let v: Value = serde_json::from_slice(&std::fs::read(&p)?)?;
            v["step"].as_u64()
        }
        Err(_) => None,
    };
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&args.out)?;
        writeln!(
            f,
            "{}",
            json!({"restart": restart, "checkpoint_step": step})
        )?;
    }
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let r = http
        .post(format!("{url}/v1/chat/completions"))
        .header("x-hale-agent", &agent)
        .header("x-hale-task", &task)
        .json(&json!({"model": "ok:tokens=8", "messages": [{"role": "user", "content": format!("{agent} run {restart}")}]}))
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("turn answered {}", r.status());
    }
    let r = http
        .post(format!("{url}/agents/{agent}/tasks/{task}/checkpoints"))
        .json(&json!({"step": restart + 1, "agent": agent}))
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("checkpoint answered {}", r.status());
    }
    if restart < u64::from(args.crashes) {
        return Ok(1);
    }
    Ok(0)
}

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// One row of the seed's table.
#[derive(Debug, Serialize)]
pub struct TableRow {
    pub metric: String,
    pub measured: String,
    pub seed_target: String,
    pub scaled_target: String,
    pub met: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    args: HealthArgs,
    timings: Timings,
    unix_time: u64,
    nproc: usize,
    agents: usize,
    run_ms: u64,
    rows: Vec<TableRow>,
    detection_s: Vec<f64>,
    /// Silent agents: ms from their stale / stuck deadline to the event.
    silent_stale_late_ms: Vec<f64>,
    silent_stuck_late_ms: Vec<f64>,
    intervention_s: Vec<f64>,
    transition_ms: Vec<f64>,
    false_positives: Vec<String>,
    crash: Vec<CrashOutcome>,
    heartbeats: usize,
    heartbeat_errors: u64,
    checks: usize,
    check_errors: u64,
    turn_errors: u64,
    stuck_terminated: usize,
    events: usize,
}

pub async fn run(args: HealthArgs) -> anyhow::Result<()> {
    if !args.scale.is_finite() || args.scale < 1.0 {
        bail!("--scale must be at least 1");
    }
    if args.stuck + args.looping == 0 || args.healthy + args.slow == 0 {
        bail!("the fleet needs stuck or looping agents and healthy or slow ones");
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let t = Timings::new(args.scale);
    let think = t.stuck.mul_f64(0.6);
    let bin = procs::find_hale(args.hale_bin.as_deref())?;
    let me = std::env::current_exe().context("cannot find the hale-bench binary")?;
    let work = tempfile::Builder::new().prefix("hale-health-").tempdir()?;
    let chaos = procs::start_chaos(&bin, work.path()).await?;
    let addr = procs::free_port()?;
    let mut cfg = procs::hale_config(
        addr,
        &format!("http://{}/v1", chaos.addr),
        "ok:tokens=8",
        &work.path().join("data"),
    ) + &t.yaml(think);
    if let Some(url) = &args.storage {
        // A YAML double-quoted string takes JSON escapes.
        cfg.push_str(&format!("storage: {}\n", serde_json::to_string(url)?));
    }
    let hale = procs::start_hale_with(&bin, work.path(), addr, &cfg).await?;
    let base = format!("http://{addr}");
    let http = reqwest::Client::builder()
        .timeout(think + Duration::from_secs(60))
        .pool_max_idle_per_host(2048)
        .tcp_nodelay(true)
        .build()?;
    let total = args.healthy + args.slow + args.stuck + args.looping + args.silent + args.crashing;
    let run_for = t.run_for();
    eprintln!(
        "hale-health: {total} agents, scale {} (heartbeat {:?}, stuck {:?}, nudge {:?} x{SEED_NUDGES}, escalation {:?}), {:.0} s, {}",
        args.scale,
        t.heartbeat,
        t.stuck,
        t.nudge,
        t.escalation,
        run_for.as_secs_f64(),
        bin.display()
    );

    let events = Arc::new(Mutex::new(Vec::<Ev>::new()));
    let (stop_tx, stop) = tokio_util_cancel::new();
    let reader = tokio::spawn(read_events(
        http.clone(),
        base.clone(),
        events.clone(),
        stop,
    ));
    // Let the event stream attach before the fleet starts.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let start = Instant::now();
    let fleet = Arc::new(Fleet {
        http: http.clone(),
        base: base.clone(),
        t,
        end: start + run_for,
        book: Mutex::new(Book::default()),
    });
    let mut tasks = Vec::new();
    let mut names = Vec::new();
    let spread = |i: usize, n: usize| t.heartbeat.mul_f64(i as f64 / n.max(1) as f64);
    let groups = [
        (Kind::Healthy, args.healthy),
        (Kind::Slow, args.slow),
        (Kind::Stuck, args.stuck),
        (Kind::Looping, args.looping),
        (Kind::Silent, args.silent),
    ];
    for (kind, n) in groups {
        for i in 0..n {
            let agent = format!("{kind:?}-{i}").to_lowercase();
            fleet
                .book
                .lock()
                .expect("book")
                .kinds
                .insert(agent.clone(), kind);
            names.push(agent.clone());
            let off = spread(i, n);
            let f = fleet.clone();
            let task = match kind {
                Kind::Healthy => tokio::spawn(healthy(f, agent, off)),
                Kind::Slow => tokio::spawn(slow(
                    f,
                    agent,
                    off,
                    format!("slow-first-token:ms={}", think.as_millis()),
                )),
                Kind::Stuck => tokio::spawn(stuck(f, agent, off)),
                Kind::Looping => tokio::spawn(looping(f, agent, off)),
                Kind::Silent => tokio::spawn(silent(f, agent, off, 1 + (i % 3) as u64)),
                // Crash-loopers run under `hale run`, started below.
                Kind::Crashing => continue,
            };
            tasks.push(task);
        }
    }
    tasks.push(tokio::spawn(checker(fleet.clone(), names.clone())));
    let mut crashers = Vec::new();
    for i in 0..args.crashing {
        let agent = format!("crashing-{i}");
        fleet
            .book
            .lock()
            .expect("book")
            .kinds
            .insert(agent.clone(), Kind::Crashing);
        crashers.push(tokio::spawn(crash_looper(
            bin.clone(),
            me.clone(),
            base.clone(),
            work.path().to_path_buf(),
            agent,
            start + run_for + Duration::from_secs(30),
        )));
    }
    // Concurrency as hale sees it, once every agent has started.
    tokio::time::sleep(t.heartbeat + Duration::from_secs(1)).await;
    let concurrent = concurrent_agents(&http, &base).await.unwrap_or(0);
    eprintln!("hale-health: hale holds a health state for {concurrent} agents");

    for task in tasks {
        let _ = tokio::time::timeout(
            (start + run_for + think + Duration::from_secs(30))
                .saturating_duration_since(Instant::now()),
            task,
        )
        .await;
    }
    let mut crash = Vec::new();
    for c in crashers {
        if let Ok(o) = c.await {
            crash.push(o);
        }
    }
    let run_ms = start.elapsed().as_millis() as u64;
    // The last events reach the outbox within a group commit.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _ = stop_tx.send(true);
    // A reader that ended or hung is only reported: the events it read are kept.
    if let Ok(Ok(Err(e))) = tokio::time::timeout(Duration::from_secs(5), reader).await {
        eprintln!("hale-health: the event stream failed: {e:#}");
    }
    drop(hale);
    drop(chaos);

    let book = std::mem::take(&mut *fleet.book.lock().expect("book"));
    let events = std::mem::take(&mut *events.lock().expect("events"));
    let report = analyse(&args, t, &book, &events, crash, concurrent, total, run_ms);
    print_table(&report.rows, &args);
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir).ok();
    }
    std::fs::write(&args.out, serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    eprintln!("hale-health: results in {}", args.out.display());
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn analyse(
    args: &HealthArgs,
    t: Timings,
    book: &Book,
    events: &[Ev],
    crash: Vec<CrashOutcome>,
    concurrent: u64,
    total: usize,
    run_ms: u64,
) -> Report {
    let s = args.scale;
    // First event of each kind per agent.
    let mut first: HashMap<(&str, &str), u64> = HashMap::new();
    let mut flagged: HashMap<&str, Vec<&str>> = HashMap::new();
    for e in events {
        // Degraded (stale) is no judgement of an agent: it is not flagged.
        if e.kind == "health.state_changed" && e.to.as_deref() == Some("degraded") {
            let slot = first
                .entry((e.agent.as_str(), "degraded"))
                .or_insert(e.time_ms);
            *slot = (*slot).min(e.time_ms);
            continue;
        }
        let key = match (e.kind.as_str(), e.to.as_deref()) {
            ("health.state_changed", Some("stuck")) => "stuck",
            ("health.state_changed", Some("failing")) => "failing",
            ("health.state_changed", _) => continue,
            ("health.nudge_sent", _) => "nudged",
            ("health.escalated", _) => "escalated",
            ("agent.terminated", _) => "terminated",
            (_, _) => continue,
        };
        let slot = first.entry((e.agent.as_str(), key)).or_insert(e.time_ms);
        *slot = (*slot).min(e.time_ms);
        flagged.entry(e.agent.as_str()).or_default().push(key);
    }
    // Detection and intervention of stuck and looping agents.
    let mut detection_s = Vec::new();
    let mut intervention_s = Vec::new();
    let mut undetected = 0usize;
    let mut stuck_terminated = 0usize;
    for (agent, &at) in &book.stuck_at_ms {
        match first.get(&(agent.as_str(), "stuck")) {
            Some(&d) => detection_s.push(d.saturating_sub(at) as f64 / 1000.0),
            None => undetected += 1,
        }
        let acted = ["nudged", "escalated", "terminated"]
            .iter()
            .filter_map(|k| first.get(&(agent.as_str(), *k)))
            .min();
        if let Some(&a) = acted {
            intervention_s.push(a.saturating_sub(at) as f64 / 1000.0);
        }
        if first.contains_key(&(agent.as_str(), "terminated")) {
            stuck_terminated += 1;
        }
    }
    // State transitions driven by a request: a looping agent's third identical call → stuck.
    let mut transition_ms: Vec<f64> = book
        .loop_third_ms
        .iter()
        .filter_map(|(a, &sent)| {
            first
                .get(&(a.as_str(), "stuck"))
                .map(|&d| d.saturating_sub(sent) as f64)
        })
        .collect();
    // Silent agents: how late after their deadlines they were judged stale, then stuck.
    let stale_ms = t.stale.as_millis() as u64;
    let stuck_ms = t.stuck.as_millis() as u64;
    let mut silent_stale_late_ms = Vec::new();
    let mut silent_stuck_late_ms = Vec::new();
    let mut silent_missed = 0usize;
    for (agent, &since) in &book.silent_since_ms {
        let late = |key: &str, after: u64| {
            first
                .get(&(agent.as_str(), key))
                .map(|&d| d as f64 - (since + after) as f64)
        };
        match (late("degraded", stale_ms), late("stuck", stuck_ms)) {
            (Some(a), Some(b)) => {
                silent_stale_late_ms.push(a);
                silent_stuck_late_ms.push(b);
            }
            (Some(_), None) | (None, Some(_)) | (None, None) => silent_missed += 1,
        }
    }
    // False positives: healthy and slow agents judged stuck/failing, nudged, escalated or terminated.
    let good: Vec<&String> = book
        .kinds
        .iter()
        .filter(|(_, k)| matches!(k, Kind::Healthy | Kind::Slow))
        .map(|(a, _)| a)
        .collect();
    let mut false_positives: Vec<String> = good
        .iter()
        .filter(|a| flagged.contains_key(a.as_str()))
        .map(|a| format!("{a}: {:?}", flagged[a.as_str()]))
        .collect();
    false_positives.sort();
    let fp_rate = false_positives.len() as f64 / good.len().max(1) as f64;
    // Recovery.
    let needed: u32 = crash.iter().map(|c| c.crashes).sum();
    let resumed: u32 = crash.iter().map(|c| c.resumed.min(c.crashes)).sum();
    let clean = crash.iter().filter(|c| c.exit == Some(0)).count();
    let recovery = if needed == 0 {
        f64::NAN
    } else {
        f64::from(resumed) / f64::from(needed)
    };

    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    detection_s = sorted(detection_s);
    intervention_s = sorted(intervention_s);
    transition_ms = sorted(transition_ms);
    silent_stale_late_ms = sorted(silent_stale_late_ms);
    silent_stuck_late_ms = sorted(silent_stuck_late_ms);
    let silent_n = book.silent_since_ms.len();
    let ms = |v: &[u64]| sorted(v.iter().map(|&n| n as f64 / 1e6).collect());
    let hb_ms = ms(&book.heartbeat_ns);
    let check_ms = ms(&book.check_ns);
    let watched = book.stuck_at_ms.len();

    let detect_target = TARGET_DETECT_S / s;
    let mtti_target = TARGET_MTTI_S / s;
    let mtti = mean(&intervention_s);
    let detect_max = detection_s.last().copied().unwrap_or(f64::NAN);
    let mut rows = vec![
        TableRow {
            metric: format!(
                "Stuck detection latency ({} of {watched} stuck/looping detected)",
                detection_s.len()
            ),
            measured: format!(
                "p50 {:.2} s, p95 {:.2} s, max {:.2} s",
                pct(&detection_s, 50.0),
                pct(&detection_s, 95.0),
                detect_max
            ),
            seed_target: "< 5 min".into(),
            scaled_target: format!("< {detect_target:.1} s (max)"),
            met: undetected == 0 && detect_max < detect_target,
        },
        TableRow {
            metric: format!("False positive rate ({} healthy + slow agents)", good.len()),
            measured: format!(
                "{:.2} % ({} agents)",
                fp_rate * 100.0,
                false_positives.len()
            ),
            seed_target: "< 1 %".into(),
            scaled_target: "< 1 %".into(),
            met: fp_rate < TARGET_FP,
        },
        TableRow {
            metric: format!(
                "Recovery success rate ({} crash-looping agents, {} crashes; {} supervisors exited 0)",
                crash.len(),
                needed,
                clean
            ),
            measured: format!(
                "{:.1} % ({resumed} of {needed} resumed from their checkpoint)",
                recovery * 100.0
            ),
            seed_target: "> 95 %".into(),
            scaled_target: "> 95 %".into(),
            met: recovery > TARGET_RECOVERY,
        },
        TableRow {
            metric: format!(
                "Mean time to intervention ({} of {watched} acted on)",
                intervention_s.len()
            ),
            measured: format!(
                "mean {mtti:.2} s, max {:.2} s",
                intervention_s.last().copied().unwrap_or(f64::NAN)
            ),
            seed_target: "< 10 min".into(),
            scaled_target: format!("< {mtti_target:.1} s"),
            met: intervention_s.len() == watched && mtti < mtti_target,
        },
        TableRow {
            metric: format!(
                "Health-check latency (GET /agents/{{id}}, {} checks, {} errors)",
                check_ms.len(),
                book.check_errors
            ),
            measured: format!(
                "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                pct(&check_ms, 50.0),
                pct(&check_ms, 99.0),
                check_ms.last().copied().unwrap_or(f64::NAN)
            ),
            seed_target: "< 100 ms".into(),
            scaled_target: "< 100 ms (p99; not scaled)".into(),
            met: pct(&check_ms, 99.0) < TARGET_CHECK_MS,
        },
        TableRow {
            metric: format!(
                "Heartbeat processing (POST /agents/{{id}}/heartbeat round trip, {} heartbeats, {} errors)",
                hb_ms.len(),
                book.heartbeat_errors
            ),
            measured: format!(
                "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                pct(&hb_ms, 50.0),
                pct(&hb_ms, 99.0),
                hb_ms.last().copied().unwrap_or(f64::NAN)
            ),
            seed_target: "< 50 ms".into(),
            scaled_target: "< 50 ms (p99; not scaled)".into(),
            met: pct(&hb_ms, 99.0) < TARGET_HEARTBEAT_MS,
        },
        TableRow {
            metric: format!("Concurrent agents monitored (fleet of {total})"),
            measured: format!("{concurrent}"),
            seed_target: "100+".into(),
            scaled_target: "100+".into(),
            met: concurrent >= TARGET_CONCURRENT,
        },
        TableRow {
            metric: format!(
                "State transition (3rd identical call sent → health.state_changed stuck, {} looping agents)",
                transition_ms.len()
            ),
            measured: format!(
                "p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
                pct(&transition_ms, 50.0),
                pct(&transition_ms, 99.0),
                transition_ms.last().copied().unwrap_or(f64::NAN)
            ),
            seed_target: "< 1 s".into(),
            scaled_target: "< 1 s (max; not scaled)".into(),
            met: !transition_ms.is_empty()
                && transition_ms.last().copied().unwrap_or(f64::MAX) < TARGET_TRANSITION_MS,
        },
    ];
    for (what, late) in [
        (
            "last heartbeat + stale → health.state_changed degraded",
            &silent_stale_late_ms,
        ),
        (
            "last progress + stuck → health.state_changed stuck",
            &silent_stuck_late_ms,
        ),
    ] {
        let max = late.last().copied().unwrap_or(f64::NAN);
        rows.push(TableRow {
            metric: format!(
                "Silent agent judged after its deadline ({what}; {} of {silent_n} silent agents, {silent_missed} missed)",
                late.len()
            ),
            measured: format!(
                "p50 {:.0} ms, p99 {:.0} ms, max {max:.0} ms",
                pct(late, 50.0),
                pct(late, 99.0)
            ),
            seed_target: "< 1 s".into(),
            scaled_target: "< 1 s (max; not scaled)".into(),
            met: silent_missed == 0 && !late.is_empty() && max < TARGET_SILENT_MS,
        });
    }
    // Figures never computed are failures, not passes.
    for r in &mut rows {
        if r.measured.contains("NaN") {
            r.met = false;
        }
    }
    Report {
        args: args.clone(),
        timings: t,
        unix_time: wall_ms() / 1000,
        nproc: std::thread::available_parallelism().map_or(1, usize::from),
        agents: total,
        run_ms,
        rows,
        detection_s,
        silent_stale_late_ms,
        silent_stuck_late_ms,
        intervention_s,
        transition_ms,
        false_positives,
        crash,
        heartbeats: book.heartbeat_ns.len(),
        heartbeat_errors: book.heartbeat_errors,
        checks: book.check_ns.len(),
        check_errors: book.check_errors,
        turn_errors: book.turn_errors,
        stuck_terminated,
        events: events.len(),
    }
}

fn print_table(rows: &[TableRow], args: &HealthArgs) {
    println!();
    println!(
        "| Metric | Measured | Seed target | Target at scale {} | Met |",
        args.scale
    );
    println!("|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} |",
            r.metric,
            r.measured,
            r.seed_target,
            r.scaled_target,
            if r.met { "yes" } else { "**no**" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::path::Path;

    #[test]
    fn timings_divide_the_seed_schedule_by_the_scale() {
        let t = Timings::new(30.0);
        assert_eq!(t.heartbeat, Duration::from_secs(10));
        assert_eq!(t.stuck, Duration::from_secs(60));
        assert_eq!(t.nudge, Duration::from_secs(20));
        assert_eq!(t.escalation, Duration::from_secs(30));
        assert_eq!(t.backoff_ms, [2000, 4000, 8000]);
    }

    #[test]
    fn the_generated_config_validates_with_the_scaled_health_keys() {
        let t = Timings::new(60.0);
        let yaml = procs::hale_config(
            "127.0.0.1:3999".parse::<SocketAddr>().expect("addr"),
            "http://127.0.0.1:4001/v1",
            "ok",
            Path::new("/tmp/x"),
        ) + &t.yaml(Duration::from_secs(18));
        let cfg = hale_config::load(&yaml, &|_| None).expect("validates");
        assert_eq!(cfg.health.stuck_after, Duration::from_secs(30));
        assert_eq!(cfg.health.nudge_interval, Duration::from_secs(10));
        assert_eq!(cfg.health.escalation_timeout, Duration::from_secs(15));
        assert_eq!(cfg.providers[0].timeout, Duration::from_secs(60));
    }
}
