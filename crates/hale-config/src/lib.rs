//! hale-config: the YAML config layer (docs/configuration.md), raw serde types,
//! then validation into hale-core's [`Config`].
//!
//! A crate of its own, apart from hale-core's rules, for the build: serde's
//! code for these types, instantiated through serde-saphyr and
//! serde_path_to_error, was 70 % of hale-core's LLVM IR, and everything
//! depends on hale-core. Here it compiles beside the gateway, the store and
//! the events crates (none of which depends on it) and at a lower
//! optimization level (Cargo.toml's `[profile.release.package.hale-config]`):
//! a file is parsed once at start and on reload, never on a turn
//! (BENCHMARKS.md, "First build"). Only the `hale` binary (`serve`'s setup,
//! the printed example), hale-bench's tests and the fuzz target load YAML.
//!
//! Loading is two stages, as in TensorZero's and tokio-console's config code:
//!
//! 1. **Parse** the text into the raw structs below with `serde-saphyr`. Every
//!    struct has `#[serde(deny_unknown_fields)]`, every leaf that validation
//!    looks at is a [`Spanned`] (so its line is known), and every field is
//!    optional here — a missing required key is reported by stage 2, together
//!    with everything else, instead of stopping the parse. The deserializer is
//!    wrapped in `serde_path_to_error`, so the one error a parse can produce
//!    (bad YAML, an unknown key, a wrong type, a duplicate key) still names its
//!    path, e.g. `providers[1].timeout_ms`, next to the parser's line.
//! 2. **Validate** ([`validate`]) the raw tree into [`Config`], collecting
//!    *every* problem with its path and line. Each section starts from its
//!    validated type's `Default` (or [`ProviderConfig::new`]) and overrides only
//!    what the YAML gives, so no default number is written twice (they live in
//!    `hale_core::config`). Lists and maps given in the YAML (`tool_caps`,
//!    `edit_tools`, `read_only_tools`, `backoff_ms`) replace the default list as
//!    a whole.
//!
//! The crate is pure, as hale-core is (`.ci/run` checks both): the caller
//! passes the YAML text and an environment lookup; secrets (`api_key_env`,
//! `token_env`, `secret_env`) are read through that lookup into [`Secret`]s,
//! and no message ever contains their values.
//!
//! A few keys may be set to `null` to switch a default rule off: the breaker's
//! `failure_threshold`, `consecutive_failures`, `failure_rate` and
//! `slow_call_ms`. An omitted key keeps the default.

mod validate;

#[cfg(test)]
mod tests;

pub use validate::validate;

use hale_core::config::Config;
#[cfg(doc)]
use hale_core::config::{ProviderConfig, Secret};
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};
use serde_saphyr::Spanned;
use std::collections::BTreeMap;

/// The smallest working config, printed by `hale serve` when no config is given.
pub const MINIMAL_EXAMPLE: &str = "\
# hale.yaml — the smallest working config. Run: hale serve --config hale.yaml
listen: 127.0.0.1:3000
providers:
  - name: openai
    kind: openai                 # or anthropic; any OpenAI-compatible endpoint works
    base_url: https://api.openai.com/v1
    api_key_env: OPENAI_API_KEY  # the key is read from this environment variable
    default_model: gpt-4o-mini
";

/// One problem found in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Where, e.g. `providers[1].api_key_env`; empty for the whole document.
    pub path: String,
    /// The 1-based YAML line, when known.
    pub line: Option<usize>,
    /// What is wrong. Never contains a secret's value.
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found in a config file, in line order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Parses and validates. `env` looks up environment variables (`api_key_env`,
/// `token_env`, `secret_env`).
pub fn load(yaml: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigErrors> {
    let raw = parse(yaml).map_err(|e| ConfigErrors(vec![e]))?;
    validate(&raw, env)
}

/// Stage 1: parses YAML into the raw tree. Stops at the first syntax error,
/// unknown key, wrong type or duplicate key, reported with its path and line.
pub fn parse(yaml: &str) -> Result<RawConfig, ConfigError> {
    let mut path = String::new();
    let parsed = serde_saphyr::with_deserializer_from_str(yaml, |de| {
        let mut track = serde_path_to_error::Track::new();
        let tracked = serde_path_to_error::Deserializer::new(de, &mut track);
        let result = RawConfig::deserialize(tracked);
        if result.is_err() {
            path = render_path(&track.path());
        }
        result
    });
    parsed.map_err(|e| parse_error(path, &e))
}

/// Renders a serde path as `a.b[1].c`, leaving out the `value` level that
/// [`Spanned`] adds around each node and the unknown (`?`) segments.
fn render_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } if key == "value" => {}
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    out
}

/// Turns a parser error into a [`ConfigError`], keeping the parser's message
/// without its location suffix (the line goes to [`ConfigError::line`]).
fn parse_error(mut path: String, e: &serde_saphyr::Error) -> ConfigError {
    let line = e
        .location()
        .and_then(|l| usize::try_from(l.line()).ok())
        .filter(|&l| l > 0);
    let full = e.without_snippet().to_string();
    let mut message = strip_location(&full).to_owned();
    if let Some(rest) = message.strip_prefix("duplicate mapping key: ") {
        let key = rest
            .split(", set DuplicateKeyPolicy")
            .next()
            .unwrap_or(rest)
            .to_owned();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(&key);
        message = format!("duplicate key `{key}`: each key may appear only once");
    }
    message = match message.as_str() {
        "invalid u32" => "expected a whole number from 0 to 4294967295".to_owned(),
        "invalid u64" => "expected a whole number, 0 or more".to_owned(),
        "invalid f64" => "expected a number".to_owned(),
        _ => message,
    };
    ConfigError {
        path,
        line,
        message,
    }
}

/// Strips a trailing ` at line N, column M` from a parser message.
fn strip_location(msg: &str) -> &str {
    let Some(i) = msg.rfind(" at line ") else {
        return msg;
    };
    let tail = &msg[i + " at line ".len()..];
    let is_loc = tail
        .split_once(", column ")
        .is_some_and(|(l, c)| is_digits(l) && is_digits(c.trim_end()));
    if is_loc { &msg[..i] } else { msg }
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// An optional key whose value's line is kept.
type Opt<T> = Option<Spanned<T>>;

/// One entry of a route: a target `provider/model`, or a list of them of
/// equal rank (load-balanced). Read by hand (a string or a list of
/// strings): it has no keys of its own.
#[derive(Debug)]
enum RawRouteEntry {
    One(String),
    Group(Vec<Spanned<String>>),
}

impl<'de> Deserialize<'de> for RawRouteEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entry;
        impl<'de> serde::de::Visitor<'de> for Entry {
            type Value = RawRouteEntry;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a target `provider/model`, or a list of them of equal rank")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(RawRouteEntry::One(v.to_owned()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut group = Vec::new();
                while let Some(t) = seq.next_element()? {
                    group.push(t);
                }
                Ok(RawRouteEntry::Group(group))
            }
        }
        d.deserialize_any(Entry)
    }
}
/// A key that may be omitted (outer `None`, keep the default) or set to
/// `null` (`Some(None)`, switch the rule off).
type Nullable<T> = Option<Option<Spanned<T>>>;
/// A map whose values' lines are kept.
type Map<T> = BTreeMap<String, Spanned<T>>;

fn nullable<'de, D, T>(d: D) -> Result<Nullable<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<Spanned<T>>::deserialize(d).map(Some)
}

/// The whole file, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    listen: Opt<String>,
    #[serde(default)]
    data_dir: Opt<String>,
    #[serde(default)]
    storage: Opt<String>,
    #[serde(default)]
    storage_pool: Opt<RawStoragePool>,
    #[serde(default)]
    memory: Opt<RawMemory>,
    #[serde(default)]
    auth: Opt<RawAuth>,
    #[serde(default)]
    limits: Opt<RawLimits>,
    #[serde(default)]
    telemetry: Opt<RawTelemetry>,
    #[serde(default)]
    routes: Opt<Map<Vec<Spanned<RawRouteEntry>>>>,
    #[serde(default)]
    providers: Opt<Vec<Spanned<RawProvider>>>,
    #[serde(default)]
    agents: Opt<Map<RawAgent>>,
    #[serde(default)]
    self_healing: Opt<RawSelfHealing>,
    #[serde(default)]
    retry: Opt<RawRetry>,
    #[serde(default)]
    cooldown_ms: Opt<RawCooldown>,
    #[serde(default)]
    ejection: Opt<RawEjection>,
    #[serde(default)]
    hedging: Opt<RawHedging>,
    #[serde(default)]
    crawling: Opt<RawCrawling>,
    #[serde(default)]
    guard: Opt<RawGuard>,
    #[serde(default)]
    health: Opt<RawHealth>,
    #[serde(default)]
    recovery: Opt<RawRecovery>,
    #[serde(default)]
    compaction: Opt<RawCompaction>,
    #[serde(default)]
    events: Opt<RawEvents>,
    #[serde(default)]
    journal: Opt<RawJournal>,
    #[serde(default)]
    prices: Opt<Map<RawPrice>>,
    #[serde(default)]
    tool_nodes: Opt<Vec<Spanned<RawToolNode>>>,
    #[serde(default)]
    tool_jobs: Opt<RawToolJobs>,
    #[serde(default)]
    workflows: Opt<Map<RawWorkflow>>,
    #[serde(default)]
    alerting: Opt<RawAlerting>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    #[serde(default)]
    keys: Opt<Vec<Spanned<RawKey>>>,
    #[serde(default)]
    allowed_hosts: Opt<Vec<Spanned<String>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    #[serde(default)]
    max_request_bytes: Opt<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    #[serde(default)]
    name: Opt<String>,
    #[serde(default)]
    token_env: Opt<String>,
    #[serde(default)]
    scope: Opt<String>,
    #[serde(default)]
    agents: Opt<Vec<Spanned<String>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    #[serde(default)]
    name: Opt<String>,
    #[serde(default)]
    kind: Opt<String>,
    #[serde(default)]
    api: Opt<String>,
    #[serde(default)]
    base_url: Opt<String>,
    #[serde(default)]
    api_key_env: Opt<String>,
    #[serde(default)]
    default_model: Opt<String>,
    #[serde(default)]
    models: Opt<Vec<Spanned<String>>>,
    #[serde(default)]
    timeout_ms: Opt<u64>,
    #[serde(default)]
    first_token_timeout_ms: Opt<u64>,
    #[serde(default)]
    stream_idle_timeout_ms: Opt<u64>,
    #[serde(default)]
    supports_prefill: Opt<bool>,
    #[serde(default)]
    context_windows: Opt<Map<u32>>,
    // `kind: azure` only (validate/azure.rs).
    #[serde(default)]
    api_version: Opt<String>,
    #[serde(default)]
    deployments: Opt<Map<String>>,
    #[serde(default)]
    auth: Opt<String>,
    #[serde(default)]
    token_env: Opt<String>,
    #[serde(default)]
    token_command: Opt<String>,
    #[serde(default)]
    token_refresh_ms: Opt<u64>,
    // `kind: vertex` only (validate/vertex.rs).
    #[serde(default)]
    project: Opt<String>,
    #[serde(default)]
    location: Opt<String>,
    #[serde(default)]
    publisher: Opt<String>,
    #[serde(default)]
    credentials_file: Opt<String>,
    // `kind: bedrock` only (validate/bedrock.rs); `auth` is shared with azure.
    #[serde(default)]
    region: Opt<String>,
    #[serde(default)]
    profile: Opt<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    #[serde(default)]
    provider: Opt<String>,
    #[serde(default)]
    fallback: Opt<Vec<Spanned<String>>>,
    #[serde(default)]
    budget: Opt<RawBudget>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    #[serde(default)]
    max_tokens_per_task: Opt<u64>,
    #[serde(default)]
    max_tokens_per_agent: Opt<u64>,
    #[serde(default)]
    max_cost_usd_per_task: Opt<f64>,
    #[serde(default)]
    max_cost_usd_per_agent: Opt<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCrawling {
    #[serde(default)]
    enabled: Opt<bool>,
    #[serde(default)]
    below: Opt<f64>,
    #[serde(default)]
    after_ms: Opt<u64>,
    #[serde(default)]
    window_ms: Opt<u64>,
    #[serde(default)]
    min_samples: Opt<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHedging {
    #[serde(default)]
    enabled: Opt<bool>,
    #[serde(default)]
    default_after_ms: Opt<u64>,
    #[serde(default)]
    floor_ms: Opt<u64>,
    #[serde(default)]
    ceiling_ms: Opt<u64>,
    #[serde(default)]
    quantile: Opt<f64>,
    #[serde(default)]
    history: Opt<u32>,
    #[serde(default)]
    budget_share: Opt<f64>,
    #[serde(default)]
    budget_window_ms: Opt<u64>,
    #[serde(default)]
    slow_factor: Opt<f64>,
    #[serde(default)]
    slow_floor_ms: Opt<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEjection {
    #[serde(default)]
    eject_after: Opt<u32>,
    #[serde(default)]
    failure_rate: Opt<f64>,
    #[serde(default)]
    min_calls: Opt<u32>,
    #[serde(default)]
    window_ms: Opt<u64>,
    #[serde(default)]
    max_ejection_ms: Opt<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSelfHealing {
    #[serde(default)]
    enabled: Opt<bool>,
    #[serde(default)]
    max_consecutive_failures: Opt<u32>,
    /// Removed: refused with what to use instead.
    #[serde(default)]
    restart_delay_ms: Opt<IgnoredAny>,
    #[serde(default)]
    resume_probe_after_ms: Opt<u64>,
    #[serde(default)]
    resume_probe_max_ms: Opt<u64>,
    #[serde(default)]
    compaction_threshold: Opt<f64>,
    #[serde(default)]
    circuit_breaker: Opt<RawBreaker>,
    #[serde(default)]
    fallback: Opt<RawFallback>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBreaker {
    #[serde(default)]
    enabled: Opt<bool>,
    #[serde(default, deserialize_with = "nullable")]
    failure_threshold: Nullable<u32>,
    #[serde(default)]
    window_ms: Opt<u64>,
    #[serde(default)]
    half_open_after_ms: Opt<u64>,
    #[serde(default)]
    max_open_ms: Opt<u64>,
    #[serde(default)]
    half_open_requests: Opt<u32>,
    #[serde(default)]
    success_threshold: Opt<u32>,
    #[serde(default, deserialize_with = "nullable")]
    consecutive_failures: Nullable<u32>,
    #[serde(default, deserialize_with = "nullable")]
    failure_rate: Nullable<f64>,
    #[serde(default)]
    min_calls: Opt<u32>,
    #[serde(default, deserialize_with = "nullable")]
    slow_call_ms: Nullable<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFallback {
    #[serde(default)]
    enabled: Opt<bool>,
    #[serde(default)]
    providers: Opt<Vec<Spanned<String>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    #[serde(default)]
    max_retry_wait_ms: Opt<u64>,
    #[serde(default)]
    probe_interval_ms: Opt<u64>,
    #[serde(default)]
    turn_deadline_ms: Opt<u64>,
    #[serde(default)]
    rate_limit: Opt<RawPolicy>,
    #[serde(default)]
    server_error: Opt<RawPolicy>,
    #[serde(default)]
    network: Opt<RawPolicy>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    max_attempts: Opt<u32>,
    #[serde(default)]
    initial_ms: Opt<u64>,
    #[serde(default)]
    max_ms: Opt<u64>,
    #[serde(default)]
    jitter: Opt<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCooldown {
    #[serde(default)]
    auth: Opt<u64>,
    #[serde(default)]
    rate_limit: Opt<u64>,
    #[serde(default)]
    billing: Opt<u64>,
    #[serde(default)]
    timeout: Opt<u64>,
    #[serde(default)]
    overloaded: Opt<u64>,
    #[serde(default)]
    model_not_found: Opt<u64>,
    #[serde(default)]
    network: Opt<u64>,
    #[serde(default)]
    stream_broken: Opt<u64>,
    #[serde(default)]
    stream_crawling: Opt<u64>,
    #[serde(default)]
    unknown: Opt<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGuard {
    #[serde(default)]
    max_events: Opt<u64>,
    #[serde(default)]
    max_tool_calls: Opt<u64>,
    #[serde(default)]
    task_timeout_ms: Opt<u64>,
    #[serde(default)]
    tool_caps: Opt<BTreeMap<String, u64>>,
    #[serde(default)]
    tool_loop_threshold: Opt<u32>,
    #[serde(default)]
    file_edit_loop_threshold: Opt<u32>,
    #[serde(default)]
    result_loop_threshold: Opt<u32>,
    #[serde(default)]
    edit_tools: Opt<BTreeMap<String, String>>,
    #[serde(default)]
    read_only_tools: Opt<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHealth {
    /// Removed: refused with what to use instead.
    #[serde(default)]
    heartbeat_timeout_ms: Opt<IgnoredAny>,
    #[serde(default)]
    stale_after_ms: Opt<u64>,
    #[serde(default)]
    stuck_after_ms: Opt<u64>,
    #[serde(default)]
    nudge: Opt<RawNudge>,
    #[serde(default)]
    escalation_timeout_ms: Opt<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNudge {
    #[serde(default)]
    max_attempts: Opt<u32>,
    #[serde(default)]
    interval_ms: Opt<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRecovery {
    #[serde(default)]
    max_per_task: Opt<u32>,
    #[serde(default)]
    max_per_hour: Opt<u32>,
    #[serde(default)]
    backoff_ms: Opt<Vec<Spanned<u64>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCompaction {
    /// Removed: refused with what to use instead.
    #[serde(default)]
    warn_at: Opt<IgnoredAny>,
    #[serde(default)]
    summarizer_model: Opt<String>,
    #[serde(default)]
    summarizer_max_tokens: Opt<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTelemetry {
    #[serde(default)]
    otlp_endpoint: Opt<String>,
    #[serde(default)]
    service_name: Opt<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMemory {
    #[serde(default)]
    idle_agents: Opt<usize>,
    #[serde(default)]
    idle_tasks: Opt<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStoragePool {
    #[serde(default)]
    max_connections: Opt<u32>,
    #[serde(default)]
    acquire_timeout_ms: Opt<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJournal {
    #[serde(default)]
    retention_hours: Opt<u64>,
    #[serde(default)]
    bodies: Opt<hale_core::config::JournalBodies>,
    #[serde(default)]
    durability: Opt<hale_core::config::JournalDurability>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvents {
    #[serde(default)]
    webhooks: Opt<Vec<Spanned<RawWebhook>>>,
    #[serde(default)]
    nats: Opt<RawNats>,
    #[serde(default)]
    outbox_cap: Opt<u64>,
    #[serde(default)]
    fsync: Opt<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebhook {
    #[serde(default)]
    url: Opt<String>,
    #[serde(default)]
    secret_env: Opt<String>,
    #[serde(default)]
    kinds: Opt<Vec<Spanned<String>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNats {
    #[serde(default)]
    url: Opt<String>,
    #[serde(default)]
    subject_prefix: Opt<String>,
    #[serde(default)]
    stream: Opt<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrice {
    #[serde(default)]
    input_per_mtok: Opt<f64>,
    #[serde(default)]
    output_per_mtok: Opt<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolNode {
    #[serde(default)]
    name: Opt<String>,
    #[serde(default)]
    kind: Opt<String>,
    #[serde(default)]
    url: Opt<String>,
    #[serde(default)]
    deterministic: Opt<Vec<Spanned<String>>>,
    #[serde(default)]
    metadata: Opt<BTreeMap<String, String>>,
    #[serde(default, alias = "circuit_breaker")]
    breaker: Opt<RawNodeBreaker>,
}

/// `tool_jobs:` — what tool jobs write besides the store.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolJobs {
    #[serde(default)]
    audit_log: Opt<RawAuditLog>,
}

/// `tool_jobs.audit_log:` — the audit log as JSON lines in a file, rotated.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuditLog {
    #[serde(default)]
    path: Opt<String>,
    #[serde(default)]
    max_bytes: Opt<i64>,
    #[serde(default)]
    keep: Opt<i64>,
}

/// `workflows.<name>:` — a named job: its steps (and tool declarations),
/// written as in `POST /jobs`; `hale-tools` checks their shape at start.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkflow {
    #[serde(default)]
    steps: Opt<Vec<serde_json::Value>>,
    #[serde(default)]
    tools: Opt<Vec<serde_json::Value>>,
}

/// `tool_nodes[].breaker`; signed so a negative number gets an error that
/// names its key rather than a parse error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNodeBreaker {
    #[serde(default)]
    failure_threshold: Opt<i64>,
    #[serde(default)]
    timeout_seconds: Opt<i64>,
    #[serde(default)]
    half_open_requests: Opt<i64>,
}

/// `alerting:` (docs/operations.md, "Alerts").
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlerting {
    #[serde(default)]
    dashboard_url: Opt<String>,
    #[serde(default)]
    channels: Opt<Map<RawAlertChannel>>,
    #[serde(default)]
    routes: Opt<Vec<Spanned<RawAlertRoute>>>,
}

/// `alerting.channels.<name>`: `kind: slack` with `url_env` (or `url`),
/// `kind: pagerduty` with `routing_key_env` and an optional `url`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlertChannel {
    #[serde(default)]
    kind: Opt<String>,
    #[serde(default)]
    url: Opt<String>,
    #[serde(default)]
    url_env: Opt<String>,
    #[serde(default)]
    routing_key_env: Opt<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlertRoute {
    #[serde(default)]
    kinds: Opt<Vec<Spanned<String>>>,
    #[serde(default)]
    channels: Opt<Vec<Spanned<String>>>,
    #[serde(default)]
    severity: Opt<String>,
}
