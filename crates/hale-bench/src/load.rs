//! The closed-loop load generator.
//!
//! `c` workers each own one keep-alive HTTP/1.1 connection (a bare hyper
//! client connection: no pool, no redirects, no TLS) and send the next request
//! as soon as the previous response has been read to its end. Every worker
//! runs a warm-up first (samples discarded, connections and caches warm), then
//! records each request that *starts* inside the measured window: the time to
//! the first body frame (for a stream, the first SSE frame) and the time to the
//! last byte. Closed-loop load means a slower server gets fewer requests,
//! which is exactly how an agent (one call at a time per agent) behaves.
//!
//! A response counts as an error, not a sample, when its status is not 200,
//! the connection fails, or a stream ends without `data: [DONE]`, so a
//! gateway that cut or broke answers could not look fast by doing so.

use crate::stats::{Summary, summarize};
use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where to send requests: one server, or several taken in turn (round
/// robin per request, each worker holding one connection to each).
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub addrs: Vec<SocketAddr>,
    /// e.g. `/v1/chat/completions`.
    pub path: String,
    /// Headers sent with every request besides hale's own (a peer's
    /// provider selection, e.g. Portkey's `x-portkey-provider`).
    pub headers: Vec<(String, String)>,
}

impl Endpoint {
    /// One server at `addr`.
    pub fn one(addr: SocketAddr, path: String) -> Self {
        Self {
            addrs: vec![addr],
            path,
            headers: Vec::new(),
        }
    }
}

/// Which answers a benchmark asks for (`--stream`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamMode {
    /// Non-streaming only.
    Off,
    /// Streaming only.
    On,
    /// Both.
    Both,
}

impl StreamMode {
    /// The modes to run, named as the tables name them, with whether each streams.
    pub fn modes(self) -> &'static [(&'static str, bool)] {
        match self {
            StreamMode::Off => &[("complete", false)],
            StreamMode::On => &[("stream", true)],
            StreamMode::Both => &[("complete", false), ("stream", true)],
        }
    }
}

/// The request bodies of a load run ([`LoadSpec::bodies`]).
#[derive(Debug, Clone)]
pub enum Bodies {
    /// An agent's turns take the two in turn. They differ in one byte, so
    /// consecutive turns of an agent differ as a real agent's do (its
    /// conversation moves on); identical requests in a row are what hale's
    /// health monitor rightly judges a loop (stuck), and an agent under
    /// intervention is held.
    Alternate([Bytes; 2]),
    /// Every request its own conversation: the user message opens with a
    /// number no other request of the process has ([`distinct_body`]), so
    /// nothing keyed by content (conversations, caches) is ever hit twice,
    /// as with a fleet of agents each on its own task.
    Distinct { head: Bytes, tail: Bytes },
}

/// Digits of the number that opens a [`Bodies::Distinct`] user message.
const DISTINCT_DIGITS: usize = 16;

impl Bodies {
    /// The body of a worker's request number `sent`.
    fn get(&self, sent: u64) -> Bytes {
        // Numbers no other request of this process had.
        static DISTINCT: AtomicU64 = AtomicU64::new(0);
        match self {
            Bodies::Alternate(b) => b[(sent % 2) as usize].clone(),
            Bodies::Distinct { head, tail } => {
                let n = DISTINCT.fetch_add(1, Ordering::Relaxed);
                let mut b = Vec::with_capacity(head.len() + DISTINCT_DIGITS + tail.len());
                b.extend_from_slice(head);
                b.extend_from_slice(format!("{n:0DISTINCT_DIGITS$}").as_bytes());
                b.extend_from_slice(tail);
                Bytes::from(b)
            }
        }
    }
}

/// Requests that each open a new conversation of `prompt_bytes` bytes of
/// user message ([`Bodies::Distinct`]).
pub fn distinct_bodies(model: &str, stream: bool, prompt_bytes: usize) -> Bodies {
    let rest = prompt_bytes.saturating_sub(DISTINCT_DIGITS + 1);
    let body = chat_body(model, stream, rest, '.');
    let text = String::from_utf8_lossy(&body).into_owned();
    // The user message is the last `content` (serde_json sorts keys, so
    // `content` precedes `role` in each message and the system's is first).
    const KEY: &str = "\"content\":\"";
    let user = text.rfind(KEY).map(|i| i + KEY.len());
    let (head, tail) = match user {
        Some(i) => (text[..i].to_owned(), format!(" {}", &text[i..])),
        None => (text.clone(), String::new()),
    };
    Bodies::Distinct {
        head: Bytes::from(head),
        tail: Bytes::from(tail),
    }
}

/// One load run's shape.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub concurrency: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub stream: bool,
    /// The JSON request bodies, sent as they are.
    pub bodies: Bodies,
    /// Turns per task: worker `w` acts as agent `bench-w` and names a new
    /// task (`X-Hale-Task`) every this many requests, as an agent starting
    /// its next job would, so hale's per-task guard (`guard:`) sees
    /// realistic tasks instead of one endless one that it rightly stops.
    pub task_turns: u64,
    /// With `Some(n)`, each worker acts as a new agent every `n` requests
    /// (`a<worker>-<run>-<k>`), as a fleet whose agents come and go would;
    /// the memory-over-time run (BENCHMARKS.md) uses it to see what hale
    /// keeps per agent.
    pub agents_every: Option<u64>,
    /// Send no `X-Hale-Agent` / `X-Hale-Task`, as a plain OpenAI client
    /// does (hale then names the agent and task itself); `task_turns` and
    /// `agents_every` are unused.
    pub anonymous: bool,
}

/// The two requests an agent's turns alternate between ([`Bodies::Alternate`]).
pub fn chat_bodies(model: &str, stream: bool, prompt_bytes: usize) -> Bodies {
    Bodies::Alternate([
        chat_body(model, stream, prompt_bytes, '.'),
        chat_body(model, stream, prompt_bytes, '!'),
    ])
}

/// An OpenAI chat request for `model` with a user message of `prompt_bytes`
/// bytes, the last one `mark` (ASCII).
pub fn chat_body(model: &str, stream: bool, prompt_bytes: usize, mark: char) -> Bytes {
    let mut content = String::with_capacity(prompt_bytes + 8);
    let mut i = 0usize;
    while content.len() < prompt_bytes {
        content.push_str(["lorem ", "ipsum ", "dolor ", "sit ", "amet "][i % 5]);
        i += 1;
    }
    // The words are ASCII, so any byte length is a char boundary; the last
    // byte is the mark (what hale's repeated-call rule looks at is the last
    // message).
    content.truncate(prompt_bytes.saturating_sub(1));
    content.push(mark);
    let v = serde_json::json!({
        "model": model,
        "stream": stream,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": content},
        ],
    });
    Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
}

/// What one worker recorded.
#[derive(Default)]
struct WorkerResult {
    total_ns: Vec<u64>,
    ttfb_ns: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
    /// Distinct agents this worker named.
    agents: u64,
}

impl WorkerResult {
    fn error(&mut self, measured: bool, msg: String) {
        if measured {
            self.errors += 1;
        }
        self.first_error.get_or_insert(msg);
    }
}

/// Runs the closed loop against `ep` and summarises the measured window.
pub async fn run(ep: &Endpoint, spec: &LoadSpec) -> anyhow::Result<Summary> {
    // Task names must not repeat across runs of one process: a reused name
    // would carry the previous run's event count into hale's guard.
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let run_no = RUNS.fetch_add(1, Ordering::Relaxed);
    let measure_start = Instant::now() + spec.warmup;
    let end = measure_start + spec.duration;
    let mut workers = Vec::with_capacity(spec.concurrency);
    for id in 0..spec.concurrency {
        let ep = ep.clone();
        let spec = spec.clone();
        workers.push(tokio::spawn(async move {
            worker(id, run_no, &ep, &spec, measure_start, end).await
        }));
    }
    let mut total = Vec::new();
    let mut ttfb = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    let mut agents = 0;
    for w in workers {
        let r = w.await.context("a load worker panicked")??;
        total.extend(r.total_ns);
        ttfb.extend(r.ttfb_ns);
        errors += r.errors;
        first_error = first_error.or(r.first_error);
        agents += r.agents;
    }
    let mut s = summarize(total, ttfb, errors, spec.duration);
    s.first_error = first_error;
    s.agents = agents;
    Ok(s)
}

async fn connect(addr: SocketAddr) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot connect to {addr}"))?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

async fn worker(
    id: usize,
    run_no: u64,
    ep: &Endpoint,
    spec: &LoadSpec,
    measure_start: Instant,
    end: Instant,
) -> anyhow::Result<WorkerResult> {
    let mut out = WorkerResult::default();
    let hosts: Vec<String> = ep.addrs.iter().map(ToString::to_string).collect();
    let fixed_agent = format!("bench-{id}");
    let mut sent = 0u64;
    let mut senders = Vec::with_capacity(ep.addrs.len());
    for &a in &ep.addrs {
        senders.push(connect(a).await?);
    }
    loop {
        let start = Instant::now();
        if start >= end {
            break;
        }
        let measured = start >= measure_start;
        // Round robin over the servers, one request each in turn.
        let i = (sent % senders.len() as u64) as usize;
        let sender = &mut senders[i];
        if let Err(e) = sender.ready().await {
            out.error(measured, format!("connection lost: {e}"));
            *sender = connect(ep.addrs[i]).await?;
            continue;
        }
        let agent = match spec.agents_every {
            Some(n) => {
                let k = sent / n.max(1);
                out.agents = out.agents.max(k + 1);
                format!("a{id}-{run_no}-{k}")
            }
            None => {
                out.agents = 1;
                fixed_agent.clone()
            }
        };
        let task = format!("{agent}-r{run_no}-{}", sent / spec.task_turns.max(1));
        sent += 1;
        let mut req = Request::post(ep.path.as_str())
            .header("host", hosts[i].as_str())
            .header("content-type", "application/json");
        if !spec.anonymous {
            req = req
                .header("x-hale-agent", agent.as_str())
                .header("x-hale-task", task);
        }
        for (k, v) in &ep.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req.body(Full::new(spec.bodies.get(sent)))?;
        match one(sender, req, spec.stream, start).await {
            Ok((ttfb, total)) => {
                if measured {
                    out.ttfb_ns.push(ttfb.as_nanos() as u64);
                    out.total_ns.push(total.as_nanos() as u64);
                }
            }
            Err(e) => {
                out.error(measured, format!("{e:#}"));
                // A non-200 leaves the connection usable; a broken exchange does not.
                if sender.is_closed() {
                    *sender = connect(ep.addrs[i]).await?;
                }
            }
        }
    }
    Ok(out)
}

/// Sends one request and reads the response to its end: (time to first body frame, total).
async fn one(
    sender: &mut SendRequest<Full<Bytes>>,
    req: Request<Full<Bytes>>,
    stream: bool,
    start: Instant,
) -> anyhow::Result<(Duration, Duration)> {
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    let mut err_body = Vec::new();
    let mut body = resp.into_body();
    let mut first = None;
    // For streams only the tail is kept, to check for the closing `[DONE]`.
    let mut tail: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        if let Some(d) = frame.data_ref() {
            if first.is_none() {
                first = Some(start.elapsed());
            }
            if status != 200 && err_body.len() < 300 {
                err_body.extend_from_slice(d);
            }
            if stream {
                tail.extend_from_slice(d);
                if tail.len() > 64 {
                    tail.drain(..tail.len() - 64);
                }
            }
        }
    }
    let total = start.elapsed();
    anyhow::ensure!(
        status == 200,
        "status {status}: {}",
        String::from_utf8_lossy(&err_body)
    );
    if stream {
        let done = tail.windows(6).any(|w| w == b"[DONE]");
        anyhow::ensure!(done, "stream ended without [DONE]");
    }
    Ok((first.unwrap_or(total), total))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn against_chaos(model: &str, stream: bool) -> Summary {
        let chaos = hale_chaos::spawn(
            "127.0.0.1:0".parse().expect("addr"),
            hale_chaos::ChaosConfig::default(),
        )
        .await
        .expect("chaos starts");
        let ep = Endpoint::one(chaos.addr, "/v1/chat/completions".into());
        let spec = LoadSpec {
            concurrency: 2,
            warmup: Duration::from_millis(20),
            duration: Duration::from_millis(200),
            stream,
            bodies: chat_bodies(model, stream, 100),
            task_turns: 100,
            agents_every: None,
            anonymous: false,
        };
        run(&ep, &spec).await.expect("the load runs")
    }

    #[tokio::test]
    async fn complete_answers_are_recorded_without_errors() {
        let s = against_chaos("ok:tokens=16", false).await;
        assert!(s.requests > 0);
        assert_eq!(s.errors, 0);
        assert!(s.ttfb_p50_us <= s.p50_us);
    }

    #[tokio::test]
    async fn streams_are_recorded_with_first_byte_before_last() {
        let s = against_chaos("ok:tokens=16", true).await;
        assert!(s.requests > 0);
        assert_eq!(s.errors, 0);
        assert!(s.ttfb_p50_us <= s.p50_us);
        assert!(s.ttfb_p99_us <= s.max_us);
    }

    #[tokio::test]
    async fn a_stream_without_done_counts_as_an_error() {
        let s = against_chaos("no-done", true).await;
        assert_eq!(s.requests, 0);
        assert!(s.errors > 0);
    }

    #[tokio::test]
    async fn a_non_200_counts_as_an_error() {
        let s = against_chaos("error-500", false).await;
        assert_eq!(s.requests, 0);
        assert!(s.errors > 0);
    }

    #[test]
    fn distinct_bodies_are_openai_requests_of_the_asked_size_that_all_differ() {
        let bodies = distinct_bodies("ok:tokens=16", false, 1000);
        let all: Vec<Bytes> = (0..100).map(|i| bodies.get(i)).collect();
        let mut users = std::collections::HashSet::new();
        for b in &all {
            let v: serde_json::Value = serde_json::from_slice(b).expect("json");
            assert_eq!(v["model"], "ok:tokens=16");
            assert_eq!(v["messages"][0]["role"], "system");
            let user = v["messages"][1]["content"].as_str().expect("user text");
            assert_eq!(user.len(), 1000);
            assert!(users.insert(user.to_owned()), "a repeated conversation");
        }
    }

    #[test]
    fn chat_body_is_an_openai_request_of_the_asked_size() {
        let Bodies::Alternate([b, other]) = chat_bodies("ok:tokens=16", true, 1000) else {
            panic!("alternate bodies");
        };
        assert_ne!(b, other, "an agent's turns differ");
        assert_eq!(b.len(), other.len());
        let v: serde_json::Value = serde_json::from_slice(&b).expect("json");
        assert_eq!(v["model"], "ok:tokens=16");
        assert_eq!(v["stream"], true);
        let user = v["messages"][1]["content"].as_str().expect("user text");
        assert_eq!(user.len(), 1000);
    }
}
