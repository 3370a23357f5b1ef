//! The two backends behind one API.
//!
//! [`Pool`] is an enum of the SQLite and PostgreSQL pools rather than a trait
//! object or `sqlx::Any`: every query is written once with `$N` placeholders
//! (SQLite accepts them too) and [`on_pool!`] expands it once per backend, so
//! each expansion is checked against the real driver types. Only the DDL and
//! the PostgreSQL outbox lock differ.
//!
//! Why the outbox lock: a `BIGSERIAL` value is drawn at insert time, not at
//! commit time, so two PostgreSQL writers (two hale instances) could commit
//! seq 11 before seq 10, and a relay that already moved past 11 would never
//! see 10. Every transaction that appends events first takes one
//! transaction-scoped advisory lock, so seqs become visible in order. SQLite
//! has a single writer (this process's writer task; `BEGIN IMMEDIATE`), which
//! gives the same order for free.
//!
//! Also the one read below the handle: [`last_seq`], which the store reads
//! at open and the outbox listener after each notification.

use std::collections::HashSet;

use sqlx::{PgPool, QueryBuilder, SqlitePool};

use hale_core::counts::StreakChange;
use hale_core::memory::WriteStage;

use crate::error::StoreError;
use crate::rows::{CountRow, Encoded, EventRow, TurnRow};

/// The pool of one backend.
#[derive(Clone, Debug)]
pub(crate) enum Pool {
    Sqlite(SqlitePool),
    Pg(PgPool),
}

/// Expands `$body` once per backend with `$p` bound to the pool and `$db` to
/// the `sqlx::Database` type.
macro_rules! on_pool {
    ($pool:expr, |$p:ident, $db:ident| $body:expr) => {
        match $pool {
            $crate::backend::Pool::Sqlite($p) => {
                #[allow(dead_code)]
                type $db = sqlx::Sqlite;
                $body
            }
            $crate::backend::Pool::Pg($p) => {
                #[allow(dead_code)]
                type $db = sqlx::Postgres;
                $body
            }
        }
    };
}
pub(crate) use on_pool;

/// Key of the PostgreSQL advisory lock that orders outbox appends ("hale").
pub(crate) const OUTBOX_LOCK: i64 = 0x6861_6c65_0001;
/// Key of the PostgreSQL advisory lock held while creating the schema.
pub(crate) const SCHEMA_LOCK: i64 = 0x6861_6c65_0002;

/// The PostgreSQL `LISTEN/NOTIFY` channel of agent control changes.
pub const AGENTS_CHANNEL: &str = "hale_agents";

/// The PostgreSQL `LISTEN/NOTIFY` channel of committed counts: the totals
/// of each agent counted in a transaction (payload: [`CountsNotice`]).
pub const COUNTS_CHANNEL: &str = "hale_counts";

/// A `hale_counts` payload at most this long (PostgreSQL's limit is 8000
/// bytes): a transaction's counts take as many notifications as they need.
const COUNTS_PAYLOAD_MAX: usize = 7000;

/// The payload of a `hale_counts` notification: every agent a transaction
/// counted, with its totals after the transaction.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct CountsNotice {
    pub counts: Vec<crate::model::AgentTotals>,
    /// The notifying store's schema (see [`crate::AgentChange::schema`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
}

/// The `hale_counts` payloads of a transaction's counts: each agent's last
/// totals, in payloads under [`COUNTS_PAYLOAD_MAX`].
pub(crate) fn counts_payloads(counted: &[crate::model::Counted]) -> Vec<String> {
    let mut last: Vec<crate::model::AgentTotals> = Vec::new();
    let mut at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for c in counted {
        let t = crate::model::AgentTotals {
            agent: c.agent.clone(),
            totals: c.totals,
        };
        match at.get(c.agent.as_str()) {
            Some(&i) => last[i] = t,
            None => {
                at.insert(c.agent.as_str(), last.len());
                last.push(t);
            }
        }
    }
    let mut out = Vec::new();
    let mut batch: Vec<crate::model::AgentTotals> = Vec::new();
    let mut len = 0;
    for t in last {
        let one = serde_json::to_string(&t).map_or(0, |s| s.len()) + 1;
        if !batch.is_empty() && len + one > COUNTS_PAYLOAD_MAX {
            out.extend(notice(std::mem::take(&mut batch)));
            len = 0;
        }
        len += one;
        batch.push(t);
    }
    if !batch.is_empty() {
        out.extend(notice(batch));
    }
    out
}

fn notice(counts: Vec<crate::model::AgentTotals>) -> Option<String> {
    serde_json::to_string(&CountsNotice {
        counts,
        schema: None,
    })
    .ok()
}

/// The PostgreSQL `LISTEN/NOTIFY` channel of released idempotency claims
/// (payload: the key's SHA-256).
pub(crate) const IDEM_CHANNEL: &str = "hale_idem";

/// The PostgreSQL `LISTEN/NOTIFY` channel of new outbox events.
pub const EVENTS_CHANNEL: &str = "hale_events";

/// Events per multi-row `INSERT` (5 binds each: well under both backends'
/// parameter limits, and few distinct statement texts to cache).
const EVENT_CHUNK: usize = 200;

/// How a batch's counts are written: each agent's run of counts for one
/// task, with no other write naming that agent between them (its whole
/// record, a forgotten task), becomes ONE count at the place of the run's
/// last: `Some(merged)` there, `None` at the others. A count alone is not
/// in the map. Under load a group commit holds several turns of each busy
/// agent, and a count costs the writer two upserts with `RETURNING` (the
/// agent row and the task's spend).
///
/// The merged count has the effect of the run's counts one by one
/// ([`CountRow::then`], `hale_core::counts::StreakChange::then`), and its
/// totals carry the run's last numbers, which confirm the whole run (a
/// follower drops every delta up to the number it hears). Runs of one agent
/// keep their order, as the failures in a row depend on it.
fn merge_counts<'a>(
    rows: impl Iterator<Item = &'a Encoded>,
) -> std::collections::HashMap<usize, Option<CountRow>> {
    use std::collections::HashMap;
    /// A run: where its counts are, and — from its second count on — their
    /// merge (a count alone is written as it is, never copied).
    struct Run<'a> {
        first: &'a CountRow,
        /// Where its counts before the last are (empty: no allocation).
        earlier: Vec<usize>,
        last: usize,
        merged: Option<CountRow>,
    }
    fn close(out: &mut HashMap<usize, Option<CountRow>>, run: Run<'_>) {
        if let Some(merged) = run.merged {
            for i in run.earlier {
                out.insert(i, None);
            }
            out.insert(run.last, Some(merged));
        }
    }
    let mut out = HashMap::new();
    let mut open: HashMap<&str, Run<'a>> = HashMap::new();
    for (i, row) in rows.enumerate() {
        let agent = match row {
            Encoded::Count(c) => {
                match open.get_mut(c.agent.as_str()) {
                    Some(run) if run.first.task_name() == c.task_name() => {
                        run.merged.get_or_insert_with(|| run.first.clone()).then(c);
                        run.earlier.push(run.last);
                        run.last = i;
                    }
                    Some(_) | None => {
                        let run = Run {
                            first: c,
                            earlier: Vec::new(),
                            last: i,
                            merged: None,
                        };
                        if let Some(ended) = open.insert(c.agent.as_str(), run) {
                            close(&mut out, ended);
                        }
                    }
                }
                continue;
            }
            Encoded::Agent(a) => a.id.as_str(),
            Encoded::ForgetTask(agent, _) => agent.as_str(),
            // Not the agent's counters: no end to a run.
            Encoded::Event(_)
            | Encoded::Turn(_)
            | Encoded::Idempotency(_)
            | Encoded::Checkpoint(_)
            | Encoded::Job(_)
            | Encoded::Audit(_)
            | Encoded::Announce(_)
            | Encoded::Minutes(_)
            | Encoded::Response(_) => continue,
        };
        if let Some(ended) = open.remove(agent) {
            close(&mut out, ended);
        }
    }
    for (_, run) in open {
        close(&mut out, run);
    }
    out
}

/// Counting SQL: an upsert per table (`hale_core::counts::Counters::apply`;
/// the flag after `CASE WHEN`: set the failures in a row, else add to
/// them), one text for both backends with the placeholders passed in, in
/// the order they appear: `$1`… for PostgreSQL (the totals after it taken
/// with `RETURNING`), `?` for SQLite ([`COUNT_TASK_SQLITE`]). The values go
/// in that order too ([`bind_agent_count!`], [`bind_task_spend!`]).
macro_rules! agent_count_sql {
    ($id:literal, $k:literal, $turns:literal, $failed:literal, $tin:literal, $tout:literal,
     $cost:literal, $failure:literal, $seen:literal, $set:literal) => {
        concat!(
            "INSERT INTO agents (id, paused, consecutive_failures, turns, \
             failed_turns, tokens_in, tokens_out, cost_usd, last_failure_ms, \
             last_seen_ms, state) VALUES (",
            $id,
            ", FALSE, ",
            $k,
            ", ",
            $turns,
            ", ",
            $failed,
            ", ",
            $tin,
            ", ",
            $tout,
            ", ",
            $cost,
            ", ",
            $failure,
            ", ",
            $seen,
            ", 'null') ON CONFLICT (id) DO UPDATE SET \
             consecutive_failures = CASE WHEN ",
            $set,
            " THEN excluded.consecutive_failures \
             ELSE agents.consecutive_failures + excluded.consecutive_failures END, \
             turns = agents.turns + excluded.turns, \
             failed_turns = agents.failed_turns + excluded.failed_turns, \
             tokens_in = agents.tokens_in + excluded.tokens_in, \
             tokens_out = agents.tokens_out + excluded.tokens_out, \
             cost_usd = agents.cost_usd + excluded.cost_usd, \
             last_failure_ms = COALESCE(excluded.last_failure_ms, \
             agents.last_failure_ms), last_seen_ms = CASE WHEN \
             excluded.turns > 0 THEN excluded.last_seen_ms ELSE \
             agents.last_seen_ms END"
        )
    };
}
/// The task's spend, as [`agent_count_sql!`] (placeholders in order). Its
/// age (`updated_ms`, read only by the history prune) moves to the count's
/// time only a step (`$step`) after itself: `hale_core::counts::spend_age`.
macro_rules! task_spend_sql {
    ($agent:literal, $task:literal, $tokens:literal, $cost:literal, $events:literal,
     $tools:literal, $at:literal, $step:literal) => {
        concat!(
            "INSERT INTO task_spend (agent, task, tokens, cost_usd, \
             events, tool_calls, updated_ms) VALUES (",
            $agent,
            ", ",
            $task,
            ", ",
            $tokens,
            ", ",
            $cost,
            ", ",
            $events,
            ", ",
            $tools,
            ", ",
            $at,
            ") ON CONFLICT (agent, task) DO UPDATE SET \
             tokens = task_spend.tokens + excluded.tokens, \
             cost_usd = task_spend.cost_usd + excluded.cost_usd, \
             events = task_spend.events + excluded.events, \
             tool_calls = task_spend.tool_calls + excluded.tool_calls, \
             updated_ms = CASE WHEN excluded.updated_ms >= task_spend.updated_ms + ",
            $step,
            " THEN excluded.updated_ms ELSE task_spend.updated_ms END"
        )
    };
}
/// Binds a count's values to the query `$q` in [`agent_count_sql!`]'s order.
macro_rules! bind_agent_count {
    ($q:expr, $c:expr) => {{
        let c: &CountRow = $c;
        let (set, k) = match c.streak {
            StreakChange::Set(k) => (true, k),
            StreakChange::Add(k) => (false, k),
        };
        $q.bind(&c.agent)
            .bind(i64::from(k))
            .bind(c.turns)
            .bind(c.failed)
            .bind(c.tokens_in)
            .bind(c.tokens_out)
            .bind(c.cost_usd)
            .bind(c.failure_ms)
            .bind(c.seen_ms.unwrap_or(c.now_ms))
            .bind(set)
    }};
}
/// Binds a count's task spend to `$q` in [`task_spend_sql!`]'s order.
macro_rules! bind_task_spend {
    ($q:expr, $c:expr, $task:expr, $events:expr, $tool_calls:expr) => {{
        let c: &CountRow = $c;
        $q.bind(&c.agent)
            .bind($task)
            .bind(c.tokens_in.saturating_add(c.tokens_out))
            .bind(c.cost_usd)
            .bind($events)
            .bind($tool_calls)
            .bind(c.now_ms)
            .bind(hale_core::counts::SPEND_AGE_STEP_MS)
    }};
}
const AGENT_COUNT_RETURNING: &str = concat!(
    agent_count_sql!("$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9", "$10"),
    " RETURNING consecutive_failures, turns, failed_turns, tokens_in, tokens_out, cost_usd"
);
const TASK_SPEND_RETURNING: &str = concat!(
    task_spend_sql!("$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8"),
    " RETURNING tokens, cost_usd, events, tool_calls"
);

/// SQLite: one count as statements: the same upserts as PostgreSQL's
/// ([`agent_count_sql!`], [`task_spend_sql!`]) with anonymous `?`
/// placeholders, and a read-back of the totals after them ([`bind_count!`]).
///
/// - The agent's upsert (`hale_core::counts::Counters::apply`; the flag
///   after `CASE WHEN`: set the failures in a row, else add to them).
/// - With a task, the task's upsert, and one
///   `SELECT` of the agent's totals and, `t_`-prefixed
///   ([`crate::rows::TaskCols`]), the task's; without one, a `SELECT` of
///   the agent's totals.
///
/// Not `RETURNING`: SQLite gathers its rows in an ephemeral table first, a
/// temporary b-tree opened and closed per statement, ~9k instructions each
/// under callgrind; the read-back costs less (a c=1 turn: −24k in SQLite,
/// +9k in sqlx; the run is in BENCHMARKS.md's git history). And not one text
/// for both kinds of count (the task's upsert as
/// `INSERT … SELECT … WHERE ? IS NOT NULL`): SQLite takes an `INSERT … SELECT`
/// for a multi-row write and keeps a statement journal for it, +9k
/// instructions a turn at c=1 under callgrind.
///
/// This one: a count with a task, 3 statements, 20 binds.
const COUNT_TASK_SQLITE: &str = concat!(
    agent_count_sql!("?", "?", "?", "?", "?", "?", "?", "?", "?", "?"),
    "; ",
    task_spend_sql!("?", "?", "?", "?", "?", "?", "?", "?"),
    "; SELECT a.consecutive_failures AS consecutive_failures, a.turns AS turns, \
     a.failed_turns AS failed_turns, a.tokens_in AS tokens_in, a.tokens_out AS tokens_out, \
     a.cost_usd AS cost_usd, t.tokens AS t_tokens, t.cost_usd AS t_cost_usd, \
     t.events AS t_events, t.tool_calls AS t_tool_calls FROM agents a \
     JOIN task_spend t ON t.agent = a.id AND t.task = ? WHERE a.id = ?;"
);
/// A count without a task: 2 statements, 11 binds.
const COUNT_AGENT_SQLITE: &str = concat!(
    agent_count_sql!("?", "?", "?", "?", "?", "?", "?", "?", "?", "?"),
    "; SELECT consecutive_failures, turns, failed_turns, tokens_in, tokens_out, cost_usd \
     FROM agents WHERE id = ?;"
);

/// Most counts in one SQLite query ([`count_sqlite_sql`]), prepared once
/// per size and kind and kept in the writer's statement cache (16 counts
/// with a task: 48 prepared statements).
const COUNT_CHUNK: usize = 16;

/// `counts` (a power of two up to [`COUNT_CHUNK`]) copies of
/// [`COUNT_TASK_SQLITE`] (`task`) or [`COUNT_AGENT_SQLITE`], built once per
/// size: sqlx-sqlite runs a query of several statements as ONE command to
/// its connection's thread, which steps them in order, each binding the
/// next of the query's anonymous binds (sqlx-sqlite's `ExecuteIter`), and
/// sends back every result. So a batch's counts cost one hand-off to that
/// thread per query instead of two or three per count, and still run one
/// after the other: each count's read-back sees exactly the counts before
/// it, as one by one.
fn count_sqlite_sql(counts: usize, task: bool) -> &'static str {
    const SIZES: usize = COUNT_CHUNK.ilog2() as usize + 1;
    static TASK: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    static AGENT: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let (cell, one) = if task {
        (&TASK, COUNT_TASK_SQLITE)
    } else {
        (&AGENT, COUNT_AGENT_SQLITE)
    };
    let all = cell.get_or_init(|| (0..SIZES).map(|p| one.repeat(1 << p)).collect());
    // `counts` is a power of two up to COUNT_CHUNK (count_chunks); anything
    // else would be a bug here, and gets the one-count text.
    let p = if counts.is_power_of_two() {
        counts.ilog2() as usize
    } else {
        0
    };
    all.get(p).or(all.first()).map_or("", String::as_str)
}

/// `counts` in order, cut into the queries that write them: each a run of
/// counts of one kind (`has_task`), at most [`COUNT_CHUNK`] of them, a
/// power of two.
fn count_chunks<T>(counts: &[T], has_task: impl Fn(&T) -> bool) -> Vec<&[T]> {
    let mut out = Vec::new();
    let mut rest = counts;
    while let Some(first) = rest.first() {
        let kind = has_task(first);
        let len = rest.iter().take_while(|c| has_task(c) == kind).count();
        let (run, after) = rest.split_at(len);
        for piece in run.chunks(COUNT_CHUNK) {
            pow2_pieces(piece, &mut out);
        }
        rest = after;
    }
    out
}

/// Binds a count's values to `$q`, in [`count_sqlite_sql`]'s order for its
/// kind: the agent's upsert, the task's, the read-back's keys.
macro_rules! bind_count {
    ($q:expr, $c:expr) => {{
        let c: &CountRow = $c;
        let q = bind_agent_count!($q, c);
        match &c.task {
            Some((task, _, events, tool_calls)) => bind_task_spend!(q, c, task, events, tool_calls)
                .bind(task)
                .bind(&c.agent),
            None => q.bind(&c.agent),
        }
    }};
}

/// Most turn rows in one multi-row `INSERT` (18 binds each: far under both
/// backends' parameter limits).
const TURN_CHUNK: usize = 32;

/// `rows` in order, cut into the statements that write them: no statement
/// holds one id twice (PostgreSQL refuses a row an upsert affects twice;
/// the repeat goes in the next statement, so the later row still wins) nor
/// more than [`TURN_CHUNK`] rows, and each holds a power of two of rows, so
/// a connection caches at most a handful of statement texts.
pub(crate) fn turn_chunks<T>(rows: &[T], id: impl Fn(&T) -> &str) -> Vec<&[T]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut seen: HashSet<&str> = HashSet::new();
    for (i, row) in rows.iter().enumerate() {
        if i - start == TURN_CHUNK || !seen.insert(id(row)) {
            pow2_pieces(&rows[start..i], &mut out);
            start = i;
            seen.clear();
            seen.insert(id(row));
        }
    }
    pow2_pieces(&rows[start..], &mut out);
    out
}

/// `run` as pieces of a power of two of rows each, largest first.
fn pow2_pieces<'a, T>(mut run: &'a [T], out: &mut Vec<&'a [T]>) {
    while !run.is_empty() {
        let k = 1usize << run.len().ilog2();
        let (piece, rest) = run.split_at(k);
        out.push(piece);
        run = rest;
    }
}

/// Binds of one turn row (its columns, in [`turn_insert_sql`]'s order).
const TURN_COLUMNS: usize = 18;

/// The upsert of `rows` turn rows (a power of two up to [`TURN_CHUNK`]),
/// built once per size: a batch binds into a statement text its connection
/// has cached, with no SQL formatted per batch.
///
/// SQLite's statements take anonymous `?` placeholders, PostgreSQL's (one
/// row) `$n`. sqlx-sqlite asks SQLite for each placeholder's name before
/// binding it, and SQLite finds a numbered placeholder's name by walking
/// the statement's list of names from its start: with `$n`, a 32-row upsert
/// (576 placeholders) cost ~166k steps per statement, the writer's largest
/// single cost (callgrind, issue 30). An anonymous
/// `?` has no name, so the question is answered at once.
fn turn_insert_sql(rows: usize, pg: bool) -> &'static str {
    const SIZES: usize = TURN_CHUNK.ilog2() as usize + 1;
    static SQLITE: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    static PG: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let (cell, sizes) = if pg { (&PG, 1) } else { (&SQLITE, SIZES) };
    let all = cell.get_or_init(|| {
        (0..sizes)
            .map(|p| {
                let values: Vec<String> = (0..1usize << p)
                    .map(|row| {
                        let binds: Vec<String> = (1..=TURN_COLUMNS)
                            .map(|col| {
                                if pg {
                                    format!("${}", row * TURN_COLUMNS + col)
                                } else {
                                    "?".to_owned()
                                }
                            })
                            .collect();
                        format!("({})", binds.join(", "))
                    })
                    .collect();
                format!(
                    "INSERT INTO turns (id, agent, task, request_hash, model_requested, status, \
                     started_ms, duration_ms, provider, model, attempts, usage_in, usage_out, \
                     error_class, resp_status, resp_headers, resp_body, resp_content_type) \
                     VALUES {} ON CONFLICT (id) DO UPDATE SET agent = excluded.agent, \
                     task = excluded.task, request_hash = excluded.request_hash, \
                     model_requested = excluded.model_requested, status = excluded.status, \
                     started_ms = excluded.started_ms, duration_ms = excluded.duration_ms, \
                     provider = excluded.provider, model = excluded.model, \
                     attempts = excluded.attempts, usage_in = excluded.usage_in, \
                     usage_out = excluded.usage_out, error_class = excluded.error_class, \
                     resp_status = excluded.resp_status, resp_headers = excluded.resp_headers, \
                     resp_body = excluded.resp_body, \
                     resp_content_type = excluded.resp_content_type",
                    values.join(", ")
                )
            })
            .collect()
    });
    // `rows` is a power of two up to TURN_CHUNK (turn_chunks); anything
    // else would be a bug here, and gets the one-row statement's index.
    let p = if rows.is_power_of_two() {
        rows.ilog2() as usize
    } else {
        0
    };
    all.get(p).or(all.first()).map_or("", String::as_str)
}

/// Binds a turn row's columns to `$q`, in [`turn_insert_sql`]'s order.
macro_rules! bind_turn {
    ($q:expr, $t:expr) => {{
        let t = $t;
        let r = t.response.as_ref();
        $q.bind(&t.id)
            .bind(&t.agent)
            .bind(&t.task)
            .bind(&t.request_hash)
            .bind(&t.model_requested)
            .bind(t.status)
            .bind(t.started_ms)
            .bind(t.duration_ms)
            .bind(&t.provider)
            .bind(&t.model)
            .bind(&t.attempts)
            .bind(t.usage_in)
            .bind(t.usage_out)
            .bind(&t.error_class)
            .bind(r.map(|r| r.status))
            .bind(r.map(|r| &r.headers))
            .bind(r.map(|r| &r.body))
            .bind(r.map(|r| &r.content_type))
    }};
}

macro_rules! gen_apply {
    ($name:ident, $db:ty, $pg:expr) => {
        /// Applies the writes of `jobs`, in order, on an open transaction;
        /// returns the highest seq appended and the totals after each count.
        pub(crate) async fn $name(
            conn: &mut <$db as sqlx::Database>::Connection,
            jobs: &[&[Encoded]],
        ) -> Result<Applied, sqlx::Error> {
            /// SQLite: writes the counts `held` (then empty), in order, in
            /// queries of [`count_sqlite_sql`] ([`count_chunks`]), and adds
            /// their totals to `counted`. The agent's and task's tables
            /// are written by counts, whole agent records and forgotten
            /// tasks alone, so holding counts back until the next of the
            /// latter two (or the batch's end) leaves every row as the
            /// writes in order would.
            async fn write_counts(
                conn: &mut <$db as sqlx::Database>::Connection,
                held: &mut Vec<&CountRow>,
                counted: &mut Vec<crate::model::Counted>,
            ) -> Result<(), sqlx::Error> {
                let decode = |e: StoreError| sqlx::Error::Decode(e.into());
                for chunk in count_chunks(held, |c| c.task.is_some()) {
                    let task = chunk.first().is_some_and(|c| c.task.is_some());
                    let mut q = sqlx::query(count_sqlite_sql(chunk.len(), task));
                    for c in chunk {
                        q = bind_count!(q, c);
                    }
                    // One row per count: its read-back (the agent's row
                    // exists after its upsert).
                    let rows = q.fetch_all(&mut *conn).await?;
                    if rows.len() != chunk.len() {
                        return Err(sqlx::Error::RowNotFound);
                    }
                    for (c, row) in chunk.iter().zip(&rows) {
                        let totals = crate::rows::decode_counters(&c.agent, row).map_err(decode)?;
                        let task = match &c.task {
                            None => None,
                            Some((task, n, _, _)) => Some(
                                crate::rows::decode_task_counted(
                                    &c.agent,
                                    task,
                                    *n,
                                    &crate::rows::TaskCols(row),
                                )
                                .map_err(decode)?,
                            ),
                        };
                        counted.push(crate::model::Counted {
                            agent: c.agent.clone(),
                            n: c.n,
                            totals,
                            task,
                        });
                    }
                }
                held.clear();
                Ok(())
            }
            let mut counted = Vec::new();
            // SQLite: counts not yet written (write_counts); always empty
            // on PostgreSQL.
            let mut held: Vec<&CountRow> = Vec::new();
            let rows = || jobs.iter().flat_map(|j| j.iter());
            let events: Vec<&EventRow> = rows()
                .filter_map(|r| if let Encoded::Event(e) = r { Some(e) } else { None })
                .collect();
            if $pg && !events.is_empty() {
                sqlx::query("SELECT pg_advisory_xact_lock($1)")
                    .bind(OUTBOX_LOCK)
                    .execute(&mut *conn)
                    .await?;
            }
            // Agent rows are whole-record upserts: within one batch only the
            // last one of each agent is written (it carries every earlier change).
            let mut last_agent: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
            for (i, row) in rows().enumerate() {
                if let Encoded::Agent(a) = row {
                    last_agent.insert(a.id.as_str(), i);
                }
            }
            let merged = merge_counts(rows());
            // SQLite: turn rows touch the `turns` table alone, which
            // nothing else in a batch reads or writes, so they are written
            // first, in order, several per statement ([`turn_chunks`]): one
            // hand-off to the connection's thread per statement rather than
            // per turn. PostgreSQL writes them one per statement in the loop
            // below (multi-row statements made its writer 2.3-2.9x slower,
            // measured at stop 19; the run is in BENCHMARKS.md's git history).
            if !$pg {
                let turns: Vec<&TurnRow> = rows()
                    .filter_map(|r| if let Encoded::Turn(t) = r { Some(&**t) } else { None })
                    .collect();
                for chunk in turn_chunks(&turns, |t| t.id.as_str()) {
                    let mut q = sqlx::query(turn_insert_sql(chunk.len(), false));
                    for t in chunk {
                        q = bind_turn!(q, t);
                    }
                    q.execute(&mut *conn).await?;
                }
            }
            for (i, row) in rows().enumerate() {
                match row {
                    Encoded::Agent(a) if last_agent.get(a.id.as_str()) != Some(&i) => {}
                    Encoded::Count(_) if matches!(merged.get(&i), Some(None)) => {}
                    Encoded::Event(e) => {
                        // A transition is kept in the health history, in
                        // the transaction of its state change.
                        if let Some(deployment) = &e.history {
                            sqlx::query(
                                "INSERT INTO history_transitions (id, time_ms, kind, agent, \
                                 deployment, body) VALUES ($1, $2, $3, $4, $5, $6) \
                                 ON CONFLICT (id) DO NOTHING",
                            )
                            .bind(&e.id)
                            .bind(e.time_ms)
                            .bind(e.kind)
                            .bind(&e.agent)
                            .bind(deployment)
                            .bind(&e.body)
                            .execute(&mut *conn)
                            .await?;
                        }
                    }
                    Encoded::Minutes(rows) => {
                        for m in rows {
                            sqlx::query(
                                "INSERT INTO history_minutes (deployment, minute_ms, calls, \
                                 failures, latency_sum_ms) VALUES ($1, $2, $3, $4, $5) \
                                 ON CONFLICT (deployment, minute_ms) DO UPDATE SET \
                                 calls = history_minutes.calls + excluded.calls, \
                                 failures = history_minutes.failures + excluded.failures, \
                                 latency_sum_ms = history_minutes.latency_sum_ms + excluded.latency_sum_ms",
                            )
                            .bind(&m.deployment)
                            .bind(m.minute_ms)
                            .bind(m.calls)
                            .bind(m.failures)
                            .bind(m.latency_sum_ms)
                            .execute(&mut *conn)
                            .await?;
                        }
                    }
                    // SQLite: written above, several per statement.
                    Encoded::Turn(_) if !$pg => {}
                    Encoded::Turn(t) => {
                        let q = sqlx::query(turn_insert_sql(1, true));
                        bind_turn!(q, t).execute(&mut *conn).await?;
                    }
                    Encoded::Agent(a) => {
                        // The counts held so far go first (their order
                        // with the agent's other writes is kept).
                        write_counts(&mut *conn, &mut held, &mut counted).await?;
                        // The counters only when the row is new: afterwards
                        // they change through counts alone (Write::Count).
                        sqlx::query(
                            "INSERT INTO agents (id, paused, consecutive_failures, turns, \
                             failed_turns, tokens_in, tokens_out, cost_usd, last_failure_ms, \
                             last_seen_ms, state) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, \
                             $10, $11) ON CONFLICT (id) DO UPDATE SET paused = excluded.paused, \
                             last_failure_ms = CASE WHEN excluded.last_failure_ms > \
                             agents.last_failure_ms OR agents.last_failure_ms IS NULL THEN \
                             excluded.last_failure_ms ELSE agents.last_failure_ms END, \
                             last_seen_ms = CASE WHEN excluded.last_seen_ms > agents.last_seen_ms \
                             OR agents.last_seen_ms IS NULL THEN excluded.last_seen_ms ELSE \
                             agents.last_seen_ms END, state = excluded.state",
                        )
                        .bind(&a.id)
                        .bind(a.paused)
                        .bind(a.consecutive_failures)
                        .bind(a.turns)
                        .bind(a.failed_turns)
                        .bind(a.tokens_in)
                        .bind(a.tokens_out)
                        .bind(a.cost_usd)
                        .bind(a.last_failure_ms)
                        .bind(a.last_seen_ms)
                        .bind(&a.state)
                        .execute(&mut *conn)
                        .await?;
                    }
                    Encoded::ForgetTask(agent, task) => {
                        write_counts(&mut *conn, &mut held, &mut counted).await?;
                        sqlx::query("DELETE FROM task_spend WHERE agent = $1 AND task = $2")
                            .bind(agent)
                            .bind(task)
                            .execute(&mut *conn)
                            .await?;
                    }
                    // SQLite: held, and written with the counts around
                    // it in one query (write_counts).
                    Encoded::Count(c) if !$pg => held.push(match merged.get(&i) {
                        Some(Some(run)) => run,
                        Some(None) | None => c,
                    }),
                    Encoded::Count(c) => {
                        let c = match merged.get(&i) {
                            Some(Some(run)) => run,
                            Some(None) | None => c,
                        };
                        // hale_core::counts::Counters::apply, in SQL, for
                        // a count or a merged run; the totals by RETURNING.
                        let agent_row = bind_agent_count!(sqlx::query(AGENT_COUNT_RETURNING), c)
                            .fetch_one(&mut *conn)
                            .await?;
                        let decode = |e: StoreError| sqlx::Error::Decode(e.into());
                        let totals =
                            crate::rows::decode_counters(&c.agent, &agent_row).map_err(decode)?;
                        let task = match &c.task {
                            None => None,
                            Some((task, n, events, tool_calls)) => {
                                let row = bind_task_spend!(
                                    sqlx::query(TASK_SPEND_RETURNING),
                                    c,
                                    task,
                                    events,
                                    tool_calls
                                )
                                .fetch_one(&mut *conn)
                                .await?;
                                Some(
                                    crate::rows::decode_task_counted(&c.agent, task, *n, &row)
                                        .map_err(decode)?,
                                )
                            }
                        };
                        counted.push(crate::model::Counted {
                            agent: c.agent.clone(),
                            n: c.n,
                            totals,
                            task,
                        });
                    }
                    Encoded::Idempotency(i) => {
                        sqlx::query(
                            "INSERT INTO idempotency (key, status, headers, body, content_type, \
                             created_ms, request_hash) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                             ON CONFLICT (key) DO NOTHING",
                        )
                        .bind(&i.key)
                        .bind(i.resp.status)
                        .bind(&i.resp.headers)
                        .bind(&i.resp.body)
                        .bind(&i.resp.content_type)
                        .bind(i.created_ms)
                        .bind(&i.request_hash)
                        .execute(&mut *conn)
                        .await?;
                    }
                    Encoded::Checkpoint(c) => {
                        sqlx::query(
                            "INSERT INTO checkpoints (agent, id, task, parent, body, sha256, \
                             created_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                             ON CONFLICT (agent, id) DO NOTHING",
                        )
                        .bind(&c.agent)
                        .bind(&c.id)
                        .bind(&c.task)
                        .bind(&c.parent)
                        .bind(&c.body)
                        .bind(&c.sha256)
                        .bind(c.created_ms)
                        .execute(&mut *conn)
                        .await?;
                    }
                    Encoded::Job(j) => {
                        sqlx::query(
                            "UPDATE jobs SET status = $2, next_attempt_ms = $3, updated_ms = $4, \
                             body = $5 WHERE job_id = $1",
                        )
                        .bind(&j.job_id)
                        .bind(&j.status)
                        .bind(j.next_attempt_ms)
                        .bind(j.updated_ms)
                        .bind(&j.body)
                        .execute(&mut *conn)
                        .await?;
                    }
                    Encoded::Announce(payload) => {
                        if $pg {
                            sqlx::query(
                                "SELECT pg_notify($1, jsonb_set($2::jsonb, '{schema}', \
                                 to_jsonb(current_schema()))::text)",
                            )
                                .bind(AGENTS_CHANNEL)
                                .bind(payload)
                                .execute(&mut *conn)
                                .await?;
                        }
                    }
                    Encoded::Response(r) => {
                        sqlx::query(
                            "INSERT INTO responses (id, agent, turn_id, created_ms, previous_id, \
                             provider, model, provider_id, input, response) VALUES ($1, $2, $3, \
                             $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (id) DO UPDATE SET \
                             agent = excluded.agent, turn_id = excluded.turn_id, \
                             created_ms = excluded.created_ms, previous_id = excluded.previous_id, \
                             provider = excluded.provider, model = excluded.model, \
                             provider_id = excluded.provider_id, input = excluded.input, \
                             response = excluded.response",
                        )
                        .bind(&r.id)
                        .bind(&r.agent)
                        .bind(&r.turn_id)
                        .bind(r.created_ms)
                        .bind(&r.previous_id)
                        .bind(&r.provider)
                        .bind(&r.model)
                        .bind(&r.provider_id)
                        .bind(&r.input)
                        .bind(&r.response)
                        .execute(&mut *conn)
                        .await?;
                    }
                    Encoded::Audit(a) => {
                        sqlx::query(
                            "INSERT INTO job_audit (job_id, time_ms, status, degraded, body) \
                             VALUES ($1, $2, $3, $4, $5)",
                        )
                        .bind(&a.job_id)
                        .bind(a.time_ms)
                        .bind(&a.status)
                        .bind(a.degraded)
                        .bind(&a.body)
                        .execute(&mut *conn)
                        .await?;
                    }
                }
            }
            write_counts(&mut *conn, &mut held, &mut counted).await?;
            let mut max_seq = None;
            // A multi-row INSERT must not name one id twice (PostgreSQL
            // refuses a row affected twice); a repeat in the same chunk goes
            // to a later chunk, where ON CONFLICT skips it.
            let mut rest: Vec<&EventRow> = events;
            while !rest.is_empty() {
                let mut seen = HashSet::new();
                let mut chunk = Vec::with_capacity(EVENT_CHUNK.min(rest.len()));
                let mut later = Vec::new();
                for e in rest {
                    if chunk.len() < EVENT_CHUNK && seen.insert(e.id.as_str()) {
                        chunk.push(e);
                    } else {
                        later.push(e);
                    }
                }
                rest = later;
                // PostgreSQL: the same statement wakes every instance's
                // relays (`NOTIFY hale_events` at commit; repeats of one
                // payload in a transaction are delivered once).
                let mut qb = QueryBuilder::<$db>::new(if $pg {
                    "WITH ins AS (INSERT INTO events (id, kind, time_ms, agent, body) "
                } else {
                    "INSERT INTO events (id, kind, time_ms, agent, body) "
                });
                qb.push_values(&chunk, |mut b, e| {
                    b.push_bind(&e.id)
                        .push_bind(e.kind)
                        .push_bind(e.time_ms)
                        .push_bind(&e.agent)
                        .push_bind(&e.body);
                });
                qb.push(" ON CONFLICT (id) DO NOTHING RETURNING seq");
                if $pg {
                    qb.push(") SELECT ins.seq FROM ins CROSS JOIN (SELECT pg_notify('");
                    qb.push(EVENTS_CHANNEL);
                    qb.push("', '')) AS n");
                }
                let seqs: Vec<i64> = qb.build_query_scalar().fetch_all(&mut *conn).await?;
                if let Some(m) = seqs.into_iter().max() {
                    max_seq = Some(max_seq.map_or(m, |x: i64| x.max(m)));
                }
            }
            // PostgreSQL: every instance hears the totals after these counts
            // (`NOTIFY hale_counts` at commit), so its view of the agents
            // converges without traffic of its own.
            if $pg {
                for payload in counts_payloads(&counted) {
                    sqlx::query(
                        "SELECT pg_notify($1, jsonb_set($2::jsonb, '{schema}', \
                         to_jsonb(current_schema()))::text)",
                    )
                    .bind(COUNTS_CHANNEL)
                    .bind(payload)
                    .execute(&mut *conn)
                    .await?;
                }
            }
            Ok(Applied { max_seq, counted })
        }
    };
}

gen_apply!(apply_sqlite, sqlx::Sqlite, false);
gen_apply!(apply_pg, sqlx::Postgres, true);

/// What a committed transaction did.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    /// The highest outbox seq appended.
    pub max_seq: Option<i64>,
    /// The totals after each count, in order.
    pub counted: Vec<crate::model::Counted>,
}

/// The group-commit writer's page cache, in KiB: SQLite's default (2,000
/// KiB), on its one connection only. A busy batch touches more pages than
/// 512 KiB hold (at c=64 each of 64 agents' places in `turns_replay`, its
/// `agents` and `task_spend` rows and their indexes): with 128 pages the
/// writer spilled dirty pages to the WAL in the middle of its transactions
/// and read them back, ~3 `pwrite64` and ~2 `pread64` per turn (issue 30;
/// BENCHMARKS.md, "By thread and syscalls", has the figures since). Only pages the
/// writer touches fill it, and what it caches is never written anywhere else,
/// so durability is as before.
pub(crate) const SQLITE_WRITER_CACHE_KIB: u32 = 2000;

/// Where the writer's transactions run.
///
/// SQLite: a connection of the writer's own, opened with the pool's options
/// and kept. A connection's page cache is dropped whenever another
/// connection wrote since its last transaction; borrowing whichever of the
/// pool's connections was idle (the pool hands them out in turn) meant every
/// commit started on a stale cache and read its pages back from the WAL
/// (measured with callgrind at stop 24: ~13 page reads per turn). Its own
/// connection sees only its own commits, so its cache stays warm, and its
/// statement cache is the one that is always hit. Dropped after an error
/// that is not the database refusing a statement, and opened again.
///
/// PostgreSQL: the pool, as before (its caches live in the server).
#[derive(Debug)]
pub(crate) enum WriterConn {
    Sqlite {
        pool: SqlitePool,
        conn: Option<sqlx::SqliteConnection>,
    },
    Pg(PgPool),
}

impl WriterConn {
    pub(crate) fn new(pool: &Pool) -> Self {
        match pool {
            Pool::Sqlite(p) => WriterConn::Sqlite {
                pool: p.clone(),
                conn: None,
            },
            Pool::Pg(p) => WriterConn::Pg(p.clone()),
        }
    }

    /// Gives back what a burst left in SQLite's page caches: `PRAGMA
    /// shrink_memory` on the writer's own connection and on each of the
    /// pool's idle ones (a busy one keeps its cache: it is in use), then
    /// the C heap they live in is trimmed (`hale_alloc::trim_c_heap`).
    /// PostgreSQL's caches live in the server: nothing to do (the writer
    /// still counts the quiet spell). A failure
    /// costs nothing but the memory, so it is only logged.
    pub(crate) async fn release_memory(&mut self) {
        let WriterConn::Sqlite { pool, conn } = self else {
            return;
        };
        const SHRINK: &str = "PRAGMA shrink_memory";
        if let Some(c) = conn.as_mut()
            && let Err(e) = sqlx::query(SHRINK).execute(&mut *c).await
        {
            tracing::debug!(error = %e, "shrinking the writer's page cache failed");
        }
        let mut idle = Vec::new();
        while let Some(c) = pool.try_acquire() {
            idle.push(c);
        }
        for c in &mut idle {
            if let Err(e) = sqlx::query(SHRINK).execute(&mut **c).await {
                tracing::debug!(error = %e, "shrinking a reader's page cache failed");
            }
        }
        drop(idle);
        hale_alloc::trim_c_heap();
    }

    /// Closes the writer's own SQLite connection (at `close()`).
    pub(crate) async fn close(&mut self) {
        if let WriterConn::Sqlite { conn, .. } = self
            && let Some(c) = conn.take()
        {
            let _ = sqlx::Connection::close(c).await;
        }
    }
}

/// A failed group commit: the error, and where in the transaction it
/// failed (`hale_core::memory::store_retry_after` decides from both
/// whether the writer tries it again).
#[derive(Debug)]
pub(crate) struct ApplyError {
    pub(crate) stage: WriteStage,
    pub(crate) source: sqlx::Error,
}

impl ApplyError {
    fn at(stage: WriteStage) -> impl FnOnce(sqlx::Error) -> Self {
        move |source| ApplyError { stage, source }
    }

    /// The error was the connection's, not the statement's: it was reset
    /// or refused, or the server is shutting down, starting up or full.
    pub(crate) fn connection_lost(&self) -> bool {
        use sqlx::Error as E;
        match &self.source {
            E::Io(_) | E::Tls(_) | E::Protocol(_) | E::PoolTimedOut | E::WorkerCrashed => true,
            // PostgreSQL's connection exceptions (class 08), a server
            // shutting down or starting (57P01–57P03), too many clients.
            E::Database(d) => d.code().is_some_and(|c| {
                c.starts_with("08") || matches!(c.as_ref(), "57P01" | "57P02" | "57P03" | "53300")
            }),
            E::Configuration(_)
            | E::InvalidArgument(_)
            | E::RowNotFound
            | E::TypeNotFound { .. }
            | E::ColumnIndexOutOfBounds { .. }
            | E::ColumnNotFound(_)
            | E::ColumnDecode { .. }
            | E::Encode(_)
            | E::Decode(_)
            | E::AnyDriverError(_)
            | E::PoolClosed
            | E::Migrate(_)
            | E::InvalidSavePointStatement
            | E::BeginFailed
            | E::ConfigFile(_) => false,
            // sqlx::Error is non_exhaustive: a kind added later is taken
            // as the statement's own, which fails as before (not retried).
            _ => false,
        }
    }
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.source.fmt(f)
    }
}

impl std::error::Error for ApplyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Applies `jobs` in one transaction and commits it.
pub(crate) async fn apply(w: &mut WriterConn, jobs: &[&[Encoded]]) -> Result<Applied, ApplyError> {
    use WriteStage::{Commit, Connect, Statements};
    match w {
        WriterConn::Sqlite { pool, conn } => {
            let c = match conn {
                Some(c) => c,
                None => {
                    // Named, so its CPU can be told from the readers'
                    // (hale-bench's cpu columns); its page cache holds a
                    // busy batch's pages ([`SQLITE_WRITER_CACHE_KIB`]).
                    let opts = (*pool.connect_options())
                        .clone()
                        .thread_name(|id| format!("hale-journal-{id}"))
                        .pragma("cache_size", format!("-{SQLITE_WRITER_CACHE_KIB}"))
                        // A multi-row upsert (the turn rows) needs a
                        // statement journal, the pages it changed as they
                        // were, to undo that one statement should it fail;
                        // past 64 KiB SQLite spilled it to a file in
                        // /var/tmp, ~6 pwrite64 a turn at c=64 (issue 30,
                        // stop 36). It lives while its statement runs and
                        // plays no part in crash recovery (the WAL's), so
                        // in memory durability is as before.
                        .pragma("temp_store", "MEMORY")
                        // A query of counts sends back 4 results a count
                        // (count_sqlite_sql): room for a whole query's, so
                        // the connection's thread never waits on a full
                        // channel in the middle of one.
                        .row_buffer_size(4 * COUNT_CHUNK);
                    let fresh = sqlx::ConnectOptions::connect(&opts)
                        .await
                        .map_err(ApplyError::at(Connect))?;
                    conn.insert(fresh)
                }
            };
            let result: Result<Applied, ApplyError> = async {
                let mut tx = sqlx::Connection::begin_with(&mut *c, "BEGIN IMMEDIATE")
                    .await
                    .map_err(ApplyError::at(Statements))?;
                let applied = apply_sqlite(&mut tx, jobs)
                    .await
                    .map_err(ApplyError::at(Statements))?;
                tx.commit().await.map_err(ApplyError::at(Commit))?;
                Ok(applied)
            }
            .await;
            if let Err(e) = &result
                && !matches!(e.source, sqlx::Error::Database(_))
            {
                *conn = None; // a broken connection: a fresh one next time
            }
            result
        }
        WriterConn::Pg(p) => {
            let mut tx = p.begin().await.map_err(ApplyError::at(Connect))?;
            let applied = apply_pg(&mut tx, jobs)
                .await
                .map_err(ApplyError::at(Statements))?;
            tx.commit().await.map_err(ApplyError::at(Commit))?;
            Ok(applied)
        }
    }
}

/// The highest seq in the outbox (0 when it is empty).
pub(crate) async fn last_seq(pool: &Pool) -> Result<i64, StoreError> {
    on_pool!(pool, |p, _Db| {
        let v: Option<i64> = sqlx::query_scalar("SELECT MAX(seq) FROM events")
            .fetch_one(p)
            .await
            .map_err(StoreError::db("reading the last outbox seq"))?;
        Ok(v.unwrap_or(0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The writer's own SQLite connection gets its larger page cache and
    /// in-memory temp files, the pool's connections keep their cache.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sqlite_writer_has_its_own_larger_page_cache_and_memory_temp_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(dir.path().join("w.db"))
            .create_if_missing(true)
            .pragma("cache_size", "-512");
        let pool = SqlitePool::connect_with(opts).await.expect("pool");
        let mut w = WriterConn::new(&Pool::Sqlite(pool.clone()));
        apply(&mut w, &[]).await.expect("an empty batch");
        let WriterConn::Sqlite { conn: Some(c), .. } = &mut w else {
            panic!("the writer opened its connection");
        };
        let kib: i64 = sqlx::query_scalar("PRAGMA cache_size")
            .fetch_one(&mut *c)
            .await
            .expect("pragma");
        assert_eq!(kib, -i64::from(SQLITE_WRITER_CACHE_KIB));
        // Its statement journals stay in memory (2: MEMORY).
        let temp: i64 = sqlx::query_scalar("PRAGMA temp_store")
            .fetch_one(&mut *c)
            .await
            .expect("pragma");
        assert_eq!(temp, 2);
        let kib: i64 = sqlx::query_scalar("PRAGMA cache_size")
            .fetch_one(&pool)
            .await
            .expect("pragma");
        assert_eq!(kib, -512);
        w.close().await;
    }

    /// PostgreSQL's turn upsert is the one-row statement, numbered `$1` to
    /// `$18` (PostgreSQL has no anonymous placeholder).
    #[test]
    fn postgres_turn_upsert_is_one_row_numbered() {
        let sql = turn_insert_sql(1, true);
        assert_eq!(sql.matches('(').count(), 3);
        assert!(sql.contains(&format!("${TURN_COLUMNS})")));
        assert!(!sql.contains('?'));
        // A PostgreSQL batch never asks for more rows; if it did, it gets
        // the one-row text rather than a statement of the wrong size.
        assert_eq!(turn_insert_sql(4, true), sql);
    }

    proptest! {
        /// The statements of a batch's turn rows hold every row once, in
        /// the batch's order; none names an id twice (so the later write of
        /// an id lands in a later statement and wins); each holds a power of
        /// two of rows, at most TURN_CHUNK, whose statement text exists.
        #[test]
        fn turn_chunks_keep_order_never_repeat_an_id_and_have_cached_sizes(
            ids in proptest::collection::vec(0u8..40, 0..200),
        ) {
            let rows: Vec<String> = ids.iter().map(|i| format!("t{i}")).collect();
            let chunks = turn_chunks(&rows, |r| r.as_str());
            let flat: Vec<&String> = chunks.iter().flat_map(|c| c.iter()).collect();
            prop_assert_eq!(flat, rows.iter().collect::<Vec<_>>());
            for c in &chunks {
                prop_assert!(c.len().is_power_of_two() && c.len() <= TURN_CHUNK);
                let distinct: HashSet<&str> = c.iter().map(String::as_str).collect();
                prop_assert_eq!(distinct.len(), c.len());
                let sql = turn_insert_sql(c.len(), false);
                // The column list, a group per row, ON CONFLICT (id).
                prop_assert_eq!(sql.matches('(').count(), c.len() + 2);
                // Anonymous placeholders only (a numbered one makes SQLite
                // walk its list of names at each bind), one per column.
                prop_assert_eq!(sql.matches('?').count(), c.len() * TURN_COLUMNS);
                prop_assert!(!sql.contains('$'));
            }
            // As few statements as the rule allows: a run without repeats
            // costs its binary decomposition (a batch of 37 distinct turns:
            // 32 + 4 + 1).
            if rows.iter().collect::<HashSet<_>>().len() == rows.len() {
                let full = rows.len() / TURN_CHUNK;
                let rest = (rows.len() % TURN_CHUNK).count_ones() as usize;
                prop_assert_eq!(chunks.len(), full + rest);
            }
        }

        /// A batch's counts go in order, in queries of one kind (with a
        /// task or without) and a power of two of counts up to
        /// COUNT_CHUNK, each text that many counts' statements and
        /// anonymous binds.
        #[test]
        fn count_chunks_keep_order_and_kind_and_have_cached_sizes(
            kinds in proptest::collection::vec(proptest::bool::weighted(0.8), 0..100),
        ) {
            let counts: Vec<(usize, bool)> = kinds.iter().copied().enumerate().collect();
            let chunks = count_chunks(&counts, |c| c.1);
            let flat: Vec<(usize, bool)> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
            prop_assert_eq!(&flat, &counts);
            for c in &chunks {
                prop_assert!(c.len().is_power_of_two() && c.len() <= COUNT_CHUNK);
                let task = c[0].1;
                prop_assert!(c.iter().all(|x| x.1 == task));
                let sql = count_sqlite_sql(c.len(), task);
                let (binds, statements) = if task { (20, 3) } else { (11, 2) };
                prop_assert_eq!(sql.matches('?').count(), c.len() * binds);
                prop_assert_eq!(sql.matches(';').count(), c.len() * statements);
                prop_assert!(!sql.contains('$'));
            }
            // As few queries as the rule allows: each run of one kind
            // costs its binary decomposition by COUNT_CHUNK.
            let mut want = 0;
            for run in kinds.chunk_by(|a, b| a == b) {
                want += run.len() / COUNT_CHUNK + (run.len() % COUNT_CHUNK).count_ones() as usize;
            }
            prop_assert_eq!(chunks.len(), want);
        }
    }
}
