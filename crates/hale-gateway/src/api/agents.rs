//! `GET /agents`, `GET /agents/{id}`, `POST /agents/{id}/pause|resume` and
//! `POST /agents/{id}/tasks/{task}/reset` (docs/http-api.md, "Agents";
//! issue 8).
//!
//! An unknown agent (never seen, not under `agents:`) is a 404
//! `agent_not_found`, so a typo never creates an agent — except for a
//! pause: an operator's pause of an agent hale has not seen creates it
//! paused (`"created": true`), so a kill switch works before the agent's
//! first request, on every instance. Every handler reads the agent's row
//! back when it is not in memory (another instance may be serving it).
//! Resume says plainly
//! what it cleared (the pause, the failure count, terminated tasks) and what
//! it did not (tasks stopped by a guard limit: `reset-task` clears those).

use super::edge::admin_refusal;
use crate::Gateway;
use crate::emit::wall_ms;
use crate::error::HaleError;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hale_core::event::EventKind;
use hale_core::pause::PausedBy;
use hale_proto::Dialect;
use hale_store::Write;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// 404 `agent_not_found` for an agent hale has never seen and the config does not name.
fn not_found(id: &str) -> Response {
    HaleError::new(
        StatusCode::NOT_FOUND,
        "agent_not_found",
        format!("no agent {id}: hale has not seen it and the config does not name it"),
    )
    .into_response(Dialect::OpenAi)
}

/// The admin check, then 404 for an agent hale does not know.
pub fn refusal(gw: &Gateway, peer: SocketAddr, headers: &HeaderMap, id: &str) -> Option<Response> {
    admin_refusal(gw, peer, headers).or_else(|| (!gw.agent_known(id)).then(|| not_found(id)))
}

fn store_error(e: impl std::fmt::Display) -> Response {
    HaleError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "store_error",
        format!("could not record the change: {e}"),
    )
    .into_response(Dialect::OpenAi)
}

/// One agent as the admin API shows it.
pub fn view(gw: &Gateway, id: &str) -> Value {
    view_of(gw, gw.agent_record(id))
}

/// An agent as the admin API shows it, from its record (held in memory, or
/// its stored row when it was shed).
fn view_of(gw: &Gateway, rec: hale_store::AgentRecord) -> Value {
    let id = rec.id.as_str();
    let tasks = gw.tasks.of_agent(id);
    let now = Instant::now();
    let now_ms = wall_ms();
    let pause = gw.agents.pause_of(id);
    // A paused agent is never shed, but another instance may have paused
    // one this instance does not hold: its row says so.
    let paused = pause.is_some() || (rec.paused && !gw.holds(id));
    let breakers = gw.deployments.breakers_of(id);
    let deployments: Vec<Value> = breakers
        .iter()
        .filter_map(|(d, _)| {
            let (provider, model) = d.split_once('/')?;
            let t = hale_core::config::Target {
                provider: provider.to_owned(),
                model: model.to_owned(),
            };
            serde_json::to_value(gw.deployments.view(&t, now)).ok()
        })
        .collect();
    let breakers: serde_json::Map<String, Value> = breakers
        .into_iter()
        .map(|(d, b)| (d, serde_json::to_value(b.snapshot(now)).unwrap_or_default()))
        .collect();
    json!({
        "id": rec.id,
        "state": if paused { "paused" } else { "active" },
        "pause": pause.map(|p| json!({
            "by": p.by,
            "since_ms": p.since_ms,
            "failed_trials": p.failed_trials,
            "next_trial_in_ms": p.next_trial_in_ms(now_ms),
        })),
        "consecutive_failures": rec.consecutive_failures,
        "counters": {
            "turns": rec.turns,
            "failed_turns": rec.failed_turns,
            "tokens_in": rec.tokens_in,
            "tokens_out": rec.tokens_out,
            "cost_usd": rec.cost_usd,
        },
        "last_failure_ms": rec.last_failure_ms,
        "last_seen_ms": rec.last_seen_ms,
        "breakers": breakers,
        "deployments": deployments,
        "health": gw.health.view(id, now),
        "budget": budget_view(gw, &rec, &tasks),
        "stopped_tasks": stopped_tasks(gw, id, &tasks),
        "detail": rec.state,
    })
}

/// A task's name, guard and spend, as `Tasks::of_agent` lists them.
type Task = (
    String,
    hale_core::guard::GuardSnapshot,
    hale_core::budget::Spend,
);

/// Caps, spend and guard state per task.
fn budget_view(gw: &Gateway, rec: &hale_store::AgentRecord, tasks: &[Task]) -> Value {
    let id = rec.id.as_str();
    let caps = gw
        .cfg
        .agents
        .get(id)
        .or_else(|| gw.cfg.agents.get(hale_core::config::DEFAULT_AGENT))
        .map(|a| a.budget.clone())
        .unwrap_or_default();
    let tasks: serde_json::Map<String, Value> = tasks
        .iter()
        .map(|(task, guard, spend)| (task.clone(), json!({ "spend": spend, "guard": guard })))
        .collect();
    json!({
        "caps": {
            "max_tokens_per_task": caps.max_tokens_per_task,
            "max_tokens_per_agent": caps.max_tokens_per_agent,
            "max_cost_usd_per_task": caps.max_cost_usd_per_task,
            "max_cost_usd_per_agent": caps.max_cost_usd_per_agent,
        },
        "agent_spend": { "tokens": rec.tokens_in + rec.tokens_out, "cost_usd": rec.cost_usd },
        "tasks": tasks,
    })
}

/// Tasks of the agent that are stopped: by a guard limit or terminated.
fn stopped_tasks(gw: &Gateway, id: &str, tasks: &[Task]) -> Vec<Value> {
    let mut out: Vec<Value> = tasks
        .iter()
        .filter_map(|(task, guard, _)| {
            guard
                .hit
                .as_ref()
                .map(|h| json!({"task": task, "reason": "safety_limit", "limit": h.limit.code()}))
        })
        .collect();
    for t in gw.health.terminated_tasks(id) {
        out.push(json!({"task": t, "reason": "terminated"}));
    }
    out
}

/// `GET /agents` query: a page of the list (`hale_core::pages`).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListParams {
    /// Agents per page (default and maximum: `hale_core::pages`); a string,
    /// so a bad value gets this API's error, not the extractor's.
    limit: Option<String>,
    /// The previous page's `next`.
    after: Option<String>,
    /// `paused` or `active`: only the agents in that state.
    state: Option<String>,
}

/// A page of the agents, in the byte order of their ids: those held in
/// memory, the ones the config names, and the stored rows of agents shed
/// from memory (`hale_core::memory`). `next` is the cursor of the next page
/// (`?after=`), `null` at the end. Never the whole list at once: the store
/// holds every agent ever seen.
pub(super) async fn list(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(p): Query<ListParams>,
) -> Response {
    if let Some(r) = admin_refusal(&gw, peer, &headers) {
        return r;
    }
    let limit = match hale_core::pages::page_limit(p.limit.as_deref()) {
        Ok(n) => n,
        Err(e) => return HaleError::bad_request(e).into_response(Dialect::OpenAi),
    };
    let paused = match p.state.as_deref() {
        None => None,
        Some("paused") => Some(true),
        Some("active") => Some(false),
        Some(other) => {
            return HaleError::bad_request(format!(
                "state must be paused or active, not {other:?}"
            ))
            .into_response(Dialect::OpenAi);
        }
    };
    let after = p.after.as_deref().filter(|a| !a.is_empty());
    // The store down: the agents in memory still list (fail open), and the
    // answer says the rest is missing.
    let (stored, store_error) = match gw.store.agents_page(after, paused, limit + 1).await {
        Ok(rows) => (rows, None),
        Err(e) => {
            tracing::warn!(error = %e, "listing stored agents failed; listing memory only");
            (Vec::new(), Some(e.to_string()))
        }
    };
    // Memory decides for the agents it holds and those the config names
    // (never paused until seen); the stored rows for the rest.
    let memory: Vec<(String, bool)> = {
        let held = gw.agents.lock().expect("agents lock");
        let listed = |is_paused: bool| paused.is_none_or(|want| want == is_paused);
        held.iter()
            .map(|(id, a)| (id.clone(), listed(a.pause.is_some())))
            .chain(
                gw.cfg
                    .agents
                    .keys()
                    .filter(|id| !held.contains_key(*id))
                    .map(|id| (id.clone(), listed(false))),
            )
            .collect()
    };
    let stored_ids: Vec<&str> = stored.iter().map(|r| r.id.as_str()).collect();
    let page = hale_core::pages::page(
        memory.iter().map(|(id, listed)| (id.as_str(), *listed)),
        &stored_ids,
        after,
        limit,
    );
    let decided: std::collections::HashSet<&str> =
        memory.iter().map(|(id, _)| id.as_str()).collect();
    let mut rows: std::collections::HashMap<&str, &hale_store::AgentRecord> =
        stored.iter().map(|r| (r.id.as_str(), r)).collect();
    let list: Vec<Value> = page
        .ids
        .iter()
        .map(|id| match rows.remove(id) {
            Some(row) if !decided.contains(id) => view_of(&gw, row.clone()),
            Some(_) | None => view(&gw, id),
        })
        .collect();
    let mut body = json!({ "agents": list, "next": page.next });
    if let Some(e) = store_error {
        body["store_error"] = json!(format!("only the agents in memory are listed: {e}"));
    }
    axum::Json(body).into_response()
}

pub(super) async fn show(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    gw.load_agent(&id).await;
    if let Some(r) = refusal(&gw, peer, &headers, &id) {
        return r;
    }
    axum::Json(view(&gw, &id)).into_response()
}

pub(super) async fn pause(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    gw.load_agent(&id).await;
    if let Some(r) = admin_refusal(&gw, peer, &headers) {
        return r;
    }
    // Neither in memory nor in the store: the pause creates it, paused.
    let created = !gw.holds(&id);
    let mut v = match paused_view(&gw, &id, "paused by an operator").await {
        Ok(v) => v,
        Err(r) => return r,
    };
    if created {
        // Another instance may have committed its first turn meanwhile:
        // the row has its counts (nothing of this instance is pending).
        if let Ok(Some(row)) = gw.store.agent(&id).await {
            gw.agents.update_if_held(&id, |rt| rt.reread(&row));
            v = view(&gw, &id);
        }
    }
    v["created"] = json!(created);
    axum::Json(v).into_response()
}

/// An operator's pause (also a hand-off decision): held until an operator
/// resumes ([`crate::agents::Agents::pause`]); the change and its event
/// commit together.
pub async fn operator_pause(gw: &Gateway, id: &str, reason: &str) -> Response {
    match paused_view(gw, id, reason).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(r) => r,
    }
}

/// [`operator_pause`]: the agent's view after the pause committed.
async fn paused_view(gw: &Gateway, id: &str, reason: &str) -> Result<Value, Response> {
    let writes = gw.agents.pause(id, reason, wall_ms());
    let committed = gw.store.commit(writes).await;
    gw.agents.control_committed(id);
    if let Err(e) = committed {
        return Err(store_error(e));
    }
    Ok(view(gw, id))
}

pub(super) async fn resume(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    gw.load_agent(&id).await;
    if let Some(r) = refusal(&gw, peer, &headers, &id) {
        return r;
    }
    let resumed = gw.agents.resume(&id, wall_ms());
    let terminated = gw.health.terminated_tasks(&id);
    gw.health.on_resume(&gw.agents, &id);
    let committed = gw.store.commit(resumed.writes).await;
    gw.agents.control_committed(&id);
    if let Err(e) = committed {
        return store_error(e);
    }
    let (was, cleared) = (resumed.was, resumed.cleared);
    let mut v = view(&gw, &id);
    v["resume"] = json!({
        "was_paused": was.is_some(),
        "paused_by": was.map(|p| p.by),
        "consecutive_failures_cleared": cleared,
        "terminated_tasks_cleared": terminated,
        "still_stopped_tasks": stopped_tasks(&gw, &id, &gw.tasks.of_agent(&id)),
    });
    axum::Json(v).into_response()
}

pub(super) async fn reset_task(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((id, task)): Path<(String, String)>,
) -> Response {
    gw.load_agent(&id).await;
    if let Some(r) = refusal(&gw, peer, &headers, &id) {
        return r;
    }
    let mut cleared = Vec::new();
    let had = gw.tasks.reset(&id, &task);
    if had.guard_hit {
        cleared.push("safety_limit");
    }
    if had.existed {
        cleared.push("guard");
        cleared.push("spend");
    }
    if gw.health.unblock(&gw.agents, &id, &task) {
        cleared.push("terminated");
    }
    let ev = gw
        .event(EventKind::TaskReset)
        .agent(&id)
        .task(&task)
        .payload(json!({ "by": PausedBy::Operator, "cleared": cleared }));
    gw.metrics.event(ev.kind);
    if let Err(e) = gw
        .store
        .commit(vec![
            Write::ForgetTask {
                agent: id.clone(),
                task: task.clone(),
            },
            Write::Event(ev),
            crate::agents::announce(&id, Some(&task)),
        ])
        .await
    {
        return store_error(e);
    }
    axum::Json(json!({ "agent": id, "task": task, "cleared": cleared })).into_response()
}
