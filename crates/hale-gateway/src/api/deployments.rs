//! `GET /deployments` and `POST /deployments/{provider}/{model}/trip|reset`
//! (DESIGN §3, issue 8): per-deployment health, and the operator's levers —
//! trip forces a deployment out (an outside health check knows it is down
//! before a call fails), reset brings it back at once (no waiting for the
//! probe). Each lever emits `breaker.state_changed` naming who pulled it. A
//! model name holding `/` is percent-encoded (`%2F`) in the path.

use crate::error::HaleError;
use crate::http::admin_refusal;
use crate::metrics::{BreakerLabels, DeploymentLabels, DeploymentStateLabels};
use crate::proto::Dialect;
use crate::state::Gateway;
use axum::Router;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hale_core::breaker::BreakerState;
use hale_core::config::Target;
use hale_core::deployment::State as Health;
use hale_core::event::EventKind;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

pub fn router() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/deployments", get(list))
        .route("/deployments/{provider}/{model}/trip", post(trip))
        .route("/deployments/{provider}/{model}/reset", post(reset))
}

async fn list(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = admin_refusal(&gw, peer, &headers) {
        return r;
    }
    axum::Json(json!({ "deployments": gw.deployments.views(Instant::now()) })).into_response()
}

fn unknown(t: &Target) -> Response {
    HaleError::not_found(format!(
        "no deployment {t}: not in the config and never called (GET /deployments lists them)"
    ))
    .into_response(Dialect::OpenAi)
}

async fn trip(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((provider, model)): Path<(String, String)>,
) -> Response {
    if let Some(r) = admin_refusal(&gw, peer, &headers) {
        return r;
    }
    let t = Target { provider, model };
    if !gw.deployments.is_known(&t) {
        return unknown(&t);
    }
    let now = Instant::now();
    if gw.deployments.trip(&t) {
        gw.emit(gw.event(EventKind::BreakerStateChanged).payload(json!({
            "deployment": t.to_string(),
            "provider": t.provider,
            "to": BreakerState::ForcedOpen,
            "reason": "tripped by an operator",
            "by": "operator",
        })));
    }
    axum::Json(gw.deployments.view(&t, now)).into_response()
}

async fn reset(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((provider, model)): Path<(String, String)>,
) -> Response {
    if let Some(r) = admin_refusal(&gw, peer, &headers) {
        return r;
    }
    let t = Target { provider, model };
    if !gw.deployments.is_known(&t) {
        return unknown(&t);
    }
    let now = Instant::now();
    let (was_out, transitions) = gw.deployments.reset(&t, now);
    if was_out || !transitions.is_empty() {
        gw.emit(gw.event(EventKind::BreakerStateChanged).payload(json!({
            "deployment": t.to_string(),
            "provider": t.provider,
            "to": BreakerState::Closed,
            "reason": "reset by an operator",
            "by": "operator",
            "agents_closed": transitions.iter().map(|(a, _)| a).collect::<Vec<_>>(),
        })));
    }
    for (agent, _) in &transitions {
        let open = gw.deployments.any_open(agent, now);
        gw.health.set_breaker_open(agent, open);
    }
    axum::Json(gw.deployments.view(&t, now)).into_response()
}

/// Fills the deployment and breaker gauges of `/metrics` at `now`. Labels
/// are bounded: deployments and agents the config does not name are folded
/// into `other` (`metrics::LabelBounds`), and breakers that share a label set
/// are counted together.
pub fn refresh_metrics(gw: &Gateway, now: Instant) {
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
