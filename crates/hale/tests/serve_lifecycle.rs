//! `hale serve` as a process (issue #3): one instance per data directory
//! (a second refuses naming the owner; `--takeover` wins and the first exits
//! cleanly), kill -9 loses no event whose state change was acknowledged to a
//! client and they are all delivered after the restart, and SIGTERM drains an
//! in-flight turn before the process exits.

mod common;

use axum::http::StatusCode;
use common::{Proc, free_port, wait_ready};
use hale_testkit::{hook, wait_exit};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A config with one provider that is never called, and optional extra YAML.
fn write_config(dir: &Path, port: u16, extra: &str) -> String {
    let data = dir.join("data");
    let yaml = format!(
        "listen: 127.0.0.1:{port}\ndata_dir: {}\nproviders:\n  - name: p\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n    default_model: ok\n{extra}",
        data.display()
    );
    let path = dir.join(format!("hale-{port}.yaml"));
    std::fs::write(&path, yaml).unwrap();
    path.to_string_lossy().into_owned()
}

fn sigterm(p: &Proc) {
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &p.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM failed");
}

#[tokio::test]
async fn a_second_serve_on_the_same_data_dir_refuses_and_takeover_wins() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let (pa, pb, pc) = (free_port(), free_port(), free_port());
    let cfg_a = write_config(dir.path(), pa, "");
    let mut a = Proc::spawn(&["serve", "--config", &cfg_a], dir.path(), "a");
    wait_ready(
        &http,
        &format!("http://127.0.0.1:{pa}/ready"),
        &mut a,
        Duration::from_secs(30),
    )
    .await;

    // A second instance on the same directory refuses and names the owner.
    let cfg_b = write_config(dir.path(), pb, "");
    let mut b = Proc::spawn(&["serve", "--config", &cfg_b], dir.path(), "b");
    let status = wait_exit(&mut b, Duration::from_secs(20)).await;
    assert!(!status.success());
    let err = b.stderr();
    assert!(
        err.contains(&a.child.id().to_string()),
        "the refusal must name the owner's PID: {err}"
    );
    assert!(err.contains("--takeover"), "{err}");
    assert!(
        http.get(format!("http://127.0.0.1:{pa}/live"))
            .send()
            .await
            .is_ok(),
        "the owner keeps serving"
    );

    // With --takeover the newcomer stops the owner and serves.
    let cfg_c = write_config(dir.path(), pc, "");
    let mut c = Proc::spawn(
        &["serve", "--config", &cfg_c, "--takeover"],
        dir.path(),
        "c",
    );
    let status = wait_exit(&mut a, Duration::from_secs(20)).await;
    assert!(
        status.success(),
        "the owner shuts down cleanly on SIGTERM: {status:?}\n{}",
        a.stderr()
    );
    wait_ready(
        &http,
        &format!("http://127.0.0.1:{pc}/ready"),
        &mut c,
        Duration::from_secs(30),
    )
    .await;
}

/// Something per (agent, event kind).
type ByAgentKind<V> = BTreeMap<(String, String), V>;

/// A webhook receiver that records event ids by (agent, kind).
#[derive(Clone, Default)]
struct Received(Arc<Mutex<ByAgentKind<HashSet<String>>>>);

async fn start_receiver() -> (String, Received) {
    let got = Received::default();
    let g = got.clone();
    let url = hook("/hook", move |headers, body| {
        let ev: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let id = headers
            .get("x-hale-event-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let key = (
            ev["agent"].as_str().unwrap_or_default().to_owned(),
            ev["kind"].as_str().unwrap_or_default().to_owned(),
        );
        g.0.lock().unwrap().entry(key).or_default().insert(id);
        StatusCode::OK
    })
    .await;
    (url, got)
}

#[tokio::test]
async fn kill_9_loses_no_acknowledged_event_and_they_are_delivered_after_restart() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let (hook, received) = start_receiver().await;
    let port = free_port();
    let cfg = write_config(
        dir.path(),
        port,
        // The agents are named in the config: pausing an agent hale does
        // not know is a 404.
        &format!(
            "events:\n  webhooks: [{{url: \"{hook}\"}}]\nagents:\n  agent-0: {{}}\n  agent-1: {{}}\n  agent-2: {{}}\n  agent-3: {{}}\n"
        ),
    );
    let base = format!("http://127.0.0.1:{port}");
    let mut hale = Proc::spawn(&["serve", "--config", &cfg], dir.path(), "serve1");
    wait_ready(
        &http,
        &format!("{base}/ready"),
        &mut hale,
        Duration::from_secs(30),
    )
    .await;

    // Producers: pause/resume agents as fast as they are acknowledged.
    let acked: Arc<Mutex<ByAgentKind<u64>>> = Arc::default();
    let mut producers = Vec::new();
    for w in 0..4 {
        let (http, base, acked) = (http.clone(), base.clone(), acked.clone());
        producers.push(tokio::spawn(async move {
            let agent = format!("agent-{w}");
            for i in 0.. {
                let (action, kind) = if i % 2 == 0 {
                    ("pause", "agent.paused")
                } else {
                    ("resume", "agent.resumed")
                };
                match http
                    .post(format!("{base}/agents/{agent}/{action}"))
                    .send()
                    .await
                {
                    Ok(r) if r.status().is_success() => {
                        *acked
                            .lock()
                            .unwrap()
                            .entry((agent.clone(), kind.to_owned()))
                            .or_default() += 1;
                    }
                    // The server was killed: stop producing.
                    Ok(_) | Err(_) => return,
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    hale.child.kill().unwrap(); // SIGKILL
    hale.child.wait().unwrap();
    for p in producers {
        p.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let total: u64 = acked.values().sum();
    assert!(
        total > 20,
        "too few acknowledged changes to mean anything: {total}"
    );

    // Restart on the same data directory (the dead owner's lock is free).
    let mut hale = Proc::spawn(&["serve", "--config", &cfg], dir.path(), "serve2");
    wait_ready(
        &http,
        &format!("{base}/ready"),
        &mut hale,
        Duration::from_secs(30),
    )
    .await;

    // Every acknowledged change's event reaches the webhook.
    let t0 = Instant::now();
    loop {
        let got = received.0.lock().unwrap().clone();
        let missing: Vec<_> = acked
            .iter()
            .filter(|(k, n)| got.get(*k).map_or(0, |s| s.len() as u64) < **n)
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "acknowledged events not delivered: {missing:?} (received {:?})",
            got.iter().map(|(k, v)| (k, v.len())).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The relays' figures are in /metrics.
    let metrics = hale_testkit::get_text(&http, &format!("{base}/metrics")).await;
    let line = metrics
        .lines()
        .find(|l| l.starts_with("hale_sink_delivered{") && l.contains("webhook:"))
        .unwrap_or_else(|| panic!("no webhook delivery figure in /metrics:\n{metrics}"));
    let delivered: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(delivered > 0.0, "{line}");
    assert!(
        metrics.lines().any(|l| l.starts_with("hale_outbox_shed ")),
        "{metrics}"
    );
    sigterm(&hale);
    let status = wait_exit(&mut hale, Duration::from_secs(20)).await;
    assert!(status.success(), "{status:?}\n{}", hale.stderr());
}

#[tokio::test]
async fn sigterm_drains_an_in_flight_turn_then_exits_cleanly() {
    let stack = common::Stack::start().await;
    let mut stack = stack;
    let http = stack.http.clone();
    let url = format!("{}/v1/chat/completions", stack.base);
    // A turn whose first token comes after 1.5 s (served by the primary chaos).
    let inflight = tokio::spawn(async move {
        let r = http
            .post(url)
            .json(&serde_json::json!({
                "model": "slow-first-token:ms=1500:tokens=10",
                "messages": [{"role": "user", "content": "hi"}],
            }))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body: serde_json::Value = r.json().await.unwrap();
        (status, body)
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    sigterm(&stack.hale);
    let (status, body) = inflight.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], common::words(10));
    let exit = wait_exit(&mut stack.hale, Duration::from_secs(20)).await;
    assert!(exit.success(), "{exit:?}\n{}", stack.hale.stderr());
    // Once stopped, it accepts nothing.
    assert!(
        stack
            .http
            .get(format!("{}/live", stack.base))
            .send()
            .await
            .is_err()
    );
}
