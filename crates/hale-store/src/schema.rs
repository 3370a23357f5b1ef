//! The schema, once per backend.
//!
//! Two short DDL lists instead of a migration framework: the tables are
//! created with `IF NOT EXISTS` at open, and `meta.schema_version` records the
//! version so a future change can migrate. The differences between the two
//! backends are only the types: `INTEGER PRIMARY KEY AUTOINCREMENT` /
//! `BIGSERIAL` for the outbox seq (AUTOINCREMENT so a seq is never reused
//! after the outbox was pruned empty — sink cursors rely on it), `BLOB` /
//! `BYTEA`, `REAL` / `DOUBLE PRECISION`. Every number is 64-bit. JSON is
//! stored as text so both backends decode it the same way.
//!
//! A nullable column added later is not a version change (an older hale
//! names its columns and ignores it): it is in the `CREATE TABLE` for new
//! stores and added at open to stores created before it — PostgreSQL with
//! `ADD COLUMN IF NOT EXISTS` in the DDL list, SQLite (which has no such
//! clause) from [`SQLITE_ADDED_COLUMNS`] after a look at `pragma_table_info`.
//! Rows written before the column existed read it as `NULL`.

/// The version these statements create.
pub const SCHEMA_VERSION: i64 = 1;

/// SQLite DDL.
pub(crate) const SQLITE: &[&str] = &[
    // Scale-out: instance heartbeats and leases for singleton work (src/cluster.rs).
    "CREATE TABLE IF NOT EXISTS instances (
        id TEXT PRIMARY KEY,
        addr TEXT NOT NULL,
        pid INTEGER NOT NULL,
        version TEXT NOT NULL,
        started_ms INTEGER NOT NULL,
        heartbeat_ms INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS leases (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        expires_ms INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        time_ms INTEGER NOT NULL,
        agent TEXT,
        body TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS events_kind ON events (kind, seq)",
    "CREATE TABLE IF NOT EXISTS sinks (
        name TEXT PRIMARY KEY,
        acked_seq INTEGER NOT NULL,
        registered_ms INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS dead_letters (
        sink TEXT NOT NULL,
        seq INTEGER NOT NULL,
        event_id TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        error TEXT NOT NULL,
        failed_ms INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (sink, seq))",
    "CREATE TABLE IF NOT EXISTS turns (
        id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        task TEXT,
        request_hash TEXT NOT NULL,
        model_requested TEXT NOT NULL,
        status TEXT NOT NULL,
        started_ms INTEGER NOT NULL,
        duration_ms INTEGER,
        provider TEXT,
        model TEXT,
        attempts TEXT NOT NULL,
        usage_in INTEGER NOT NULL,
        usage_out INTEGER NOT NULL,
        error_class TEXT,
        resp_status INTEGER,
        resp_headers TEXT,
        resp_body BLOB,
        resp_content_type TEXT)",
    "CREATE INDEX IF NOT EXISTS turns_replay ON turns (agent, task, request_hash, started_ms)",
    "CREATE TABLE IF NOT EXISTS agents (
        id TEXT PRIMARY KEY,
        paused BOOLEAN NOT NULL,
        consecutive_failures INTEGER NOT NULL,
        turns INTEGER NOT NULL,
        failed_turns INTEGER NOT NULL,
        tokens_in INTEGER NOT NULL,
        tokens_out INTEGER NOT NULL,
        cost_usd REAL NOT NULL,
        last_failure_ms INTEGER,
        last_seen_ms INTEGER,
        state TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS idempotency (
        key TEXT PRIMARY KEY,
        status INTEGER NOT NULL,
        headers TEXT NOT NULL,
        body BLOB NOT NULL,
        content_type TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        request_hash TEXT)",
    "CREATE INDEX IF NOT EXISTS idempotency_age ON idempotency (created_ms)",
    "CREATE TABLE IF NOT EXISTS checkpoints (
        agent TEXT NOT NULL,
        id TEXT NOT NULL,
        task TEXT NOT NULL,
        parent TEXT,
        body BLOB NOT NULL,
        sha256 TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        PRIMARY KEY (agent, id))",
    "CREATE INDEX IF NOT EXISTS checkpoints_task ON checkpoints (agent, task, created_ms)",
    // Tool jobs and their audit log (src/jobs.rs).
    "CREATE TABLE IF NOT EXISTS jobs (
        job_id TEXT PRIMARY KEY,
        status TEXT NOT NULL,
        next_attempt_ms INTEGER,
        updated_ms INTEGER NOT NULL,
        body TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status, next_attempt_ms)",
    "CREATE TABLE IF NOT EXISTS job_audit (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id TEXT NOT NULL,
        time_ms INTEGER NOT NULL,
        status TEXT NOT NULL,
        degraded BOOLEAN NOT NULL,
        body TEXT NOT NULL)",
    // Health history (src/history.rs).
    "CREATE TABLE IF NOT EXISTS history_transitions (
        id TEXT PRIMARY KEY,
        time_ms INTEGER NOT NULL,
        kind TEXT NOT NULL,
        agent TEXT,
        deployment TEXT,
        body TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS history_transitions_time ON history_transitions (time_ms)",
    "CREATE TABLE IF NOT EXISTS history_minutes (
        deployment TEXT NOT NULL,
        minute_ms INTEGER NOT NULL,
        calls INTEGER NOT NULL,
        failures INTEGER NOT NULL,
        latency_sum_ms INTEGER NOT NULL,
        PRIMARY KEY (deployment, minute_ms))",
    "CREATE INDEX IF NOT EXISTS history_minutes_time ON history_minutes (minute_ms)",
    // Each task's spend, counted once across instances (hale_core::counts).
    "CREATE TABLE IF NOT EXISTS task_spend (
        agent TEXT NOT NULL,
        task TEXT NOT NULL,
        tokens INTEGER NOT NULL,
        cost_usd REAL NOT NULL,
        events INTEGER NOT NULL,
        tool_calls INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL,
        PRIMARY KEY (agent, task))",
    "CREATE INDEX IF NOT EXISTS task_spend_age ON task_spend (updated_ms)",
    // In-flight Idempotency-Keys claimed across instances (src/idem.rs).
    "CREATE TABLE IF NOT EXISTS idempotency_claims (
        key TEXT PRIMARY KEY,
        request_hash TEXT NOT NULL,
        holder TEXT NOT NULL,
        expires_ms INTEGER NOT NULL)",
    // Responses API answers kept for previous_response_id (src/responses.rs).
    "CREATE TABLE IF NOT EXISTS responses (
        id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        turn_id TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        previous_id TEXT,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        provider_id TEXT,
        input TEXT NOT NULL,
        response TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS responses_age ON responses (created_ms)",
];

/// Columns added to SQLite tables after their first release: (table,
/// column, type). Added at open when missing.
pub(crate) const SQLITE_ADDED_COLUMNS: &[(&str, &str, &str)] =
    &[("idempotency", "request_hash", "TEXT")];

/// PostgreSQL DDL.
pub(crate) const POSTGRES: &[&str] = &[
    // Scale-out: instance heartbeats and leases for singleton work (src/cluster.rs).
    "CREATE TABLE IF NOT EXISTS instances (
        id TEXT PRIMARY KEY,
        addr TEXT NOT NULL,
        pid BIGINT NOT NULL,
        version TEXT NOT NULL,
        started_ms BIGINT NOT NULL,
        heartbeat_ms BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS leases (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        expires_ms BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS events (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        time_ms BIGINT NOT NULL,
        agent TEXT,
        body TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS events_kind ON events (kind, seq)",
    "CREATE TABLE IF NOT EXISTS sinks (
        name TEXT PRIMARY KEY,
        acked_seq BIGINT NOT NULL,
        registered_ms BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS dead_letters (
        sink TEXT NOT NULL,
        seq BIGINT NOT NULL,
        event_id TEXT NOT NULL,
        attempts BIGINT NOT NULL,
        error TEXT NOT NULL,
        failed_ms BIGINT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (sink, seq))",
    "CREATE TABLE IF NOT EXISTS turns (
        id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        task TEXT,
        request_hash TEXT NOT NULL,
        model_requested TEXT NOT NULL,
        status TEXT NOT NULL,
        started_ms BIGINT NOT NULL,
        duration_ms BIGINT,
        provider TEXT,
        model TEXT,
        attempts TEXT NOT NULL,
        usage_in BIGINT NOT NULL,
        usage_out BIGINT NOT NULL,
        error_class TEXT,
        resp_status BIGINT,
        resp_headers TEXT,
        resp_body BYTEA,
        resp_content_type TEXT)",
    "CREATE INDEX IF NOT EXISTS turns_replay ON turns (agent, task, request_hash, started_ms)",
    "CREATE TABLE IF NOT EXISTS agents (
        id TEXT PRIMARY KEY,
        paused BOOLEAN NOT NULL,
        consecutive_failures BIGINT NOT NULL,
        turns BIGINT NOT NULL,
        failed_turns BIGINT NOT NULL,
        tokens_in BIGINT NOT NULL,
        tokens_out BIGINT NOT NULL,
        cost_usd DOUBLE PRECISION NOT NULL,
        last_failure_ms BIGINT,
        last_seen_ms BIGINT,
        state TEXT NOT NULL)",
    // Pages of `GET /agents` walk the ids in byte order (`Store::agents_page`),
    // which the primary key's index serves only under the C collation.
    "CREATE INDEX IF NOT EXISTS agents_by_bytes ON agents (id COLLATE \"C\")",
    "CREATE TABLE IF NOT EXISTS idempotency (
        key TEXT PRIMARY KEY,
        status BIGINT NOT NULL,
        headers TEXT NOT NULL,
        body BYTEA NOT NULL,
        content_type TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        request_hash TEXT)",
    "ALTER TABLE idempotency ADD COLUMN IF NOT EXISTS request_hash TEXT",
    "CREATE INDEX IF NOT EXISTS idempotency_age ON idempotency (created_ms)",
    "CREATE TABLE IF NOT EXISTS checkpoints (
        agent TEXT NOT NULL,
        id TEXT NOT NULL,
        task TEXT NOT NULL,
        parent TEXT,
        body BYTEA NOT NULL,
        sha256 TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        PRIMARY KEY (agent, id))",
    "CREATE INDEX IF NOT EXISTS checkpoints_task ON checkpoints (agent, task, created_ms)",
    // Tool jobs and their audit log (src/jobs.rs).
    "CREATE TABLE IF NOT EXISTS jobs (
        job_id TEXT PRIMARY KEY,
        status TEXT NOT NULL,
        next_attempt_ms BIGINT,
        updated_ms BIGINT NOT NULL,
        body TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status, next_attempt_ms)",
    "CREATE TABLE IF NOT EXISTS job_audit (
        seq BIGSERIAL PRIMARY KEY,
        job_id TEXT NOT NULL,
        time_ms BIGINT NOT NULL,
        status TEXT NOT NULL,
        degraded BOOLEAN NOT NULL,
        body TEXT NOT NULL)",
    // Health history (src/history.rs).
    "CREATE TABLE IF NOT EXISTS history_transitions (
        id TEXT PRIMARY KEY,
        time_ms BIGINT NOT NULL,
        kind TEXT NOT NULL,
        agent TEXT,
        deployment TEXT,
        body TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS history_transitions_time ON history_transitions (time_ms)",
    "CREATE TABLE IF NOT EXISTS history_minutes (
        deployment TEXT NOT NULL,
        minute_ms BIGINT NOT NULL,
        calls BIGINT NOT NULL,
        failures BIGINT NOT NULL,
        latency_sum_ms BIGINT NOT NULL,
        PRIMARY KEY (deployment, minute_ms))",
    "CREATE INDEX IF NOT EXISTS history_minutes_time ON history_minutes (minute_ms)",
    "CREATE TABLE IF NOT EXISTS task_spend (
        agent TEXT NOT NULL,
        task TEXT NOT NULL,
        tokens BIGINT NOT NULL,
        cost_usd DOUBLE PRECISION NOT NULL,
        events BIGINT NOT NULL,
        tool_calls BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL,
        PRIMARY KEY (agent, task))",
    "CREATE INDEX IF NOT EXISTS task_spend_age ON task_spend (updated_ms)",
    // In-flight Idempotency-Keys claimed across instances (src/idem.rs).
    "CREATE TABLE IF NOT EXISTS idempotency_claims (
        key TEXT PRIMARY KEY,
        request_hash TEXT NOT NULL,
        holder TEXT NOT NULL,
        expires_ms BIGINT NOT NULL)",
    // Responses API answers kept for previous_response_id (src/responses.rs).
    "CREATE TABLE IF NOT EXISTS responses (
        id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        turn_id TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        previous_id TEXT,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        provider_id TEXT,
        input TEXT NOT NULL,
        response TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS responses_age ON responses (created_ms)",
];
