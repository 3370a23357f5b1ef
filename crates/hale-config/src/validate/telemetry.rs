//! `telemetry:` — the OTLP collector's base URL and the service name.

use super::ctx::Ctx;
use crate::RawTelemetry;
use hale_core::config::TelemetryConfig;

impl Ctx<'_> {
    pub(super) fn telemetry(&mut self, r: &RawTelemetry, telemetry: &mut TelemetryConfig) {
        if let Some(e) = &r.otlp_endpoint {
            let url = e.value.trim();
            if url.starts_with("http://") || url.starts_with("https://") {
                telemetry.otlp_endpoint = Some(url.trim_end_matches('/').to_owned());
            } else {
                self.at(
                    "telemetry.otlp_endpoint",
                    e,
                    "must be an http:// or https:// URL (the collector's OTLP/HTTP base)",
                );
            }
        }
        if let Some(n) = &r.service_name {
            if n.value.trim().is_empty() {
                self.at("telemetry.service_name", n, "must not be empty");
            } else {
                telemetry.service_name = n.value.trim().to_owned();
            }
        }
    }
}
