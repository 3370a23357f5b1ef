//! Checkpoints (docs/http-api.md, "Checkpoints and recovery"):
//! `POST|GET /agents/{id}/tasks/{task}/checkpoints`,
//! `GET /agents/{id}/tasks/{task}/checkpoints/{cp}` (`latest`: the newest
//! valid one) and `GET /agents/{id}/checkpoints`. A body is UTF-8 JSON
//! (`hale_core::recovery::checkpoint_body`; else 400), as it is served back
//! as `application/json`. Checkpoints are stored with
//! the SHA-256 of their body; an invalid one is reported
//! (`checkpoint.corrupt`, once per checkpoint per process) and never served —
//! listings mark it `valid: false`, a GET of it is 409.

use super::edge::{agent_refusal, bad, store_err};
use crate::Gateway;
use crate::emit::wall_ms;
use crate::error::HaleError;
use crate::health::checkpoint_valid;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hale_core::health::Heartbeat;
use hale_proto::Dialect;
use hale_store::{CheckpointRecord, Write};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

fn meta(c: &CheckpointRecord, valid: bool) -> Value {
    json!({
        "id": c.id, "agent": c.agent, "task": c.task, "parent": c.parent,
        "sha256": c.sha256, "created_ms": c.created_ms, "size": c.body.len(), "valid": valid,
    })
}

#[derive(Deserialize, Default)]
pub(super) struct CheckpointQuery {
    parent: Option<String>,
}

pub(super) async fn put(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((id, task)): Path<(String, String)>,
    axum::extract::Query(q): axum::extract::Query<CheckpointQuery>,
    body: Bytes,
) -> Response {
    if let Some(r) = agent_refusal(&gw, peer, &headers, &id) {
        return r;
    }
    if let Err(problem) = hale_core::recovery::checkpoint_body(&body) {
        return bad(problem.to_string());
    }
    let parent = match q.parent.filter(|p| !p.is_empty()) {
        Some(p) => match gw.store.checkpoint(&id, &p).await {
            Ok(Some(_)) => Some(p),
            Ok(None) => {
                return HaleError::not_found(format!("parent checkpoint {p} not found"))
                    .into_response(Dialect::OpenAi);
            }
            Err(e) => return store_err(e),
        },
        // Default parent: the task's newest checkpoint, so the chain is kept.
        None => match gw.store.checkpoints(&id, Some(&task)).await {
            Ok(list) => list.first().map(|c| c.id.clone()),
            Err(e) => return store_err(e),
        },
    };
    let now_ms = wall_ms();
    let rec = CheckpointRecord {
        id: gw.health.next_checkpoint_id(now_ms),
        agent: id.clone(),
        task: task.clone(),
        parent,
        sha256: hex::encode(Sha256::digest(&body)),
        body: body.to_vec(),
        created_ms: now_ms,
    };
    if let Err(e) = gw.store.commit(vec![Write::Checkpoint(rec.clone())]).await {
        return store_err(e);
    }
    gw.health.mark_may_recover(&id, &task);
    gw.health.heartbeat(
        &id,
        &Heartbeat {
            task: Some(&task),
            ..Heartbeat::default()
        },
        Instant::now(),
    );
    (StatusCode::CREATED, axum::Json(meta(&rec, true))).into_response()
}

pub(super) async fn list_task(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((id, task)): Path<(String, String)>,
) -> Response {
    if let Some(r) = agent_refusal(&gw, peer, &headers, &id) {
        return r;
    }
    list(&gw, &id, Some(&task)).await
}

pub(super) async fn list_agent(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Some(r) = agent_refusal(&gw, peer, &headers, &id) {
        return r;
    }
    list(&gw, &id, None).await
}

async fn list(gw: &Gateway, agent: &str, task: Option<&str>) -> Response {
    match gw.store.checkpoints(agent, task).await {
        Ok(cps) => {
            let items: Vec<Value> = cps
                .iter()
                .map(|c| {
                    let valid = checkpoint_valid(c);
                    if !valid {
                        gw.health.report_corrupt(c, false);
                    }
                    meta(c, valid)
                })
                .collect();
            axum::Json(json!({"agent": agent, "task": task, "checkpoints": items})).into_response()
        }
        Err(e) => store_err(e),
    }
}

pub(super) async fn get(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((id, task, cp)): Path<(String, String, String)>,
) -> Response {
    if let Some(r) = agent_refusal(&gw, peer, &headers, &id) {
        return r;
    }
    // `latest`: the newest valid checkpoint of the task.
    let found = if cp == "latest" {
        match gw.store.checkpoints(&id, Some(&task)).await {
            Ok(list) => {
                let mut hit = None;
                for c in list {
                    if checkpoint_valid(&c) {
                        hit = Some(c);
                        break;
                    }
                    gw.health.report_corrupt(&c, false);
                }
                hit
            }
            Err(e) => return store_err(e),
        }
    } else {
        match gw.store.checkpoint(&id, &cp).await {
            Ok(c) => c.filter(|c| c.task == task),
            Err(e) => return store_err(e),
        }
    };
    let Some(c) = found else {
        return HaleError::not_found(format!("no checkpoint {cp} for task {task} of agent {id}"))
            .into_response(Dialect::OpenAi);
    };
    if !checkpoint_valid(&c) {
        gw.health.report_corrupt(&c, false);
        return HaleError::new(
            StatusCode::CONFLICT,
            "checkpoint_corrupt",
            format!(
                "checkpoint {} is corrupt (hash mismatch or unparsable body) and is not served",
                c.id
            ),
        )
        .into_response(Dialect::OpenAi);
    }
    checkpoint_response(&c)
}

fn checkpoint_response(c: &CheckpointRecord) -> Response {
    let mut resp = Response::new(Body::from(c.body.clone()));
    let h = resp.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/json"));
    for (k, v) in [
        ("x-hale-checkpoint-id", Some(&c.id)),
        ("x-hale-checkpoint-sha256", Some(&c.sha256)),
        ("x-hale-checkpoint-parent", c.parent.as_ref()),
    ] {
        if let Some(v) = v.and_then(|v| HeaderValue::from_str(v).ok()) {
            h.insert(k, v);
        }
    }
    resp
}
