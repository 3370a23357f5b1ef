//! `hale-bench`: hale's gateway load benchmark (BENCHMARKS.md, "Gateway load").
//!
//! Starts `hale chaos` (model `ok`: a normal answer, the cheapest provider
//! there is), a bare pass-through proxy in front of it (bare.rs: hyper server
//! and hale's upstream client, nothing else) and `hale serve` in front of it,
//! with the journal on, as separate processes. Then, for each mode
//! (non-streaming, streaming) and each concurrency, it runs the same
//! closed-loop load DIRECT against chaos, through the BARE proxy and THROUGH
//! hale, back to back, and reports all three: bare − direct is the cost of a
//! proxy hop on this stack, hale − bare is what hale itself adds. The runs sit
//! next to each other in time, so the machine's noise hits them alike; the
//! ratios and differences are the figures to read, not the absolute numbers.
//! hale's resident memory (VmRSS, and its peak VmHWM) is read from `/proc`
//! after start and after each run.
//!
//! Nothing is pinned: client, chaos and hale share the machine's cores, and
//! the client competes for CPU (through hale there are two servers to run).

mod bare;
mod chaos_hour;
mod chaos_peer;
mod duration;
mod hash;
mod health;
mod load;
mod peers;
mod procs;
mod scale_out;
mod soak;
mod stats;

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use serde::Serialize;
use stats::Summary;
use std::path::PathBuf;
use std::time::Duration;

/// The bare proxy shares hale's allocator, so the floor is hale's own stack.
#[global_allocator]
static GLOBAL: hale_alloc::Alloc = hale_alloc::ALLOC;

#[derive(Parser, Debug, Clone, Serialize)]
#[command(
    name = "hale-bench",
    about = "hale's gateway load benchmark: direct vs through hale"
)]
struct Args {
    /// Measured time per run, e.g. `10s`, `500ms`.
    #[arg(long, default_value = "10s", value_parser = duration::parse_duration)]
    #[serde(serialize_with = "duration::ser_duration")]
    duration: Duration,
    /// Warm-up per run (not measured).
    #[arg(long, default_value = "2s", value_parser = duration::parse_duration)]
    #[serde(serialize_with = "duration::ser_duration")]
    warmup: Duration,
    /// Concurrencies (closed-loop workers, one connection each), comma-separated.
    #[arg(long, default_value = "1,8,64", value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// Which modes to run.
    #[arg(long, value_enum, default_value_t = load::StreamMode::Both)]
    stream: load::StreamMode,
    /// The model asked of chaos (`ok` = a normal answer of `tokens` words).
    #[arg(long, default_value = "ok:tokens=16")]
    model: String,
    /// Size of the user message in each request, in bytes.
    #[arg(long, default_value_t = 1000)]
    prompt_bytes: usize,
    /// Requests per task: each worker is its own agent and starts a new task
    /// (`X-Hale-Task`) this often, so hale's per-task guard (max_events)
    /// does not stop the load as it would stop a runaway agent.
    #[arg(long, default_value_t = 200)]
    task_turns: u64,
    /// Worker threads of the load client's runtime.
    #[arg(long, default_value_t = 1)]
    client_threads: usize,
    /// hale's data_dir (the SQLite journal); default: a fresh temporary dir
    /// on disk. Point it at a tmpfs to take the disk out of the picture.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The hale binary; default: `hale` next to this binary, or target/release/hale.
    #[arg(long)]
    hale_bin: Option<PathBuf>,
    /// Where to write the results as JSON.
    #[arg(long, default_value = "target/hale-bench.json")]
    out: PathBuf,
    /// Skip the direct and bare-proxy runs (e.g. while profiling hale).
    #[arg(long)]
    hale_only: bool,
    /// hale's `journal.bodies` (all | needed | off); default: hale's default.
    #[arg(long)]
    journal_bodies: Option<String>,
    /// hale's `journal.durability` (durable | relaxed); default: hale's default.
    #[arg(long)]
    journal_durability: Option<String>,
    /// Skip the bare-proxy runs.
    #[arg(long)]
    no_bare: bool,
    /// The bare proxy's upstream client.
    #[arg(long, value_enum, default_value_t = BareClient::Reqwest)]
    bare_client: BareClient,
    /// hale's `storage` (e.g. `postgres://postgres@127.0.0.1:5432/db`);
    /// default: SQLite in the data dir.
    #[arg(long)]
    storage: Option<String>,
    /// hale instances on the one `--storage` (PostgreSQL when more than one);
    /// the client takes them in turn, request by request (round robin).
    #[arg(long, default_value_t = 1)]
    instances: usize,
    /// Each worker becomes a new agent every this many requests
    /// (`X-Hale-Agent: a<worker>-<run>-<k>`), to see what hale keeps per agent.
    #[arg(long)]
    agents_every: Option<u64>,
    /// Sample hale's VmRSS this often during each through-hale run (e.g.
    /// `60s`), printed and written to the JSON.
    #[arg(long, value_parser = duration::parse_duration)]
    #[serde(serialize_with = "ser_opt_duration")]
    rss_every: Option<Duration>,
}

fn ser_opt_duration<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

/// One sample of hale's memory during a run.
#[derive(Debug, Clone, Serialize)]
struct RssSample {
    /// Seconds since the run (warm-up included) started.
    at_s: f64,
    rss_kib: u64,
    peak_rss_kib: u64,
}

/// Samples `pid`'s VmRSS every `every` until `stop` is set.
async fn sample_rss(
    pid: u32,
    every: Duration,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<RssSample> {
    let t0 = std::time::Instant::now();
    let mut out = Vec::new();
    let mut next = t0 + every;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if std::time::Instant::now() >= next {
            next += every;
            if let Some((rss, peak)) = procs::rss_kib(pid) {
                let at_s = t0.elapsed().as_secs_f64();
                let (anon, file) = procs::rss_parts_kib(pid).unwrap_or_default();
                eprintln!(
                    "  t={at_s:>6.0}s hale VmRSS {rss} KiB (peak {peak} KiB; anon {anon}, file {file})"
                );
                out.push(RssSample {
                    at_s,
                    rss_kib: rss,
                    peak_rss_kib: peak,
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    out
}

/// hale's CPU time (utime + stime) over a row's measured window, per turn
/// completed in it: in all and per thread group (procs::THREAD_GROUPS).
/// CPU seconds move less with the machine's load than throughput does.
#[derive(Debug, Clone, Serialize)]
struct CpuPerTurn {
    turns: u64,
    window_s: f64,
    all_us: f64,
    /// µs per turn by thread group, in procs::THREAD_GROUPS order.
    groups_us: std::collections::BTreeMap<&'static str, f64>,
}

impl CpuPerTurn {
    fn new(a: procs::CpuTicks, b: procs::CpuTicks, turns: u64, window: Duration) -> Option<Self> {
        if turns == 0 {
            return None;
        }
        let us = |t0: u64, t1: u64| {
            t1.saturating_sub(t0) as f64 * 1e6 / procs::TICKS_PER_S as f64 / turns as f64
        };
        Some(CpuPerTurn {
            turns,
            window_s: window.as_secs_f64(),
            all_us: us(a.all, b.all),
            groups_us: procs::THREAD_GROUPS
                .iter()
                .enumerate()
                .map(|(i, g)| (*g, us(a.groups[i], b.groups[i])))
                .collect(),
        })
    }

    /// "all / journal-sqlite / sqlx-sqlite-worker / tokio" µs per turn.
    fn cell(&self) -> String {
        let g = |k: &str| self.groups_us.get(k).copied().unwrap_or(0.0);
        format!(
            "{:.0} / {:.0} / {:.0} / {:.0}",
            self.all_us,
            g("journal-sqlite"),
            g("sqlx-sqlite-worker"),
            g("tokio")
        )
    }
}

/// Turns started and group commits made, summed over hale's instances
/// (`/metrics`); `None` when an instance does not answer.
async fn journal_counts(addrs: &[std::net::SocketAddr]) -> Option<(f64, f64)> {
    let mut sum = (0.0, 0.0);
    for &a in addrs {
        let v = procs::metric_values(a, &["hale_turns_started_total", "hale_store_commits_total"])
            .await?;
        sum.0 += v[0];
        sum.1 += v[1];
    }
    Some(sum)
}

/// `pid`'s CPU time at the start and at the end of a load run's measured
/// window (`warmup` after now, lasting `duration`), as load::run times it.
async fn sample_cpu_window(
    pid: u32,
    warmup: Duration,
    duration: Duration,
) -> Option<(procs::CpuTicks, procs::CpuTicks)> {
    let start = tokio::time::Instant::now() + warmup;
    tokio::time::sleep_until(start).await;
    let a = procs::cpu_ticks(pid)?;
    tokio::time::sleep_until(start + duration).await;
    let b = procs::cpu_ticks(pid)?;
    Some((a, b))
}

/// The bare proxy's upstream client (`--bare-client`).
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum BareClient {
    /// reqwest, as hale used it for providers before hyper-util (and still
    /// does behind a proxy variable).
    Reqwest,
    /// hyper-util's pooled client without reqwest's layers: the client of
    /// hale's provider attempts, so the floor of hale's own stack.
    Hyper,
}

/// One (mode, concurrency) row of the results.
#[derive(Debug, Serialize)]
struct Row {
    mode: &'static str,
    concurrency: usize,
    direct: Option<Summary>,
    /// Through the bare pass-through proxy (bare.rs).
    bare: Option<Summary>,
    hale: Summary,
    /// hale p50 − direct p50, µs.
    added_p50_us: Option<f64>,
    /// hale p99 − direct p99, µs.
    added_p99_us: Option<f64>,
    /// hale RPS / direct RPS.
    rps_ratio: Option<f64>,
    /// hale p50 − bare p50, µs: what hale adds over a bare proxy.
    over_bare_p50_us: Option<f64>,
    /// hale p99 − bare p99, µs.
    over_bare_p99_us: Option<f64>,
    /// hale RPS / bare RPS.
    bare_rps_ratio: Option<f64>,
    /// hale's VmRSS / VmHWM (peak so far) right after this row's runs, KiB.
    hale_rss_kib: Option<u64>,
    hale_peak_rss_kib: Option<u64>,
    /// hale's CPU per turn in this row's measured window.
    #[serde(skip_serializing_if = "Option::is_none")]
    hale_cpu: Option<CpuPerTurn>,
    /// Turns per group commit of hale's journal over this row's hale run
    /// (warm-up included), summed over the instances: what the journal's
    /// cost per turn depends on.
    #[serde(skip_serializing_if = "Option::is_none")]
    hale_turns_per_commit: Option<f64>,
    /// hale's VmRSS during the run, every `--rss-every`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    hale_rss_samples: Vec<RssSample>,
}

#[derive(Debug, Serialize)]
struct Report {
    machine: procs::Machine,
    unix_time: u64,
    args: Args,
    journal_bytes: u64,
    /// hale's VmRSS right after start (ready, no traffic), KiB.
    hale_start_rss_kib: Option<u64>,
    rows: Vec<Row>,
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn main() -> anyhow::Result<()> {
    // As hale does, before any thread exists.
    hale_alloc::purge_at_once();
    hale_alloc::no_huge_pages();
    // `hale-bench soak …`: the overlapping-faults soak (soak.rs).
    if std::env::args().nth(1).as_deref() == Some("soak") {
        let args = soak::SoakArgs::parse_from(std::env::args().skip(1));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        return rt.block_on(soak::run(args));
    }
    // `hale-bench health …`: seed 004's health targets (health.rs), and
    // `hale-bench health-child`, the crash-looping agent it runs under `hale run`.
    if std::env::args().nth(1).as_deref() == Some("health") {
        let args = health::HealthArgs::parse_from(std::env::args().skip(1));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        return rt.block_on(health::run(args));
    }
    if std::env::args().nth(1).as_deref() == Some("health-child") {
        let args = health::ChildArgs::parse_from(std::env::args().skip(1));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::process::exit(rt.block_on(health::child(args))?);
    }
    // `hale-bench chaos-hour …`: agents finish tool tasks through rotating
    // faults on every provider kind (chaos_hour.rs).
    if std::env::args().nth(1).as_deref() == Some("chaos-hour") {
        let args = chaos_hour::HourArgs::parse_from(std::env::args().skip(1));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        return rt.block_on(chaos_hour::run(args));
    }
    // `hale-bench peers …`: hale against the peers users would pick (peers.rs).
    if std::env::args().nth(1).as_deref() == Some("peers") {
        let args = peers::PeersArgs::parse_from(std::env::args().skip(1));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        return rt.block_on(peers::run(args));
    }
    // `hale-bench hash …`: the request hash's native cost (hash.rs).
    if std::env::args().nth(1).as_deref() == Some("hash") {
        return hash::run(hash::HashArgs::parse_from(std::env::args().skip(1)));
    }
    // `hale-bench bare-proxy …`: the floor, run as its own process (bare.rs).
    if std::env::args().nth(1).as_deref() == Some("bare-proxy") {
        let args = bare::BareArgs::parse_from(std::env::args().skip(1));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        return rt.block_on(bare::run(args));
    }
    let args = Args::parse();
    if args.concurrency.is_empty() || args.concurrency.contains(&0) {
        bail!("--concurrency needs positive numbers, e.g. 1,8,64");
    }
    if args.instances == 0 || (args.instances > 1 && args.storage.is_none()) {
        bail!("--instances above 1 needs a shared --storage (postgres://…)");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.client_threads.max(1))
        .enable_all()
        .build()?;
    rt.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let bin = procs::find_hale(args.hale_bin.as_deref())?;
    let work = tempfile::Builder::new().prefix("hale-bench-").tempdir()?;
    let data_dir = match &args.data_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
            d.clone()
        }
        None => work.path().join("data"),
    };
    let m = procs::machine();
    eprintln!(
        "hale-bench: {} ({} cores: {}), data_dir {}",
        bin.display(),
        m.nproc,
        m.cpu,
        data_dir.display()
    );
    let chaos = procs::start_chaos(&bin, work.path()).await?;
    let journal: Vec<String> = [
        ("bodies", &args.journal_bodies),
        ("durability", &args.journal_durability),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}: {v}")))
    .collect();
    let mut extra = if journal.is_empty() {
        String::new()
    } else {
        format!("journal: {{{}}}\n", journal.join(", "))
    };
    if let Some(url) = &args.storage {
        extra.push_str(&format!(
            "storage: {}\n",
            serde_json::to_string(url).unwrap_or_default()
        ));
    }
    let mut hales = Vec::with_capacity(args.instances);
    for i in 0..args.instances {
        // Each instance its own data dir (its lock file); the journal is the shared storage.
        let dir = if i == 0 {
            data_dir.clone()
        } else {
            data_dir.join(format!("instance-{i}"))
        };
        hales.push(
            procs::start_hale(&bin, work.path(), chaos.addr, &args.model, &dir, &extra, i).await?,
        );
    }
    let hale = &hales[0];
    let bare = if args.hale_only || args.no_bare {
        None
    } else {
        Some(
            procs::start_bare(
                work.path(),
                chaos.addr,
                args.bare_client == BareClient::Hyper,
            )
            .await?,
        )
    };
    let hale_pid = hale.child.id();
    let hale_start_rss_kib = procs::rss_kib(hale_pid).map(|(rss, _)| rss);
    eprintln!(
        "chaos pid {} at {}, bare {:?}, hale pid {} at {} (VmRSS {:?} KiB after start)",
        chaos.child.id(),
        chaos.addr,
        bare.as_ref().map(|b| b.addr),
        hale_pid,
        hale.addr,
        hale_start_rss_kib,
    );

    let modes = args.stream.modes();
    let path = "/v1/chat/completions".to_owned();
    let direct_ep = load::Endpoint::one(chaos.addr, path.clone());
    let bare_ep = bare
        .as_ref()
        .map(|b| load::Endpoint::one(b.addr, path.clone()));
    let hale_ep = load::Endpoint {
        addrs: hales.iter().map(|h| h.addr).collect(),
        path,
        headers: Vec::new(),
    };
    let mut rows = Vec::new();
    for &(mode, stream) in modes {
        for &c in &args.concurrency {
            let spec = load::LoadSpec {
                concurrency: c,
                warmup: args.warmup,
                duration: args.duration,
                stream,
                bodies: load::chat_bodies(&args.model, stream, args.prompt_bytes),
                task_turns: args.task_turns,
                agents_every: args.agents_every,
                anonymous: false,
            };
            let direct = if args.hale_only {
                None
            } else {
                let d = load::run(&direct_ep, &spec).await?;
                eprintln!(
                    "{mode:>8} c={c:<3} direct: {:>8.0} rps p50 {:>7.1} µs p99 {:>7.1} µs",
                    d.rps, d.p50_us, d.p99_us
                );
                Some(d)
            };
            let bare = match &bare_ep {
                Some(ep) => {
                    let b = load::run(ep, &spec).await?;
                    eprintln!(
                        "{mode:>8} c={c:<3} bare:   {:>8.0} rps p50 {:>7.1} µs p99 {:>7.1} µs",
                        b.rps, b.p50_us, b.p99_us
                    );
                    Some(b)
                }
                None => None,
            };
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let sampler = args
                .rss_every
                .map(|every| tokio::spawn(sample_rss(hale_pid, every, stop.clone())));
            let cpu = tokio::spawn(sample_cpu_window(hale_pid, spec.warmup, spec.duration));
            let journal_before = journal_counts(&hale_ep.addrs).await;
            let h = load::run(&hale_ep, &spec).await?;
            let hale_turns_per_commit = journal_before
                .zip(journal_counts(&hale_ep.addrs).await)
                .and_then(|((t0, c0), (t1, c1))| (c1 > c0).then(|| (t1 - t0) / (c1 - c0)));
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let hale_cpu = cpu
                .await
                .ok()
                .flatten()
                .and_then(|(a, b)| CpuPerTurn::new(a, b, h.requests, spec.duration));
            let hale_rss_samples = match sampler {
                Some(t) => t.await.unwrap_or_default(),
                None => Vec::new(),
            };
            let mem = procs::rss_kib(hale_pid);
            for (who, s) in [
                ("direct", direct.as_ref()),
                ("bare", bare.as_ref()),
                ("hale", Some(&h)),
            ] {
                if let Some(e) = s.and_then(|s| s.first_error.as_deref()) {
                    eprintln!(
                        "{mode:>8} c={c:<3} {who}: {} errors, first: {e}",
                        s.map_or(0, |s| s.errors)
                    );
                }
            }
            eprintln!(
                "{mode:>8} c={c:<3} hale:   {:>8.0} rps p50 {:>7.1} µs p99 {:>7.1} µs, VmRSS/VmHWM {:?} KiB (anon/file {:?}), {} agents, cpu µs/turn (all / journal-sqlite / sqlx-sqlite-worker / tokio) {}, turns per commit {}",
                h.rps,
                h.p50_us,
                h.p99_us,
                mem,
                procs::rss_parts_kib(hale_pid),
                h.agents,
                hale_cpu
                    .as_ref()
                    .map_or_else(|| "–".to_owned(), CpuPerTurn::cell),
                hale_turns_per_commit.map_or_else(|| "–".to_owned(), |t| format!("{t:.1}")),
            );
            rows.push(Row {
                mode,
                concurrency: c,
                added_p50_us: direct.as_ref().map(|d| h.p50_us - d.p50_us),
                added_p99_us: direct.as_ref().map(|d| h.p99_us - d.p99_us),
                rps_ratio: direct
                    .as_ref()
                    .filter(|d| d.rps > 0.0)
                    .map(|d| h.rps / d.rps),
                over_bare_p50_us: bare.as_ref().map(|b| h.p50_us - b.p50_us),
                over_bare_p99_us: bare.as_ref().map(|b| h.p99_us - b.p99_us),
                bare_rps_ratio: bare.as_ref().filter(|b| b.rps > 0.0).map(|b| h.rps / b.rps),
                hale_rss_kib: mem.map(|m| m.0),
                hale_peak_rss_kib: mem.map(|m| m.1),
                hale_cpu,
                hale_turns_per_commit,
                hale_rss_samples,
                direct,
                bare,
                hale: h,
            });
        }
    }
    let journal_bytes = dir_bytes(&data_dir);
    drop(hales);
    drop(bare);
    drop(chaos);

    print!("{}", table(&rows));
    println!(
        "journal: {} KiB in {} (SQLite file, WAL and index included; warm-up turns are journalled too)",
        journal_bytes / 1024,
        data_dir.display()
    );
    let report = Report {
        machine: m,
        unix_time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        args: args.clone(),
        journal_bytes,
        hale_start_rss_kib,
        rows,
    };
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    println!("results written to {}", args.out.display());
    Ok(())
}

/// The results as a Markdown table (latencies in ms, as BENCHMARKS.md shows
/// them): direct, bare proxy and hale side by side, hale's additions over
/// direct and over the bare proxy, and hale's memory after the row.
fn table(rows: &[Row]) -> String {
    let ms = |us: f64| format!("{:.3}", us / 1000.0);
    let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or_else(|| "–".to_owned(), f);
    let rps = |v: f64| format!("{v:.0}");
    let ratio = |v: f64| format!("{v:.2}");
    let mut out = String::from(
        "| mode | c | direct RPS | bare RPS | hale RPS | direct p50 ms | bare p50 ms | hale p50 ms | direct p99 ms | bare p99 ms | hale p99 ms | hale added p50 / p99 ms over direct | over bare | hale/direct RPS | hale/bare RPS | hale RSS / peak MiB | hale cpu µs/turn (all / journal-sqlite / sqlx-sqlite-worker / tokio) | errors |\n\
         |---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    for r in rows {
        let d = r.direct.as_ref();
        let b = r.bare.as_ref();
        let mib = |k: Option<u64>| {
            k.map_or_else(|| "–".to_owned(), |k| format!("{:.0}", k as f64 / 1024.0))
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} | {} | {} | {} / {} | {} | {} |\n",
            r.mode,
            r.concurrency,
            opt(d.map(|d| d.rps), &rps),
            opt(b.map(|b| b.rps), &rps),
            rps(r.hale.rps),
            opt(d.map(|d| d.p50_us), &ms),
            opt(b.map(|b| b.p50_us), &ms),
            ms(r.hale.p50_us),
            opt(d.map(|d| d.p99_us), &ms),
            opt(b.map(|b| b.p99_us), &ms),
            ms(r.hale.p99_us),
            opt(r.added_p50_us, &ms),
            opt(r.added_p99_us, &ms),
            opt(r.over_bare_p50_us, &ms),
            opt(r.over_bare_p99_us, &ms),
            opt(r.rps_ratio, &ratio),
            opt(r.bare_rps_ratio, &ratio),
            mib(r.hale_rss_kib),
            mib(r.hale_peak_rss_kib),
            r.hale_cpu
                .as_ref()
                .map_or_else(|| "–".to_owned(), CpuPerTurn::cell),
            d.map_or(0, |d| d.errors) + b.map_or(0, |b| b.errors) + r.hale.errors,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shows_added_latency_and_ratio_per_row() {
        let s = |rps: f64, p50: f64, p99: f64| Summary {
            requests: 10,
            errors: 0,
            rps,
            p50_us: p50,
            p90_us: p50,
            p99_us: p99,
            max_us: p99,
            ttfb_p50_us: p50,
            ttfb_p99_us: p99,
            first_error: None,
            agents: 0,
        };
        let rows = vec![Row {
            mode: "complete",
            concurrency: 8,
            direct: Some(s(1000.0, 100.0, 200.0)),
            bare: Some(s(900.0, 120.0, 300.0)),
            hale: s(800.0, 150.0, 400.0),
            added_p50_us: Some(50.0),
            added_p99_us: Some(200.0),
            rps_ratio: Some(0.8),
            over_bare_p50_us: Some(30.0),
            over_bare_p99_us: Some(100.0),
            bare_rps_ratio: Some(800.0 / 900.0),
            hale_rss_kib: Some(20 * 1024),
            hale_peak_rss_kib: Some(30 * 1024),
            hale_cpu: CpuPerTurn::new(
                procs::CpuTicks {
                    all: 100,
                    groups: [10, 0, 80, 10],
                },
                procs::CpuTicks {
                    all: 180,
                    groups: [20, 4, 140, 15],
                },
                4000,
                Duration::from_secs(5),
            ),
            hale_turns_per_commit: Some(20.0),
            hale_rss_samples: Vec::new(),
        }];
        let t = table(&rows);
        assert!(t.contains("| complete | 8 | 1000 | 900 | 800 | 0.100 | 0.120 | 0.150 | 0.200 | 0.300 | 0.400 | 0.050 / 0.200 | 0.030 / 0.100 | 0.80 | 0.89 | 20 / 30 | 200 / 25 / 10 / 150 | 0 |"), "{t}");
    }
}
