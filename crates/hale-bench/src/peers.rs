//! `hale-bench peers`: hale against the gateways users would pick instead,
//! in one run (issue 45, BENCHMARKS.md "Peers").
//!
//! One `hale chaos` provider; in front of it, each measured with the same
//! closed-loop client and workload, back to back per row: direct, the bare
//! proxy (the floor of hale's own stack), hale with the durable journal (its
//! default), hale with the relaxed one, and each peer installed in
//! `.peers/` (scripts/peers.sh installs them): TensorZero's gateway,
//! Portkey's OSS gateway and the LiteLLM proxy. Every request opens its own
//! conversation (load::Bodies::Distinct), so nothing keyed by content is
//! hit twice.
//!
//! Memory is read from `/proc` for each gateway's process tree (a peer may
//! run workers): VmRSS and its anonymous part (RssAnon, which does not move
//! with the binary's page cache), sampled during each run for its peak,
//! after start, right after the last run and after `--idle` without traffic.
//! The disk's own fsync time is measured alone first (write + fdatasync on
//! the journals' directory): at c=1 the durable journal waits for one per
//! answer, so it is the floor of durable − relaxed.

use crate::chaos_peer::{LITELLM_VENV, LITELLM_VERSION};
use crate::stats::Summary;
use crate::{duration, load, procs};
use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use serde::Serialize;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// TensorZero's release measured (PyPI `tensorzero`, its wheel holds the gateway).
pub const TENSORZERO_VERSION: &str = "2026.6.0";
/// Portkey's OSS gateway measured (npm `@portkey-ai/gateway`).
pub const PORTKEY_VERSION: &str = "1.15.2";

/// How often a run samples the gateways' memory for its peak.
const MEMORY_EVERY: Duration = Duration::from_millis(50);

#[derive(Parser, Debug, Clone, Serialize)]
#[command(
    name = "hale-bench peers",
    about = "hale against TensorZero, Portkey and LiteLLM: same client, load and machine, one run"
)]
pub struct PeersArgs {
    /// Measured time per run, e.g. `10s`.
    #[arg(long, default_value = "5s", value_parser = duration::parse_duration)]
    #[serde(serialize_with = "duration::ser_duration")]
    duration: Duration,
    /// Warm-up per run (not measured).
    #[arg(long, default_value = "1s", value_parser = duration::parse_duration)]
    #[serde(serialize_with = "duration::ser_duration")]
    warmup: Duration,
    /// Concurrencies (closed-loop workers), comma-separated.
    #[arg(long, default_value = "1,64", value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// Streamed answers, complete ones, or both.
    #[arg(long, value_enum, default_value_t = load::StreamMode::Both)]
    stream: load::StreamMode,
    /// The model asked of chaos.
    #[arg(long, default_value = "ok:tokens=16")]
    model: String,
    /// Size of each request's user message, in bytes.
    #[arg(long, default_value_t = 1000)]
    prompt_bytes: usize,
    /// The peers to measure, comma-separated (each must be installed).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [PeerKind::Tensorzero, PeerKind::Portkey, PeerKind::Litellm])]
    peers: Vec<PeerKind>,
    /// Measure hale, direct and the bare proxy only.
    #[arg(long, conflicts_with = "peers")]
    no_peers: bool,
    /// Time without traffic after the last run before memory is read again.
    #[arg(long, default_value = "60s", value_parser = duration::parse_duration)]
    #[serde(serialize_with = "duration::ser_duration")]
    idle: Duration,
    /// How long the disk's fsync time is measured alone.
    #[arg(long, default_value = "3s", value_parser = duration::parse_duration)]
    #[serde(serialize_with = "duration::ser_duration")]
    fsync: Duration,
    /// Where hale's journals go (and the fsync is measured); default: a
    /// fresh temporary directory.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The hale binary; default: next to this one, or target/release/hale.
    #[arg(long)]
    hale_bin: Option<PathBuf>,
    /// Where to write the results as JSON.
    #[arg(long, default_value = "target/hale-bench-peers.json")]
    out: PathBuf,
}

/// A peer gateway this benchmark can start.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerKind {
    /// TensorZero's gateway (PyPI `tensorzero`), through its OpenAI-compatible route.
    Tensorzero,
    /// Portkey's OSS gateway (npm `@portkey-ai/gateway`), on Node.js.
    Portkey,
    /// The LiteLLM proxy (PyPI `litellm[proxy]`), one worker.
    Litellm,
}

impl PeerKind {
    fn label(self) -> String {
        match self {
            PeerKind::Tensorzero => format!("TensorZero {TENSORZERO_VERSION}"),
            PeerKind::Portkey => format!("Portkey {PORTKEY_VERSION}"),
            PeerKind::Litellm => format!("LiteLLM {LITELLM_VERSION}"),
        }
    }

    /// What must exist (from the workspace root) for it to start.
    fn installed_at(self) -> &'static str {
        match self {
            PeerKind::Tensorzero => ".peers/tensorzero/bin/python",
            PeerKind::Portkey => {
                ".peers/portkey/node_modules/@portkey-ai/gateway/build/start-server.js"
            }
            PeerKind::Litellm => ".peers/litellm/bin/litellm",
        }
    }
}

/// A gateway under test: how to reach it and which processes are it.
struct Gateway {
    label: String,
    endpoint: load::Endpoint,
    /// The model name the gateway routes to chaos's `--model`.
    model: String,
    /// The process whose tree is the gateway (`None`: direct, chaos itself).
    pid: Option<u32>,
}

/// Memory of a process tree, KiB.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Memory {
    pub rss_kib: u64,
    pub anon_kib: u64,
}

impl Memory {
    fn max(self, o: Memory) -> Memory {
        Memory {
            rss_kib: self.rss_kib.max(o.rss_kib),
            anon_kib: self.anon_kib.max(o.anon_kib),
        }
    }
}

/// VmRSS and RssAnon summed over `pid` and its descendants.
pub fn tree_memory(pid: u32) -> Option<Memory> {
    let mut sum = Memory::default();
    for p in procs::tree(pid) {
        if let (Some((rss, _)), Some((anon, _))) = (procs::rss_kib(p), procs::rss_parts_kib(p)) {
            sum.rss_kib += rss;
            sum.anon_kib += anon;
        }
    }
    (sum.rss_kib > 0).then_some(sum)
}

/// Samples `pid`'s tree every [`MEMORY_EVERY`] until `stop`: the peak.
async fn peak_memory(pid: u32, stop: Arc<AtomicBool>) -> Memory {
    let mut peak = Memory::default();
    while !stop.load(Ordering::Relaxed) {
        if let Some(m) = tree_memory(pid) {
            peak = peak.max(m);
        }
        tokio::time::sleep(MEMORY_EVERY).await;
    }
    peak
}

/// One gateway's run of one row.
#[derive(Debug, Serialize)]
struct Run {
    gateway: String,
    mode: &'static str,
    concurrency: usize,
    summary: Summary,
    /// The peak of the gateway's memory during the run (warm-up included).
    peak: Option<Memory>,
}

/// A gateway's memory over the whole benchmark.
#[derive(Debug, Serialize)]
struct MemoryLine {
    gateway: String,
    after_start: Option<Memory>,
    /// The largest of the runs' peaks.
    peak: Option<Memory>,
    after_last_run: Option<Memory>,
    after_idle: Option<Memory>,
}

/// The disk's own time to make a small write durable.
#[derive(Debug, Serialize)]
struct Fsync {
    dir: PathBuf,
    samples: usize,
    p50_us: f64,
    p99_us: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    unix_time: u64,
    machine: procs::Machine,
    args: PeersArgs,
    fsync: Fsync,
    runs: Vec<Run>,
    memory: Vec<MemoryLine>,
}

/// Appends 4 KiB and fdatasyncs it, again and again for `for_`, in a file of
/// `dir`: the latency of the durable journal's commit at its floor.
fn measure_fsync(dir: &Path, for_: Duration) -> anyhow::Result<Fsync> {
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path).context("cannot create the fsync probe")?;
    let block = [0x5au8; 4096];
    let mut ns = Vec::new();
    let end = Instant::now() + for_;
    while Instant::now() < end {
        let t = Instant::now();
        f.write_all(&block)?;
        f.sync_data()?;
        ns.push(t.elapsed().as_nanos() as u64);
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    ns.sort_unstable();
    Ok(Fsync {
        dir: dir.to_path_buf(),
        samples: ns.len(),
        p50_us: crate::stats::percentile_us(&ns, 50.0),
        p99_us: crate::stats::percentile_us(&ns, 99.0),
    })
}

/// Starts `kind` in front of chaos at `chaos` for `model`.
async fn start_peer(
    kind: PeerKind,
    work: &Path,
    chaos: SocketAddr,
    model: &str,
) -> anyhow::Result<(procs::Proc, Gateway)> {
    let root = std::env::current_dir()?;
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    match kind {
        PeerKind::Litellm => {
            let cfg = work.join("litellm-peers.yaml");
            std::fs::write(
                &cfg,
                format!(
                    "model_list:\n  - model_name: {m}\n    litellm_params: {{model: {om}, api_base: {b}, api_key: chaos-needs-no-key}}\n\
                     litellm_settings: {{telemetry: false, drop_params: true}}\n\
                     general_settings: {{dangerously_permit_weak_or_unset_master_key: true}}\n",
                    m = q(model),
                    om = q(&format!("openai/{model}")),
                    b = q(&format!("http://{chaos}/v1")),
                ),
            )?;
            let command = format!(
                "env LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_LOG=ERROR {} --config {} --host 127.0.0.1 --port {{port}} --num_workers 1",
                root.join(LITELLM_VENV).join("bin/litellm").display(),
                cfg.display()
            );
            let p =
                procs::start_peer("litellm", &command, "/health/liveliness", chaos, work).await?;
            let g = Gateway {
                label: kind.label(),
                endpoint: load::Endpoint::one(p.addr, "/v1/chat/completions".into()),
                model: model.to_owned(),
                pid: Some(p.child.id()),
            };
            Ok((p, g))
        }
        PeerKind::Portkey => {
            // The provider is chosen per request: OpenAI's API at chaos.
            let command = format!(
                "node {} --port={{port}} --headless",
                root.join(kind.installed_at()).display()
            );
            let p = procs::start_peer("portkey", &command, "/", chaos, work).await?;
            let mut endpoint = load::Endpoint::one(p.addr, "/v1/chat/completions".into());
            endpoint.headers = vec![
                ("x-portkey-provider".into(), "openai".into()),
                ("x-portkey-custom-host".into(), format!("http://{chaos}/v1")),
                ("authorization".into(), "Bearer chaos-needs-no-key".into()),
            ];
            let g = Gateway {
                label: kind.label(),
                endpoint,
                model: model.to_owned(),
                pid: Some(p.child.id()),
            };
            Ok((p, g))
        }
        PeerKind::Tensorzero => {
            let cfg = work.join("tensorzero.toml");
            std::fs::write(
                &cfg,
                format!(
                    "[gateway]\nobservability.enabled = false\n\n\
                     [models.chaos]\nrouting = [\"chaos\"]\n\n\
                     [models.chaos.providers.chaos]\ntype = \"openai\"\nmodel_name = {m}\n\
                     api_base = {b}\napi_key_location = \"none\"\n",
                    m = q(model),
                    b = q(&format!("http://{chaos}/v1/")),
                ),
            )?;
            let command = format!(
                "{} {} {}",
                root.join(kind.installed_at()).display(),
                root.join("scripts/tensorzero_gateway.py").display(),
                cfg.display()
            );
            let (p, prefix) = start_announced("tensorzero", &command, work).await?;
            let g = Gateway {
                label: kind.label(),
                endpoint: load::Endpoint::one(p.addr, format!("{prefix}/chat/completions")),
                model: "tensorzero::model_name::chaos".into(),
                pid: Some(p.child.id()),
            };
            Ok((p, g))
        }
    }
}

/// Starts `command` (under `sh -c`), which picks its own port and prints
/// its base URL (`http://127.0.0.1:PORT/PREFIX`) as a line on stdout once
/// it listens (scripts/tensorzero_gateway.py). Returns the process and the
/// URL's path; the rest of its stdout goes to its log.
async fn start_announced(
    name: &'static str,
    command: &str,
    work: &Path,
) -> anyhow::Result<(procs::Proc, String)> {
    let log = work.join(format!("peer-{name}.log"));
    let mut out = std::fs::File::create(&log)?;
    let mut child = Command::new("sh")
        .args(["-c", &format!("exec {command}")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(out.try_clone()?)
        .spawn()
        .with_context(|| format!("cannot start peer {name}: {command}"))?;
    let stdout = child.stdout.take().context("the peer's stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("http://") {
                let _ = tx.send(line.clone());
            }
            let _ = writeln!(out, "{line}");
        }
    });
    let deadline = Instant::now() + procs::PEER_READY_TIMEOUT;
    let url = loop {
        if let Ok(url) = rx.try_recv() {
            break url;
        }
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            bail!("{name} exited with {status} before it was ready:\n{log}");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!(
                "{name} printed no address in {:?}",
                procs::PEER_READY_TIMEOUT
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (addr, prefix) = split_base_url(&url)?;
    let p = procs::Proc {
        name,
        child,
        addr,
        log,
    };
    Ok((p, prefix))
}

/// `http://127.0.0.1:PORT/a/b` → (the address, `/a/b`).
fn split_base_url(url: &str) -> anyhow::Result<(SocketAddr, String)> {
    let rest = url
        .trim()
        .strip_prefix("http://")
        .with_context(|| format!("not an http:// URL: {url:?}"))?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let addr = host
        .parse()
        .with_context(|| format!("not an address: {host:?} in {url:?}"))?;
    let path = format!("/{}", path.trim_end_matches('/'));
    Ok((addr, if path == "/" { String::new() } else { path }))
}

pub async fn run(args: PeersArgs) -> anyhow::Result<()> {
    if args.concurrency.is_empty() || args.concurrency.contains(&0) {
        bail!("--concurrency needs positive numbers, e.g. 1,64");
    }
    let peers: &[PeerKind] = if args.no_peers { &[] } else { &args.peers };
    for &k in peers {
        if !Path::new(k.installed_at()).exists() {
            bail!(
                "{} is not installed ({} is missing): run `scripts/peers.sh install` from the workspace root, which installs every peer into .peers/",
                k.label(),
                k.installed_at()
            );
        }
    }
    let bin = procs::find_hale(args.hale_bin.as_deref())?;
    let work = tempfile::Builder::new()
        .prefix("hale-bench-peers-")
        .tempdir()?;
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| work.path().join("data"));
    std::fs::create_dir_all(&data_dir)?;
    let machine = procs::machine();
    eprintln!(
        "hale-bench peers: {} ({} cores: {})",
        bin.display(),
        machine.nproc,
        machine.cpu
    );

    // The disk alone, before anything else runs.
    let fsync = {
        let (dir, for_) = (data_dir.clone(), args.fsync);
        tokio::task::spawn_blocking(move || measure_fsync(&dir, for_)).await??
    };
    eprintln!(
        "fsync of 4 KiB on {}: p50 {:.0} µs, p99 {:.0} µs ({} samples)",
        fsync.dir.display(),
        fsync.p50_us,
        fsync.p99_us,
        fsync.samples
    );

    let chaos = procs::start_chaos(&bin, work.path()).await?;
    let bare = procs::start_bare(work.path(), chaos.addr, true).await?;
    let mut procs_alive = Vec::new();
    let mut gateways = vec![
        Gateway {
            label: "direct".into(),
            endpoint: load::Endpoint::one(chaos.addr, "/v1/chat/completions".into()),
            model: args.model.clone(),
            pid: None,
        },
        Gateway {
            label: "bare proxy".into(),
            endpoint: load::Endpoint::one(bare.addr, "/v1/chat/completions".into()),
            model: args.model.clone(),
            pid: Some(bare.child.id()),
        },
    ];
    for (i, durability) in ["durable", "relaxed"].into_iter().enumerate() {
        let dir = data_dir.join(durability);
        let h = procs::start_hale(
            &bin,
            work.path(),
            chaos.addr,
            &args.model,
            &dir,
            &format!("journal: {{durability: {durability}}}\n"),
            i,
        )
        .await?;
        gateways.push(Gateway {
            label: format!("hale {durability}"),
            endpoint: load::Endpoint::one(h.addr, "/v1/chat/completions".into()),
            model: args.model.clone(),
            pid: Some(h.child.id()),
        });
        procs_alive.push(h);
    }
    for &k in peers {
        eprintln!("starting {} …", k.label());
        let (p, g) = start_peer(k, work.path(), chaos.addr, &args.model)
            .await
            .with_context(|| k.label())?;
        gateways.push(g);
        procs_alive.push(p);
    }
    // Idle a moment so every start-up is over before "after start" is read.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut memory: Vec<MemoryLine> = gateways
        .iter()
        .map(|g| MemoryLine {
            gateway: g.label.clone(),
            after_start: g.pid.and_then(tree_memory),
            peak: None,
            after_last_run: None,
            after_idle: None,
        })
        .collect();

    let modes = args.stream.modes();
    let mut runs = Vec::new();
    for &(mode, stream) in modes {
        for &c in &args.concurrency {
            for (i, g) in gateways.iter().enumerate() {
                let spec = load::LoadSpec {
                    concurrency: c,
                    warmup: args.warmup,
                    duration: args.duration,
                    stream,
                    bodies: load::distinct_bodies(&g.model, stream, args.prompt_bytes),
                    task_turns: 200,
                    agents_every: None,
                    // A plain OpenAI client, as users point at any of them.
                    anonymous: true,
                };
                let stop = Arc::new(AtomicBool::new(false));
                let sampler = g
                    .pid
                    .map(|pid| tokio::spawn(peak_memory(pid, stop.clone())));
                let s = load::run(&g.endpoint, &spec).await?;
                stop.store(true, Ordering::Relaxed);
                let peak = match sampler {
                    Some(t) => Some(t.await.unwrap_or_default()),
                    None => None,
                };
                if let Some(p) = peak {
                    let line = &mut memory[i];
                    line.peak = Some(line.peak.unwrap_or_default().max(p));
                }
                eprintln!(
                    "{mode:>8} c={c:<3} {:<18} {:>7.0} rps p50 {:>9.3} ms p99 {:>9.3} ms  peak {}{}",
                    g.label,
                    s.rps,
                    s.p50_us / 1000.0,
                    s.p99_us / 1000.0,
                    peak.map_or_else(|| "–".into(), mib_pair),
                    s.first_error
                        .as_deref()
                        .map_or_else(String::new, |e| format!(
                            "  {} errors, first: {e}",
                            s.errors
                        )),
                );
                runs.push(Run {
                    gateway: g.label.clone(),
                    mode,
                    concurrency: c,
                    summary: s,
                    peak,
                });
            }
        }
    }
    for (i, g) in gateways.iter().enumerate() {
        memory[i].after_last_run = g.pid.and_then(tree_memory);
    }
    eprintln!("idle for {:?} …", args.idle);
    tokio::time::sleep(args.idle).await;
    for (i, g) in gateways.iter().enumerate() {
        memory[i].after_idle = g.pid.and_then(tree_memory);
    }
    drop(procs_alive);
    drop(bare);
    drop(chaos);

    println!("\n{}", runs_table(&runs));
    println!("{}", memory_table(&memory, &args));
    println!("{}", fsync_line(&fsync, &runs));
    let report = Report {
        unix_time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        machine,
        args: args.clone(),
        fsync,
        runs,
        memory,
    };
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    println!("results written to {}", args.out.display());
    Ok(())
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn mib_pair(m: Memory) -> String {
    format!("{} / {} MiB", mib(m.rss_kib), mib(m.anon_kib))
}

/// One line per (mode, c, gateway): RPS, latency to the last byte, the
/// run's peak memory.
fn runs_table(runs: &[Run]) -> String {
    let mut out = String::from(
        "| mode | c | gateway | RPS | p50 ms | p99 ms | peak RSS MiB | peak RssAnon MiB | errors |\n\
         |---|--:|---|--:|--:|--:|--:|--:|--:|\n",
    );
    for r in runs {
        let s = &r.summary;
        out.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.3} | {:.3} | {} | {} | {} |\n",
            r.mode,
            r.concurrency,
            r.gateway,
            s.rps,
            s.p50_us / 1000.0,
            s.p99_us / 1000.0,
            r.peak.map_or_else(|| "–".into(), |m| mib(m.rss_kib)),
            r.peak.map_or_else(|| "–".into(), |m| mib(m.anon_kib)),
            s.errors,
        ));
    }
    out
}

/// Each gateway's memory from start to idle: RSS / RssAnon, MiB.
fn memory_table(lines: &[MemoryLine], args: &PeersArgs) -> String {
    let cell = |m: Option<Memory>| m.map_or_else(|| "–".into(), mib_pair);
    let mut out = format!(
        "| gateway | after start | peak of the runs | after the last run | after {:?} idle |\n|---|--:|--:|--:|--:|\n",
        args.idle
    );
    for l in lines.iter().filter(|l| l.after_start.is_some()) {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            l.gateway,
            cell(l.after_start),
            cell(l.peak),
            cell(l.after_last_run),
            cell(l.after_idle)
        ));
    }
    out
}

/// The disk's fsync beside what the durable journal costs over the relaxed
/// one at c=1 (p50, to the last byte).
fn fsync_line(f: &Fsync, runs: &[Run]) -> String {
    let p50 = |label: &str, mode: &str| {
        runs.iter()
            .find(|r| r.gateway == label && r.mode == mode && r.concurrency == 1)
            .map(|r| r.summary.p50_us)
    };
    let mut out = format!(
        "fsync (4 KiB append + fdatasync, alone): p50 {:.3} ms, p99 {:.3} ms",
        f.p50_us / 1000.0,
        f.p99_us / 1000.0
    );
    for mode in ["complete", "stream"] {
        if let (Some(d), Some(r)) = (p50("hale durable", mode), p50("hale relaxed", mode)) {
            out.push_str(&format!(
                "\n{mode} c=1: durable − relaxed p50 {:.3} ms (fsync p50 + 0.1 ms = {:.3} ms)",
                (d - r) / 1000.0,
                f.p50_us / 1000.0 + 0.1
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_splits_into_address_and_path() {
        let (a, p) = split_base_url("http://127.0.0.1:4312/openai/v1").unwrap();
        assert_eq!(a, "127.0.0.1:4312".parse().unwrap());
        assert_eq!(p, "/openai/v1");
        assert_eq!(split_base_url("http://127.0.0.1:9/").unwrap().1, "");
        assert_eq!(split_base_url("http://127.0.0.1:9").unwrap().1, "");
        assert!(split_base_url("https://127.0.0.1:9/x").is_err());
        assert!(split_base_url("http://localhost:9/x").is_err());
    }

    #[test]
    fn a_process_tree_holds_its_children_and_their_memory() {
        let me = std::process::id();
        let mut child = Command::new("sleep").arg("5").spawn().expect("sleep");
        let tree = procs::tree(me);
        let mem = tree_memory(me).expect("own memory");
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(tree.first(), Some(&me));
        assert!(tree.contains(&child.id()), "{tree:?}");
        assert!(!procs::tree(child.id()).contains(&me));
        assert!(mem.anon_kib > 0 && mem.anon_kib <= mem.rss_kib);
    }
}
