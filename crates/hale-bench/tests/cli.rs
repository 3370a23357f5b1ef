//! `hale-bench`'s own subcommands and options, run as the binary:
//! `hale-bench hash` prints the native cost of the request hash per body
//! size, and `--peer NAME=COMMAND` starts a peer gateway, runs the same load
//! against it and prints it in the peers table. The peer here is a second
//! `hale chaos` (it serves `/v1/chat/completions`), so the test needs no
//! Python; the `hale` binary is the workspace's debug build next to this
//! one (built by `cargo test --workspace`); without it the test says so and
//! returns, except under `CI=true`, where that fails.

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

#[test]
fn a_peer_runs_the_same_load_and_is_in_the_peers_table() {
    let hale = PathBuf::from(bench()).with_file_name("hale");
    if !hale.is_file() {
        let why = format!(
            "no hale binary at {} (cargo test --workspace builds it)",
            hale.display()
        );
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipped: {why}");
        return;
    }
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
