//! Leases for singleton work across hale instances (docs/operations.md,
//! "Scale-out on PostgreSQL").
//!
//! Several instances share one database; work that must run once (the health
//! monitor, each sink's relay, the tool-job queue, journal pruning) is held
//! by one instance at a time through a lease row: `(name, holder,
//! expires_ms)`. This module owns the rule — who may take or renew a lease,
//! how long a holder keeps working when it cannot renew, when an instance's
//! heartbeat row means it is alive — and every default number of it. The
//! store enforces [`claim`] atomically (one conditional UPSERT whose `WHERE`
//! is the same predicate); the runtime asks [`keeps_working`] between renewals.
//!
//! Why these numbers: a holder renews every [`LEASE_RENEW_EVERY`] (3 s) for
//! [`LEASE_TTL`] (10 s). A holder killed right after a renewal leaves a lease
//! that expires at most 10 s later, and the others try every 3 s, so another
//! instance takes over within [`TAKEOVER_WITHIN`] = 13 s — inside the 15 s the
//! contract promises. A holder whose renewals fail stops its work while
//! more than one renewal interval is left ([`keeps_working`]), so it has
//! stopped before anyone else may take the lease (clocks of the instances
//! are assumed NTP-synchronised: a skew eats into that margin).
//!
//! Times are wall-clock milliseconds since the Unix epoch, passed in: no clock
//! is read here.

use std::time::Duration;

/// How long a taken or renewed lease lasts.
pub const LEASE_TTL: Duration = Duration::from_secs(10);
/// How often a holder renews its leases and an instance writes its heartbeat
/// (and an instance without a lease tries to take it).
pub const LEASE_RENEW_EVERY: Duration = Duration::from_secs(3);
/// The longest a lease stays with a dead holder before another instance takes
/// it: a full TTL after its last renewal plus one attempt interval.
pub const TAKEOVER_WITHIN: Duration = LEASE_TTL.saturating_add(LEASE_RENEW_EVERY);
/// An instance whose heartbeat is older than this is listed as gone.
pub const INSTANCE_ALIVE_FOR: Duration = LEASE_TTL;

/// How long an instance's claim of an in-flight `Idempotency-Key` holds
/// without an answer: longer than any call (provider timeouts × attempts),
/// so a live holder's call is never run twice; a dead holder's claim is
/// taken over sooner, as soon as its heartbeat is stale ([`claim_takeable`]).
pub const IDEMPOTENCY_CLAIM_TTL: Duration = Duration::from_secs(600);
/// How often an instance waiting for another's answer to a key re-reads
/// the store, should the notification of that answer be lost (a listener
/// reconnecting): a fallback, the notification is the wake-up.
pub const IDEMPOTENCY_RECHECK_EVERY: Duration = Duration::from_secs(1);

/// Whether another instance may take a claim of an idempotency key: it
/// expired, or its holder's heartbeat row is stale (the holder died
/// mid-call). A holder without a heartbeat row (gone from the list) keeps
/// its claim until it expires. The store's conditional UPSERT is this
/// predicate in SQL.
pub fn claim_takeable(expires_ms: u64, holder_heartbeat_ms: Option<u64>, now_ms: u64) -> bool {
    expires_ms < now_ms || holder_heartbeat_ms.is_some_and(|hb| !instance_alive(hb, now_ms))
}

const _: () = assert!(
    TAKEOVER_WITHIN.as_secs() <= 15,
    "a dead holder's work is taken over within 15 s"
);
const _: () = assert!(
    LEASE_RENEW_EVERY.as_millis() * 2 < LEASE_TTL.as_millis(),
    "a holder must get at least two renewal attempts per TTL"
);

/// The current row of a lease, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRow<'a> {
    pub holder: &'a str,
    pub expires_ms: u64,
}

/// What an instance's attempt to take or renew a lease comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim<'a> {
    /// No row: the lease is taken.
    Free,
    /// Already held by the claimant: renewed.
    Renew,
    /// Held by another whose expiry has passed: taken over from `previous`.
    Expired { previous: &'a str },
    /// Held by another until `until_ms`: refused.
    HeldByOther { holder: &'a str, until_ms: u64 },
}

impl Claim<'_> {
    /// Whether the claimant holds the lease after this claim.
    pub fn granted(&self) -> bool {
        match self {
            Claim::Free | Claim::Renew | Claim::Expired { .. } => true,
            Claim::HeldByOther { .. } => false,
        }
    }
}

/// Who may take or renew a lease: the claimant `me` at `now_ms`, given the
/// current row. A lease whose `expires_ms` is at or before `now_ms` is free to
/// anyone (the store's `WHERE leases.holder = $me OR leases.expires_ms <= $now`).
pub fn claim<'a>(current: Option<LeaseRow<'a>>, me: &str, now_ms: u64) -> Claim<'a> {
    match current {
        None => Claim::Free,
        Some(row) if row.holder == me => Claim::Renew,
        Some(row) if row.expires_ms <= now_ms => Claim::Expired {
            previous: row.holder,
        },
        Some(row) => Claim::HeldByOther {
            holder: row.holder,
            until_ms: row.expires_ms,
        },
    }
}

/// The expiry written by a granted claim at `now_ms`.
pub fn expiry(now_ms: u64) -> u64 {
    now_ms.saturating_add(LEASE_TTL.as_millis() as u64)
}

/// Whether a holder whose lease runs until `expires_ms` keeps doing the
/// leased work at `now_ms` (its latest renewal may have failed): only while
/// more than one renewal interval is left, so the work has stopped before the
/// lease can pass to another instance.
pub fn keeps_working(expires_ms: u64, now_ms: u64) -> bool {
    expires_ms.saturating_sub(now_ms) > LEASE_RENEW_EVERY.as_millis() as u64
}

/// Whether an instance whose last heartbeat was at `heartbeat_ms` is alive at
/// `now_ms` (a heartbeat from a clock slightly ahead counts as fresh).
pub fn instance_alive(heartbeat_ms: u64, now_ms: u64) -> bool {
    now_ms.saturating_sub(heartbeat_ms) <= INSTANCE_ALIVE_FOR.as_millis() as u64
}

/// The lease of the health monitor.
pub const LEASE_HEALTH_MONITOR: &str = "health-monitor";
/// The lease of the tool-job queue worker.
pub const LEASE_TOOL_JOB_QUEUE: &str = "tool-job-queue";
/// The lease of journal and idempotency-key pruning.
pub const LEASE_JOURNAL_RETENTION: &str = "journal-retention";

/// The lease of one sink's relay (`relay:<sink name>`).
pub fn relay_lease(sink: &str) -> String {
    format!("relay:{sink}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000_000;

    fn row(holder: &str, expires_ms: u64) -> Option<LeaseRow<'_>> {
        Some(LeaseRow { holder, expires_ms })
    }

    #[test]
    fn who_may_take_or_renew_a_lease() {
        /// (current row, claimant, now, expected claim)
        type Case<'a> = (Option<LeaseRow<'a>>, &'a str, u64, Claim<'a>);
        let cases: &[Case] = &[
            (None, "a", T0, Claim::Free),
            (row("a", T0 + 5_000), "a", T0, Claim::Renew),
            // A holder renews even after its own expiry (nobody took it).
            (row("a", T0 - 1), "a", T0, Claim::Renew),
            (
                row("b", T0 + 1),
                "a",
                T0,
                Claim::HeldByOther {
                    holder: "b",
                    until_ms: T0 + 1,
                },
            ),
            // Expiry is inclusive: at expires_ms the lease is free.
            (row("b", T0), "a", T0, Claim::Expired { previous: "b" }),
            (row("b", T0 - 1), "a", T0, Claim::Expired { previous: "b" }),
        ];
        for (current, me, now, want) in cases {
            assert_eq!(claim(*current, me, *now), *want, "{current:?} by {me}");
            let granted = !matches!(want, Claim::HeldByOther { .. });
            assert_eq!(claim(*current, me, *now).granted(), granted);
        }
    }

    #[test]
    fn a_dead_holders_lease_is_taken_within_the_takeover_bound() {
        // The holder renews at t0 and dies at once; the other tries every
        // LEASE_RENEW_EVERY from an arbitrary phase.
        let renew = LEASE_RENEW_EVERY.as_millis() as u64;
        for phase in [0, 1, renew / 2, renew - 1] {
            let expires = expiry(T0);
            let mut now = T0 + phase;
            while !claim(row("dead", expires), "b", now).granted() {
                now += renew;
            }
            assert!(
                now - T0 <= TAKEOVER_WITHIN.as_millis() as u64,
                "phase {phase}: taken after {} ms",
                now - T0
            );
        }
    }

    #[test]
    fn a_holder_that_cannot_renew_stops_before_its_lease_can_pass_on() {
        let expires = expiry(T0);
        let renew = LEASE_RENEW_EVERY.as_millis() as u64;
        // Renewals fail at every tick after t0: the last tick it works at is
        // the last one with more than a renewal interval left.
        let mut now = T0;
        let mut last_working = T0;
        while keeps_working(expires, now) {
            last_working = now;
            now += renew;
        }
        assert!(last_working + renew <= expires, "stopped at {now}");
        assert!(!claim(row("a", expires), "b", last_working).granted());
        assert!(keeps_working(expires, T0));
        assert!(!keeps_working(expires, expires));
        assert!(!keeps_working(expires, expires + 1));
    }

    #[test]
    fn idempotency_claims_are_taken_when_expired_or_their_holder_is_dead() {
        let alive = INSTANCE_ALIVE_FOR.as_millis() as u64;
        let later = T0 + 60_000;
        // (expires, holder's heartbeat, now, takeable)
        let cases = [
            (later, Some(T0), T0, false),            // live holder, unexpired
            (later, None, T0, false),                // no heartbeat row: until expiry
            (T0 - 1, Some(T0), T0, true),            // expired
            (later, Some(T0 - alive - 1), T0, true), // holder's heartbeat stale
            (later, Some(T0 - alive), T0, false),    // exactly at the edge: alive
            (T0, None, T0, false),                   // expires_ms == now: still held
        ];
        for (expires, hb, now, want) in cases {
            assert_eq!(
                claim_takeable(expires, hb, now),
                want,
                "{expires} {hb:?} {now}"
            );
        }
    }

    #[test]
    fn instances_are_alive_while_their_heartbeat_is_fresh() {
        let fresh = INSTANCE_ALIVE_FOR.as_millis() as u64;
        assert!(instance_alive(T0, T0));
        assert!(instance_alive(T0, T0 + fresh));
        assert!(!instance_alive(T0, T0 + fresh + 1));
        assert!(instance_alive(T0 + 500, T0), "a clock slightly ahead");
    }

    #[test]
    fn relay_leases_are_named_after_their_sink() {
        assert_eq!(relay_lease("nats"), "relay:nats");
    }
}
