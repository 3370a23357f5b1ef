//! The records the store keeps, and the writes that change them.
//!
//! These are plain data: the gateway builds them, the writer encodes them into
//! rows, the readers decode rows back. Numbers are `u64` here and `BIGINT` in
//! the database; a value past `i64::MAX` is refused at `commit`/`submit`
//! rather than wrapped.
//!
//! The bottom of the crate: this file imports no other module of it, so
//! every layer above (rows, backend, writer, the handle, the concerns) can
//! name these types.

use hale_core::event::Event;

use serde::{Deserialize, Serialize};

/// One write, applied inside a group commit.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Appended to the outbox; gets the next `seq`. Writing the same event id
    /// twice keeps the first (the outbox is idempotent by event id).
    Event(Event),
    /// Upserted by id.
    Turn(TurnRecord),
    /// Upserted by id: the control state (paused, `state`, last seen and
    /// last failure). The counters are written only when the row is new;
    /// afterwards they change only through [`Write::Count`], so a whole
    /// record written by one instance never overwrites the turns another
    /// instance counted.
    Agent(AgentRecord),
    /// One turn's counts (or an operator's reset of the failures in a row),
    /// added to the agent's row — and to its task's spend when a task is
    /// named — by the database. The totals after it are reported back
    /// through [`crate::Store::counted`] once the transaction committed.
    Count(CountWrite),
    /// A task reset: its stored spend starts over.
    ForgetTask { agent: String, task: String },
    /// The response stored for an `Idempotency-Key`, with the hash of the
    /// request it answered (a reuse of the key for another request is
    /// refused by comparing it). The first response stored for a key wins;
    /// later ones are ignored.
    Idempotency {
        key: String,
        request_hash: String,
        response: StoredResponse,
    },
    /// Checkpoints are immutable: the first write of an (agent, id) wins.
    Checkpoint(CheckpointRecord),
    /// A tool job's new state (status, schedule, body) over its existing row
    /// (inserted first by [`crate::Store::insert_job`]); committed with the
    /// `job.*` event that reports the change.
    Job(JobRecord),
    /// One row appended to the jobs' audit log (a finished job).
    Audit(AuditEntry),
    /// Tells every instance on the database that an agent's control state
    /// changed (pause, resume, terminate, decision, task reset): PostgreSQL
    /// `NOTIFY hale_agents` in the same transaction, so it is delivered when,
    /// and only if, the change commits. Nothing on SQLite (one instance).
    Announce(AgentChange),
    /// Closed per-deployment minutes of the health history, added to what
    /// the store holds for the same deployment and minute (another
    /// instance may have counted calls of that minute too).
    Minutes(Vec<hale_core::history::MinuteRow>),
    /// A Responses API answer kept for `previous_response_id` and
    /// `GET /v1/responses/{id}`, in the commit of the turn that answered it.
    /// Upserted by id.
    Response(ResponseRecord),
}

/// One Responses API answer as hale keeps it (`hale_core::responses`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseRecord {
    /// The id the client was given.
    pub id: String,
    /// The agent it belongs to (who may read and continue it).
    pub agent: String,
    /// The turn that answered it.
    pub turn_id: String,
    pub created_ms: u64,
    /// The response it continued, as the client named it.
    pub previous_id: Option<String>,
    /// The provider (account) and model that answered.
    pub provider: String,
    pub model: String,
    /// The provider's own id of it, when a Responses provider answered it
    /// whole: a turn sent to that provider may pass `previous_response_id`
    /// through. Equal to `id` when the client got the provider's id.
    pub provider_id: Option<String>,
    /// The turn's own input items, as the client sent them (a string input
    /// as one user message item).
    pub input: serde_json::Value,
    /// The response object as the client received it.
    pub response: serde_json::Value,
}

/// A [`Write::Count`].
#[derive(Debug, Clone, PartialEq)]
pub struct CountWrite {
    pub agent: String,
    /// The number the writer's [`hale_core::counts::Tally`] gave the count,
    /// reported back with the totals.
    pub n: u64,
    pub count: hale_core::counts::Count,
    /// The task the turn adds to.
    pub task: Option<TaskCount>,
    pub now_ms: u64,
}

/// A turn's counts for its task: its spend (the turn's tokens and cost, from
/// [`CountWrite::count`]) and the guard's events and tool calls.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskCount {
    pub task: String,
    /// The spend's number in the task's own tally.
    pub n: u64,
    pub events: u64,
    pub tool_calls: u64,
}

/// A task's totals after a committed count.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskCounted {
    pub task: String,
    pub n: u64,
    pub spend: hale_core::budget::Spend,
    pub events: u64,
    pub tool_calls: u64,
}

/// The totals after a committed [`Write::Count`].
#[derive(Debug, Clone, PartialEq)]
pub struct Counted {
    pub agent: String,
    pub n: u64,
    pub totals: hale_core::counts::Counters,
    /// The task's totals after it.
    pub task: Option<TaskCounted>,
}

/// An agent's totals after a commit, as another instance announced them
/// (PostgreSQL `NOTIFY hale_counts`; see [`crate::Heard::Counts`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentTotals {
    pub agent: String,
    pub totals: hale_core::counts::Counters,
}

/// What [`Write::Announce`] announces: re-read this agent's row, and when
/// `task` is set, that task was reset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentChange {
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// The pause state an operator's pause or resume set, carried in the
    /// announcement itself: another instance may write the agent's whole row
    /// from a turn it served just before it heard of the change (last writer
    /// wins), so the row it re-reads can be older than the change; the
    /// announced state is applied over it, and that instance's next write
    /// carries it back into the row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<AgentControl>,
    /// The notifying store's schema, set by PostgreSQL when it sends the
    /// notification: channels are database-wide, so hale clusters sharing a
    /// database in separate schemas hear each other; a listener ignores a
    /// change of another schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
}

/// The control state an operator set (see [`AgentChange::control`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum AgentControl {
    Paused {
        pause: hale_core::pause::Pause,
    },
    /// Resumed: no pause, no failures in a row.
    Active,
}

/// A row to append to the jobs' audit log (its `seq` is drawn at insert).
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    pub job_id: String,
    pub time_ms: u64,
    pub status: String,
    pub degraded: bool,
    pub body: serde_json::Value,
}

/// One job as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub job_id: String,
    /// `running`, `queued`, `completed`, `failed`, `expired`, `cancelled`.
    pub status: String,
    /// For a queued job: when the queue delivers it next.
    pub next_attempt_ms: Option<u64>,
    pub updated_ms: u64,
    /// The job's state, owned by `hale-tools`.
    pub body: serde_json::Value,
}

/// How a turn ended (or that it has not yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    Running,
    Succeeded,
    Failed,
}

impl TurnStatus {
    /// The name stored in the database and shown in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Running => "running",
            TurnStatus::Succeeded => "succeeded",
            TurnStatus::Failed => "failed",
        }
    }

    /// Parses [`TurnStatus::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "running" => Some(TurnStatus::Running),
            "succeeded" => Some(TurnStatus::Succeeded),
            "failed" => Some(TurnStatus::Failed),
            _ => None,
        }
    }
}

/// A response as it was returned to the caller, kept for idempotent replays
/// and journal replays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub content_type: String,
}

/// The response stored for an idempotency key, and the hash of the request
/// it answered (`None` for a row stored before hale kept the hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotentResponse {
    pub request_hash: Option<String>,
    pub response: StoredResponse,
}

/// One turn of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    pub id: String,
    pub agent: String,
    pub task: Option<String>,
    /// Hash of the request, the key of replay-instead-of-re-billing.
    pub request_hash: String,
    pub model_requested: String,
    pub status: TurnStatus,
    pub started_ms: u64,
    pub duration_ms: Option<u64>,
    pub provider: Option<String>,
    pub model: Option<String>,
    /// The timeline as JSON text: an array, one element per attempt (and
    /// per deployment passed over). Text, not a `Value`: the gateway
    /// serializes its rows once, straight into the column (building a
    /// `Value` that was serialized again here was ~4k instructions per turn
    /// under callgrind); a read checks that it parses.
    pub attempts: String,
    pub usage_in: u64,
    pub usage_out: u64,
    pub error_class: Option<String>,
    pub response: Option<StoredResponse>,
}

/// The durable state of one agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRecord {
    pub id: String,
    pub paused: bool,
    pub consecutive_failures: u32,
    pub turns: u64,
    pub failed_turns: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
    pub last_failure_ms: Option<u64>,
    pub last_seen_ms: Option<u64>,
    /// Free-form: health, budgets, current task.
    pub state: serde_json::Value,
}

/// One checkpoint of an agent's task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    pub id: String,
    pub agent: String,
    pub task: String,
    pub parent: Option<String>,
    pub body: Vec<u8>,
    /// Hex SHA-256 of `body`, as given by the writer; checked by recovery.
    pub sha256: String,
    pub created_ms: u64,
}

/// An event with its place in the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub seq: i64,
    pub event: Event,
}

/// An event a sink gave up on (a dead letter).
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// The event's id.
    pub id: String,
    pub seq: i64,
    pub sink: String,
    pub attempts: u32,
    pub error: String,
    pub failed_ms: u64,
    pub event: Event,
}

/// A registered sink and the last seq it acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkCursor {
    pub sink: String,
    pub acked_seq: i64,
}
