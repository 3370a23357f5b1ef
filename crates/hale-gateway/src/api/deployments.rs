//! `GET /deployments` and `POST /deployments/{provider}/{model}/trip|reset`
//! (docs/http-api.md, "Deployments"; issue 8): per-deployment health, and the
//! operator's levers — trip forces a deployment out (an outside health check
//! knows it is down before a call fails), reset brings it back at once (no
//! waiting for the probe). Each lever emits `breaker.state_changed` naming who
//! pulled it. A model name holding `/` is percent-encoded (`%2F`) in the path.

use super::edge::admin_refusal;
use crate::Gateway;
use crate::error::HaleError;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use hale_core::breaker::BreakerState;
use hale_core::config::Target;
use hale_core::event::EventKind;
use hale_proto::Dialect;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

pub(super) async fn list(
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

pub(super) async fn trip(
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

pub(super) async fn reset(
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
