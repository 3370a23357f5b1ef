//! What the gateway keeps in memory, and what it sheds (issue 13: memory
//! bounded over hours with 100k+ agents seen).
//!
//! Everything the gateway holds per agent and per task is also in the store
//! (counters are counted there, `hale_core::counts`; pauses and terminated
//! tasks are in the agent's row), so memory is a cache of the active set.
//! An agent with no turn in flight may leave it once idle for
//! [`shed_after`] its own pace: a hundred of its usual gaps between turns,
//! never less than [`SHED_AFTER_IDLE_MIN`] and never more than
//! [`SHED_AFTER_IDLE`]. An agent that talks to a model every few seconds
//! stays a minute after its last turn, as before; one that ran a hundred
//! turns at machine speed (an eval, a batch job) and stopped is done after
//! a few seconds, instead of holding a minute's worth of finished agents.
//! Beyond those, memory holds at most `memory.idle_agents` /
//! `memory.idle_tasks` idle ones, the most recently seen first. A task
//! leaves [`SHED_AFTER_IDLE_MIN`] after its last use once its agent has
//! left (the mark stays on the task until it is used again, so a task kept
//! by the idle bound at its agent's sweep still goes at a later one), or
//! after [`SHED_AFTER_IDLE`] on its own. A breaker leaves with its agent
//! when it holds no failure ([`breaker_may_leave`]), else once at rest. A shed
//! agent is read back from its row before its next turn or admin call; a
//! shed task takes its stored totals back with its next count.
//!
//! What is never shed, because memory is where it lives: an agent with a
//! turn in flight (the turn holds it until it ends), a paused agent
//! (its automatic resume is timed here), an agent the health monitor is
//! acting on (stuck, failing, a nudge pending, an escalation waiting for an
//! operator, a recovery under way), an agent never seen (named by the
//! config or an operator), a task a guard stopped.
//!
//! A shed agent is still watched: the health monitor asks the store for
//! agents silent for `health.stuck_after` that are not in memory and judges
//! them as if they had stayed ([`silent_since`]).

use std::time::Duration;

/// The longest an agent or a task stays in memory after its last turn
/// (beyond the idle bound): an agent idle this long is shed whatever its
/// pace, and a task whose agent is still held is shed after this on its own.
pub const SHED_AFTER_IDLE: Duration = Duration::from_secs(60);

/// The shortest: an agent is never shed sooner after its last turn, however
/// fast it ran (longer than the health monitor takes to judge that turn).
pub const SHED_AFTER_IDLE_MIN: Duration = Duration::from_secs(5);

/// An agent idle for this many of its usual gaps between turns has stopped
/// (within [`SHED_AFTER_IDLE_MIN`] ..= [`SHED_AFTER_IDLE`]).
pub const SHED_AFTER_GAPS: u64 = 100;

/// How long after its last turn an agent whose usual gap between turns is
/// `gap_ms` (`None`: not known yet, one turn or fewer) may be shed.
pub fn shed_after(gap_ms: Option<u64>) -> Duration {
    match gap_ms {
        None => SHED_AFTER_IDLE,
        Some(g) => Duration::from_millis(g.saturating_mul(SHED_AFTER_GAPS))
            .clamp(SHED_AFTER_IDLE_MIN, SHED_AFTER_IDLE),
    }
}

/// An agent's usual gap between turns after a turn at `now_ms`: the gap
/// since its last turn (`last_ms`) averaged into `gap_ms` with weight ¼, so
/// one long pause moves it but does not replace it. A clock that went back
/// counts as no gap.
pub fn next_gap(gap_ms: Option<u64>, last_ms: Option<u64>, now_ms: u64) -> Option<u64> {
    let Some(last) = last_ms else {
        return gap_ms;
    };
    let g = now_ms.saturating_sub(last);
    Some(match gap_ms {
        None => g,
        Some(avg) => (avg.saturating_mul(3).saturating_add(g)) / 4,
    })
}

/// Default `memory.idle_agents`.
pub const DEFAULT_IDLE_AGENTS: usize = 1024;
/// Default `memory.idle_tasks`.
pub const DEFAULT_IDLE_TASKS: usize = 1024;

/// How often memory is swept: often enough that what is held stays near
/// its bound (agents within [`shed_after`] of their last turn, plus the
/// idle bound) instead of piling up between sweeps — as often as the
/// shortest [`SHED_AFTER_IDLE_MIN`]; a sweep walks only what is held.
/// (Measured: with a sweep a minute, what a busy gateway held swung by a
/// minute's new agents, ~5,000 at 85 a second.)
pub const SWEEP_EVERY: Duration = SHED_AFTER_IDLE_MIN;

/// How often the health monitor looks for agents that went silent while out
/// of memory (a read of the agents' rows).
pub const SILENCE_CHECK_EVERY: Duration = Duration::from_secs(60);

/// How many agents the health monitor reads back from the store per batch
/// of its silence check.
pub const SILENT_BATCH: usize = 512;

/// At most this many batches per silence check (the rest wait for the next
/// check), so one check never holds the monitor long.
pub const SILENT_BATCHES_PER_CHECK: usize = 8;

/// The journal's backlog — writes submitted and not yet taken by the
/// store's writer, held in memory — may reach this many of the writer's
/// batches (`events.batch_max` writes each) before a new turn waits for
/// the writer: the next batch forms whole while one commits, and the
/// backlog stays a few MiB. Under it, nothing waits. (Four batches let the
/// relaxed journal's backlog reach 4,096 turns' rows and events at c=64,
/// a third of hale's peak anonymous memory, for no more requests a second
/// than one: issue 45's runs.)
pub const JOURNAL_BACKLOG_BATCHES: u64 = 1;

/// The backlog bound for a writer of `batch_max` writes per batch.
pub fn journal_backlog_max(batch_max: usize) -> u64 {
    u64::try_from(batch_max)
        .unwrap_or(u64::MAX)
        .max(1)
        .saturating_mul(JOURNAL_BACKLOG_BATCHES)
}

/// The longest a turn waits for the backlog to shrink; then it goes on
/// (fail open: a stuck store slows turns, never stops them).
pub const JOURNAL_BACKLOG_MAX_WAIT: Duration = Duration::from_secs(1);

/// Whether a turn should wait for the journal's writer: its backlog is over
/// `limit` and the writer is working — it finished a batch within
/// `max_wait`. A writer idle that long with a backlog is stuck (the store is
/// down or locked), and waiting for it would only add `max_wait` to every
/// turn: then nobody waits (fail open).
pub fn journal_wait(
    queued: u64,
    limit: u64,
    since_last_batch: Duration,
    max_wait: Duration,
) -> bool {
    queued > limit && since_last_batch <= max_wait
}

/// After this long without a write, the store gives its caches back once:
/// SQLite's page caches (the writer's 2 MiB and the readers') are emptied
/// and the C heap they live in is trimmed. A burst leaves them full — a
/// quarter of what a gateway kept a minute after it (issue 45) — and what
/// they hold is read again from the OS's page cache when traffic returns.
pub const RELEASE_AFTER_IDLE: Duration = Duration::from_secs(30);

/// How long the store's writer waits for a write before it gives its
/// caches back: `after` when it has written since it last did (or never
/// has), else for good (`None`) — once per quiet spell, not every `after`.
pub fn release_wait(released_since_last_write: bool, after: Duration) -> Option<Duration> {
    (!released_since_last_write).then_some(after)
}

/// The longest an answer is held back waiting for its turn's commit
/// (`journal.durability: durable`) while the store's writer is working;
/// then it is released all the same (a slow commit delays answers by at
/// most this, it never loses one that was paid for).
pub const DURABLE_ANSWER_MAX_WAIT: Duration = Duration::from_secs(5);

/// What an answer waiting for its turn's commit does next
/// ([`durable_release`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Keep waiting, at most this long before asking again.
    Wait(Duration),
    /// Release it uncommitted: the writer finished no batch for
    /// `stuck_after` (the store is down or locked) — the stuck-writer rule
    /// of [`journal_wait`]: a stuck store never stops turns.
    Stuck,
    /// Release it uncommitted: it waited `max_wait` with the writer still
    /// working (a store slower than that per batch).
    TimedOut,
}

/// Whether an answer that has `waited` for its turn's commit keeps
/// waiting, given how long ago the store's writer last finished a batch.
/// The writer counts as silent only while this answer waits (an idle
/// writer had nothing to do): silent for longer than `stuck_after`, it is
/// stuck and the answer goes now. Otherwise it waits until `max_wait` in
/// all, asking again when either bound could have been crossed.
pub fn durable_release(
    waited: Duration,
    since_last_batch: Duration,
    stuck_after: Duration,
    max_wait: Duration,
) -> Release {
    let silent = since_last_batch.min(waited);
    if silent > stuck_after {
        return Release::Stuck;
    }
    if waited >= max_wait {
        return Release::TimedOut;
    }
    // Just past the bound, so the next look sees it crossed.
    let until_stuck = stuck_after - silent + Duration::from_millis(1);
    Release::Wait((max_wait - waited).min(until_stuck))
}

/// Where a group commit's transaction failed: getting a connection, in
/// its statements, or at its `COMMIT` ([`store_retry_after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStage {
    /// No connection was had (refused, the server starting or shutting
    /// down, the database not accepting connections): nothing was applied.
    Connect,
    /// A statement failed; the transaction was rolled back, so nothing of
    /// the batch was applied.
    Statements,
    /// `COMMIT` was sent and no answer came back: the batch may or may not
    /// have been applied.
    Commit,
}

/// The first wait before a group commit that failed for want of the
/// store is tried again; doubled per try up to [`STORE_RETRY_MAX_DELAY`].
pub const STORE_RETRY_FIRST_DELAY: Duration = Duration::from_millis(100);
/// The longest wait between two tries of a failed group commit.
pub const STORE_RETRY_MAX_DELAY: Duration = Duration::from_secs(2);
/// How long a group commit is tried again while the store is unreachable
/// (a PostgreSQL restart or failover takes seconds): past it, its writes
/// fail to their callers as before.
pub const STORE_RETRY_FOR: Duration = Duration::from_secs(300);

/// Whether a group commit that failed at `stage` — `connection_lost`
/// when the error was the connection's (reset, refused, the server
/// shutting down), not the statement's own — is tried again after
/// `tries` tries over `elapsed`, and after how long. Only a batch known
/// not to have been applied is tried again: one that failed to connect, or
/// whose connection was lost before `COMMIT` (its transaction rolled back).
/// A statement the store refused (a constraint, a type) fails as it
/// would again, and a lost `COMMIT` may have landed: its counters would be
/// added twice, so it fails to its callers as before.
pub fn store_retry_after(
    stage: WriteStage,
    connection_lost: bool,
    tries: u32,
    elapsed: Duration,
) -> Option<Duration> {
    let retried = match stage {
        WriteStage::Connect => true,
        WriteStage::Statements => connection_lost,
        WriteStage::Commit => false,
    };
    if !retried || elapsed >= STORE_RETRY_FOR {
        return None;
    }
    let delay = STORE_RETRY_FIRST_DELAY.saturating_mul(1u32 << tries.min(16));
    Some(delay.min(STORE_RETRY_MAX_DELAY))
}

/// `memory:` — how many idle agents and tasks stay in memory beyond the
/// active ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryConfig {
    pub idle_agents: usize,
    pub idle_tasks: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            idle_agents: DEFAULT_IDLE_AGENTS,
            idle_tasks: DEFAULT_IDLE_TASKS,
        }
    }
}

/// Whether an agent last seen at `last_used_ms`, whose usual gap between
/// turns is `gap_ms`, is idle enough to shed at `now_ms` ([`shed_after`];
/// a clock that went back sheds nothing).
pub fn idle_enough(last_used_ms: u64, now_ms: u64, gap_ms: Option<u64>) -> bool {
    let min = u64::try_from(shed_after(gap_ms).as_millis()).unwrap_or(u64::MAX);
    now_ms.checked_sub(last_used_ms).is_some_and(|d| d >= min)
}

/// A task unused this long may leave while memory is crowded with tasks
/// ([`tasks_crowded`]) and none of its turns is in flight: a conversation
/// that goes on comes back within its next turn's time, and one that ended
/// (a single call, the common case for a client that names no task) would
/// otherwise stay [`SHED_AFTER_IDLE`] — at a few thousand calls a second,
/// hundreds of thousands of tasks.
pub const TASK_SHED_CROWDED: Duration = Duration::from_secs(1);

/// How often at most the tasks are swept while crowded, besides the
/// regular sweep ([`SWEEP_EVERY`]): what a crowded sweep leaves grows by
/// this long's new tasks before the next.
pub const CROWDED_SWEEP_EVERY: Duration = Duration::from_millis(250);

/// Whether `held` tasks crowd memory: more than twice the idle bound
/// `keep` (`memory.idle_tasks`), and never below [`CROWDED_MIN_TASKS`].
pub fn tasks_crowded(held: usize, keep: usize) -> bool {
    held > keep.saturating_mul(2).max(CROWDED_MIN_TASKS)
}

/// The fewest tasks held that count as crowded ([`tasks_crowded`]), so a
/// bound of 0 does not sweep at every new task.
pub const CROWDED_MIN_TASKS: usize = 256;

/// Whether a task unused for `idle` may leave memory (the idle bound then
/// keeps the most recently used): after [`TASK_SHED_CROWDED`] when memory
/// is crowded (`crowded`) and no turn of it is in flight (`in_flight`);
/// else after [`SHED_AFTER_IDLE_MIN`] once its agent has left memory
/// (`agent_left`), or after [`SHED_AFTER_IDLE`].
pub fn task_idle_enough(idle: Duration, agent_left: bool, crowded: bool, in_flight: bool) -> bool {
    idle >= if crowded && !in_flight {
        TASK_SHED_CROWDED
    } else if agent_left {
        SHED_AFTER_IDLE_MIN
    } else {
        SHED_AFTER_IDLE
    }
}

/// Whether a breaker (agent × deployment) may leave memory: once at rest
/// (closed and quiet for its window: it decides as a new one would), or
/// once its agent has left memory (`agent_left`) while it holds no evidence
/// against its deployment (`without_failures`: closed, no failure in its
/// window; only the window's successes go with it, and a returning agent
/// is judged afresh, as a new agent would be). A breaker holding a failure
/// stays until it rests, whatever its agent does, so no evidence toward an
/// ejection is lost.
pub fn breaker_may_leave(at_rest: bool, without_failures: bool, agent_left: bool) -> bool {
    at_rest || (agent_left && without_failures)
}

/// Which idle entries to shed: `idle` holds the sheddable entries (already
/// idle enough, nothing holding them) with their last use; all but the
/// `keep` most recently used are shed, returned with their last use. Ties
/// shed the smaller key first, so the choice does not depend on the order
/// of `idle`.
pub fn to_shed<K: Ord>(mut idle: Vec<(u64, K)>, keep: usize) -> Vec<(u64, K)> {
    if idle.len() <= keep {
        return Vec::new();
    }
    let n = idle.len() - keep;
    // Oldest first; only the order of the `n` oldest matters.
    idle.select_nth_unstable_by(n - 1, |a, b| a.cmp(b));
    idle.truncate(n);
    idle
}

/// An agent's silence as the store saw it: the cutoff of the health
/// monitor's check at `now_ms` — agents whose last turn is at or before it
/// have been silent for `stuck_after`. `None` before the clock has run that
/// long.
pub fn silent_since(now_ms: u64, stuck_after: Duration) -> Option<u64> {
    now_ms.checked_sub(u64::try_from(stuck_after.as_millis()).unwrap_or(u64::MAX))
}

/// Where the silence check resumes: rows are read in (last_seen_ms, id)
/// order, strictly after the cursor.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SilenceCursor {
    pub last_seen_ms: u64,
    pub id: String,
}

impl SilenceCursor {
    /// The check starts with agents seen from `start_ms` on (the process's
    /// start minus `stuck_after`: older silences were an earlier process's
    /// to judge, as a restart never watched agents it had not seen).
    pub fn starting_at(start_ms: u64) -> Self {
        Self {
            last_seen_ms: start_ms,
            id: String::new(),
        }
    }

    /// Moves past a row read.
    pub fn advance(&mut self, last_seen_ms: u64, id: &str) {
        let row = (last_seen_ms, id);
        if row > (self.last_seen_ms, self.id.as_str()) {
            self.last_seen_ms = last_seen_ms;
            id.clone_into(&mut self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_gives_its_caches_back_once_per_quiet_spell() {
        let after = RELEASE_AFTER_IDLE;
        let table = [
            // Written since the last release (or never released): wait `after`.
            (false, Some(after)),
            // Released and nothing written since: nothing more to give back.
            (true, None),
        ];
        for (released, want) in table {
            assert_eq!(release_wait(released, after), want, "released {released}");
        }
    }

    #[test]
    fn a_commit_is_tried_again_only_when_nothing_of_it_was_applied() {
        use WriteStage::*;
        let ms = Duration::from_millis;
        // (stage, connection lost, tries, elapsed) -> wait
        let table = [
            (Connect, false, 0, ms(0), Some(ms(100))),
            (Connect, true, 1, ms(100), Some(ms(200))),
            (Connect, false, 4, ms(3_000), Some(ms(1_600))),
            (Connect, false, 5, ms(6_000), Some(ms(2_000))),
            (Connect, false, 40, ms(200_000), Some(ms(2_000))),
            (Statements, true, 0, ms(0), Some(ms(100))),
            // a statement the store refused fails the same way again
            (Statements, false, 0, ms(0), None),
            // COMMIT sent, no answer: it may have landed
            (Commit, true, 0, ms(0), None),
            (Commit, false, 0, ms(0), None),
            // the store gone for longer than a restart: give up
            (Connect, false, 200, STORE_RETRY_FOR, None),
            (Statements, true, 3, STORE_RETRY_FOR + ms(1), None),
        ];
        for (stage, lost, tries, elapsed, want) in table {
            assert_eq!(
                store_retry_after(stage, lost, tries, elapsed),
                want,
                "{stage:?} lost={lost} tries={tries} elapsed={elapsed:?}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn retry_waits_stay_within_their_bounds(tries in 0u32..10_000, elapsed_ms in 0u64..400_000) {
            let elapsed = Duration::from_millis(elapsed_ms);
            if let Some(d) = store_retry_after(WriteStage::Connect, false, tries, elapsed) {
                proptest::prop_assert!(d >= STORE_RETRY_FIRST_DELAY && d <= STORE_RETRY_MAX_DELAY);
                proptest::prop_assert!(elapsed < STORE_RETRY_FOR);
            } else {
                proptest::prop_assert!(elapsed >= STORE_RETRY_FOR);
            }
        }
    }

    #[test]
    fn idle_enough_after_its_own_pace_and_never_backwards() {
        let t = 10_000_000;
        let ms = |d: Duration| d.as_millis() as u64;
        // (usual gap, idle for, shed?)
        let cases = [
            // Pace unknown: the minute.
            (None, ms(SHED_AFTER_IDLE) - 1, false),
            (None, ms(SHED_AFTER_IDLE), true),
            // A turn every 10 s: 100 gaps is far past the minute.
            (Some(10_000), ms(SHED_AFTER_IDLE) - 1, false),
            (Some(10_000), ms(SHED_AFTER_IDLE), true),
            // A turn every 200 ms: 20 s.
            (Some(200), 19_999, false),
            (Some(200), 20_000, true),
            // Machine speed: never before the floor.
            (Some(0), 0, false),
            (Some(1), ms(SHED_AFTER_IDLE_MIN) - 1, false),
            (Some(1), ms(SHED_AFTER_IDLE_MIN), true),
            (Some(u64::MAX), ms(SHED_AFTER_IDLE), true),
        ];
        for (gap, idle, want) in cases {
            assert_eq!(idle_enough(t, t + idle, gap), want, "{gap:?} {idle}");
        }
        assert!(!idle_enough(t, t - 1, Some(1)), "a clock that went back");
        assert!(!idle_enough(t, t - 1, None), "a clock that went back");
    }

    #[test]
    fn a_task_leaves_seconds_after_its_agent_or_a_minute_alone() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        // (unused for, its agent left, may leave?), not crowded
        let cases = [
            (s(0), true, false),
            (SHED_AFTER_IDLE_MIN - ms(1), true, false),
            (SHED_AFTER_IDLE_MIN, true, true),
            (SHED_AFTER_IDLE_MIN, false, false),
            (SHED_AFTER_IDLE - ms(1), false, false),
            (SHED_AFTER_IDLE, false, true),
            (s(3600), true, true),
        ];
        for (idle, left, want) in cases {
            for in_flight in [false, true] {
                assert_eq!(
                    task_idle_enough(idle, left, false, in_flight),
                    want,
                    "{idle:?} {left} {in_flight}"
                );
            }
        }
    }

    #[test]
    fn a_crowded_memory_lets_a_task_go_a_second_after_its_last_turn_ended() {
        let ms = Duration::from_millis;
        // (unused for, its agent left, a turn in flight, may leave?), crowded
        let cases = [
            (ms(0), false, false, false),
            (TASK_SHED_CROWDED - ms(1), false, false, false),
            (TASK_SHED_CROWDED, false, false, true),
            (TASK_SHED_CROWDED, true, false, true),
            // A turn in flight keeps it as if memory were not crowded.
            (TASK_SHED_CROWDED, false, true, false),
            (SHED_AFTER_IDLE_MIN, true, true, true),
            (SHED_AFTER_IDLE - ms(1), false, true, false),
            (SHED_AFTER_IDLE, false, true, true),
        ];
        for (idle, left, in_flight, want) in cases {
            assert_eq!(
                task_idle_enough(idle, left, true, in_flight),
                want,
                "{idle:?} {left} {in_flight}"
            );
        }
        assert!(TASK_SHED_CROWDED < SHED_AFTER_IDLE_MIN);
    }

    #[test]
    fn tasks_crowd_memory_past_twice_the_idle_bound() {
        // (held, idle bound, crowded?)
        let cases = [
            (0, 1024, false),
            (2048, 1024, false),
            (2049, 1024, true),
            (CROWDED_MIN_TASKS, 0, false),
            (CROWDED_MIN_TASKS + 1, 0, true),
            (CROWDED_MIN_TASKS + 1, 10, true),
            (usize::MAX, usize::MAX, false),
        ];
        for (held, keep, want) in cases {
            assert_eq!(tasks_crowded(held, keep), want, "{held} {keep}");
        }
    }

    #[test]
    fn a_breaker_leaves_with_its_agent_only_without_failures() {
        // (at rest, without failures, its agent left, may leave?)
        let cases = [
            (true, true, false, true),
            (true, true, true, true),
            (false, true, false, false),
            (false, true, true, true),
            (false, false, true, false),
            (false, false, false, false),
        ];
        for (rest, clean, left, want) in cases {
            assert_eq!(
                breaker_may_leave(rest, clean, left),
                want,
                "{rest} {clean} {left}"
            );
        }
    }

    #[test]
    fn the_usual_gap_follows_the_turns_and_one_pause_only_moves_it() {
        assert_eq!(next_gap(None, None, 1_000), None, "a first turn");
        assert_eq!(next_gap(None, Some(1_000), 1_400), Some(400));
        assert_eq!(next_gap(Some(400), Some(1_400), 1_800), Some(400));
        // One pause of a minute after turns every 400 ms.
        let g = next_gap(Some(400), Some(2_000), 62_000);
        assert_eq!(g, Some(15_300));
        assert!(shed_after(g) == SHED_AFTER_IDLE);
        // A clock that went back: no gap.
        assert_eq!(next_gap(Some(400), Some(5_000), 4_000), Some(300));
        // Turns at machine speed bring it down to the floor (~20 of them).
        let mut g = Some(15_300);
        for _ in 0..40 {
            g = next_gap(g, Some(0), 1);
        }
        assert_eq!(shed_after(g), SHED_AFTER_IDLE_MIN);
        assert_eq!(
            next_gap(Some(u64::MAX), Some(0), u64::MAX),
            Some(u64::MAX / 4)
        );
    }

    /// (idle entries with their last use, how many to keep, the keys shed)
    type Case = (Vec<(u64, &'static str)>, usize, Vec<&'static str>);

    #[test]
    fn to_shed_keeps_the_most_recent() {
        let cases: Vec<Case> = vec![
            (vec![], 3, vec![]),
            (vec![(5, "a"), (1, "b")], 2, vec![]),
            (vec![(5, "a"), (1, "b"), (3, "c")], 2, vec!["b"]),
            (vec![(5, "a"), (1, "b"), (3, "c")], 1, vec!["b", "c"]),
            (vec![(5, "a"), (1, "b"), (3, "c")], 0, vec!["a", "b", "c"]),
            // Ties: the smaller key goes first.
            (vec![(2, "z"), (2, "y"), (9, "x")], 2, vec!["y"]),
        ];
        for (idle, keep, want) in cases {
            let mut got: Vec<&str> = to_shed(idle.clone(), keep)
                .into_iter()
                .map(|(_, k)| k)
                .collect();
            got.sort_unstable();
            let mut want = want.clone();
            want.sort_unstable();
            assert_eq!(got, want, "idle {idle:?} keep {keep}");
        }
    }

    #[test]
    fn to_shed_holds_for_many() {
        // 10k entries, last used 0..10k shuffled by a fixed stride: the
        // 9,000 oldest go, whatever the order they came in.
        let n = 10_000u64;
        let idle: Vec<(u64, u64)> = (0..n).map(|i| ((i * 7_919) % n, i)).collect();
        let shed = to_shed(idle.clone(), 1_000);
        assert_eq!(shed.len(), 9_000);
        let used: std::collections::HashMap<u64, u64> = idle.iter().map(|&(t, k)| (k, t)).collect();
        assert!(shed.iter().all(|(t, k)| used[k] == *t && *t < 9_000));
    }

    #[test]
    fn a_turn_waits_only_for_a_working_writer_over_the_backlog() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let max = JOURNAL_BACKLOG_MAX_WAIT;
        // (queued, limit, since the last batch, wait?)
        let cases = [
            (0, 10, ms(1), false),
            (10, 10, ms(1), false),
            (11, 10, ms(1), true),
            (11, 10, max, true),
            (11, 10, max + ms(1), false),
            (1_000_000, 10, s(3600), false),
            (1_000_000, journal_backlog_max(1024), ms(5), true),
            (1024, journal_backlog_max(1024), ms(5), false),
            (1025, journal_backlog_max(1024), ms(5), true),
        ];
        for (q, limit, since, want) in cases {
            assert_eq!(
                journal_wait(q, limit, since, max),
                want,
                "{q} {limit} {since:?}"
            );
        }
    }

    #[test]
    fn an_answer_waits_for_its_commit_unless_the_writer_is_stuck_or_the_wait_ran_out() {
        let ms = Duration::from_millis;
        let stuck = JOURNAL_BACKLOG_MAX_WAIT; // 1 s
        let max = DURABLE_ANSWER_MAX_WAIT; // 5 s
        // (waited, since the writer's last batch, what next)
        let cases = [
            (ms(0), ms(0), Release::Wait(ms(1001))),
            (ms(500), ms(400), Release::Wait(ms(601))),
            (ms(4500), ms(10), Release::Wait(ms(500))),
            (ms(4999), ms(999), Release::Wait(ms(1))),
            (stuck, stuck, Release::Wait(ms(1))),
            // A writer idle before the answer queued is not stuck: only
            // its silence during the wait counts.
            (ms(0), ms(3_600_000), Release::Wait(ms(1001))),
            (ms(300), ms(60_000), Release::Wait(ms(701))),
            (stuck + ms(1), stuck + ms(1), Release::Stuck),
            (ms(2000), ms(60_000), Release::Stuck),
            // Stuck wins over a wait that also ran out.
            (max, stuck + ms(1), Release::Stuck),
            (max, ms(0), Release::TimedOut),
            (max + ms(1), ms(5), Release::TimedOut),
        ];
        for (waited, since, want) in cases {
            assert_eq!(
                durable_release(waited, since, stuck, max),
                want,
                "{waited:?} {since:?}"
            );
        }
    }

    #[test]
    fn a_working_writer_is_waited_for_until_the_bound_and_never_past_it() {
        // Under a fake clock: a writer finishing a batch every `every`, and
        // an answer whose commit never comes — it is released at max_wait,
        // never later, and never as "stuck" while batches keep finishing.
        let ms = Duration::from_millis;
        for every in [ms(1), ms(50), ms(999), ms(1000)] {
            let mut now = Duration::ZERO;
            let out = loop {
                let since =
                    Duration::from_nanos((now.as_nanos() % every.as_nanos()).try_into().unwrap());
                match durable_release(
                    now,
                    since,
                    JOURNAL_BACKLOG_MAX_WAIT,
                    DURABLE_ANSWER_MAX_WAIT,
                ) {
                    Release::Wait(d) => {
                        assert!(d > Duration::ZERO);
                        now += d;
                    }
                    other => break other,
                }
            };
            assert_eq!(out, Release::TimedOut, "{every:?}");
            assert!(now <= DURABLE_ANSWER_MAX_WAIT + ms(1), "{every:?}: {now:?}");
        }
    }

    #[test]
    fn silence_starts_after_stuck_after() {
        let h = Duration::from_secs(1800);
        assert_eq!(silent_since(1_800_000, h), Some(0));
        assert_eq!(silent_since(1_799_999, h), None);
        assert_eq!(silent_since(5_000_000, h), Some(3_200_000));
    }

    #[test]
    fn the_cursor_only_moves_forward() {
        let mut c = SilenceCursor::starting_at(100);
        c.advance(90, "a");
        assert_eq!(c, SilenceCursor::starting_at(100), "older row: no move");
        c.advance(100, "b");
        assert_eq!((c.last_seen_ms, c.id.as_str()), (100, "b"));
        c.advance(100, "a");
        assert_eq!((c.last_seen_ms, c.id.as_str()), (100, "b"));
        c.advance(101, "a");
        assert_eq!((c.last_seen_ms, c.id.as_str()), (101, "a"));
    }
}
