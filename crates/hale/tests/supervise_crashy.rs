//! End-to-end supervision (issue #4): a real agent process
//! (`tests/agents/crashy_agent.py`, the official `openai` SDK) under
//! `hale run --url …` against a real `hale serve` and a real `hale chaos`.
//!
//! The agent checkpoints three steps and crashes; the test corrupts the
//! newest checkpoint before the first restart. It must be restarted from the
//! last *valid* checkpoint (the corrupt one reported and skipped), its
//! repeated request must be replayed from the journal and not reach the
//! provider, and after the recovery limits (3 per task) it must stay down
//! with a human-review escalation.
//!
//! Python: `$HALE_PYTHON`, else `<workspace>/.venv/bin/python`. Without a
//! python that imports `openai` the test is skipped with a reason, unless
//! `CI=true`, where that is a failure.

use hale_core::event::{Event, EventKind};
use hale_testkit::{python, workspace_root};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the child when the test ends, however it ends.
struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `hale ARGS`, returning the process and the URL it printed on
/// stderr after `marker` (e.g. "listening on ").
fn start_hale(args: &[&str], marker: &str) -> (Proc, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hale"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hale starts");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let marker = marker.to_owned();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !sent && let Some(i) = line.find(&marker) {
                let rest = &line[i + marker.len()..];
                let url = rest.split_whitespace().next().unwrap_or("").to_owned();
                let _ = tx.send(url);
                sent = true;
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("hale printed its address");
    (Proc(child), url)
}

async fn get(http: &reqwest::Client, url: &str) -> Value {
    hale_testkit::get_json(http, url).await
}

#[tokio::test(flavor = "multi_thread")]
async fn crashing_agent_is_restarted_from_its_last_valid_checkpoint_then_stays_down() {
    let Some(py) = python("import openai", "openai").ok() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true but no python with the openai SDK (set HALE_PYTHON or create .venv)");
        }
        eprintln!(
            "skipped: no python with the `openai` SDK (set HALE_PYTHON or run scripts/test.sh)"
        );
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let runs = tmp.path().join("runs");
    let gate = tmp.path().join("gate");

    let (_chaos, chaos_url) = start_hale(&["chaos", "--listen", "127.0.0.1:0"], "listening on ");
    let cfg_path = tmp.path().join("hale.yaml");
    std::fs::write(
        &cfg_path,
        format!(
            "listen: 127.0.0.1:0\n\
             data_dir: {data}\n\
             providers:\n  - name: chaos\n    kind: openai\n    base_url: {chaos_url}/v1\n    default_model: ok\n\
             routes:\n  r: [chaos/ok]\n\
             recovery: {{max_per_task: 3, max_per_hour: 10, backoff_ms: [200, 400, 800]}}\n",
            data = data.display()
        ),
    )
    .expect("config written");
    let cfg = cfg_path.to_str().expect("utf-8 path");
    let (mut serve, url) = start_hale(&["serve", "--config", cfg], "listening on ");

    let script = workspace_root().join("crates/hale/tests/agents/crashy_agent.py");
    let mut run = Proc(
        Command::new(env!("CARGO_BIN_EXE_hale"))
            .args([
                "run",
                "--url",
                &url,
                "--agent",
                "crashy",
                "--task",
                "job",
                "--log-dir",
            ])
            .arg(&runs)
            .arg("--")
            .arg(&py)
            .arg(&script)
            .env("CRASHY_GATE", &gate)
            .env_remove("HALE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("hale run starts"),
    );

    // Three checkpoints, then the agent waits at the gate: corrupt the newest.
    let http = reqwest::Client::new();
    let list_url = format!("{url}/agents/crashy/tasks/job/checkpoints");
    let t0 = Instant::now();
    let cps = loop {
        let v = get(&http, &list_url).await;
        let cps = v["checkpoints"].as_array().cloned().unwrap_or_default();
        if cps.len() >= 3 {
            break cps;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "the agent never wrote 3 checkpoints: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let newest = cps[0]["id"].as_str().expect("id").to_owned();
    let valid_parent = cps[1]["id"].as_str().expect("id").to_owned();
    assert_eq!(cps[0]["parent"].as_str(), Some(valid_parent.as_str()));
    // Flip the stored body behind hale's back (a disk-level corruption).
    let db = data.join(hale_store::SQLITE_FILE);
    let status = Command::new(&py)
        .args([
            "-c",
            "import sqlite3,sys; c=sqlite3.connect(sys.argv[1], timeout=30); \
             c.execute(\"UPDATE checkpoints SET body=CAST('{\\\"step\\\": 3, \\\"tampered\\\": 1}' AS BLOB) WHERE id=?\", (sys.argv[2],)); \
             c.commit()",
        ])
        .arg(&db)
        .arg(&newest)
        .status()
        .expect("python runs");
    assert!(status.success());
    let v = get(&http, &list_url).await;
    assert_eq!(v["checkpoints"][0]["valid"], false, "{v}");
    std::fs::write(&gate, b"go").expect("gate");

    // The agent crashes on every start; after 3 recoveries it stays down.
    let t0 = Instant::now();
    let code = loop {
        if let Some(s) = run.0.try_wait().expect("wait") {
            break s.code();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "hale run never gave up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        code,
        Some(3),
        "hale run exits 3 when the recovery limits are reached"
    );

    // Repeated requests were replayed: only the first start's 3 reached the provider.
    let stats = get(&http, &format!("{chaos_url}/chaos/stats")).await;
    assert_eq!(stats["requests_total"], 3, "{stats}");

    // The output was kept, across every start.
    let log = std::fs::read_to_string(runs.join("crashy.job.log")).expect("log kept");
    assert!(log.contains("fresh start"), "{log}");
    assert!(
        log.contains("resumed step=2"),
        "restarted from the last valid checkpoint:\n{log}"
    );
    assert!(log.contains("step 2 replayed=true"), "{log}");
    assert_eq!(log.matches("replayed=false").count(), 3, "{log}");
    assert_eq!(log.matches("crashing on purpose").count(), 4, "{log}");

    // Stop the gateway (SIGTERM: drains and flushes), then read its events.
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(serve.0.id().to_string())
        .status();
    let t0 = Instant::now();
    while serve.0.try_wait().expect("wait").is_none() && t0.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let store = hale_store::Store::open(None, &data, Default::default())
        .await
        .expect("store");
    let evs: Vec<Event> = store
        .events_after(0, 10_000, None)
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.event)
        .collect();
    store.close().await;
    let kind = |k: EventKind| evs.iter().filter(|e| e.kind == k).collect::<Vec<_>>();
    let started = kind(EventKind::RecoveryStarted);
    assert_eq!(started.len(), 3, "{started:?}");
    assert_eq!(started[0].payload["checkpoint"], valid_parent.as_str());
    assert_eq!(started[0].payload["skipped"][0], newest.as_str());
    assert_eq!(kind(EventKind::AgentRestarting).len(), 3);
    let corrupt = kind(EventKind::CheckpointCorrupt);
    assert!(
        corrupt
            .iter()
            .any(|e| e.payload["checkpoint"] == newest.as_str()),
        "{corrupt:?}"
    );
    assert!(
        !kind(EventKind::RecoveryCompleted).is_empty(),
        "the replayed step completed a recovery"
    );
    assert_eq!(kind(EventKind::RecoveryFailed).len(), 1);
    let esc = kind(EventKind::HealthEscalated);
    assert!(
        esc.iter().any(|e| e.payload["human_review"] == true),
        "{esc:?}"
    );
}
