//! Issue 28, item 4: "an answer is durable before it is released". Real
//! `hale serve` processes in front of `hale chaos`:
//!
//! - the kill test: clients at full speed, SIGKILL mid-traffic, restart, and
//!   every turn a client received an answer for is in the journal
//!   (`GET /turns/{id}`), with its event (`agent.fallback_used`: the route's
//!   primary always answers 503, so every answer names the turn in one), and
//!   counted in its agent — on SQLite and on PostgreSQL (a fresh schema, as
//!   in `cluster.rs`; unreachable: skipped, unless `CI=true`);
//! - a stream's final frame (`[DONE]`, `message_stop`) reaches the client
//!   only once the turn is journalled.
//!
//! `HALE_TEST_DURABILITY=relaxed` runs the same tests with
//! `journal: {durability: relaxed}`, which is how they were seen to fail.

mod common;
#[path = "../../hale-store/tests/common/mod.rs"]
#[allow(unused_macros, unused_imports)]
mod store_common;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Proc, free_port, wait_ready};
use futures::StreamExt;

const AGENTS: [&str; 4] = ["kill-a", "kill-b", "kill-c", "kill-d"];
/// Clients sending at once, each as fast as it is answered.
const CLIENTS: usize = 16;
/// The SIGKILL comes once this many answers arrived...
const ANSWERS: usize = 400;
/// ... or after this much traffic, whichever is first.
const TRAFFIC: Duration = Duration::from_secs(20);

fn durability() -> String {
    std::env::var("HALE_TEST_DURABILITY").unwrap_or_else(|_| "durable".into())
}

fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

async fn start_chaos(dir: &Path, http: &reqwest::Client) -> (Proc, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut chaos = Proc::spawn(&["chaos", "--listen", &listen], dir, "chaos");
    wait_ready(
        http,
        &format!("http://{listen}/chaos/stats"),
        &mut chaos,
        Duration::from_secs(30),
    )
    .await;
    (chaos, format!("http://{listen}"))
}

/// Writes the config of a `hale serve` on `storage` (SQLite in the data
/// directory when `None`) with route `r` = an always-503 primary, then a
/// healthy backup; returns its path and base URL.
fn config(dir: &Path, storage: Option<&str>, chaos: &str) -> (String, String) {
    let port = free_port();
    let storage = storage
        .map(|s| format!("storage: \"{s}\"\n"))
        .unwrap_or_default();
    let yaml = format!(
        "\
listen: 127.0.0.1:{port}
data_dir: {data}
{storage}journal: {{durability: {durability}}}
routes:
  r: [primary/error-503, backup/ok]
providers:
  - name: primary
    kind: openai
    base_url: {chaos}/v1
    default_model: error-503
  - name: backup
    kind: openai
    base_url: {chaos}/v1
    default_model: ok
retry:
  server_error: {{max_attempts: 1}}
",
        data = dir.join("data").display(),
        durability = durability(),
    );
    let path = dir.join("hale.yaml");
    std::fs::write(&path, yaml).unwrap();
    (
        path.to_string_lossy().into_owned(),
        format!("http://127.0.0.1:{port}"),
    )
}

async fn serve(dir: &Path, cfg: &str, base: &str, name: &str, http: &reqwest::Client) -> Proc {
    let mut p = Proc::spawn(&["serve", "--config", cfg], dir, name);
    wait_ready(
        http,
        &format!("{base}/ready"),
        &mut p,
        Duration::from_secs(60),
    )
    .await;
    p
}

fn chat(stream: bool) -> serde_json::Value {
    serde_json::json!({
        "model": "r",
        "stream": stream,
        "messages": [{"role": "user", "content": "hello"}],
    })
}

/// The turn ids of the `agent.fallback_used` events in the outbox.
async fn fallback_turns(http: &reqwest::Client, base: &str) -> HashSet<String> {
    let text = http
        .get(format!(
            "{base}/events?follow=false&tail=100000&kind=agent.fallback_used"
        ))
        .send()
        .await
        .expect("GET /events")
        .text()
        .await
        .expect("events body");
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
        .filter_map(|ev| ev["turn"].as_str().map(str::to_owned))
        .collect()
}

/// Clients at full speed; SIGKILL after [`ANSWERS`] answers; restart; every
/// answered turn journalled, with its event, and counted in its agent.
async fn answered_turns_survive_a_kill(storage: Option<&str>) {
    let http = http();
    let dir = tempfile::tempdir().unwrap();
    let (_chaos, chaos) = start_chaos(dir.path(), &http).await;
    let (cfg, base) = config(dir.path(), storage, &chaos);
    let mut hale = serve(dir.path(), &cfg, &base, "serve-1", &http).await;

    // (turn id, agent) of every 200 a client read in full.
    let answered: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (http, base, answered, stop) =
            (http.clone(), base.clone(), answered.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let agent = AGENTS[c % AGENTS.len()];
            while !stop.load(Ordering::Relaxed) {
                let Ok(r) = http
                    .post(format!("{base}/v1/chat/completions"))
                    .header("x-hale-agent", agent)
                    .json(&chat(false))
                    .send()
                    .await
                else {
                    break; // the server is gone
                };
                let id = r
                    .headers()
                    .get("x-hale-turn-id")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let ok = r.status().is_success();
                // Answered = the whole body received.
                if r.bytes().await.is_ok() && ok {
                    let id = id.expect("an answer names its turn");
                    answered.lock().unwrap().push((id, agent.to_owned()));
                }
            }
        }));
    }
    // Until enough answers arrived (a few seconds), or at most TRAFFIC on a
    // machine too slow for that.
    let t0 = std::time::Instant::now();
    while answered.lock().unwrap().len() < ANSWERS && t0.elapsed() < TRAFFIC {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    hale.child.kill().expect("SIGKILL"); // std's kill is SIGKILL
    let _ = hale.child.wait();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = c.await;
    }
    let answered = std::mem::take(&mut *answered.lock().unwrap());
    assert!(!answered.is_empty(), "no answer before the kill");

    let _hale = serve(dir.path(), &cfg, &base, "serve-2", &http).await;
    let missing: Vec<String> = futures::stream::iter(answered.iter().cloned())
        .map(|(id, _)| {
            let (http, base) = (http.clone(), base.clone());
            async move {
                let r = http.get(format!("{base}/turns/{id}")).send().await;
                match r.map(|r| r.status()) {
                    Ok(s) if s.is_success() => None,
                    Ok(s) => Some(format!("{id} ({s})")),
                    Err(e) => Some(format!("{id} ({e})")),
                }
            }
        })
        .buffer_unordered(16)
        .filter_map(|m| async move { m })
        .collect()
        .await;
    let events = fallback_turns(&http, &base).await;
    let no_event: Vec<&str> = answered
        .iter()
        .map(|(id, _)| id.as_str())
        .filter(|id| !events.contains(*id))
        .collect();
    let mut per_agent: BTreeMap<&str, u64> = BTreeMap::new();
    for (_, a) in &answered {
        *per_agent.entry(a.as_str()).or_default() += 1;
    }
    let mut undercounted = Vec::new();
    for (agent, n) in &per_agent {
        let v: serde_json::Value = http
            .get(format!("{base}/agents/{agent}"))
            .send()
            .await
            .expect("GET /agents")
            .json()
            .await
            .expect("agent json");
        let turns = v["counters"]["turns"].as_u64().unwrap_or(0);
        if turns < *n {
            undercounted.push(format!("{agent}: {turns} counted, {n} answered"));
        }
    }
    eprintln!(
        "{} answered turns; missing from the journal {}, without their event {}, agents undercounted {:?}",
        answered.len(),
        missing.len(),
        no_event.len(),
        undercounted
    );
    assert!(
        missing.is_empty() && no_event.is_empty() && undercounted.is_empty(),
        "of {} answered turns, {} are not journalled (first: {:?}), {} have no event (first: {:?}); undercounted: {:?}",
        answered.len(),
        missing.len(),
        missing.iter().take(3).collect::<Vec<_>>(),
        no_event.len(),
        no_event.iter().take(3).collect::<Vec<_>>(),
        undercounted
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_answered_turn_survives_sigkill_on_sqlite() {
    answered_turns_survive_a_kill(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_answered_turn_survives_sigkill_on_postgres() {
    let Some(pg) = store_common::pg_scratch().await else {
        return;
    };
    answered_turns_survive_a_kill(Some(&pg.url)).await;
    store_common::drop_schema(&pg).await;
}

/// The journal's commit blocked (a test connection holds SQLite's write
/// lock for 200 ms): the stream's closing frame (`last`) does not reach the
/// client while the lock is held, and when it does, the turn is journalled.
/// With `journal.durability: relaxed` the frame goes out at once and this
/// fails.
async fn final_frame_waits_for_a_blocked_commit(
    path: &'static str,
    body: serde_json::Value,
    last: &'static str,
) {
    use sqlx::Connection;
    let http = http();
    let dir = tempfile::tempdir().unwrap();
    let (_chaos, chaos) = start_chaos(dir.path(), &http).await;
    let (cfg, base) = config(dir.path(), None, &chaos);
    let _hale = serve(dir.path(), &cfg, &base, "serve", &http).await;
    let db = dir.path().join("data").join("hale.db");
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
        .await
        .expect("open hale.db");
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut conn)
        .await
        .expect("take the write lock");
    let locked = Arc::new(AtomicBool::new(true));
    let client = {
        let (http, base, locked) = (http.clone(), base.clone(), locked.clone());
        tokio::spawn(async move {
            let r = http
                .post(format!("{base}{path}"))
                .header("x-hale-agent", "blocked")
                .header("anthropic-version", "2023-06-01")
                .json(&body)
                .send()
                .await
                .expect("stream request");
            assert!(r.status().is_success(), "{}", r.status());
            let id = r.headers()["x-hale-turn-id"].to_str().unwrap().to_owned();
            let mut seen = String::new();
            let mut frames = r.bytes_stream();
            while let Some(chunk) = frames.next().await {
                seen.push_str(&String::from_utf8_lossy(&chunk.expect("stream chunk")));
                if seen.contains(last) {
                    break;
                }
            }
            let done_while_locked = locked.load(Ordering::SeqCst);
            let turn = http.get(format!("{base}/turns/{id}")).send().await.unwrap();
            let status = turn.status();
            let v: serde_json::Value = turn.json().await.unwrap_or_default();
            (seen.contains(last), done_while_locked, status, v)
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Marked unlocked before the lock goes: a closing frame seen while
    // marked locked came while the commit could not have happened.
    locked.store(false, Ordering::SeqCst);
    sqlx::query("ROLLBACK")
        .execute(&mut conn)
        .await
        .expect("release the write lock");
    let (done, done_while_locked, status, turn) = client.await.expect("the client");
    assert!(done, "the stream ended without {last}");
    assert!(
        !done_while_locked,
        "{last} reached the client while the turn's commit was blocked"
    );
    assert!(status.is_success(), "GET /turns after {last}: {status}");
    assert_eq!(turn["status"], "succeeded", "{turn}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_stream_done_waits_for_a_blocked_commit() {
    final_frame_waits_for_a_blocked_commit("/v1/chat/completions", chat(true), "[DONE]").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_stream_message_stop_waits_for_a_blocked_commit() {
    let body = serde_json::json!({
        "model": "r",
        "max_tokens": 64,
        "stream": true,
        "messages": [{"role": "user", "content": "hello"}],
    });
    final_frame_waits_for_a_blocked_commit("/v1/messages", body, "message_stop").await;
}
