//! `hale-bench soak`: healing under overlapping faults (issue 8, BENCHMARKS.md
//! "Soak").
//!
//! Starts `hale chaos` and `hale serve` (release binary, separate processes)
//! with route `smart: [p/model-a, p/model-b]` — two models of ONE provider,
//! the most common fallback there is — and sends an open-loop stream of
//! requests (a fixed rate, each request on its own schedule whatever the
//! others do, as independent agents would) while a schedule of faults plays on
//! the chaos server through `POST /chaos/override`:
//!
//! 1. baseline — both models answer;
//! 2. primary flaky — model-a fails one call in three (503);
//! 3. primary down while the fallback is flaky — model-a 503 always, model-b
//!    fails one call in ten;
//! 4. a 429 storm on the primary with `Retry-After: 2`;
//! 5. a silent primary — model-a never answers;
//! 6. recovery — both answer again.
//!
//! Requests carry `X-Hale-Agent: soak-N` (8 named agents), so a pause that
//! does not heal itself would show as 423s. Per phase it reports requests
//! sent, the share served (200), p50/p99 latency (by the phase a request was
//! sent in), and the upstream calls each model got, including model-a's calls
//! after the phase's first two seconds per probe interval — what a dead
//! deployment costs once it is ejected.
//!
//! The config an operator with a 1 s p99 objective would write: provider
//! timeout 1 s, `max_retry_wait` 500 ms, retry backoffs from 50 ms. Every
//! other number is hale's default (probe interval 5 s, eject after 3).
//!
//! `--slow` plays another schedule (issue 43): a deployment that turns slow.
//! Both models answer with a first token after 300 ms (a realistic pace, so
//! "2× the healthy deployment" means something); then model-a's first token
//! comes after 10 s, then 30 s, while model-b stays healthy; then model-a is
//! back at 300 ms. hale's defaults throughout (`first_token_timeout_ms`
//! 30 s, hedging, the slow rule: docs/configuration.md, "hedging"). Per
//! phase it also reports the time to first token through hale of the
//! streamed requests (the first body chunk), the turns hedged
//! (`x-hale-hedged`), the upstream calls beyond one per request sent, and
//! the tokens chaos counted (input and output) beyond the baseline's per
//! request served.
//!
//! `--dialect responses` plays the same schedule on the OpenAI Responses API
//! both ways (issue 27): the clients call `POST /v1/responses` and the
//! provider is `api: responses`, so chaos answers on its `/v1/responses`.
//! A streamed request is served only when its event stream is one
//! well-formed response: `sequence_number`s 0, 1, 2, … without a gap, one
//! `response.output_item.added` and one `.done` per item of the output, and
//! `response.completed` last (see [`responses_stream_whole`]).

use crate::procs;
use anyhow::{Context, bail};
use clap::Parser;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser, Debug, Clone, Serialize)]
#[command(
    name = "hale-bench soak",
    about = "open-loop traffic through hale while overlapping faults play"
)]
pub struct SoakArgs {
    /// Requests per second (open loop).
    #[arg(long, default_value_t = 40.0)]
    rate: f64,
    /// Length of each phase, in seconds.
    #[arg(long, default_value_t = 20)]
    phase_secs: u64,
    /// Stream every n-th request (0: none).
    #[arg(long, default_value_t = 3)]
    stream_every: u64,
    /// The hale binary; default: `hale` next to this binary, or target/release/hale.
    #[arg(long)]
    hale_bin: Option<PathBuf>,
    /// The API the clients and the provider speak: `chat` (Chat Completions)
    /// or `responses` (the Responses API, both ways).
    #[arg(long, value_enum, default_value_t = Dialect::Chat)]
    dialect: Dialect,
    /// Play the slow-deployment schedule (issue 43) instead of the faults.
    #[arg(long)]
    slow: bool,
    /// Where to write the results as JSON.
    #[arg(long, default_value = "target/hale-soak.json")]
    out: PathBuf,
}

/// The API of a soak run.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Dialect {
    /// `POST /v1/chat/completions` to a Chat Completions provider.
    Chat,
    /// `POST /v1/responses` to an `api: responses` provider.
    Responses,
}

impl Dialect {
    /// The route the clients call.
    fn path(self) -> &'static str {
        match self {
            Dialect::Chat => "/v1/chat/completions",
            Dialect::Responses => "/v1/responses",
        }
    }

    /// The provider's `api` key.
    fn api(self) -> &'static str {
        match self {
            Dialect::Chat => "chat",
            Dialect::Responses => "responses",
        }
    }

    /// Request `seq`'s body.
    fn body(self, seq: u64, stream: bool) -> serde_json::Value {
        let text = format!("soak request {seq}");
        match self {
            Dialect::Chat => serde_json::json!({
                "model": "smart",
                "stream": stream,
                "messages": [{"role": "user", "content": text}],
            }),
            Dialect::Responses => serde_json::json!({
                "model": "smart",
                "stream": stream,
                "input": text,
            }),
        }
    }

    /// Whether a 200's body is a whole answer: a stream that ended as it
    /// should, or a non-streamed body (whose status code said it all).
    fn whole(self, stream: bool, body: &str) -> bool {
        if !stream {
            return true;
        }
        match self {
            Dialect::Chat => body.contains("[DONE]"),
            Dialect::Responses => responses_stream_whole(body),
        }
    }
}

/// Whether a Responses event stream is one well-formed, completed response:
/// every event's `sequence_number` the next from 0, `response.completed`
/// last, and one `response.output_item.added` and one `.done` per item of
/// its output.
fn responses_stream_whole(body: &str) -> bool {
    let (mut added, mut done) = (0usize, 0usize);
    let mut last: Option<serde_json::Value> = None;
    for (next, data) in (0u64..).zip(body.lines().filter_map(|l| l.strip_prefix("data: "))) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(data) else {
            return false;
        };
        if v["sequence_number"].as_u64() != Some(next) {
            return false;
        }
        match v["type"].as_str() {
            Some("response.output_item.added") => added += 1,
            Some("response.output_item.done") => done += 1,
            Some(_) | None => {}
        }
        last = Some(v);
    }
    let Some(last) = last else { return false };
    let items = last["response"]["output"].as_array().map_or(0, Vec::len);
    last["type"] == "response.completed" && items > 0 && added == items && done == items
}

/// One phase of the schedule: the faults of model-a and model-b.
struct Phase {
    name: &'static str,
    a: Option<&'static str>,
    b: Option<&'static str>,
}

const PHASES: &[Phase] = &[
    Phase {
        name: "baseline",
        a: None,
        b: None,
    },
    Phase {
        name: "primary flaky (1 in 3 fails)",
        a: Some("flaky:every=3"),
        b: None,
    },
    Phase {
        name: "primary down, fallback flaky (1 in 10)",
        a: Some("error-503"),
        b: Some("flaky:every=10"),
    },
    Phase {
        name: "429 storm on primary (Retry-After: 2)",
        a: Some("rate-limit:retry_after=2"),
        b: None,
    },
    Phase {
        name: "silent primary",
        a: Some("hang"),
        b: None,
    },
    Phase {
        name: "recovery",
        a: None,
        b: None,
    },
];

/// `--slow`: the healthy pace of both models.
const PACE: &str = "slow-first-token:ms=300";

const SLOW_PHASES: &[Phase] = &[
    Phase {
        name: "baseline (both 300 ms to first token)",
        a: Some(PACE),
        b: Some(PACE),
    },
    Phase {
        name: "primary slow (first token 10 s)",
        a: Some("slow-first-token:ms=10000"),
        b: Some(PACE),
    },
    Phase {
        name: "primary slower (first token 30 s)",
        a: Some("slow-first-token:ms=30000"),
        b: Some(PACE),
    },
    Phase {
        name: "primary back (300 ms)",
        a: Some(PACE),
        b: Some(PACE),
    },
];

/// The probe interval of the config (hale's default).
const PROBE_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Debug, Serialize)]
struct PhaseReport {
    phase: &'static str,
    sent: u64,
    served: u64,
    served_share: f64,
    /// Non-200 answers by status.
    refused: BTreeMap<u16, u64>,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// Time to first token (the first body chunk) of the streamed requests.
    ttft_p50_ms: f64,
    ttft_p99_ms: f64,
    /// Turns answered with `x-hale-hedged: true`.
    hedged: u64,
    /// Upstream calls beyond one per request sent.
    extra_upstream: i64,
    /// Tokens chaos counted in the phase.
    input_tokens: u64,
    output_tokens: u64,
    /// Tokens beyond the first phase's per request served.
    extra_input_tokens: i64,
    extra_output_tokens: i64,
    served_by_a: u64,
    served_by_b: u64,
    upstream_a: u64,
    upstream_b: u64,
    /// model-a's upstream calls after the phase's first 2 s, per probe interval.
    upstream_a_per_probe_interval_after_2s: f64,
}

#[derive(Debug, Serialize)]
struct SoakReport {
    unix_time: u64,
    args: SoakArgs,
    phases: Vec<PhaseReport>,
}

struct Sample {
    phase: usize,
    status: u16,
    latency: Duration,
    /// A streamed request's first body chunk.
    ttft: Option<Duration>,
    hedged: bool,
    model: String,
}

/// What chaos counted so far.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    a: u64,
    b: u64,
    input: u64,
    output: u64,
}

fn yaml(
    listen: SocketAddr,
    chaos: SocketAddr,
    data_dir: &std::path::Path,
    dialect: Dialect,
    slow: bool,
) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    // `--slow` keeps hale's timeouts: a slow first token is what it plays.
    let timeouts = if slow {
        ""
    } else {
        "    timeout_ms: 1000\n    first_token_timeout_ms: 1000\n"
    };
    format!(
        "listen: {listen}\n\
         data_dir: {dd}\n\
         providers:\n  \
           - name: p\n    \
             kind: openai\n    \
             api: {api}\n    \
             base_url: {base}\n    \
             default_model: model-a\n\
         {timeouts}\
         routes:\n  \
           smart: [p/model-a, p/model-b]\n\
         retry:\n  \
           max_retry_wait_ms: 500\n  \
           rate_limit: {{max_attempts: 5, initial_ms: 50, max_ms: 400}}\n  \
           server_error: {{max_attempts: 3, initial_ms: 50, max_ms: 200}}\n  \
           network: {{max_attempts: 3, initial_ms: 50, max_ms: 200}}\n",
        dd = q(&data_dir.display().to_string()),
        base = q(&format!("http://{chaos}/v1")),
        api = dialect.api(),
    )
}

async fn set_fault(
    http: &reqwest::Client,
    chaos: SocketAddr,
    model: &str,
    fault: Option<&str>,
) -> anyhow::Result<()> {
    let r = http
        .post(format!("http://{chaos}/chaos/override"))
        .json(&serde_json::json!({"model": model, "fault": fault}))
        .send()
        .await
        .context("chaos override")?;
    if !r.status().is_success() {
        bail!("chaos override for {model}: {}", r.status());
    }
    Ok(())
}

async fn upstream(http: &reqwest::Client, chaos: SocketAddr) -> anyhow::Result<Counts> {
    let v: serde_json::Value = http
        .get(format!("http://{chaos}/chaos/stats"))
        .send()
        .await?
        .json()
        .await?;
    let n = |m: &str| v["requests_per_model"][m].as_u64().unwrap_or(0);
    Ok(Counts {
        a: n("model-a"),
        b: n("model-b"),
        input: v["input_tokens"].as_u64().unwrap_or(0),
        output: v["output_tokens"].as_u64().unwrap_or(0),
    })
}

/// Sends one request; its status (599: a stream that did not end whole),
/// the model that served, whether it was hedged and, streamed, when its
/// first body chunk came.
async fn one(
    http: &reqwest::Client,
    url: &str,
    agent: String,
    body: serde_json::Value,
    dialect: Dialect,
    stream: bool,
    t0: Instant,
) -> (u16, String, bool, Option<Duration>) {
    let Ok(mut r) = http
        .post(url)
        .header("x-hale-agent", agent)
        .json(&body)
        .send()
        .await
    else {
        return (0, String::new(), false, None);
    };
    let status = r.status().as_u16();
    let header = |k: &str| {
        r.headers()
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let (model, hedged) = (header("x-hale-model"), header("x-hale-hedged") == "true");
    // Read to the end: a stream is served only when whole.
    let mut bytes = Vec::new();
    let mut ttft = None;
    while let Ok(Some(chunk)) = r.chunk().await {
        if stream && ttft.is_none() && !chunk.is_empty() {
            ttft = Some(t0.elapsed());
        }
        bytes.extend_from_slice(&chunk);
    }
    let whole = dialect.whole(stream, &String::from_utf8_lossy(&bytes));
    (if whole { status } else { 599 }, model, hedged, ttft)
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1000.0
}

pub async fn run(args: SoakArgs) -> anyhow::Result<()> {
    if !args.rate.is_finite() || args.rate <= 0.0 || args.phase_secs < 3 {
        bail!("--rate must be positive and --phase-secs at least 3");
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let bin = procs::find_hale(args.hale_bin.as_deref())?;
    let work = tempfile::Builder::new().prefix("hale-soak-").tempdir()?;
    let chaos = procs::start_chaos(&bin, work.path()).await?;
    let addr = procs::free_port()?;
    let cfg = yaml(
        addr,
        chaos.addr,
        &work.path().join("data"),
        args.dialect,
        args.slow,
    );
    let schedule = if args.slow { SLOW_PHASES } else { PHASES };
    let _hale = procs::start_hale_with(&bin, work.path(), addr, &cfg).await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(256)
        .tcp_nodelay(true)
        .build()?;
    eprintln!(
        "hale-soak: {} phases of {} s at {} req/s ({}) through {}",
        schedule.len(),
        args.phase_secs,
        args.rate,
        args.dialect.path(),
        bin.display()
    );

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Sample>();
    let phase_len = Duration::from_secs(args.phase_secs);
    let interval = Duration::from_secs_f64(1.0 / args.rate);
    let mut upstream_marks = Vec::new();
    let url = Arc::new(format!("http://{addr}{}", args.dialect.path()));
    let dialect = args.dialect;
    let mut seq: u64 = 0;
    for (i, ph) in schedule.iter().enumerate() {
        set_fault(&http, chaos.addr, "model-a", ph.a).await?;
        set_fault(&http, chaos.addr, "model-b", ph.b).await?;
        let start_counts = upstream(&http, chaos.addr).await?;
        let start = Instant::now();
        let mut after_2s = None;
        let mut next = start;
        while next < start + phase_len {
            tokio::time::sleep_until(next.into()).await;
            if after_2s.is_none() && start.elapsed() >= Duration::from_secs(2) {
                after_2s = Some(upstream(&http, chaos.addr).await?);
            }
            seq += 1;
            let stream = args.stream_every > 0 && seq.is_multiple_of(args.stream_every);
            let body = dialect.body(seq, stream);
            let (http, tx, url) = (http.clone(), tx.clone(), url.clone());
            let agent = format!("soak-{}", seq % 8);
            tokio::spawn(async move {
                let t0 = Instant::now();
                let (status, model, hedged, ttft) =
                    one(&http, &url, agent, body, dialect, stream, t0).await;
                let _ = tx.send(Sample {
                    phase: i,
                    status,
                    latency: t0.elapsed(),
                    ttft,
                    hedged,
                    model,
                });
            });
            next += interval;
        }
        let end_counts = upstream(&http, chaos.addr).await?;
        upstream_marks.push((start_counts, after_2s.unwrap_or(start_counts), end_counts));
        eprintln!("hale-soak: phase {} done: {}", i + 1, ph.name);
    }
    drop(tx);
    // Let the last requests finish (each is bounded by the client timeout).
    let mut samples = Vec::new();
    while let Some(s) = rx.recv().await {
        samples.push(s);
    }

    let mut phases = Vec::new();
    // The first phase's tokens per request served: the baseline of "extra".
    let mut per_served = (0.0, 0.0);
    for (i, ph) in schedule.iter().enumerate() {
        let mine: Vec<&Sample> = samples.iter().filter(|s| s.phase == i).collect();
        let mut lat: Vec<Duration> = mine.iter().map(|s| s.latency).collect();
        lat.sort_unstable();
        let mut ttft: Vec<Duration> = mine
            .iter()
            .filter(|s| s.status == 200)
            .filter_map(|s| s.ttft)
            .collect();
        ttft.sort_unstable();
        let served = mine.iter().filter(|s| s.status == 200).count() as u64;
        let mut refused = BTreeMap::new();
        for s in mine.iter().filter(|s| s.status != 200) {
            *refused.entry(s.status).or_insert(0) += 1;
        }
        let (c0, c2, c1): (Counts, Counts, Counts) = upstream_marks[i];
        let (a0, b0, a2, a1, b1) = (c0.a, c0.b, c2.a, c1.a, c1.b);
        let (input, output) = (c1.input - c0.input, c1.output - c0.output);
        if i == 0 && served > 0 {
            per_served = (input as f64 / served as f64, output as f64 / served as f64);
        }
        let later = phase_len
            .saturating_sub(Duration::from_secs(2))
            .as_secs_f64();
        phases.push(PhaseReport {
            phase: ph.name,
            sent: mine.len() as u64,
            served,
            served_share: if mine.is_empty() {
                0.0
            } else {
                served as f64 / mine.len() as f64
            },
            refused,
            p50_ms: pct(&lat, 50.0),
            p99_ms: pct(&lat, 99.0),
            max_ms: lat.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
            ttft_p50_ms: pct(&ttft, 50.0),
            ttft_p99_ms: pct(&ttft, 99.0),
            hedged: mine.iter().filter(|s| s.hedged).count() as u64,
            extra_upstream: (a1 - a0 + b1 - b0) as i64 - mine.len() as i64,
            input_tokens: input,
            output_tokens: output,
            extra_input_tokens: input as i64 - (per_served.0 * served as f64) as i64,
            extra_output_tokens: output as i64 - (per_served.1 * served as f64) as i64,
            served_by_a: mine
                .iter()
                .filter(|s| s.status == 200 && s.model == "model-a")
                .count() as u64,
            served_by_b: mine
                .iter()
                .filter(|s| s.status == 200 && s.model == "model-b")
                .count() as u64,
            upstream_a: a1 - a0,
            upstream_b: b1 - b0,
            upstream_a_per_probe_interval_after_2s: (a1 - a2) as f64
                / (later / PROBE_INTERVAL.as_secs_f64()).max(1.0),
        });
    }
    if args.slow {
        print_slow(&phases);
    } else {
        print_faults(&phases);
    }
    let report = SoakReport {
        unix_time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        args,
        phases,
    };
    if let Some(dir) = report.args.out.parent() {
        std::fs::create_dir_all(dir).ok();
    }
    std::fs::write(&report.args.out, serde_json::to_vec_pretty(&report)?)?;
    eprintln!("hale-soak: results in {}", report.args.out.display());
    Ok(())
}

/// The faults schedule's table.
fn print_faults(phases: &[PhaseReport]) {
    println!(
        "{:<42} {:>6} {:>8} {:>8} {:>8} {:>7} {:>7} {:>8} {:>10}",
        "phase", "sent", "served", "p50 ms", "p99 ms", "by a", "by b", "a calls", "a/probe≥2s"
    );
    for p in phases {
        println!(
            "{:<42} {:>6} {:>7.1}% {:>8.1} {:>8.1} {:>7} {:>7} {:>8} {:>10.1}",
            p.phase,
            p.sent,
            p.served_share * 100.0,
            p.p50_ms,
            p.p99_ms,
            p.served_by_a,
            p.served_by_b,
            p.upstream_a,
            p.upstream_a_per_probe_interval_after_2s
        );
    }
}

/// `--slow`'s table (markdown).
fn print_slow(phases: &[PhaseReport]) {
    println!(
        "| phase | sent | served | TTFT p50 / p99 ms (streamed) | latency p50 / p99 ms | by a / b | hedged | extra upstream calls | extra tokens in / out |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for p in phases {
        println!(
            "| {} | {} | {:.1} % | {:.0} / {:.0} | {:.0} / {:.0} | {} / {} | {} ({:.1} %) | {} | {} / {} |",
            p.phase,
            p.sent,
            p.served_share * 100.0,
            p.ttft_p50_ms,
            p.ttft_p99_ms,
            p.p50_ms,
            p.p99_ms,
            p.served_by_a,
            p.served_by_b,
            p.hedged,
            if p.sent == 0 {
                0.0
            } else {
                p.hedged as f64 * 100.0 / p.sent as f64
            },
            p.extra_upstream,
            p.extra_input_tokens,
            p.extra_output_tokens,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::responses_stream_whole;

    fn ev(ty: &str, seq: u64, extra: &str) -> String {
        format!("event: {ty}\ndata: {{\"type\":\"{ty}\",\"sequence_number\":{seq}{extra}}}\n\n")
    }

    fn stream(seqs: [u64; 6], last: &str, items: usize) -> String {
        let output = vec!["{}"; items].join(",");
        [
            ev("response.created", seqs[0], ""),
            ev("response.output_item.added", seqs[1], ""),
            ev("response.output_text.delta", seqs[2], ""),
            ev("response.output_text.delta", seqs[3], ""),
            ev("response.output_item.done", seqs[4], ""),
            ev(
                last,
                seqs[5],
                &format!(",\"response\":{{\"output\":[{output}]}}"),
            ),
        ]
        .concat()
    }

    #[test]
    fn a_responses_stream_is_whole_only_when_well_formed_and_completed() {
        let ok = [0, 1, 2, 3, 4, 5];
        let cases = [
            (stream(ok, "response.completed", 1), true),
            (stream([0, 1, 2, 4, 5, 6], "response.completed", 1), false),
            (stream([0, 1, 2, 2, 3, 4], "response.completed", 1), false),
            (stream(ok, "response.failed", 1), false),
            (stream(ok, "response.incomplete", 1), false),
            (stream(ok, "response.completed", 2), false),
            (stream(ok, "response.completed", 0), false),
            (String::new(), false),
            (
                format!(
                    "{}data: {{not json\n\n",
                    stream(ok, "response.completed", 1)
                ),
                false,
            ),
        ];
        for (i, (body, want)) in cases.iter().enumerate() {
            assert_eq!(responses_stream_whole(body), *want, "case {i}: {body}");
        }
    }
}
