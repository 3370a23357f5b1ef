//! Issue 28, part 3: a job's row, its audit entry and its events commit in
//! one store transaction. This reads the store's commit counter, which only
//! an in-process test can see; seed 003's examples themselves run through
//! the real binary in `crates/hale/tests/seed003.rs`.

mod common;

use common::*;
use hale_core::event::EventKind;
use serde_json::json;

#[tokio::test]
async fn a_jobs_row_audit_entry_and_every_job_event_commit_in_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (node().await, node().await);
    a.fault("error-503").await;
    let h = hale(
        dir.path(),
        vec![http_node("node_a", &a.url), http_node("node_b", &b.url)],
        false,
    )
    .await;
    h.store.flush().await.unwrap();
    let before = h.store.commits();
    let chain = json!({"kind": "failover_chain", "nodes": ["node_a", "node_b"]});
    let (_, j) = h.submit(one_step("one-tx", "echo", json!({}), chain)).await;
    assert_eq!(j["ok"], true, "{j}");
    h.store.flush().await.unwrap();
    assert_eq!(
        h.store.commits() - before,
        1,
        "job.submitted, job.failed_over, job.completed, the row and the audit entry: one commit"
    );
    let kinds = h.event_kinds().await;
    assert_eq!(
        kinds,
        vec![
            EventKind::JobSubmitted,
            EventKind::JobFailedOver,
            EventKind::JobCompleted
        ]
    );
    // A two-step job: its progress write carries the events noted so far.
    let before = h.store.commits();
    let two = json!({"job_id": "two", "steps": [
        {"step_id": "s1", "tool_name": "echo", "target": {"kind": "failover_chain", "nodes": ["node_a", "node_b"]}},
        {"step_id": "s2", "tool_name": "echo", "target": {"kind": "failover_chain", "nodes": ["node_b"]}}]});
    let (_, j) = h.submit(two).await;
    assert_eq!(j["ok"], true, "{j}");
    h.store.flush().await.unwrap();
    assert_eq!(
        h.store.commits() - before,
        2,
        "the progress write and the final one"
    );
    h.stop().await;
}
