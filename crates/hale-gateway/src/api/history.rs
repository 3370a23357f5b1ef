//! `GET /history?agent=&deployment=&from=&to=` (admin): the health history
//! the dashboard draws charts from (docs/operations.md, "Health history").
//! `from`/`to` are milliseconds since the epoch (`to` defaults to now, `from` to
//! `HISTORY_DEFAULT_WINDOW` before `to`); `agent` filters transitions,
//! `deployment` both transitions and minutes. The shape:
//! `{"transitions": [{id, time_ms, kind, agent?, deployment?, payload}],
//!   "minutes": [{deployment, minute_ms, calls, failures, success_ratio, avg_ms}]}`,
//! both oldest first.

use super::edge::admin_refusal;
use crate::Gateway;
use crate::emit::wall_ms;
use crate::error::HaleError;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use hale_core::config::HISTORY_DEFAULT_WINDOW;
use hale_core::history::MinutePoint;
use hale_proto::Dialect;
use hale_store::HistoryQuery;
use serde::Deserialize;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Params {
    agent: Option<String>,
    deployment: Option<String>,
    from: Option<u64>,
    to: Option<u64>,
}

pub(super) async fn history(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(p): Query<Params>,
) -> Response {
    if let Some(r) = admin_refusal(&gw, peer, &headers) {
        return r;
    }
    let to = p.to.unwrap_or_else(wall_ms);
    let window = u64::try_from(HISTORY_DEFAULT_WINDOW.as_millis()).unwrap_or(u64::MAX);
    let from = p.from.unwrap_or_else(|| to.saturating_sub(window));
    if from > to {
        return HaleError::bad_request(format!("from ({from}) is after to ({to})"))
            .into_response(Dialect::OpenAi);
    }
    let q = HistoryQuery {
        agent: p.agent.filter(|s| !s.is_empty()),
        deployment: p.deployment.filter(|s| !s.is_empty()),
        from_ms: from,
        to_ms: to,
    };
    match gw.store.history(&q).await {
        Ok(h) => {
            let minutes: Vec<MinutePoint> = h.minutes.iter().map(MinutePoint::from).collect();
            axum::Json(json!({
                "from": from,
                "to": to,
                "transitions": h.transitions,
                "minutes": minutes,
            }))
            .into_response()
        }
        Err(e) => HaleError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            format!("reading the health history: {e}"),
        )
        .into_response(Dialect::OpenAi),
    }
}
