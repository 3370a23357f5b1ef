//! `GET /events`: resume from Last-Event-ID / ?after, ?kind filter, unknown
//! ids refused, live follow; and `hale events tail` over it.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use hale_core::event::EventKind;
use hale_events::cli;
use hale_events::sse;

/// Reads SSE `id:`s from `resp` until `n` were seen (or the stream ends).
async fn read_ids(resp: reqwest::Response, n: usize) -> Vec<(String, String)> {
    let mut body = resp.bytes_stream();
    let mut buf = String::new();
    let mut out = Vec::new();
    let mut id = String::new();
    let mut kind = String::new();
    while out.len() < n {
        let Ok(Some(chunk)) = tokio::time::timeout(Duration::from_secs(10), body.next()).await
        else {
            break;
        };
        buf.push_str(&String::from_utf8_lossy(&chunk.expect("chunk")));
        while let Some(pos) = buf.find('\n') {
            let line: String = buf.drain(..=pos).collect();
            let line = line.trim_end();
            if let Some(v) = line.strip_prefix("id:") {
                id = v.trim().to_string();
            } else if let Some(v) = line.strip_prefix("event:") {
                kind = v.trim().to_string();
            } else if line.is_empty() && !id.is_empty() {
                out.push((std::mem::take(&mut id), std::mem::take(&mut kind)));
            }
        }
    }
    out
}

#[tokio::test]
async fn resume_after_and_last_event_id_and_kind_filter() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let evs = events(10, &[EventKind::AgentFailed, EventKind::AgentPaused]);
    commit_all(&store, &evs).await;
    let url = serve(sse::router(store.clone())).await;
    let http = reqwest::Client::new();

    // ?after=ID: everything after the 4th event, in order, with id/event fields.
    let resp = http
        .get(format!("{url}/events?after={}&follow=false", evs[3].id))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let got = read_ids(resp, 100).await;
    let want: Vec<(String, String)> = evs[4..]
        .iter()
        .map(|e| (e.id.clone(), e.kind.as_str().to_string()))
        .collect();
    assert_eq!(got, want);

    // Last-Event-ID header: same resume semantics.
    let resp = http
        .get(format!("{url}/events?follow=false"))
        .header("Last-Event-ID", &evs[7].id)
        .send()
        .await
        .unwrap();
    let got: Vec<String> = read_ids(resp, 100)
        .await
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    assert_eq!(got, vec![evs[8].id.clone(), evs[9].id.clone()]);

    // ?kind= filter from the start of the outbox.
    let resp = http
        .get(format!(
            "{url}/events?after={}&kind=agent.paused&follow=false",
            evs[0].id
        ))
        .send()
        .await
        .unwrap();
    let got = read_ids(resp, 100).await;
    assert!(got.iter().all(|(_, k)| k == "agent.paused"));
    let want: Vec<String> = evs[1..]
        .iter()
        .filter(|e| e.kind == EventKind::AgentPaused)
        .map(|e| e.id.clone())
        .collect();
    assert_eq!(got.into_iter().map(|(i, _)| i).collect::<Vec<_>>(), want);
}

#[tokio::test]
async fn unknown_id_and_unknown_kind_are_400_naming_them() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    commit_all(&store, &events(2, &[EventKind::AgentFailed])).await;
    let url = serve(sse::router(store)).await;
    let http = reqwest::Client::new();
    let resp = http
        .get(format!("{url}/events?after=01NOSUCHEVENTID0000000000"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert!(
        resp.text()
            .await
            .unwrap()
            .contains("01NOSUCHEVENTID0000000000")
    );
    let resp = http
        .get(format!("{url}/events"))
        .header("Last-Event-ID", "01NOSUCHEVENTID0000000001")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert!(
        resp.text()
            .await
            .unwrap()
            .contains("01NOSUCHEVENTID0000000001")
    );
    let resp = http
        .get(format!("{url}/events?kind=agent.nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert!(resp.text().await.unwrap().contains("agent.nope"));
}

#[tokio::test]
async fn live_stream_follows_new_commits() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let old = events(3, &[EventKind::AgentFailed]);
    commit_all(&store, &old).await;
    let url = serve(sse::router(store.clone())).await;
    // No cursor and follow: only new events.
    let resp = reqwest::Client::new()
        .get(format!("{url}/events"))
        .send()
        .await
        .unwrap();
    let new = events(5, &[EventKind::GuardLimitHit]);
    let writer = {
        let store = store.clone();
        let new = new.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            for e in new {
                commit_all(&store, &[e]).await;
            }
        })
    };
    let got: Vec<String> = read_ids(resp, 5)
        .await
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    writer.await.unwrap();
    assert_eq!(got, new.iter().map(|e| e.id.clone()).collect::<Vec<_>>());
}

#[tokio::test]
async fn events_tail_prints_one_line_per_event() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let evs = events(4, &[EventKind::AgentFailed, EventKind::BudgetExceeded]);
    commit_all(&store, &evs).await;
    let url = serve(sse::router(store)).await;
    let mut out = Vec::new();
    cli::events_tail_to(
        &url,
        None,
        false,
        Some("budget.exceeded"),
        Some(&evs[0].id),
        &mut out,
    )
    .await
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0], cli::format_event(&evs[1]));
    assert!(
        lines[1].contains("budget.exceeded a1 - {\"i\":3}"),
        "{}",
        lines[1]
    );
    // An unknown --after is an error naming the id.
    let err = cli::events_tail_to(&url, None, false, None, Some("01NOPE"), &mut Vec::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("01NOPE"), "{err}");
}
