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
    model: String,
}

fn yaml(
    listen: SocketAddr,
    chaos: SocketAddr,
    data_dir: &std::path::Path,
    dialect: Dialect,
) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    format!(
        "listen: {listen}\n\
         data_dir: {dd}\n\
         providers:\n  \
           - name: p\n    \
             kind: openai\n    \
             api: {api}\n    \
             base_url: {base}\n    \
             default_model: model-a\n    \
             timeout_ms: 1000\n    \
             first_token_timeout_ms: 1000\n\
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

async fn upstream(http: &reqwest::Client, chaos: SocketAddr) -> anyhow::Result<(u64, u64)> {
    let v: serde_json::Value = http
        .get(format!("http://{chaos}/chaos/stats"))
        .send()
        .await?
        .json()
        .await?;
    let n = |m: &str| v["requests_per_model"][m].as_u64().unwrap_or(0);
    Ok((n("model-a"), n("model-b")))
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
    let cfg = yaml(addr, chaos.addr, &work.path().join("data"), args.dialect);
    let _hale = procs::start_hale_with(&bin, work.path(), addr, &cfg).await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(256)
        .tcp_nodelay(true)
        .build()?;
    eprintln!(
        "hale-soak: {} phases of {} s at {} req/s ({}) through {}",
        PHASES.len(),
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
    for (i, ph) in PHASES.iter().enumerate() {
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
                let r = http
                    .post(url.as_str())
                    .header("x-hale-agent", agent)
                    .json(&body)
                    .send()
                    .await;
                let (status, model) = match r {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let model = r
                            .headers()
                            .get("x-hale-model")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_owned();
                        // Read to the end: a stream is served only when whole.
                        let text = r.text().await.unwrap_or_default();
                        let whole = dialect.whole(stream, &text);
                        (if whole { status } else { 599 }, model)
                    }
                    Err(_) => (0, String::new()),
                };
                let _ = tx.send(Sample {
                    phase: i,
                    status,
                    latency: t0.elapsed(),
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
    for (i, ph) in PHASES.iter().enumerate() {
        let mine: Vec<&Sample> = samples.iter().filter(|s| s.phase == i).collect();
        let mut lat: Vec<Duration> = mine.iter().map(|s| s.latency).collect();
        lat.sort_unstable();
        let served = mine.iter().filter(|s| s.status == 200).count() as u64;
        let mut refused = BTreeMap::new();
        for s in mine.iter().filter(|s| s.status != 200) {
            *refused.entry(s.status).or_insert(0) += 1;
        }
        let ((a0, b0), (a2, _), (a1, b1)) = upstream_marks[i];
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
    println!(
        "{:<42} {:>6} {:>8} {:>8} {:>8} {:>7} {:>7} {:>8} {:>10}",
        "phase", "sent", "served", "p50 ms", "p99 ms", "by a", "by b", "a calls", "a/probe≥2s"
    );
    for p in &phases {
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
