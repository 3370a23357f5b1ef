//! The HTTP edge as the `hale` binary serves it (issue 9, items 3 and 4):
//! `hale serve` on a non-loopback address without keys refuses to start,
//! and the admin routes only the binary mounts (`/events`, `/dlq`) answer a
//! bad query string or body in the OpenAI error shape, not axum's plain text.

mod common;

use common::{Proc, free_port, wait_ready};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// A config listening on `listen`, with one provider that is never called.
fn write_config(dir: &Path, listen: &str) -> String {
    let yaml = format!(
        "listen: {listen}\ndata_dir: {}\nproviders:\n  - name: p\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n    default_model: ok\n",
        dir.join("data").display()
    );
    let path = dir.join("hale.yaml");
    std::fs::write(&path, yaml).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn serve_on_0_0_0_0_without_keys_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &format!("0.0.0.0:{}", free_port()));
    let mut p = Proc::spawn(&["serve", "--config", &cfg], dir.path(), "serve");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = p.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "still running:\n{}",
            p.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let err = p.stderr();
    assert!(
        err.contains("refusing to listen on 0.0.0.0")
            && err.contains("auth.keys")
            && err.contains("--insecure-no-auth"),
        "{err}"
    );
    assert!(
        !dir.path().join("data").exists(),
        "refused before touching the data directory"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_routes_answer_bad_queries_and_bodies_in_json() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let cfg = write_config(dir.path(), &format!("127.0.0.1:{port}"));
    let mut p = Proc::spawn(&["serve", "--config", &cfg], dir.path(), "serve");
    let http = reqwest::Client::new();
    wait_ready(
        &http,
        &format!("{base}/live"),
        &mut p,
        Duration::from_secs(30),
    )
    .await;
    let check = |r: reqwest::Response, status: u16, kind: &'static str| async move {
        assert_eq!(r.status().as_u16(), status);
        let ct = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        assert!(ct.starts_with("application/json"), "{ct}");
        let v: Value = r.json().await.expect("JSON body");
        assert_eq!(v["error"]["type"], kind, "{v}");
        v["error"]["message"].as_str().unwrap_or("").to_owned()
    };
    // A query value of the wrong type.
    let r = http
        .get(format!("{base}/events?follow=maybe"))
        .send()
        .await
        .unwrap();
    let msg = check(r, 400, "invalid_request_error").await;
    assert!(msg.contains("follow"), "{msg}");
    // A JSON endpoint sent something that is not JSON, or no JSON at all.
    let r = http
        .post(format!("{base}/dlq/replay"))
        .header("content-type", "text/plain")
        .body("all")
        .send()
        .await
        .unwrap();
    check(r, 415, "unsupported_media_type").await;
    let r = http
        .post(format!("{base}/dlq/replay"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    check(r, 400, "invalid_request_error").await;
    // An unknown route of the binary's app.
    let r = http.get(format!("{base}/dlq/nope")).send().await.unwrap();
    check(r, 404, "not_found").await;
}
