//! Validated configuration, and every default number hale uses.
//!
//! These are the *validated* types of docs/configuration.md: the YAML layer
//! (the `hale-config` crate, apart so that its serde code is not built with the
//! rules every crate waits for) deserialises into raw structs with
//! `deny_unknown_fields`, then its `validate` builds these, reporting every
//! problem with its path. Each default is written exactly once, in a
//! `Default` impl or a `const` here; every other crate, hale-config included,
//! reads it from these types.

use crate::class::ErrorClass;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The default listen address of `hale serve`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:3000";
/// The default data directory.
pub const DEFAULT_DATA_DIR: &str = "./hale-data";
/// The agent name used when a request names none.
pub const DEFAULT_AGENT: &str = "default";

/// The whole validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// `postgres://…` for scale-out; `None` = SQLite in `data_dir`.
    pub storage: Option<String>,
    /// `storage_pool:` — the PostgreSQL connection pool's limits.
    pub storage_pool: StoragePoolConfig,
    /// `memory:` — how many idle agents and tasks stay in memory.
    pub memory: crate::memory::MemoryConfig,
    pub auth: AuthConfig,
    /// `limits:` — bounds on what a caller may send.
    pub limits: LimitsConfig,
    /// Model name → ordered targets.
    pub routes: BTreeMap<String, Vec<Target>>,
    /// Route name → the sizes of its ranks in order (`[2, 1]` for
    /// `[[a, b], c]`): the targets of a rank of two or more are one
    /// load-balanced group ([`crate::balance`]). A route not here has a rank
    /// per target.
    pub route_ranks: BTreeMap<String, Vec<usize>>,
    pub providers: Vec<ProviderConfig>,
    pub agents: BTreeMap<String, AgentConfig>,
    pub self_healing: SelfHealingConfig,
    pub retry: RetryConfig,
    pub cooldown: CooldownConfig,
    pub ejection: EjectionConfig,
    /// `hedging:` — hedged first tokens ([`crate::hedge`]).
    pub hedging: HedgingConfig,
    /// `crawling:` — streams far below their deployment's usual rate ([`crate::crawl`]).
    pub crawling: CrawlingConfig,
    pub guard: GuardConfig,
    pub health: HealthConfig,
    pub recovery: RecoveryConfig,
    pub compaction: CompactionConfig,
    pub events: EventsConfig,
    /// Price overrides per model, USD per million tokens.
    pub prices: BTreeMap<String, Price>,
    pub journal: JournalConfig,
    /// `telemetry:` — OTLP export of the turn spans.
    pub telemetry: TelemetryConfig,
    /// `tool_nodes:`; more may register with `POST /nodes`.
    pub tool_nodes: Vec<ToolNodeConfig>,
    /// `tool_jobs:` — the audit log file of tool jobs.
    pub tool_jobs: ToolJobsConfig,
    /// `workflows:` — named jobs submitted by `workflow_id` (seed 003).
    pub workflows: BTreeMap<String, WorkflowConfig>,
    /// `alerting:`; the rules are [`crate::alert`].
    pub alerting: AlertingConfig,
}

impl Config {
    /// A config with the given providers and every other section at its default.
    pub fn with_providers(providers: Vec<ProviderConfig>) -> Self {
        Self {
            listen: DEFAULT_LISTEN
                .parse()
                .expect("default listen address parses"),
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            storage: None,
            storage_pool: StoragePoolConfig::default(),
            memory: crate::memory::MemoryConfig::default(),
            auth: AuthConfig::default(),
            limits: LimitsConfig::default(),
            routes: BTreeMap::new(),
            route_ranks: BTreeMap::new(),
            providers,
            agents: BTreeMap::new(),
            self_healing: SelfHealingConfig::default(),
            retry: RetryConfig::default(),
            cooldown: CooldownConfig::default(),
            ejection: EjectionConfig::default(),
            hedging: HedgingConfig::default(),
            crawling: CrawlingConfig::default(),
            guard: GuardConfig::default(),
            health: HealthConfig::default(),
            recovery: RecoveryConfig::default(),
            compaction: CompactionConfig::default(),
            events: EventsConfig::default(),
            prices: BTreeMap::new(),
            journal: JournalConfig::default(),
            telemetry: TelemetryConfig::default(),
            tool_nodes: Vec::new(),
            tool_jobs: ToolJobsConfig::default(),
            workflows: BTreeMap::new(),
            alerting: AlertingConfig::default(),
        }
    }

    /// The provider with this name.
    pub fn provider(&self, name: &str) -> Option<&ProviderConfig> {
        self.providers.iter().find(|p| p.name == name)
    }
}

/// API keys and their scopes (the rule is [`crate::access`]), and the
/// host names hale answers to (the rule is [`crate::browser`]).
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// No keys: only direct loopback clients are served.
    pub keys: Vec<ApiKey>,
    /// No keys and this set: every client is served without authentication.
    /// Not a YAML key: only `hale serve --insecure-no-auth` sets it.
    pub insecure_no_auth: bool,
    /// `auth.allowed_hosts`: the names hale is reached by besides IP
    /// addresses and [`crate::browser::LOCALHOST`], normalized
    /// ([`crate::browser::normalize_name`]). Default: none. Without keys, a
    /// request whose `Host` is none of these is refused, and a page of one
    /// of these names is hale's own ([`crate::browser::decide`]); with or
    /// without keys, `/mcp` accepts these names besides loopback ones.
    pub allowed_hosts: Vec<String>,
}

/// `limits:` — bounds on what a caller may send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitsConfig {
    /// A request body larger than this is refused with 413, on every route.
    pub max_request_bytes: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_request_bytes: 32 * 1024 * 1024,
        }
    }
}

/// One bearer key.
#[derive(Clone)]
pub struct ApiKey {
    pub name: String,
    /// The token value, read from `token_env`. Never printed.
    pub token: Secret,
    pub scope: KeyScope,
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey")
            .field("name", &self.name)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// What a key may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyScope {
    /// Everything, including admin endpoints.
    Admin,
    /// Model calls for these agents only; the first is the key's default agent.
    Agents(Vec<String>),
}

/// A secret string whose `Debug` and `Display` never show the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    /// The value, for the one place that must send it upstream.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// `provider/model`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Target {
    pub provider: String,
    pub model: String,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

/// The wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    OpenAi,
    Anthropic,
    /// Google's Generative Language API (`generateContent`), key in `x-goog-api-key`.
    Gemini,
    /// Azure OpenAI: OpenAI's wire dialects behind Azure's URLs, headers
    /// and error shapes ([`AzureConfig`], [`crate::azure`]).
    Azure,
    /// Google Vertex AI: Gemini models through `generateContent`, Claude
    /// models through `rawPredict` with Anthropic's body, an OAuth2 token
    /// from a service account ([`VertexConfig`], [`crate::vertex`]).
    Vertex,
    /// AWS Bedrock: Converse, or Anthropic's Messages body through
    /// InvokeModel, signed with SigV4 or a Bedrock API key
    /// ([`BedrockConfig`], [`crate::bedrock`]).
    Bedrock,
}

impl ProviderKind {
    /// Whether this kind accepts an assistant prefill by default.
    pub fn default_supports_prefill(self) -> bool {
        match self {
            ProviderKind::OpenAi | ProviderKind::Azure => false,
            ProviderKind::Anthropic => true,
            // A trailing `model` turn is not continued word for word: a
            // resumed stream is a fresh answer aligned with what was delivered.
            ProviderKind::Gemini => false,
            // Set from the publisher at validation (Claude: true).
            ProviderKind::Vertex => false,
            // Converse serves many families; not every one continues a
            // trailing assistant turn (`supports_prefill: true` for Claude).
            ProviderKind::Bedrock => false,
        }
    }

    /// The `base_url` of a provider that names none; `None`: it is required
    /// (a `vertex` provider's comes from its `location`, [`crate::vertex::base_url`],
    /// a `bedrock` provider's from its `region`).
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            ProviderKind::OpenAi
            | ProviderKind::Anthropic
            | ProviderKind::Azure
            | ProviderKind::Vertex
            | ProviderKind::Bedrock => None,
            ProviderKind::Gemini => Some(GEMINI_BASE_URL),
        }
    }
}

/// The default `base_url` of a `kind: gemini` provider.
pub const GEMINI_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";

/// The API of an `openai` or `azure` provider: Chat Completions
/// (`{base_url}/chat/completions`) or the Responses API (`{base_url}/responses`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderApi {
    #[default]
    Chat,
    Responses,
}

/// Default: no response headers within this → timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default: no first token within this → timeout.
pub const DEFAULT_FIRST_TOKEN_TIMEOUT: Duration = Duration::from_secs(30);
/// Default: no chunk within this mid-stream → stream_broken.
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The first-byte expectation is `first_token_timeout` divided by this: an
/// upstream silent for longer (no response byte) that then closes the
/// connection hung, and is treated as a timeout, not retried as a blip
/// ([`crate::classify::Transport::after_silence`]). 4: 7.5 s by default.
pub const FIRST_BYTE_EXPECTATION_DIVISOR: u32 = 4;

/// One upstream provider.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    pub name: String,
    pub kind: ProviderKind,
    /// The API an `openai` provider is called with (always `Chat` for `anthropic`).
    pub api: ProviderApi,
    /// e.g. `https://api.openai.com/v1` or `https://api.anthropic.com`.
    pub base_url: String,
    /// Read from `api_key_env`; `None` sends no key.
    pub api_key: Option<Secret>,
    pub default_model: String,
    /// Models this provider offers; empty = any.
    pub models: Vec<String>,
    pub timeout: Duration,
    pub first_token_timeout: Duration,
    pub stream_idle_timeout: Duration,
    pub supports_prefill: bool,
    /// Context-window overrides, model → tokens.
    pub context_windows: BTreeMap<String, u32>,
    /// An `azure` provider's settings; `None` for every other kind.
    pub azure: Option<AzureConfig>,
    /// A `vertex` provider's settings; `None` for every other kind.
    pub vertex: Option<VertexConfig>,
    /// A `bedrock` provider's settings; `None` for every other kind.
    pub bedrock: Option<BedrockConfig>,
}

/// Who publishes a model on Vertex AI: the URL segment and the wire dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Publisher {
    /// Gemini models: `generateContent` / `streamGenerateContent`.
    Google,
    /// Claude models: `rawPredict` / `streamRawPredict` with Anthropic's body.
    Anthropic,
}

/// Where a `vertex` provider's OAuth2 tokens come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VertexCredentials {
    /// `credentials_file`: a service-account key (JSON) at this path.
    KeyFile(String),
    /// No `credentials_file`: the key named by `GOOGLE_APPLICATION_CREDENTIALS`
    /// when set, else the metadata server (a GCP VM, GKE, Cloud Run).
    Default,
}

/// What a `vertex` provider adds to [`ProviderConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VertexConfig {
    /// `project`: the Google Cloud project id.
    pub project: String,
    /// `location`: a region such as `us-east5`, or `global`.
    pub location: String,
    /// `publisher`: `None` = from each model's name ([`crate::vertex::publisher`]).
    pub publisher: Option<Publisher>,
    pub credentials: VertexCredentials,
}

/// The API a `bedrock` attempt uses ([`crate::bedrock::api_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BedrockApi {
    /// `/model/{id}/converse` and `/converse-stream`: one shape for every family.
    Converse,
    /// `/model/{id}/invoke` and `/invoke-with-response-stream` with
    /// Anthropic's Messages body.
    Invoke,
}

/// How a `bedrock` provider authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BedrockAuth {
    /// `auth: sigv4` (the default): requests signed with AWS credentials
    /// from the environment, the shared profile files or a web identity.
    SigV4 {
        /// `profile`: the shared-file profile to read (else `AWS_PROFILE`,
        /// else `default`).
        profile: Option<String>,
    },
    /// `auth: api_key`: a Bedrock API key (held in
    /// [`ProviderConfig::api_key`]) sent as `Authorization: Bearer`.
    ApiKey,
}

/// What a `bedrock` provider adds to [`ProviderConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BedrockConfig {
    /// The AWS region: the default `base_url`'s and the signature's.
    pub region: String,
    /// `api`; `None`: by model id ([`crate::bedrock::api_for`]).
    pub api: Option<BedrockApi>,
    pub auth: BedrockAuth,
}

/// How an `azure` provider authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AzureAuth {
    /// `auth: api_key` (the default): the key from `api_key_env` in the
    /// `api-key` header.
    ApiKey,
    /// `auth: entra` with `token_env`: a Microsoft Entra ID token read once
    /// at start (held in [`ProviderConfig::api_key`]), sent as
    /// `Authorization: Bearer`.
    EntraToken,
    /// `auth: entra` with `token_command`: the token is what the command
    /// prints (run with `sh -c`), fetched again after `refresh` or after a
    /// 401 ([`crate::azure::token_due`]).
    EntraCommand { command: String, refresh: Duration },
}

/// Default `token_refresh_ms` of an Entra `token_command`: 45 minutes, well
/// inside the hour an Entra access token lives at the least.
pub const DEFAULT_AZURE_TOKEN_REFRESH: Duration = Duration::from_secs(45 * 60);

/// What an `azure` provider adds to [`ProviderConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzureConfig {
    /// `api_version`: call deployment URLs
    /// (`/openai/deployments/{deployment}/…?api-version=…`); `None`: the v1
    /// API (`/openai/v1/…`, the deployment named in the body's `model`).
    pub api_version: Option<String>,
    /// `deployments`: model → deployment name; a model not listed is its
    /// own deployment name.
    pub deployments: BTreeMap<String, String>,
    pub auth: AzureAuth,
}

impl ProviderConfig {
    /// How long a healthy upstream takes, at most, to send the first byte of
    /// its response: `first_token_timeout` / [`FIRST_BYTE_EXPECTATION_DIVISOR`].
    /// A connection closed with no response after a longer silence is a
    /// timeout ([`crate::classify::Transport::SilentHangUp`]).
    pub fn first_byte_expectation(&self) -> Duration {
        self.first_token_timeout / FIRST_BYTE_EXPECTATION_DIVISOR
    }

    /// A provider with every optional field at its default.
    pub fn new(name: &str, kind: ProviderKind, base_url: &str, default_model: &str) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            api: ProviderApi::Chat,
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key: None,
            default_model: default_model.to_owned(),
            models: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            first_token_timeout: DEFAULT_FIRST_TOKEN_TIMEOUT,
            stream_idle_timeout: DEFAULT_STREAM_IDLE_TIMEOUT,
            supports_prefill: kind.default_supports_prefill(),
            context_windows: BTreeMap::new(),
            azure: None,
            vertex: None,
            bedrock: None,
        }
    }

    /// Whether this provider serves `model` (an empty list serves any).
    pub fn offers(&self, model: &str) -> bool {
        self.models.is_empty()
            || self.models.iter().any(|m| m == model)
            || self.default_model == model
    }
}

/// One agent's settings.
#[derive(Debug, Clone, Default)]
pub struct AgentConfig {
    /// The primary provider; `None` = the first provider.
    pub provider: Option<String>,
    /// Overrides `self_healing.fallback.providers`.
    pub fallback: Option<Vec<String>>,
    pub budget: BudgetConfig,
}

/// Token and cost caps. `None` = no cap.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BudgetConfig {
    pub max_tokens_per_task: Option<u64>,
    pub max_tokens_per_agent: Option<u64>,
    pub max_cost_usd_per_task: Option<f64>,
    pub max_cost_usd_per_agent: Option<f64>,
}

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

/// `self_healing:`.
#[derive(Debug, Clone)]
pub struct SelfHealingConfig {
    pub enabled: bool,
    /// Failed turns in a row before the agent is paused.
    pub max_consecutive_failures: u32,
    /// First automatic trial of an agent paused for failures…
    pub resume_probe_after: Duration,
    /// …doubling per failed trial up to this.
    pub resume_probe_max: Duration,
    pub circuit_breaker: BreakerConfig,
    pub fallback_enabled: bool,
    pub fallback_providers: Vec<String>,
}

impl Default for SelfHealingConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_consecutive_failures: 3,
            resume_probe_after: Duration::from_secs(30),
            resume_probe_max: Duration::from_secs(300),
            circuit_breaker: BreakerConfig::default(),
            fallback_enabled: true,
            fallback_providers: Vec::new(),
        }
    }
}

/// A circuit breaker's rules. Every trip rule is optional.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerConfig {
    pub enabled: bool,
    /// Trip after N consecutive failures.
    pub consecutive_failures: Option<u32>,
    /// Trip after N failures within `window`.
    pub failure_threshold: Option<u32>,
    pub window: Duration,
    /// Trip when the failure rate over the window exceeds this (0..=1)…
    pub failure_rate: Option<f64>,
    /// …with at least this many calls in the window.
    pub min_calls: u32,
    /// A call slower than this counts as a failure.
    pub slow_call: Option<Duration>,
    /// How long Open lasts before a trial is let through.
    pub half_open_after: Duration,
    /// Cap of the open duration when it doubles per failed trial.
    pub max_open: Duration,
    /// Trial calls admitted while HalfOpen.
    pub half_open_requests: u32,
    /// Successful trials needed to close.
    pub success_threshold: u32,
    /// Fraction of jitter applied to the open duration (0 = none).
    pub open_jitter: f64,
    /// Classes that count as failures against this breaker.
    pub counted_classes: Vec<ErrorClass>,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            consecutive_failures: None,
            failure_threshold: Some(5),
            window: Duration::from_secs(60),
            failure_rate: None,
            min_calls: 10,
            slow_call: None,
            half_open_after: Duration::from_secs(10),
            max_open: Duration::from_secs(10),
            half_open_requests: 1,
            success_threshold: 1,
            open_jitter: 0.1,
            counted_classes: vec![
                ErrorClass::Network,
                ErrorClass::Timeout,
                ErrorClass::RateLimit,
                ErrorClass::Overloaded,
                ErrorClass::StreamBroken,
                ErrorClass::StreamCrawling,
                ErrorClass::Auth,
                ErrorClass::Billing,
                ErrorClass::Format,
                ErrorClass::Unknown,
            ],
        }
    }
}

/// One retry policy: attempts and backoff.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts on one target, including the first.
    pub max_attempts: u32,
    pub initial: Duration,
    pub max: Duration,
    pub jitter: Jitter,
}

/// How backoff is randomised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// Uniform in [0, base·2^n] capped.
    Full,
    /// AWS "decorrelated": uniform in [initial, prev·3] capped.
    Decorrelated,
}

/// `retry:`.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryConfig {
    /// A wait longer than this goes to the next healthy target instead.
    pub max_retry_wait: Duration,
    /// How often a skipped provider gets one live request as a probe.
    pub probe_interval: Duration,
    /// Timeout of a probe request.
    pub probe_timeout: Duration,
    pub rate_limit: RetryPolicy,
    pub server_error: RetryPolicy,
    pub network: RetryPolicy,
    /// Retries may add at most this fraction to the request rate…
    pub budget_ratio: f64,
    /// …plus this many per second.
    pub budget_min_per_sec: u32,
    /// One deadline for a whole turn, all retries and failovers included.
    pub turn_deadline: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_retry_wait: Duration::from_secs(5),
            probe_interval: Duration::from_secs(5),
            probe_timeout: Duration::from_secs(5),
            rate_limit: RetryPolicy {
                max_attempts: 5,
                initial: Duration::from_secs(1),
                max: Duration::from_secs(60),
                jitter: Jitter::Full,
            },
            server_error: RetryPolicy {
                max_attempts: 3,
                initial: Duration::from_secs(1),
                max: Duration::from_secs(30),
                jitter: Jitter::Full,
            },
            network: RetryPolicy {
                max_attempts: 3,
                initial: Duration::from_secs(1),
                max: Duration::from_secs(30),
                jitter: Jitter::Full,
            },
            budget_ratio: 0.2,
            budget_min_per_sec: 10,
            turn_deadline: Duration::from_secs(300),
        }
    }
}

/// `cooldown_ms:` — the longest a provider is skipped per class. `None` = no cooldown.
#[derive(Debug, Clone, PartialEq)]
pub struct CooldownConfig {
    pub by_class: BTreeMap<ErrorClass, Duration>,
}

impl CooldownConfig {
    /// The configured cooldown for a class, if it has one.
    pub fn for_class(&self, class: ErrorClass) -> Option<Duration> {
        self.by_class.get(&class).copied()
    }
}

impl Default for CooldownConfig {
    fn default() -> Self {
        let s = Duration::from_secs;
        let by_class = ErrorClass::ALL
            .iter()
            .filter_map(|&c| {
                let d = match c {
                    ErrorClass::Network => Some(s(30)),
                    ErrorClass::Timeout => Some(s(30)),
                    ErrorClass::RateLimit => Some(s(60)),
                    ErrorClass::Overloaded => Some(s(120)),
                    ErrorClass::StreamBroken => Some(s(30)),
                    ErrorClass::StreamCrawling => Some(s(30)),
                    ErrorClass::ContextOverflow => None,
                    ErrorClass::ContentPolicy => None,
                    ErrorClass::Auth => Some(s(600)),
                    ErrorClass::Billing => Some(s(1800)),
                    ErrorClass::ModelNotFound => Some(s(3600)),
                    ErrorClass::BadRequest => None,
                    ErrorClass::Format => None,
                    ErrorClass::Budget => None,
                    ErrorClass::Safety => None,
                    ErrorClass::Policy => None,
                    ErrorClass::Unknown => Some(s(30)),
                };
                d.map(|d| (c, d))
            })
            .collect();
        Self { by_class }
    }
}

/// `ejection:` — when a deployment is taken out of rotation.
#[derive(Debug, Clone, PartialEq)]
pub struct EjectionConfig {
    /// Consecutive failures that eject a deployment.
    pub eject_after: u32,
    /// A failure rate at or over this (0..=1)…
    pub failure_rate: f64,
    /// …over at least this many calls…
    pub min_calls: u32,
    /// …within this window ejects it.
    pub window: Duration,
    /// Growth cap: an ejection lasts its class's base times the ejections in
    /// a row, at most this (or the base, when the base is longer).
    pub max_ejection: Duration,
}

impl Default for EjectionConfig {
    fn default() -> Self {
        Self {
            eject_after: 3,
            failure_rate: 0.5,
            min_calls: 5,
            window: Duration::from_secs(30),
            max_ejection: Duration::from_secs(300),
        }
    }
}

/// `hedging:` — when a silent attempt is hedged on the next target, and how
/// often (the rules: [`crate::hedge`]; docs/configuration.md, "hedging").
#[derive(Debug, Clone, PartialEq)]
pub struct HedgingConfig {
    /// Hedge at all.
    pub enabled: bool,
    /// The hedge point of a deployment with too little history.
    pub default_after: Duration,
    /// The learned hedge point is never earlier than this…
    pub floor: Duration,
    /// …nor later than this.
    pub ceiling: Duration,
    /// The quantile (0 < q ≤ 1) of recent first-token times.
    pub quantile: f64,
    /// How many recent first-token times a deployment keeps.
    pub history: usize,
    /// Hedges may be at most this share (0..=1) of the requests…
    pub budget_share: f64,
    /// …of this window, per deployment and per agent.
    pub budget_window: Duration,
    /// A first token later than this multiple of the same quantile is a slow
    /// outlier, evidence toward ejecting the deployment ([`crate::slow`]);
    /// 0 turns the rule off. Never under [`crate::hedge::HEDGE_FACTOR`], so
    /// no attempt is slow before its hedge point.
    pub slow_factor: f64,
    /// …and never before this (not under `floor`).
    pub slow_floor: Duration,
}

impl Default for HedgingConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            default_after: Duration::from_secs(4),
            floor: Duration::from_millis(500),
            ceiling: Duration::from_secs(25),
            quantile: 0.95,
            history: 50,
            budget_share: 0.05,
            budget_window: Duration::from_secs(60),
            slow_factor: 3.0,
            slow_floor: Duration::from_secs(2),
        }
    }
}

/// `guard:` — the per-task safety guard.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardConfig {
    pub max_events: u64,
    pub max_tool_calls: u64,
    pub task_timeout: Duration,
    pub tool_caps: BTreeMap<String, u64>,
    /// The same tool with the same arguments this many times in a row stops the task.
    pub tool_loop_threshold: u32,
    /// The same call returning the same result this many times in a row stops the task.
    pub result_loop_threshold: u32,
    /// Edits of the same file this many times in a row stop the task.
    pub file_edit_loop_threshold: u32,
    /// Tools that edit files, and the argument that names the path.
    pub edit_tools: BTreeMap<String, String>,
    /// Tools exempt from edit counting.
    pub read_only_tools: Vec<String>,
}

impl Default for GuardConfig {
    fn default() -> Self {
        let caps = [
            ("edit_file", 8),
            ("delete_file", 3),
            ("run_command", 10),
            ("web_search", 8),
        ];
        let edits = [
            ("edit_file", "path"),
            ("write_file", "path"),
            ("delete_file", "path"),
        ];
        Self {
            max_events: 2000,
            max_tool_calls: 400,
            task_timeout: Duration::from_secs(600),
            tool_caps: caps.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            tool_loop_threshold: 4,
            result_loop_threshold: 3,
            file_edit_loop_threshold: 4,
            edit_tools: edits
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            read_only_tools: ["read_file", "list_files", "search", "grep", "web_search"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

/// `crawling:` — when a stream that still flows, far below its deployment's
/// usual rate, is a failure of its own and resumed on the next target (the
/// rule: [`crate::crawl`]; docs/configuration.md, "crawling").
#[derive(Debug, Clone, PartialEq)]
pub struct CrawlingConfig {
    /// Judge streams at all.
    pub enabled: bool,
    /// A stream's rate over `window` under this fraction (0 < f ≤ 1) of its
    /// deployment's usual rate is slow…
    pub below: f64,
    /// …and slow for longer than this is crawling.
    pub after: Duration,
    /// The sliding window the stream's current rate is measured over.
    pub window: Duration,
    /// Finished streams a deployment needs (within
    /// [`crate::crawl::SAMPLE_MAX_AGE`]) before its usual rate is known; a
    /// deployment with fewer is never judged.
    pub min_samples: usize,
}

impl Default for CrawlingConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            below: 0.2,
            after: Duration::from_secs(10),
            window: Duration::from_secs(5),
            min_samples: 5,
        }
    }
}

/// `health:` — agent health and interventions.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthConfig {
    /// Degraded when no heartbeat for this long (stale 10–20 min)…
    pub stale_after: Duration,
    /// …stuck when no progress for this long.
    pub stuck_after: Duration,
    /// Degraded above this error rate.
    pub error_rate_threshold: f64,
    /// Degraded when a turn's tokens exceed this multiple of the running mean.
    pub token_spike_factor: f64,
    /// Identical calls in a row that count as stuck.
    pub repeated_call_threshold: u32,
    /// Failing after more than this many consecutive failures.
    pub failing_after_failures: u32,
    pub nudge_max_attempts: u32,
    pub nudge_interval: Duration,
    pub escalation_timeout: Duration,
    /// How often the monitor evaluates every agent.
    pub evaluate_every: Duration,
}

impl Default for HealthConfig {
    fn default() -> Self {
        let m = |n: u64| Duration::from_secs(60 * n);
        Self {
            stale_after: m(10),
            stuck_after: m(30),
            error_rate_threshold: 0.25,
            token_spike_factor: 3.0,
            repeated_call_threshold: 3,
            failing_after_failures: 3,
            nudge_max_attempts: 3,
            nudge_interval: m(10),
            escalation_timeout: m(15),
            evaluate_every: Duration::from_secs(5),
        }
    }
}

/// `recovery:` — limits of restarting a crashed or terminated task.
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveryConfig {
    pub max_per_task: u32,
    pub max_per_hour: u32,
    pub backoff: Vec<Duration>,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        Self {
            max_per_task: 3,
            max_per_hour: 5,
            backoff: vec![
                Duration::from_secs(60),
                Duration::from_secs(120),
                Duration::from_secs(240),
            ],
        }
    }
}

/// Compaction settings.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionConfig {
    /// `self_healing.compaction_threshold`.
    pub threshold: f64,
    /// Tool results longer than this (chars) are stripped by tier 1.
    pub strip_over_chars: usize,
    /// Messages at the end never touched.
    pub keep_last: usize,
    /// Nothing is summarised under this many messages.
    pub min_messages: usize,
    /// The route or model the summariser calls; `None` = the request's own target.
    pub summarizer_model: Option<String>,
    /// Output-token budget of one summariser call.
    pub summarizer_max_tokens: u32,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            threshold: 0.85,
            strip_over_chars: 200,
            keep_last: 4,
            min_messages: 6,
            summarizer_model: None,
            summarizer_max_tokens: 1024,
        }
    }
}

/// `events:` — sinks, the outbox and the store's writer.
#[derive(Debug, Clone)]
pub struct EventsConfig {
    pub webhooks: Vec<WebhookConfig>,
    pub nats: Option<NatsConfig>,
    pub outbox_cap: u64,
    /// `true` = fsync every commit (power-loss durable); default survives kill -9.
    pub fsync_always: bool,
    /// Failed deliveries of one event before it moves to the dead letters.
    pub max_delivery_attempts: u32,
    /// Group commit: flush after this many events or this long, whichever first.
    pub batch_max: usize,
    pub batch_linger: Duration,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            webhooks: Vec::new(),
            nats: None,
            outbox_cap: 1_000_000,
            fsync_always: false,
            max_delivery_attempts: 3,
            batch_max: 1024,
            batch_linger: Duration::from_millis(5),
        }
    }
}

/// One webhook sink.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    pub url: String,
    pub secret: Option<Secret>,
    /// Empty = every kind.
    pub kinds: Vec<String>,
}

/// `alerting:` — event kinds routed to Slack and PagerDuty channels by
/// severity. Empty by default: no channel, no alert.
#[derive(Debug, Clone, Default)]
pub struct AlertingConfig {
    /// Base URL of hale's dashboard, for links in messages.
    pub dashboard_url: Option<String>,
    pub channels: Vec<AlertChannel>,
    pub routes: Vec<AlertRoute>,
}

/// The PagerDuty Events API v2 endpoint, the default `url:` of a
/// `kind: pagerduty` channel.
pub const PAGERDUTY_EVENTS_URL: &str = "https://events.pagerduty.com/v2/enqueue";

/// One alert channel (`alerting.channels.<name>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertChannel {
    /// The name routes refer to; public (sink names, metrics).
    pub name: String,
    pub target: AlertTarget,
}

/// Where a channel posts, with its credential. Neither the Slack URL nor the
/// routing key is ever shown: both are [`Secret`]s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertTarget {
    /// A Slack-compatible incoming webhook; its URL is the credential.
    Slack { url: Secret },
    /// PagerDuty Events API v2 at `url` (default [`PAGERDUTY_EVENTS_URL`]).
    PagerDuty { url: String, routing_key: Secret },
}

/// One route: these kinds go to these channels with this severity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertRoute {
    pub kinds: Vec<crate::event::EventKind>,
    pub channels: Vec<String>,
    pub severity: crate::severity::Severity,
}

/// The NATS JetStream sink.
#[derive(Debug, Clone)]
pub struct NatsConfig {
    pub url: String,
    pub subject_prefix: String,
    pub stream: String,
}

impl NatsConfig {
    pub const DEFAULT_SUBJECT_PREFIX: &'static str = "hale.events";
    pub const DEFAULT_STREAM: &'static str = "HALE_EVENTS";
}

/// How long the health history (transitions and per-deployment minutes) is
/// kept; the rule is
/// [`crate::history::prune_cutoff`].
pub const HISTORY_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
/// How often the per-deployment minutes counted in memory are flushed.
pub const HISTORY_FLUSH_EVERY: Duration = Duration::from_secs(60);
/// How often history older than [`HISTORY_RETENTION`] is pruned.
pub const HISTORY_PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// The range `GET /history` returns when `from` is not given: the last day.
pub const HISTORY_DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// After a stream's finish, how long hale waits for the provider's usage and
/// `[DONE]` before finalising the stream itself.
pub const FINISH_GRACE: Duration = Duration::from_secs(1);

/// At shutdown, how long in-flight turns may take to finish before the
/// process stops waiting for them (undelivered events stay in the outbox).
pub const SHUTDOWN_DRAIN: Duration = Duration::from_secs(30);
/// At shutdown, how long background tasks (relays, monitor) get to stop.
pub const SHUTDOWN_TASKS: Duration = Duration::from_secs(5);

/// `storage_pool:` — limits of the PostgreSQL connection pool of each
/// instance (SQLite has its own small fixed pool: one writer, WAL readers).
/// Every instance holds up to `max_connections` on the server, so N
/// instances need N × this under PostgreSQL's `max_connections` (100 by
/// default), plus two listener connections each (agents, events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoragePoolConfig {
    pub max_connections: u32,
    /// How long a query waits for a free connection before it fails (the
    /// caller gets a clear storage error instead of hanging).
    pub acquire_timeout: Duration,
}

impl Default for StoragePoolConfig {
    fn default() -> Self {
        Self {
            max_connections: 8,
            acquire_timeout: Duration::from_secs(30),
        }
    }
}

/// `journal:` — how long the turn journal (and idempotency keys) are kept,
/// and which turns keep their response body.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalConfig {
    /// Turns older than this are pruned; so are idempotency keys.
    pub retention: Duration,
    /// `journal.bodies`; default [`JournalBodies::Needed`].
    pub bodies: JournalBodies,
    /// `journal.durability`; default [`JournalDurability::Durable`].
    pub durability: JournalDurability,
}

impl Default for JournalConfig {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(7 * 24 * 3600),
            bodies: JournalBodies::default(),
            durability: JournalDurability::default(),
        }
    }
}

/// `journal.durability`: whether an answer waits for its turn's commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JournalDurability {
    /// A non-streamed answer, and a stream's closing frame, are released
    /// only once the turn's row, its counts and its events are committed
    /// (group commit: the turns finishing together share one commit). A
    /// stuck store is waited for at most
    /// [`crate::memory::durable_release`]'s bounds.
    #[default]
    Durable,
    /// Answers are released as soon as they are ready and the turn is
    /// queued to the writer: a crash (`kill -9`, power loss) loses the turns
    /// answered since the last group commit — their rows, counts and events.
    Relaxed,
}

/// `journal.bodies`: which successful turns keep their response body in the
/// turn journal. Every turn's row (timeline, usage, status, request hash) is
/// kept whatever this says, and a response to a request with an
/// `Idempotency-Key` is always kept in its own table (idempotent replays
/// never read the turn journal). The only reader of a turn's body is replay
/// instead of re-billing, which serves tasks that were recovered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JournalBodies {
    /// Every successful turn keeps its body (the journal grows by the size
    /// of every answer).
    All,
    /// Only turns of a task that may be recovered: one a supervisor has
    /// looked up (`hale run` does before it starts the agent), that stored a
    /// checkpoint, or that was recovered already.
    #[default]
    Needed,
    /// No turn keeps its body: replay instead of re-billing is off (a
    /// recovered agent's repeated request is sent to the provider again).
    Off,
}

impl JournalBodies {
    /// Whether a successful turn keeps its response body, given whether its
    /// task may be recovered (a turn without a task never can).
    pub fn keeps(self, task_may_be_recovered: bool) -> bool {
        match self {
            JournalBodies::All => true,
            JournalBodies::Needed => task_may_be_recovered,
            JournalBodies::Off => false,
        }
    }
}

/// The service name spans are exported under when `telemetry.service_name` is not set.
pub const DEFAULT_SERVICE_NAME: &str = "hale";

/// `telemetry:` — `tracing` spans per turn and attempt, exported over OTLP
/// (HTTP, protobuf) to `{otlp_endpoint}/v1/traces` when an endpoint is set.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// The collector's base URL (`http://127.0.0.1:4318`); `None`: no export.
    pub otlp_endpoint: Option<String>,
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
        }
    }
}

/// How often the journal's retention is enforced.
pub const JOURNAL_PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// How hale speaks to a tool node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolNodeKind {
    /// An MCP server over Streamable HTTP (`url` is its MCP endpoint).
    Mcp,
    /// A plain endpoint: `POST {url}/tools/{name}`, `GET {url}/tools`.
    Http,
}

impl ToolNodeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolNodeKind::Mcp => "mcp",
            ToolNodeKind::Http => "http",
        }
    }
}

/// One tool node of `tool_nodes:` (or registered with `POST /nodes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolNodeConfig {
    pub name: String,
    pub kind: ToolNodeKind,
    pub url: String,
    /// Tools of this node that are safe to run again anywhere.
    pub deterministic: Vec<String>,
    /// Free-form labels shown by `GET /nodes`.
    pub metadata: BTreeMap<String, String>,
    /// This node's breaker numbers over [`crate::tools::node_breaker_config`].
    pub breaker: NodeBreakerConfig,
}

/// `tool_jobs:`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ToolJobsConfig {
    /// `tool_jobs.audit_log`: finished jobs also appended to a file.
    pub audit_log: Option<AuditLogConfig>,
}

/// Default size at which the audit log file is rotated.
pub const DEFAULT_AUDIT_LOG_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// Default rotated audit log files kept besides the current one.
pub const DEFAULT_AUDIT_LOG_KEEP: u32 = 5;

/// `tool_jobs.audit_log`: one JSON line per finished job, appended to `path`;
/// when the next line would take it past `max_bytes` the file becomes
/// `path.1` (`path.1` becomes `path.2`, …) and at most `keep` old files stay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditLogConfig {
    pub path: PathBuf,
    pub max_bytes: u64,
    pub keep: u32,
}

/// `workflows.<name>`: a named job's steps and tool declarations, as JSON
/// in the shape of `POST /jobs` (checked by `hale-tools` at start).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WorkflowConfig {
    pub steps: Vec<serde_json::Value>,
    pub tools: Vec<serde_json::Value>,
}

/// A tool node's own breaker numbers (`tool_nodes[].breaker`, or `breaker`
/// of `POST /nodes`); an unset one keeps the default of
/// [`crate::tools::node_breaker_config`], where the defaults live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeBreakerConfig {
    /// Consecutive node faults that open the breaker (≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<u32>,
    /// Seconds the breaker stays open before a trial (≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// Trial calls admitted while half-open (≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub half_open_requests: Option<u32>,
}

#[cfg(test)]
mod journal_bodies_tests {
    use super::JournalBodies;

    #[test]
    fn which_turns_keep_their_body() {
        let rows = [
            (JournalBodies::All, false, true),
            (JournalBodies::All, true, true),
            (JournalBodies::Needed, false, false),
            (JournalBodies::Needed, true, true),
            (JournalBodies::Off, false, false),
            (JournalBodies::Off, true, false),
        ];
        for (mode, may_recover, want) in rows {
            assert_eq!(mode.keeps(may_recover), want, "{mode:?} {may_recover}");
        }
    }
}
