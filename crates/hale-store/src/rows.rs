//! Records ⇄ rows.
//!
//! Encoding happens in the caller's task, before a write is queued: a value
//! that cannot be stored is refused to that caller alone, and the writer task
//! only binds ready values. Decoding goes through the small [`Cols`] trait,
//! implemented for the row type of each backend, so one decoder serves both;
//! any decode failure becomes [`StoreError::Corrupt`] naming the table and id.

use hale_core::counts::StreakChange;
use hale_core::event::Event;
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;

use crate::error::StoreError;
use crate::model::{
    AgentRecord, CheckpointRecord, DeadLetter, IdempotentResponse, ResponseRecord, StoredEvent,
    StoredResponse, TurnRecord, TurnStatus, Write,
};

/// A write, ready to bind.
#[derive(Debug)]
pub(crate) enum Encoded {
    Event(EventRow),
    Turn(Box<TurnRow>),
    Agent(AgentRow),
    Idempotency(IdemRow),
    Checkpoint(CheckpointRow),
    Job(JobRow),
    Audit(AuditRow),
    /// The JSON payload of a `NOTIFY hale_agents`.
    Announce(String),
    Count(CountRow),
    /// (agent, task) whose spend row is deleted.
    ForgetTask(String, String),
    Minutes(Vec<MinuteCols>),
    Response(Box<ResponseRow>),
}

/// A [`Write::Response`], ready to bind.
#[derive(Debug)]
pub(crate) struct ResponseRow {
    pub id: String,
    pub agent: String,
    pub turn_id: String,
    pub created_ms: i64,
    pub previous_id: Option<String>,
    pub provider: String,
    pub model: String,
    pub provider_id: Option<String>,
    pub input: String,
    pub response: String,
}

/// A [`Write::Count`], ready to bind.
#[derive(Debug, Clone)]
pub(crate) struct CountRow {
    pub agent: String,
    pub n: u64,
    /// What the count does to the failures in a row (a merged run's
    /// composed change, [`CountRow::then`]).
    pub streak: StreakChange,
    pub turns: i64,
    pub failed: i64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub cost_usd: f64,
    pub now_ms: i64,
    /// When the last of its turns was (none: an operator's clear alone).
    pub seen_ms: Option<i64>,
    /// When the last of its failed turns was.
    pub failure_ms: Option<i64>,
    /// (task, its number, events, tool calls).
    pub task: Option<(String, u64, i64, i64)>,
}

impl CountRow {
    /// The task this count adds to.
    pub fn task_name(&self) -> Option<&str> {
        self.task.as_ref().map(|(t, ..)| t.as_str())
    }

    /// This count, then `next` (of the same agent and task): one count with
    /// the effect of both, carrying `next`'s numbers, so its totals confirm
    /// both (a follower drops every delta up to the number it hears).
    pub fn then(&mut self, next: &CountRow) {
        self.n = next.n;
        self.streak = self.streak.then(next.streak);
        self.turns = self.turns.saturating_add(next.turns);
        self.failed = self.failed.saturating_add(next.failed);
        self.tokens_in = self.tokens_in.saturating_add(next.tokens_in);
        self.tokens_out = self.tokens_out.saturating_add(next.tokens_out);
        self.cost_usd += next.cost_usd;
        self.now_ms = next.now_ms;
        self.seen_ms = next.seen_ms.or(self.seen_ms);
        self.failure_ms = next.failure_ms.or(self.failure_ms);
        if let (Some((_, n, events, tool_calls)), Some((_, next_n, e, tc))) =
            (self.task.as_mut(), next.task.as_ref())
        {
            *n = *next_n;
            *events = events.saturating_add(*e);
            *tool_calls = tool_calls.saturating_add(*tc);
        }
    }
}

/// A `history_minutes` row.
#[derive(Debug)]
pub(crate) struct MinuteCols {
    pub deployment: String,
    pub minute_ms: i64,
    pub calls: i64,
    pub failures: i64,
    pub latency_sum_ms: i64,
}

#[derive(Debug)]
pub(crate) struct JobRow {
    pub job_id: String,
    pub status: String,
    pub next_attempt_ms: Option<i64>,
    pub updated_ms: i64,
    pub body: String,
}

#[derive(Debug)]
pub(crate) struct AuditRow {
    pub job_id: String,
    pub time_ms: i64,
    pub status: String,
    pub degraded: bool,
    pub body: String,
}

#[derive(Debug)]
pub(crate) struct EventRow {
    pub id: String,
    pub kind: &'static str,
    pub time_ms: i64,
    pub agent: Option<String>,
    pub body: String,
    /// A health-history transition (`hale_core::history::is_transition`):
    /// also kept in `history_transitions`, with its payload's deployment.
    pub history: Option<Option<String>>,
}

#[derive(Debug)]
pub(crate) struct RespCols {
    pub status: i64,
    pub headers: String,
    pub body: Vec<u8>,
    pub content_type: String,
}

#[derive(Debug)]
pub(crate) struct TurnRow {
    pub id: String,
    pub agent: String,
    pub task: Option<String>,
    pub request_hash: String,
    pub model_requested: String,
    pub status: &'static str,
    pub started_ms: i64,
    pub duration_ms: Option<i64>,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub attempts: String,
    pub usage_in: i64,
    pub usage_out: i64,
    pub error_class: Option<String>,
    pub response: Option<RespCols>,
}

#[derive(Debug)]
pub(crate) struct AgentRow {
    pub id: String,
    pub paused: bool,
    pub consecutive_failures: i64,
    pub turns: i64,
    pub failed_turns: i64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub cost_usd: f64,
    pub last_failure_ms: Option<i64>,
    pub last_seen_ms: Option<i64>,
    pub state: String,
}

#[derive(Debug)]
pub(crate) struct IdemRow {
    pub key: String,
    pub request_hash: String,
    pub resp: RespCols,
    pub created_ms: i64,
}

#[derive(Debug)]
pub(crate) struct CheckpointRow {
    pub agent: String,
    pub id: String,
    pub task: String,
    pub parent: Option<String>,
    pub body: Vec<u8>,
    pub sha256: String,
    pub created_ms: i64,
}

fn num(what: &str, field: &str, v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Invalid {
        what: what.to_string(),
        detail: format!("{field} = {v} exceeds the 64-bit signed range"),
    })
}

fn opt_num(what: &str, field: &str, v: Option<u64>) -> Result<Option<i64>, StoreError> {
    v.map(|v| num(what, field, v)).transpose()
}

fn json(what: &str, v: &impl serde::Serialize) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Invalid {
        what: what.to_string(),
        detail: e.to_string(),
    })
}

fn resp_cols(what: &str, r: &StoredResponse) -> Result<RespCols, StoreError> {
    Ok(RespCols {
        status: i64::from(r.status),
        headers: json(what, &r.headers)?,
        body: r.body.clone(),
        content_type: r.content_type.clone(),
    })
}

/// Encodes one write; `now_ms` stamps idempotency rows.
pub(crate) fn encode(w: Write, now_ms: u64) -> Result<Encoded, StoreError> {
    Ok(match w {
        Write::Event(e) => {
            let what = format!("event {}", e.id);
            Encoded::Event(EventRow {
                time_ms: num(&what, "time_ms", e.time_ms)?,
                kind: e.kind.as_str(),
                history: hale_core::history::is_transition(e.kind).then(|| {
                    e.payload
                        .get("deployment")
                        .and_then(serde_json::Value::as_str)
                        .map(str::to_owned)
                }),
                body: json(&what, &e)?,
                agent: e.agent,
                id: e.id,
            })
        }
        Write::Turn(t) => {
            let what = format!("turn {}", t.id);
            Encoded::Turn(Box::new(TurnRow {
                status: t.status.as_str(),
                started_ms: num(&what, "started_ms", t.started_ms)?,
                duration_ms: opt_num(&what, "duration_ms", t.duration_ms)?,
                attempts: t.attempts,
                usage_in: num(&what, "usage_in", t.usage_in)?,
                usage_out: num(&what, "usage_out", t.usage_out)?,
                response: t
                    .response
                    .as_ref()
                    .map(|r| resp_cols(&what, r))
                    .transpose()?,
                id: t.id,
                agent: t.agent,
                task: t.task,
                request_hash: t.request_hash,
                model_requested: t.model_requested,
                provider: t.provider,
                model: t.model,
                error_class: t.error_class,
            }))
        }
        Write::Agent(a) => {
            let what = format!("agent {}", a.id);
            Encoded::Agent(AgentRow {
                paused: a.paused,
                consecutive_failures: i64::from(a.consecutive_failures),
                turns: num(&what, "turns", a.turns)?,
                failed_turns: num(&what, "failed_turns", a.failed_turns)?,
                tokens_in: num(&what, "tokens_in", a.tokens_in)?,
                tokens_out: num(&what, "tokens_out", a.tokens_out)?,
                cost_usd: a.cost_usd,
                last_failure_ms: opt_num(&what, "last_failure_ms", a.last_failure_ms)?,
                last_seen_ms: opt_num(&what, "last_seen_ms", a.last_seen_ms)?,
                state: json(&what, &a.state)?,
                id: a.id,
            })
        }
        Write::Idempotency {
            key,
            request_hash,
            response,
        } => {
            let what = format!("idempotency key {key}");
            Encoded::Idempotency(IdemRow {
                request_hash,
                resp: resp_cols(&what, &response)?,
                created_ms: num(&what, "created_ms", now_ms)?,
                key,
            })
        }
        Write::Checkpoint(c) => {
            let what = format!("checkpoint {}", c.id);
            Encoded::Checkpoint(CheckpointRow {
                created_ms: num(&what, "created_ms", c.created_ms)?,
                agent: c.agent,
                id: c.id,
                task: c.task,
                parent: c.parent,
                body: c.body,
                sha256: c.sha256,
            })
        }
        Write::Job(j) => {
            let what = format!("job {}", j.job_id);
            Encoded::Job(JobRow {
                next_attempt_ms: opt_num(&what, "next_attempt_ms", j.next_attempt_ms)?,
                updated_ms: num(&what, "updated_ms", j.updated_ms)?,
                body: json(&what, &j.body)?,
                status: j.status,
                job_id: j.job_id,
            })
        }
        Write::Minutes(rows) => Encoded::Minutes(
            rows.into_iter()
                .map(|r| {
                    let what = format!("history minute {} of {}", r.minute_ms, r.deployment);
                    Ok(MinuteCols {
                        minute_ms: num(&what, "minute_ms", r.minute_ms)?,
                        calls: num(&what, "calls", r.calls)?,
                        failures: num(&what, "failures", r.failures)?,
                        latency_sum_ms: num(&what, "latency_sum_ms", r.latency_sum_ms)?,
                        deployment: r.deployment,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?,
        ),
        Write::Audit(a) => {
            let what = format!("audit of job {}", a.job_id);
            Encoded::Audit(AuditRow {
                time_ms: num(&what, "time_ms", a.time_ms)?,
                body: json(&what, &a.body)?,
                status: a.status,
                degraded: a.degraded,
                job_id: a.job_id,
            })
        }
        Write::Announce(c) => {
            let what = format!("announcement of agent {}", c.agent);
            Encoded::Announce(json(&what, &c)?)
        }
        Write::ForgetTask { agent, task } => Encoded::ForgetTask(agent, task),
        Write::Response(r) => {
            let what = format!("response {}", r.id);
            Encoded::Response(Box::new(ResponseRow {
                created_ms: num(&what, "created_ms", r.created_ms)?,
                input: json(&what, &r.input)?,
                response: json(&what, &r.response)?,
                id: r.id,
                agent: r.agent,
                turn_id: r.turn_id,
                previous_id: r.previous_id,
                provider: r.provider,
                model: r.model,
                provider_id: r.provider_id,
            }))
        }
        Write::Count(c) => {
            let what = format!("counts of agent {}", c.agent);
            let k = &c.count;
            let now_ms = num(&what, "now_ms", c.now_ms)?;
            Encoded::Count(CountRow {
                streak: StreakChange::of(k.streak),
                turns: num(&what, "turns", k.turns)?,
                failed: i64::from(k.failed()),
                tokens_in: num(&what, "tokens_in", k.tokens_in)?,
                tokens_out: num(&what, "tokens_out", k.tokens_out)?,
                cost_usd: if k.cost_usd.is_finite() {
                    k.cost_usd
                } else {
                    0.0
                },
                now_ms,
                seen_ms: (k.turns > 0).then_some(now_ms),
                failure_ms: k.failed().then_some(now_ms),
                task: c
                    .task
                    .map(|t| -> Result<_, StoreError> {
                        Ok((
                            t.n,
                            num(&what, "events", t.events)?,
                            num(&what, "tool_calls", t.tool_calls)?,
                            t.task,
                        ))
                    })
                    .transpose()?
                    .map(|(n, e, tc, task)| (task, n, e, tc)),
                agent: c.agent,
                n: c.n,
            })
        }
    })
}

/// Typed column access, one impl per backend row type.
pub(crate) trait Cols {
    fn i64(&self, c: &str) -> Result<i64, sqlx::Error>;
    fn opt_i64(&self, c: &str) -> Result<Option<i64>, sqlx::Error>;
    fn text(&self, c: &str) -> Result<String, sqlx::Error>;
    fn opt_text(&self, c: &str) -> Result<Option<String>, sqlx::Error>;
    fn blob(&self, c: &str) -> Result<Vec<u8>, sqlx::Error>;
    fn opt_blob(&self, c: &str) -> Result<Option<Vec<u8>>, sqlx::Error>;
    fn f64(&self, c: &str) -> Result<f64, sqlx::Error>;
    fn bool(&self, c: &str) -> Result<bool, sqlx::Error>;
}

macro_rules! impl_cols {
    ($row:ty) => {
        impl Cols for $row {
            fn i64(&self, c: &str) -> Result<i64, sqlx::Error> {
                self.try_get(c)
            }
            fn opt_i64(&self, c: &str) -> Result<Option<i64>, sqlx::Error> {
                self.try_get(c)
            }
            fn text(&self, c: &str) -> Result<String, sqlx::Error> {
                self.try_get(c)
            }
            fn opt_text(&self, c: &str) -> Result<Option<String>, sqlx::Error> {
                self.try_get(c)
            }
            fn blob(&self, c: &str) -> Result<Vec<u8>, sqlx::Error> {
                self.try_get(c)
            }
            fn opt_blob(&self, c: &str) -> Result<Option<Vec<u8>>, sqlx::Error> {
                self.try_get(c)
            }
            fn f64(&self, c: &str) -> Result<f64, sqlx::Error> {
                self.try_get(c)
            }
            fn bool(&self, c: &str) -> Result<bool, sqlx::Error> {
                self.try_get(c)
            }
        }
    };
}

impl_cols!(SqliteRow);
impl_cols!(PgRow);

/// A row that carries an agent's counters and, under `t_`-prefixed names,
/// a task's spend (SQLite's one read-back after a count,
/// `backend::COUNT_TOTALS`): [`decode_spend`] and [`decode_task_counted`]
/// read the task's columns by their own names through it.
pub(crate) struct TaskCols<'a, R>(pub &'a R);

impl<R: Cols> TaskCols<'_, R> {
    fn name(c: &str) -> &str {
        match c {
            "tokens" => "t_tokens",
            "cost_usd" => "t_cost_usd",
            "events" => "t_events",
            "tool_calls" => "t_tool_calls",
            other => other,
        }
    }
}

impl<R: Cols> Cols for TaskCols<'_, R> {
    fn i64(&self, c: &str) -> Result<i64, sqlx::Error> {
        self.0.i64(Self::name(c))
    }
    fn opt_i64(&self, c: &str) -> Result<Option<i64>, sqlx::Error> {
        self.0.opt_i64(Self::name(c))
    }
    fn text(&self, c: &str) -> Result<String, sqlx::Error> {
        self.0.text(Self::name(c))
    }
    fn opt_text(&self, c: &str) -> Result<Option<String>, sqlx::Error> {
        self.0.opt_text(Self::name(c))
    }
    fn blob(&self, c: &str) -> Result<Vec<u8>, sqlx::Error> {
        self.0.blob(Self::name(c))
    }
    fn opt_blob(&self, c: &str) -> Result<Option<Vec<u8>>, sqlx::Error> {
        self.0.opt_blob(Self::name(c))
    }
    fn f64(&self, c: &str) -> Result<f64, sqlx::Error> {
        self.0.f64(Self::name(c))
    }
    fn bool(&self, c: &str) -> Result<bool, sqlx::Error> {
        self.0.bool(Self::name(c))
    }
}

/// Builds the `Corrupt` error of one row.
struct Ctx {
    table: &'static str,
    id: String,
}

impl Ctx {
    fn new(table: &'static str, row: &impl Cols, id_col: &str) -> Self {
        let id = match row.i64(id_col) {
            Ok(n) => n.to_string(),
            Err(_) => row.text(id_col).unwrap_or_else(|_| "?".into()),
        };
        Ctx { table, id }
    }
    fn err(&self, detail: impl std::fmt::Display) -> StoreError {
        StoreError::Corrupt {
            table: self.table,
            id: self.id.clone(),
            detail: detail.to_string(),
        }
    }
    fn col<T>(&self, r: Result<T, sqlx::Error>) -> Result<T, StoreError> {
        r.map_err(|e| self.err(e))
    }
    fn unsigned(&self, field: &str, v: i64) -> Result<u64, StoreError> {
        u64::try_from(v).map_err(|_| self.err(format!("{field} is negative ({v})")))
    }
    fn opt_unsigned(&self, field: &str, v: Option<i64>) -> Result<Option<u64>, StoreError> {
        v.map(|v| self.unsigned(field, v)).transpose()
    }
    fn json<T: serde::de::DeserializeOwned>(&self, field: &str, s: &str) -> Result<T, StoreError> {
        serde_json::from_str(s).map_err(|e| self.err(format!("{field} does not parse: {e}")))
    }
    fn u32(&self, field: &str, v: i64) -> Result<u32, StoreError> {
        u32::try_from(v).map_err(|_| self.err(format!("{field} out of range ({v})")))
    }
}

fn decode_resp(
    ctx: &Ctx,
    status: i64,
    headers: &str,
    body: Vec<u8>,
    content_type: String,
) -> Result<StoredResponse, StoreError> {
    Ok(StoredResponse {
        status: u16::try_from(status)
            .map_err(|_| ctx.err(format!("response status out of range ({status})")))?,
        headers: ctx.json("response headers", headers)?,
        body,
        content_type,
    })
}

pub(crate) const TURN_COLS: &str = "id, agent, task, request_hash, model_requested, status, \
    started_ms, duration_ms, provider, model, attempts, usage_in, usage_out, error_class, \
    resp_status, resp_headers, resp_body, resp_content_type";

pub(crate) fn decode_turn(r: &impl Cols) -> Result<TurnRecord, StoreError> {
    let c = Ctx::new("turns", r, "id");
    let status = c.col(r.text("status"))?;
    let resp_status = c.col(r.opt_i64("resp_status"))?;
    let response = match resp_status {
        None => None,
        Some(s) => Some(decode_resp(
            &c,
            s,
            &c.col(r.opt_text("resp_headers"))?
                .unwrap_or_else(|| "[]".into()),
            c.col(r.opt_blob("resp_body"))?.unwrap_or_default(),
            c.col(r.opt_text("resp_content_type"))?.unwrap_or_default(),
        )?),
    };
    Ok(TurnRecord {
        id: c.col(r.text("id"))?,
        agent: c.col(r.text("agent"))?,
        task: c.col(r.opt_text("task"))?,
        request_hash: c.col(r.text("request_hash"))?,
        model_requested: c.col(r.text("model_requested"))?,
        status: TurnStatus::parse(&status)
            .ok_or_else(|| c.err(format!("unknown status {status:?}")))?,
        started_ms: c.unsigned("started_ms", c.col(r.i64("started_ms"))?)?,
        duration_ms: c.opt_unsigned("duration_ms", c.col(r.opt_i64("duration_ms"))?)?,
        provider: c.col(r.opt_text("provider"))?,
        model: c.col(r.opt_text("model"))?,
        attempts: {
            let text = c.col(r.text("attempts"))?;
            c.json::<serde::de::IgnoredAny>("attempts", &text)?;
            text
        },
        usage_in: c.unsigned("usage_in", c.col(r.i64("usage_in"))?)?,
        usage_out: c.unsigned("usage_out", c.col(r.i64("usage_out"))?)?,
        error_class: c.col(r.opt_text("error_class"))?,
        response,
    })
}

pub(crate) const AGENT_COLS: &str = "id, paused, consecutive_failures, turns, failed_turns, \
    tokens_in, tokens_out, cost_usd, last_failure_ms, last_seen_ms, state";

pub(crate) fn decode_agent(r: &impl Cols) -> Result<AgentRecord, StoreError> {
    let c = Ctx::new("agents", r, "id");
    let n = decode_counters(&c.id, r)?;
    Ok(AgentRecord {
        id: c.col(r.text("id"))?,
        paused: c.col(r.bool("paused"))?,
        consecutive_failures: n.consecutive_failures,
        turns: n.turns,
        failed_turns: n.failed_turns,
        tokens_in: n.tokens_in,
        tokens_out: n.tokens_out,
        cost_usd: n.cost_usd,
        last_failure_ms: c.opt_unsigned("last_failure_ms", c.col(r.opt_i64("last_failure_ms"))?)?,
        last_seen_ms: c.opt_unsigned("last_seen_ms", c.col(r.opt_i64("last_seen_ms"))?)?,
        state: c.json("state", &c.col(r.text("state"))?)?,
    })
}

/// An agent row's counters (hale_core::counts::Counters), also what a
/// count's `RETURNING` gives.
pub(crate) fn decode_counters(
    agent: &str,
    r: &impl Cols,
) -> Result<hale_core::counts::Counters, StoreError> {
    let c = Ctx {
        table: "agents",
        id: agent.to_owned(),
    };
    Ok(hale_core::counts::Counters {
        consecutive_failures: c.u32(
            "consecutive_failures",
            c.col(r.i64("consecutive_failures"))?,
        )?,
        turns: c.unsigned("turns", c.col(r.i64("turns"))?)?,
        failed_turns: c.unsigned("failed_turns", c.col(r.i64("failed_turns"))?)?,
        tokens_in: c.unsigned("tokens_in", c.col(r.i64("tokens_in"))?)?,
        tokens_out: c.unsigned("tokens_out", c.col(r.i64("tokens_out"))?)?,
        cost_usd: c.col(r.f64("cost_usd"))?,
    })
}

/// A task's spend as `task_spend` holds it.
pub(crate) fn decode_spend(
    agent: &str,
    task: &str,
    r: &impl Cols,
) -> Result<hale_core::budget::Spend, StoreError> {
    let c = Ctx {
        table: "task_spend",
        id: format!("{agent}/{task}"),
    };
    Ok(hale_core::budget::Spend {
        tokens: c.unsigned("tokens", c.col(r.i64("tokens"))?)?,
        cost_usd: c.col(r.f64("cost_usd"))?,
    })
}

/// A task's totals as a count's `RETURNING` gives them.
pub(crate) fn decode_task_counted(
    agent: &str,
    task: &str,
    n: u64,
    r: &impl Cols,
) -> Result<crate::model::TaskCounted, StoreError> {
    let c = Ctx {
        table: "task_spend",
        id: format!("{agent}/{task}"),
    };
    Ok(crate::model::TaskCounted {
        task: task.to_owned(),
        n,
        spend: decode_spend(agent, task, r)?,
        events: c.unsigned("events", c.col(r.i64("events"))?)?,
        tool_calls: c.unsigned("tool_calls", c.col(r.i64("tool_calls"))?)?,
    })
}

pub(crate) const IDEMPOTENCY_COLS: &str = "key, status, headers, body, content_type, request_hash";

pub(crate) fn decode_idempotency(r: &impl Cols) -> Result<IdempotentResponse, StoreError> {
    let c = Ctx::new("idempotency", r, "key");
    Ok(IdempotentResponse {
        request_hash: c.col(r.opt_text("request_hash"))?,
        response: decode_resp(
            &c,
            c.col(r.i64("status"))?,
            &c.col(r.text("headers"))?,
            c.col(r.blob("body"))?,
            c.col(r.text("content_type"))?,
        )?,
    })
}

pub(crate) const CHECKPOINT_COLS: &str = "agent, id, task, parent, body, sha256, created_ms";

pub(crate) fn decode_checkpoint(r: &impl Cols) -> Result<CheckpointRecord, StoreError> {
    let c = Ctx::new("checkpoints", r, "id");
    Ok(CheckpointRecord {
        id: c.col(r.text("id"))?,
        agent: c.col(r.text("agent"))?,
        task: c.col(r.text("task"))?,
        parent: c.col(r.opt_text("parent"))?,
        body: c.col(r.blob("body"))?,
        sha256: c.col(r.text("sha256"))?,
        created_ms: c.unsigned("created_ms", c.col(r.i64("created_ms"))?)?,
    })
}

/// Decodes `seq, body` of the events table.
pub(crate) fn decode_event(r: &impl Cols) -> Result<StoredEvent, StoreError> {
    let c = Ctx::new("events", r, "seq");
    let event: Event = c.json("body", &c.col(r.text("body"))?)?;
    Ok(StoredEvent {
        seq: c.col(r.i64("seq"))?,
        event,
    })
}

pub(crate) const DLQ_COLS: &str = "sink, seq, event_id, attempts, error, failed_ms, body";

pub(crate) fn decode_dead_letter(r: &impl Cols) -> Result<DeadLetter, StoreError> {
    let c = Ctx::new("dead_letters", r, "event_id");
    Ok(DeadLetter {
        id: c.col(r.text("event_id"))?,
        seq: c.col(r.i64("seq"))?,
        sink: c.col(r.text("sink"))?,
        attempts: c.u32("attempts", c.col(r.i64("attempts"))?)?,
        error: c.col(r.text("error"))?,
        failed_ms: c.unsigned("failed_ms", c.col(r.i64("failed_ms"))?)?,
        event: c.json("body", &c.col(r.text("body"))?)?,
    })
}

pub(crate) const RESPONSE_COLS: &str = "id, agent, turn_id, created_ms, previous_id, provider, \
    model, provider_id, input, response";

pub(crate) fn decode_response(r: &impl Cols) -> Result<ResponseRecord, StoreError> {
    let c = Ctx::new("responses", r, "id");
    Ok(ResponseRecord {
        id: c.col(r.text("id"))?,
        agent: c.col(r.text("agent"))?,
        turn_id: c.col(r.text("turn_id"))?,
        created_ms: c.unsigned("created_ms", c.col(r.i64("created_ms"))?)?,
        previous_id: c.col(r.opt_text("previous_id"))?,
        provider: c.col(r.text("provider"))?,
        model: c.col(r.text("model"))?,
        provider_id: c.col(r.opt_text("provider_id"))?,
        input: c.json("input", &c.col(r.text("input"))?)?,
        response: c.json("response", &c.col(r.text("response"))?)?,
    })
}
