//! The Responses API's stored responses: `GET /v1/responses/{id}`,
//! `DELETE /v1/responses/{id}` and `GET /v1/responses/{id}/input_items`,
//! over what hale keeps of each Responses answer (`crate::responses`).
//!
//! Client key auth, as `POST /v1/responses`; a caller sees only the
//! responses of agents it may act as (`hale_core::responses::may_read`):
//! any other id is the same 404 as an id hale never issued, so ids do not
//! leak across agents. Shapes are OpenAI's.

use super::edge::{authorize, bad, store_err};
use crate::Gateway;
use crate::error::HaleError;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use hale_core::responses::{self as rules, Order};
use hale_proto::Dialect;
use hale_store::ResponseRecord;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

fn not_found(id: &str) -> Response {
    HaleError::not_found(format!("Response with id '{id}' not found."))
        .into_response(Dialect::OpenAi)
}

/// The caller's response `id`, or the response to answer instead.
async fn visible(
    gw: &Gateway,
    peer: SocketAddr,
    headers: &HeaderMap,
    id: &str,
) -> Result<ResponseRecord, Response> {
    let caller =
        authorize(gw, peer, headers, false).map_err(|e| e.into_response(Dialect::OpenAi))?;
    match gw.store.response(id).await {
        Ok(Some(r)) if rules::may_read(caller.agents.as_deref(), &r.agent) => Ok(r),
        Ok(Some(_) | None) => Err(not_found(id)),
        Err(e) => Err(store_err(e)),
    }
}

/// `GET /v1/responses/{id}`: the response object as the client received it.
pub(super) async fn get(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    match visible(&gw, peer, &headers, &id).await {
        Ok(r) => axum::Json(r.response).into_response(),
        Err(resp) => resp,
    }
}

/// `DELETE /v1/responses/{id}`: hale forgets it (the provider's copy, if
/// any, is the provider's).
pub(super) async fn delete(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(resp) = visible(&gw, peer, &headers, &id).await {
        return resp;
    }
    match gw.store.delete_response(&id).await {
        Ok(true) => {
            axum::Json(json!({"id": id, "object": "response", "deleted": true})).into_response()
        }
        Ok(false) => not_found(&id),
        Err(e) => store_err(e),
    }
}

/// An input item's id: its own, else one made from the response's id and
/// its place (stable, so `after` pages through them).
fn item_id(response_id: &str, i: usize, item: &Value) -> String {
    match item.get("id").and_then(Value::as_str) {
        Some(id) => id.to_owned(),
        None => {
            let base = response_id.strip_prefix("resp_").unwrap_or(response_id);
            format!("item_{base}_{i}")
        }
    }
}

/// `GET /v1/responses/{id}/input_items`: the turn's own input items in
/// OpenAI's list shape; query `limit` (1–100, default 20), `order`
/// (`asc` or `desc`, default `desc`), `after` (an item id).
pub(super) async fn input_items(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => rules::INPUT_ITEMS_DEFAULT_LIMIT,
        Some(Ok(n)) if (1..=rules::INPUT_ITEMS_MAX_LIMIT).contains(&n) => n,
        Some(Ok(_) | Err(_)) => {
            return bad(format!(
                "limit must be a whole number from 1 to {}",
                rules::INPUT_ITEMS_MAX_LIMIT
            ));
        }
    };
    let order = match q.get("order").map(|o| Order::parse(o)) {
        None => Order::Desc,
        Some(Some(o)) => o,
        Some(None) => return bad("order must be asc or desc"),
    };
    let r = match visible(&gw, peer, &headers, &id).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let items: Vec<Value> = match r.input {
        Value::Array(a) => a,
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Object(_) => {
            Vec::new()
        }
    };
    let ids: Vec<String> = items
        .iter()
        .enumerate()
        .map(|(i, item)| item_id(&r.id, i, item))
        .collect();
    let after = q.get("after").map(|a| ids.iter().position(|x| x == a));
    let after = match after {
        None => None,
        Some(Some(i)) => Some(i),
        Some(None) => return bad("after names no input item of this response"),
    };
    let page = rules::page(items.len(), order, after, limit);
    let data: Vec<Value> = page
        .indices
        .iter()
        .map(|&i| {
            let mut item = items[i].clone();
            if let Some(o) = item.as_object_mut() {
                o.entry("id").or_insert_with(|| json!(ids[i]));
                o.entry("type").or_insert_with(|| json!("message"));
            }
            item
        })
        .collect();
    let first = page.indices.first().map(|&i| ids[i].clone());
    let last = page.indices.last().map(|&i| ids[i].clone());
    axum::Json(json!({
        "object": "list",
        "data": data,
        "first_id": first,
        "last_id": last,
        "has_more": page.has_more,
    }))
    .into_response()
}
