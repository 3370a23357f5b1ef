//! Event delivery to sinks: is a failure the sink being down, or this event
//! being rejected? Dead letters are for bad events, not bad infrastructure.
//!
//! The relays in `hale-events` move events from the outbox to each sink in
//! order. When an attempt fails they ask [`verdict`]:
//!
//! - [`Verdict::SinkDown`]: the sink cannot be reached or fails as a whole —
//!   connection refused or reset, a timeout, an HTTP 5xx, 408 or 429, NATS
//!   disconnected, JetStream unavailable (no responders), a JetStream error
//!   about the stream rather than the message, a sink that cannot be set up
//!   as configured. Every other event would fail alike, so no event is to
//!   blame: the relay waits behind its [`SinkBreaker`] (capped, jittered
//!   backoff), attempts nothing else, dead-letters nothing, and resumes with
//!   the same event when a trial succeeds — however long the outage.
//! - [`Verdict::EventRejected`]: a reachable sink refused *this* event — a
//!   webhook's 4xx other than 408/429, a JetStream error about the message
//!   (too large, headers too large, a failed expectation, a bad request), an
//!   event that cannot be encoded. Only these count attempts
//!   ([`after_rejection`]); after `max_attempts` the event moves to the dead
//!   letters and the relay goes on with the next one.
//!
//! A failure whose cause is not known to be the event's is the sink's: a
//! sink kept down shows its `last_error` and loses nothing, while an event
//! dead-lettered by mistake leaves the stream out of order.
//!
//! [`SinkStatus`] is what `/ready`, `/metrics` and `hale doctor` show of each
//! sink. Pure: time comes in as `Instant`, randomness as an `Rng`.

use std::time::{Duration, Instant};

use rand::RngExt;
use serde::{Deserialize, Serialize};

/// First wait of a sink found down; doubles per failed trial.
pub const DEFAULT_DOWN_BACKOFF_INITIAL: Duration = Duration::from_millis(250);
/// Longest wait between two trials of a down sink.
pub const DEFAULT_DOWN_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// JetStream API error codes (`err_code`) that are about one message.
pub mod jetstream_codes {
    /// The request was malformed (for a publish: this message's headers).
    pub const BAD_REQUEST: u64 = 10003;
    /// The message is larger than the stream's `max_msg_size`.
    pub const MESSAGE_EXCEEDS_MAXIMUM: u64 = 10054;
    /// An `Nats-Expected-Last-Msg-Id` expectation failed.
    pub const WRONG_LAST_MESSAGE_ID: u64 = 10070;
    /// An `Nats-Expected-Last-Sequence` expectation failed.
    pub const WRONG_LAST_SEQUENCE: u64 = 10071;
    /// The message's headers are larger than the stream allows.
    pub const HEADER_EXCEEDS_MAXIMUM: u64 = 10097;
}

/// How one delivery attempt failed, in the terms the rule needs. The sink
/// adapters translate their client errors into this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryFailure {
    /// No connection: refused, reset, DNS, TLS, or the connection was lost
    /// before an answer (NATS disconnected, a broken pipe).
    Unreachable,
    /// No answer in time (connect, request, or a JetStream ack).
    Timeout,
    /// An HTTP answer other than 2xx.
    HttpStatus(u16),
    /// JetStream is not there: no responders on the subject, JetStream not
    /// enabled, no stream for the subject.
    NoResponders,
    /// The client's bound on unacknowledged publishes was reached.
    Backpressure,
    /// JetStream answered the publish with an API error (`err_code`).
    JetStreamError(u64),
    /// The message is larger than the server's `max_payload`.
    PayloadTooLarge,
    /// The event could not be encoded for the sink.
    Unencodable,
    /// The sink cannot be used as configured (a stream that cannot be
    /// created, an invalid URL or subject): every event would fail alike.
    Misconfigured,
    /// The sink answered something the client could not understand.
    BadAnswer,
}

/// Whose fault a failed delivery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The sink is unreachable or failing as a whole: wait, blame no event.
    SinkDown,
    /// A reachable sink refused this event: count an attempt.
    EventRejected,
}

/// The rule of the module docs.
pub fn verdict(failure: DeliveryFailure) -> Verdict {
    use DeliveryFailure as F;
    match failure {
        F::Unreachable
        | F::Timeout
        | F::NoResponders
        | F::Backpressure
        | F::Misconfigured
        | F::BadAnswer => Verdict::SinkDown,
        F::PayloadTooLarge | F::Unencodable => Verdict::EventRejected,
        F::HttpStatus(status) => http_verdict(status),
        F::JetStreamError(code) => jetstream_verdict(code),
    }
}

/// HTTP: 408 (request timeout) and 429 (too many requests) are the
/// receiver's state, like 5xx; other 4xx refuse the request. Statuses that
/// are not errors at all (1xx, an unfollowed 3xx) or not HTTP would meet
/// every event alike: the sink's.
fn http_verdict(status: u16) -> Verdict {
    match status {
        408 | 429 => Verdict::SinkDown,
        400..=407 | 409..=428 | 430..=499 => Verdict::EventRejected,
        500..=599 => Verdict::SinkDown,
        0..=99 | 100..=199 | 200..=299 | 300..=399 | 600..=u16::MAX => Verdict::SinkDown,
    }
}

/// JetStream: the codes of [`jetstream_codes`] are about the message; every
/// other code (resources, cluster, a stream missing, offline or sealed,
/// storage) is the stream's — and so is a code this table does not know.
fn jetstream_verdict(err_code: u64) -> Verdict {
    use jetstream_codes as c;
    match err_code {
        c::BAD_REQUEST
        | c::MESSAGE_EXCEEDS_MAXIMUM
        | c::WRONG_LAST_MESSAGE_ID
        | c::WRONG_LAST_SEQUENCE
        | c::HEADER_EXCEEDS_MAXIMUM => Verdict::EventRejected,
        _stream_or_unknown => Verdict::SinkDown,
    }
}

/// What the relay does after a sink rejected an event for the
/// `attempts`-th time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectionStep {
    /// Try the same event again after this pause.
    RetryAfter(Duration),
    /// Move it to the dead letters and go on.
    DeadLetter,
}

/// `attempts` rejections so far (≥ 1) of at most `max_attempts`; the pause
/// before the next is `initial` doubling per attempt, capped at `max`.
pub fn after_rejection(
    attempts: u32,
    max_attempts: u32,
    initial: Duration,
    max: Duration,
) -> RejectionStep {
    if attempts >= max_attempts.max(1) {
        return RejectionStep::DeadLetter;
    }
    let factor = 1u32 << attempts.saturating_sub(1).min(16);
    RejectionStep::RetryAfter(initial.saturating_mul(factor).min(max))
}

/// A sink's state as shown to operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkState {
    /// Deliveries go through (or the last failure was an event's).
    Up,
    /// Found down; waiting before the next trial.
    Down,
    /// The wait is over; the next attempt is a trial.
    HalfOpen,
}

impl SinkState {
    /// Every state, for metrics.
    pub const ALL: [SinkState; 3] = [SinkState::Up, SinkState::Down, SinkState::HalfOpen];

    /// A low-cardinality label for metrics and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            SinkState::Up => "up",
            SinkState::Down => "down",
            SinkState::HalfOpen => "half_open",
        }
    }
}

/// The backoff of a down sink: `initial` doubling per failed trial, capped at
/// `max`, with equal jitter (each wait is uniform in `[d/2, d]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownBackoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for DownBackoff {
    fn default() -> Self {
        DownBackoff {
            initial: DEFAULT_DOWN_BACKOFF_INITIAL,
            max: DEFAULT_DOWN_BACKOFF_MAX,
        }
    }
}

impl DownBackoff {
    /// The wait after the `failures`-th consecutive failed trial (≥ 1).
    pub fn wait<R: rand::Rng + ?Sized>(&self, failures: u32, rng: &mut R) -> Duration {
        let exp = failures.saturating_sub(1).min(30);
        let ceiling = self.initial.saturating_mul(1u32 << exp).min(self.max);
        let ceiling = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        let half = ceiling / 2;
        Duration::from_nanos(rng.random_range(half..=ceiling))
    }
}

/// The breaker of one sink: up, or down until a trial time.
#[derive(Debug, Clone)]
pub struct SinkBreaker {
    backoff: DownBackoff,
    /// `Some((trial_at, failures))` while down.
    down: Option<(Instant, u32)>,
}

impl SinkBreaker {
    pub fn new(backoff: DownBackoff) -> Self {
        SinkBreaker {
            backoff,
            down: None,
        }
    }

    pub fn state(&self, now: Instant) -> SinkState {
        match self.down {
            None => SinkState::Up,
            Some((at, _)) if now < at => SinkState::Down,
            Some(_) => SinkState::HalfOpen,
        }
    }

    /// How long to wait before the next attempt; `None` = attempt now.
    pub fn wait(&self, now: Instant) -> Option<Duration> {
        match self.down {
            Some((at, _)) if now < at => Some(at - now),
            Some(_) | None => None,
        }
    }

    /// Consecutive failed trials of the current outage (0 when up).
    pub fn failures(&self) -> u32 {
        self.down.map_or(0, |(_, n)| n)
    }

    /// The sink acknowledged an event.
    pub fn on_success(&mut self) {
        self.down = None;
    }

    /// An attempt failed with `verdict`. A rejection proves the sink
    /// reachable (up); a down verdict opens (or extends) the outage and
    /// returns the wait before the next trial.
    pub fn on_failure<R: rand::Rng + ?Sized>(
        &mut self,
        verdict: Verdict,
        now: Instant,
        rng: &mut R,
    ) -> Option<Duration> {
        match verdict {
            Verdict::EventRejected => {
                self.down = None;
                None
            }
            Verdict::SinkDown => {
                let failures = self.failures().saturating_add(1);
                let wait = self.backoff.wait(failures, rng);
                self.down = Some((now + wait, failures));
                Some(wait)
            }
        }
    }
}

/// The kind of a sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkKind {
    Nats,
    Webhook,
    Sse,
    /// An `alerting:` channel of kind slack.
    Slack,
    /// An `alerting:` channel of kind pagerduty.
    #[serde(rename = "pagerduty")]
    PagerDuty,
}

impl SinkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SinkKind::Nats => "nats",
            SinkKind::Webhook => "webhook",
            SinkKind::Sse => "sse",
            SinkKind::Slack => "slack",
            SinkKind::PagerDuty => "pagerduty",
        }
    }
}

/// What operators see of one sink (`/ready`, `/metrics`, `hale doctor`).
/// `name` is public: no credentials, query strings or paths of webhook URLs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkStatus {
    pub name: String,
    pub kind: SinkKind,
    pub state: SinkState,
    /// Outbox events committed after the sink's cursor (for a webhook with a
    /// kinds filter, some of them may not be for it).
    pub backlog: u64,
    /// Age of the event the relay is trying to deliver; `None` when caught up.
    pub oldest_undelivered_age_ms: Option<u64>,
    /// Events of this sink in the dead-letter table now.
    pub dead_letters: u64,
    pub last_error: Option<String>,
    /// Events the sink acknowledged since start (replays included).
    pub delivered: u64,
    /// Failed attempts since start (down or rejected).
    pub failed: u64,
    /// Events dead-lettered since start.
    pub dead_lettered: u64,
    /// The last outbox seq acknowledged.
    pub cursor: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn each_failure_gets_its_verdict() {
        use DeliveryFailure as F;
        use Verdict::{EventRejected as Rejected, SinkDown as Down};
        let table: &[(DeliveryFailure, Verdict)] = &[
            (F::Unreachable, Down),
            (F::Timeout, Down),
            (F::NoResponders, Down),
            (F::Backpressure, Down),
            (F::Misconfigured, Down),
            (F::BadAnswer, Down),
            (F::PayloadTooLarge, Rejected),
            (F::Unencodable, Rejected),
            (F::HttpStatus(400), Rejected),
            (F::HttpStatus(401), Rejected),
            (F::HttpStatus(403), Rejected),
            (F::HttpStatus(404), Rejected),
            (F::HttpStatus(407), Rejected),
            (F::HttpStatus(408), Down),
            (F::HttpStatus(409), Rejected),
            (F::HttpStatus(413), Rejected),
            (F::HttpStatus(422), Rejected),
            (F::HttpStatus(428), Rejected),
            (F::HttpStatus(429), Down),
            (F::HttpStatus(430), Rejected),
            (F::HttpStatus(499), Rejected),
            (F::HttpStatus(500), Down),
            (F::HttpStatus(502), Down),
            (F::HttpStatus(503), Down),
            (F::HttpStatus(504), Down),
            (F::HttpStatus(529), Down),
            (F::HttpStatus(599), Down),
            (F::HttpStatus(0), Down),
            (F::HttpStatus(101), Down),
            (F::HttpStatus(204), Down),
            (F::HttpStatus(302), Down),
            (F::HttpStatus(600), Down),
            (F::HttpStatus(u16::MAX), Down),
            (F::JetStreamError(jetstream_codes::BAD_REQUEST), Rejected),
            (
                F::JetStreamError(jetstream_codes::MESSAGE_EXCEEDS_MAXIMUM),
                Rejected,
            ),
            (
                F::JetStreamError(jetstream_codes::WRONG_LAST_MESSAGE_ID),
                Rejected,
            ),
            (
                F::JetStreamError(jetstream_codes::WRONG_LAST_SEQUENCE),
                Rejected,
            ),
            (
                F::JetStreamError(jetstream_codes::HEADER_EXCEEDS_MAXIMUM),
                Rejected,
            ),
            // Account/storage resources, cluster unavailable, stream not
            // found, stream offline, stream sealed, store failed, unknown.
            (F::JetStreamError(10002), Down),
            (F::JetStreamError(10008), Down),
            (F::JetStreamError(10023), Down),
            (F::JetStreamError(10047), Down),
            (F::JetStreamError(10059), Down),
            (F::JetStreamError(10077), Down),
            (F::JetStreamError(10109), Down),
            (F::JetStreamError(10118), Down),
            (F::JetStreamError(0), Down),
            (F::JetStreamError(99_999), Down),
        ];
        for (failure, want) in table {
            assert_eq!(verdict(*failure), *want, "{failure:?}");
        }
    }

    #[test]
    fn rejections_back_off_then_dead_letter_at_the_last_attempt() {
        let (i, m) = (Duration::from_millis(100), Duration::from_millis(250));
        let table = [
            (1, 3, RejectionStep::RetryAfter(Duration::from_millis(100))),
            (2, 3, RejectionStep::RetryAfter(Duration::from_millis(200))),
            (3, 3, RejectionStep::DeadLetter),
            (4, 3, RejectionStep::DeadLetter),
            (3, 5, RejectionStep::RetryAfter(m)),
            (1, 1, RejectionStep::DeadLetter),
            // max_attempts 0 behaves as 1.
            (1, 0, RejectionStep::DeadLetter),
        ];
        for (attempts, max_attempts, want) in table {
            assert_eq!(
                after_rejection(attempts, max_attempts, i, m),
                want,
                "{attempts}/{max_attempts}"
            );
        }
    }

    #[test]
    fn down_backoff_doubles_to_the_cap_with_equal_jitter() {
        let b = DownBackoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
        };
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for (failures, ceiling_ms) in [
            (1, 100),
            (2, 200),
            (3, 400),
            (5, 1600),
            (6, 2000),
            (40, 2000),
        ] {
            let ceiling = Duration::from_millis(ceiling_ms);
            for _ in 0..200 {
                let w = b.wait(failures, &mut rng);
                assert!(w <= ceiling && w >= ceiling / 2, "{failures}: {w:?}");
            }
        }
    }

    #[test]
    fn breaker_is_down_until_the_trial_then_half_open_and_up_on_success() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let t0 = Instant::now();
        let mut b = SinkBreaker::new(DownBackoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(400),
        });
        assert_eq!(b.state(t0), SinkState::Up);
        assert_eq!(b.wait(t0), None);
        let w1 = b
            .on_failure(Verdict::SinkDown, t0, &mut rng)
            .expect("down waits");
        assert_eq!(b.state(t0), SinkState::Down);
        assert_eq!(b.wait(t0), Some(w1));
        assert_eq!(b.state(t0 + w1), SinkState::HalfOpen);
        assert_eq!(b.wait(t0 + w1), None);
        // Failed trials keep it down, the waits growing to the cap and no further.
        let mut now = t0 + w1;
        for n in 2..=10u32 {
            let w = b.on_failure(Verdict::SinkDown, now, &mut rng).unwrap();
            assert!(w <= Duration::from_millis(400), "{w:?}");
            assert_eq!(b.failures(), n);
            now += w;
        }
        // A success closes it.
        b.on_success();
        assert_eq!(b.state(now), SinkState::Up);
        assert_eq!(b.failures(), 0);
        // A rejection proves the sink reachable: up, no wait.
        b.on_failure(Verdict::SinkDown, now, &mut rng);
        assert_eq!(b.on_failure(Verdict::EventRejected, now, &mut rng), None);
        assert_eq!(b.state(now), SinkState::Up);
    }

    #[test]
    fn states_and_kinds_have_their_labels() {
        let labels: Vec<&str> = SinkState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(labels, ["up", "down", "half_open"]);
        for s in SinkState::ALL {
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::json!(s.as_str())
            );
        }
        for k in [SinkKind::Nats, SinkKind::Webhook, SinkKind::Sse] {
            assert_eq!(
                serde_json::to_value(k).unwrap(),
                serde_json::json!(k.as_str())
            );
        }
    }
}
