//! Issue 11 "Scale-out for real": two real `hale serve` processes on one
//! PostgreSQL database (`HALE_TEST_PG_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`, one fresh schema per test).
//! Unreachable server: the test prints why it skipped, unless `CI=true`,
//! where it fails (the store suite's helper). Issue 28 §5 adds instances
//! that converge without traffic, and (one test, on SQLite) an operator's
//! pause that creates an agent not seen yet.

mod common;
#[path = "../../hale-store/tests/common/mod.rs"]
#[allow(unused_macros, unused_imports)]
mod store_common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::{Proc, free_port, wait_ready};
use hale_testkit::{hook, jetstream_messages};

/// The leases every `hale serve` asks for (with one webhook configured).
const SINGLETONS: [&str; 4] = [
    "health-monitor",
    "journal-retention",
    "tool-job-queue",
    "relay:webhook:", // + the receiver's host:port
];

/// A webhook receiver recording each event's (kind, agent) in arrival order.
async fn start_receiver(got: Arc<Mutex<Vec<(String, String)>>>) -> (String, String) {
    let url = hook("/hook", move |_, body| {
        let ev: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let s = |k: &str| ev[k].as_str().unwrap_or_default().to_owned();
        got.lock().unwrap().push((s("kind"), s("agent")));
        StatusCode::OK
    })
    .await;
    let host = url["http://".len()..url.len() - "/hook".len()].to_owned();
    (url, host)
}

/// A `hale serve` on `storage` with its own port and data directory.
fn serve(dir: &Path, name: &str, storage: &str, hook: &str) -> (Proc, String) {
    serve_with(dir, name, storage, hook, "http://127.0.0.1:9/v1")
}

/// [`serve`] with the provider at `provider` (an OpenAI base URL).
fn serve_with(dir: &Path, name: &str, storage: &str, hook: &str, provider: &str) -> (Proc, String) {
    let port = free_port();
    let data = dir.join(format!("data-{name}"));
    let cfg = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &cfg,
        format!(
            "\
listen: 127.0.0.1:{port}
data_dir: {data}
storage: \"{storage}\"
providers:
  - name: p
    kind: openai
    base_url: {provider}
    default_model: ok
agents:
  default: {{provider: p}}
  before-kill: {{provider: p}}
  after-kill: {{provider: p}}
events:
  webhooks: [{{url: \"{hook}\", kinds: [agent.paused]}}]
",
            data = data.display()
        ),
    )
    .unwrap();
    let proc = Proc::spawn(&["serve", "--config", &cfg.to_string_lossy()], dir, name);
    (proc, format!("http://127.0.0.1:{port}"))
}

async fn cluster(http: &reqwest::Client, base: &str) -> serde_json::Value {
    hale_testkit::get_json(http, &format!("{base}/cluster")).await
}

/// Lease name → holder, of the leases not expired.
fn holders(v: &serde_json::Value) -> BTreeMap<String, String> {
    v["leases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| !l["expired"].as_bool().unwrap_or(true))
        .map(|l| {
            (
                l["name"].as_str().unwrap_or_default().to_owned(),
                l["holder"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn all_singletons_held(h: &BTreeMap<String, String>, hook_host: &str) -> bool {
    SINGLETONS.iter().all(|s| {
        let name = if s.ends_with(':') {
            format!("{s}{hook_host}")
        } else {
            (*s).to_owned()
        };
        h.contains_key(&name)
    })
}

async fn pause(http: &reqwest::Client, base: &str, agent: &str) {
    let r = http
        .post(format!("{base}/agents/{agent}/pause"))
        .send()
        .await
        .expect("pause");
    assert!(r.status().is_success(), "pause {agent}: {}", r.status());
}

async fn wait_delivered(got: &Arc<Mutex<Vec<(String, String)>>>, agent: &str, limit: Duration) {
    let t0 = Instant::now();
    while !got
        .lock()
        .unwrap()
        .iter()
        .any(|(k, a)| k == "agent.paused" && a == agent)
    {
        assert!(
            t0.elapsed() < limit,
            "agent.paused of {agent} not delivered within {limit:?}: {:?}",
            got.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two instances started at the same moment on an empty database both come
/// up (schema creation under an advisory lock), share the singleton leases,
/// and when the holder is killed with SIGKILL the survivor takes every lease
/// within 15 s and its relay delivers from the stored cursor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue11_lease_holder_killed_survivor_takes_monitor_and_relay_within_15s() {
    let Some(pg) = store_common::pg_scratch().await else {
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let http = hale_testkit::client(Duration::from_secs(30));
    let got = Arc::new(Mutex::new(Vec::new()));
    let (hook, hook_host) = start_receiver(got.clone()).await;

    // Both at once on an empty schema.
    let (mut a, base_a) = serve(dir.path(), "a", &pg.url, &hook);
    let (mut b, base_b) = serve(dir.path(), "b", &pg.url, &hook);
    wait_ready(
        &http,
        &format!("{base_a}/ready"),
        &mut a,
        Duration::from_secs(60),
    )
    .await;
    wait_ready(
        &http,
        &format!("{base_b}/ready"),
        &mut b,
        Duration::from_secs(60),
    )
    .await;

    // Both listed alive; every singleton lease held by one of them.
    let t0 = Instant::now();
    let (view, ids) = loop {
        let v = cluster(&http, &base_a).await;
        let alive: Vec<String> = v["instances"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["alive"].as_bool().unwrap_or(false))
            .map(|i| i["id"].as_str().unwrap_or_default().to_owned())
            .collect();
        if alive.len() == 2 && all_singletons_held(&holders(&v), &hook_host) {
            break (v, alive);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "instances and leases not settled: {v:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let id_b = cluster(&http, &base_b).await["instance"]
        .as_str()
        .unwrap()
        .to_owned();
    let id_a = view["instance"].as_str().unwrap().to_owned();
    assert!(ids.contains(&id_a) && ids.contains(&id_b), "{view:#}");
    for holder in holders(&view).values() {
        assert!(ids.contains(holder), "held by a listed instance: {view:#}");
    }

    // The relay works through whoever holds it.
    pause(&http, &base_a, "before-kill").await;
    wait_delivered(&got, "before-kill", Duration::from_secs(20)).await;

    // SIGKILL the holder of the health monitor; the other must take it all.
    let monitor_holder = holders(&view)["health-monitor"].clone();
    let (mut victim, mut survivor, survivor_base, survivor_id) = if monitor_holder == id_a {
        (a, b, base_b, id_b)
    } else {
        (b, a, base_a, id_a)
    };
    victim.child.kill().expect("SIGKILL");
    let killed = Instant::now();
    victim.child.wait().expect("reaped");
    let taken_after = loop {
        let v = cluster(&http, &survivor_base).await;
        let h = holders(&v);
        if all_singletons_held(&h, &hook_host) && h.values().all(|x| x == &survivor_id) {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the survivor did not take every lease: {v:#}"
        );
        if let Ok(Some(st)) = survivor.child.try_wait() {
            panic!("the survivor exited ({st}):\n{}", survivor.stderr());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("measured: survivor held every lease {taken_after:?} after SIGKILL of the holder");
    assert!(
        taken_after <= Duration::from_secs(15),
        "a dead holder's lease is taken over within 15 s, took {taken_after:?}"
    );

    // The survivor's relay resumes from the stored cursor: the new event is
    // delivered once. (The event delivered before the kill may come again
    // only if the victim died between delivery and its cursor ack: at least
    // once.)
    pause(&http, &survivor_base, "after-kill").await;
    wait_delivered(&got, "after-kill", Duration::from_secs(20)).await;
    let after = got
        .lock()
        .unwrap()
        .iter()
        .filter(|(k, a)| k == "agent.paused" && a == "after-kill")
        .count();
    assert_eq!(after, 1, "delivered once by the survivor's relay");

    drop(survivor);
    store_common::drop_schema(&pg).await;
}

/// One chat turn of `agent` through `base`: the status.
async fn turn(http: &reqwest::Client, base: &str, agent: &str) -> (u16, String) {
    chat_turn(http, base, agent, "ok").await
}

/// One chat turn of `agent` for `model` through `base`: status and body.
async fn chat_turn(http: &reqwest::Client, base: &str, agent: &str, model: &str) -> (u16, String) {
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .header("x-hale-agent", agent)
        .json(&serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("turn");
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}

/// Sends turns of `agent` to `base` until one answers `want`; the time it took.
async fn until_status(
    http: &reqwest::Client,
    base: &str,
    agent: &str,
    want: u16,
    limit: Duration,
) -> (Duration, String) {
    until_status_of(http, base, agent, "ok", want, limit).await
}

/// [`until_status`] with turns for `model`.
async fn until_status_of(
    http: &reqwest::Client,
    base: &str,
    agent: &str,
    model: &str,
    want: u16,
    limit: Duration,
) -> (Duration, String) {
    let t0 = Instant::now();
    loop {
        let (status, body) = chat_turn(http, base, agent, model).await;
        if status == want {
            return (t0.elapsed(), body);
        }
        assert!(
            t0.elapsed() < limit,
            "{base}: no {want} for {agent} within {limit:?}; last {status}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An operator's pause on instance B refuses the agent on instance A within
/// 1 s (LISTEN/NOTIFY, no database read per request), and a resume on A lets
/// it through on B again within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue11_pause_on_b_refuses_the_agent_on_a_within_1s() {
    let Some(pg) = store_common::pg_scratch().await else {
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let http = hale_testkit::client(Duration::from_secs(30));
    let got = Arc::new(Mutex::new(Vec::new()));
    let (hook, _) = start_receiver(got).await;
    let (chaos, chaos_base) = common::start_chaos(&http, dir.path()).await;
    let provider = format!("{chaos_base}/v1");
    let (mut a, base_a) = serve_with(dir.path(), "a", &pg.url, &hook, &provider);
    let (mut b, base_b) = serve_with(dir.path(), "b", &pg.url, &hook, &provider);
    for (p, base) in [(&mut a, &base_a), (&mut b, &base_b)] {
        wait_ready(&http, &format!("{base}/ready"), p, Duration::from_secs(60)).await;
    }
    let agent = "before-kill";
    assert_eq!(turn(&http, &base_a, agent).await.0, 200, "served on A");
    assert_eq!(turn(&http, &base_b, agent).await.0, 200, "served on B");

    pause(&http, &base_b, agent).await;
    let (took, body) = until_status(&http, &base_a, agent, 423, Duration::from_secs(10)).await;
    eprintln!("measured: pause on B refused on A after {took:?}");
    assert!(
        body.contains("operator"),
        "refused for the operator's pause: {body}"
    );
    assert!(
        took <= Duration::from_secs(1),
        "control holds on every instance within 1 s, took {took:?}"
    );

    let r = http
        .post(format!("{base_a}/agents/{agent}/resume"))
        .send()
        .await
        .expect("resume");
    assert!(r.status().is_success(), "resume on A: {}", r.status());
    let (took, _) = until_status(&http, &base_b, agent, 200, Duration::from_secs(10)).await;
    eprintln!("measured: resume on A served on B after {took:?}");
    assert!(
        took <= Duration::from_secs(1),
        "control holds on every instance within 1 s, took {took:?}"
    );

    drop((a, b, chaos));
    store_common::drop_schema(&pg).await;
}

/// An `Idempotency-Key` answered by instance A is answered by instance B
/// from the store, without a second upstream call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue11_idempotency_key_answered_by_a_is_replayed_by_b_without_upstream_call() {
    let Some(pg) = store_common::pg_scratch().await else {
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let http = hale_testkit::client(Duration::from_secs(30));
    let (hook, _) = start_receiver(Arc::new(Mutex::new(Vec::new()))).await;
    let (chaos, chaos_base) = common::start_chaos(&http, dir.path()).await;
    let upstream_calls = || async {
        let v: serde_json::Value =
            hale_testkit::get_json(&http, &format!("{chaos_base}/chaos/stats")).await;
        v["requests_per_model"]["ok"].as_u64().unwrap_or(0)
    };
    let provider = format!("{chaos_base}/v1");
    let (mut a, base_a) = serve_with(dir.path(), "a", &pg.url, &hook, &provider);
    let (mut b, base_b) = serve_with(dir.path(), "b", &pg.url, &hook, &provider);
    for (p, base) in [(&mut a, &base_a), (&mut b, &base_b)] {
        wait_ready(&http, &format!("{base}/ready"), p, Duration::from_secs(60)).await;
    }
    let call = |base: String| {
        let http = http.clone();
        async move {
            let r = http
                .post(format!("{base}/v1/chat/completions"))
                .header("x-hale-agent", "before-kill")
                .header("idempotency-key", "order-42")
                .json(&serde_json::json!({"model": "ok", "messages": [{"role": "user", "content": "charge once"}]}))
                .send()
                .await
                .expect("call");
            let status = r.status().as_u16();
            let replayed = r.headers().get("x-hale-idempotent-replay").is_some();
            (status, replayed, r.text().await.unwrap_or_default())
        }
    };
    let (status, replayed, first) = call(base_a.clone()).await;
    assert_eq!((status, replayed), (200, false), "{first}");
    let calls = upstream_calls().await;
    assert_eq!(calls, 1, "one upstream call for the first answer");

    let (status, replayed, second) = call(base_b.clone()).await;
    assert_eq!((status, replayed), (200, true), "{second}");
    assert_eq!(second, first, "the same answer");
    assert_eq!(upstream_calls().await, calls, "no upstream call on B");

    drop((a, b, chaos));
    store_common::drop_schema(&pg).await;
}

/// Two `hale serve` (A and B) on one fresh PostgreSQL schema, in front of
/// one chaos provider (model `m1`), each with its own data directory.
struct Pair {
    pg: store_common::PgScratch,
    http: reqwest::Client,
    chaos_base: String,
    a: String,
    b: String,
    _procs: [common::Proc; 3],
    _dir: tempfile::TempDir,
}

impl Pair {
    /// Starts the pair with `extra` added to both configs; None (skip) when
    /// PostgreSQL is unreachable outside CI.
    async fn start(extra: &str) -> Option<Pair> {
        let pg = store_common::pg_scratch().await?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let http = hale_testkit::client(Duration::from_secs(30));
        let (chaos, chaos_base) = common::start_chaos(&http, dir.path()).await;
        let config = format!(
            "storage: \"{}\"
providers:
  - {{name: p1, kind: openai, base_url: {chaos_base}/v1, default_model: m1}}
agents:
  default: {{provider: p1}}
  bot: {{provider: p1, budget: {{max_tokens_per_task: 2000}}}}
self_healing:
  max_consecutive_failures: 3
  resume_probe_after_ms: 600000
retry:
  server_error: {{max_attempts: 1, initial_ms: 10, max_ms: 10}}
{extra}",
            pg.url
        );
        let mut started = Vec::new();
        for name in ["a", "b"] {
            let sub = dir.path().join(name);
            std::fs::create_dir_all(&sub).unwrap();
            started.push(common::start_serve(&http, &sub, &config, &[]).await);
        }
        let (b_proc, b) = started.pop().unwrap();
        let (a_proc, a) = started.pop().unwrap();
        Some(Pair {
            pg,
            http,
            chaos_base,
            a,
            b,
            _procs: [chaos, a_proc, b_proc],
            _dir: dir,
        })
    }

    /// Turns of `bot` in `task`, alternating A, B, A, … 100 ms apart (an
    /// agent's pace: the totals reach an instance with its own next commit,
    /// tens of ms on this machine's PostgreSQL), until one answers `stop`.
    /// The served answers' bodies, and the `stop` answer's body if it came.
    async fn alternate_until(
        &self,
        task: &str,
        stop: u16,
    ) -> (Vec<serde_json::Value>, Option<serde_json::Value>) {
        let mut served = Vec::new();
        for i in 0..200 {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let base = if i % 2 == 0 { &self.a } else { &self.b };
            match bot_turn(&self.http, base, task).await {
                (200, body) => served.push(body),
                (s, body) if s == stop => return (served, Some(body)),
                (s, body) => panic!("unexpected {s}: {body}"),
            }
        }
        (served, None)
    }

    /// Stops the processes, then drops the schema.
    async fn finish(self) {
        let Pair { pg, _procs, .. } = self;
        drop(_procs);
        store_common::drop_schema(&pg).await;
    }
}

/// A chat turn of agent `bot` in task `task`: status and body.
async fn bot_turn(http: &reqwest::Client, base: &str, task: &str) -> (u16, serde_json::Value) {
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .header("x-hale-agent", "bot")
        .header("x-hale-task", task)
        .json(&serde_json::json!({"model": "m1", "messages": [{"role": "user", "content": "count me once"}]}))
        .send()
        .await
        .expect("turn");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or_default())
}

async fn agent_view(http: &reqwest::Client, base: &str, agent: &str) -> serde_json::Value {
    http.get(format!("{base}/agents/{agent}"))
        .send()
        .await
        .expect("GET /agents/{id}")
        .json()
        .await
        .expect("agent json")
}

/// Counted once (docs/operations.md, "Scale-out on PostgreSQL"): three failed
/// turns of one agent spread over instances A and B (A, B, A) pause it, as
/// three on one instance would — neither instance saw three itself. The pause
/// is decided from the totals the database answered to A's count and holds on B
/// too, without another turn being sent to either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue11_three_failed_turns_spread_over_a_and_b_pause_the_agent() {
    let Some(p) = Pair::start("").await else {
        return;
    };
    let (http, chaos_base, base_a, base_b) = (
        p.http.clone(),
        p.chaos_base.clone(),
        p.a.clone(),
        p.b.clone(),
    );
    assert_eq!(bot_turn(&http, &base_a, "t").await.0, 200);
    // Counts are ordered across instances only once committed: let this
    // success's count (a clear) commit before failures elsewhere follow.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = http
        .post(format!("{chaos_base}/chaos/override"))
        .json(&serde_json::json!({"model": "m1", "fault": "error-503"}))
        .send()
        .await
        .expect("override");
    assert!(r.status().is_success());
    for base in [&base_a, &base_b, &base_a] {
        let (status, body) = bot_turn(&http, base, "t").await;
        assert_eq!(status, 503, "a failed turn on {base}: {body}");
    }
    // No more turns: the pause must come from the counted totals.
    let t0 = Instant::now();
    loop {
        let (va, vb) = (
            agent_view(&http, &base_a, "bot").await,
            agent_view(&http, &base_b, "bot").await,
        );
        if va["state"] == "paused" && vb["state"] == "paused" {
            eprintln!(
                "measured: paused on both {:?} after the third failure",
                t0.elapsed()
            );
            assert_eq!(va["pause"]["by"], "auto", "{va}");
            assert_eq!(va["consecutive_failures"], 3, "{va}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "not paused on both within 5 s: A {} ({}), B {} ({})",
            va["state"],
            va["consecutive_failures"],
            vb["state"],
            vb["consecutive_failures"]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for base in [&base_a, &base_b] {
        let (status, body) = bot_turn(&http, base, "t").await;
        assert_eq!(status, 423, "refused on {base}: {body}");
    }
    p.finish().await;
}

/// Counted once (docs/operations.md, "Scale-out on PostgreSQL"): a task's token
/// budget spent alternately on A and B stops at the cap as on one instance,
/// give or take the turns an instance has not heard of yet (its view lags the
/// other instance by the counts committed since its own last commit: one group
/// commit); both refuse after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue11_task_budget_spent_on_a_and_b_stops_at_the_cap() {
    let Some(p) = Pair::start("").await else {
        return;
    };
    let (http, base_a, base_b) = (p.http.clone(), p.a.clone(), p.b.clone());
    // The cap is 2,000 tokens of task "spend"; each served turn's tokens
    // are read from its answer.
    let (served, refusal) = p.alternate_until("spend", 402).await;
    let spent: Vec<u64> = served
        .iter()
        .map(|b| b["usage"]["total_tokens"].as_u64().expect("usage"))
        .collect();
    let refused = refusal.is_some_and(|b| b["error"]["type"] == "budget_exceeded");
    let total: u64 = spent.iter().sum();
    let before_last = total - spent.last().copied().unwrap_or(0);
    let largest = spent.iter().copied().max().unwrap_or(0);
    eprintln!(
        "measured: {} turns served across A and B, {total} tokens (cap 2,000; largest turn {largest})",
        spent.len()
    );
    eprintln!(
        "A: {}",
        agent_view(&http, &base_a, "bot").await["budget"]["tasks"]["spend"]["spend"]
    );
    eprintln!(
        "B: {}",
        agent_view(&http, &base_b, "bot").await["budget"]["tasks"]["spend"]["spend"]
    );
    assert!(refused, "never refused after {} turns", spent.len());
    assert!(total >= 2000, "refused before the cap: {total}");
    // One instance admits a turn only while the spend is under the cap; an
    // instance's view lags the other's turns since its own last commit (one
    // turn at this pace): one turn more, and one more for a slow commit.
    // Counted per instance, each would serve up to the cap: about 4,000.
    assert!(
        before_last < 2000 + 2 * largest,
        "counted once: {total} tokens served, {before_last} before the last turn (cap 2,000, largest turn {largest})"
    );
    for base in [&base_a, &base_b] {
        let (status, body) = bot_turn(&http, base, "spend").await;
        assert_eq!(status, 402, "both refuse after the cap ({base}): {body}");
    }
    // Another task of the agent is not capped by this one's spend.
    assert_eq!(bot_turn(&http, &base_b, "other").await.0, 200);
    p.finish().await;
}

/// Idempotency across instances (docs/operations.md, "Scale-out on
/// PostgreSQL"): a duplicate of an `Idempotency-Key` that instance A is still
/// answering, sent to instance B, waits for A's answer (B finds A's claim
/// and is woken by its release, `NOTIFY hale_idem`) and is answered from the
/// store: one upstream call for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue11_concurrent_duplicate_on_b_waits_for_a_and_calls_upstream_once() {
    let Some(p) = Pair::start("").await else {
        return;
    };
    let (http, chaos_base, base_a, base_b) = (
        p.http.clone(),
        p.chaos_base.clone(),
        p.a.clone(),
        p.b.clone(),
    );
    let r = http
        .post(format!("{chaos_base}/chaos/override"))
        .json(&serde_json::json!({"model": "m1", "fault": "slow-first-token:ms=1500"}))
        .send()
        .await
        .expect("override");
    assert!(r.status().is_success());
    let call = |base: String| {
        let http = http.clone();
        async move {
            let t0 = Instant::now();
            let r = http
                .post(format!("{base}/v1/chat/completions"))
                .header("x-hale-agent", "bot")
                .header("idempotency-key", "charge-7")
                .json(&serde_json::json!({"model": "m1", "messages": [{"role": "user", "content": "charge once"}]}))
                .send()
                .await
                .expect("call");
            let status = r.status().as_u16();
            let replayed = r.headers().get("x-hale-idempotent-replay").is_some();
            (
                status,
                replayed,
                r.text().await.unwrap_or_default(),
                t0.elapsed(),
            )
        }
    };
    let first = tokio::spawn(call(base_a.clone()));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (status_b, replayed_b, body_b, took_b) = call(base_b.clone()).await;
    let (status_a, replayed_a, body_a, took_a) = first.await.unwrap();
    eprintln!(
        "measured: A answered in {took_a:?}; B's duplicate waited and answered in {took_b:?}"
    );
    assert_eq!((status_a, replayed_a), (200, false), "{body_a}");
    assert_eq!(
        (status_b, replayed_b),
        (200, true),
        "B replays A's answer: {body_b}"
    );
    assert_eq!(body_b, body_a, "the same answer");
    let stats: serde_json::Value =
        hale_testkit::get_json(&http, &format!("{chaos_base}/chaos/stats")).await;
    assert_eq!(
        stats["requests_per_model"]["m1"].as_u64(),
        Some(1),
        "one upstream call for both: {stats}"
    );
    p.finish().await;
}

/// NATS with JetStream for the cluster tests: the machine's server
/// (`HALE_TEST_NATS_URL`, default `nats://127.0.0.1:4222`), with a stream
/// and subjects of the test's own. None (skip) when unreachable, except
/// under `CI=true`, where that fails.
async fn nats_or_skip() -> Option<String> {
    let url =
        std::env::var("HALE_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    match async_nats::connect(&url).await {
        Ok(_) => Some(url),
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but NATS is unreachable at {url}: {e}"
            );
            eprintln!("SKIP: NATS unreachable at {url}: {e}");
            None
        }
    }
}

/// The `Nats-Msg-Id`s and (kind, agent) of every message in `stream`.
async fn stream_messages(url: &str, stream: &str) -> Vec<(String, String)> {
    let out = jetstream_messages(url, stream, None, Duration::from_secs(5))
        .await
        .into_iter()
        .map(|m| {
            let ev = m.json();
            let kind = ev["kind"].as_str().unwrap_or_default();
            let agent = ev["agent"].as_str().unwrap_or_default();
            (m.id.clone(), format!("{kind} {agent}"))
        })
        .collect();
    let js = async_nats::jetstream::new(async_nats::connect(url).await.expect("nats"));
    let _ = js.delete_stream(stream).await;
    out
}

/// Scale-out (docs/operations.md, "Scale-out on PostgreSQL") with three
/// instances on one PostgreSQL and one NATS: while operators pause agents
/// through all three, the holder of the NATS relay is killed with SIGKILL;
/// another instance takes the relay within 15 s and resumes from the stored
/// cursor, and every event of the run reaches JetStream exactly once (distinct
/// `Nats-Msg-Id`s) with none missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue11_three_instances_nats_relay_holder_killed_every_event_reaches_jetstream_once() {
    let Some(pg) = store_common::pg_scratch().await else {
        return;
    };
    let Some(nats) = nats_or_skip().await else {
        store_common::drop_schema(&pg).await;
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let http = hale_testkit::client(Duration::from_secs(30));
    let tag = format!("{}_{}", std::process::id(), free_port());
    let stream = format!("HALE_TEST_{tag}");
    let (_chaos, chaos_base) = common::start_chaos(&http, dir.path()).await;
    let config = format!(
        "storage: \"{}\"
providers:
  - {{name: p1, kind: openai, base_url: {chaos_base}/v1, default_model: m1}}
agents:
  default: {{provider: p1}}
events:
  nats: {{url: \"{nats}\", subject_prefix: \"hale.test.{tag}\", stream: \"{stream}\"}}
",
        pg.url
    );
    let mut procs = Vec::new();
    for name in ["a", "b", "c"] {
        let sub = dir.path().join(name);
        std::fs::create_dir_all(&sub).unwrap();
        procs.push(common::start_serve(&http, &sub, &config, &[]).await);
    }
    let ids: Vec<String> = {
        let mut v = Vec::new();
        for (_, base) in &procs {
            v.push(
                cluster(&http, base).await["instance"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
        v
    };
    // Wait for the relay's lease to be held, then pause agents through all three.
    let relay_holder = |v: &serde_json::Value| holders(v).get("relay:nats").cloned();
    let t0 = Instant::now();
    let holder = loop {
        if let Some(h) = relay_holder(&cluster(&http, &procs[0].1).await) {
            break h;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "relay:nats never held"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut agents = Vec::new();
    for i in 0..30 {
        let (_, base) = &procs[i % 3];
        let a = format!("ag-{i}");
        assert_eq!(turn(&http, base, &a).await.0, 200, "a turn makes {a} known");
        pause(&http, base, &a).await;
        agents.push(a);
    }
    // SIGKILL the relay's holder; keep pausing through the two others.
    let victim = ids
        .iter()
        .position(|id| *id == holder)
        .expect("holder is one of the three");
    let (mut dead, _) = procs.remove(victim);
    dead.child.kill().expect("SIGKILL");
    let killed = Instant::now();
    dead.child.wait().expect("reaped");
    let survivors: Vec<String> = ids.iter().filter(|id| **id != holder).cloned().collect();
    for i in 30..60 {
        let (_, base) = &procs[i % 2];
        let a = format!("ag-{i}");
        assert_eq!(turn(&http, base, &a).await.0, 200, "a turn makes {a} known");
        pause(&http, base, &a).await;
        agents.push(a);
    }
    let taken_after = loop {
        let v = cluster(&http, &procs[0].1).await;
        if let Some(h) = relay_holder(&v).filter(|h| survivors.contains(h)) {
            eprintln!("relay:nats taken by {h}");
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "relay:nats not taken over: {v:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("measured: relay:nats taken over {taken_after:?} after SIGKILL of its holder");
    assert!(
        taken_after <= Duration::from_secs(15),
        "a dead holder's lease is taken over within 15 s, took {taken_after:?}"
    );
    // Every pause reaches JetStream; read the stream once it has them all.
    let t1 = Instant::now();
    let msgs = loop {
        let js = async_nats::jetstream::new(async_nats::connect(&nats).await.expect("nats"));
        let n = match js.get_stream(&stream).await {
            Ok(mut s) => s.info().await.map(|i| i.state.messages).unwrap_or(0),
            Err(_) => 0,
        };
        if n >= agents.len() as u64 || t1.elapsed() > Duration::from_secs(30) {
            break stream_messages(&nats, &stream).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let distinct: std::collections::BTreeSet<&str> =
        msgs.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(distinct.len(), msgs.len(), "each event once by Nats-Msg-Id");
    assert!(!distinct.contains(""), "every message has a Nats-Msg-Id");
    for a in &agents {
        assert_eq!(
            msgs.iter()
                .filter(|(_, what)| *what == format!("agent.paused {a}"))
                .count(),
            1,
            "agent.paused of {a} reached JetStream exactly once ({} messages)",
            msgs.len()
        );
    }
    eprintln!(
        "measured: {} events in JetStream, each once, none missing",
        msgs.len()
    );
    drop(procs);
    store_common::drop_schema(&pg).await;
}

/// Counted once (docs/operations.md, "Scale-out on PostgreSQL"): the guard's
/// per-task event cap is reached over two instances as on one (each turn is two
/// events: its request and its response), give or take the turn an instance has
/// not heard of yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue11_guard_event_cap_of_a_task_served_by_a_and_b_is_reached_once() {
    let Some(p) = Pair::start("guard: {max_events: 20}").await else {
        return;
    };
    let (http, base_a, base_b) = (p.http.clone(), p.a.clone(), p.b.clone());
    let (turns, stop) = p.alternate_until("guarded", 409).await;
    let served = turns.len();
    let stopped = stop.is_some_and(|b| b["error"]["type"] == "safety_limit");
    eprintln!(
        "measured: {served} turns of the task served across A and B before the event cap (one instance: 10)"
    );
    assert!(stopped, "never stopped after {served} turns");
    // One instance serves 10 turns (20 events); counted per instance, the
    // two would serve 20.
    assert!(
        (10..=12).contains(&served),
        "counted once: {served} turns served (one instance: 10)"
    );
    for base in [&base_a, &base_b] {
        let (status, body) = bot_turn(&http, base, "guarded").await;
        assert_eq!(status, 409, "both stop the task ({base}): {body}");
    }
    p.finish().await;
}

/// A chat turn of `agent` (model m1) through `base`: the status and body.
async fn agent_turn(http: &reqwest::Client, base: &str, agent: &str) -> (u16, String) {
    chat_turn(http, base, agent, "m1").await
}

/// What two instances must agree on: the state, the pause's author, the
/// failures in a row and the counters.
fn agreed(v: &serde_json::Value) -> serde_json::Value {
    serde_json::json!([
        v["state"],
        v["pause"]["by"],
        v["consecutive_failures"],
        v["counters"]
    ])
}

/// Issue 28 §5: four turns of one agent spread over A and B (the last on
/// B), then no traffic: `GET /agents/{id}` says the same on both — four
/// turns, the same tokens and failures in a row — without A serving
/// anything of its own (the counts' commits notify every instance). The
/// time from the last answer until both agree is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue28_counters_and_state_agree_on_both_instances_without_traffic() {
    let Some(p) = Pair::start("").await else {
        return;
    };
    let agent = "count-agent";
    for base in [&p.a, &p.b, &p.a, &p.b] {
        let (status, body) = agent_turn(&p.http, base, agent).await;
        assert_eq!(status, 200, "served on {base}: {body}");
    }
    let last = Instant::now();
    loop {
        let (va, vb) = (
            agent_view(&p.http, &p.a, agent).await,
            agent_view(&p.http, &p.b, agent).await,
        );
        if agreed(&va) == agreed(&vb) && va["counters"]["turns"] == 4 {
            eprintln!(
                "measured: both instances agree {:?} after the last answer: {}",
                last.elapsed(),
                agreed(&va)
            );
            assert_eq!(va["state"], "active", "{va}");
            break;
        }
        assert!(
            last.elapsed() < Duration::from_secs(10),
            "no agreement within 10 s without traffic: A {} B {}",
            agreed(&va),
            agreed(&vb)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    p.finish().await;
}

/// Issue 28 §5: an operator's pause sent to B 10 ms after the agent's first
/// turn on A is never a 404 (B reads the row, or creates the agent paused),
/// and holds on both instances: B refuses the next request at once, A within
/// a notification's latency, and both still refuse afterwards (A's own
/// write of its first turn does not undo the pause).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue28_pause_on_b_10ms_after_the_first_turn_on_a_holds_on_both() {
    let Some(p) = Pair::start("").await else {
        return;
    };
    let agent = "new-agent";
    let (status, body) = agent_turn(&p.http, &p.a, agent).await;
    assert_eq!(status, 200, "first turn on A: {body}");
    tokio::time::sleep(Duration::from_millis(10)).await;
    let r = p
        .http
        .post(format!("{}/agents/{agent}/pause", p.b))
        .send()
        .await
        .expect("pause");
    let status = r.status();
    let v: serde_json::Value = r.json().await.unwrap_or_default();
    assert!(status.is_success(), "pause on B: {status} {v}");
    assert_eq!(v["state"], "paused", "{v}");
    eprintln!("pause on B answered created={}", v["created"]);

    let (status, body) = agent_turn(&p.http, &p.b, agent).await;
    assert_eq!(status, 423, "the next request on B: {body}");
    // A may serve the agent until it hears the pause (a notification's
    // latency): count what it answered meanwhile.
    let t0 = Instant::now();
    let mut served = 1;
    let body = loop {
        let (status, body) = agent_turn(&p.http, &p.a, agent).await;
        match status {
            423 => break body,
            200 => served += 1,
            other => panic!("A answered {other}: {body}"),
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "A still serves the paused agent after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    eprintln!(
        "measured: refused on A {:?} after the pause answered ({} turn(s) served meanwhile)",
        t0.elapsed(),
        served - 1
    );
    assert!(body.contains("operator"), "the operator's pause: {body}");
    // And it holds: A's writes of its turns have landed by now.
    tokio::time::sleep(Duration::from_millis(300).saturating_sub(t0.elapsed())).await;
    for base in [&p.a, &p.b] {
        let (status, body) = agent_turn(&p.http, base, agent).await;
        assert_eq!(status, 423, "still refused on {base}: {body}");
        let v = agent_view(&p.http, base, agent).await;
        assert_eq!(v["state"], "paused", "{base}: {v}");
        assert_eq!(
            v["counters"]["turns"], served,
            "{base}: every answered turn counted once: {v}"
        );
    }
    p.finish().await;
}

/// Issue 28 §5 on PostgreSQL: a pause on A of an agent no instance has seen
/// creates it paused, and its very first request, on B, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue28_pause_on_a_of_a_never_seen_agent_refuses_its_first_request_on_b() {
    let Some(p) = Pair::start("").await else {
        return;
    };
    let agent = "not-started-yet";
    let r = p
        .http
        .post(format!("{}/agents/{agent}/pause", p.a))
        .send()
        .await
        .expect("pause");
    let status = r.status();
    let v: serde_json::Value = r.json().await.unwrap_or_default();
    assert!(status.is_success(), "pause on A: {status} {v}");
    assert_eq!(v["created"], true, "{v}");
    let (took, body) = until_status_m1(&p.http, &p.b, agent, 423, Duration::from_secs(10)).await;
    eprintln!("measured: first request refused on B {took:?} after the pause");
    assert!(body.contains("operator"), "{body}");
    let v = agent_view(&p.http, &p.b, agent).await;
    assert_eq!(v["counters"]["turns"], 0, "never served: {v}");
    p.finish().await;
}

/// [`until_status`] with model m1 (the [`Pair`]'s provider).
async fn until_status_m1(
    http: &reqwest::Client,
    base: &str,
    agent: &str,
    want: u16,
    limit: Duration,
) -> (Duration, String) {
    until_status_of(http, base, agent, "m1", want, limit).await
}

/// Issue 28 §5 on SQLite (one instance, the real binary): an operator's
/// pause of an agent hale has never seen answers `created: true` with the
/// agent paused, and the agent's first request is a 423; a resume of
/// another unknown agent is still a 404 (only a pause creates).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue28_sqlite_pause_of_a_never_seen_agent_creates_it_paused() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let (chaos, chaos_base) = common::start_chaos(&http, dir.path()).await;
    let config = format!(
        "providers:
  - {{name: p1, kind: openai, base_url: {chaos_base}/v1, default_model: m1}}
agents:
  default: {{provider: p1}}
"
    );
    let (serve, base) = common::start_serve(&http, dir.path(), &config, &[]).await;
    let agent = "kill-switch";
    let r = http
        .post(format!("{base}/agents/{agent}/pause"))
        .send()
        .await
        .expect("pause");
    let status = r.status();
    let v: serde_json::Value = r.json().await.unwrap_or_default();
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["created"], true, "{v}");
    assert_eq!(v["state"], "paused", "{v}");
    assert_eq!(v["pause"]["by"], "operator", "{v}");
    let (status, body) = agent_turn(&http, &base, agent).await;
    assert_eq!(status, 423, "its first request: {body}");
    assert!(body.contains("agent_paused"), "{body}");
    // Known now: a second pause says so.
    let v: serde_json::Value = http
        .post(format!("{base}/agents/{agent}/pause"))
        .send()
        .await
        .expect("pause")
        .json()
        .await
        .unwrap_or_default();
    assert_eq!(v["created"], false, "{v}");
    let r = http
        .post(format!("{base}/agents/never-seen/resume"))
        .send()
        .await
        .expect("resume");
    assert_eq!(r.status(), 404, "a resume creates nothing");
    drop((serve, chaos));
}
