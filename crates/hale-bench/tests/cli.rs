//! `hale-bench`'s own subcommands and options, run as the binary:
//! `hale-bench hash` prints the native cost of the request hash per body
//! size, and `--peer NAME=COMMAND` starts a peer gateway, runs the same load
//! against it and prints it in the peers table. The peer here is a second
//! `hale chaos` (it serves `/v1/chat/completions`), so the test needs no
//! Python; the `hale` binary is the workspace's debug build next to this
//! one (built by `cargo test --workspace`); without it the test says so and
//! returns, except under `CI=true`, where that fails. `hale-bench
//! chaos-hour` is run too: its schedule from a seed, and a half-minute run
//! whose every task must finish correctly (it needs `HALE_PYTHON`, a Python
//! with the `openai` SDK, as `scripts/test.sh` sets).

use std::path::PathBuf;
use std::process::Command;

fn bench() -> &'static str {
    env!("CARGO_BIN_EXE_hale-bench")
}

#[test]
fn hash_prints_a_row_per_body_size() {
    let out = Command::new(bench())
        .args(["hash", "--bytes", "100,2000", "--rounds", "50"])
        .output()
        .expect("hale-bench runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.starts_with("CPU SHA extensions: "), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| ")).collect();
    // The header and one row per size, each with a number of ns.
    assert_eq!(rows.len(), 3, "{text}");
    for (row, size) in rows[1..].iter().zip(["100", "2000"]) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(cells[1], size, "{row}");
        assert!(cells[2].parse::<f64>().is_ok(), "{row}");
    }
}

/// The `hale` binary beside this one, or `None` (skipped, except under
/// `CI=true`, where a missing one fails).
fn hale_bin() -> Option<PathBuf> {
    let hale = PathBuf::from(bench()).with_file_name("hale");
    if hale.is_file() {
        return Some(hale);
    }
    skip(&format!(
        "no hale binary at {} (cargo test --workspace builds it)",
        hale.display()
    ));
    None
}

fn skip(why: &str) {
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
    eprintln!("skipped: {why}");
}

#[test]
fn a_peer_runs_the_same_load_and_is_in_the_peers_table() {
    let Some(hale) = hale_bin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let out_json = dir.path().join("bench.json");
    let peer = format!("other={} chaos --listen 127.0.0.1:{{port}}", hale.display());
    let out = Command::new(bench())
        .args(["--hale-bin", &hale.to_string_lossy()])
        .args([
            "--duration",
            "300ms",
            "--warmup",
            "100ms",
            "--concurrency",
            "1",
        ])
        .args(["--stream", "off", "--no-bare", "--peer", &peer])
        .args(["--peer-ready-path", "/chaos/stats"])
        .args(["--out", &out_json.to_string_lossy()])
        .output()
        .expect("hale-bench runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n{err}");
    let row = text
        .lines()
        .find(|l| l.starts_with("| complete | 1 | other |"))
        .unwrap_or_else(|| panic!("no peer row:\n{text}\n{err}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let rps: f64 = cells[4].parse().expect("the peer's RPS");
    assert!(rps > 0.0, "{row}");
    assert_eq!(cells[8], "0", "no errors: {row}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out_json).expect("results written")).unwrap();
    assert_eq!(json["rows"][0]["peers"][0]["name"], "other", "{json}");
}

fn schedule(seed: &str) -> String {
    let out = Command::new(bench())
        .args([
            "chaos-hour",
            "--print-schedule",
            "--minutes",
            "5",
            "--seed",
            seed,
        ])
        .output()
        .expect("hale-bench runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The fault schedule is the seed's: printed alike twice, otherwise for
/// another seed, with faults that overlap (a new one every 30 s, each
/// lasting 60 s).
#[test]
fn chaos_hour_prints_the_seeds_schedule() {
    let a = schedule("7");
    assert_eq!(a, schedule("7"));
    assert_ne!(a, schedule("8"));
    let faults = a
        .lines()
        .filter(|l| l.trim_start().starts_with('+'))
        .count();
    assert!(faults >= 8, "a fault every 30 s over 5 min:\n{a}");
}

/// A half-minute of `chaos-hour` through the real binaries: faults every
/// 5 s on the six provider kinds and the tool nodes, one agent loop of each
/// SDK kind (Chat Completions, Messages, google-genai, the Agents SDK with
/// `echo` through hale's `/mcp`); every task finishes
/// with the right answer (its digest checked), no answered turn is missing
/// from the journal or counted twice, and no agent is left paused.
#[test]
fn chaos_hour_runs_and_every_task_finishes_correctly() {
    let Some(hale) = hale_bin() else { return };
    let Some(python) = std::env::var_os("HALE_PYTHON") else {
        return skip("HALE_PYTHON is not set (scripts/test.sh sets it)");
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let out_json = dir.path().join("hour.json");
    let sdk_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../hale/tests/sdk");
    let out = Command::new(bench())
        .current_dir(dir.path())
        .args([
            "chaos-hour",
            "--minutes",
            "0.5",
            "--seed",
            "7",
            "--clients",
            "1",
        ])
        .args([
            "--steps",
            "6",
            "--fault-every",
            "5s",
            "--fault-lasts",
            "10s",
        ])
        .args(["--baseline-tasks", "1"])
        .args(["--hale-bin", &hale.to_string_lossy()])
        .args(["--python", &python.to_string_lossy()])
        .args(["--sdk-dir", &sdk_dir.to_string_lossy()])
        .args(["--out", &out_json.to_string_lossy()])
        .output()
        .expect("hale-bench runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n{err}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out_json).expect("results written")).unwrap();
    let tasks = json["tasks"].as_array().expect("tasks");
    assert!(!tasks.is_empty(), "{text}");
    for t in tasks {
        assert!(
            t["failure"].is_null(),
            "a task did not finish correctly: {t}\n{text}"
        );
    }
    let started: u64 = json["faults_started"]
        .as_object()
        .expect("faults")
        .values()
        .filter_map(serde_json::Value::as_u64)
        .sum();
    assert!(started >= 3, "faults played: {started}\n{text}");
    assert_eq!(json["journal"]["missing"], 0, "{text}");
    assert_eq!(json["journal"]["repeated"], 0, "{text}");
    assert_eq!(json["paused_agents"], 0, "{text}");
}
