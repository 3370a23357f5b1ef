//! Operations: `/live`, `/ready` (the store and the event sinks),
//! `/metrics` (Prometheus, admin) and `/turns/{id}` (a turn's journal row,
//! admin).

use super::edge::admin_refusal;
use crate::Gateway;
use crate::error::HaleError;
use crate::metrics::{BreakerLabels, DeploymentLabels, DeploymentStateLabels};
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hale_core::breaker::BreakerState;
use hale_core::deployment::State as Health;
use hale_proto::Dialect;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// `GET /ready`: 200 when the store answers (503 when not), with each event
/// sink's state, backlog, oldest undelivered age, dead letters and last error
/// Public, so it shows sinks by their public names only (no
/// webhook credentials, paths or query strings). A sink that is down does not
/// make hale unready: its events wait in the outbox.
pub(super) async fn ready(State(gw): State<Arc<Gateway>>) -> Response {
    let store = gw.store.last_seq().await;
    let sinks: Vec<serde_json::Value> = gw
        .metrics
        .sinks()
        .map(|(sinks, _shed)| sinks)
        .unwrap_or_default()
        .into_iter()
        .map(|s| {
            serde_json::json!({
                "name": s.name,
                "kind": s.kind,
                "state": s.state,
                "backlog": s.backlog,
                "oldest_undelivered_age_ms": s.oldest_undelivered_age_ms,
                "dead_letters": s.dead_letters,
                "last_error": s.last_error,
            })
        })
        .collect();
    let (status, ready, store) = match store {
        Ok(_) => (StatusCode::OK, true, "ok".to_string()),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, false, e.to_string()),
    };
    (
        status,
        axum::Json(serde_json::json!({"ready": ready, "store": store, "sinks": sinks})),
    )
        .into_response()
}

pub(super) async fn metrics(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = admin_refusal(&gw, peer, &headers) {
        return refusal;
    }
    let now = Instant::now();
    refresh_metrics(&gw, now);
    if let Ok(d) = gw.store.outbox_depth().await {
        gw.metrics.outbox_depth.set(d as i64);
    }
    if let Ok(d) = gw.store.dlq_list(None).await {
        gw.metrics.dead_letters.set(d.len() as i64);
    }
    let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    gw.metrics
        .store_queued_writes
        .set(i64::try_from(gw.store.queued()).unwrap_or(i64::MAX));
    gw.metrics.set_store_commits(gw.store.commits());
    gw.metrics
        .agents_held
        .set(gauge(gw.agents.lock().expect("agents lock").len()));
    gw.metrics.tasks_held.set(gauge(gw.tasks.len()));
    gw.metrics
        .breakers_held
        .set(gauge(gw.deployments.breakers_held()));
    gw.metrics.refresh_sinks();
    gw.metrics.refresh_tools();
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        gw.metrics.render(),
    )
        .into_response()
}

pub(super) async fn turn(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Some(refusal) = admin_refusal(&gw, peer, &headers) {
        return refusal;
    }
    // The journal is group-committed: make sure this turn's row is in.
    let _ = gw.store.flush().await;
    match gw.store.turn(&id).await {
        Ok(Some(t)) => {
            // Rows marked `skipped` are deployments passed over, not attempts.
            let rows = match serde_json::from_str(&t.attempts) {
                Ok(serde_json::Value::Array(rows)) => rows,
                Ok(_) | Err(_) => Vec::new(),
            };
            let (skipped, timeline): (Vec<_>, Vec<_>) =
                rows.into_iter().partition(|r| r.get("skipped").is_some());
            axum::Json(json!({
                "id": t.id,
                "agent": t.agent,
                "task": t.task,
                "status": t.status,
                "model_requested": t.model_requested,
                "provider": t.provider,
                "model": t.model,
                "started_ms": t.started_ms,
                "duration_ms": t.duration_ms,
                "usage": {"input_tokens": t.usage_in, "output_tokens": t.usage_out},
                "error_class": t.error_class,
                "timeline": timeline,
                "skipped": skipped,
            }))
            .into_response()
        }
        Ok(None) => HaleError::not_found(format!("no turn {id}")).into_response(Dialect::OpenAi),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("store error: {e}"),
        )
            .into_response(),
    }
}

/// Fills the deployment and breaker gauges of `/metrics` at `now`. Labels
/// are bounded: deployments and agents the config does not name are folded
/// into `other` (`metrics::LabelBounds`), and breakers that share a label set
/// are counted together.
fn refresh_metrics(gw: &Gateway, now: Instant) {
    let m = &gw.metrics;
    let bounds = m.bounds();
    let label = |provider: &str, model: &str| {
        format!("{}/{}", bounds.provider(provider), bounds.model(model))
    };
    for v in gw.deployments.views(now) {
        let deployment = label(&v.provider, &v.model);
        for s in Health::ALL {
            m.deployment_health
                .get_or_create(&DeploymentStateLabels {
                    deployment: deployment.clone(),
                    state: s.as_str().into(),
                })
                .set(i64::from(s == v.health.health));
        }
        let d = DeploymentLabels { deployment };
        m.deployment_ejected_seconds
            .get_or_create(&d)
            .set(v.health.ejected_remaining_ms as f64 / 1000.0);
        m.deployment_consecutive_failures
            .get_or_create(&d)
            .set(i64::from(v.health.consecutive_failures));
        if let Some(r) = v.health.success_ratio {
            m.deployment_success_ratio.get_or_create(&d).set(r);
        }
    }
    const STATES: [BreakerState; 5] = [
        BreakerState::Closed,
        BreakerState::Open,
        BreakerState::HalfOpen,
        BreakerState::ForcedOpen,
        BreakerState::Disabled,
    ];
    let mut counts: std::collections::BTreeMap<(String, String), [i64; 5]> = Default::default();
    for ((agent, deployment), b) in gw.deployments.all_breakers() {
        let current = b.state(now);
        let (p, model) = deployment.split_once('/').unwrap_or((&deployment, ""));
        let key = (bounds.agent(&agent).to_owned(), label(p, model));
        let c = counts.entry(key).or_default();
        for (i, s) in STATES.iter().enumerate() {
            c[i] += i64::from(*s == current);
        }
    }
    for ((agent, deployment), c) in counts {
        for (s, n) in STATES.iter().zip(c) {
            m.breaker_state
                .get_or_create(&BreakerLabels {
                    agent: agent.clone(),
                    deployment: deployment.clone(),
                    state: s.as_str().into(),
                })
                .set(n);
        }
    }
}
