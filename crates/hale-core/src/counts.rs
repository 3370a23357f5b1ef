//! Counting an agent's turns once across instances (docs/operations.md,
//! "Scale-out on PostgreSQL").
//!
//! Several hale instances may serve one agent's turns. Its consecutive
//! failures, turns, tokens and cost — and each task's spend — must add up
//! as if one instance had served them all, or two replicas would double a
//! budget and never reach a pause. So an instance never writes its *totals*;
//! it writes each turn's [`Count`] as a delta that the database adds to the
//! row (`consecutive_failures` is cleared or extended there, not copied),
//! and the database answers with the totals after that delta.
//!
//! The turn path still reads a local view, without a database round trip:
//! a [`Tally`] holds the last totals the database confirmed plus the deltas
//! of this instance not yet confirmed. Each delta carries a sequence number;
//! a confirmation of delta `n` replaces the known totals and drops every
//! pending delta up to `n` (one whose write failed is dropped with them, so
//! a lost write never sticks in the view). With one instance the view is
//! exactly what the old in-memory counters were; with several, a view lags
//! the other instances' turns by at most the writes in flight — one group
//! commit — and every confirmation brings it up to the truth.
//!
//! Other instances' commits also reach a tally without any traffic of its
//! own: the totals after every committed count are announced (PostgreSQL
//! `NOTIFY hale_counts`) and [`Tally::observe`] folds them in. Totals
//! announced by another commit are ordered by [`Countable::after`] (an
//! agent's turns only grow), so a late or repeated announcement never moves
//! the view back; while deltas of this instance are pending, the newest
//! observed totals wait for the confirmation that empties the queue (they
//! may or may not include those deltas; the confirmation says which is
//! newer).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// What a count does to the run of consecutive failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Streak {
    /// A successful turn, or an operator's resume: back to zero.
    Clear,
    /// A failed turn that counts against the agent: one more.
    Extend,
    /// A turn failed on the caller's input: no verdict, unchanged.
    Keep,
}

/// What a count — or a run of counts, composed — does to the failures in a
/// row: the store writes one agent's run of counts in a group commit as one
/// statement, so the change of a run must be one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreakChange {
    /// Add this many (extends and keeps only).
    Add(u32),
    /// Set to this many (a clear, then this many extends).
    Set(u32),
}

impl StreakChange {
    /// One count's change.
    pub fn of(s: Streak) -> Self {
        match s {
            Streak::Clear => Self::Set(0),
            Streak::Extend => Self::Add(1),
            Streak::Keep => Self::Add(0),
        }
    }

    /// This change, then `next`: one change with the same effect.
    pub fn then(self, next: Self) -> Self {
        match (self, next) {
            (_, Self::Set(k)) => Self::Set(k),
            (Self::Add(j), Self::Add(k)) => Self::Add(j.saturating_add(k)),
            (Self::Set(j), Self::Add(k)) => Self::Set(j.saturating_add(k)),
        }
    }

    /// The failures in a row after this change.
    pub fn apply(self, n: u32) -> u32 {
        match self {
            Self::Add(k) => n.saturating_add(k),
            Self::Set(k) => k,
        }
    }
}

/// One turn's change to an agent's counters (or an operator's reset:
/// `turns == 0`, [`Streak::Clear`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Count {
    pub turns: u64,
    pub streak: Streak,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
}

impl Count {
    /// A finished turn.
    pub fn turn(streak: Streak, tokens_in: u64, tokens_out: u64, cost_usd: f64) -> Self {
        Self {
            turns: 1,
            streak,
            tokens_in,
            tokens_out,
            cost_usd: if cost_usd.is_finite() && cost_usd > 0.0 {
                cost_usd
            } else {
                0.0
            },
        }
    }

    /// An operator's resume: the failures in a row start over, nothing else.
    pub fn clear() -> Self {
        Self {
            turns: 0,
            streak: Streak::Clear,
            tokens_in: 0,
            tokens_out: 0,
            cost_usd: 0.0,
        }
    }

    /// Whether this count adds a failed turn.
    pub fn failed(&self) -> bool {
        self.turns > 0 && self.streak == Streak::Extend
    }
}

/// An agent's counters, as the database holds them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    pub consecutive_failures: u32,
    pub turns: u64,
    pub failed_turns: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
}

impl Counters {
    /// The rule the database applies to a row for one count (the SQL of
    /// hale-store mirrors it; its store test checks the two agree).
    pub fn apply(&mut self, c: &Count) {
        self.consecutive_failures = StreakChange::of(c.streak).apply(self.consecutive_failures);
        self.turns = self.turns.saturating_add(c.turns);
        if c.failed() {
            self.failed_turns = self.failed_turns.saturating_add(1);
        }
        self.tokens_in = self.tokens_in.saturating_add(c.tokens_in);
        self.tokens_out = self.tokens_out.saturating_add(c.tokens_out);
        self.cost_usd += c.cost_usd;
    }
}

/// Things a [`Tally`] can count: the database's totals and the local deltas.
pub trait Countable: Copy + Default {
    type Delta: Copy;
    fn add(&mut self, d: &Self::Delta);
    /// Whether these totals were committed after `other` ([`Tally::observe`]):
    /// `false` when the two cannot be ordered, and then observed totals are
    /// never adopted.
    fn after(&self, other: &Self) -> bool;
}

impl Countable for Counters {
    type Delta = Count;
    fn add(&mut self, d: &Count) {
        self.apply(d);
    }
    /// An agent's turns only grow (an operator's reset adds none), so totals
    /// with more turns were committed later, and include every count before.
    fn after(&self, other: &Self) -> bool {
        self.turns > other.turns
    }
}

impl Countable for crate::budget::Spend {
    type Delta = crate::budget::Spend;
    fn add(&mut self, d: &Self::Delta) {
        crate::budget::Spend::add(self, d.tokens, d.cost_usd);
    }
    /// Unordered: a task reset starts its spend over, so a smaller spend may
    /// be the newer one (task spend is not observed).
    fn after(&self, _other: &Self) -> bool {
        false
    }
}

/// The database's last confirmed totals and this instance's deltas since.
#[derive(Debug, Clone, Default)]
pub struct Tally<C: Countable> {
    known: C,
    /// Deltas written but not confirmed yet, oldest first, with their number.
    pending: VecDeque<(u64, C::Delta)>,
    next: u64,
    /// The newest totals another commit announced while deltas were
    /// pending ([`Tally::observe`]), adopted when the queue empties if
    /// still newer than the confirmed totals.
    observed: Option<C>,
}

/// How far a task's spend age (`task_spend.updated_ms`, read only by the
/// history prune) lags its last count at most: the age moves to a count's
/// time only when that is at least this much later ([`spend_age`]). An age
/// that moved on every count rewrote its index entry on every turn — on
/// SQLite one more WAL page a commit, on PostgreSQL no HOT update of the
/// row — for a prune that keeps 30 days.
pub const SPEND_AGE_STEP_MS: i64 = 3_600_000;

/// A task's spend age after a count at `now_ms`, the age being `age_ms`:
/// the count's time once it is [`SPEND_AGE_STEP_MS`] or more past the age,
/// else the age unchanged. So the task's last count is in
/// `[age, age + SPEND_AGE_STEP_MS)`. The store's count upsert says the same
/// in SQL (`hale-store`, `task_spend_sql!`).
pub fn spend_age(age_ms: i64, now_ms: i64) -> i64 {
    if now_ms >= age_ms.saturating_add(SPEND_AGE_STEP_MS) {
        now_ms
    } else {
        age_ms
    }
}

/// The age below which a task's spend may be pruned at history cutoff
/// `cutoff_ms`: one step earlier, so a spend whose last count is at or
/// after the cutoff is never pruned ([`spend_age`]'s lag); one counted
/// before it goes at most one step late.
pub fn spend_prune_below(cutoff_ms: i64) -> i64 {
    cutoff_ms.saturating_sub(SPEND_AGE_STEP_MS)
}

/// Pending deltas kept at most: far beyond one group commit; reached only
/// when confirmations stop (a store down), and then the oldest are dropped
/// from the view rather than held without bound.
pub const MAX_PENDING: usize = 4096;

impl<C: Countable> Tally<C> {
    /// Starts from totals read from the database.
    pub fn new(known: C) -> Self {
        Self {
            known,
            pending: VecDeque::new(),
            next: 1,
            observed: None,
        }
    }

    /// What this instance knows now: the confirmed totals and its own
    /// unconfirmed deltas on top.
    pub fn view(&self) -> C {
        let mut v = self.known;
        for (_, d) in &self.pending {
            v.add(d);
        }
        v
    }

    /// Adds a delta locally; returns its number, to write with it.
    pub fn count(&mut self, d: C::Delta) -> u64 {
        let n = self.next;
        self.next += 1;
        if self.pending.len() >= MAX_PENDING
            && let Some((_, oldest)) = self.pending.pop_front()
        {
            // Keep the view whole: fold it in as if confirmed.
            self.known.add(&oldest);
        }
        self.pending.push_back((n, d));
        n
    }

    /// The database applied delta `n` and answered `totals`: they replace
    /// the known totals, and deltas up to `n` are no longer pending. A
    /// confirmation older than one already seen is ignored.
    pub fn confirm(&mut self, n: u64, totals: C) {
        if n >= self.next {
            return; // not a number this tally gave out
        }
        if self.pending.front().is_none_or(|(first, _)| n < *first) {
            return; // stale: a later delta was confirmed already
        }
        while self.pending.front().is_some_and(|(m, _)| *m <= n) {
            self.pending.pop_front();
        }
        if self.pending.is_empty() {
            // Every agent and task held has a tally, and most sit confirmed
            // between turns: an empty queue gives its buffer back rather
            // than hold a few hundred bytes per agent (the next count
            // allocates one again).
            self.pending = VecDeque::new();
        }
        self.known = totals;
        match self.observed {
            Some(o) if !o.after(&self.known) => self.observed = None,
            Some(o) if self.pending.is_empty() => {
                self.known = o;
                self.observed = None;
            }
            Some(_) | None => {}
        }
    }

    /// Totals another commit announced (any instance's, this one's too):
    /// adopted when they are newer than the known totals and nothing of
    /// this instance is pending; while something is, the newest is kept
    /// for the confirmation that empties the queue ([`Tally::confirm`]).
    /// Older or unordered totals change nothing. Returns whether the view
    /// changed now.
    pub fn observe(&mut self, totals: C) -> bool {
        if !totals.after(&self.known) {
            return false;
        }
        if self.pending.is_empty() {
            self.known = totals;
            self.observed = None;
            return true;
        }
        if self.observed.is_none_or(|o| totals.after(&o)) {
            self.observed = Some(totals);
        }
        false
    }

    /// Replaces the known totals (a row re-read from the database) when
    /// nothing is pending, which is when they cannot be older than the view.
    pub fn reread(&mut self, totals: C) -> bool {
        if self.pending.is_empty() {
            self.known = totals;
            self.observed = None;
            true
        } else {
            false
        }
    }

    /// How many deltas wait for their confirmation.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Spend;

    fn fail() -> Count {
        Count::turn(Streak::Extend, 10, 5, 0.01)
    }
    fn ok() -> Count {
        Count::turn(Streak::Clear, 10, 5, 0.01)
    }

    fn streak() -> impl proptest::strategy::Strategy<Value = Streak> {
        proptest::prop_oneof![
            proptest::strategy::Just(Streak::Clear),
            proptest::strategy::Just(Streak::Extend),
            proptest::strategy::Just(Streak::Keep),
        ]
    }

    proptest::proptest! {
        /// A run of counts composed into one change (what the store writes
        /// for one agent's counts in a group commit) leaves the failures in
        /// a row where applying them one by one does, from any start, and
        /// composing is associative (a run split anywhere composes the same).
        #[test]
        fn a_composed_run_is_the_counts_one_by_one(
            start in 0u32..50,
            run in proptest::collection::vec(streak(), 1..40),
            split in 0usize..40,
        ) {
            let one_by_one = run.iter().fold(start, |n, s| StreakChange::of(*s).apply(n));
            let compose = |r: &[Streak]| r.iter().fold(StreakChange::Add(0), |c, s| c.then(StreakChange::of(*s)));
            proptest::prop_assert_eq!(compose(&run).apply(start), one_by_one);
            let split = split.min(run.len());
            let (a, b) = run.split_at(split);
            proptest::prop_assert_eq!(compose(a).then(compose(b)), compose(&run));
        }
    }

    #[test]
    fn a_spend_age_moves_only_a_step_after_itself_and_is_pruned_only_after_its_last_count() {
        let s = SPEND_AGE_STEP_MS;
        // (age, count at) -> age after
        for (age, now, want) in [
            (1_000, 1_000, 1_000),
            (1_000, 1_001, 1_000),
            (1_000, 1_000 + s - 1, 1_000),
            (1_000, 1_000 + s, 1_000 + s),
            (1_000, 1_000 + 5 * s, 1_000 + 5 * s),
            (1_000, 999, 1_000),
            (i64::MAX - 1, i64::MAX - 1, i64::MAX - 1),
        ] {
            assert_eq!(spend_age(age, now), want, "age {age}, count at {now}");
        }
        assert_eq!(spend_prune_below(10 * s), 9 * s);
        assert_eq!(spend_prune_below(i64::MIN + 1), i64::MIN);
    }

    proptest::proptest! {
        /// Whatever the counts' times, the last count lies in
        /// `[age, age + step)`, so a prune below `spend_prune_below(cutoff)`
        /// never drops a spend counted at or after the cutoff.
        #[test]
        fn the_last_count_is_within_a_step_of_the_age(
            first in 0i64..1_000_000_000,
            gaps in proptest::collection::vec(0i64..2 * SPEND_AGE_STEP_MS, 0..40),
            before in 0i64..3 * SPEND_AGE_STEP_MS,
        ) {
            let mut age = first;
            let mut last = first;
            for g in gaps {
                last += g;
                age = spend_age(age, last);
            }
            proptest::prop_assert!(age <= last && last < age + SPEND_AGE_STEP_MS);
            let cutoff = last - before + SPEND_AGE_STEP_MS / 2;
            if last >= cutoff {
                proptest::prop_assert!(age >= spend_prune_below(cutoff));
            }
        }
    }

    #[test]
    fn a_run_composes_to_add_or_set() {
        use StreakChange::{Add, Set};
        let cases = [
            (vec![Streak::Extend, Streak::Keep, Streak::Extend], Add(2)),
            (vec![Streak::Extend, Streak::Clear, Streak::Extend], Set(1)),
            (vec![Streak::Clear], Set(0)),
            (vec![Streak::Keep], Add(0)),
            (
                vec![Streak::Clear, Streak::Extend, Streak::Keep, Streak::Extend],
                Set(2),
            ),
        ];
        for (run, want) in cases {
            let got = run.iter().fold(Add(0), |c, s| c.then(StreakChange::of(*s)));
            assert_eq!(got, want, "{run:?}");
        }
    }

    #[test]
    fn the_rule_clears_extends_or_keeps_the_streak() {
        let cases = [
            (vec![fail(), fail()], 2, 2),
            (vec![fail(), fail(), ok()], 0, 2),
            (
                vec![fail(), Count::turn(Streak::Keep, 0, 0, 0.0), fail()],
                2,
                2,
            ),
            (vec![fail(), fail(), Count::clear(), fail()], 1, 3),
        ];
        for (counts, consecutive, failed) in cases {
            let mut c = Counters::default();
            for d in &counts {
                c.apply(d);
            }
            assert_eq!(c.consecutive_failures, consecutive, "{counts:?}");
            assert_eq!(c.failed_turns, failed, "{counts:?}");
            let turns = counts.iter().map(|d| d.turns).sum::<u64>();
            assert_eq!(c.turns, turns);
        }
    }

    #[test]
    fn a_clear_is_not_a_turn_and_costs_nothing() {
        let mut c = Counters::default();
        c.apply(&fail());
        c.apply(&Count::clear());
        assert_eq!((c.turns, c.failed_turns, c.consecutive_failures), (1, 1, 0));
        assert_eq!(c.tokens_in, 10);
    }

    #[test]
    fn one_instance_sees_exactly_its_counts_before_and_after_confirmation() {
        let mut t = Tally::new(Counters::default());
        let mut db = Counters::default();
        let mut numbers = Vec::new();
        for d in [fail(), fail(), ok(), fail()] {
            numbers.push((t.count(d), d));
        }
        let expected = t.view();
        for (n, d) in numbers {
            db.apply(&d);
            t.confirm(n, db);
            assert_eq!(t.view(), expected, "view unchanged by confirming {n}");
        }
        assert_eq!(t.pending(), 0);
        assert_eq!(t.view().consecutive_failures, 1);
    }

    #[test]
    fn two_instances_reach_the_shared_streak_on_their_next_confirmation() {
        // A and B alternate failed turns against one row.
        let mut db = Counters::default();
        let mut a = Tally::new(db);
        let mut b = Tally::new(db);
        let n = a.count(fail());
        db.apply(&fail());
        a.confirm(n, db);
        let n = b.count(fail());
        db.apply(&fail());
        b.confirm(n, db);
        assert_eq!(b.view().consecutive_failures, 2, "B sees A's failure too");
        let n = a.count(fail());
        // Before its confirmation A only knows its own two.
        assert_eq!(a.view().consecutive_failures, 2);
        db.apply(&fail());
        a.confirm(n, db);
        assert_eq!(
            a.view().consecutive_failures,
            3,
            "the third failure, counted once"
        );
    }

    #[test]
    fn a_lost_write_is_dropped_with_the_next_confirmation() {
        let mut db = Counters::default();
        let mut t = Tally::new(db);
        let _lost = t.count(fail());
        let n = t.count(fail());
        db.apply(&fail()); // only the second reached the database
        t.confirm(n, db);
        assert_eq!(t.pending(), 0);
        assert_eq!(t.view().consecutive_failures, 1);
    }

    #[test]
    fn stale_and_foreign_confirmations_are_ignored() {
        let mut t = Tally::new(Counters::default());
        let n1 = t.count(fail());
        let n2 = t.count(fail());
        let two = t.view();
        let mut later = two;
        later.apply(&fail()); // another instance's failure
        t.confirm(n2, later);
        t.confirm(n1, two); // arrives late: ignored
        assert_eq!(t.view(), later);
        t.confirm(99, Counters::default()); // never given out
        assert_eq!(t.view(), later);
    }

    #[test]
    fn a_confirmed_tally_holds_no_buffer_and_counts_on() {
        let mut t = Tally::new(Counters::default());
        assert_eq!(t.pending.capacity(), 0);
        let a = t.count(ok());
        let b = t.count(ok());
        assert!(t.pending.capacity() > 0);
        t.confirm(a, Counters::default());
        assert!(t.pending.capacity() > 0, "b is still pending");
        t.confirm(b, Counters::default());
        assert_eq!(t.pending.capacity(), 0, "drained: the buffer is given back");
        let c = t.count(fail());
        assert_eq!(t.pending(), 1);
        assert_eq!(t.view().failed_turns, 1);
        t.confirm(c, Counters::default());
        assert_eq!(t.pending(), 0);
    }

    #[test]
    fn a_reread_applies_only_when_nothing_is_pending() {
        let mut t = Tally::new(Spend::default());
        let n = t.count(Spend {
            tokens: 100,
            cost_usd: 0.0,
        });
        assert!(!t.reread(Spend::default()));
        t.confirm(
            n,
            Spend {
                tokens: 100,
                cost_usd: 0.0,
            },
        );
        assert!(t.reread(Spend {
            tokens: 250,
            cost_usd: 0.0,
        }));
        assert_eq!(t.view().tokens, 250);
    }

    #[test]
    fn pending_deltas_are_bounded_and_the_view_stays_whole() {
        let mut t = Tally::new(Spend::default());
        for _ in 0..(MAX_PENDING + 10) {
            t.count(Spend {
                tokens: 1,
                cost_usd: 0.0,
            });
        }
        assert_eq!(t.pending(), MAX_PENDING);
        assert_eq!(t.view().tokens, (MAX_PENDING + 10) as u64);
    }

    fn totals(turns: u64, consecutive_failures: u32) -> Counters {
        Counters {
            consecutive_failures,
            turns,
            ..Counters::default()
        }
    }

    #[test]
    fn observed_totals_of_another_instance_are_adopted_when_nothing_is_pending() {
        let mut t = Tally::new(totals(3, 0));
        assert!(t.observe(totals(4, 1)), "B's fourth turn reaches A");
        assert_eq!(t.view(), totals(4, 1));
        assert!(!t.observe(totals(4, 1)), "the same again: nothing new");
        assert!(!t.observe(totals(3, 0)), "a late, older announcement");
        assert_eq!(t.view(), totals(4, 1));
    }

    #[test]
    fn observed_totals_wait_for_the_confirmation_that_empties_the_queue() {
        let cases = [
            // (observed while pending, confirmed, the view after)
            // Another instance committed after this one: its totals win.
            (totals(5, 2), totals(4, 1), totals(5, 2)),
            // It committed before: the confirmation includes it.
            (totals(4, 1), totals(5, 0), totals(5, 0)),
            // This instance's own announcement, heard before its confirmation.
            (totals(5, 0), totals(5, 0), totals(5, 0)),
        ];
        for (seen, confirmed, want) in cases {
            let mut t = Tally::new(totals(3, 0));
            let n = t.count(fail());
            assert!(!t.observe(seen), "pending: not adopted yet");
            assert_eq!(t.view().turns, 4, "the view is this instance's for now");
            t.confirm(n, confirmed);
            assert_eq!(t.view(), want, "seen {seen:?}, confirmed {confirmed:?}");
        }
    }

    #[test]
    fn observed_totals_wait_while_a_later_delta_is_still_pending() {
        let mut t = Tally::new(totals(0, 0));
        let a = t.count(fail());
        let b = t.count(fail());
        t.observe(totals(5, 3));
        t.confirm(a, totals(2, 1));
        assert_eq!(t.view().turns, 3, "b still pending over the confirmed 2");
        t.confirm(b, totals(4, 2));
        assert_eq!(t.view(), totals(5, 3), "the observed, newer than b's");
    }

    #[test]
    fn observed_spend_is_never_adopted() {
        let mut t = Tally::new(Spend::default());
        assert!(!t.observe(Spend {
            tokens: 100,
            cost_usd: 0.0
        }));
        assert_eq!(t.view().tokens, 0);
    }

    proptest::proptest! {
        /// Two instances' turns against one row, each announcement heard by
        /// the other instance in any order and at any time: once every
        /// confirmation and announcement has arrived, both views are the
        /// row, whatever the interleaving.
        #[test]
        fn two_instances_converge_on_the_row_whatever_the_order(
            plan in proptest::collection::vec((proptest::bool::ANY, streak(), 0u64..1000), 1..30),
            shuffle in proptest::collection::vec(0usize..1000, 0..200),
        ) {
            let mut db = Counters::default();
            let mut tallies = [Tally::new(db), Tally::new(db)];
            // Per commit: who counted, its number, the totals after it.
            let mut commits = Vec::new();
            for (on_b, s, tokens) in plan {
                let who = usize::from(on_b);
                let d = Count::turn(s, tokens, 0, 0.0);
                let n = tallies[who].count(d);
                db.apply(&d);
                commits.push((who, n, db));
            }
            // Deliveries: each commit's confirmation to its instance (in
            // commit order) and its announcement to both (in commit order
            // too, like NOTIFY), the two streams interleaved at random.
            let mut confirms: Vec<(usize, u64, Counters)> = commits.clone();
            let mut heard: [Vec<Counters>; 2] = [
                commits.iter().map(|c| c.2).collect(),
                commits.iter().map(|c| c.2).collect(),
            ];
            confirms.reverse();
            heard[0].reverse();
            heard[1].reverse();
            let mut pick = shuffle.into_iter();
            let mut k = 0usize;
            loop {
                k += 1;
                let r = pick.next().unwrap_or(k) % 3;
                let done = match r {
                    0 => confirms.pop().map(|(who, n, tot)| tallies[who].confirm(n, tot)).is_none(),
                    1 | 2 => heard[r - 1].pop().map(|tot| { tallies[r - 1].observe(tot); }).is_none(),
                    _ => unreachable!(),
                };
                if done && confirms.is_empty() && heard.iter().all(Vec::is_empty) {
                    break;
                }
            }
            proptest::prop_assert_eq!(tallies[0].view(), db);
            proptest::prop_assert_eq!(tallies[1].view(), db);
        }
    }
}
