//! Alerts: which event goes to which channel, with which severity, and what
//! the Slack and PagerDuty messages say (docs/operations.md, "Alerts").
//!
//! Alert channels are sinks of the outbox like webhooks (`hale-events`
//! relays them in order, at least once), so an alert is a pure function of
//! one event and the `alerting:` config: [`plan`]. No state is kept between
//! events; PagerDuty keeps the incidents. That works because every alert has
//! a [`Family`] and a subject (the agent, the agent × deployment, the ejected
//! scope), and the `dedup_key` is made of those two only ([`dedup_key`]):
//! `agent.paused` of agent `a` opens `hale:agent:a`, and `agent.resumed` of
//! `a` resolves that same key. The families and what resolves them:
//!
//! | family       | triggered by                                                    | resolved by                         |
//! |--------------|-----------------------------------------------------------------|-------------------------------------|
//! | `agent`      | agent.paused, agent.failed, agent.terminated, health.escalated, recovery.failed | agent.resumed, recovery.completed |
//! | `circuit`    | agent.circuit_open, breaker.state_changed to open/forced_open   | breaker.state_changed to closed     |
//! | `ejection`   | provider.cooldown                                               | provider.recovered                  |
//! | `kind`       | any other kind, when routed (its own family per kind)           | nothing                             |
//!
//! A resolving event reaches a channel when a route sends that channel a
//! kind of the family it resolves (so routing `agent.paused` to PagerDuty
//! is enough for `agent.resumed` to close the incident); it can also be
//! routed itself. To Slack a resolution is a message like any other.
//!
//! The dedup key never holds a secret: agent names, deployment names and
//! scope keys are not secrets, and a `base_url` scope key (a URL, which may
//! carry credentials) is replaced by a stable hash.

use serde::Serialize;
use serde_json::{Value, json};

use crate::config::{AlertRoute, AlertingConfig};
use crate::event::{Event, EventKind};
pub use crate::severity::Severity;

/// What an alert is about, for the dedup key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// An agent's health: paused, failing, escalated, terminated.
    Agent,
    /// An agent's breaker on one deployment.
    Circuit,
    /// A deployment (or its provider key or base URL) ejected.
    Ejection,
    /// Any other kind: a family of its own.
    Kind(EventKind),
}

impl Family {
    fn as_str(self) -> &'static str {
        match self {
            Family::Agent => "agent",
            Family::Circuit => "circuit",
            Family::Ejection => "ejection",
            Family::Kind(k) => k.as_str(),
        }
    }
}

/// The part an event plays in its family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Opens (or re-opens) an incident of the family.
    Trigger(Family),
    /// Closes the family's incident.
    Resolve(Family),
    /// Not an alert (a breaker going half-open, an event that carries no
    /// state worth waking anyone for when unrouted).
    Ignore,
}

/// PagerDuty's `event_action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Trigger,
    Resolve,
}

fn breaker_to(ev: &Event) -> Option<&str> {
    ev.payload.get("to").and_then(Value::as_str)
}

/// The role of one event. Exhaustive: a new kind must be placed.
pub fn role(ev: &Event) -> Role {
    role_of(ev.kind, breaker_to(ev))
}

/// The role of a kind; `breaker_to` is a `breaker.state_changed`'s new
/// state (the only kind whose role depends on its payload).
fn role_of(kind: EventKind, breaker_to: Option<&str>) -> Role {
    use EventKind as K;
    match kind {
        K::AgentPaused
        | K::AgentFailed
        | K::AgentTerminated
        | K::HealthEscalated
        | K::RecoveryFailed => Role::Trigger(Family::Agent),
        K::AgentResumed | K::RecoveryCompleted => Role::Resolve(Family::Agent),
        K::AgentCircuitOpen => Role::Trigger(Family::Circuit),
        K::BreakerStateChanged => match breaker_to {
            Some("open" | "forced_open") => Role::Trigger(Family::Circuit),
            Some("closed") => Role::Resolve(Family::Circuit),
            // half_open, disabled, or a payload without a state: no change
            // an incident should follow.
            Some(_) | None => Role::Ignore,
        },
        K::ProviderCooldown => Role::Trigger(Family::Ejection),
        K::ProviderRecovered => Role::Resolve(Family::Ejection),
        K::AgentRestarting
        | K::AgentFallbackUsed
        | K::AgentCompacted
        | K::AgentRetry
        | K::TurnHedged
        | K::TurnCompleted
        | K::TurnFailed
        | K::HealthStateChanged
        | K::HealthNudgeSent
        | K::HealthDecision
        | K::RecoveryStarted
        | K::GuardLimitHit
        | K::TaskReset
        | K::BudgetExceeded
        | K::CheckpointCorrupt
        | K::OutboxShed
        | K::SinkDeadLettered
        | K::JobSubmitted
        | K::JobCompleted
        | K::JobFailed
        | K::JobStepFailed
        | K::JobFailedOver
        | K::JobQueued
        | K::JobExpired
        | K::JobCancelled => Role::Trigger(Family::Kind(kind)),
    }
}

/// The family a routed kind belongs to (a routed `breaker.state_changed`
/// counts for [`Family::Circuit`]).
fn family_of_kind(kind: EventKind) -> Family {
    match role_of(kind, Some("open")) {
        Role::Trigger(f) | Role::Resolve(f) => f,
        Role::Ignore => Family::Kind(kind),
    }
}

/// The kinds that resolve `family` (none for [`Family::Kind`]).
pub fn resolvers(family: Family) -> &'static [EventKind] {
    match family {
        Family::Agent => &[EventKind::AgentResumed, EventKind::RecoveryCompleted],
        Family::Circuit => &[EventKind::BreakerStateChanged],
        Family::Ejection => &[EventKind::ProviderRecovered],
        Family::Kind(_) => &[],
    }
}

/// Every kind a channel must see: the kinds routed to it and the kinds that
/// resolve their families. The relay reads only these from the outbox.
pub fn channel_kinds(channel: &str, routes: &[AlertRoute]) -> Vec<EventKind> {
    let mut kinds: Vec<EventKind> = Vec::new();
    for r in routes
        .iter()
        .filter(|r| r.channels.iter().any(|c| c == channel))
    {
        for &k in &r.kinds {
            kinds.push(k);
            kinds.extend_from_slice(resolvers(family_of_kind(k)));
        }
    }
    kinds.sort_by_key(|k| k.as_str());
    kinds.dedup();
    kinds
}

/// One alert to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    pub action: Action,
    pub severity: Severity,
    pub dedup_key: String,
    /// One line, readable: what happened to whom.
    pub summary: String,
    pub kind: EventKind,
    pub agent: Option<String>,
    pub deployment: Option<String>,
    /// The event's id and time, for the receiver's details.
    pub event_id: String,
    pub time_ms: u64,
    /// Event payload fields worth showing (reason, by, class…).
    pub details: Value,
}

/// What `channel` should send for `ev`, if anything.
///
/// Routed kinds: the highest severity of the routes that send this kind to
/// this channel; the action is the event's role (a routed resolver still
/// resolves). Unrouted resolvers: sent (as `info`) when a route gives this
/// channel a kind of the family they resolve. Anything else: `None`.
pub fn plan(ev: &Event, channel: &str, routes: &[AlertRoute]) -> Option<Alert> {
    let to_channel = || {
        routes
            .iter()
            .filter(move |r| r.channels.iter().any(|c| c == channel))
    };
    let routed = to_channel()
        .filter(|r| r.kinds.contains(&ev.kind))
        .map(|r| r.severity)
        .max();
    let (action, family, severity) = match (role(ev), routed) {
        (Role::Ignore, _) => return None,
        (Role::Trigger(f), Some(sev)) => (Action::Trigger, f, sev),
        (Role::Trigger(_), None) => return None,
        (Role::Resolve(f), Some(sev)) => (Action::Resolve, f, sev),
        (Role::Resolve(f), None) => {
            let watched = to_channel().any(|r| r.kinds.iter().any(|&k| family_of_kind(k) == f));
            if !watched {
                return None;
            }
            (Action::Resolve, f, Severity::Info)
        }
    };
    let deployment = ev
        .payload
        .get("deployment")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Some(Alert {
        action,
        severity,
        dedup_key: dedup_key(ev, family),
        summary: summary(ev, action),
        kind: ev.kind,
        agent: ev.agent.clone(),
        deployment,
        event_id: ev.id.clone(),
        time_ms: ev.time_ms,
        details: details(ev),
    })
}

/// FNV-1a, 64 bits: a stable stand-in for a value that must not be shown.
fn stable_hash(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// `hale:<family>:<subject>`: the same for a trigger and the event that
/// resolves it. Subjects: the agent ([`Family::Agent`]), agent and
/// deployment ([`Family::Circuit`]), the ejected scope and its key
/// ([`Family::Ejection`]), agent or deployment ([`Family::Kind`]).
pub fn dedup_key(ev: &Event, family: Family) -> String {
    let agent = ev.agent.as_deref().unwrap_or("-");
    let field = |k: &str| ev.payload.get(k).and_then(Value::as_str);
    let deployment = field("deployment").unwrap_or("-");
    let subject = match family {
        Family::Agent => agent.to_owned(),
        Family::Circuit => format!("{agent}:{deployment}"),
        Family::Ejection => match (field("scope"), field("key")) {
            (Some("base_url"), Some(url)) => format!("base_url:{}", stable_hash(url)),
            (Some(scope), Some(key)) => format!("{scope}:{key}"),
            (Some(_) | None, _) => format!("deployment:{deployment}"),
        },
        Family::Kind(_) => match (ev.agent.as_deref(), field("deployment")) {
            (Some(a), _) => a.to_owned(),
            (None, Some(d)) => d.to_owned(),
            (None, None) => "-".to_owned(),
        },
    };
    format!("hale:{}:{subject}", family.as_str())
}

/// The readable line: `agent research paused: 3 consecutive failed turns`.
pub fn summary(ev: &Event, action: Action) -> String {
    let field = |k: &str| ev.payload.get(k).and_then(Value::as_str);
    let who = match (ev.agent.as_deref(), field("deployment")) {
        (Some(a), Some(d)) => format!("agent {a} on {d}"),
        (Some(a), None) => format!("agent {a}"),
        (None, Some(d)) => format!("deployment {d}"),
        (None, None) => "hale".to_owned(),
    };
    let what = match ev.kind {
        EventKind::AgentPaused => "paused".to_owned(),
        EventKind::AgentResumed => "resumed".to_owned(),
        EventKind::AgentCircuitOpen => "circuit open".to_owned(),
        EventKind::HealthEscalated => "escalated to an operator".to_owned(),
        EventKind::RecoveryFailed => "recovery failed".to_owned(),
        EventKind::RecoveryCompleted => "recovered".to_owned(),
        EventKind::ProviderCooldown => "ejected".to_owned(),
        EventKind::ProviderRecovered => "back in service".to_owned(),
        EventKind::BreakerStateChanged => {
            format!("breaker {}", breaker_to(ev).unwrap_or("changed"))
        }
        other => other.as_str().to_owned(),
    };
    let prefix = match action {
        Action::Trigger => "",
        Action::Resolve => "resolved: ",
    };
    match field("reason") {
        Some(r) if !r.is_empty() => format!("{prefix}{who} {what}: {r}"),
        Some(_) | None => format!("{prefix}{who} {what}"),
    }
}

/// The payload fields shown with an alert: plain scalar values only (a
/// payload never holds a credential; nested objects are left out to keep
/// messages short).
fn details(ev: &Event) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("event_id".into(), json!(ev.id));
    out.insert("kind".into(), json!(ev.kind.as_str()));
    if let Some(a) = &ev.agent {
        out.insert("agent".into(), json!(a));
    }
    if let Some(t) = &ev.task {
        out.insert("task".into(), json!(t));
    }
    if let Value::Object(map) = &ev.payload {
        for (k, v) in map {
            let scalar = match v {
                Value::String(_) | Value::Number(_) | Value::Bool(_) => true,
                Value::Null | Value::Array(_) | Value::Object(_) => false,
            };
            if scalar && !out.contains_key(k) {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

/// The dashboard link for an alert: the agent's view, else the dashboard.
pub fn dashboard_link(cfg: &AlertingConfig, alert: &Alert) -> Option<String> {
    let base = cfg.dashboard_url.as_deref()?.trim_end_matches('/');
    Some(match &alert.agent {
        Some(a) => format!("{base}/#agent={a}"),
        None => format!("{base}/"),
    })
}

/// A Slack incoming-webhook body: `text` (the fallback line) and `blocks`.
pub fn slack_body(alert: &Alert, link: Option<&str>) -> Value {
    let state = match alert.action {
        Action::Trigger => alert.severity.as_str().to_uppercase(),
        Action::Resolve => "RESOLVED".to_owned(),
    };
    let icon = match alert.action {
        Action::Trigger => alert.severity.emoji(),
        Action::Resolve => ":white_check_mark:",
    };
    let text = format!("{icon} [{state}] {}", alert.summary);
    let mut fields = vec![
        json!({"type": "mrkdwn", "text": format!("*Severity*\n{}", alert.severity.as_str())}),
        json!({"type": "mrkdwn", "text": format!("*Event*\n`{}`", alert.kind.as_str())}),
    ];
    if let Some(a) = &alert.agent {
        fields.push(json!({"type": "mrkdwn", "text": format!("*Agent*\n{a}")}));
    }
    if let Some(d) = &alert.deployment {
        fields.push(json!({"type": "mrkdwn", "text": format!("*Deployment*\n{d}")}));
    }
    let mut blocks = vec![
        json!({"type": "section", "text": {"type": "mrkdwn", "text": text}}),
        json!({"type": "section", "fields": fields}),
    ];
    let mut context = format!("event `{}` · key `{}`", alert.event_id, alert.dedup_key);
    if let Some(l) = link {
        context.push_str(&format!(" · <{l}|open the dashboard>"));
    }
    blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": context}]}));
    json!({"text": text, "blocks": blocks})
}

/// A PagerDuty Events API v2 body. `routing_key` is the one place the
/// integration key appears; the caller sends it and shows it nowhere.
pub fn pagerduty_body(alert: &Alert, routing_key: &str, link: Option<&str>) -> Value {
    let links: Vec<Value> = link
        .map(|l| json!({"href": l, "text": "hale dashboard"}))
        .into_iter()
        .collect();
    let mut body = json!({
        "routing_key": routing_key,
        "event_action": alert.action,
        "dedup_key": alert.dedup_key,
    });
    if let Value::Object(m) = &mut body {
        match alert.action {
            // PagerDuty ignores a resolve's payload; it is sent for triggers.
            Action::Trigger => {
                m.insert(
                    "payload".into(),
                    json!({
                        "summary": alert.summary,
                        "severity": alert.severity.as_str(),
                        "source": source(alert),
                        "component": alert.deployment,
                        "class": alert.kind.as_str(),
                        "custom_details": alert.details,
                    }),
                );
                m.insert("links".into(), Value::Array(links));
                m.insert("client".into(), json!("hale"));
            }
            Action::Resolve => {}
        }
    }
    body
}

/// PagerDuty's `payload.source`: what the alert is about.
fn source(alert: &Alert) -> String {
    match (&alert.agent, &alert.deployment) {
        (Some(a), _) => format!("hale/agent/{a}"),
        (None, Some(d)) => format!("hale/deployment/{d}"),
        (None, None) => "hale".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: EventKind, agent: Option<&str>, payload: Value) -> Event {
        Event {
            id: "01J000000000000000000000AB".into(),
            time_ms: 1_700_000_000_000,
            kind,
            agent: agent.map(str::to_owned),
            task: None,
            turn: None,
            payload,
        }
    }

    fn route(kinds: &[EventKind], channels: &[&str], severity: Severity) -> AlertRoute {
        AlertRoute {
            kinds: kinds.to_vec(),
            channels: channels.iter().map(|c| c.to_string()).collect(),
            severity,
        }
    }

    /// The routes of docs/operations.md's `alerting:` example.
    fn example_routes() -> Vec<AlertRoute> {
        vec![
            route(
                &[EventKind::HealthEscalated, EventKind::RecoveryFailed],
                &["ops-slack", "oncall"],
                Severity::Critical,
            ),
            route(
                &[EventKind::AgentPaused, EventKind::AgentCircuitOpen],
                &["ops-slack"],
                Severity::Warning,
            ),
        ]
    }

    #[test]
    fn severity_names_round_trip_and_unknown_names_are_refused() {
        for s in Severity::ALL {
            assert_eq!(Severity::parse(s.as_str()), Some(s));
        }
        for bad in ["", "fatal", "Critical", "warn"] {
            assert_eq!(Severity::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_kind_has_a_role_and_only_known_kinds_resolve() {
        for &k in EventKind::ALL {
            let r = role(&ev(k, Some("a"), json!({})));
            if let Role::Resolve(f) = r {
                assert!(resolvers(f).contains(&k), "{k} resolves {f:?}");
            }
        }
    }

    #[test]
    fn routing_table_decides_action_severity_and_key_per_channel() {
        let routes = example_routes();
        let paused = ev(
            EventKind::AgentPaused,
            Some("research"),
            json!({"reason": "3 consecutive failed turns"}),
        );
        let escalated = ev(
            EventKind::HealthEscalated,
            Some("research"),
            json!({"reason": "stuck"}),
        );
        let resumed = ev(
            EventKind::AgentResumed,
            Some("research"),
            json!({"by": "auto"}),
        );
        let circuit = ev(
            EventKind::AgentCircuitOpen,
            Some("research"),
            json!({"deployment": "openai/gpt-4o"}),
        );
        let closed = ev(
            EventKind::BreakerStateChanged,
            Some("research"),
            json!({"deployment": "openai/gpt-4o", "to": "closed"}),
        );
        let half = ev(
            EventKind::BreakerStateChanged,
            Some("research"),
            json!({"deployment": "openai/gpt-4o", "to": "half_open"}),
        );
        let turn = ev(EventKind::TurnCompleted, Some("research"), json!({}));
        type Row<'a> = (&'a Event, &'a str, Option<(Action, Severity, &'a str)>);
        let table: Vec<Row> = vec![
            (
                &paused,
                "ops-slack",
                Some((Action::Trigger, Severity::Warning, "hale:agent:research")),
            ),
            // not routed to oncall: no page
            (&paused, "oncall", None),
            (
                &escalated,
                "oncall",
                Some((Action::Trigger, Severity::Critical, "hale:agent:research")),
            ),
            (
                &escalated,
                "ops-slack",
                Some((Action::Trigger, Severity::Critical, "hale:agent:research")),
            ),
            // resumed resolves the agent family on both channels (both watch it)
            (
                &resumed,
                "oncall",
                Some((Action::Resolve, Severity::Info, "hale:agent:research")),
            ),
            (
                &resumed,
                "ops-slack",
                Some((Action::Resolve, Severity::Info, "hale:agent:research")),
            ),
            (
                &circuit,
                "ops-slack",
                Some((
                    Action::Trigger,
                    Severity::Warning,
                    "hale:circuit:research:openai/gpt-4o",
                )),
            ),
            (&circuit, "oncall", None),
            (
                &closed,
                "ops-slack",
                Some((
                    Action::Resolve,
                    Severity::Info,
                    "hale:circuit:research:openai/gpt-4o",
                )),
            ),
            // oncall watches no circuit: the close is not sent there
            (&closed, "oncall", None),
            (&half, "ops-slack", None),
            (&turn, "ops-slack", None),
            (&paused, "nobody", None),
        ];
        for (event, channel, want) in table {
            let got = plan(event, channel, &routes).map(|a| (a.action, a.severity, a.dedup_key));
            let want = want.map(|(a, s, k)| (a, s, k.to_owned()));
            assert_eq!(got, want, "{} to {channel}", event.kind);
        }
    }

    #[test]
    fn the_highest_severity_of_overlapping_routes_wins() {
        let routes = vec![
            route(&[EventKind::AgentPaused], &["c"], Severity::Info),
            route(&[EventKind::AgentPaused], &["c"], Severity::Error),
            route(&[EventKind::AgentPaused], &["other"], Severity::Critical),
        ];
        let a = plan(
            &ev(EventKind::AgentPaused, Some("a"), json!({})),
            "c",
            &routes,
        );
        assert_eq!(a.map(|a| a.severity), Some(Severity::Error));
    }

    #[test]
    fn a_routed_resolver_keeps_its_routes_severity() {
        let routes = vec![route(&[EventKind::AgentResumed], &["c"], Severity::Warning)];
        let a = plan(
            &ev(EventKind::AgentResumed, Some("a"), json!({})),
            "c",
            &routes,
        )
        .unwrap();
        assert_eq!((a.action, a.severity), (Action::Resolve, Severity::Warning));
    }

    #[test]
    fn resolvers_share_the_dedup_key_of_what_they_resolve() {
        let pairs = [
            (
                ev(EventKind::AgentPaused, Some("a"), json!({})),
                ev(EventKind::AgentResumed, Some("a"), json!({})),
            ),
            (
                ev(EventKind::HealthEscalated, Some("a"), json!({})),
                ev(EventKind::RecoveryCompleted, Some("a"), json!({})),
            ),
            (
                ev(
                    EventKind::AgentCircuitOpen,
                    Some("a"),
                    json!({"deployment": "p/m"}),
                ),
                ev(
                    EventKind::BreakerStateChanged,
                    Some("a"),
                    json!({"deployment": "p/m", "to": "closed"}),
                ),
            ),
            (
                ev(
                    EventKind::ProviderCooldown,
                    Some("a"),
                    json!({"deployment": "p/m", "scope": "deployment", "key": "p/m"}),
                ),
                ev(
                    EventKind::ProviderRecovered,
                    Some("b"),
                    json!({"deployment": "p/m", "scope": "deployment", "key": "p/m"}),
                ),
            ),
        ];
        for (trigger, resolve) in pairs {
            let (Role::Trigger(f), Role::Resolve(g)) = (role(&trigger), role(&resolve)) else {
                panic!("{} / {}", trigger.kind, resolve.kind);
            };
            assert_eq!(f, g);
            assert_eq!(
                dedup_key(&trigger, f),
                dedup_key(&resolve, g),
                "{}",
                trigger.kind
            );
        }
        // Another agent's resume closes nothing of agent a.
        let other = ev(EventKind::AgentResumed, Some("b"), json!({}));
        assert_ne!(dedup_key(&other, Family::Agent), "hale:agent:a");
    }

    #[test]
    fn a_base_url_scope_key_is_hashed_out_of_the_dedup_key() {
        let url = "https://user:secret@llm.internal/v1";
        let e = ev(
            EventKind::ProviderCooldown,
            None,
            json!({"scope": "base_url", "key": url, "deployment": "p/m"}),
        );
        let key = dedup_key(&e, Family::Ejection);
        assert!(
            !key.contains("secret") && !key.contains("llm.internal"),
            "{key}"
        );
        assert_eq!(key, dedup_key(&e, Family::Ejection));
        assert!(key.starts_with("hale:ejection:base_url:"));
    }

    #[test]
    fn channel_kinds_add_the_resolvers_of_routed_families() {
        let routes = example_routes();
        let k = channel_kinds("oncall", &routes);
        for want in [
            EventKind::HealthEscalated,
            EventKind::RecoveryFailed,
            EventKind::AgentResumed,
            EventKind::RecoveryCompleted,
        ] {
            assert!(k.contains(&want), "{want}");
        }
        assert!(!k.contains(&EventKind::BreakerStateChanged));
        assert!(channel_kinds("ops-slack", &routes).contains(&EventKind::BreakerStateChanged));
        assert!(channel_kinds("nobody", &routes).is_empty());
    }

    #[test]
    fn summaries_read_as_sentences() {
        let table = [
            (
                ev(
                    EventKind::AgentPaused,
                    Some("research"),
                    json!({"reason": "3 consecutive failed turns"}),
                ),
                Action::Trigger,
                "agent research paused: 3 consecutive failed turns",
            ),
            (
                ev(
                    EventKind::AgentResumed,
                    Some("research"),
                    json!({"reason": "a trial request succeeded"}),
                ),
                Action::Resolve,
                "resolved: agent research resumed: a trial request succeeded",
            ),
            (
                ev(
                    EventKind::ProviderCooldown,
                    None,
                    json!({"deployment": "openai/gpt-4o"}),
                ),
                Action::Trigger,
                "deployment openai/gpt-4o ejected",
            ),
            (
                ev(
                    EventKind::BreakerStateChanged,
                    Some("a"),
                    json!({"deployment": "p/m", "to": "closed"}),
                ),
                Action::Resolve,
                "resolved: agent a on p/m breaker closed",
            ),
        ];
        for (e, action, want) in table {
            assert_eq!(summary(&e, action), want);
        }
    }

    fn paused_alert() -> Alert {
        plan(
            &ev(
                EventKind::AgentPaused,
                Some("research"),
                json!({"reason": "r", "deployment": "p/m", "nested": {"x": 1}}),
            ),
            "c",
            &[route(&[EventKind::AgentPaused], &["c"], Severity::Warning)],
        )
        .unwrap()
    }

    #[test]
    fn slack_body_has_text_blocks_severity_agent_deployment_and_link() {
        let body = slack_body(&paused_alert(), Some("http://h:3000/#agent=research"));
        let text = body["text"].as_str().unwrap();
        assert!(
            text.contains("[WARNING]") && text.contains("agent research on p/m paused: r"),
            "{text}"
        );
        let all = body["blocks"].to_string();
        for want in [
            "*Severity*\\nwarning",
            "*Agent*\\nresearch",
            "*Deployment*\\np/m",
            "<http://h:3000/#agent=research|open the dashboard>",
        ] {
            assert!(all.contains(want), "{want} in {all}");
        }
    }

    #[test]
    fn pagerduty_trigger_and_resolve_bodies() {
        let mut a = paused_alert();
        let link = "http://h/#agent=research";
        let t = pagerduty_body(&a, "RK", Some(link));
        assert_eq!(t["routing_key"], "RK");
        assert_eq!(t["event_action"], "trigger");
        assert_eq!(t["dedup_key"], "hale:agent:research");
        assert_eq!(t["payload"]["severity"], "warning");
        assert_eq!(t["payload"]["source"], "hale/agent/research");
        assert_eq!(t["payload"]["summary"], "agent research on p/m paused: r");
        assert_eq!(t["payload"]["custom_details"]["reason"], "r");
        assert!(t["payload"]["custom_details"].get("nested").is_none());
        assert_eq!(t["links"][0]["href"], link);
        a.action = Action::Resolve;
        let r = pagerduty_body(&a, "RK", Some(link));
        assert_eq!(r["event_action"], "resolve");
        assert_eq!(r["dedup_key"], "hale:agent:research");
        assert!(r.get("payload").is_none());
    }

    #[test]
    fn dashboard_links_point_at_the_agent_when_there_is_one() {
        let cfg = AlertingConfig {
            dashboard_url: Some("http://127.0.0.1:3000/".into()),
            ..AlertingConfig::default()
        };
        let a = paused_alert();
        assert_eq!(
            dashboard_link(&cfg, &a).as_deref(),
            Some("http://127.0.0.1:3000/#agent=research")
        );
        let mut b = a.clone();
        b.agent = None;
        assert_eq!(
            dashboard_link(&cfg, &b).as_deref(),
            Some("http://127.0.0.1:3000/")
        );
        assert_eq!(dashboard_link(&AlertingConfig::default(), &a), None);
    }
}
