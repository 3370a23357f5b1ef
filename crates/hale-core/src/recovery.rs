//! Recovery planning (docs/operations.md, "Agent health and supervision"):
//! after a crash or a terminate, what to restart a task from, and whether to
//! restart it at all yet.
//!
//! [`RecoveryTracker::plan`] decides in this order:
//! 1. **limits** — a task recovered `max_per_task` times already, or an agent
//!    with `max_per_hour` recoveries started in the last sliding hour (over
//!    all its tasks), goes to human review: a task that keeps crashing needs
//!    a person, not a fourth automatic restart.
//! 2. **backoff** — the k-th recovery of a task starts no sooner than
//!    `backoff[k-1]` after the failure that calls for it (1, 2, 4 min by
//!    default; past the list, its last value). The failure's time is the
//!    first `plan` call since the task's previous recovery started; before
//!    the backoff has run out the plan is `Wait { until }`.
//! 3. **the checkpoint chain** — walked from the newest checkpoint, following
//!    parent links, to the first valid one (the adapter has checked the hash
//!    and parsed the body). When a link is missing or points at a checkpoint
//!    not in the list (a broken chain), the walk goes on with the next older
//!    checkpoint in the list, so an intact older state is still used. Every
//!    invalid checkpoint passed on the way is reported as skipped. None valid
//!    → restart from scratch, escalating when there were checkpoints (they
//!    were all corrupt); a task that never checkpointed restarts from scratch
//!    without escalation.
//!
//! One tracker per agent: it keeps, per task, the recoveries started, and for
//! the agent the start times inside the last hour.
//!
//! [`checkpoint_body`] is the rule for what a checkpoint may hold: UTF-8
//! JSON, as hale serves it back as JSON.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::config::RecoveryConfig;

/// The sliding window of `max_per_hour`.
pub const RECOVERY_WINDOW: Duration = Duration::from_secs(3600);

/// A checkpoint as the adapter sees it; `valid` means the content hash
/// matches and the body is UTF-8 JSON ([`checkpoint_body`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointView<'a> {
    pub id: &'a str,
    pub parent: Option<&'a str>,
    pub valid: bool,
}

/// Why a checkpoint body is not one hale keeps ([`checkpoint_body`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyProblem {
    /// Not UTF-8: the first bad byte is at `at`.
    NotUtf8 { at: usize },
    /// UTF-8, but not one JSON value.
    NotJson(String),
}

impl std::fmt::Display for BodyProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyProblem::NotUtf8 { at } => write!(
                f,
                "a checkpoint body must be UTF-8 JSON: byte {at} is not UTF-8"
            ),
            BodyProblem::NotJson(e) => write!(f, "a checkpoint body must be JSON: {e}"),
        }
    }
}

/// The rule for a checkpoint body: UTF-8 text holding one JSON value. hale
/// serves a checkpoint back as `application/json` (and inside the JSON of a
/// recovery plan), and JSON text is UTF-8 (RFC 8259 §8.1); a JSON parser
/// that skips over strings without decoding them would take bytes that are
/// not UTF-8 inside a string, so UTF-8 is checked first. A stored body that
/// breaks the rule is not valid ([`CheckpointView::valid`]).
pub fn checkpoint_body(body: &[u8]) -> Result<(), BodyProblem> {
    let text = std::str::from_utf8(body).map_err(|e| BodyProblem::NotUtf8 {
        at: e.valid_up_to(),
    })?;
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| BodyProblem::NotJson(e.to_string()))
}

/// What to do about a failed task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryPlan {
    /// Restart from checkpoint `id`; `skipped` are the invalid newer ones passed on the way.
    FromCheckpoint { id: String, skipped: Vec<String> },
    /// Restart the task from the beginning; `escalate` when checkpoints existed but none was valid.
    FromScratch { escalate: bool },
    /// Past the limits: a person must look.
    HumanReview { reason: String },
    /// Backoff: ask again at `until`.
    Wait { until: Instant },
}

#[derive(Debug, Clone, Default)]
struct TaskRecoveries {
    started: u32,
    /// When the failure that calls for the next recovery was first planned for.
    pending_since: Option<Instant>,
}

/// Recoveries of one agent's tasks, for limits and backoff.
#[derive(Debug, Clone, Default)]
pub struct RecoveryTracker {
    tasks: HashMap<String, TaskRecoveries>,
    /// Start times of recoveries (all tasks) inside the last window, oldest first.
    recent: VecDeque<Instant>,
}

/// The first valid checkpoint walking from the newest; `None` when none is valid.
fn walk_chain(newest_first: &[CheckpointView<'_>]) -> (Option<String>, Vec<String>) {
    let by_id: HashMap<&str, usize> = newest_first
        .iter()
        .enumerate()
        .rev() // the newest wins on a duplicate id
        .map(|(i, c)| (c.id, i))
        .collect();
    let mut visited: HashSet<usize> = HashSet::new();
    let mut skipped = Vec::new();
    let mut at = if newest_first.is_empty() {
        None
    } else {
        Some(0)
    };
    while let Some(i) = at {
        let Some(c) = newest_first.get(i) else { break };
        visited.insert(i);
        if c.valid {
            return (Some(c.id.to_string()), skipped);
        }
        skipped.push(c.id.to_string());
        let by_link = c
            .parent
            .and_then(|p| by_id.get(p).copied())
            .filter(|j| !visited.contains(j));
        // A missing or dangling link: go on with the next older unvisited one.
        at = by_link.or_else(|| (i + 1..newest_first.len()).find(|j| !visited.contains(j)));
    }
    (None, skipped)
}

impl RecoveryTracker {
    pub fn new() -> Self {
        Self::default()
    }

    fn prune(&mut self, now: Instant) {
        while let Some(&t) = self.recent.front() {
            if now.saturating_duration_since(t) >= RECOVERY_WINDOW {
                self.recent.pop_front();
            } else {
                break;
            }
        }
    }

    /// Recoveries started in the sliding hour ending at `now`, all tasks.
    pub fn count_last_hour(&mut self, now: Instant) -> u32 {
        self.prune(now);
        u32::try_from(self.recent.len()).unwrap_or(u32::MAX)
    }

    /// Decides what to do after a crash/terminate of `task` at `now`
    /// (see the module doc for the order of the rules).
    pub fn plan(
        &mut self,
        cfg: &RecoveryConfig,
        task: &str,
        newest_first: &[CheckpointView<'_>],
        now: Instant,
    ) -> RecoveryPlan {
        let done = self.count(task);
        if done >= cfg.max_per_task {
            return RecoveryPlan::HumanReview {
                reason: format!(
                    "task {task} already recovered {done} time(s) (max_per_task {})",
                    cfg.max_per_task
                ),
            };
        }
        let hour = self.count_last_hour(now);
        if hour >= cfg.max_per_hour {
            return RecoveryPlan::HumanReview {
                reason: format!(
                    "{hour} recoveries in the last hour (max_per_hour {})",
                    cfg.max_per_hour
                ),
            };
        }
        let entry = self.tasks.entry(task.to_string()).or_default();
        let since = *entry.pending_since.get_or_insert(now);
        let backoff = usize::try_from(done)
            .ok()
            .and_then(|k| cfg.backoff.get(k).or(cfg.backoff.last()))
            .copied()
            .unwrap_or(Duration::ZERO);
        let until = since + backoff;
        if now < until {
            return RecoveryPlan::Wait { until };
        }
        match walk_chain(newest_first) {
            (Some(id), skipped) => RecoveryPlan::FromCheckpoint { id, skipped },
            (None, _) => RecoveryPlan::FromScratch {
                escalate: !newest_first.is_empty(),
            },
        }
    }

    /// A recovery of `task` started at `now` (counts for both limits and
    /// starts the next backoff step).
    pub fn record_started(&mut self, task: &str, now: Instant) {
        let entry = self.tasks.entry(task.to_string()).or_default();
        entry.started = entry.started.saturating_add(1);
        entry.pending_since = None;
        self.prune(now);
        self.recent.push_back(now);
    }

    /// Recoveries started for `task`.
    pub fn count(&self, task: &str) -> u32 {
        self.tasks.get(task).map_or(0, |t| t.started)
    }

    /// Forgets a task (it completed, or an operator cleared it).
    pub fn forget(&mut self, task: &str) {
        self.tasks.remove(task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_body_table() {
        /// What the rule says of a body: kept, not UTF-8 at a byte, not JSON.
        #[derive(Debug)]
        enum Want {
            Ok,
            Utf8(usize),
            Json,
        }
        let table: [(&[u8], Want); 7] = [
            (br#"{"step": 3}"#, Want::Ok),
            (b"[1, 2]", Want::Ok),
            ("{\"note\": \"caf\u{e9}\"}".as_bytes(), Want::Ok),
            // Bytes that are not UTF-8 inside a string: a skipping parser takes them.
            (b"{\"s\": \"\xff\xfe\"}", Want::Utf8(7)),
            (b"\xc3", Want::Utf8(0)),
            (b"", Want::Json),
            (b"{\"open\": ", Want::Json),
        ];
        for (body, want) in table {
            let got = checkpoint_body(body);
            let ok = match (&want, &got) {
                (Want::Ok, Ok(())) => true,
                (Want::Utf8(at), Err(BodyProblem::NotUtf8 { at: got })) => at == got,
                (Want::Json, Err(BodyProblem::NotJson(_))) => true,
                (Want::Ok | Want::Utf8(_) | Want::Json, Ok(()) | Err(_)) => false,
            };
            assert!(ok, "{body:?}: want {want:?}, got {got:?}");
        }
        assert_eq!(
            BodyProblem::NotUtf8 { at: 7 }.to_string(),
            "a checkpoint body must be UTF-8 JSON: byte 7 is not UTF-8"
        );
    }

    fn cfg() -> RecoveryConfig {
        RecoveryConfig::default()
    }

    fn mins(n: u64) -> Duration {
        Duration::from_secs(60 * n)
    }

    fn cp<'a>(id: &'a str, parent: Option<&'a str>, valid: bool) -> CheckpointView<'a> {
        CheckpointView { id, parent, valid }
    }

    /// Plans at `t` (starting the backoff) and again once it has run out;
    /// returns the second plan and its time.
    fn plan_after_backoff(
        r: &mut RecoveryTracker,
        task: &str,
        chain: &[CheckpointView<'_>],
        t: Instant,
    ) -> (RecoveryPlan, Instant) {
        match r.plan(&cfg(), task, chain, t) {
            RecoveryPlan::Wait { until } => (r.plan(&cfg(), task, chain, until), until),
            other => (other, t),
        }
    }

    #[test]
    fn valid_newest_checkpoint_is_used() {
        let t0 = Instant::now();
        let mut r = RecoveryTracker::new();
        let chain = [cp("c3", Some("c2"), true), cp("c2", Some("c1"), true)];
        let (p, _) = plan_after_backoff(&mut r, "t", &chain, t0);
        assert_eq!(
            p,
            RecoveryPlan::FromCheckpoint {
                id: "c3".into(),
                skipped: vec![]
            }
        );
    }

    #[test]
    fn corrupt_newest_is_skipped_for_its_valid_parent() {
        let t0 = Instant::now();
        let mut r = RecoveryTracker::new();
        let chain = [
            cp("c4", Some("c3"), false),
            cp("c3", Some("c2"), false),
            cp("c2", Some("c1"), true),
            cp("c1", None, true),
        ];
        let (p, _) = plan_after_backoff(&mut r, "t", &chain, t0);
        assert_eq!(
            p,
            RecoveryPlan::FromCheckpoint {
                id: "c2".into(),
                skipped: vec!["c4".into(), "c3".into()]
            }
        );
    }

    #[test]
    fn parent_links_are_followed_over_list_order() {
        let t0 = Instant::now();
        let mut r = RecoveryTracker::new();
        // c3's parent is c1; c2 is on another branch and is not restored.
        let chain = [
            cp("c3", Some("c1"), false),
            cp("c2", Some("c1"), true),
            cp("c1", None, true),
        ];
        let (p, _) = plan_after_backoff(&mut r, "t", &chain, t0);
        assert_eq!(
            p,
            RecoveryPlan::FromCheckpoint {
                id: "c1".into(),
                skipped: vec!["c3".into()]
            }
        );
    }

    #[test]
    fn broken_chain_goes_on_with_the_next_older_checkpoint() {
        let t0 = Instant::now();
        let mut r = RecoveryTracker::new();
        // c5 is corrupt and points at c4, which is missing from the store.
        let chain = [cp("c5", Some("c4"), false), cp("c3", Some("c2"), true)];
        let (p, _) = plan_after_backoff(&mut r, "t", &chain, t0);
        assert_eq!(
            p,
            RecoveryPlan::FromCheckpoint {
                id: "c3".into(),
                skipped: vec!["c5".into()]
            }
        );
    }

    #[test]
    fn a_cycle_in_the_links_ends() {
        let t0 = Instant::now();
        let mut r = RecoveryTracker::new();
        let chain = [cp("a", Some("b"), false), cp("b", Some("a"), false)];
        let (p, _) = plan_after_backoff(&mut r, "t", &chain, t0);
        assert_eq!(p, RecoveryPlan::FromScratch { escalate: true });
    }

    #[test]
    fn none_valid_restarts_from_scratch_and_escalates() {
        let t0 = Instant::now();
        let mut r = RecoveryTracker::new();
        let chain = [cp("c2", Some("c1"), false), cp("c1", None, false)];
        let (p, _) = plan_after_backoff(&mut r, "t", &chain, t0);
        assert_eq!(p, RecoveryPlan::FromScratch { escalate: true });
    }

    #[test]
    fn no_checkpoints_restarts_from_scratch_without_escalation() {
        let t0 = Instant::now();
        let mut r = RecoveryTracker::new();
        let (p, _) = plan_after_backoff(&mut r, "t", &[], t0);
        assert_eq!(p, RecoveryPlan::FromScratch { escalate: false });
    }

    #[test]
    fn backoff_is_1_2_4_minutes_then_the_last_value() {
        let t0 = Instant::now();
        let c = RecoveryConfig {
            max_per_task: 10,
            max_per_hour: 10,
            ..cfg()
        };
        let mut r = RecoveryTracker::new();
        let chain = [cp("c1", None, true)];
        let mut t = t0;
        for expected in [1, 2, 4, 4] {
            // The failure happens at t; the recovery may start `expected` minutes later.
            assert_eq!(
                r.plan(&c, "t", &chain, t),
                RecoveryPlan::Wait {
                    until: t + mins(expected)
                }
            );
            // Asking again does not restart the backoff.
            assert_eq!(
                r.plan(&c, "t", &chain, t + mins(expected) - Duration::from_secs(1)),
                RecoveryPlan::Wait {
                    until: t + mins(expected)
                }
            );
            let go = t + mins(expected);
            assert!(matches!(
                r.plan(&c, "t", &chain, go),
                RecoveryPlan::FromCheckpoint { .. }
            ));
            r.record_started("t", go);
            t = go + mins(3);
        }
        assert_eq!(r.count("t"), 4);
    }

    #[test]
    fn per_task_limit_of_3_goes_to_human_review() {
        let t0 = Instant::now();
        let mut r = RecoveryTracker::new();
        let chain = [cp("c1", None, true)];
        let mut t = t0;
        for _ in 0..3 {
            let (p, at) = plan_after_backoff(&mut r, "t", &chain, t);
            assert!(matches!(p, RecoveryPlan::FromCheckpoint { .. }), "{p:?}");
            r.record_started("t", at);
            t = at + mins(1);
        }
        assert_eq!(r.count("t"), 3);
        match r.plan(&cfg(), "t", &chain, t + mins(120)) {
            RecoveryPlan::HumanReview { reason } => {
                assert_eq!(
                    reason,
                    "task t already recovered 3 time(s) (max_per_task 3)"
                )
            }
            other => panic!("{other:?}"),
        }
        // Other tasks are not affected.
        assert!(matches!(
            r.plan(&cfg(), "u", &chain, t + mins(120)),
            RecoveryPlan::Wait { .. }
        ));
    }

    #[test]
    fn per_hour_limit_of_5_across_tasks_slides() {
        let t0 = Instant::now();
        let mut r = RecoveryTracker::new();
        let chain = [cp("c1", None, true)];
        let mut first = None;
        for (k, task) in ["a", "b", "c", "d", "e"].into_iter().enumerate() {
            let (p, at) = plan_after_backoff(&mut r, task, &chain, t0 + mins(k as u64 * 2));
            assert!(matches!(p, RecoveryPlan::FromCheckpoint { .. }), "{p:?}");
            r.record_started(task, at);
            first.get_or_insert(at);
        }
        let first = first.expect("five recoveries");
        match r.plan(&cfg(), "f", &chain, t0 + mins(20)) {
            RecoveryPlan::HumanReview { reason } => {
                assert_eq!(reason, "5 recoveries in the last hour (max_per_hour 5)")
            }
            other => panic!("{other:?}"),
        }
        let just_before = first + RECOVERY_WINDOW - Duration::from_secs(1);
        assert!(matches!(
            r.plan(&cfg(), "f", &chain, just_before),
            RecoveryPlan::HumanReview { .. }
        ));
        // One hour after the first, it has left the window.
        assert_eq!(r.count_last_hour(first + RECOVERY_WINDOW), 4);
        let p = r.plan(&cfg(), "f", &chain, first + RECOVERY_WINDOW);
        assert!(matches!(p, RecoveryPlan::Wait { .. }), "{p:?}");
    }

    #[test]
    fn limits_come_before_backoff_and_chain() {
        let t0 = Instant::now();
        let c = RecoveryConfig {
            max_per_task: 0,
            ..cfg()
        };
        let mut r = RecoveryTracker::new();
        assert!(matches!(
            r.plan(&c, "t", &[], t0),
            RecoveryPlan::HumanReview { .. }
        ));
    }

    #[test]
    fn empty_backoff_list_means_no_wait() {
        let t0 = Instant::now();
        let c = RecoveryConfig {
            backoff: vec![],
            ..cfg()
        };
        let mut r = RecoveryTracker::new();
        assert_eq!(
            r.plan(&c, "t", &[], t0),
            RecoveryPlan::FromScratch { escalate: false }
        );
    }
}
