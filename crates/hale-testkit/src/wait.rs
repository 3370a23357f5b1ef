//! Polling until a condition holds, failing the test with what was awaited
//! when it does not in time.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `f` every 20 ms until it returns true; panics naming `what` once
/// `within` has passed.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if f().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
