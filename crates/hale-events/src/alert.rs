//! Alert channels as outbox sinks: Slack incoming webhooks and PagerDuty
//! Events API v2 (docs/operations.md, "Alerts").
//!
//! A channel is relayed exactly like a webhook (see [`crate::relay`]): in
//! order, at least once, from its own cursor, behind its breaker; a channel
//! that is down (refused, timeout, 5xx, 408, 429) is waited out and drains
//! when it returns, and only a 4xx rejection dead-letters that one event.
//! What this module adds is the translation of one event into one request,
//! decided by `hale_core::alert::plan`: an event the channel has no alert for
//! is acknowledged without a request.
//!
//! The Slack URL and the PagerDuty routing key are credentials: they live in
//! [`Secret`]s, go into the request and nowhere else. The sink's name
//! (`slack:<channel>`, `pagerduty:<channel>`) is what cursors, dead letters,
//! `/ready`, `/metrics`, logs and error messages show.

use std::time::Duration;

use hale_core::alert::{self, Alert};
use hale_core::config::{AlertChannel, AlertTarget, AlertingConfig};
use hale_core::delivery::{DeliveryFailure, SinkKind};
use hale_core::event::{Event, EventKind};

use crate::DeliveryError;
use crate::webhook::post;

/// One alert channel and the client that posts to it.
#[derive(Debug)]
pub struct AlertSink {
    /// `slack:<channel>` or `pagerduty:<channel>`.
    name: String,
    channel: String,
    target: AlertTarget,
    alerting: AlertingConfig,
    client: reqwest::Client,
}

impl AlertSink {
    /// The sink name of a channel (cursor, dead letters, metrics): its kind
    /// and its name, never its URL or key.
    pub fn sink_name(ch: &AlertChannel) -> String {
        format!("{}:{}", Self::kind_of(ch).as_str(), ch.name)
    }

    /// Whether a stored sink name belongs to an alert channel.
    pub fn owns(sink: &str) -> bool {
        [SinkKind::Slack, SinkKind::PagerDuty].iter().any(|k| {
            sink.strip_prefix(k.as_str())
                .is_some_and(|r| r.starts_with(':'))
        })
    }

    pub fn kind_of(ch: &AlertChannel) -> SinkKind {
        match ch.target {
            AlertTarget::Slack { .. } => SinkKind::Slack,
            AlertTarget::PagerDuty { .. } => SinkKind::PagerDuty,
        }
    }

    pub fn new(
        ch: &AlertChannel,
        alerting: &AlertingConfig,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let name = Self::sink_name(ch);
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| anyhow::anyhow!("building the client of alert channel {name}: {e}"))?;
        Ok(AlertSink {
            name,
            channel: ch.name.clone(),
            target: ch.target.clone(),
            alerting: alerting.clone(),
            client,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kinds this channel reads from the outbox.
    pub fn kinds(&self) -> Vec<EventKind> {
        alert::channel_kinds(&self.channel, &self.alerting.routes)
    }

    /// What this channel sends for `event`, if anything.
    pub fn plan(&self, event: &Event) -> Option<Alert> {
        alert::plan(event, &self.channel, &self.alerting.routes)
    }

    /// Sends the alert for one event; Ok without a request when the channel
    /// has none for it.
    pub async fn deliver(&self, event: &Event) -> Result<(), DeliveryError> {
        let Some(a) = self.plan(event) else {
            return Ok(());
        };
        let link = alert::dashboard_link(&self.alerting, &a);
        let (url, body) = match &self.target {
            AlertTarget::Slack { url } => (url.expose(), alert::slack_body(&a, link.as_deref())),
            AlertTarget::PagerDuty { url, routing_key } => (
                url.as_str(),
                alert::pagerduty_body(&a, routing_key.expose(), link.as_deref()),
            ),
        };
        let body = serde_json::to_vec(&body).map_err(|e| {
            DeliveryError::new(
                DeliveryFailure::Unencodable,
                format!("encoding the alert for event {}: {e}", event.id),
            )
        })?;
        let req = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        post(req, &self.name).await
    }
}
