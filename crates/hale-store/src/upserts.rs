//! The SQL of the upserts that both of the writer's paths run: one row per
//! statement (backend.rs, both backends) and many rows per statement
//! (bulk.rs, SQLite). Each is the statement's head (`… VALUES `) and its
//! tail (` ON CONFLICT …`), as macros so the one-row texts stay literals
//! (`concat!`) and the two paths cannot drift apart.

/// `turns`: 18 binds a row, a whole-row upsert (the last write wins).
macro_rules! turn_insert {
    () => {
        "INSERT INTO turns (id, agent, task, request_hash, model_requested, \
         status, started_ms, duration_ms, provider, model, attempts, usage_in, \
         usage_out, error_class, resp_status, resp_headers, resp_body, \
         resp_content_type) VALUES "
    };
}
macro_rules! turn_upsert {
    () => {
        " ON CONFLICT (id) DO UPDATE SET \
         agent = excluded.agent, task = excluded.task, \
         request_hash = excluded.request_hash, \
         model_requested = excluded.model_requested, status = excluded.status, \
         started_ms = excluded.started_ms, duration_ms = excluded.duration_ms, \
         provider = excluded.provider, model = excluded.model, \
         attempts = excluded.attempts, usage_in = excluded.usage_in, \
         usage_out = excluded.usage_out, error_class = excluded.error_class, \
         resp_status = excluded.resp_status, \
         resp_headers = excluded.resp_headers, resp_body = excluded.resp_body, \
         resp_content_type = excluded.resp_content_type"
    };
}

/// `history_minutes`: 5 binds a row, added to the minute's row.
macro_rules! minute_insert {
    () => {
        "INSERT INTO history_minutes (deployment, minute_ms, calls, \
         failures, latency_sum_ms) VALUES "
    };
}
macro_rules! minute_upsert {
    () => {
        " ON CONFLICT (deployment, minute_ms) DO UPDATE SET \
         calls = history_minutes.calls + excluded.calls, \
         failures = history_minutes.failures + excluded.failures, \
         latency_sum_ms = history_minutes.latency_sum_ms + excluded.latency_sum_ms"
    };
}

/// `task_spend`: 7 binds a row (agent, task, tokens, cost, events, tool
/// calls, now), added to the task's row.
macro_rules! spend_insert {
    () => {
        "INSERT INTO task_spend (agent, task, tokens, cost_usd, \
         events, tool_calls, updated_ms) VALUES "
    };
}
macro_rules! spend_upsert {
    () => {
        " ON CONFLICT (agent, task) DO UPDATE SET \
         tokens = task_spend.tokens + excluded.tokens, \
         cost_usd = task_spend.cost_usd + excluded.cost_usd, \
         events = task_spend.events + excluded.events, \
         tool_calls = task_spend.tool_calls + excluded.tool_calls, \
         updated_ms = excluded.updated_ms"
    };
}

/// A count's `agents` upsert after its `consecutive_failures = …` (which
/// depends on the count's `StreakChange`): the counters added, the last
/// failure kept unless the count has one, the last seen time moved by a
/// count of turns only.
macro_rules! agent_count_rest {
    () => {
        ", turns = agents.turns + excluded.turns, \
         failed_turns = agents.failed_turns + excluded.failed_turns, \
         tokens_in = agents.tokens_in + excluded.tokens_in, \
         tokens_out = agents.tokens_out + excluded.tokens_out, \
         cost_usd = agents.cost_usd + excluded.cost_usd, \
         last_failure_ms = COALESCE(excluded.last_failure_ms, \
         agents.last_failure_ms), last_seen_ms = CASE WHEN \
         excluded.turns > 0 THEN excluded.last_seen_ms ELSE \
         agents.last_seen_ms END"
    };
}

pub(crate) use {
    agent_count_rest, minute_insert, minute_upsert, spend_insert, spend_upsert, turn_insert,
    turn_upsert,
};
