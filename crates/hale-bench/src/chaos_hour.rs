//! `hale-bench chaos-hour`: agents finish real multi-step tool tasks while a
//! seeded schedule of faults rotates over every provider kind (issue 41,
//! BENCHMARKS.md "The chaos hour").
//!
//! One `hale chaos` process per provider kind — OpenAI chat, the Responses
//! API, Anthropic, Gemini, Azure, Bedrock (Converse, API key) — each
//! serving the task model (`task`: the task the prompt names, see
//! hale-chaos's README), and one `hale serve` (embedded: SQLite) with two
//! routes that fail over across kinds. A fleet of agent loops (the `openai`
//! SDK's Chat Completions loop of `crates/hale/tests/sdk/task_loop.py`, its
//! own retries off: the healing measured is hale's) runs task after task,
//! each a `task-<seed>-<steps>` of shell and echo calls, and each final
//! answer is checked with `hale_chaos::task::check` and the files of its
//! shell steps: finished means finished correctly.
//!
//! The faults come from [`schedule`], a pure function of the seed: a new
//! fault every `--fault-every` (30 s) on a drawn deployment, lasting
//! `--fault-lasts` (60 s), so they overlap; it is printed before the run
//! and `--print-schedule` prints it alone. A fault is a `POST
//! /chaos/override` on its deployment's chaos, cleared when it ends, or —
//! for "refusing connections" — the chaos process stopped and started again
//! on its port.
//!
//! Before the faults, `--baseline-tasks` tasks per client run fault-free,
//! the whole fleet at once:
//! their provider tokens (counted by chaos) and wall times are the
//! reference of the table's "extra tokens" and "wall time" rows. After the
//! run every answered turn's id is looked up in hale's journal (`GET
//! /turns/{id}`): missing or repeated ids are counted, and each failed
//! attempt's class is tallied with how its turn ended.
//!
//! Not built yet: the scale-out mode (two hale
//! instances on PostgreSQL and NATS behind a load balancer), the agent CLIs
//! and the other SDK loops as clients, Vertex providers, tool nodes, NATS
//! and webhook event counts, the peer column.

use crate::procs::{self, Proc};
use anyhow::{Context, bail};
use clap::Parser;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser, Debug, Clone, Serialize)]
#[command(
    name = "hale-bench chaos-hour",
    about = "agents finish multi-step tool tasks through rotating faults on every provider kind"
)]
pub struct HourArgs {
    /// Length of the faulted run, in minutes.
    #[arg(long, default_value_t = 60.0)]
    minutes: f64,
    /// The seed of the fault schedule and of the tasks.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Agent loops running at once (client `c` calls route `c % 6`).
    #[arg(long, default_value_t = 6)]
    clients: usize,
    /// Steps (tool calls) of each task.
    #[arg(long, default_value_t = 8)]
    steps: u32,
    /// A new fault starts this often, e.g. `30s`.
    #[arg(long, default_value = "30s", value_parser = crate::duration::parse_duration)]
    #[serde(serialize_with = "crate::ser_duration")]
    fault_every: Duration,
    /// How long each fault lasts (a refused connection: at least 60 s).
    #[arg(long, default_value = "60s", value_parser = crate::duration::parse_duration)]
    #[serde(serialize_with = "crate::ser_duration")]
    fault_lasts: Duration,
    /// Fault-free tasks per client before the faults, the whole fleet at
    /// once (the reference of the extra tokens and the wall times).
    #[arg(long, default_value_t = 2)]
    baseline_tasks: usize,
    /// No faults at all: the fault-free run of the same seed.
    #[arg(long)]
    no_faults: bool,
    /// Print the fault schedule and exit.
    #[arg(long)]
    print_schedule: bool,
    /// The Python with the `openai` SDK; default: `HALE_PYTHON`, else `.venv/bin/python`.
    #[arg(long)]
    python: Option<PathBuf>,
    /// The agent loop.
    #[arg(long, default_value = "crates/hale/tests/sdk/task_loop.py")]
    agent_loop: PathBuf,
    /// The hale binary; default: `hale` next to this binary, or target/release/hale.
    #[arg(long)]
    hale_bin: Option<PathBuf>,
    /// Where to write the results as JSON.
    #[arg(long, default_value = "target/chaos-hour.json")]
    out: PathBuf,
}

/// The provider deployments: (name, kind), one chaos process each.
pub const DEPLOYMENTS: [(&str, &str); 6] = [
    ("oa", "openai"),
    ("rs", "responses"),
    ("an", "anthropic"),
    ("ge", "gemini"),
    ("az", "azure"),
    ("br", "bedrock"),
];

/// The routes the clients call, each across kinds (deployment indexes):
/// every deployment is the first choice of one, so a fault anywhere meets
/// traffic; client `c` calls route `c % 6`.
pub const ROUTES: [(&str, [usize; 3]); 6] = [
    ("via-oa", [0, 2, 3]),
    ("via-rs", [1, 5, 4]),
    ("via-an", [2, 3, 0]),
    ("via-ge", [3, 0, 1]),
    ("via-az", [4, 1, 2]),
    ("via-br", [5, 4, 0]),
];

/// The model every deployment serves: chaos's task model, the task named
/// in the prompt.
const MODEL: &str = "task";

/// A fault the schedule draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultClass {
    RateLimitRetryAfter,
    RateLimit,
    Burst503,
    Overloaded529,
    RefuseConnections,
    ResetBeforeFirstByte,
    ResetAfterFirstByte,
    CutInToolArguments,
    SilenceThenHangUp,
    SlowFirstToken,
    Malformed,
    CredentialRefused,
    SlowForMinutes,
}

impl FaultClass {
    /// Every class, in the order the schedule draws from.
    pub const ALL: [FaultClass; 13] = [
        FaultClass::RateLimitRetryAfter,
        FaultClass::RateLimit,
        FaultClass::Burst503,
        FaultClass::Overloaded529,
        FaultClass::RefuseConnections,
        FaultClass::ResetBeforeFirstByte,
        FaultClass::ResetAfterFirstByte,
        FaultClass::CutInToolArguments,
        FaultClass::SilenceThenHangUp,
        FaultClass::SlowFirstToken,
        FaultClass::Malformed,
        FaultClass::CredentialRefused,
        FaultClass::SlowForMinutes,
    ];

    /// The class's name in the table.
    pub fn name(self) -> &'static str {
        match self {
            FaultClass::RateLimitRetryAfter => "429 with Retry-After",
            FaultClass::RateLimit => "429 without Retry-After",
            FaultClass::Burst503 => "503 burst",
            FaultClass::Overloaded529 => "529 burst",
            FaultClass::RefuseConnections => "refusing connections",
            FaultClass::ResetBeforeFirstByte => "reset before the first byte",
            FaultClass::ResetAfterFirstByte => "reset after the first byte",
            FaultClass::CutInToolArguments => "cut inside a tool call's arguments",
            FaultClass::SilenceThenHangUp => "silence then hang-up",
            FaultClass::SlowFirstToken => "slow first token",
            FaultClass::Malformed => "malformed JSON",
            FaultClass::CredentialRefused => "credential refused",
            FaultClass::SlowForMinutes => "slow for minutes",
        }
    }

    /// The chaos override that plays it (`None`: the chaos process is
    /// stopped instead, so the provider refuses connections).
    pub fn spec(self) -> Option<&'static str> {
        Some(match self {
            FaultClass::RateLimitRetryAfter => "rate-limit:retry_after=2",
            FaultClass::RateLimit => "rate-limit",
            FaultClass::Burst503 => "error-503:times=6",
            FaultClass::Overloaded529 => "error-529:times=6",
            FaultClass::RefuseConnections => return None,
            FaultClass::ResetBeforeFirstByte => "reset:times=4",
            FaultClass::ResetAfterFirstByte => "cut:after=0:times=4",
            FaultClass::CutInToolArguments => "cut:after=2:times=4",
            FaultClass::SilenceThenHangUp => "hang:times=2",
            FaultClass::SlowFirstToken => "slow-first-token:ms=3000",
            FaultClass::Malformed => "malformed:at=1:times=4",
            FaultClass::CredentialRefused => "auth",
            FaultClass::SlowForMinutes => "stall:after=1:ms=1500:times=1000000",
        })
    }

    /// The shortest it lasts.
    fn min_lasts(self) -> Duration {
        match self {
            FaultClass::RefuseConnections => Duration::from_secs(60),
            _ => Duration::ZERO,
        }
    }
}

/// One fault of the schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Planned {
    /// From the start of the faulted run.
    #[serde(serialize_with = "crate::ser_duration")]
    pub at: Duration,
    #[serde(serialize_with = "crate::ser_duration")]
    pub lasts: Duration,
    /// Index into [`DEPLOYMENTS`].
    pub deployment: usize,
    pub class: FaultClass,
}

/// SplitMix64: a small, fixed generator, so a seed means one schedule on
/// every machine and version.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The faults of a run of length `total`: one every `every` from `every`
/// on, each lasting `lasts` (at least its class's minimum), on a deployment
/// and of a class drawn from `seed`. Pure: the same arguments give the same
/// schedule.
pub fn schedule(seed: u64, total: Duration, every: Duration, lasts: Duration) -> Vec<Planned> {
    let mut rng = SplitMix(seed);
    let mut out = Vec::new();
    if every.is_zero() {
        return out;
    }
    let mut at = every;
    while at < total {
        let class = FaultClass::ALL[rng.below(FaultClass::ALL.len())];
        let deployment = rng.below(DEPLOYMENTS.len());
        out.push(Planned {
            at,
            lasts: lasts.max(class.min_lasts()),
            deployment,
            class,
        });
        at += every;
    }
    out
}

/// The task of a client's `n`-th task: its seed from the run's.
pub fn task_of(seed: u64, client: usize, n: u64, steps: u32) -> hale_chaos::task::Task {
    let mut rng = SplitMix(seed ^ ((client as u64) << 32) ^ n.wrapping_mul(0x1000_0001));
    hale_chaos::task::Task {
        seed: rng.next() % 1_000_000,
        steps,
    }
}

/// One task's end.
#[derive(Debug, Clone, Serialize)]
struct TaskEnd {
    client: usize,
    route: &'static str,
    task: String,
    /// `None`: finished correctly; else why not.
    failure: Option<String>,
    wall_s: f64,
    turn_ids: Vec<String>,
}

/// The chaos processes, by deployment; a stopped one is `None` with its address kept.
struct Providers {
    procs: Vec<Option<Proc>>,
    addrs: Vec<SocketAddr>,
    /// Statistics of processes stopped (their counters die with them).
    gone: Vec<hale_chaos::Stats>,
}

impl Providers {
    async fn stats(&self, http: &reqwest::Client) -> Vec<hale_chaos::Stats> {
        let mut out = self.gone.clone();
        for (i, p) in self.procs.iter().enumerate() {
            if p.is_some()
                && let Ok(s) = chaos_stats(http, self.addrs[i]).await
            {
                out.push(s);
            }
        }
        out
    }
}

async fn chaos_stats(
    http: &reqwest::Client,
    addr: SocketAddr,
) -> anyhow::Result<hale_chaos::Stats> {
    Ok(http
        .get(format!("http://{addr}/chaos/stats"))
        .send()
        .await?
        .json()
        .await?)
}

fn tokens(stats: &[hale_chaos::Stats]) -> (u64, u64) {
    stats.iter().fold((0, 0), |(i, o), s| {
        (i + s.input_tokens, o + s.output_tokens)
    })
}

/// hale's config: the six providers at their chaos, the two routes, the
/// timeouts an operator with a few-second objective would set.
fn hale_yaml(listen: SocketAddr, data: &Path, addrs: &[SocketAddr]) -> String {
    let mut y = format!(
        "listen: {listen}\ndata_dir: {data:?}\nretry:\n  server_error: {{max_attempts: 2, initial_ms: 50, max_ms: 500}}\nroutes:\n",
        data = data.display().to_string()
    );
    for (name, targets) in ROUTES {
        let t: Vec<String> = targets
            .iter()
            .map(|&i| format!("{}/{MODEL}", DEPLOYMENTS[i].0))
            .collect();
        y.push_str(&format!("  {name}: [{}]\n", t.join(", ")));
    }
    y.push_str("providers:\n");
    for (i, (name, kind)) in DEPLOYMENTS.iter().enumerate() {
        let a = addrs[i];
        let timeouts =
            "timeout_ms: 10000, first_token_timeout_ms: 10000, stream_idle_timeout_ms: 10000";
        let p = match *kind {
            "openai" => format!("kind: openai, base_url: 'http://{a}/v1'"),
            "responses" => format!("kind: openai, api: responses, base_url: 'http://{a}/v1'"),
            "anthropic" => format!("kind: anthropic, base_url: 'http://{a}'"),
            "gemini" => {
                format!("kind: gemini, base_url: 'http://{a}/v1beta', api_key_env: HOUR_GEMINI_KEY")
            }
            "azure" => format!(
                "kind: azure, base_url: 'http://{a}', api_version: '2024-10-21', api_key_env: HOUR_AZURE_KEY"
            ),
            "bedrock" => format!(
                "kind: bedrock, region: us-east-1, base_url: 'http://{a}', auth: api_key, api_key_env: HOUR_BEDROCK_KEY"
            ),
            other => unreachable!("no provider kind {other}"),
        };
        y.push_str(&format!(
            "  - {{name: {name}, {p}, default_model: {MODEL}, {timeouts}}}\n"
        ));
    }
    y
}

const KEYS: [(&str, &str); 3] = [
    ("HOUR_GEMINI_KEY", "k-hour"),
    ("HOUR_AZURE_KEY", "k-hour"),
    ("HOUR_BEDROCK_KEY", "k-hour"),
];

/// Runs one task through `route` with the agent loop; its end.
async fn run_task(
    ctx: &Ctx,
    client: usize,
    route: &'static str,
    task: hale_chaos::task::Task,
) -> TaskEnd {
    let t0 = Instant::now();
    let dir = ctx.work.join(format!("c{client}-{}", task.name()));
    let end = |failure: Option<String>, turn_ids: Vec<String>| TaskEnd {
        client,
        route,
        task: task.name(),
        failure,
        wall_s: t0.elapsed().as_secs_f64(),
        turn_ids,
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return end(Some(format!("no work dir: {e}")), Vec::new());
    }
    let prompt = format!("Run {}, then report.", task.name());
    let out = tokio::process::Command::new(&ctx.python)
        .arg(&ctx.agent_loop)
        .args([route, &ctx.base_v1, &dir.display().to_string(), &prompt])
        .kill_on_drop(true)
        .output()
        .await;
    let out = match out {
        Ok(o) => o,
        Err(e) => return end(Some(format!("the agent loop did not run: {e}")), Vec::new()),
    };
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let ids: Vec<String> = v["turn_ids"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let failure = if let Some(e) = v["error"].as_str() {
        Some(format!("client error: {e}"))
    } else if let Some(text) = v["final"].as_str() {
        match hale_chaos::task::check(&task, text) {
            Err(why) => Some(format!("wrong answer: {why}")),
            Ok(()) => (1..=task.steps)
                .filter(|k| k % hale_chaos::task::ECHO_EVERY != 0)
                .find_map(|k| {
                    let got = std::fs::read_to_string(dir.join(task.file(k))).ok();
                    (got.as_deref() != Some(&format!("{}\n", task.token(k))))
                        .then(|| format!("step {k}'s file is missing or wrong"))
                }),
        }
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("").to_owned();
        Some(format!("the agent loop failed ({}): {last}", out.status))
    };
    let _ = std::fs::remove_dir_all(&dir);
    end(failure, ids)
}

/// What every task needs.
struct Ctx {
    python: PathBuf,
    agent_loop: PathBuf,
    base_v1: String,
    work: PathBuf,
}

/// A memory and descriptor sample of hale.
#[derive(Debug, Clone, Serialize)]
struct Sample {
    at: &'static str,
    rss_kib: Option<u64>,
    fds: Option<usize>,
}

fn sample(pid: u32, at: &'static str) -> Sample {
    Sample {
        at,
        rss_kib: procs::rss_kib(pid).map(|(r, _)| r),
        fds: procs::open_fds(pid),
    }
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied()
}

fn walls(ends: &[TaskEnd]) -> Vec<f64> {
    let mut w: Vec<f64> = ends
        .iter()
        .filter(|e| e.failure.is_none())
        .map(|e| e.wall_s)
        .collect();
    w.sort_by(f64::total_cmp);
    w
}

pub async fn run(args: HourArgs) -> anyhow::Result<()> {
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let plan = if args.no_faults {
        Vec::new()
    } else {
        schedule(args.seed, total, args.fault_every, args.fault_lasts)
    };
    println!(
        "chaos hour: seed {}, {} min, embedded (one hale, SQLite), {} clients, {}-step tasks, {} faults",
        args.seed,
        args.minutes,
        args.clients,
        args.steps,
        plan.len()
    );
    for f in &plan {
        println!(
            "  +{:>5.0}s  {:<3} {:<34} for {:.0}s  ({})",
            f.at.as_secs_f64(),
            DEPLOYMENTS[f.deployment].0,
            f.class.name(),
            f.lasts.as_secs_f64(),
            f.class.spec().unwrap_or("chaos stopped")
        );
    }
    if args.print_schedule {
        return Ok(());
    }
    let bin = procs::find_hale(args.hale_bin.as_deref())?;
    let python = match &args.python {
        Some(p) => p.clone(),
        None => std::env::var_os("HALE_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(".venv/bin/python")),
    };
    if !args.agent_loop.is_file() {
        bail!(
            "no agent loop at {} (run from the workspace root or pass --agent-loop)",
            args.agent_loop.display()
        );
    }
    let tmp = tempfile::tempdir()?;
    let work = tmp.path().to_path_buf();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;

    let mut providers = Providers {
        procs: Vec::new(),
        addrs: Vec::new(),
        gone: Vec::new(),
    };
    for _ in DEPLOYMENTS {
        let p = procs::start_chaos(&bin, &work).await?;
        providers.addrs.push(p.addr);
        providers.procs.push(Some(p));
    }
    let listen = procs::free_port()?;
    let yaml = hale_yaml(listen, &work.join("data"), &providers.addrs);
    let hale = procs::start_hale_env(&bin, &work, listen, &yaml, &KEYS).await?;
    let pid = hale.child.id();
    let ctx = Arc::new(Ctx {
        python,
        agent_loop: std::fs::canonicalize(&args.agent_loop)?,
        base_v1: format!("http://{listen}/v1"),
        work: work.clone(),
    });

    // The fault-free reference.
    // The fault-free reference, as the run's fleet: every client at once,
    // `baseline_tasks` each (their tasks are the run's next ones of another
    // seed, so none repeats a task of the run).
    let before = tokens(&providers.stats(&http).await);
    let mut fleet = Vec::new();
    for c in 0..args.clients {
        let ctx = ctx.clone();
        let (seed, steps, n) = (!args.seed, args.steps, args.baseline_tasks);
        fleet.push(tokio::spawn(async move {
            let route = ROUTES[c % ROUTES.len()].0;
            let mut out = Vec::new();
            for k in 0..n as u64 {
                out.push(run_task(&ctx, c, route, task_of(seed, c, k, steps)).await);
            }
            out
        }));
    }
    let mut baseline = Vec::new();
    for f in fleet {
        baseline.extend(f.await.unwrap_or_default());
    }
    let after = tokens(&providers.stats(&http).await);
    let base_ok = baseline.iter().filter(|e| e.failure.is_none()).count();
    if base_ok == 0 && args.baseline_tasks > 0 {
        bail!(
            "no fault-free task finished: {:?}\nhale log: {}",
            baseline.first().and_then(|e| e.failure.clone()),
            hale.log.display()
        );
    }
    let per_task = |t: u64| t as f64 / base_ok.max(1) as f64;
    let base_in = per_task(after.0 - before.0);
    let base_out = per_task(after.1 - before.1);

    // The faulted run.
    let start_tokens = tokens(&providers.stats(&http).await);
    let mut samples = vec![sample(pid, "start")];
    let t0 = Instant::now();
    let deadline = t0 + total;
    let ends: Arc<Mutex<Vec<TaskEnd>>> = Arc::default();
    let mut workers = Vec::new();
    for c in 0..args.clients {
        let (ctx, ends) = (ctx.clone(), ends.clone());
        let (seed, steps) = (args.seed, args.steps);
        workers.push(tokio::spawn(async move {
            let route = ROUTES[c % ROUTES.len()].0;
            let mut n = 0u64;
            while Instant::now() < deadline {
                let end = run_task(&ctx, c, route, task_of(seed, c, n, steps)).await;
                ends.lock().unwrap_or_else(|p| p.into_inner()).push(end);
                n += 1;
            }
        }));
    }
    // The schedule, played: starts and ends in time order.
    let mut events: Vec<(Duration, bool, usize)> = Vec::new();
    for (i, f) in plan.iter().enumerate() {
        events.push((f.at, true, i));
        events.push((f.at + f.lasts, false, i));
    }
    events.sort();
    let mut active: BTreeMap<usize, usize> = BTreeMap::new();
    let mut applied: BTreeMap<FaultClass, u64> = BTreeMap::new();
    // Requests each fault class was applied to (chaos's count of the
    // fault's name, from its start to its end), and the counts at the start.
    let mut touched: BTreeMap<FaultClass, u64> = BTreeMap::new();
    let mut counts: BTreeMap<usize, u64> = BTreeMap::new();
    let mut middle_taken = false;
    for (when, starts, i) in events {
        let at = t0 + when;
        if !middle_taken && when >= total / 2 {
            tokio::time::sleep_until((t0 + total / 2).into()).await;
            samples.push(sample(pid, "middle"));
            middle_taken = true;
        }
        if at > deadline {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        let f = &plan[i];
        let d = f.deployment;
        let addr = providers.addrs[d];
        if starts {
            // A fault still on this deployment ends first.
            if let Some(prev) = active.insert(d, i) {
                let since = counts.remove(&prev).unwrap_or(0);
                end_fault(
                    &mut providers,
                    &http,
                    &bin,
                    &work,
                    &plan[prev],
                    since,
                    &mut touched,
                )
                .await?;
            }
            *applied.entry(f.class).or_default() += 1;
            match f.class.spec() {
                Some(spec) => {
                    counts.insert(i, applied_count(&http, addr, spec).await);
                    override_fault(&http, addr, Some(spec)).await;
                }
                None => {
                    if let Ok(s) = chaos_stats(&http, addr).await {
                        providers.gone.push(s);
                    }
                    providers.procs[d] = None;
                }
            }
        } else if active.get(&d) == Some(&i) {
            active.remove(&d);
            let since = counts.remove(&i).unwrap_or(0);
            end_fault(&mut providers, &http, &bin, &work, f, since, &mut touched).await?;
        }
    }
    if !middle_taken {
        tokio::time::sleep_until((t0 + total / 2).into()).await;
        samples.push(sample(pid, "middle"));
    }
    for w in workers {
        let _ = w.await;
    }
    for (_, i) in std::mem::take(&mut active) {
        let since = counts.remove(&i).unwrap_or(0);
        end_fault(
            &mut providers,
            &http,
            &bin,
            &work,
            &plan[i],
            since,
            &mut touched,
        )
        .await?;
    }
    samples.push(sample(pid, "end"));
    let wall = t0.elapsed();
    let end_stats = providers.stats(&http).await;
    let end_tokens = tokens(&end_stats);
    let ends = std::mem::take(&mut *ends.lock().unwrap_or_else(|p| p.into_inner()));

    // The journal: every answered turn once, each failed attempt's class
    // with how its turn ended.
    let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
    for id in ends.iter().flat_map(|e| e.turn_ids.iter()) {
        *seen.entry(id.as_str()).or_default() += 1;
    }
    let repeated = seen.values().filter(|&&n| n > 1).count();
    let mut missing = 0usize;
    let mut outcomes: BTreeMap<String, BTreeMap<&'static str, u64>> = BTreeMap::new();
    for id in seen.keys() {
        let r = http.get(format!("http://{listen}/turns/{id}")).send().await;
        let turn: Value = match r {
            Ok(r) if r.status().is_success() => r.json().await.unwrap_or(Value::Null),
            Ok(_) | Err(_) => {
                missing += 1;
                continue;
            }
        };
        if turn["status"] != "succeeded" {
            missing += 1;
        }
        let rows = turn["timeline"].as_array().cloned().unwrap_or_default();
        let how = if turn["status"] == "failed" {
            "failed to the client"
        } else if rows.iter().any(|r| !r["resume"].is_null()) {
            "resumed mid-stream"
        } else if rows.first().map(|r| &r["target"]) == rows.last().map(|r| &r["target"]) {
            "healed on the same deployment"
        } else {
            "failed over"
        };
        let mut classes: Vec<String> = rows
            .iter()
            .filter_map(|r| r["class"].as_str().map(str::to_owned))
            .collect();
        classes.sort();
        classes.dedup();
        for c in classes {
            *outcomes.entry(c).or_default().entry(how).or_default() += 1;
        }
    }
    let paused = http
        .get(format!("http://{listen}/agents?state=paused"))
        .send()
        .await
        .ok();
    let paused = match paused {
        Some(r) => r
            .json::<Value>()
            .await
            .ok()
            .and_then(|v| v["agents"].as_array().map(Vec::len))
            .unwrap_or(0),
        None => 0,
    };

    // The table.
    let finished: Vec<&TaskEnd> = ends.iter().filter(|e| e.failure.is_none()).collect();
    let fin = finished.len().max(1) as f64;
    let extra = |got: u64, base: f64| {
        (base > 0.0 && !finished.is_empty()).then(|| (got as f64 / fin / base - 1.0) * 100.0)
    };
    let extra_in = extra(end_tokens.0 - start_tokens.0, base_in);
    let extra_out = extra(end_tokens.1 - start_tokens.1, base_out);
    let (w, bw) = (walls(&ends), walls(&baseline));
    let mut by_why: BTreeMap<String, u64> = BTreeMap::new();
    for e in ends.iter().filter_map(|e| e.failure.as_ref()) {
        *by_why.entry(e.clone()).or_default() += 1;
    }
    let fmt = |x: Option<f64>, unit: &str| x.map_or("n/a".to_owned(), |v| format!("{v:.1}{unit}"));
    println!();
    println!(
        "## The chaos hour: seed {}, {:.1} min, embedded, {} clients ({} faults played)",
        args.seed,
        wall.as_secs_f64() / 60.0,
        args.clients,
        applied.values().sum::<u64>()
    );
    println!();
    println!("| client kind | tasks started | finished correctly | failed |");
    println!("|---|---|---|---|");
    for (route, _) in ROUTES {
        let of: Vec<&TaskEnd> = ends.iter().filter(|e| e.route == route).collect();
        let ok = of.iter().filter(|e| e.failure.is_none()).count();
        println!(
            "| openai SDK chat loop via `{route}` | {} | {ok} | {} |",
            of.len(),
            of.len() - ok
        );
    }
    for (why, n) in &by_why {
        println!("|   failed: {why} | | | {n} |");
    }
    println!();
    println!("| measure | value |");
    println!("|---|---|");
    println!("| operator actions needed (agents left paused) | {paused} |");
    println!(
        "| extra provider tokens per finished task, input / output | {} / {} (fault-free: {base_in:.0} / {base_out:.0} per task) |",
        fmt(extra_in, " %"),
        fmt(extra_out, " %")
    );
    println!(
        "| task wall time p50 / p99 | {} / {} (fault-free {} / {}) |",
        fmt(percentile(&w, 0.5), " s"),
        fmt(percentile(&w, 0.99), " s"),
        fmt(percentile(&bw, 0.5), " s"),
        fmt(percentile(&bw, 0.99), " s")
    );
    println!(
        "| answered turns missing from the journal / counted twice | {missing} / {repeated} |"
    );
    for s in &samples {
        println!(
            "| hale RSS / open fds at the {} | {} KiB / {} |",
            s.at,
            s.rss_kib.map_or("n/a".into(), |v| v.to_string()),
            s.fds.map_or("n/a".into(), |v| v.to_string())
        );
    }
    println!();
    println!("| fault class | times started | requests it touched |");
    println!("|---|---|---|");
    for (c, n) in &applied {
        let t = match c.spec() {
            Some(_) => touched.get(c).copied().unwrap_or(0).to_string(),
            None => "(connections refused: not counted)".to_owned(),
        };
        println!("| {} | {n} | {t} |", c.name());
    }
    println!();
    println!("| failed attempts' class | turns | how each ended |");
    println!("|---|---|---|");
    for (class, hows) in &outcomes {
        let n: u64 = hows.values().sum();
        let detail: Vec<String> = hows.iter().map(|(h, k)| format!("{h}: {k}")).collect();
        println!("| {class} | {n} | {} |", detail.join(", "));
    }
    println!();
    println!(
        "Not measured yet: events at NATS and the webhook sink, dead letters, the agent CLIs, Vertex, tool nodes (see chaos_hour.rs)."
    );
    let report = json!({
        "args": args,
        "schedule": plan,
        "baseline": baseline,
        "tasks": ends,
        "tokens": {"baseline_per_task": [base_in, base_out],
                   "run": [end_tokens.0 - start_tokens.0, end_tokens.1 - start_tokens.1],
                   "extra_percent": [extra_in, extra_out]},
        "journal": {"missing": missing, "repeated": repeated},
        "outcomes": outcomes,
        "faults_started": applied.iter().map(|(c, n)| (c.name(), n)).collect::<BTreeMap<_, _>>(),
        "faults_touched": touched.iter().map(|(c, n)| (c.name(), n)).collect::<BTreeMap<_, _>>(),
        "chaos": end_stats,
        "samples": samples,
        "paused_agents": paused,
    });
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir).ok();
    }
    std::fs::write(&args.out, serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    println!("results: {}", args.out.display());
    drop(hale);
    Ok(())
}

/// Sets (or clears) the task model's fault on one chaos.
async fn override_fault(http: &reqwest::Client, addr: SocketAddr, spec: Option<&str>) {
    let _ = http
        .post(format!("http://{addr}/chaos/override"))
        .json(&json!({"model": MODEL, "fault": spec}))
        .send()
        .await;
}

/// How often the chaos at `addr` applied the fault of `spec` so far.
async fn applied_count(http: &reqwest::Client, addr: SocketAddr, spec: &str) -> u64 {
    let name = spec.split(':').next().unwrap_or(spec);
    chaos_stats(http, addr)
        .await
        .ok()
        .and_then(|s| s.requests_per_fault.get(name).copied())
        .unwrap_or(0)
}

/// Ends a fault: the requests it touched counted (`since`: chaos's count
/// at its start), the override cleared; or the stopped chaos started again
/// on its port.
async fn end_fault(
    providers: &mut Providers,
    http: &reqwest::Client,
    bin: &Path,
    work: &Path,
    f: &Planned,
    since: u64,
    touched: &mut BTreeMap<FaultClass, u64>,
) -> anyhow::Result<()> {
    let d = f.deployment;
    let addr = providers.addrs[d];
    match f.class.spec() {
        Some(spec) => {
            let n = applied_count(http, addr, spec).await.saturating_sub(since);
            *touched.entry(f.class).or_default() += n;
            override_fault(http, addr, None).await;
        }
        None if providers.procs[d].is_none() => {
            providers.procs[d] = Some(procs::start_chaos_at(bin, work, addr).await?);
        }
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_is_one_schedule_of_overlapping_faults() {
        let s = |seed| {
            schedule(
                seed,
                Duration::from_secs(3600),
                Duration::from_secs(30),
                Duration::from_secs(45),
            )
        };
        assert_eq!(s(7), s(7), "reproducible by its seed");
        assert_ne!(s(7), s(8));
        let plan = s(7);
        assert_eq!(plan.len(), 119, "one every 30 s after the first 30 s");
        // Each lasts longer than the gap: the next starts while it runs.
        assert!(plan.iter().all(|f| f.lasts > Duration::from_secs(30)));
        assert!(
            plan.iter()
                .filter(|f| f.class == FaultClass::RefuseConnections)
                .all(|f| f.lasts >= Duration::from_secs(60))
        );
        // Over an hour every class and every deployment comes up.
        for c in FaultClass::ALL {
            assert!(plan.iter().any(|f| f.class == c), "{c:?}");
        }
        for d in 0..DEPLOYMENTS.len() {
            assert!(plan.iter().any(|f| f.deployment == d), "{d}");
        }
        assert!(schedule(1, Duration::from_secs(10), Duration::ZERO, Duration::ZERO).is_empty());
    }

    #[test]
    fn every_override_parses_as_a_chaos_fault() {
        for c in FaultClass::ALL {
            if let Some(spec) = c.spec() {
                let s =
                    hale_chaos::fault::parse_strict(spec).unwrap_or_else(|e| panic!("{c:?}: {e}"));
                assert!(s.task.is_none(), "the task comes from the model");
            }
        }
    }

    #[test]
    fn tasks_differ_by_client_and_turn_and_repeat_by_seed() {
        let a = task_of(1, 0, 0, 8);
        assert_eq!(a, task_of(1, 0, 0, 8));
        assert_ne!(a, task_of(1, 1, 0, 8));
        assert_ne!(a, task_of(1, 0, 1, 8));
        assert_ne!(a, task_of(2, 0, 0, 8));
    }
}
