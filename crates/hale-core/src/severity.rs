//! How bad an alert is. Below both [`crate::config`] (a route names the
//! severity its alerts carry) and [`crate::alert`] (which plans the alerts),
//! so neither has to import the other for it; `hale_core::alert::Severity`
//! re-exports it.

use serde::Serialize;

/// How bad an alert is: PagerDuty's four severities, also shown in Slack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Error,
    Critical,
}

impl Severity {
    /// Every severity, lowest first.
    pub const ALL: [Severity; 4] = [
        Severity::Info,
        Severity::Warning,
        Severity::Error,
        Severity::Critical,
    ];

    /// The name in config and on the wire (PagerDuty's `payload.severity`).
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
            Severity::Critical => "critical",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Severity::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The Slack emoji shown before an alert of this severity.
    pub(crate) fn emoji(self) -> &'static str {
        match self {
            Severity::Info => ":information_source:",
            Severity::Warning => ":warning:",
            Severity::Error => ":x:",
            Severity::Critical => ":rotating_light:",
        }
    }
}
