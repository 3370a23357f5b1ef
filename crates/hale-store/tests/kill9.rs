//! kill -9 loses nothing a caller was told is committed.
//!
//! The test re-runs its own executable in "child mode" (env
//! `HALE_STORE_KILL9_DIR`): the child commits events from several tasks as
//! fast as it can and prints `committed <id>` after each `commit()` returns.
//! The parent SIGKILLs it mid-stream, reopens the store and checks that every
//! event printed as committed is there.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use hale_core::event::{Event, EventKind};
use hale_store::{Store, StoreOptions, Write};

const CHILD_ENV: &str = "HALE_STORE_KILL9_DIR";
const TEST_NAME: &str = "kill9_loses_nothing_committed";
/// Committed lines the parent waits for before it kills the child.
const KILL_AFTER: usize = 400;

fn event(id: String) -> Event {
    Event {
        id,
        time_ms: 1_700_000_000_000,
        kind: EventKind::TurnCompleted,
        agent: Some("kill9".into()),
        task: None,
        turn: None,
        payload: serde_json::json!({"pad": "x".repeat(200)}),
    }
}

async fn child(dir: &str) {
    let store = Store::open_sqlite(std::path::Path::new(dir), StoreOptions::default())
        .await
        .expect("child opens store");
    let mut tasks = Vec::new();
    for t in 0..4 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let start = std::time::Instant::now();
            let mut i = 0u64;
            // Bounded so an orphaned child cannot run forever.
            while start.elapsed() < Duration::from_secs(30) {
                let id = format!("c{t}-{i}");
                // Unawaited noise in the same group commits.
                store.submit(vec![Write::Event(event(format!("s{t}-{i}")))]);
                store
                    .commit(vec![Write::Event(event(id.clone()))])
                    .await
                    .expect("child commit");
                println!("committed {id}");
                i += 1;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_loses_nothing_committed() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(&dir).await;
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test executable");
    let mut proc = Command::new(exe)
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = proc.stdout.take().expect("child stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut committed = Vec::new();
    let parse = |line: &str| line.strip_prefix("committed ").map(str::to_string);
    for line in lines.by_ref() {
        let line = line.expect("read child output");
        if let Some(id) = parse(&line) {
            committed.push(id);
            if committed.len() >= KILL_AFTER {
                break;
            }
        }
    }
    proc.kill().expect("SIGKILL the child");
    // Whatever the child printed before it died counts too.
    for line in lines {
        match line {
            Ok(line) => committed.extend(parse(&line)),
            Err(_) => break,
        }
    }
    let status = proc.wait().expect("reap child");
    assert!(!status.success(), "the child was killed, not finished");
    assert!(
        committed.len() >= KILL_AFTER,
        "child printed only {} commits",
        committed.len()
    );

    let store = Store::open_sqlite(dir.path(), StoreOptions::default())
        .await
        .expect("reopen after kill -9");
    let mut missing = Vec::new();
    for id in &committed {
        if store.seq_of(id).await.expect("seq_of").is_none() {
            missing.push(id.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} events printed as committed are missing after kill -9: {:?}",
        missing.len(),
        committed.len(),
        &missing[..missing.len().min(10)]
    );
    store.close().await;
}
