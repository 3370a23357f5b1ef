//! `hale-bench`'s own subcommands and options, run as the binary:
//! `hale-bench hash` prints the native cost of the request hash per body
//! size, and `--peer NAME=COMMAND` starts a peer gateway, runs the same load
//! against it and prints it in the peers table. The peer here is a second
//! `hale chaos` (it serves `/v1/chat/completions`), so the test needs no
//! Python; the `hale` binary is the workspace's debug build next to this
//! one (built by `cargo test --workspace`); without it the test says so and
//! returns, except under `CI=true`, where that fails. `hale-bench
//! chaos-hour` is run too: its schedule from a seed, and its 3-minute
//! profile, whose every task must finish correctly (it needs `HALE_PYTHON`,
//! the venv `scripts/test.sh` installs and sets, and the pinned agent CLIs
//! in `.clis/`).

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

/// `hale-bench peers` without peers: direct, the bare proxy and hale with
/// each journal run the same load, each request its own conversation; the
/// table has a row each, with memory for the processes, the memory table a
/// line per gateway process, and the disk's fsync is measured.
#[test]
fn peers_runs_every_gateway_with_the_same_load() {
    let Some(hale) = hale_bin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let out_json = dir.path().join("peers.json");
    let out = Command::new(bench())
        .args(["peers", "--hale-bin", &hale.to_string_lossy()])
        .args(["--duration", "300ms", "--warmup", "100ms"])
        .args(["--concurrency", "1", "--stream", "off", "--no-peers"])
        .args(["--idle", "0s", "--fsync", "100ms"])
        .args(["--out", &out_json.to_string_lossy()])
        .output()
        .expect("hale-bench runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n{err}");
    for gateway in ["direct", "bare proxy", "hale durable", "hale relaxed"] {
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("| complete | 1 | {gateway} |")))
            .unwrap_or_else(|| panic!("no {gateway} row:\n{text}\n{err}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let rps: f64 = cells[4].parse().expect("RPS");
        assert!(rps > 0.0, "{row}");
        assert_eq!(cells[9], "0", "no errors: {row}");
        if gateway != "direct" {
            let anon: f64 = cells[8].parse().expect("peak RssAnon");
            assert!(anon > 0.0, "{row}");
        }
    }
    assert!(
        text.contains("| hale relaxed | "),
        "the memory table: {text}"
    );
    assert!(
        text.contains("fsync (4 KiB append + fdatasync, alone): p50"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out_json).expect("results written")).unwrap();
    assert_eq!(json["runs"].as_array().map(Vec::len), Some(4), "{json}");
    assert!(json["fsync"]["samples"].as_u64().unwrap_or(0) > 0, "{json}");
}

#[test]
fn peers_with_a_peer_not_installed_says_how_to_install_it() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let out = Command::new(bench())
        .current_dir(dir.path())
        .args(["peers", "--peers", "portkey"])
        .output()
        .expect("hale-bench runs");
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Portkey 1.15.2 is not installed"), "{err}");
    assert!(err.contains("scripts/peers.sh install"), "{err}");
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

/// `--peer litellm` without LiteLLM's venv (`.peers/litellm` under the
/// working directory; the suite does not install it) fails before starting
/// anything, saying what is missing and how to install it.
#[test]
fn chaos_hour_through_a_missing_peer_says_how_to_install_it() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let out = Command::new(bench())
        .current_dir(dir.path())
        .args(["chaos-hour", "--minutes", "1", "--peer", "litellm"])
        .output()
        .expect("hale-bench runs");
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("LiteLLM's venv is missing"), "{err}");
    assert!(err.contains("litellm[proxy]==1.106.2"), "{err}");
}

/// The chaos hour's 3-minute profile (issue 41), through the real
/// binaries: faults every 10 s, overlapping, on the seven provider kinds
/// and the tool nodes (seed 9's schedule: cuts inside tool calls'
/// arguments, resets after the first byte, credentials refused, providers
/// refusing connections); one agent of each kind — the
/// four SDK loops (Chat Completions, Messages, google-genai, the Agents SDK
/// with `echo` through hale's `/mcp`) and, with `--clis`, Codex, Claude
/// Code and Gemini CLI. Asserts the correctness columns only, never a
/// time: every task finished with the right answer (its digest and files
/// checked), every kind finished one, no answered turn is missing from the
/// journal or counted twice, no agent is left paused (no operator action),
/// and the faults met traffic (turns the journal shows them touching).
/// Needs `HALE_PYTHON` (scripts/test.sh's venv) and the pinned CLIs in
/// `.clis/`: without them it says why and returns, except under `CI=true`,
/// where that fails.
#[test]
fn chaos_hour_profile_every_task_finishes_correctly() {
    let Some(hale) = hale_bin() else { return };
    let Some(python) = std::env::var_os("HALE_PYTHON") else {
        return skip("HALE_PYTHON is not set (scripts/test.sh sets it)");
    };
    for c in [
        hale_testkit::CODEX,
        hale_testkit::CLAUDE,
        hale_testkit::GEMINI,
    ] {
        if hale_testkit::cli_or_skip(c).is_none() {
            return;
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out_json = dir.path().join("hour.json");
    let sdk_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../hale/tests/sdk");
    let out = Command::new(bench())
        .current_dir(dir.path())
        .args(["chaos-hour", "--minutes", "3", "--seed", "9"])
        .args(["--clients", "1", "--clis", "--steps", "6"])
        .args(["--fault-every", "10s", "--fault-lasts", "20s"])
        .args(["--baseline-tasks", "0"])
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
    for t in tasks {
        assert!(
            t["failure"].is_null(),
            "a task did not finish correctly: {t}\n{text}"
        );
    }
    for kind in [
        "chat",
        "messages",
        "genai",
        "agents",
        "codex",
        "claude",
        "gemini-cli",
    ] {
        assert!(
            tasks.iter().any(|t| t["kind"] == kind),
            "no {kind} task ran:\n{text}"
        );
    }
    assert_eq!(json["journal"]["missing"], 0, "{text}");
    assert_eq!(json["journal"]["repeated"], 0, "{text}");
    assert_eq!(json["paused_agents"], 0, "{text}");
    let touched: u64 = json["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .flat_map(|f| f["endings"].as_object().into_iter().flatten())
        .filter_map(|(_, n)| n.as_u64())
        .sum();
    assert!(touched > 0, "no fault met a turn:\n{text}");
}

/// The chaos hour's scale-out mode (issue 41), one minute: two hale
/// instances on a private PostgreSQL cluster with NATS JetStream and a
/// webhook sink, behind HAProxy (health checks on `/ready`, round robin),
/// the SDK loops (Chat Completions and Messages, two of each, their
/// default retries on) through it. Seed 3's schedule: provider faults on
/// routes in use (a 529 burst and a 503 burst on `ge`, resets after the
/// first byte on `rs`), instance `hale-1` SIGKILLed at +15 s and restarted,
/// NATS SIGKILLed at +24 s and restarted, PostgreSQL restarted at +36 s.
/// Asserts correctness only: every task finished correctly, no answered
/// turn missing from the shared journal or counted twice, the faults on
/// hale's parts were played (none skipped), the outbox had events and
/// none was lost or duplicated at NATS or at the webhook receiver, and no
/// dead letter. Needs `HALE_PYTHON`, haproxy, nats-server and PostgreSQL's
/// server binaries: without them it says why and returns, except under
/// `CI=true`, where that fails.
#[test]
fn chaos_hour_scale_out_loses_and_doubles_nothing() {
    let Some(hale) = hale_bin() else { return };
    let Some(python) = std::env::var_os("HALE_PYTHON") else {
        return skip("HALE_PYTHON is not set (scripts/test.sh sets it)");
    };
    let have = |p: &str| std::path::Path::new(p).is_file();
    if !have("/usr/sbin/haproxy") && !have("/usr/bin/haproxy") {
        return skip("haproxy is not installed (scripts/test.sh installs it)");
    }
    if !have("/usr/sbin/nats-server") && !have("/usr/bin/nats-server") {
        return skip("nats-server is not installed (scripts/test.sh installs it)");
    }
    let pg = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().any(|e| e.path().join("bin/pg_ctl").is_file()))
        .unwrap_or(false);
    if !pg {
        return skip("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out_json = dir.path().join("scale-out.json");
    let sdk_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../hale/tests/sdk");
    let out = Command::new(bench())
        .current_dir(dir.path())
        .args(["chaos-hour", "--mode", "scale-out", "--minutes", "1"])
        .args(["--seed", "3", "--clients", "2", "--kinds", "chat,messages"])
        .args([
            "--steps",
            "4",
            "--fault-every",
            "10s",
            "--fault-lasts",
            "15s",
        ])
        .args(["--baseline-tasks", "0"])
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
    assert_eq!(json["journal"]["missing"], 0, "{text}");
    assert_eq!(json["journal"]["repeated"], 0, "{text}");
    assert_eq!(json["paused_agents"], 0, "{text}");
    for class in [
        "hale instance SIGKILLed and restarted",
        "NATS killed and restarted",
        "PostgreSQL restarted",
    ] {
        assert_eq!(json["faults_started"][class], 1, "{class}:\n{text}");
    }
    let so = &json["scale_out"];
    assert_eq!(so["skipped"], serde_json::json!([]), "{text}");
    let ev = &so["events"];
    assert_eq!(ev["drained"], true, "{text}");
    assert!(
        ev["outbox"].as_u64().unwrap_or(0) > 0,
        "no event to count:\n{text}"
    );
    for sink in ["nats", "webhook"] {
        assert_eq!(ev[sink]["lost"], 0, "{sink}:\n{text}");
        assert_eq!(ev[sink]["duplicated"], 0, "{sink}:\n{text}");
        assert_eq!(ev[sink]["unknown"], 0, "{sink}:\n{text}");
    }
    assert_eq!(ev["dead_letters"], 0, "{text}");
}
