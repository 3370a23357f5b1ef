//! The turn pipeline, top to bottom, in one place (docs/architecture.md,
//! "One request's path").
//!
//! [`handle`] is the whole turn of a parsed [`ChatCall`]: agent gate → idempotency →
//! guard → plan targets → compaction → budget → attempt loop (with one
//! compact-and-retry on a context overflow) → relay (stream) or render
//! (complete) → evidence → journal, guard and spend accounting. Each step is a call into a module that owns it; this
//! file only orders them, so the flow of a request reads top to bottom.

use crate::Gateway;
use crate::agents;
use crate::compaction;
use crate::emit::wall_ms;
use crate::error::HaleError;
use crate::guard;
use crate::idempotency::{IdemGuard, IdemStart};
use crate::relay;
use crate::turn::{self, Served, Turn};
use crate::wire::{self, Encoder};
use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use hale_core::class::ErrorClass;
use hale_core::config::{DEFAULT_AGENT, JournalBodies, JournalDurability};
use hale_core::event::EventKind;
use hale_core::select;
use hale_proto::{self as proto, ChatRequest, Dialect};
use hale_store::{CountWrite, StoredResponse, TurnRecord, TurnStatus, Write};
use std::sync::Arc;
use tracing::Instrument;

/// Header naming the agent.
pub const AGENT_HEADER: &str = "x-hale-agent";
/// Header naming the task.
pub const TASK_HEADER: &str = "x-hale-task";
/// Marks an answer served again for a repeated `Idempotency-Key`.
pub const IDEMPOTENT_REPLAY_HEADER: &str = "x-hale-idempotent-replay";
/// Size of the channel between the relay and the response body, in SSE frames.
const STREAM_CHANNEL: usize = 64;

// The headers a turn reads and sets, named once: a `&str` name is parsed
// again at every lookup or insert (~300 instructions each, callgrind).
static AGENT: HeaderName = HeaderName::from_static(AGENT_HEADER);
static TASK: HeaderName = HeaderName::from_static(TASK_HEADER);
static IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
static TURN_ID: HeaderName = HeaderName::from_static("x-hale-turn-id");
static PROVIDER: HeaderName = HeaderName::from_static("x-hale-provider");
static MODEL: HeaderName = HeaderName::from_static("x-hale-model");
static ATTEMPTS: HeaderName = HeaderName::from_static("x-hale-attempts");
static DEGRADED: HeaderName = HeaderName::from_static("x-hale-degraded");
static COMPACTED: HeaderName = HeaderName::from_static("x-hale-compacted");
static HEDGED: HeaderName = HeaderName::from_static("x-hale-hedged");

/// Who is calling, after auth.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The key's default agent, if it has one.
    pub default_agent: Option<String>,
    /// Agents this caller may act as; `None` = any.
    pub agents: Option<Vec<String>>,
}

/// One chat call, parsed from its wire dialect by the HTTP handler that
/// received it: what the turn needs of a request in any dialect.
pub struct ChatCall {
    /// The caller's dialect: the answer and its errors are in it.
    pub dialect: Dialect,
    pub caller: Caller,
    pub headers: HeaderMap,
    /// The body as sent: its hash keys the journal and the idempotency key.
    pub body: Bytes,
    /// The canonical request; it keeps the client's JSON and provider-feature
    /// headers (same-dialect fidelity).
    pub req: ChatRequest,
    /// How a streamed answer is written (SSE, but for a Gemini caller that
    /// asked for Google's JSON-array stream).
    pub framing: wire::Framing,
}

/// Who a model-route request acts as: its agent and task headers, read
/// against the caller's key ([`identify`]).
pub struct Identity {
    /// `X-Hale-Agent`, else the key's default agent, else `default`.
    pub agent: String,
    /// The agent was named (the header or a key's default): only a named
    /// agent is ever paused.
    pub named: bool,
    /// `X-Hale-Task`, when sent.
    pub task: Option<String>,
}

/// The agent gate every model route shares (the turn, and routes that call
/// no provider, such as Gemini's `countTokens`): a bad `X-Hale-Agent` or
/// `X-Hale-Task` is a 400, an agent the caller's key may not act as a 403.
pub fn identify(caller: &Caller, headers: &HeaderMap) -> Result<Identity, HaleError> {
    let named_agent = label_header(headers, &AGENT)?.or(caller.default_agent.clone());
    let task = label_header(headers, &TASK)?;
    let named = named_agent.is_some();
    let agent = named_agent.unwrap_or_else(|| DEFAULT_AGENT.to_owned());
    if let Some(allowed) = &caller.agents
        && !allowed.iter().any(|a| a == &agent)
    {
        return Err(HaleError::forbidden(format!(
            "this key may not act as agent {agent}"
        )));
    }
    Ok(Identity { agent, named, task })
}

/// One chat call, in any dialect: the whole turn, as the steps of
/// docs/architecture.md, "One request's path" (3 to 11; 1 and 2 are the
/// handler's).
pub async fn handle(gw: Arc<Gateway>, call: ChatCall) -> Response {
    let ChatCall {
        dialect,
        caller,
        headers,
        body,
        req,
        framing,
    } = call;
    // 3. Agent gate.
    let (gate, mut req) = match agent_gate(&gw, &caller, &headers, req).await {
        Ok(g) => g,
        Err(e) => return e.into_response(dialect),
    };
    // 4. Idempotency (and a recovered task's replay).
    let keys = match idempotency(&gw, &gate, &headers, &body, dialect).await {
        Ok(keys) => keys,
        Err(resp) => return resp,
    };
    // 5. Guard: the task's limits; a hit is final.
    if let Err(e) = gw.tasks.check_request(&gate.agent, &gate.task, &req) {
        return e.into_response(dialect);
    }
    // 6. Plan targets.
    let mut turn = match plan_targets(&gw, gate, &req) {
        Ok(t) => t,
        Err(e) => return e.into_response(dialect),
    };
    gw.metrics.turn_started();
    // One span per turn (the attempts are its children), exported over OTLP
    // when `telemetry.otlp_endpoint` is set.
    let span = tracing::info_span!(
        "turn",
        turn_id = %turn.id,
        agent = %keys.agent,
        task = %keys.task,
        model = %req.model,
        outcome = tracing::field::Empty,
    );
    // 7. Compaction, the pending nudge, then the budget.
    compaction(&gw, &mut turn, &mut req, (&keys.agent, &keys.task), &span).await;
    if let Err(e) = gw
        .tasks
        .check_budget(&keys.agent, &keys.task, || gw.agents.record(&keys.agent))
    {
        return e.into_response(dialect);
    }
    // 8. Attempt loop.
    let result = attempt_loop(&gw, &mut turn, &mut req, &span).await;
    span.record(
        "outcome",
        match &result {
            Ok(_) => "served",
            Err(f) => f.class.as_str(),
        },
    );
    // 9-11. Relay or render, evidence, accounting and the journal.
    match result {
        Err(f) => answer_failed(&gw, &turn, &req, keys, &f, dialect).await,
        Ok((served, Served::Complete(reply))) => {
            answer_complete(&gw, &turn, &req, keys, (served, reply), dialect).await
        }
        Ok((served, Served::Stream(live))) => {
            let enc =
                Encoder::new(dialect, &turn.id, &turn.targets[served].model, &req).framed(framing);
            answer_stream(gw, turn, req, keys, (served, live), enc)
        }
    }
}

/// Who the turn is for, once through the agent gate (step 3).
struct Gate {
    agent: String,
    /// The agent was named: only a named agent is ever paused.
    named: bool,
    task: String,
    admission: agents::Admission,
    /// Keeps the agent in memory until the turn ends.
    hold: agents::TurnHold,
    continuation: Option<crate::responses::Continuation>,
}

/// Step 3, the agent gate: who is calling as which agent on which task; a
/// paused agent is refused here, and a turn waits while the journal's
/// backlog is full.
async fn agent_gate(
    gw: &Gateway,
    caller: &Caller,
    headers: &HeaderMap,
    req: ChatRequest,
) -> Result<(Gate, ChatRequest), HaleError> {
    // Traffic with no identity (no header, no key default) belongs to no
    // agent loop and is never paused.
    let Identity {
        agent,
        named,
        task: explicit_task,
    } = identify(caller, headers)?;
    // A Responses conversation continued by `previous_response_id` is read
    // back first: the task is its root's, and compaction and budgets see
    // the whole conversation (crate::responses).
    let (req, continuation) =
        crate::responses::prepare(&gw.store, caller.agents.as_deref(), req).await?;
    // The task: X-Hale-Task, else the conversation's root.
    let task = conversation_task(explicit_task.as_deref(), &req);
    // An agent forgotten while idle is read back first (its counters, its pause).
    gw.load_agent(&agent).await;
    // From here until the turn ends, the agent stays in memory.
    let hold = gw.hold_turn(&agent);
    let admission = gw.agents.admit(&agent, wall_ms())?;
    gw.health.before_turn(&agent, &task)?;
    wait_for_journal_room(gw).await;
    let gate = Gate {
        agent,
        named,
        task,
        admission,
        hold,
        continuation,
    };
    Ok((gate, req))
}

/// The journal's backlog is held in memory: when the store's writer has
/// fallen behind, a new turn waits for it (bounded; hale_core::memory).
async fn wait_for_journal_room(gw: &Gateway) {
    match gw
        .store
        .room(
            hale_core::memory::journal_backlog_max(gw.cfg.events.batch_max),
            hale_core::memory::JOURNAL_BACKLOG_MAX_WAIT,
        )
        .await
    {
        hale_store::Room::Free => {}
        hale_store::Room::Waited => {
            gw.metrics.journal_waits.inc();
        }
        hale_store::Room::TimedOut => {
            gw.metrics.journal_wait_timeouts.inc();
        }
        hale_store::Room::Stuck => {
            gw.metrics.journal_writer_stuck.inc();
        }
    }
}

/// Who a turn's answer is recorded for, and the keys it is kept under
/// (step 4): the body's hash, and the agent's `Idempotency-Key` with its
/// in-flight guard, released once the answer is committed.
struct Keys {
    agent: String,
    task: String,
    request_hash: String,
    idem_key: Option<String>,
    /// Held, never read: dropping it lets a waiting duplicate go.
    _idem_guard: Option<IdemGuard>,
}

/// Step 4, idempotency: a key seen before with this body returns the stored
/// response (with another body: 422); a concurrent duplicate waits. Then a
/// recovered task's request that already completed is answered from the
/// journal. `Err` is the answer to send.
async fn idempotency(
    gw: &Gateway,
    gate: &Gate,
    headers: &HeaderMap,
    body: &[u8],
    dialect: Dialect,
) -> Result<Keys, Response> {
    let (agent, task) = (&gate.agent, &gate.task);
    let request_hash = request_hash(body);
    let idem_key = header(headers, &IDEMPOTENCY_KEY).map(|k| format!("{agent}\u{1f}{k}"));
    let idem_guard = match &idem_key {
        None => None,
        Some(key) => match gw.idempotency.begin(key, &request_hash).await {
            IdemStart::Stored(resp) => return Err(stored_response(resp, IDEMPOTENT_REPLAY_HEADER)),
            IdemStart::Reused => {
                return Err(HaleError::idempotency_key_reused().into_response(dialect));
            }
            IdemStart::Fresh(guard) => Some(guard),
            IdemStart::Unknown(e) => {
                return Err(HaleError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    format!("cannot check the Idempotency-Key, so the call was not made: {e}"),
                )
                .into_response(dialect));
            }
        },
    };
    let keys = Keys {
        agent: agent.clone(),
        task: task.clone(),
        request_hash,
        idem_key,
        _idem_guard: idem_guard,
    };
    // Replay: a recovered task's request that already completed is answered from the journal.
    if let Some(stored) = gw.health.replay(agent, task, &keys.request_hash).await {
        return Err(stored_response(stored, crate::health::REPLAYED_HEADER));
    }
    Ok(keys)
}

/// Step 6, plan targets: the turn over the deployments the config's routes
/// and the agent's chain give; a model no target's URL can name, or a
/// `previous_response_id` no target can hold, is refused before any call.
fn plan_targets(gw: &Gateway, gate: Gate, req: &ChatRequest) -> Result<Turn, HaleError> {
    let ranks = select::plan_ranks(&gw.cfg, &gate.agent, &req.model)
        .map_err(|e| HaleError::bad_request(e.to_string()))?;
    // A route's load-balanced group: the faster of two random members first.
    let targets = gw
        .deployments
        .balance(ranks, std::time::Instant::now(), &mut rand::rng());
    // A model a target's URL would name must be one path segment there
    // (hale_core::segment): refused before any provider is called.
    if let Some(why) = targets.iter().find_map(|t| {
        gw.cfg
            .provider(&t.provider)
            .and_then(|p| crate::upstream::model_refused(p, &t.model))
    }) {
        return Err(HaleError::bad_request(why));
    }
    let turn_id = ulid::Ulid::from_parts(wall_ms(), rand::random::<u128>()).to_string();
    let mut turn = Turn::new(&gw.cfg, turn_id, gate.agent, Some(gate.task), targets);
    turn.named = gate.named;
    turn.admission = gate.admission;
    turn.hold = Some(gate.hold);
    turn.responses = gate.continuation;
    // A previous_response_id no deployment of the plan can hold is OpenAI's 404.
    if !turn.leave_out_unheld(&gw.cfg) {
        let id = turn
            .responses
            .as_ref()
            .and_then(|c| c.previous.clone())
            .unwrap_or_default();
        return Err(crate::responses::previous_not_found(&id));
    }
    Ok(turn)
}

/// Step 7, compaction against the first target's window; then a pending
/// nudge goes last, so it is never compacted away.
async fn compaction(
    gw: &Gateway,
    turn: &mut Turn,
    req: &mut ChatRequest,
    (agent, task): (&str, &str),
    span: &tracing::Span,
) {
    let first = turn.targets[0].clone();
    let window = compaction::window_of(gw.cfg.provider(&first.provider), &first.model);
    if let Some(c) = gw
        .compaction
        .compact(gw.env(), turn, req, &first.model, window, false)
        .instrument(span.clone())
        .await
    {
        turn.compacted |= c.tier != hale_core::compaction::Tier::None || c.reused;
        gw.compaction.emit(turn, &c);
    }
    // Health: a pending nudge goes last, after compaction, so it is never compacted away.
    let nudged = match gw.health.take_nudge(agent, task) {
        Some(nudge) => {
            req.messages
                .push(proto::Message::text(proto::Role::System, nudge));
            true
        }
        None => false,
    };
    // The conversation hale will send is no longer the client's: the
    // deployment holding a previous response gets it expanded too.
    if let Some(c) = turn.responses.as_mut() {
        c.changed = turn.compacted || nudged;
    }
}

/// Step 8, the attempt loop (`turn::run`); a context overflow is compacted
/// and retried once ([`retry_after_overflow`]).
async fn attempt_loop(
    gw: &Gateway,
    turn: &mut Turn,
    req: &mut ChatRequest,
    span: &tracing::Span,
) -> Result<(usize, Served), crate::upstream::Failure> {
    turn.compact_on_overflow = true;
    let mut result = turn::run(gw.env(), turn, req, None, None)
        .instrument(span.clone())
        .await;
    if let Err(f) = &result
        && f.class == ErrorClass::ContextOverflow
        && let Some(idx) = turn.overflow_at.take()
    {
        turn.compact_on_overflow = false;
        if retry_after_overflow(gw, turn, req, idx)
            .instrument(span.clone())
            .await
        {
            result = turn::run(gw.env(), turn, req, None, None)
                .instrument(span.clone())
                .await;
        }
    }
    result
}

/// A failed turn (steps 10 and 11): journalled, then the caller's error in
/// its dialect.
async fn answer_failed(
    gw: &Gateway,
    turn: &Turn,
    req: &ChatRequest,
    keys: Keys,
    f: &crate::upstream::Failure,
    dialect: Dialect,
) -> Response {
    // The attempts' messages were masked as they came (upstream.rs);
    // what the caller is told goes through the redactor again.
    let mut err = turn.error(f);
    gw.emitter.secrets.mask_string(&mut err.message);
    gw.emitter.secrets.mask_json(&mut err.hale);
    let pending = finish_turn(gw, turn, req, &keys.request_hash, None, Some(f), None);
    durable(gw, pending).await;
    let resp = err.into_response(dialect);
    drop(keys);
    resp
}

/// A complete answer (steps 9 to 11): rendered in the caller's dialect (or
/// the provider's own bytes), with its evidence; journalled, kept under its
/// idempotency key, and released once committed.
async fn answer_complete(
    gw: &Gateway,
    turn: &Turn,
    req: &ChatRequest,
    keys: Keys,
    (served, mut reply): (usize, crate::upstream::Reply),
    dialect: Dialect,
) -> Response {
    let target = turn.targets[served].clone();
    let body: Bytes = match reply.body_for(dialect) {
        Some(own) => own.clone(),
        None => {
            let answer = &mut reply.answer;
            if answer.model.is_empty() {
                answer.model = target.model.clone();
            }
            let rendered = wire::render_answer(dialect, answer, req);
            serde_json::to_vec(&rendered).unwrap_or_default().into()
        }
    };
    let answer = reply.answer;
    let mut resp = Response::new(Body::from(body.clone()));
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    evidence(&mut resp, turn, served, &answer.model);
    let stored = StoredResponse {
        status: 200,
        headers: evidence_pairs(&resp),
        body: body.to_vec(),
        content_type: "application/json".into(),
    };
    gw.tasks
        .record_response(&keys.agent, &keys.task, &guard::tool_calls(&answer.content));
    // A second copy only for an idempotency key: cloning the answer
    // for every turn was ~15 allocations per turn.
    let for_key = keys.idem_key.as_ref().map(|_| stored.clone());
    let pending = finish_turn(
        gw,
        turn,
        req,
        &keys.request_hash,
        Some(served),
        None,
        Some((stored, answer.usage)),
    );
    if let (Some(key), Some(stored)) = (&keys.idem_key, for_key) {
        keep_idempotent_answer(gw, key, &keys.request_hash, stored).await;
    }
    // Released once the turn is committed (journal.durability).
    durable(gw, pending).await;
    drop(keys);
    resp
}

/// Stores a complete answer under its idempotency key.
async fn keep_idempotent_answer(
    gw: &Gateway,
    key: &str,
    request_hash: &str,
    stored: StoredResponse,
) {
    let write = vec![Write::Idempotency {
        key: key.to_owned(),
        request_hash: request_hash.to_owned(),
        response: stored,
    }];
    match gw.store.backend() {
        // Another instance has no in-flight entry for this key:
        // the answer is stored before the client can repeat the
        // request there (docs/operations.md, "Scale-out on
        // PostgreSQL").
        hale_store::Backend::Postgres => {
            if let Err(e) = gw.store.commit(write).await {
                tracing::warn!(error = %e, "storing an idempotent answer failed");
            }
        }
        // One instance: its in-flight map covers the commit.
        hale_store::Backend::Sqlite => gw.store.submit(write),
    }
}

/// A streamed answer (steps 9 to 11): the response goes at once with its
/// evidence, and a task relays the stream into it, then journals the turn
/// and sends the closing frame once it is committed.
fn answer_stream(
    gw: Arc<Gateway>,
    mut turn: Turn,
    req: ChatRequest,
    keys: Keys,
    (served, live): (usize, turn::Live),
    enc: Encoder,
) -> Response {
    let target = turn.targets[served].clone();
    let (tx, rx) = tokio::sync::mpsc::channel(STREAM_CHANNEL);
    let content_type = enc.content_type();
    let mut resp = Response::new(Body::from_stream(tokio_stream_from(rx)));
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    evidence(&mut resp, &turn, served, &target.model);
    let pairs = evidence_pairs(&resp);
    tokio::spawn(async move {
        let mut r = relay::relay(gw.env(), &mut turn, &req, served, live, enc, tx).await;
        gw.metrics.stream_resumed(r.resumes);
        gw.tasks
            .record_response(&keys.agent, &keys.task, &r.tool_calls);
        if let Some(c) = turn.responses.as_mut() {
            // A resumed stream is no one provider's response.
            c.upstream_id = if r.resumes == 0 {
                r.upstream_id.take()
            } else {
                None
            };
        }
        let stored = StoredResponse {
            status: 200,
            headers: pairs,
            body: std::mem::take(&mut r.body),
            content_type: content_type.into(),
        };
        let for_key = (r.failure.is_none() && keys.idem_key.is_some()).then(|| stored.clone());
        let pending = finish_turn(
            &gw,
            &turn,
            &req,
            &keys.request_hash,
            Some(r.served),
            r.failure.as_ref(),
            Some((stored, r.usage)),
        );
        if let (Some(key), Some(stored)) = (&keys.idem_key, for_key) {
            gw.store.submit(vec![Write::Idempotency {
                key: key.clone(),
                request_hash: keys.request_hash.clone(),
                response: stored,
            }]);
        }
        // The closing frame goes once the turn is committed.
        durable(&gw, pending).await;
        r.tail.send().await;
        drop(keys);
    });
    resp
}

/// After a `context_overflow` at target `idx`: compact below what was sent and
/// try again; when that did not make the request smaller, leave that target
/// and every later one known to have a smaller window. Returns whether there
/// is anything left to try.
async fn retry_after_overflow(
    gw: &Gateway,
    turn: &mut Turn,
    req: &mut ChatRequest,
    idx: usize,
) -> bool {
    let t = turn.targets[idx].clone();
    let provider = gw.cfg.provider(&t.provider);
    let window = compaction::window_of(provider, &t.model);
    if let Some(c) = gw
        .compaction
        .compact(gw.env(), turn, req, &t.model, window, true)
        .await
        && c.after_tokens < c.before_tokens
    {
        turn.compacted = true;
        if let Some(r) = turn.responses.as_mut() {
            r.changed = true;
        }
        gw.compaction.emit(turn, &c);
        return true;
    }
    turn.exhausted[idx] = true;
    gw.health.set_context_exhausted(&turn.agent, true);
    let windows: Vec<Option<u32>> = turn
        .targets
        .iter()
        .map(|tj| {
            let pj = gw.cfg.provider(&tj.provider);
            compaction::window_known(pj, &tj.model).then(|| compaction::window_of(pj, &tj.model))
        })
        .collect();
    for (j, smaller) in select::known_smaller_windows(&windows, window)
        .into_iter()
        .enumerate()
    {
        turn.exhausted[j] |= smaller;
    }
    turn.exhausted.iter().any(|e| !e)
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::convert::Infallible>>,
) -> impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// The guard's task of a request: `X-Hale-Task`, else its conversation root
/// (the system prompt and the first user message; `hale_core::guard::task_of`).
fn conversation_task(explicit: Option<&str>, req: &ChatRequest) -> String {
    if explicit.is_some() {
        // Named by the header: the conversation's text is not read (nor copied).
        return hale_core::guard::task_of(explicit, "", "");
    }
    let first_user = req
        .messages
        .iter()
        .find(|m| m.role == proto::Role::User)
        .map(proto::Message::joined_text)
        .unwrap_or_default();
    hale_core::guard::task_of(explicit, req.system.as_deref().unwrap_or(""), &first_user)
}

fn header(h: &HeaderMap, name: &HeaderName) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// An agent or task name header: absent or blank is `None`; one that is not
/// UTF-8, longer than `hale_core::ids::MAX_LABEL_BYTES` or holds a control
/// character is a 400 naming the header.
fn label_header(h: &HeaderMap, name: &HeaderName) -> Result<Option<String>, HaleError> {
    let Some(v) = h.get(name) else {
        return Ok(None);
    };
    let s = std::str::from_utf8(v.as_bytes())
        .map_err(|_| HaleError::bad_header(name.as_str(), "is not UTF-8"))?;
    // Checked before trimming: `str::trim` would drop a trailing U+0085.
    hale_core::ids::valid_label(s).map_err(|e| HaleError::bad_header(name.as_str(), e))?;
    let s = s.trim_matches(' ');
    Ok((!s.is_empty()).then(|| s.to_owned()))
}

/// Sets the evidence headers (`x-hale-*`; docs/http-api.md, "Model calls").
fn evidence(resp: &mut Response, turn: &Turn, served: usize, model: &str) {
    let h = resp.headers_mut();
    let t = &turn.targets[served];
    let set = |h: &mut HeaderMap, k: &HeaderName, v: &str| {
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(k.clone(), v);
        }
    };
    let flag = |on: bool| HeaderValue::from_static(if on { "true" } else { "false" });
    set(h, &TURN_ID, &turn.id);
    set(h, &PROVIDER, &t.provider);
    set(h, &MODEL, model);
    h.insert(ATTEMPTS.clone(), HeaderValue::from(turn.timeline.len()));
    h.insert(DEGRADED.clone(), flag(turn.degraded(served)));
    h.insert(COMPACTED.clone(), flag(turn.compacted));
    h.insert(HEDGED.clone(), flag(!turn.hedge_losses.is_empty()));
}

fn evidence_pairs(resp: &Response) -> Vec<(String, String)> {
    resp.headers()
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("x-hale-"))
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect()
}

/// The hash a turn is journalled under; replay finds a completed turn by it:
/// the SHA-256 of the body in lowercase hex.
///
/// Hashed by ring (already hale's crypto library, through rustls): its
/// assembly picks the CPU's SHA extensions when it has them, as sha2 does,
/// and its SSSE3/AVX code when it has not, where sha2 falls back to plain
/// Rust (callgrind, which hides the SHA extensions, counted ~62k
/// instructions per 1 kB body for sha2). The hex is written into a buffer:
/// `hex::encode` collects its 64 digits one `char` at a time (~2.2k
/// instructions under callgrind, against ~0.3k).
pub(crate) fn request_hash(body: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, body);
    let mut hex = [0u8; 64];
    // 32 bytes of digest fill the 64 digits exactly: this cannot fail.
    let _ = hex::encode_to_slice(digest.as_ref(), &mut hex);
    String::from_utf8_lossy(&hex).into_owned()
}

/// A journalled response served again, marked with `marker: true`
/// (`x-hale-idempotent-replay` or `x-hale-replayed`).
pub(crate) fn stored_response(s: StoredResponse, marker: &'static str) -> Response {
    let mut resp = Response::new(Body::from(s.body));
    *resp.status_mut() = StatusCode::from_u16(s.status).unwrap_or(StatusCode::OK);
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&s.content_type) {
        h.insert(CONTENT_TYPE, v);
    }
    for (k, v) in s.headers {
        if let (Ok(k), Ok(v)) = (
            axum::http::HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(&v),
        ) {
            h.insert(k, v);
        }
    }
    h.insert(marker, HeaderValue::from_static("true"));
    resp
}

/// Whether the journal keeps this successful turn's response body
/// (`journal.bodies`, hale-core [`JournalBodies::keeps`]).
fn keeps_body(gw: &Gateway, turn: &Turn) -> bool {
    let mode = gw.cfg.journal.bodies;
    // The task lookup takes a lock: only `needed` asks it.
    let may_recover = mode == JournalBodies::Needed
        && turn
            .task
            .as_deref()
            .is_some_and(|task| gw.health.may_recover(&turn.agent, task));
    mode.keeps(may_recover)
}

/// Waits for a finished turn's commit before its answer is released
/// (`journal.durability: durable`; `pending` is `None` when relaxed): as
/// long as `hale_core::memory::durable_release` says, then the answer goes
/// all the same — the provider was paid for it — counted in a metric.
async fn durable(gw: &Gateway, pending: Option<hale_store::Committing>) {
    use hale_core::memory::{
        DURABLE_ANSWER_MAX_WAIT, JOURNAL_BACKLOG_MAX_WAIT, Release, durable_release,
    };
    let Some(mut pending) = pending else { return };
    let t0 = tokio::time::Instant::now();
    loop {
        let next = durable_release(
            t0.elapsed(),
            gw.store.since_last_batch(),
            JOURNAL_BACKLOG_MAX_WAIT,
            DURABLE_ANSWER_MAX_WAIT,
        );
        let wait = match next {
            Release::Wait(d) => d,
            Release::Stuck => {
                gw.metrics.answers_uncommitted_stuck.inc();
                return;
            }
            Release::TimedOut => {
                gw.metrics.answers_uncommitted_timeout.inc();
                return;
            }
        };
        match tokio::time::timeout(wait, pending.committed()).await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "a turn's commit failed; its answer goes uncommitted");
                gw.metrics.answers_uncommitted_failed.inc();
                return;
            }
            Err(_) => {}
        }
    }
}

/// The turn's timeline as journalled, masked of every secret hale holds
/// (`crate::secrets`); a turn whose attempts carry no message has nothing
/// to mask.
fn journal_rows(gw: &Gateway, turn: &Turn) -> String {
    let mut rows = turn.journal_rows();
    if turn.timeline.iter().any(|a| a.message.is_some()) {
        gw.emitter.secrets.mask_string(&mut rows);
    }
    rows
}

/// Journals the turn and updates the agent's gate state. With
/// `journal.durability: durable` the writes are queued with a handle to wait
/// for their commit ([`durable`]); relaxed, they are submitted (`None`).
fn finish_turn(
    gw: &Gateway,
    turn: &Turn,
    req: &ChatRequest,
    request_hash: &str,
    served: Option<usize>,
    failure: Option<&crate::upstream::Failure>,
    answer: Option<(StoredResponse, proto::Usage)>,
) -> Option<hale_store::Committing> {
    let now_ms = wall_ms();
    let ok = failure.is_none();
    let usage = answer.as_ref().map(|(_, u)| *u).unwrap_or_default();
    let target = served.map(|i| turn.targets[i].clone());
    let (cost, task_n) = match (&target, &turn.task) {
        (Some(t), Some(task)) => {
            // A hedge's cancelled loser is charged with the winner.
            let losses: Vec<(&str, proto::Usage)> = turn
                .hedge_losses
                .iter()
                .map(|l| {
                    let usage = proto::Usage {
                        input_tokens: l.input_tokens,
                        ..proto::Usage::default()
                    };
                    (l.target.model.as_str(), usage)
                })
                .collect();
            let (cost, count) = gw
                .tasks
                .record_spend(&turn.agent, task, &t.model, usage, &losses);
            (cost, Some(count))
        }
        (None, Some(task)) => {
            gw.tasks.turn_ended(&turn.agent, task);
            (0.0, None)
        }
        (Some(_), None) | (None, None) => (0.0, None),
    };
    // A Responses answer is kept for previous_response_id and GET (unless `store: false`).
    let kept = match (&turn.responses, &target, &answer) {
        (Some(c), Some(t), Some((stored, _))) if ok => crate::responses::record(
            c,
            &crate::responses::Served {
                turn_id: &turn.id,
                agent: &turn.agent,
                provider: &t.provider,
                model: &t.model,
                responses: gw
                    .cfg
                    .provider(&t.provider)
                    .is_some_and(|p| crate::upstream::dialect_of(p) == Dialect::Responses),
                now_ms,
            },
            stored,
        ),
        (Some(_) | None, _, _) => None,
    };
    let record = TurnRecord {
        id: turn.id.clone(),
        agent: turn.agent.clone(),
        task: turn.task.clone(),
        request_hash: request_hash.to_owned(),
        model_requested: req.model.clone(),
        status: if ok {
            TurnStatus::Succeeded
        } else {
            TurnStatus::Failed
        },
        started_ms: turn.started_ms,
        duration_ms: Some(now_ms.saturating_sub(turn.started_ms)),
        provider: target.as_ref().map(|t| t.provider.clone()),
        model: target.as_ref().map(|t| t.model.clone()),
        attempts: journal_rows(gw, turn),
        usage_in: usage.input_tokens,
        usage_out: usage.output_tokens,
        error_class: failure.map(|f| f.class.as_str().to_owned()),
        response: if ok && keeps_body(gw, turn) {
            answer.map(|(s, _)| s)
        } else {
            None
        },
    };
    gw.metrics.turn_finished(ok, turn.started.elapsed());
    let mut writes = vec![Write::Turn(record)];
    writes.extend(kept.map(Write::Response));
    // Content-policy and bad-request failures are the caller's input, not the agent failing.
    let counts = failure.is_some_and(|f| f.class.counts_as_turn_failure());
    let tokens = usage.input_tokens + usage.output_tokens;
    gw.health.after_turn(
        &turn.agent,
        turn.task.as_deref(),
        crate::health::fingerprint(req),
        counts,
        tokens,
    );
    let outcome = if ok {
        agents::Outcome::Succeeded
    } else if counts {
        agents::Outcome::Failed
    } else {
        agents::Outcome::CallerFault
    };
    if ok && turn.compacted {
        gw.health.set_context_exhausted(&turn.agent, false);
    }
    let finished = agents::Finished {
        agent: &turn.agent,
        turn_id: &turn.id,
        named: turn.named,
        admission: turn.admission,
        outcome,
        now_ms,
        tokens_in: usage.input_tokens,
        tokens_out: usage.output_tokens,
        cost_usd: cost,
    };
    let after = gw.agents.after_turn(finished);
    let rec = after.record;
    // The count first: it creates the agent's row when new, so a whole
    // record written behind it never carries counters of its own.
    let (n, count) = after.count;
    writes.push(Write::Count(CountWrite {
        agent: turn.agent.clone(),
        n,
        count,
        task: task_n,
        now_ms,
    }));
    if let Some(t) = &target
        && served != Some(0)
        && ok
    {
        gw.emit(
            gw.event(EventKind::AgentFallbackUsed)
                .agent(&turn.agent)
                .turn(&turn.id)
                .payload(serde_json::json!({"served_by": t.to_string(), "first_choice": turn.targets[0].to_string()})),
        );
    }
    if let Some(f) = failure {
        let ev = gw
            .event(EventKind::AgentFailed)
            .agent(&turn.agent)
            .turn(&turn.id)
            .payload(serde_json::json!({"class": f.class, "message": gw.emitter.secrets.mask(&f.message), "consecutive_failures": rec.consecutive_failures}));
        gw.metrics.event(ev.kind);
        writes.push(Write::Event(ev));
    }
    // The record's control state changed only when the gate did (a pause
    // or a trial's resume); the counters went with the count.
    if !after.events.is_empty() {
        writes.push(Write::Agent(rec));
    }
    writes.extend(after.events.into_iter().map(Write::Event));
    writes.extend(after.announce);
    match gw.cfg.journal.durability {
        JournalDurability::Durable => Some(gw.store.queue(writes)),
        JournalDurability::Relaxed => {
            gw.store.submit(writes);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    /// The journal's key of a request is the SHA-256 of its body in
    /// lowercase hex, as sha2 and `hex::encode` wrote it (rows journalled
    /// before must still be found by replay and idempotency).
    #[test]
    fn the_request_hash_is_the_bodys_sha256_in_lowercase_hex() {
        let long: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for body in [
            &b""[..],
            b"{}",
            &[0xffu8; 1000][..],
            "é".as_bytes(),
            &long[..55],
            &long[..56],
            &long[..64],
            &long,
        ] {
            assert_eq!(request_hash(body), hex::encode(Sha256::digest(body)));
        }
        assert_eq!(
            request_hash(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
