//! `cooldown_ms:` — how long a provider rests after each class of error.

use crate::RawCooldown;
use hale_core::class::ErrorClass;
use hale_core::config::CooldownConfig;
use std::time::Duration;

/// `cooldown_ms:` over the defaults; one row per configurable class.
pub(super) fn cooldown(r: &RawCooldown) -> CooldownConfig {
    let mut c = CooldownConfig::default();
    for (v, class) in [
        (&r.auth, ErrorClass::Auth),
        (&r.rate_limit, ErrorClass::RateLimit),
        (&r.billing, ErrorClass::Billing),
        (&r.timeout, ErrorClass::Timeout),
        (&r.overloaded, ErrorClass::Overloaded),
        (&r.model_not_found, ErrorClass::ModelNotFound),
        (&r.network, ErrorClass::Network),
        (&r.stream_broken, ErrorClass::StreamBroken),
        (&r.stream_crawling, ErrorClass::StreamCrawling),
        (&r.unknown, ErrorClass::Unknown),
    ] {
        if let Some(s) = v {
            c.by_class.insert(class, Duration::from_millis(s.value));
        }
    }
    c
}
