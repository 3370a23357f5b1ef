//! `hale-bench chaos-hour`: agents finish real multi-step tool tasks while a
//! seeded schedule of faults rotates over every provider kind (issue 41,
//! BENCHMARKS.md "The chaos hour").
//!
//! One `hale chaos` process per provider kind — OpenAI chat, the Responses
//! API, Anthropic, Gemini, Azure, Bedrock (Converse, API key), Vertex
//! (Claude, its tokens from a service-account key at chaos's `/token`) — each
//! serving the task model (`task`: the task the prompt names, see
//! hale-chaos's README); three more chaos processes as tool nodes
//! ([`TOOL_NODES`], `echo` among their tools); and hale ([`start_hale`]:
//! the embedded mode's one `hale serve` on SQLite) with seven routes that
//! fail over across kinds. A fleet of agent loops — `--clients` of each
//! [`ClientKind`]: the `openai` SDK's Chat Completions, the `anthropic`
//! SDK's Messages, the `google-genai` SDK, the OpenAI Agents SDK on
//! Responses with `echo` from hale's `/mcp`; scripts in
//! `crates/hale/tests/sdk/`, each SDK's own retries off: the healing
//! measured is hale's — runs task after task, each a
//! `task-<seed>-<steps>` of shell and echo calls, and each final answer is
//! checked with `hale_chaos::task::check` and the files of its shell
//! steps: finished means finished correctly.
//!
//! The faults come from [`schedule`], a pure function of the seed: a new
//! fault every `--fault-every` (30 s) on a drawn deployment, lasting
//! `--fault-lasts` (60 s), so they overlap; it is printed before the run
//! and `--print-schedule` prints it alone. A fault is a `POST
//! /chaos/override` on its deployment's chaos, cleared when it ends, or —
//! for "refusing connections" — the chaos process stopped and started again
//! on its port; a tool node crashes (its chaos stopped and started again)
//! or hangs (`POST /chaos/tools/fault hang`).
//!
//! The reference of the "extra tokens" and "wall time" rows is an earlier
//! `--no-faults` run of the same seed, length and fleet (`--reference
//! <its JSON>`): run once per workload and reused by every faulted run of
//! it (a re-run after a fix compares with the same one, and the hour is
//! not doubled). Without it, `--baseline-tasks` warm-up tasks per loop run
//! fault-free first. After the run every answered turn's id is looked up
//! in hale's journal (`GET /turns/{id}`): missing or repeated ids are
//! counted; each played fault's window (wall clock) is matched with the
//! journalled attempts on its deployment, so the table says per fault
//! class how many turns it touched and how each ended ([`ending`]).
//!
//! The run is its steps: [`start_providers`], [`start_hale`],
//! [`start_fleet`], `Player::play` (the schedule), [`read_journal`],
//! [`print_table`].
//!
//! `--clis` adds the real agent CLIs (Codex, Claude Code, Gemini CLI, at
//! the suite's pinned versions); their answers are checked alike, but a CLI
//! does not report hale's turn ids, so the journal columns count the SDK
//! loops' turns only.
//!
//! `--mode scale-out` ([`crate::scale_out`]) replaces the one hale with two
//! instances on a fresh PostgreSQL database with NATS and a webhook sink,
//! behind HAProxy; the SDK loops keep their default retries
//! (`--client-retries`), the schedule adds an instance SIGKILLed, NATS
//! killed and PostgreSQL restarted, and the table counts the events lost or
//! duplicated at NATS and the webhook and the dead letters.
//!
//! `--peer litellm` runs the same fleet, providers and schedule through the
//! LiteLLM proxy instead of hale (`chaos_peer`): only the client kinds and
//! provider kinds it speaks, the rest printed as left out; the journal and
//! paused-agent columns, hale's own, are `n/a` there.
//!
//! A tool node's fault meets tool jobs, not model turns: the agents'
//! `echo` through hale's `/mcp` runs as a job on the tool nodes, read from
//! `GET /jobs` while the run goes ([`JobReader`]), each attempt on a node a
//! row [`ending`] reads as it reads a turn's ([`job_turn`]).

use crate::chaos_peer::{self, Peer};
use crate::procs::{self, Proc};
use crate::scale_out::{self, ScaleOut};
use anyhow::{Context, bail};
use clap::Parser;
use serde::{Deserialize, Serialize};
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
    /// Agent loops of each kind running at once (the fleet's `i`-th loop
    /// calls route `i % 7`).
    #[arg(long, default_value_t = 6)]
    clients: usize,
    /// The kinds of agent loop in the fleet, `--clients` of each.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "chat,messages,genai,agents"
    )]
    kinds: Vec<ClientKind>,
    /// Add the real agent CLIs to the fleet (codex, claude, gemini-cli), at
    /// the versions the test suite pins (`.clis/`, or `HALE_CODEX`,
    /// `HALE_CLAUDE`, `HALE_GEMINI`).
    #[arg(long)]
    clis: bool,
    /// Steps (tool calls) of each task.
    #[arg(long, default_value_t = 8)]
    steps: u32,
    /// A new fault starts this often, e.g. `30s`.
    #[arg(long, default_value = "30s", value_parser = crate::duration::parse_duration)]
    #[serde(serialize_with = "crate::duration::ser_duration")]
    fault_every: Duration,
    /// How long each fault lasts (a refused connection: at least 60 s).
    #[arg(long, default_value = "60s", value_parser = crate::duration::parse_duration)]
    #[serde(serialize_with = "crate::duration::ser_duration")]
    fault_lasts: Duration,
    /// Fault-free tasks per client before the faults, the whole fleet at
    /// once (the reference of the extra tokens and the wall times).
    #[arg(long, default_value_t = 2)]
    baseline_tasks: usize,
    /// No faults at all: the fault-free run of the same seed and length,
    /// the reference a faulted run is compared with (`--reference`).
    #[arg(long)]
    no_faults: bool,
    /// The results JSON of an earlier `--no-faults` run of the same seed,
    /// length, clients and steps: the table's extra tokens and wall times
    /// are against it (no warm-up tasks are run). Without it they are
    /// against the `--baseline-tasks` warm-up.
    #[arg(long)]
    reference: Option<PathBuf>,
    /// Print the fault schedule and exit.
    #[arg(long)]
    print_schedule: bool,
    /// `embedded`: one hale on SQLite. `scale-out`: two hale instances on
    /// a fresh PostgreSQL database with NATS JetStream and a webhook sink,
    /// behind HAProxy; its faults add an instance SIGKILLed, NATS killed
    /// and PostgreSQL restarted (crate::scale_out).
    #[arg(long, value_enum, default_value = "embedded")]
    mode: Mode,
    /// The SDK loops' own retries (`HALE_CLIENT_RETRIES`); default: 0 in
    /// the embedded mode (the healing measured is hale's), the SDKs'
    /// default 2 in the scale-out mode (a request cut on a killed instance
    /// is the client's to retry, through the load balancer).
    #[arg(long)]
    client_retries: Option<u32>,
    /// The Python with the SDKs (scripts/test.sh's venv); default:
    /// `HALE_PYTHON`, else `.venv/bin/python`.
    #[arg(long)]
    python: Option<PathBuf>,
    /// The directory of the agent loops (`ClientKind::script`).
    #[arg(long, default_value = "crates/hale/tests/sdk")]
    sdk_dir: PathBuf,
    /// The hale binary; default: `hale` next to this binary, or target/release/hale.
    #[arg(long)]
    hale_bin: Option<PathBuf>,
    /// Where to write the results as JSON.
    #[arg(long, default_value = "target/chaos-hour.json")]
    out: PathBuf,
    /// Run the fleet through this peer instead of hale (its venv in
    /// `.peers/`, see scripts/peers.sh): only the client kinds it serves.
    #[arg(long, value_enum)]
    peer: Option<Peer>,
}

/// Where the fleet's hale runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// One `hale serve` on SQLite.
    Embedded,
    /// Two `hale serve` on PostgreSQL with NATS and a webhook sink, behind HAProxy.
    ScaleOut,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Embedded => "embedded (one hale, SQLite)",
            Mode::ScaleOut => "scale-out (two hale on PostgreSQL + NATS + webhook, behind HAProxy)",
        }
    }
}

/// A kind of agent loop in the fleet: an SDK's own loop with function
/// tools, each script in `--sdk-dir` with one contract (`MODEL BASE_URL
/// WORKDIR PROMPT` in, one JSON object out: `final` or `error`,
/// `turn_ids`, `failed_turn_id`), each with its SDK's retries off.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum ClientKind {
    /// The `openai` SDK's Chat Completions.
    Chat,
    /// The `anthropic` SDK's Messages.
    Messages,
    /// The `google-genai` SDK (Gemini's generateContent).
    Genai,
    /// The OpenAI Agents SDK (Responses), `echo` from hale's `/mcp`.
    Agents,
    /// The Codex CLI, `codex exec` (Responses).
    Codex,
    /// Claude Code, `claude -p` (Messages).
    Claude,
    /// Gemini CLI, `gemini -p` (generateContent).
    GeminiCli,
}

impl ClientKind {
    /// The real agent CLIs (`--clis`).
    const CLIS: [ClientKind; 3] = [ClientKind::Codex, ClientKind::Claude, ClientKind::GeminiCli];

    /// Its script in `--sdk-dir`; `None`: a real CLI.
    fn script(self) -> Option<&'static str> {
        Some(match self {
            ClientKind::Chat => "task_loop.py",
            ClientKind::Messages => "messages_loop.py",
            ClientKind::Genai => "genai_loop.py",
            ClientKind::Agents => "agents_loop.py",
            ClientKind::Codex | ClientKind::Claude | ClientKind::GeminiCli => return None,
        })
    }

    /// The CLI at its pinned version (`hale_testkit`'s pins, the test
    /// suite's); `None`: an SDK loop.
    fn cli(self) -> Option<hale_testkit::Cli> {
        match self {
            ClientKind::Codex => Some(hale_testkit::CODEX),
            ClientKind::Claude => Some(hale_testkit::CLAUDE),
            ClientKind::GeminiCli => Some(hale_testkit::GEMINI),
            ClientKind::Chat | ClientKind::Messages | ClientKind::Genai | ClientKind::Agents => {
                None
            }
        }
    }

    /// The base URL its SDK is given, from hale's root.
    fn base(self, root: &str) -> String {
        match self {
            ClientKind::Chat | ClientKind::Codex => format!("{root}/v1"),
            ClientKind::Messages
            | ClientKind::Genai
            | ClientKind::Agents
            | ClientKind::Claude
            | ClientKind::GeminiCli => root.to_owned(),
        }
    }

    /// Whether `peer` serves it for the hour, or why not.
    fn through(self, peer: Peer) -> Result<(), &'static str> {
        match (peer, self) {
            (Peer::Litellm, ClientKind::Chat | ClientKind::Messages | ClientKind::Genai) => Ok(()),
            (Peer::Litellm, ClientKind::Agents) => {
                Err("its `echo` tool comes from hale's /mcp (tool nodes behind tool routing)")
            }
            (Peer::Litellm, ClientKind::Codex | ClientKind::Claude | ClientKind::GeminiCli) => {
                Err("not run through the peer yet (the SDK loops of the same dialects are)")
            }
        }
    }

    /// Its name in the table.
    fn name(self) -> &'static str {
        match self {
            ClientKind::Chat => "openai SDK Chat Completions loop",
            ClientKind::Messages => "anthropic SDK Messages loop",
            ClientKind::Genai => "google-genai loop",
            ClientKind::Agents => "OpenAI Agents SDK (Responses, `echo` via hale's /mcp)",
            ClientKind::Codex => "Codex CLI (`codex exec`)",
            ClientKind::Claude => "Claude Code (`claude -p`)",
            ClientKind::GeminiCli => "Gemini CLI (`gemini -p`)",
        }
    }
}

/// The provider deployments: (name, kind), one chaos process each.
pub const DEPLOYMENTS: [(&str, &str); 7] = [
    ("oa", "openai"),
    ("rs", "responses"),
    ("an", "anthropic"),
    ("ge", "gemini"),
    ("az", "azure"),
    ("br", "bedrock"),
    ("vx", "vertex"),
];

/// The tool nodes behind hale's tool routing (`tool_nodes`, every one
/// serving chaos's tools, `echo` among them): (name, kind), one chaos
/// process each. The schedule crashes the first and hangs the second.
pub const TOOL_NODES: [(&str, &str); 3] = [
    ("local:tools_a", "mcp"),
    ("local:tools_b", "http"),
    ("local:tools_c", "mcp"),
];

/// The routes the clients call, each across kinds (deployment indexes):
/// every deployment is the first choice of one, so a fault anywhere meets
/// traffic; the fleet's `i`-th loop calls route `i % 7`.
pub const ROUTES: [(&str, [usize; 3]); 7] = [
    ("via-oa", [0, 2, 3]),
    ("via-rs", [1, 5, 4]),
    ("via-an", [2, 3, 0]),
    ("via-ge", [3, 0, 1]),
    ("via-az", [4, 1, 2]),
    ("via-br", [5, 4, 0]),
    ("via-vx", [6, 2, 3]),
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
    ToolNodeCrash,
    ToolNodeHang,
    /// Scale-out mode only ([`crate::scale_out::faults`]): one hale
    /// instance SIGKILLed, restarted on its port and config.
    HaleInstanceKilled,
    /// Scale-out mode only: the run's nats-server SIGKILLed, restarted on
    /// its port and store.
    NatsKilled,
    /// Scale-out mode only: the run's private PostgreSQL cluster restarted
    /// (`pg_ctl restart -m fast`).
    PostgresRestarted,
}

impl FaultClass {
    /// Every class, in the order the schedule draws from.
    pub const ALL: [FaultClass; 15] = [
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
        FaultClass::ToolNodeCrash,
        FaultClass::ToolNodeHang,
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
            FaultClass::ToolNodeCrash => "tool node crashed and restarted",
            FaultClass::ToolNodeHang => "tool node hanging",
            FaultClass::HaleInstanceKilled => "hale instance SIGKILLed and restarted",
            FaultClass::NatsKilled => "NATS killed and restarted",
            FaultClass::PostgresRestarted => "PostgreSQL restarted",
        }
    }

    /// The tool node it strikes ([`TOOL_NODES`] index): the first is the
    /// one that crashes, the second the one that hangs; `None`: a provider
    /// fault.
    pub fn tool_node(self) -> Option<usize> {
        match self {
            FaultClass::ToolNodeCrash => Some(0),
            FaultClass::ToolNodeHang => Some(1),
            _ => None,
        }
    }

    /// The chaos override that plays it on a provider (`None`: the chaos
    /// process is stopped instead, so the provider refuses connections; or
    /// a tool node's fault).
    pub fn spec(self) -> Option<&'static str> {
        Some(match self {
            FaultClass::ToolNodeCrash | FaultClass::ToolNodeHang => return None,
            FaultClass::HaleInstanceKilled
            | FaultClass::NatsKilled
            | FaultClass::PostgresRestarted => return None,
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

    /// Whether it strikes hale's own parts (the scale-out mode's faults).
    pub fn scale_out(self) -> bool {
        matches!(
            self,
            FaultClass::HaleInstanceKilled | FaultClass::NatsKilled | FaultClass::PostgresRestarted
        )
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
    #[serde(serialize_with = "crate::duration::ser_duration")]
    pub at: Duration,
    #[serde(serialize_with = "crate::duration::ser_duration")]
    pub lasts: Duration,
    /// Index into [`DEPLOYMENTS`], or into [`TOOL_NODES`] for a tool
    /// node's fault ([`FaultClass::tool_node`]).
    pub deployment: usize,
    pub class: FaultClass,
}

impl Planned {
    /// The name of the deployment or tool node it strikes.
    pub fn target(&self) -> &'static str {
        match (self.class, self.class.tool_node()) {
            (FaultClass::HaleInstanceKilled, _) => ["hale-0", "hale-1"][self.deployment.min(1)],
            (FaultClass::NatsKilled, _) => "nats",
            (FaultClass::PostgresRestarted, _) => "postgres",
            (_, Some(_)) => TOOL_NODES[self.deployment].0,
            (_, None) => DEPLOYMENTS[self.deployment].0,
        }
    }

    /// The part of hale's it strikes (`None`: not a scale-out fault).
    fn part(&self) -> Option<scale_out::Part> {
        match self.class {
            FaultClass::HaleInstanceKilled => Some(scale_out::Part::Instance(self.deployment)),
            FaultClass::NatsKilled => Some(scale_out::Part::Nats),
            FaultClass::PostgresRestarted => Some(scale_out::Part::Postgres),
            _ => None,
        }
    }

    /// Its key among the faults active at once: a deployment's index, a
    /// tool node's or a part of hale's past them.
    fn slot(&self) -> usize {
        match (self.class, self.class.tool_node()) {
            (c, _) if c.scale_out() => 100 + self.deployment + 10 * (c as usize),
            (_, Some(_)) => self.deployment,
            (_, None) => self.deployment,
        }
    }
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
        let drawn = rng.below(DEPLOYMENTS.len());
        let deployment = class.tool_node().unwrap_or(drawn);
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

/// The task of a client's `n`-th task: `(client + 1)·10⁹ + n·10³ + r`,
/// `r < 1000` drawn from the run's seed, so no two tasks of a run share a
/// name (below a million tasks a client). hale keys a task by its
/// conversation: two agents given the same task name are one task to it,
/// and the hour's seed 41 once gave two clients `task-353219-8` 23 minutes
/// apart (a draw of six digits), which hale's task timeout then stopped.
pub fn task_of(seed: u64, client: usize, n: u64, steps: u32) -> hale_chaos::task::Task {
    let mut rng = SplitMix(seed ^ ((client as u64) << 32) ^ n.wrapping_mul(0x1000_0001));
    hale_chaos::task::Task {
        seed: (client as u64 + 1) * 1_000_000_000 + (n % 1_000_000) * 1_000 + rng.next() % 1_000,
        steps,
    }
}

/// One task's end.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TaskEnd {
    client: usize,
    kind: ClientKind,
    route: String,
    task: String,
    /// `None`: finished correctly; else why not.
    failure: Option<String>,
    wall_s: f64,
    turn_ids: Vec<String>,
    /// hale's id of the turn it failed to the client, when it said one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failed_turn_id: Option<String>,
}

/// The chaos processes, by deployment; a stopped one is `None` with its address kept.
struct Providers {
    procs: Vec<Option<Proc>>,
    addrs: Vec<SocketAddr>,
    /// Each process's arguments beyond `--listen` (kept for a restart).
    extra: Vec<Vec<String>>,
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

/// hale's config: the seven providers at their chaos, the routes, the
/// timeouts an operator with a few-second objective would set.
pub fn hale_yaml(
    listen: SocketAddr,
    data: &Path,
    addrs: &[SocketAddr],
    tool_nodes: &[SocketAddr],
    vertex_key: &Path,
) -> String {
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
            // Claude on Vertex, its token from the chaos's /token.
            "vertex" => format!(
                "kind: vertex, project: chaos-proj, location: us-east5, base_url: 'http://{a}', publisher: anthropic, credentials_file: '{}'",
                vertex_key.display()
            ),
            other => unreachable!("no provider kind {other}"),
        };
        y.push_str(&format!(
            "  - {{name: {name}, {p}, default_model: {MODEL}, {timeouts}}}\n"
        ));
    }
    // `echo` may run again on another node: it is deterministic.
    y.push_str("tool_nodes:\n");
    for (i, (name, kind)) in TOOL_NODES.iter().enumerate() {
        let a = tool_nodes[i];
        let url = match *kind {
            "mcp" => format!("http://{a}/mcp"),
            _ => format!("http://{a}"),
        };
        y.push_str(&format!(
            "  - {{name: '{name}', kind: {kind}, url: '{url}', deterministic: [echo]}}\n"
        ));
    }
    y
}

const KEYS: [(&str, &str); 3] = [
    ("HOUR_GEMINI_KEY", "k-hour"),
    ("HOUR_AZURE_KEY", "k-hour"),
    ("HOUR_BEDROCK_KEY", "k-hour"),
];

/// The longest one task may take before it is stopped and counted failed.
const TASK_LIMIT: Duration = Duration::from_secs(600);

/// Runs one task through `route` with the client's agent; its end.
async fn run_task(ctx: &Ctx, client: Client, task: hale_chaos::task::Task) -> TaskEnd {
    let Client {
        index: client,
        kind,
        route,
    } = client;
    let t0 = Instant::now();
    let dir = ctx.work.join(format!("c{client}-{}", task.name()));
    let end = |failure: Option<String>, turn_ids: Vec<String>| TaskEnd {
        client,
        kind,
        route: route.to_owned(),
        task: task.name(),
        failure,
        wall_s: t0.elapsed().as_secs_f64(),
        turn_ids,
        failed_turn_id: None,
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return end(Some(format!("no work dir: {e}")), Vec::new());
    }
    let mut cmd = match agent_command(ctx, kind, route, &dir, &task) {
        Ok(c) => c,
        Err(e) => return end(Some(format!("the agent cannot start: {e}")), Vec::new()),
    };
    cmd.current_dir(&dir)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = match tokio::time::timeout(TASK_LIMIT, cmd.output()).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => return end(Some(format!("the agent did not run: {e}")), Vec::new()),
        Err(_) => return end(Some(format!("not done in {TASK_LIMIT:?}")), Vec::new()),
    };
    let (failure, ids, failed) = judge(kind, &task, &dir, &out);
    let _ = std::fs::remove_dir_all(&dir);
    let mut e = end(failure, ids);
    e.failed_turn_id = failed;
    e
}

/// The command that runs `task` through `route` as `kind`: an SDK loop's
/// script, or a real CLI in a fresh home (nothing of the machine's config
/// or keys), its base URL hale, its own retries off where it has a switch
/// (Codex: `request_max_retries`/`stream_max_retries`; Claude Code:
/// `CLAUDE_CODE_MAX_RETRIES`; Gemini CLI has none), its telemetry off —
/// as crates/hale/tests/agent_clis.rs runs them.
fn agent_command(
    ctx: &Ctx,
    kind: ClientKind,
    route: &str,
    dir: &Path,
    task: &hale_chaos::task::Task,
) -> anyhow::Result<tokio::process::Command> {
    let base = kind.base(&ctx.root);
    if let Some(script) = kind.script() {
        let prompt = format!("Run {}, then report.", task.name());
        let mut cmd = tokio::process::Command::new(&ctx.python);
        cmd.arg(ctx.sdk_dir.join(script))
            .args([route, &base, &dir.display().to_string(), &prompt])
            .env("HALE_CLIENT_RETRIES", ctx.client_retries.to_string());
        return Ok(cmd);
    }
    let bin = ctx
        .clis
        .get(&kind)
        .with_context(|| format!("no {kind:?} binary"))?;
    let home = dir.join(".home");
    std::fs::create_dir_all(home.join(".gemini"))?;
    let home_s = home.display().to_string();
    let mut cmd = tokio::process::Command::new(bin);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &home_s);
    match kind {
        ClientKind::Codex => {
            let prompt = format!("Run {} with your shell tool, then report.", task.name());
            cmd.env("CODEX_HOME", &home_s)
                .env("HALE_HOUR_KEY", "sk-hale-hour")
                .args(["exec", "--skip-git-repo-check"])
                .arg("--dangerously-bypass-approvals-and-sandbox")
                .args(["-m", route, "-c", "model_provider=\"hale\""])
                .args(["-c", "model_providers.hale.name=\"hale\""])
                .arg("-c")
                .arg(format!("model_providers.hale.base_url=\"{base}\""))
                .args(["-c", "model_providers.hale.wire_api=\"responses\""])
                .args(["-c", "model_providers.hale.env_key=\"HALE_HOUR_KEY\""])
                .args(["-c", "model_providers.hale.request_max_retries=0"])
                .args(["-c", "model_providers.hale.stream_max_retries=0"])
                .args(["-c", "check_for_update_on_startup=false"])
                .args(["-c", "analytics.enabled=false"])
                .arg(prompt);
        }
        ClientKind::Claude => {
            let prompt = format!("Run {} with the Bash tool, then report.", task.name());
            cmd.env("ANTHROPIC_BASE_URL", &base)
                .env("ANTHROPIC_API_KEY", "sk-ant-hale-hour")
                .env("CLAUDE_CODE_MAX_RETRIES", "0")
                .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                .env("DISABLE_TELEMETRY", "1")
                .env("DISABLE_ERROR_REPORTING", "1")
                .env("DISABLE_AUTOUPDATER", "1")
                .args(["-p", &prompt, "--model", route, "--allowedTools", "Bash"]);
        }
        ClientKind::GeminiCli => {
            std::fs::write(home.join(".gemini/settings.json"), GEMINI_SETTINGS)?;
            let prompt = format!("Run {} with your shell tool, then report.", task.name());
            cmd.env("GOOGLE_GEMINI_BASE_URL", &base)
                .env("GEMINI_API_KEY", "hale-hour-key")
                .env("GEMINI_CLI_TRUST_WORKSPACE", "true")
                .args(["-m", route, "--yolo", "-p", &prompt]);
        }
        ClientKind::Chat | ClientKind::Messages | ClientKind::Genai | ClientKind::Agents => {
            unreachable!("an SDK loop has a script")
        }
    }
    Ok(cmd)
}

/// Gemini CLI's settings in its fresh home: API-key auth, no statistics,
/// no update checks, no telemetry (agent_clis.rs's).
const GEMINI_SETTINGS: &str = r#"{
  "security": {"auth": {"selectedType": "gemini-api-key"}},
  "privacy": {"usageStatisticsEnabled": false},
  "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
  "telemetry": {"enabled": false}
}"#;

/// Whether the agent finished `task` correctly — its final answer checked
/// (`hale_chaos::task::check`) and the files of its shell steps there — or
/// why not; hale's turn ids it reported (the SDK loops report them; a CLI
/// does not), and the id of a turn failed to it.
fn judge(
    kind: ClientKind,
    task: &hale_chaos::task::Task,
    dir: &Path,
    out: &std::process::Output,
) -> (Option<String>, Vec<String>, Option<String>) {
    let v: Value = match kind.script() {
        Some(_) => serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        None if out.status.success() => json!({"final": String::from_utf8_lossy(&out.stdout)}),
        None => Value::Null,
    };
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
        match hale_chaos::task::check(task, text) {
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
        // Its last error line (Codex ends its stderr with a token count).
        let why = err
            .lines()
            .rev()
            .find(|l| l.to_ascii_lowercase().contains("error"))
            .or_else(|| err.lines().last())
            .unwrap_or("");
        Some(format!("the agent failed ({}): {why}", out.status))
    };
    let failed = v["failed_turn_id"].as_str().map(str::to_owned);
    (failure, ids, failed)
}

/// What every task needs.
struct Ctx {
    python: PathBuf,
    sdk_dir: PathBuf,
    clis: BTreeMap<ClientKind, PathBuf>,
    /// hale's root URL.
    root: String,
    work: PathBuf,
    /// The SDK loops' own retries (`HALE_CLIENT_RETRIES`).
    client_retries: u32,
}

/// A memory and descriptor sample of hale.
#[derive(Debug, Clone, Serialize)]
struct Sample {
    /// `hale`, or the scale-out mode's `hale-0` / `hale-1`.
    instance: String,
    at: &'static str,
    rss_kib: Option<u64>,
    fds: Option<usize>,
}

fn sample(instance: &str, pid: Option<u32>, at: &'static str) -> Sample {
    Sample {
        instance: instance.to_owned(),
        at,
        rss_kib: pid.and_then(procs::rss_kib).map(|(r, _)| r),
        fds: pid.and_then(procs::open_fds),
    }
}

/// A sample of each hale: the embedded one (`pid`), or every instance of `scale`.
fn samples_of(scale: Option<&ScaleOut>, pid: Option<u32>, at: &'static str) -> Vec<Sample> {
    match scale {
        Some(s) => s
            .pids()
            .into_iter()
            .map(|(name, pid)| sample(&name, pid, at))
            .collect(),
        None => vec![sample("hale", pid, at)],
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

/// What the extra tokens and wall times are measured against.
#[derive(Debug, Clone, Serialize)]
struct Reference {
    /// Where it came from, as the table says.
    label: String,
    /// Provider tokens (input, output) per finished task.
    per_task: (f64, f64),
    /// Wall times of its finished tasks, sorted.
    walls: Vec<f64>,
}

/// The reference of an earlier `--no-faults` run's results: refused unless
/// it ran the same seed, length, mode, fleet and steps without faults
/// (another workload would be no reference).
fn load_reference(path: &Path, args: &HourArgs) -> anyhow::Result<Reference> {
    let text = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let v: Value = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not a chaos-hour results file", path.display()))?;
    let a = &v["args"];
    if a["no_faults"] != true {
        bail!("{} is not a --no-faults run", path.display());
    }
    let same = [
        ("seed", json!(args.seed)),
        ("minutes", json!(args.minutes)),
        ("clients", json!(args.clients)),
        ("steps", json!(args.steps)),
        ("kinds", json!(args.kinds)),
        ("clis", json!(args.clis)),
        ("mode", json!(args.mode)),
    ];
    for (k, want) in same {
        if a[k] != want {
            bail!(
                "{} ran --{k} {}, this run {want}: not the same workload",
                path.display(),
                a[k]
            );
        }
    }
    let tasks: Vec<TaskEnd> = serde_json::from_value(v["tasks"].clone())
        .with_context(|| format!("{}: no tasks", path.display()))?;
    let finished = tasks.iter().filter(|t| t.failure.is_none()).count().max(1) as f64;
    let run = |i: usize| v["tokens"]["run"][i].as_f64().unwrap_or(0.0) / finished;
    Ok(Reference {
        label: format!("the fault-free run {}", path.display()),
        per_task: (run(0), run(1)),
        walls: walls(&tasks),
    })
}

/// A played fault's window on the wall clock (Unix ms), as hale's journal
/// times its attempts.
#[derive(Debug, Clone, Serialize)]
struct Window {
    /// Index into the schedule.
    fault: usize,
    deployment: &'static str,
    class: FaultClass,
    from_ms: u64,
    to_ms: u64,
}

/// How a turn a fault touched ended, from its journalled timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Ending {
    /// Its attempt on the faulted deployment failed, a later one there answered.
    HealedSame,
    /// Another deployment answered, from the start.
    FailedOver,
    /// An attempt resumed the broken stream (on any deployment).
    Resumed,
    /// hale failed the turn to the client.
    FailedToClient,
    /// Its attempt on the faulted deployment answered (a latency fault, or
    /// the fault's count spent).
    Unharmed,
    /// hale passed the deployment over (ejected, breaker open) without
    /// calling it.
    RoutedAround,
}

impl Ending {
    const ALL: [Ending; 6] = [
        Ending::HealedSame,
        Ending::FailedOver,
        Ending::Resumed,
        Ending::FailedToClient,
        Ending::Unharmed,
        Ending::RoutedAround,
    ];

    fn name(self) -> &'static str {
        match self {
            Ending::HealedSame => "healed on the same deployment / node",
            Ending::FailedOver => "failed over",
            Ending::Resumed => "resumed mid-stream",
            Ending::FailedToClient => "failed to the client",
            Ending::Unharmed => "answered through it",
            Ending::RoutedAround => "routed around",
        }
    }
}

/// A journalled turn, as `GET /turns/{id}` shows it.
#[derive(Debug, Clone, Deserialize)]
struct JournalTurn {
    status: String,
    started_ms: u64,
    #[serde(default)]
    timeline: Vec<Row>,
    #[serde(default)]
    skipped: Vec<Row>,
}

/// One timeline row (an attempt, or a deployment passed over).
#[derive(Debug, Clone, Deserialize)]
struct Row {
    target: String,
    start_ms: u64,
    #[serde(default)]
    duration_ms: u64,
    #[serde(default)]
    class: Option<String>,
    #[serde(default)]
    resume: Option<String>,
}

/// Whether `turn` met the fault of `w`, and how it ended: it met it if an
/// attempt on the faulted deployment overlapped the window, or the
/// deployment was passed over inside it. Pure.
fn ending(w: &Window, turn: &JournalTurn) -> Option<Ending> {
    let on = |r: &Row| r.target.split('/').next() == Some(w.deployment);
    let from = |r: &Row| turn.started_ms + r.start_ms;
    let hits: Vec<&Row> = turn
        .timeline
        .iter()
        .filter(|r| on(r) && from(r) <= w.to_ms && from(r) + r.duration_ms >= w.from_ms)
        .collect();
    let passed = turn
        .skipped
        .iter()
        .any(|r| on(r) && (w.from_ms..=w.to_ms).contains(&from(r)));
    if hits.is_empty() && !passed {
        return None;
    }
    Some(if turn.status != "succeeded" {
        Ending::FailedToClient
    } else if hits.is_empty() {
        Ending::RoutedAround
    } else if hits.iter().all(|r| r.class.is_none()) {
        Ending::Unharmed
    } else if turn.timeline.iter().any(|r| r.resume.is_some()) {
        Ending::Resumed
    } else if turn
        .timeline
        .last()
        .is_some_and(|r| on(r) && r.class.is_none())
    {
        Ending::HealedSame
    } else {
        Ending::FailedOver
    })
}

/// Per played fault, the turns (or tool jobs: [`job_turn`]) it touched by
/// how each ended.
fn fault_endings(windows: &[Window], turns: &[JournalTurn]) -> Vec<BTreeMap<Ending, u64>> {
    windows
        .iter()
        .map(|w| {
            let mut by: BTreeMap<Ending, u64> = BTreeMap::new();
            for e in turns.iter().filter_map(|t| ending(w, t)) {
                *by.entry(e).or_default() += 1;
            }
            by
        })
        .collect()
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What starting hale needs: the binary, the run's work directory, and the
/// providers' addresses (by [`DEPLOYMENTS`] index).
pub struct HaleConfig<'a> {
    pub bin: &'a Path,
    pub work: &'a Path,
    pub providers: &'a [SocketAddr],
    /// The tool nodes' addresses (by [`TOOL_NODES`] index).
    pub tool_nodes: &'a [SocketAddr],
}

/// The hale the fleet calls: its base URL (`http://host:port`, the
/// clients add `/v1`, the journal is read at `/turns`) and its processes,
/// held to keep them running. The first is sampled for RSS and fds.
pub struct Hale {
    pub base: String,
    pub procs: Vec<Proc>,
}

impl Hale {
    fn pid(&self) -> Option<u32> {
        self.procs.first().map(|p| p.child.id())
    }

    fn logs(&self) -> String {
        let logs: Vec<String> = self
            .procs
            .iter()
            .map(|p| p.log.display().to_string())
            .collect();
        logs.join(", ")
    }
}

/// hale's key file for the Vertex deployment (its `token_uri` the
/// deployment's chaos); its path.
pub fn vertex_key_for(cfg: &HaleConfig<'_>) -> anyhow::Result<PathBuf> {
    let vx = DEPLOYMENTS
        .iter()
        .position(|(_, kind)| *kind == "vertex")
        .context("a vertex deployment")?;
    vertex_hale_key(cfg.work, cfg.providers[vx])
}

/// The embedded mode's hale: one `hale serve` on SQLite.
pub async fn start_hale(cfg: &HaleConfig<'_>) -> anyhow::Result<Hale> {
    let listen = procs::free_port()?;
    let yaml = hale_yaml(
        listen,
        &cfg.work.join("data"),
        cfg.providers,
        cfg.tool_nodes,
        &vertex_key_for(cfg)?,
    );
    let p = procs::start_hale_env(cfg.bin, cfg.work, listen, &yaml, &KEYS).await?;
    Ok(Hale {
        base: format!("http://{listen}"),
        procs: vec![p],
    })
}

/// The run's fixed parts: the binaries, the work directory (removed on
/// drop), the HTTP client of the bench's own calls.
struct Setup {
    bin: PathBuf,
    python: PathBuf,
    sdk_dir: PathBuf,
    /// The real CLIs of the fleet, by kind.
    clis: BTreeMap<ClientKind, PathBuf>,
    _tmp: tempfile::TempDir,
    work: PathBuf,
    http: reqwest::Client,
}

fn setup(args: &HourArgs) -> anyhow::Result<Setup> {
    let bin = procs::find_hale(args.hale_bin.as_deref())?;
    let python = match &args.python {
        Some(p) => p.clone(),
        None => std::env::var_os("HALE_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(".venv/bin/python")),
    };
    let mut clis = BTreeMap::new();
    for &k in &args.kinds {
        if let Some(script) = k.script().map(|s| args.sdk_dir.join(s))
            && !script.is_file()
        {
            bail!(
                "no agent loop at {} (run from the workspace root or pass --sdk-dir)",
                script.display()
            );
        }
        if let Some(c) = k.cli() {
            clis.insert(k, hale_testkit::cli(c).map_err(anyhow::Error::msg)?);
        }
    }
    // Absolute (each agent runs in its task's directory), but not
    // canonical: a venv's python is a symlink that must stay the venv's.
    let python = match python.parent() {
        Some(d) if !d.as_os_str().is_empty() && python.is_relative() => {
            std::env::current_dir()?.join(&python)
        }
        _ => python,
    };
    let tmp = tempfile::tempdir()?;
    let work = tmp.path().to_path_buf();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    Ok(Setup {
        bin,
        python,
        sdk_dir: std::fs::canonicalize(&args.sdk_dir)?,
        clis,
        _tmp: tmp,
        work,
        http,
    })
}

/// One chaos process per deployment, each on a port of its own.
async fn start_providers(bin: &Path, work: &Path) -> anyhow::Result<Providers> {
    let mut extra = Vec::new();
    for (_, kind) in DEPLOYMENTS {
        extra.push(match kind {
            "vertex" => vec![
                "--vertex-key".to_owned(),
                vertex_chaos_key(work)?.display().to_string(),
            ],
            _ => Vec::new(),
        });
    }
    start_chaoses(bin, work, extra).await
}

/// One chaos process per tool node (its tool node is the part used).
async fn start_tool_nodes(bin: &Path, work: &Path) -> anyhow::Result<Providers> {
    start_chaoses(bin, work, vec![Vec::new(); TOOL_NODES.len()]).await
}

async fn start_chaoses(
    bin: &Path,
    work: &Path,
    extra: Vec<Vec<String>>,
) -> anyhow::Result<Providers> {
    let mut providers = Providers {
        procs: Vec::new(),
        addrs: Vec::new(),
        extra,
        gone: Vec::new(),
    };
    for args in &providers.extra {
        let p = procs::start_chaos_with(bin, work, procs::free_port()?, args).await?;
        providers.addrs.push(p.addr);
        providers.procs.push(Some(p));
    }
    Ok(providers)
}

impl Providers {
    /// Starts process `i` again on its port, with its arguments.
    async fn restart(&mut self, i: usize, bin: &Path, work: &Path) -> anyhow::Result<()> {
        let p = procs::start_chaos_with(bin, work, self.addrs[i], &self.extra[i]).await?;
        self.procs[i] = Some(p);
        Ok(())
    }
}

/// The service account of the Vertex deployment's throwaway key.
const VERTEX_CLIENT_EMAIL: &str = "hale-hour@chaos-proj.iam.gserviceaccount.com";

/// A Vertex service-account key file's JSON for `pem`, its token endpoint
/// `token_uri`.
fn vertex_key_json(pem: &str, token_uri: &str) -> String {
    json!({
        "type": "service_account",
        "project_id": "chaos-proj",
        "private_key_id": "throwaway-hour-key",
        "private_key": pem,
        "client_email": VERTEX_CLIENT_EMAIL,
        "client_id": "1",
        "token_uri": token_uri,
    })
    .to_string()
}

/// A throwaway RSA key for the Vertex deployment (`openssl genpkey`): chaos
/// checks hale's signed assertions with it (`--vertex-key`); written as
/// `vertex-chaos.json` in `work`, its path.
fn vertex_chaos_key(work: &Path) -> anyhow::Result<PathBuf> {
    let out = std::process::Command::new("openssl")
        .args(["genpkey", "-algorithm", "RSA"])
        .args(["-pkeyopt", "rsa_keygen_bits:2048"])
        .output()
        .context("openssl runs (it makes the Vertex deployment's throwaway key)")?;
    if !out.status.success() {
        bail!("openssl genpkey failed");
    }
    let pem = String::from_utf8(out.stdout)?;
    std::fs::write(work.join("vertex.pem"), &pem)?;
    let path = work.join("vertex-chaos.json");
    std::fs::write(&path, vertex_key_json(&pem, "unused"))?;
    Ok(path)
}

/// hale's key file for the Vertex deployment: the same key, its
/// `token_uri` the chaos's `/token` at `addr`; its path.
fn vertex_hale_key(work: &Path, addr: SocketAddr) -> anyhow::Result<PathBuf> {
    let pem = std::fs::read_to_string(work.join("vertex.pem"))?;
    let path = work.join("vertex-sa.json");
    std::fs::write(
        &path,
        vertex_key_json(&pem, &format!("http://{addr}/token")),
    )?;
    Ok(path)
}

fn print_schedule(args: &HourArgs, plan: &[Planned]) {
    println!(
        "chaos hour: seed {}, {} min, {}, {} loops of each of {:?}, {}-step tasks, {} faults",
        args.seed,
        args.minutes,
        match args.peer {
            Some(p) => format!("through the peer {p:?} (not hale)"),
            None => args.mode.name().to_owned(),
        },
        args.clients,
        args.kinds,
        args.steps,
        plan.len()
    );
    for f in plan {
        println!(
            "  +{:>5.0}s  {:<13} {:<34} for {:.0}s  ({})",
            f.at.as_secs_f64(),
            f.target(),
            f.class.name(),
            f.lasts.as_secs_f64(),
            match (f.class.spec(), f.class) {
                (Some(spec), _) => spec,
                (None, FaultClass::ToolNodeHang) => "tools fault hang",
                (None, FaultClass::HaleInstanceKilled) => "SIGKILL, restarted on its port",
                (None, FaultClass::NatsKilled) => "SIGKILL, restarted on its port and store",
                (None, FaultClass::PostgresRestarted) => "pg_ctl restart -m fast",
                (None, _) => "chaos stopped",
            }
        );
    }
}

/// The fault-free warm-up, as the run's fleet: every client at once,
/// `baseline_tasks` each (their tasks are of another seed, so none repeats
/// a task of the run). Its ends and its provider tokens per finished task.
async fn run_baseline(
    ctx: &Arc<Ctx>,
    args: &HourArgs,
    providers: &Providers,
    http: &reqwest::Client,
) -> (Vec<TaskEnd>, (f64, f64)) {
    let before = tokens(&providers.stats(http).await);
    let mut fleet = Vec::new();
    for c in clients(args) {
        let ctx = ctx.clone();
        let (seed, steps, n) = (!args.seed, args.steps, args.baseline_tasks);
        fleet.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for k in 0..n as u64 {
                out.push(run_task(&ctx, c, task_of(seed, c.index, k, steps)).await);
            }
            out
        }));
    }
    let mut baseline = Vec::new();
    for f in fleet {
        baseline.extend(f.await.unwrap_or_default());
    }
    let after = tokens(&providers.stats(http).await);
    let ok = baseline.iter().filter(|e| e.failure.is_none()).count();
    let per_task = |t: u64| t as f64 / ok.max(1) as f64;
    let per = (per_task(after.0 - before.0), per_task(after.1 - before.1));
    (baseline, per)
}

/// One agent loop of the fleet.
#[derive(Debug, Clone, Copy)]
struct Client {
    /// Across the fleet (its tasks' seeds come from it).
    index: usize,
    kind: ClientKind,
    route: &'static str,
}

/// The fleet's loops: `--clients` of each kind, loop `c` of a kind on
/// route `i % 7` for the fleet's `i`-th loop (so every route, every
/// deployment first, carries traffic once the fleet has seven loops).
fn clients(args: &HourArgs) -> Vec<Client> {
    let mut out = Vec::new();
    for &kind in &args.kinds {
        for _ in 0..args.clients {
            out.push(Client {
                index: out.len(),
                kind,
                route: ROUTES[out.len() % ROUTES.len()].0,
            });
        }
    }
    out
}

/// The fleet: each client runs task after task until the deadline.
struct Fleet {
    workers: Vec<tokio::task::JoinHandle<()>>,
    ends: Arc<Mutex<Vec<TaskEnd>>>,
}

fn start_fleet(ctx: &Arc<Ctx>, args: &HourArgs, deadline: Instant) -> Fleet {
    let ends: Arc<Mutex<Vec<TaskEnd>>> = Arc::default();
    let mut workers = Vec::new();
    for c in clients(args) {
        let (ctx, ends) = (ctx.clone(), ends.clone());
        let (seed, steps) = (args.seed, args.steps);
        workers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                let end = run_task(&ctx, c, task_of(seed, c.index, n, steps)).await;
                if end.failure.is_some() && end.wall_s < 1.0 {
                    // An agent that cannot start must not spin.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                ends.lock().unwrap_or_else(|p| p.into_inner()).push(end);
                n += 1;
            }
        }));
    }
    Fleet { workers, ends }
}

impl Fleet {
    /// Waits for every client's last task; their ends.
    async fn join(self) -> Vec<TaskEnd> {
        for w in self.workers {
            let _ = w.await;
        }
        std::mem::take(&mut *self.ends.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Plays the schedule on the providers: each fault's start and end, a
/// fault still on a deployment ended when the next one there starts.
struct Player<'a> {
    providers: &'a mut Providers,
    tools: &'a mut Providers,
    http: &'a reqwest::Client,
    bin: &'a Path,
    work: &'a Path,
    plan: &'a [Planned],
    /// The scale-out mode's parts (`None`: embedded).
    scale: Option<&'a mut ScaleOut>,
    /// The embedded hale's pid (sampled; the scale-out mode samples its instances).
    pid: Option<u32>,
    /// The fault on each deployment now ([`Planned::slot`] → plan index).
    active: BTreeMap<usize, usize>,
    /// Chaos's count of each active fault's name at its start.
    counts: BTreeMap<usize, u64>,
    /// Faults started, by class.
    applied: BTreeMap<FaultClass, u64>,
    /// Requests each class was applied to (chaos's count from its start to its end).
    touched: BTreeMap<FaultClass, u64>,
    /// The played faults' windows, in start order.
    windows: Vec<Window>,
    /// The window of each active fault (plan index → index in `windows`).
    open: BTreeMap<usize, usize>,
}

impl Player<'_> {
    async fn start(&mut self, i: usize) -> anyhow::Result<()> {
        let f = &self.plan[i];
        let d = f.deployment;
        if let Some(prev) = self.active.insert(f.slot(), i) {
            self.end(prev).await?;
        }
        *self.applied.entry(f.class).or_default() += 1;
        self.open.insert(i, self.windows.len());
        self.windows.push(Window {
            fault: i,
            deployment: f.target(),
            class: f.class,
            from_ms: wall_ms(),
            to_ms: u64::MAX,
        });
        if f.class.tool_node().is_some() {
            return self.tool_fault(f, true).await;
        }
        if f.class.scale_out() {
            return match self.scale.as_deref_mut() {
                Some(s) => match f.part() {
                    Some(part) => s.strike(part, f.at).await,
                    None => Ok(()),
                },
                None => bail!("{:?} needs --mode scale-out", f.class),
            };
        }
        let addr = self.providers.addrs[d];
        match f.class.spec() {
            Some(spec) => {
                let n = applied_count(self.http, addr, spec).await;
                self.counts.insert(i, n);
                override_fault(self.http, addr, Some(spec)).await;
            }
            None => {
                if let Ok(s) = chaos_stats(self.http, addr).await {
                    self.providers.gone.push(s);
                }
                self.providers.procs[d] = None;
            }
        }
        Ok(())
    }

    /// Ends fault `i`: the requests it touched counted, the override
    /// cleared; or the stopped chaos started again on its port.
    async fn end(&mut self, i: usize) -> anyhow::Result<()> {
        let f = &self.plan[i];
        let d = f.deployment;
        let addr = self.providers.addrs[d];
        let since = self.counts.remove(&i).unwrap_or(0);
        if let Some(w) = self.open.remove(&i) {
            self.windows[w].to_ms = wall_ms();
        }
        if f.class.tool_node().is_some() {
            return self.tool_fault(f, false).await;
        }
        if f.class.scale_out() {
            return match self.scale.as_deref_mut() {
                Some(s) => match f.part() {
                    Some(part) => s.heal(part).await,
                    None => Ok(()),
                },
                None => Ok(()),
            };
        }
        match f.class.spec() {
            Some(spec) => {
                let n = applied_count(self.http, addr, spec)
                    .await
                    .saturating_sub(since);
                *self.touched.entry(f.class).or_default() += n;
                override_fault(self.http, addr, None).await;
            }
            None if self.providers.procs[d].is_none() => {
                self.providers.restart(d, self.bin, self.work).await?;
            }
            None => {}
        }
        Ok(())
    }

    /// Starts (or ends) a tool node's fault: the node's chaos stopped (and
    /// started again on its port), or its tools set to hang (and cleared).
    async fn tool_fault(&mut self, f: &Planned, starts: bool) -> anyhow::Result<()> {
        let n = f.deployment;
        let addr = self.tools.addrs[n];
        match (f.class, starts) {
            (FaultClass::ToolNodeCrash, true) => self.tools.procs[n] = None,
            (FaultClass::ToolNodeCrash, false) if self.tools.procs[n].is_none() => {
                self.tools.restart(n, self.bin, self.work).await?;
            }
            (FaultClass::ToolNodeCrash, false) => {}
            (_, starts) => {
                let spec = if starts { "hang" } else { "ok" };
                let _ = self
                    .http
                    .post(format!("http://{addr}/chaos/tools/fault"))
                    .json(&json!({ "spec": spec }))
                    .send()
                    .await;
            }
        }
        Ok(())
    }

    /// Plays the starts and ends falling before `t0 + total` in time
    /// order, sampling hale at the middle; the faults still on stay on.
    /// A sample of each hale: the embedded one, or every instance.
    fn samples(&self, at: &'static str) -> Vec<Sample> {
        samples_of(self.scale.as_deref(), self.pid, at)
    }

    async fn play(
        &mut self,
        t0: Instant,
        total: Duration,
        samples: &mut Vec<Sample>,
    ) -> anyhow::Result<()> {
        let mut events: Vec<(Duration, bool, usize)> = Vec::new();
        for (i, f) in self.plan.iter().enumerate() {
            events.push((f.at, true, i));
            events.push((f.at + f.lasts, false, i));
        }
        events.sort();
        let mut middle_taken = false;
        for (when, starts, i) in events {
            if !middle_taken && when >= total / 2 {
                tokio::time::sleep_until((t0 + total / 2).into()).await;
                samples.extend(self.samples("middle"));
                middle_taken = true;
            }
            if when > total {
                break;
            }
            tokio::time::sleep_until((t0 + when).into()).await;
            let d = self.plan[i].slot();
            if starts {
                self.start(i).await?;
            } else if self.active.get(&d) == Some(&i) {
                self.active.remove(&d);
                self.end(i).await?;
            }
        }
        if !middle_taken {
            tokio::time::sleep_until((t0 + total / 2).into()).await;
            samples.extend(self.samples("middle"));
        }
        Ok(())
    }

    /// Ends the faults still on.
    async fn end_all(&mut self) -> anyhow::Result<()> {
        for (_, i) in std::mem::take(&mut self.active) {
            self.end(i).await?;
        }
        Ok(())
    }
}

/// What hale's journal says of the answered turns: ids missing or
/// repeated, and each failed attempt's class with how its turn ended.
#[derive(Debug, Default, Serialize)]
struct Journal {
    missing: usize,
    repeated: usize,
    outcomes: BTreeMap<String, BTreeMap<&'static str, u64>>,
    /// Every turn read: the answered ones and those failed to the client.
    #[serde(skip)]
    turns: Vec<JournalTurn>,
}

async fn read_journal(http: &reqwest::Client, base: &str, ends: &[TaskEnd]) -> Journal {
    let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
    for id in ends.iter().flat_map(|e| e.turn_ids.iter()) {
        *seen.entry(id.as_str()).or_default() += 1;
    }
    let mut j = Journal {
        repeated: seen.values().filter(|&&n| n > 1).count(),
        ..Journal::default()
    };
    let failed = ends.iter().filter_map(|e| e.failed_turn_id.as_deref());
    for failed in failed {
        if let Some(turn) = fetch_turn(http, base, failed).await {
            j.turns.extend(serde_json::from_value(turn).ok());
        }
    }
    for id in seen.keys() {
        let Some(turn) = fetch_turn(http, base, id).await else {
            j.missing += 1;
            continue;
        };
        if turn["status"] != "succeeded" {
            j.missing += 1;
        }
        j.turns.extend(serde_json::from_value(turn.clone()).ok());
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
            *j.outcomes.entry(c).or_default().entry(how).or_default() += 1;
        }
    }
    j
}

/// The journalled turn `id`, or `None` when hale says it has none (404).
/// A failed read (a reset, a timeout, a 5xx from the load balancer on a
/// loaded machine) is tried again a few times, so a turn is counted
/// missing for what the journal holds, not for one lost request.
async fn fetch_turn(http: &reqwest::Client, base: &str, id: &str) -> Option<Value> {
    for _ in 0..5 {
        match http.get(format!("{base}/turns/{id}")).send().await {
            Ok(r) if r.status().is_success() => {
                if let Ok(v) = r.json().await {
                    return Some(v);
                }
            }
            Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => return None,
            Ok(_) | Err(_) => {}
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    None
}

/// How often the run reads hale's tool jobs (`GET /jobs`, newest first):
/// [`JOBS_PAGE`] each time, so every job is read after it ended while the
/// fleet starts fewer than that many in this interval (a few dozen do).
const JOBS_EVERY: Duration = Duration::from_secs(20);
/// The newest jobs one read asks for: the most hale lists (`MAX_LIST`).
const JOBS_PAGE: u32 = 1000;

/// hale's tool jobs (the Agents SDK loops' `echo` through hale's `/mcp`,
/// run on the tool nodes behind tool routing), read while the run goes:
/// by id, a later read of a job replacing an earlier one.
struct JobReader {
    jobs: Arc<Mutex<BTreeMap<String, Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl JobReader {
    /// Reads the newest jobs every [`JOBS_EVERY`] until [`JobReader::finish`].
    fn follow(http: reqwest::Client, base: String) -> Self {
        let jobs: Arc<Mutex<BTreeMap<String, Value>>> = Arc::default();
        let into = jobs.clone();
        let task = tokio::spawn(async move {
            loop {
                read_jobs(&http, &base, &into).await;
                tokio::time::sleep(JOBS_EVERY).await;
            }
        });
        Self { jobs, task }
    }

    /// One last read, after the fleet's last task; every job read.
    async fn finish(self, http: &reqwest::Client, base: &str) -> Vec<Value> {
        self.task.abort();
        read_jobs(http, base, &self.jobs).await;
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *jobs).into_values().collect()
    }
}

/// One read of the newest [`JOBS_PAGE`] jobs into `into`. A failed read
/// (an instance killed, a loaded machine) is left to the next one.
async fn read_jobs(http: &reqwest::Client, base: &str, into: &Mutex<BTreeMap<String, Value>>) {
    let url = format!("{base}/jobs?limit={JOBS_PAGE}");
    let Ok(r) = http.get(url).send().await else {
        return;
    };
    let Ok(v) = r.json::<Value>().await else {
        return;
    };
    let mut jobs = into.lock().unwrap_or_else(|p| p.into_inner());
    for job in v["jobs"].as_array().into_iter().flatten() {
        if let Some(id) = job["job_id"].as_str() {
            jobs.insert(id.to_owned(), job.clone());
        }
    }
}

/// A tool job as the turn [`ending`] reads: each attempt a row on its tool
/// node (absolute times, so `started_ms` is 0), a failed attempt carrying
/// its error as the class, a node passed over (`skipped`, its breaker open)
/// a skipped row; it succeeded when it completed with a result. A job not
/// completed when the run ended never answered its agent. Pure.
fn job_turn(job: &Value) -> Option<JournalTurn> {
    let answered = job["status"] == "completed" && job["ok"] == true;
    let mut turn = JournalTurn {
        status: if answered { "succeeded" } else { "failed" }.to_owned(),
        started_ms: 0,
        timeline: Vec::new(),
        skipped: Vec::new(),
    };
    for a in job["timeline"].as_array()? {
        let row = Row {
            target: a["node"].as_str()?.to_owned(),
            start_ms: a["timestamp"].as_u64()?,
            duration_ms: a["duration_ms"].as_u64().unwrap_or(0),
            class: None,
            resume: None,
        };
        match a["status"].as_str() {
            Some("success") => turn.timeline.push(row),
            Some("skipped") => turn.skipped.push(row),
            // "error", or a status this reader does not know: not an answer.
            Some(_) | None => {
                let class = match &a["error"] {
                    Value::String(e) => e.clone(),
                    Value::Null => "error".to_owned(),
                    other => other.to_string(),
                };
                turn.timeline.push(Row {
                    class: Some(class),
                    ..row
                });
            }
        }
    }
    Some(turn)
}

/// The tool jobs of a run: how many were read and how many answered.
#[derive(Debug, Default, Serialize)]
struct ToolJobs {
    read: usize,
    answered: usize,
    /// Every job read, as [`ending`] reads it.
    #[serde(skip)]
    calls: Vec<JournalTurn>,
}

impl ToolJobs {
    fn of(jobs: &[Value]) -> Self {
        let calls: Vec<JournalTurn> = jobs.iter().filter_map(job_turn).collect();
        Self {
            read: jobs.len(),
            answered: calls.iter().filter(|t| t.status == "succeeded").count(),
            calls,
        }
    }
}

/// Agents hale left paused: each needs an operator to resume it.
async fn paused_agents(http: &reqwest::Client, base: &str) -> usize {
    let Ok(r) = http.get(format!("{base}/agents?state=paused")).send().await else {
        return 0;
    };
    r.json::<Value>()
        .await
        .ok()
        .and_then(|v| v["agents"].as_array().map(Vec::len))
        .unwrap_or(0)
}

/// A played fault with the turns (or tool jobs) it touched, by how each ended.
#[derive(Debug, Serialize)]
struct PlayedFault {
    #[serde(flatten)]
    window: Window,
    endings: BTreeMap<Ending, u64>,
}

/// A run's results: the table's facts, written as JSON.
#[derive(Serialize)]
struct Results<'a> {
    args: &'a HourArgs,
    schedule: &'a [Planned],
    reference: Option<Reference>,
    baseline: Vec<TaskEnd>,
    tasks: Vec<TaskEnd>,
    /// The client kinds the peer does not serve, and why (`--peer`).
    left_out: Vec<(ClientKind, &'static str)>,
    tokens: Value,
    journal: Journal,
    tool_jobs: ToolJobs,
    faults_started: BTreeMap<&'static str, u64>,
    faults_touched: BTreeMap<&'static str, u64>,
    /// Per played fault, the turns it touched and how each ended (hale's journal).
    faults: Vec<PlayedFault>,
    chaos: Vec<hale_chaos::Stats>,
    samples: Vec<Sample>,
    paused_agents: usize,
    wall_s: f64,
    /// The scale-out mode's events and dead letters (`None`: embedded).
    scale_out: Option<ScaleOutReport>,
}

/// What the scale-out mode adds to the results.
#[derive(Debug, Serialize)]
struct ScaleOutReport {
    events: scale_out::Events,
    /// Scale-out faults skipped, with why.
    skipped: Vec<String>,
}

impl Results<'_> {
    fn finished(&self) -> usize {
        self.tasks.iter().filter(|e| e.failure.is_none()).count()
    }

    /// Tokens (input, output) per finished task.
    fn per_task(&self) -> (Option<f64>, Option<f64>) {
        let n = self.finished();
        let of = |i: usize| {
            let t = self.tokens["run"][i].as_f64()?;
            (n > 0).then(|| t / n as f64)
        };
        (of(0), of(1))
    }

    /// Extra tokens (input, output) per finished task over the reference's, in %.
    fn extra_percent(&self) -> (Option<f64>, Option<f64>) {
        let Some(r) = &self.reference else {
            return (None, None);
        };
        let (i, o) = self.per_task();
        let pct = |got: Option<f64>, base: f64| {
            got.filter(|_| base > 0.0).map(|g| (g / base - 1.0) * 100.0)
        };
        (pct(i, r.per_task.0), pct(o, r.per_task.1))
    }
}

pub async fn run(mut args: HourArgs) -> anyhow::Result<()> {
    if args.clis {
        for k in ClientKind::CLIS {
            if !args.kinds.contains(&k) {
                args.kinds.push(k);
            }
        }
    }
    let mut left_out = Vec::new();
    if let Some(peer) = args.peer {
        chaos_peer::check_installed(peer)?;
        args.kinds.retain(|&k| match k.through(peer) {
            Ok(()) => true,
            Err(why) => {
                left_out.push((k, why));
                false
            }
        });
        for (k, why) in &left_out {
            println!("left out through {peer:?}: {}: {why}", k.name());
        }
        for (kind, why) in chaos_peer::unreached(peer) {
            println!("provider kind left out through {peer:?}: {kind}: {why}");
        }
        if args.kinds.is_empty() {
            bail!("--peer {peer:?} serves none of the client kinds asked for");
        }
        if args.mode == Mode::ScaleOut {
            bail!("--peer runs the embedded mode's fleet only, not --mode scale-out");
        }
    }
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let plan = if args.no_faults {
        Vec::new()
    } else {
        let mut plan = schedule(args.seed, total, args.fault_every, args.fault_lasts);
        if args.mode == Mode::ScaleOut {
            plan.extend(scale_out::faults(args.seed, total).into_iter().map(|f| {
                let (class, deployment) = match f.part {
                    scale_out::Part::Instance(i) => (FaultClass::HaleInstanceKilled, i),
                    scale_out::Part::Nats => (FaultClass::NatsKilled, 0),
                    scale_out::Part::Postgres => (FaultClass::PostgresRestarted, 0),
                };
                Planned {
                    at: f.at,
                    lasts: f.lasts,
                    deployment,
                    class,
                }
            }));
            plan.sort_by_key(|f| f.at);
        }
        plan
    };
    print_schedule(&args, &plan);
    if args.print_schedule {
        return Ok(());
    }
    let loaded = match &args.reference {
        Some(p) => Some(load_reference(p, &args)?),
        None => None,
    };
    let s = setup(&args)?;
    let mut providers = start_providers(&s.bin, &s.work).await?;
    let mut tools = start_tool_nodes(&s.bin, &s.work).await?;
    let cfg = HaleConfig {
        bin: &s.bin,
        work: &s.work,
        providers: &providers.addrs,
        tool_nodes: &tools.addrs,
    };
    let (hale, mut scale) = match (args.peer, args.mode) {
        (Some(Peer::Litellm), _) => {
            let p =
                chaos_peer::start_litellm(&s.work, &DEPLOYMENTS, &ROUTES, &providers.addrs).await?;
            let peer = Hale {
                base: format!("http://{}", p.addr),
                procs: vec![p],
            };
            (Some(peer), None)
        }
        (None, Mode::Embedded) => (Some(start_hale(&cfg).await?), None),
        (None, Mode::ScaleOut) => {
            let vertex_key = vertex_key_for(&cfg)?;
            let yaml = |listen: SocketAddr, data: &Path| {
                hale_yaml(listen, data, &providers.addrs, &tools.addrs, &vertex_key)
            };
            let parts = scale_out::Parts {
                bin: &s.bin,
                work: &s.work,
                yaml: &yaml,
                envs: &KEYS,
            };
            (None, Some(ScaleOut::start(&parts).await?))
        }
    };
    let pid = hale.as_ref().and_then(Hale::pid);
    let (root, logs) = match (&hale, &scale) {
        (Some(h), _) => (h.base.clone(), h.logs()),
        (None, Some(x)) => (x.base.clone(), x.logs()),
        (None, None) => unreachable!("a hale runs in either mode"),
    };
    match args.peer {
        Some(p) => println!("the peer {p:?} at {root} (not hale)"),
        None => println!("hale at {root} ({})", args.mode.name()),
    }
    let ctx = Arc::new(Ctx {
        python: s.python.clone(),
        sdk_dir: s.sdk_dir.clone(),
        clis: s.clis.clone(),
        root: root.clone(),
        work: s.work.clone(),
        client_retries: args.client_retries.unwrap_or(match args.mode {
            Mode::Embedded => 0,
            Mode::ScaleOut => 2,
        }),
    });

    // The reference: an earlier fault-free run, else the warm-up's tasks
    // (none for a fault-free run: it is the reference).
    let (baseline, reference) = match loaded {
        Some(r) => (Vec::new(), Some(r)),
        None if args.no_faults || args.baseline_tasks == 0 => (Vec::new(), None),
        None => {
            let (baseline, per_task) = run_baseline(&ctx, &args, &providers, &s.http).await;
            if baseline.iter().all(|e| e.failure.is_some()) {
                bail!(
                    "no fault-free task finished: {:?}\nhale log: {}",
                    baseline.first().and_then(|e| e.failure.clone()),
                    logs
                );
            }
            let r = Reference {
                label: format!("{} warm-up tasks per client", args.baseline_tasks),
                per_task,
                walls: walls(&baseline),
            };
            (baseline, Some(r))
        }
    };

    let start_tokens = tokens(&providers.stats(&s.http).await);
    let mut samples = samples_of(scale.as_ref(), pid, "start");
    let t0 = Instant::now();
    let fleet = start_fleet(&ctx, &args, t0 + total);
    // hale's tool jobs: a peer has none.
    let job_reader = args
        .peer
        .is_none()
        .then(|| JobReader::follow(s.http.clone(), root.clone()));
    let mut player = Player {
        providers: &mut providers,
        tools: &mut tools,
        http: &s.http,
        bin: &s.bin,
        work: &s.work,
        plan: &plan,
        scale: scale.as_mut(),
        pid,
        active: BTreeMap::new(),
        counts: BTreeMap::new(),
        applied: BTreeMap::new(),
        touched: BTreeMap::new(),
        windows: Vec::new(),
        open: BTreeMap::new(),
    };
    player.play(t0, total, &mut samples).await?;
    let ends = fleet.join().await;
    let tool_jobs = match job_reader {
        Some(r) => ToolJobs::of(&r.finish(&s.http, &root).await),
        None => ToolJobs::default(),
    };
    player.end_all().await?;
    let (applied, touched, windows) = (player.applied, player.touched, player.windows);
    samples.extend(samples_of(scale.as_ref(), pid, "end"));
    let wall = t0.elapsed();
    let end_stats = providers.stats(&s.http).await;
    let end_tokens = tokens(&end_stats);

    // hale's journal and agents: a peer has neither.
    let journal = match args.peer {
        Some(_) => Journal::default(),
        None => read_journal(&s.http, &root, &ends).await,
    };
    let scale_out = match &scale {
        Some(x) => Some(ScaleOutReport {
            events: x.events().await?,
            skipped: x.skipped.clone(),
        }),
        None => None,
    };
    // A deployment's fault meets model turns, a tool node's tool jobs.
    let calls: Vec<JournalTurn> = journal
        .turns
        .iter()
        .chain(&tool_jobs.calls)
        .cloned()
        .collect();
    let faults = fault_endings(&windows, &calls)
        .into_iter()
        .zip(windows)
        .map(|(endings, window)| PlayedFault { window, endings })
        .collect();
    let paused = match args.peer {
        Some(_) => 0,
        None => paused_agents(&s.http, &root).await,
    };
    let mut results = Results {
        args: &args,
        schedule: &plan,
        reference,
        baseline,
        tasks: ends,
        left_out,
        tokens: json!({"run": [end_tokens.0 - start_tokens.0, end_tokens.1 - start_tokens.1]}),
        journal,
        tool_jobs,
        faults_started: applied.iter().map(|(c, n)| (c.name(), *n)).collect(),
        faults_touched: touched.iter().map(|(c, n)| (c.name(), *n)).collect(),
        faults,
        chaos: end_stats,
        samples,
        paused_agents: paused,
        wall_s: wall.as_secs_f64(),
        scale_out,
    };
    let (per, extra) = (results.per_task(), results.extra_percent());
    results.tokens["per_finished_task"] = json!([per.0, per.1]);
    results.tokens["extra_percent"] = json!([extra.0, extra.1]);
    print_table(&results, &applied, &touched);
    write_results(&args.out, &results)?;
    drop(hale);
    drop(scale);
    Ok(())
}

fn write_results(out: &Path, results: &Results<'_>) -> anyhow::Result<()> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).ok();
    }
    std::fs::write(out, serde_json::to_vec_pretty(results)?)
        .with_context(|| format!("cannot write {}", out.display()))?;
    println!("results: {}", out.display());
    Ok(())
}

/// Prints the run's table (markdown, as BENCHMARKS.md shows it).
fn print_table(
    r: &Results<'_>,
    applied: &BTreeMap<FaultClass, u64>,
    touched: &BTreeMap<FaultClass, u64>,
) {
    let ends = &r.tasks;
    let mut by_why: BTreeMap<String, u64> = BTreeMap::new();
    for e in ends.iter().filter_map(|e| e.failure.as_ref()) {
        *by_why.entry(e.clone()).or_default() += 1;
    }
    let fmt = |x: Option<f64>, unit: &str| x.map_or("n/a".to_owned(), |v| format!("{v:.1}{unit}"));
    println!();
    let mode = match r.args.peer {
        Some(p) => format!("through the peer {p:?} (not hale)"),
        None => r.args.mode.name().to_owned(),
    };
    // hale's own columns, `n/a` through a peer.
    let hale_only = |v: String| {
        if r.args.peer.is_some() {
            "n/a".to_owned()
        } else {
            v
        }
    };
    println!(
        "## The chaos hour: seed {}, {:.1} min, {mode}, {} agent loops ({} faults played)",
        r.args.seed,
        r.wall_s / 60.0,
        r.args.clients * r.args.kinds.len(),
        applied.values().sum::<u64>()
    );
    println!();
    println!("| client kind | tasks started | finished correctly | failed |");
    println!("|---|---|---|---|");
    for &kind in &r.args.kinds {
        let of: Vec<&TaskEnd> = ends.iter().filter(|e| e.kind == kind).collect();
        let ok = of.iter().filter(|e| e.failure.is_none()).count();
        println!(
            "| {} ({} loops) | {} | {ok} | {} |",
            kind.name(),
            r.args.clients,
            of.len(),
            of.len() - ok
        );
    }
    for (why, n) in &by_why {
        println!("|   failed: {why} | | | {n} |");
    }
    for (kind, why) in &r.left_out {
        println!("| {}: left out ({why}) | n/a | n/a | n/a |", kind.name());
    }
    println!();
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| operator actions needed (agents left paused) | {} |",
        hale_only(r.paused_agents.to_string())
    );
    let (per, extra) = (r.per_task(), r.extra_percent());
    let w = walls(ends);
    let reference = match &r.reference {
        Some(f) => format!(
            "against {}: {:.0} / {:.0} per task, p50 / p99 {} / {}",
            f.label,
            f.per_task.0,
            f.per_task.1,
            fmt(percentile(&f.walls, 0.5), " s"),
            fmt(percentile(&f.walls, 0.99), " s")
        ),
        None => "no reference (pass --reference <a --no-faults run's JSON>)".to_owned(),
    };
    println!(
        "| provider tokens per finished task, input / output | {} / {} |",
        fmt(per.0, ""),
        fmt(per.1, "")
    );
    println!(
        "| extra provider tokens per finished task, input / output | {} / {} ({reference}) |",
        fmt(extra.0, " %"),
        fmt(extra.1, " %")
    );
    println!(
        "| task wall time p50 / p99 | {} / {} |",
        fmt(percentile(&w, 0.5), " s"),
        fmt(percentile(&w, 0.99), " s"),
    );
    println!(
        "| answered turns missing from the journal / counted twice | {} |",
        hale_only(format!("{} / {}", r.journal.missing, r.journal.repeated))
    );
    println!(
        "| tool jobs (the agents' `echo` through hale's /mcp) answered / run | {} |",
        hale_only(format!("{} / {}", r.tool_jobs.answered, r.tool_jobs.read))
    );
    if let Some(x) = &r.scale_out {
        let e = &x.events;
        println!(
            "| events in the outbox (PostgreSQL){} | {} |",
            if e.drained {
                ""
            } else {
                ", sinks NOT drained when counted"
            },
            e.outbox
        );
        for (name, c) in [
            ("NATS (JetStream stream)", &e.nats),
            ("the webhook receiver", &e.webhook),
        ] {
            println!(
                "| events lost / duplicated at {name} | {} / {} ({} received, {} not in the outbox) |",
                c.lost, c.duplicated, c.received, c.unknown
            );
        }
        println!("| dead letters | {} |", e.dead_letters);
        for why in &x.skipped {
            println!("| skipped | {why} |");
        }
    }
    for s in &r.samples {
        println!(
            "| {} RSS / open fds at the {} | {} KiB / {} |",
            r.args.peer.map_or(s.instance.clone(), |p| format!("{p:?}")),
            s.at,
            s.rss_kib.map_or("n/a".into(), |v| v.to_string()),
            s.fds.map_or("n/a".into(), |v| v.to_string())
        );
    }
    print_fault_table(r, applied, touched);
}

/// Per fault class: times started, requests chaos applied it to, and the
/// turns (a tool node's fault: the tool jobs) it touched by how each ended
/// (hale's journal).
fn print_fault_table(
    r: &Results<'_>,
    applied: &BTreeMap<FaultClass, u64>,
    touched: &BTreeMap<FaultClass, u64>,
) {
    println!();
    let names: Vec<&str> = Ending::ALL.iter().map(|e| e.name()).collect();
    println!(
        "| fault class | started | requests it touched (chaos) | turns / tool jobs it touched (journal) | {} |",
        names.join(" | ")
    );
    println!("|---|---|---|---|{}", "---|".repeat(names.len()));
    for (c, n) in applied {
        let t = match c.spec() {
            Some(_) => touched.get(c).copied().unwrap_or(0).to_string(),
            None if c.tool_node().is_some() => "n/a (tool node)".to_owned(),
            None if c.scale_out() => "n/a (hale's own part)".to_owned(),
            None => "n/a (refused)".to_owned(),
        };
        let mut by: BTreeMap<Ending, u64> = BTreeMap::new();
        for f in r.faults.iter().filter(|f| f.window.class == *c) {
            for (e, k) in &f.endings {
                *by.entry(*e).or_default() += k;
            }
        }
        let mut cells: Vec<String> = Ending::ALL
            .iter()
            .map(|e| by.get(e).copied().unwrap_or(0).to_string())
            .collect();
        let mut turns = by.values().sum::<u64>().to_string();
        if r.args.peer.is_some() {
            // The endings come from hale's journal; a peer has none.
            turns = "n/a".to_owned();
            cells.iter_mut().for_each(|c| *c = "n/a".to_owned());
        }
        println!(
            "| {} | {n} | {t} | {turns} | {} |",
            c.name(),
            cells.join(" | ")
        );
    }
    println!();
    println!("| failed attempts' class (hale's) | turns | how each ended |");
    println!("|---|---|---|");
    for (class, hows) in &r.journal.outcomes {
        let n: u64 = hows.values().sum();
        let detail: Vec<String> = hows.iter().map(|(h, k)| format!("{h}: {k}")).collect();
        println!("| {class} | {n} | {} |", detail.join(", "));
    }
    if r.args.peer.is_some() {
        println!();
        println!(
            "Through a peer the fleet never calls the tool nodes (their tools are served by hale's /mcp and tool routing), so tool-node faults touch nothing."
        );
        if let Some(peer) = r.args.peer {
            for (kind, why) in chaos_peer::unreached(peer) {
                println!("Provider kind left out through {peer:?}: {kind}: {why}.");
            }
        }
    }
    println!();
    println!(
        "Not measured yet: {}the CLIs' turn ids (see chaos_hour.rs).",
        if r.scale_out.is_some() {
            ""
        } else {
            "events at NATS and the webhook sink and dead letters (the scale-out mode measures them), "
        }
    );
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
            assert!(
                plan.iter()
                    .any(|f| f.class.tool_node().is_none() && f.deployment == d),
                "{d}"
            );
        }
        // A tool node's fault strikes its node: the first crashes, the second hangs.
        for f in plan.iter().filter(|f| f.class.tool_node().is_some()) {
            assert_eq!(Some(f.deployment), f.class.tool_node());
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

    /// A timeline row: (target, start_ms, duration_ms, class, resume).
    type TestRow<'a> = (&'a str, u64, u64, Option<&'a str>, Option<&'a str>);

    fn turn(status: &str, rows: &[TestRow<'_>], skipped: &[(&str, u64)]) -> JournalTurn {
        JournalTurn {
            status: status.to_owned(),
            started_ms: 1_000,
            timeline: rows
                .iter()
                .map(|&(t, s, d, c, r)| Row {
                    target: t.to_owned(),
                    start_ms: s,
                    duration_ms: d,
                    class: c.map(str::to_owned),
                    resume: r.map(str::to_owned),
                })
                .collect(),
            skipped: skipped
                .iter()
                .map(|&(t, s)| Row {
                    target: t.to_owned(),
                    start_ms: s,
                    duration_ms: 0,
                    class: None,
                    resume: None,
                })
                .collect(),
        }
    }

    #[test]
    fn a_turn_a_fault_touched_ends_as_its_journal_says() {
        // The fault: on `oa`, from 1 100 to 1 200 ms (wall).
        let w = Window {
            fault: 0,
            deployment: "oa",
            class: FaultClass::Burst503,
            from_ms: 1_100,
            to_ms: 1_200,
        };
        let e = Some("server_error");
        let table: [(JournalTurn, Option<Ending>); 9] = [
            // Before the window, after it, or on another deployment: untouched.
            (
                turn(
                    "succeeded",
                    &[("oa/task", 0, 50, e, None), ("an/task", 60, 10, None, None)],
                    &[],
                ),
                None,
            ),
            (
                turn("succeeded", &[("oa/task", 250, 10, e, None)], &[]),
                None,
            ),
            (
                turn(
                    "succeeded",
                    &[
                        ("an/task", 150, 10, e, None),
                        ("ge/task", 170, 5, None, None),
                    ],
                    &[],
                ),
                None,
            ),
            // Failed there, answered there.
            (
                turn(
                    "succeeded",
                    &[
                        ("oa/task", 90, 20, e, None),
                        ("oa/task", 130, 10, None, None),
                    ],
                    &[],
                ),
                Some(Ending::HealedSame),
            ),
            // Failed there, another answered.
            (
                turn(
                    "succeeded",
                    &[
                        ("oa/task", 150, 5, e, None),
                        ("an/task", 160, 10, None, None),
                    ],
                    &[],
                ),
                Some(Ending::FailedOver),
            ),
            // Cut there, resumed elsewhere.
            (
                turn(
                    "succeeded",
                    &[
                        ("oa/task", 150, 5, e, None),
                        ("an/task", 160, 10, None, Some("prefill")),
                    ],
                    &[],
                ),
                Some(Ending::Resumed),
            ),
            // Failed to the client.
            (
                turn(
                    "failed",
                    &[("oa/task", 150, 5, e, None), ("an/task", 160, 10, e, None)],
                    &[],
                ),
                Some(Ending::FailedToClient),
            ),
            // Answered there, slowly.
            (
                turn("succeeded", &[("oa/task", 50, 300, None, None)], &[]),
                Some(Ending::Unharmed),
            ),
            // Passed over inside the window.
            (
                turn(
                    "succeeded",
                    &[("an/task", 150, 5, None, None)],
                    &[("oa", 150)],
                ),
                Some(Ending::RoutedAround),
            ),
        ];
        for (i, (t, want)) in table.iter().enumerate() {
            assert_eq!(ending(&w, t), *want, "row {i}");
        }
        let by = fault_endings(&[w], &table.map(|(t, _)| t));
        assert_eq!(by[0].values().sum::<u64>(), 6);
    }

    #[test]
    fn a_tool_job_a_tool_node_fault_touched_ends_as_its_timeline_says() {
        // The fault: tools_a crashed from 5 000 to 6 000 ms (wall).
        let w = Window {
            fault: 0,
            deployment: TOOL_NODES[0].0,
            class: FaultClass::ToolNodeCrash,
            from_ms: 5_000,
            to_ms: 6_000,
        };
        let (a, b) = (TOOL_NODES[0].0, TOOL_NODES[1].0);
        let attempt = |node: &str, at: u64, status: &str| {
            let mut v = json!({"step": "call", "node": node, "timestamp": at, "duration_ms": 10, "status": status});
            if status == "error" {
                v["error"] = json!("node_unreachable");
            }
            v
        };
        let job = |status: &str, ok: bool, timeline: Vec<Value>| json!({"job_id": "mcp-1", "status": status, "ok": ok, "timeline": timeline});
        let table: [(Value, Option<Ending>); 7] = [
            // Before the window, or only on another node: untouched.
            (
                job("completed", true, vec![attempt(a, 4_000, "success")]),
                None,
            ),
            (
                job("completed", true, vec![attempt(b, 5_500, "success")]),
                None,
            ),
            // Refused on the crashed node, answered by the next.
            (
                job(
                    "completed",
                    true,
                    vec![attempt(a, 5_100, "error"), attempt(b, 5_120, "success")],
                ),
                Some(Ending::FailedOver),
            ),
            // Refused, then answered by the same node once it was back.
            (
                job(
                    "completed",
                    true,
                    vec![attempt(a, 5_900, "error"), attempt(a, 6_100, "success")],
                ),
                Some(Ending::HealedSame),
            ),
            // Its breaker open: passed over, served elsewhere.
            (
                job(
                    "completed",
                    true,
                    vec![attempt(a, 5_200, "skipped"), attempt(b, 5_200, "success")],
                ),
                Some(Ending::RoutedAround),
            ),
            // Failed, or never finished: the agent got no answer.
            (
                job(
                    "failed",
                    false,
                    vec![attempt(a, 5_300, "error"), attempt(b, 5_310, "error")],
                ),
                Some(Ending::FailedToClient),
            ),
            (
                job("running", false, vec![attempt(a, 5_400, "error")]),
                Some(Ending::FailedToClient),
            ),
        ];
        for (i, (j, want)) in table.iter().enumerate() {
            let t = job_turn(j).expect("a job with a timeline");
            assert_eq!(ending(&w, &t), *want, "row {i}");
        }
        let jobs: Vec<Value> = table.iter().map(|(j, _)| j.clone()).collect();
        let read = ToolJobs::of(&jobs);
        assert_eq!((read.read, read.answered), (7, 5));
        // A deployment's fault does not meet a tool job.
        let on_a_deployment = Window {
            deployment: DEPLOYMENTS[0].0,
            class: FaultClass::Burst503,
            ..w
        };
        assert!(
            read.calls
                .iter()
                .all(|t| ending(&on_a_deployment, t).is_none())
        );
    }

    #[test]
    fn a_reference_of_another_mode_or_fleet_is_refused() {
        use clap::Parser;
        let args = |extra: &[&str]| {
            let mut a = vec!["chaos-hour", "--minutes", "3"];
            a.extend_from_slice(extra);
            HourArgs::try_parse_from(a).expect("valid arguments")
        };
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("ref.json");
        let reference = args(&["--no-faults"]);
        let results = json!({"args": reference, "tasks": []});
        std::fs::write(&path, results.to_string()).expect("written");
        assert!(load_reference(&path, &args(&[])).is_ok());
        for other in [&["--mode", "scale-out"][..], &["--clis"], &["--seed", "6"]] {
            let err = load_reference(&path, &args(other)).expect_err("another workload");
            assert!(err.to_string().contains("not the same workload"), "{err}");
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

    #[test]
    fn no_two_tasks_of_a_run_share_a_name() {
        let mut seen = std::collections::HashSet::new();
        for client in 0..16 {
            for n in 0..5_000 {
                assert!(
                    seen.insert(task_of(41, client, n, 8).name()),
                    "client {client}, task {n}"
                );
            }
        }
    }
}
