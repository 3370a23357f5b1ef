//! Time as an input.
//!
//! Rules in this crate take `now: Instant` as an argument; adapters read the
//! real clock once per decision and pass it in. [`Clock`] is the seam for code
//! that needs both the monotonic instant (for durations) and wall time (for
//! event timestamps). [`FakeClock`] lets tests move time by hand, with no
//! sleeping and no flakiness.

use std::cell::Cell;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of monotonic and wall time.
pub trait Clock {
    /// The monotonic now, for timeouts, windows and backoff.
    fn now(&self) -> Instant;
    /// Milliseconds since the Unix epoch, for timestamps that leave the process.
    fn wall_ms(&self) -> u64;
}

/// The real clock, used by the adapters.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn wall_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to.
#[derive(Debug)]
pub struct FakeClock {
    base: Instant,
    offset: Cell<Duration>,
    wall_base_ms: u64,
}

impl FakeClock {
    /// A fake clock starting at the real now, with wall time starting at `wall_base_ms`.
    pub fn new(wall_base_ms: u64) -> Self {
        Self {
            base: Instant::now(),
            offset: Cell::new(Duration::ZERO),
            wall_base_ms,
        }
    }
    /// Moves time forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.offset.set(self.offset.get() + d);
    }
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new(1_700_000_000_000)
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        self.base + self.offset.get()
    }
    fn wall_ms(&self) -> u64 {
        self.wall_base_ms + self.offset.get().as_millis() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_only_when_advanced() {
        let c = FakeClock::new(1000);
        let t0 = c.now();
        assert_eq!(c.now(), t0);
        c.advance(Duration::from_secs(61));
        assert_eq!(c.now() - t0, Duration::from_secs(61));
        assert_eq!(c.wall_ms(), 1000 + 61_000);
    }
}
