//! `hale demo`: hale keeping a scripted agent alive, on loopback only.
//!
//! Two chaos providers (one OpenAI-shaped, one Anthropic-shaped) play a
//! flaky primary and a healthy backup (one primary speaks the Responses API,
//! for a Responses client's scenario); hale runs in-process on its embedded
//! defaults (SQLite in a temporary data directory) with timings shortened so
//! the show ends in well under a minute. A scripted agent walks through the
//! failure classes hale heals, printing each turn's timeline from
//! `GET /turns/{id}` and the events hale recorded, then a summary table. The
//! exit code says whether every scenario ended as expected, so the demo is
//! also a smoke test.

use anyhow::Context;
use futures::StreamExt;
use hale_core::config::{Config, ProviderApi, ProviderConfig, ProviderKind, Target};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Outcome {
    scenario: &'static str,
    expected: &'static str,
    got: String,
    ok: bool,
    served_by: String,
    attempts: String,
    elapsed: Duration,
}

/// Each scenario's route: a primary (OpenAI-shaped chaos) and a backup
/// (Anthropic-shaped chaos) of its own, so one scenario's cooldowns and
/// breakers do not colour the next.
const SCENARIOS: &[(&str, &str, &str)] = &[
    ("rate-limited", "rate-limit:retry_after=1:times=1", "ok"),
    ("filtered", "content-filter", "ok"),
    ("outage", "error-503", "ok"),
    ("flapping", "down:secs=5", "ok"),
    ("cut", "cut:after=20:tokens=40", "ok:tokens=40"),
    // Its own model name: a `cut` is once per model name on the chaos server.
    (RESPONSES_ROUTE, "cut:after=15:tokens=40", "ok:tokens=40"),
    ("broken", "auth", "auth"),
    ("healthy", "ok", "ok"),
];

/// The scenario whose client calls `POST /v1/responses`; its primary is an
/// `api: responses` provider (the backup Anthropic-shaped, as the others).
const RESPONSES_ROUTE: &str = "responses-cut";

/// The demo's config: chaos providers per scenario, one route each, short timings.
fn demo_config(primary_url: &str, backup_url: &str, data_dir: PathBuf) -> Config {
    let mut providers = Vec::new();
    for (route, primary_model, backup_model) in SCENARIOS {
        let mut primary = ProviderConfig::new(
            &format!("{route}-primary"),
            ProviderKind::OpenAi,
            primary_url,
            primary_model,
        );
        let mut backup = ProviderConfig::new(
            &format!("{route}-backup"),
            ProviderKind::Anthropic,
            backup_url,
            backup_model,
        );
        if *route == RESPONSES_ROUTE {
            primary.api = ProviderApi::Responses;
        }
        for p in [&mut primary, &mut backup] {
            p.timeout = Duration::from_secs(3);
            p.first_token_timeout = Duration::from_secs(3);
            p.stream_idle_timeout = Duration::from_secs(2);
        }
        providers.push(primary);
        providers.push(backup);
    }
    let mut cfg = Config::with_providers(providers);
    cfg.data_dir = data_dir;
    for (route, primary_model, backup_model) in SCENARIOS {
        let t = |p: String, m: &str| Target {
            provider: p,
            model: m.to_string(),
        };
        cfg.routes.insert(
            route.to_string(),
            vec![
                t(format!("{route}-primary"), primary_model),
                t(format!("{route}-backup"), backup_model),
            ],
        );
    }
    // Short timings so the whole show fits in well under a minute.
    cfg.retry.probe_interval = Duration::from_secs(1);
    cfg.retry.server_error.initial = Duration::from_millis(100);
    cfg.retry.server_error.max = Duration::from_millis(400);
    cfg.self_healing.circuit_breaker.failure_threshold = Some(3);
    cfg.self_healing.circuit_breaker.half_open_after = Duration::from_secs(1);
    cfg.self_healing.circuit_breaker.max_open = Duration::from_secs(1);
    cfg
}

pub async fn run(data_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let tmp;
    let dir = match data_dir {
        Some(d) => d,
        None => {
            tmp = tempfile::tempdir().context("cannot create a temporary data directory")?;
            tmp.path().to_path_buf()
        }
    };
    let loopback = "127.0.0.1:0".parse().expect("loopback address parses");
    let chaos_a = hale_chaos::spawn(loopback, hale_chaos::ChaosConfig::default()).await?;
    let chaos_b = hale_chaos::spawn(loopback, hale_chaos::ChaosConfig::default()).await?;
    let cfg = Arc::new(demo_config(
        &chaos_a.base_url_openai,
        &chaos_b.base_url_anthropic,
        dir.clone(),
    ));
    let store = hale_store::Store::open(None, &dir, (&cfg.events).into()).await?;
    let gw = hale_gateway::Gateway::new(cfg.clone(), store.clone()).await?;
    let listener = tokio::net::TcpListener::bind(loopback).await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(hale_gateway::http::serve(gw, listener, async {
        let _ = stop_rx.await;
    }));

    println!("hale demo — a scripted agent against two chaos providers, through hale at {base}");
    println!(
        "  primaries: OpenAI-shaped chaos at {}",
        chaos_a.base_url_openai
    );
    println!(
        "  backups:   Anthropic-shaped chaos at {}",
        chaos_b.base_url_anthropic
    );
    println!("  data:      {} (SQLite, WAL)\n", dir.display());

    let http = reqwest::Client::new();
    let agent = Agent {
        http: &http,
        base: &base,
        started: Instant::now(),
    };
    let mut outcomes = Vec::new();

    // 1. A rate limit with Retry-After is honoured on the same target.
    outcomes.push(
        agent
            .scenario(
                "rate limit honoured",
                "waits Retry-After, same target",
                "rate-agent",
                "rate-limited",
                false,
                |r| {
                    r.status == 200
                        && r.provider.ends_with("-primary")
                        && r.elapsed >= Duration::from_millis(900)
                },
            )
            .await?,
    );
    // 2. A persistent outage fails over.
    outcomes.push(
        agent
            .scenario(
                "outage failed over",
                "503 retried, then the backup",
                "outage-agent",
                "outage",
                false,
                |r| r.status == 200 && r.provider.ends_with("-backup"),
            )
            .await?,
    );
    // 3. A breaker opens, the backup serves at no upstream cost, probing closes it.
    let mut flapping_ok = true;
    let t0 = Instant::now();
    println!("\n▶ breaker opens, probes, closes — primary down for 5 s, one request every 0.7 s");
    let mut last = None;
    for i in 0..12 {
        let r = agent.call("flap-agent", "flapping", false).await?;
        let note = format!(
            "request {:>2}: served by {:<16} attempts {}",
            i + 1,
            r.provider,
            r.attempts
        );
        agent.print_turn(&note, &r).await;
        flapping_ok &= r.status == 200;
        last = Some(r);
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let back_on_primary = last
        .as_ref()
        .is_some_and(|r| r.provider.ends_with("-primary"));
    outcomes.push(Outcome {
        scenario: "breaker opens, probes, closes",
        expected: "backup during the outage, primary after",
        got: if back_on_primary {
            "back on primary".into()
        } else {
            "still on backup".into()
        },
        ok: flapping_ok && back_on_primary,
        served_by: last
            .as_ref()
            .map(|r| r.provider.clone())
            .unwrap_or_default(),
        attempts: "12 turns".into(),
        elapsed: t0.elapsed(),
    });
    // 4. A stream cut mid-answer is resumed on the backup.
    outcomes.push(
        agent
            .scenario(
                "stream cut and resumed",
                "complete answer, no gap",
                "stream-agent",
                "cut",
                true,
                |r| r.status == 200 && r.text == expected_words(40) && r.done,
            )
            .await?,
    );
    // 5. The same for a Responses client: cut on a Responses provider,
    // resumed on the Anthropic backup, one well-formed response.
    println!("\n▶ Responses stream cut and resumed — expected: one well-formed response, whole");
    let r = agent
        .call_responses("responses-agent", RESPONSES_ROUTE)
        .await?;
    agent.print_turn("", &r).await;
    outcomes.push(Outcome {
        scenario: "Responses stream resumed",
        expected: "one response.completed, no gap",
        got: if r.status == 200 {
            format!(
                "{}, {} words",
                if r.done { "completed" } else { "not completed" },
                r.text.split_whitespace().count()
            )
        } else {
            format!("{} {}", r.status, r.error_type)
        },
        ok: r.status == 200 && r.done && r.text == expected_words(40),
        served_by: r.provider.clone(),
        attempts: r.attempts.clone(),
        elapsed: r.elapsed,
    });
    // 6. A content-filter refusal is passed on, not retried, not failed over.
    outcomes.push(
        agent
            .scenario(
                "content filter passed on",
                "400 content_policy, 1 attempt",
                "filter-agent",
                "filtered",
                false,
                |r| r.status == 400 && r.error_type == "content_policy" && r.attempts == "1",
            )
            .await?,
    );
    // 7. An agent whose every provider fails is paused, then resumed.
    let t0 = Instant::now();
    println!(
        "\n▶ agent paused and resumed — 3 failed turns pause the agent; an operator resumes it"
    );
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let r = agent.call("fragile-agent", "broken", false).await?;
        println!("  turn → {} {}", r.status, r.error_type);
        statuses.push(r.status);
    }
    let resumed = http
        .post(format!("{base}/agents/fragile-agent/resume"))
        .send()
        .await?
        .status()
        .is_success();
    println!(
        "  POST /agents/fragile-agent/resume → {}",
        if resumed { "resumed" } else { "failed" }
    );
    let after = agent.call("fragile-agent", "healthy", false).await?;
    println!("  turn → {} served by {}", after.status, after.provider);
    let paused_ok = statuses == [503, 503, 503, 423] && resumed && after.status == 200;
    outcomes.push(Outcome {
        scenario: "agent paused and resumed",
        expected: "3×503, then 423, resume, 200",
        got: format!("{statuses:?}, then {}", after.status),
        ok: paused_ok,
        served_by: after.provider.clone(),
        attempts: "5 turns".into(),
        elapsed: t0.elapsed(),
    });

    // 8. A tool node frozen mid-job: the job finishes on the backup node.
    let (ok, got, served_by, attempts, elapsed) = crate::demo_tools::scene(store.clone()).await?;
    outcomes.push(Outcome {
        scenario: "tool node frozen mid-job",
        expected: "timeout, then the backup node",
        got,
        ok,
        served_by,
        attempts,
        elapsed,
    });

    // Events hale recorded.
    store.flush().await?;
    let events = store.events_after(0, 10_000, None).await?;
    let mut kinds = std::collections::BTreeMap::<&str, u32>::new();
    for e in &events {
        *kinds.entry(e.event.kind.as_str()).or_default() += 1;
    }

    println!(
        "\n  {:<30} {:<40} {:<30} {:<20} {:<9} {:>7}",
        "scenario", "expected", "got", "served", "attempts", "time"
    );
    println!("{}", "─".repeat(140));
    let mut all_ok = true;
    for o in &outcomes {
        all_ok &= o.ok;
        println!(
            "{} {:<30} {:<40} {:<30} {:<20} {:<9} {:>6.1}s",
            if o.ok { "✓" } else { "✗" },
            o.scenario,
            o.expected,
            o.got,
            o.served_by,
            o.attempts,
            o.elapsed.as_secs_f64()
        );
    }
    println!("\nevents recorded ({} in all):", events.len());
    for (k, n) in kinds {
        println!("  {k:<28} {n}");
    }
    println!(
        "\n{}",
        if all_ok {
            "every scenario healed as expected."
        } else {
            "some scenarios did not end as expected (see ✗ above)."
        }
    );

    let _ = stop_tx.send(());
    let _ = server.await;
    store.flush().await?;
    store.close().await;
    chaos_a.shutdown().await;
    chaos_b.shutdown().await;
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn expected_words(n: usize) -> String {
    (0..n)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

struct Reply {
    status: u16,
    turn_id: String,
    provider: String,
    attempts: String,
    error_type: String,
    text: String,
    done: bool,
    elapsed: Duration,
}

struct Agent<'a> {
    http: &'a reqwest::Client,
    base: &'a str,
    started: Instant,
}

impl Agent<'_> {
    async fn scenario(
        &self,
        scenario: &'static str,
        expected: &'static str,
        agent: &str,
        route: &str,
        stream: bool,
        check: impl Fn(&Reply) -> bool,
    ) -> anyhow::Result<Outcome> {
        println!("\n▶ {scenario} — expected: {expected}");
        let r = self.call(agent, route, stream).await?;
        self.print_turn("", &r).await;
        let got = if r.status == 200 {
            format!("200, {} words", r.text.split_whitespace().count())
        } else {
            format!("{} {}", r.status, r.error_type)
        };
        Ok(Outcome {
            scenario,
            expected,
            got,
            ok: check(&r),
            served_by: r.provider.clone(),
            attempts: r.attempts.clone(),
            elapsed: r.elapsed,
        })
    }

    async fn call(&self, agent: &str, route: &str, stream: bool) -> anyhow::Result<Reply> {
        let t0 = Instant::now();
        let body = json!({
            "model": route,
            "messages": [{"role": "user", "content": "Tell me something useful."}],
            "stream": stream,
            "stream_options": {"include_usage": true},
        });
        let resp = self
            .http
            .post(format!("{}/v1/chat/completions", self.base))
            .header("x-hale-agent", agent)
            .json(&body)
            .send()
            .await?;
        let status = resp.status().as_u16();
        let h = |k: &str| {
            resp.headers()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        let (turn_id, provider, attempts) = (
            h("x-hale-turn-id"),
            h("x-hale-provider"),
            h("x-hale-attempts"),
        );
        let mut text = String::new();
        let mut error_type = String::new();
        let mut done = false;
        if stream && status == 200 {
            let mut s = resp.bytes_stream();
            let mut buf = String::new();
            while let Some(chunk) = s.next().await {
                buf.push_str(&String::from_utf8_lossy(&chunk?));
            }
            for line in buf.lines() {
                let Some(data) = line.strip_prefix("data: ") else {
                    continue;
                };
                if data == "[DONE]" {
                    done = true;
                    continue;
                }
                if let Ok(v) = serde_json::from_str::<Value>(data) {
                    if let Some(t) = v
                        .pointer("/choices/0/delta/content")
                        .and_then(Value::as_str)
                    {
                        text.push_str(t);
                    }
                    if let Some(t) = v.pointer("/error/type").and_then(Value::as_str) {
                        error_type = t.to_owned();
                    }
                }
            }
        } else {
            let v: Value = resp.json().await.unwrap_or(Value::Null);
            if let Some(t) = v
                .pointer("/choices/0/message/content")
                .and_then(Value::as_str)
            {
                text = t.to_owned();
            }
            if let Some(t) = v.pointer("/error/type").and_then(Value::as_str) {
                error_type = t.to_owned();
            }
        }
        Ok(Reply {
            status,
            turn_id,
            provider,
            attempts,
            error_type,
            text,
            done,
            elapsed: t0.elapsed(),
        })
    }

    /// One streamed `POST /v1/responses`. `done` says the stream is one
    /// well-formed response: `sequence_number`s without a gap from 0, one
    /// output item added and done, `response.completed` last.
    async fn call_responses(&self, agent: &str, route: &str) -> anyhow::Result<Reply> {
        let t0 = Instant::now();
        let body = json!({"model": route, "input": "Tell me something useful.", "stream": true});
        let resp = self
            .http
            .post(format!("{}/v1/responses", self.base))
            .header("x-hale-agent", agent)
            .json(&body)
            .send()
            .await?;
        let status = resp.status().as_u16();
        let h = |k: &str| {
            resp.headers()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        let (turn_id, provider, attempts) = (
            h("x-hale-turn-id"),
            h("x-hale-provider"),
            h("x-hale-attempts"),
        );
        let raw = resp.text().await?;
        let mut text = String::new();
        let mut error_type = String::new();
        let (mut next, mut gap, mut added, mut item_done) = (0u64, false, 0, 0);
        let mut last = String::new();
        for data in raw.lines().filter_map(|l| l.strip_prefix("data: ")) {
            let Ok(v) = serde_json::from_str::<Value>(data) else {
                gap = true;
                continue;
            };
            gap |= v["sequence_number"].as_u64() != Some(next);
            next += 1;
            let ty = v["type"].as_str().unwrap_or("");
            match ty {
                "response.output_text.delta" => {
                    text.push_str(v["delta"].as_str().unwrap_or(""));
                }
                "response.output_item.added" => added += 1,
                "response.output_item.done" => item_done += 1,
                "error" => error_type = v["code"].as_str().unwrap_or("error").to_owned(),
                _ => {}
            }
            last = ty.to_owned();
        }
        if status != 200
            && let Ok(v) = serde_json::from_str::<Value>(&raw)
            && let Some(t) = v.pointer("/error/type").and_then(Value::as_str)
        {
            error_type = t.to_owned();
        }
        let done = !gap && added == 1 && item_done == 1 && last == "response.completed";
        Ok(Reply {
            status,
            turn_id,
            provider,
            attempts,
            error_type,
            text,
            done,
            elapsed: t0.elapsed(),
        })
    }

    /// Prints one turn's timeline as hale recorded it.
    async fn print_turn(&self, note: &str, r: &Reply) {
        let at = self.started.elapsed().as_secs_f64();
        if !note.is_empty() {
            println!("[{at:>5.1}s] {note}");
        }
        if r.turn_id.is_empty() {
            return;
        }
        let Ok(resp) = self
            .http
            .get(format!("{}/turns/{}", self.base, r.turn_id))
            .send()
            .await
        else {
            return;
        };
        let Ok(t) = resp.json::<Value>().await else {
            return;
        };
        for a in t["timeline"].as_array().into_iter().flatten() {
            let outcome = match a["class"].as_str() {
                None => "ok".to_owned(),
                Some(c) => format!(
                    "{c}{}",
                    a["status"]
                        .as_u64()
                        .map(|s| format!(" ({s})"))
                        .unwrap_or_default()
                ),
            };
            let resume = a["resume"]
                .as_str()
                .map(|r| format!(" [{r}]"))
                .unwrap_or_default();
            println!(
                "          +{:>5}ms  {:<42} {:<9} {:>5}ms  {}{}",
                a["start_ms"].as_u64().unwrap_or(0),
                a["target"].as_str().unwrap_or(""),
                a["mode"].as_str().unwrap_or(""),
                a["duration_ms"].as_u64().unwrap_or(0),
                outcome,
                resume
            );
        }
        let status = if r.status == 200 {
            format!("200 from {} in {:.2}s", r.provider, r.elapsed.as_secs_f64())
        } else {
            format!("{} {}", r.status, r.error_type)
        };
        println!("          → {status}");
    }
}
