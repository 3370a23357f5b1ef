//! The SQLite writer's multi-row statements: a batch's rows of one table in
//! a few statements instead of one per row.
//!
//! Why: under load a group commit holds tens of turns, and each turn cost
//! the writer five statements (its `turns` upsert, the count's `agents` and
//! `task_spend` upserts and their read-backs), each a round trip to sqlx's
//! SQLite thread and a run of SQLite's statement machinery. Here the
//! batch's turns, its counts and its history minutes take one statement per
//! table and chunk, and the totals after the counts are read back with one
//! `SELECT` per table and chunk.
//!
//! What is kept from the per-row path (backend.rs, `gen_apply!`):
//! - Order where it matters. Rows of different keys commute. SQLite applies
//!   the rows of one `INSERT … VALUES (…), (…) ON CONFLICT` one after the
//!   other, a row conflicting with one the same statement inserted included,
//!   so a turn or a minute named twice ends as it did row by row (the last
//!   turn wins, minutes add up). PostgreSQL refuses a row affected twice in
//!   one statement, which is one reason it keeps the per-row path.
//! - Counts: only an agent that the batch names exactly once among the rows
//!   it writes to `agents` and `task_spend` (one count or merged run, no
//!   whole record, no forgotten task) is counted here; any other agent's
//!   rows keep the per-row path in their order, since a whole record and a
//!   count of one agent do not commute (first write creates the row, the
//!   last seen and last failure times). So an agent's totals read back
//!   after the bulk upsert are those after its one count.
//! - The count's `StreakChange`: `Set` and `Add` take two statement texts,
//!   as a row's `$9` cannot be read in `DO UPDATE` of a multi-row statement.
//!
//! Chunks have fixed sizes ([`CHUNKS`]: a batch's n rows take the binary
//! decomposition of n, at most 64 rows per statement), so each
//! table has a handful of statement texts, built once ([`sql`]) and then
//! found in the writer connection's statement cache.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use hale_core::counts::StreakChange;

use crate::model::Counted;
use crate::rows::{CountRow, Encoded, MinuteCols, TurnRow};

/// Rows per statement, largest first (powers of two: n rows take at most
/// one statement per size below the largest). At most 64 rows: 18 binds a
/// turn, 1,152 binds in a statement (SQLite's limit is 32,766).
const CHUNKS: [usize; 7] = [64, 32, 16, 8, 4, 2, 1];

/// Splits `rows` into chunks of the sizes in [`CHUNKS`], in order.
fn chunks<T>(mut rows: &[T]) -> Vec<&[T]> {
    let mut out = Vec::new();
    while !rows.is_empty() {
        let size = CHUNKS
            .iter()
            .copied()
            .find(|&c| c <= rows.len())
            .unwrap_or(1);
        let (head, rest) = rows.split_at(size);
        out.push(head);
        rows = rest;
    }
    out
}

/// The statement families written here.
#[derive(Clone, Copy)]
enum Family {
    Turns,
    Minutes,
    CountSet,
    CountAdd,
    AgentTotals,
    Spend,
    SpendTotals,
}
const FAMILIES: usize = 7;

/// `$1, $2, …` for `n` rows of `per_row` binds, each row `(…{literal})`.
fn values(rows: usize, per_row: usize, literal: &str) -> String {
    let mut s = String::new();
    for r in 0..rows {
        if r > 0 {
            s.push_str(", ");
        }
        s.push('(');
        for p in 0..per_row {
            if p > 0 {
                s.push_str(", ");
            }
            s.push('$');
            s.push_str(&(r * per_row + p + 1).to_string());
        }
        s.push_str(literal);
        s.push(')');
    }
    s
}

fn build(f: Family, rows: usize) -> String {
    match f {
        Family::Turns => format!(
            "{}{}{}",
            crate::upserts::turn_insert!(),
            values(rows, 18, ""),
            crate::upserts::turn_upsert!()
        ),
        Family::Minutes => format!(
            "{}{}{}",
            crate::upserts::minute_insert!(),
            values(rows, 5, ""),
            crate::upserts::minute_upsert!()
        ),
        Family::CountSet | Family::CountAdd => format!(
            "INSERT INTO agents (id, consecutive_failures, turns, failed_turns, tokens_in, \
             tokens_out, cost_usd, last_failure_ms, last_seen_ms, paused, state) VALUES {} \
             ON CONFLICT (id) DO UPDATE SET consecutive_failures = {}{}",
            values(rows, 9, ", FALSE, 'null'"),
            match f {
                Family::CountSet => "excluded.consecutive_failures",
                _ => "agents.consecutive_failures + excluded.consecutive_failures",
            },
            crate::upserts::agent_count_rest!()
        ),
        Family::AgentTotals => format!(
            "SELECT id, consecutive_failures, turns, failed_turns, tokens_in, tokens_out, \
             cost_usd FROM agents WHERE id IN ({})",
            (1..=rows)
                .map(|i| format!("${i}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Family::Spend => format!(
            "{}{}{}",
            crate::upserts::spend_insert!(),
            values(rows, 7, ""),
            crate::upserts::spend_upsert!()
        ),
        // A join, not `(agent, task) IN (VALUES …)`: SQLite scans the whole
        // table for a row-value IN list, and searches the key for the join.
        Family::SpendTotals => format!(
            "SELECT t.agent, t.task, t.tokens, t.cost_usd, t.events, t.tool_calls \
             FROM (VALUES {}) AS v JOIN task_spend AS t \
             ON t.agent = v.column1 AND t.task = v.column2",
            values(rows, 2, "")
        ),
    }
}

/// The text of family `f` for a chunk of `rows` rows (one of [`CHUNKS`]).
fn sql(f: Family, rows: usize) -> &'static str {
    static TEXTS: OnceLock<Vec<Vec<String>>> = OnceLock::new();
    let texts = TEXTS.get_or_init(|| {
        let all = [
            Family::Turns,
            Family::Minutes,
            Family::CountSet,
            Family::CountAdd,
            Family::AgentTotals,
            Family::Spend,
            Family::SpendTotals,
        ];
        debug_assert_eq!(all.len(), FAMILIES);
        all.iter()
            .map(|&f| CHUNKS.iter().map(|&n| build(f, n)).collect())
            .collect()
    });
    let at = CHUNKS
        .iter()
        .position(|&c| c == rows)
        .unwrap_or(CHUNKS.len() - 1);
    texts[f as usize][at].as_str()
}

/// An agent's writes to `agents` / `task_spend` in a batch, and its last
/// count (row index, the count or merged run written there).
type Named<'a> = (usize, Option<(usize, &'a CountRow)>);

/// What of a batch the multi-row statements write.
#[derive(Default)]
pub(crate) struct Plan<'a> {
    turns: Vec<&'a TurnRow>,
    minutes: Vec<&'a MinuteCols>,
    /// (row index, the count or merged run there) of the agents counted here.
    counts: Vec<(usize, &'a CountRow)>,
    counted_here: HashSet<usize>,
}

impl<'a> Plan<'a> {
    /// Plans a batch's `rows` (in order). `last_agent`: the index of each
    /// agent's whole record that is written; `merged`: merge_counts's map
    /// (`Some(None)`: a count folded into a later one, not written).
    pub(crate) fn new(
        rows: impl Iterator<Item = &'a Encoded>,
        last_agent: &HashMap<&str, usize>,
        merged: &'a HashMap<usize, Option<CountRow>>,
    ) -> Self {
        let mut plan = Plan::default();
        // Per agent: its writes to `agents` / `task_spend` in this batch,
        // and its one count when it has just one.
        let mut named: HashMap<&str, Named<'a>> = HashMap::new();
        for (i, row) in rows.enumerate() {
            match row {
                Encoded::Turn(t) => plan.turns.push(t),
                Encoded::Minutes(m) => plan.minutes.extend(m.iter()),
                Encoded::Count(c) => {
                    let written = match merged.get(&i) {
                        Some(None) => continue,
                        Some(Some(run)) => run,
                        None => c,
                    };
                    let e = named.entry(c.agent.as_str()).or_default();
                    e.0 += 1;
                    e.1 = Some((i, written));
                }
                Encoded::Agent(a) => {
                    if last_agent.get(a.id.as_str()) == Some(&i) {
                        named.entry(a.id.as_str()).or_default().0 += 1;
                    }
                }
                Encoded::ForgetTask(agent, _) => {
                    named.entry(agent.as_str()).or_default().0 += 1;
                }
                // Neither these tables nor an agent's counters.
                Encoded::Event(_)
                | Encoded::Idempotency(_)
                | Encoded::Checkpoint(_)
                | Encoded::Job(_)
                | Encoded::Audit(_)
                | Encoded::Announce(_)
                | Encoded::Response(_) => {}
            }
        }
        for (writes, count) in named.into_values() {
            if let (1, Some((i, c))) = (writes, count) {
                plan.counts.push((i, c));
                plan.counted_here.insert(i);
            }
        }
        plan.counts.sort_unstable_by_key(|(i, _)| *i);
        plan
    }

    /// Whether the count at row `i` is written here, not by the per-row path.
    pub(crate) fn counts_row(&self, i: usize) -> bool {
        self.counted_here.contains(&i)
    }
}

/// Writes `plan` on the writer's open transaction; returns the totals after
/// each count it wrote, with the count's row index.
pub(crate) async fn write(
    conn: &mut sqlx::SqliteConnection,
    plan: &Plan<'_>,
) -> Result<Vec<(usize, Counted)>, sqlx::Error> {
    for chunk in chunks(&plan.turns) {
        let mut q = sqlx::query(sql(Family::Turns, chunk.len()));
        for t in chunk {
            let r = t.response.as_ref();
            q = q
                .bind(&t.id)
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
                .bind(r.map(|r| &r.content_type));
        }
        q.execute(&mut *conn).await?;
    }
    for chunk in chunks(&plan.minutes) {
        let mut q = sqlx::query(sql(Family::Minutes, chunk.len()));
        for m in chunk {
            q = q
                .bind(&m.deployment)
                .bind(m.minute_ms)
                .bind(m.calls)
                .bind(m.failures)
                .bind(m.latency_sum_ms);
        }
        q.execute(&mut *conn).await?;
    }
    if plan.counts.is_empty() {
        return Ok(Vec::new());
    }
    // hale_core::counts::Counters::apply, in SQL (backend.rs's count).
    let (set, add): (Vec<_>, Vec<_>) = plan
        .counts
        .iter()
        .map(|(_, c)| *c)
        .partition(|c| matches!(c.streak, StreakChange::Set(_)));
    for (family, counts) in [(Family::CountSet, &set), (Family::CountAdd, &add)] {
        for chunk in chunks(counts) {
            let mut q = sqlx::query(sql(family, chunk.len()));
            for c in chunk {
                let k = match c.streak {
                    StreakChange::Set(k) | StreakChange::Add(k) => k,
                };
                q = q
                    .bind(&c.agent)
                    .bind(i64::from(k))
                    .bind(c.turns)
                    .bind(c.failed)
                    .bind(c.tokens_in)
                    .bind(c.tokens_out)
                    .bind(c.cost_usd)
                    .bind(c.failure_ms)
                    .bind(c.seen_ms.unwrap_or(c.now_ms));
            }
            q.execute(&mut *conn).await?;
        }
    }
    let spends: Vec<&CountRow> = plan
        .counts
        .iter()
        .map(|(_, c)| *c)
        .filter(|c| c.task.is_some())
        .collect();
    for chunk in chunks(&spends) {
        let mut q = sqlx::query(sql(Family::Spend, chunk.len()));
        for c in chunk {
            if let Some((task, _, events, tool_calls)) = &c.task {
                q = q
                    .bind(&c.agent)
                    .bind(task)
                    .bind(c.tokens_in.saturating_add(c.tokens_out))
                    .bind(c.cost_usd)
                    .bind(events)
                    .bind(tool_calls)
                    .bind(c.now_ms);
            }
        }
        q.execute(&mut *conn).await?;
    }
    // The totals after the counts: each agent here was written once.
    let mut totals = HashMap::with_capacity(plan.counts.len());
    let agents: Vec<&str> = plan.counts.iter().map(|(_, c)| c.agent.as_str()).collect();
    for chunk in chunks(&agents) {
        let mut q = sqlx::query(sql(Family::AgentTotals, chunk.len()));
        for a in chunk {
            q = q.bind(*a);
        }
        for row in q.fetch_all(&mut *conn).await? {
            let id: String = sqlx::Row::try_get(&row, "id")?;
            let t = crate::rows::decode_counters(&id, &row)
                .map_err(|e| sqlx::Error::Decode(e.into()))?;
            totals.insert(id, t);
        }
    }
    let mut spent = HashMap::with_capacity(spends.len());
    for chunk in chunks(&spends) {
        let mut q = sqlx::query(sql(Family::SpendTotals, chunk.len()));
        for c in chunk {
            q = q.bind(&c.agent).bind(c.task_name());
        }
        for row in q.fetch_all(&mut *conn).await? {
            let agent: String = sqlx::Row::try_get(&row, "agent")?;
            let task: String = sqlx::Row::try_get(&row, "task")?;
            spent.insert((agent, task), row);
        }
    }
    let mut out = Vec::with_capacity(plan.counts.len());
    for (i, c) in &plan.counts {
        let totals = *totals
            .get(c.agent.as_str())
            .ok_or(sqlx::Error::RowNotFound)?;
        let task = match &c.task {
            None => None,
            Some((task, n, ..)) => {
                let row = spent
                    .get(&(c.agent.clone(), task.clone()))
                    .ok_or(sqlx::Error::RowNotFound)?;
                Some(
                    crate::rows::decode_task_counted(&c.agent, task, *n, row)
                        .map_err(|e| sqlx::Error::Decode(e.into()))?,
                )
            }
        };
        out.push((
            *i,
            Counted {
                agent: c.agent.clone(),
                n: c.n,
                totals,
                task,
            },
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_take_the_binary_decomposition_in_order() {
        let rows: Vec<usize> = (0..200).collect();
        let sizes: Vec<usize> = chunks(&rows).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [64, 64, 64, 8]);
        let back: Vec<usize> = chunks(&rows).concat();
        assert_eq!(back, rows);
        let sizes: Vec<usize> = chunks(&rows[..63]).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [32, 16, 8, 4, 2, 1]);
        assert!(chunks::<usize>(&[]).is_empty());
    }

    #[test]
    fn texts_number_every_bind_once() {
        assert_eq!(values(2, 2, ", X"), "($1, $2, X), ($3, $4, X)");
        for &n in &CHUNKS {
            let t = sql(Family::SpendTotals, n);
            assert!(t.contains(&format!("${}", 2 * n)), "{t}");
            assert!(!t.contains(&format!("${}", 2 * n + 1)), "{t}");
        }
        assert!(
            sql(Family::CountSet, 1)
                .contains("consecutive_failures = excluded.consecutive_failures,")
        );
        assert!(sql(Family::CountAdd, 1).contains("agents.consecutive_failures + excluded"));
    }
}
