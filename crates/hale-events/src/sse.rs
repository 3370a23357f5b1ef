//! The live event stream `GET /events` and the dead-letter endpoints
//! `GET /dlq`, `POST /dlq/replay` (docs/http-api.md, "Events and dead
//! letters").
//!
//! `/events` is Server-Sent Events read straight from the outbox: each SSE
//! event has `id:` = the event's ULID, `event:` = its kind and `data:` = its
//! JSON. A client resumes from any event still stored with `Last-Event-ID`
//! (what browsers' `EventSource` sends on reconnect) or `?after=ID`; an id
//! that is not stored is a 400 naming it, never a silent restart. Without a
//! cursor the stream starts at the newest `?tail=N` events (default 0: only
//! new ones). `?kind=a,b` filters. After the stored backlog, the stream
//! follows new commits through the store's `watch_seq()`; `?follow=false`
//! ends it once caught up (`hale events tail` without `--follow`).
//!
//! The stream is not a registered sink: it has no cursor in the store and
//! holds nothing back; each client carries its own position in the ids it saw.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::Stream;
use hale_core::event::EventKind;
use hale_store::{DeadLetter, Store, StoredEvent};
use serde::{Deserialize, Serialize};

use crate::relay::{POLL_INTERVAL, Relays};

/// Events read from the outbox per query while streaming.
pub const PAGE: usize = 256;
/// Most backlog events `?tail=N` may ask for.
pub const MAX_TAIL: i64 = 100_000;

#[derive(Clone)]
struct AppState {
    store: Store,
    relays: Option<Relays>,
}

/// `/events`, `/dlq` and `/dlq/replay`. Without relays, a replay answers 503.
pub fn router(store: Store) -> Router {
    make(AppState {
        store,
        relays: None,
    })
}

/// [`router`] whose `/dlq/replay` re-delivers through the running relays.
pub fn router_with_relays(store: Store, relays: &Relays) -> Router {
    make(AppState {
        store,
        relays: Some(relays.clone()),
    })
}

fn make(state: AppState) -> Router {
    Router::new()
        .route("/events", get(events))
        .route("/dlq", get(dlq_list))
        .route("/dlq/replay", post(dlq_replay))
        .with_state(state)
}

/// An error answer: status and a JSON body in the OpenAI error shape.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let kind = if self.0.is_client_error() {
            "invalid_request_error"
        } else {
            "server_error"
        };
        (
            self.0,
            Json(serde_json::json!({"error": {"message": self.1, "type": kind}})),
        )
            .into_response()
    }
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

#[derive(Debug, Deserialize)]
struct EventsQuery {
    after: Option<String>,
    kind: Option<String>,
    follow: Option<bool>,
    tail: Option<i64>,
}

/// Parses `a,b` into kinds; an unknown kind is an error naming it.
pub fn parse_kind_filter(s: &str) -> Result<Vec<EventKind>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(|k| EventKind::parse(k).ok_or_else(|| format!("unknown event kind {k:?}")))
        .collect()
}

async fn events(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let kinds = match q.kind.as_deref() {
        Some(s) if !s.trim().is_empty() => {
            Some(parse_kind_filter(s).map_err(|m| ApiError(StatusCode::BAD_REQUEST, m))?)
        }
        _ => None,
    };
    let header_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let cursor_id = q
        .after
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .or(header_id);
    // Subscribe before reading, so no commit falls between the two.
    let watch = st.store.watch_seq();
    let start = match cursor_id {
        Some(id) => st
            .store
            .seq_of(id)
            .await
            .map_err(internal)?
            .ok_or_else(|| {
                ApiError(
                    StatusCode::BAD_REQUEST,
                    format!("unknown event id {id:?}: not (or no longer) in the outbox"),
                )
            })?,
        None => {
            let follow = q.follow.unwrap_or(true);
            let tail = q
                .tail
                .unwrap_or(if follow { 0 } else { 100 })
                .clamp(0, MAX_TAIL);
            let last = st.store.last_seq().await.map_err(internal)?;
            (last - tail).max(0)
        }
    };
    let state = Tail {
        store: st.store,
        cursor: start,
        kinds,
        watch,
        follow: q.follow.unwrap_or(true),
        buf: VecDeque::new(),
    };
    let stream = futures::stream::unfold(state, |mut t| async move {
        t.next().await.map(|ev| (Ok(ev), t))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

struct Tail {
    store: Store,
    cursor: i64,
    kinds: Option<Vec<EventKind>>,
    watch: tokio::sync::watch::Receiver<i64>,
    follow: bool,
    buf: VecDeque<StoredEvent>,
}

impl Tail {
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(se) = self.buf.pop_front() {
                return Some(to_sse(&se));
            }
            let target = *self.watch.borrow_and_update();
            let page = match self
                .store
                .events_after(self.cursor, PAGE, self.kinds.as_deref())
                .await
            {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the outbox for /events failed; ending the stream");
                    return None;
                }
            };
            let short = page.len() < PAGE;
            if let Some(last) = page.last() {
                self.cursor = last.seq;
            }
            // A short page covered everything committed up to `target`.
            if short && target > self.cursor {
                self.cursor = target;
            }
            if !page.is_empty() {
                self.buf.extend(page);
                continue;
            }
            if !self.follow {
                return None;
            }
            tokio::select! {
                r = self.watch.changed() => if r.is_err() { return None },
                _ = tokio::time::sleep(POLL_INTERVAL) => {}
            }
        }
    }
}

fn to_sse(se: &StoredEvent) -> SseEvent {
    let data = serde_json::to_string(&se.event).unwrap_or_else(|_| "{}".into());
    SseEvent::default()
        .id(se.event.id.clone())
        .event(se.event.kind.as_str())
        .data(data)
}

/// One dead letter as `GET /dlq` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DlqEntry {
    pub id: String,
    pub seq: i64,
    pub sink: String,
    pub attempts: u32,
    pub error: String,
    pub failed_ms: u64,
    pub event: hale_core::event::Event,
}

impl From<DeadLetter> for DlqEntry {
    fn from(d: DeadLetter) -> Self {
        DlqEntry {
            id: d.id,
            seq: d.seq,
            sink: d.sink,
            attempts: d.attempts,
            error: d.error,
            failed_ms: d.failed_ms,
            event: d.event,
        }
    }
}

#[derive(Debug, Deserialize)]
struct DlqQuery {
    sink: Option<String>,
}

async fn dlq_list(
    State(st): State<AppState>,
    Query(q): Query<DlqQuery>,
) -> Result<Json<Vec<DlqEntry>>, ApiError> {
    let list = st
        .store
        .dlq_list(q.sink.as_deref())
        .await
        .map_err(internal)?;
    Ok(Json(list.into_iter().map(DlqEntry::from).collect()))
}

/// The body of `POST /dlq/replay`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct ReplayRequest {
    #[serde(default)]
    pub ids: Vec<String>,
    #[serde(default)]
    pub all: bool,
    #[serde(default)]
    pub sink: Option<String>,
}

async fn dlq_replay(
    State(st): State<AppState>,
    Json(req): Json<ReplayRequest>,
) -> Result<Json<crate::relay::ReplayReport>, ApiError> {
    let Some(relays) = st.relays else {
        return Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            "no event relays run in this process; nothing can re-deliver".into(),
        ));
    };
    // Exactly one of the two: ids, or all.
    let has_ids = !req.ids.is_empty();
    if req.all == has_ids {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            "give either \"ids\": [..] or \"all\": true".into(),
        ));
    }
    let ids = (!req.all).then_some(req.ids.as_slice());
    let report = relays
        .replay(req.sink.as_deref(), ids)
        .await
        .map_err(internal)?;
    Ok(Json(report))
}
