//! Tests of config loading: a full example, the minimal example, one
//! test per validation rule (path and line), defaults, and secret hygiene.

use super::{ConfigError, ConfigErrors, MINIMAL_EXAMPLE, load};
use hale_core::class::ErrorClass;
use hale_core::config::{
    BreakerConfig, CompactionConfig, Config, CooldownConfig, CrawlingConfig, EjectionConfig,
    EventsConfig, GuardConfig, HealthConfig, HedgingConfig, Jitter, KeyScope, NatsConfig,
    ProviderKind, RecoveryConfig, RetryConfig, SelfHealingConfig, Target,
};
use std::time::Duration;

/// An example that sets most sections, each key as the docs show it.
const FULL_EXAMPLE: &str = r#"listen: 127.0.0.1:3000
data_dir: ./hale-data            # SQLite, lockfile, outbox live here
# storage: postgres://hale@db/hale   # scale-out; default is SQLite in data_dir

auth:                            # no keys: only loopback clients, with a warning
  keys:
    - {name: admin, token_env: HALE_TOKEN, scope: admin}
    - {name: research, token_env: RESEARCH_TOKEN, agents: [research-agent]}

routes:                          # model name -> ordered targets provider/model
  smart: [openai/gpt-4o, anthropic/claude-sonnet-4]

providers:
  - name: openai
    kind: openai                 # any OpenAI-compatible endpoint (vLLM, Groq, Ollama, ...)
    base_url: https://api.openai.com/v1
    api_key_env: OPENAI_API_KEY
    default_model: gpt-4o
    models: [gpt-4o, gpt-4o-mini]
    timeout_ms: 60000            # no response headers within this: timeout
    first_token_timeout_ms: 30000
    stream_idle_timeout_ms: 30000
    supports_prefill: false      # default per kind: anthropic true, openai false
  - name: anthropic
    kind: anthropic
    base_url: https://api.anthropic.com
    api_key_env: ANTHROPIC_API_KEY
    default_model: claude-sonnet-4

agents:
  default: {provider: openai}
  research-agent:
    provider: openai
    fallback: [anthropic]        # overrides self_healing.fallback.providers
    budget: {max_tokens_per_task: 2000000}

self_healing:
  enabled: true
  max_consecutive_failures: 3    # failed turns in a row before the agent is paused
  resume_probe_after_ms: 30000   # first automatic trial of a paused agent, doubling to 5 min
  compaction_threshold: 0.85
  circuit_breaker: {enabled: true, failure_threshold: 5, window_ms: 60000,
                    half_open_after_ms: 10000, max_open_ms: 10000,
                    half_open_requests: 1, success_threshold: 1}
  fallback: {enabled: true, providers: [anthropic]}

retry:                           # per failure class
  max_retry_wait_ms: 5000
  probe_interval_ms: 5000
  rate_limit:   {max_attempts: 5, initial_ms: 1000, max_ms: 60000}
  server_error: {max_attempts: 3, initial_ms: 1000, max_ms: 30000}
  network:      {max_attempts: 3, initial_ms: 1000, max_ms: 30000}

ejection: {eject_after: 3, failure_rate: 0.5, min_calls: 5, window_ms: 30000, max_ejection_ms: 300000}
hedging: {enabled: true, default_after_ms: 4000, floor_ms: 500, ceiling_ms: 25000, quantile: 0.95,
          history: 50, budget_share: 0.05, budget_window_ms: 60000, slow_factor: 3, slow_floor_ms: 2000}
crawling: {enabled: true, below: 0.2, after_ms: 10000, window_ms: 5000, min_samples: 5}
cooldown_ms: {auth: 600000, rate_limit: 60000, billing: 1800000, timeout: 30000,
              overloaded: 120000, model_not_found: 3600000, stream_crawling: 30000, unknown: 30000}
guard: {max_events: 2000, max_tool_calls: 400, task_timeout_ms: 600000,
        tool_caps: {edit_file: 8, delete_file: 3, run_command: 10, web_search: 8},
        tool_loop_threshold: 4, file_edit_loop_threshold: 4}
health: {stale_after_ms: 600000, stuck_after_ms: 1800000,
         nudge: {max_attempts: 3, interval_ms: 600000}, escalation_timeout_ms: 900000}
recovery: {max_per_task: 3, max_per_hour: 5, backoff_ms: [60000, 120000, 240000]}
events:
  webhooks: [{url: "https://ops.example/hale", secret_env: HOOK_SECRET, kinds: [agent.paused, agent.circuit_open]}]
  nats: {url: "nats://127.0.0.1:4222", subject_prefix: hale.events, stream: HALE_EVENTS}
  outbox_cap: 1000000
"#;

const SECRET_VALUES: [(&str, &str); 5] = [
    ("HALE_TOKEN", "tok-admin-5f3a9c"),
    ("RESEARCH_TOKEN", "tok-research-77e1b2"),
    ("OPENAI_API_KEY", "sk-openai-secret-4d2f"),
    ("ANTHROPIC_API_KEY", "sk-ant-secret-9a8b"),
    ("HOOK_SECRET", "whsec-0c1d2e3f"),
];

/// An environment holding every variable the examples name.
fn full_env(name: &str) -> Option<String> {
    SECRET_VALUES
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| (*v).to_owned())
}

fn no_env(_: &str) -> Option<String> {
    None
}

/// Two valid providers on lines 1–9; tests append their own sections after.
const BASE: &str = "\
providers:
  - name: openai
    kind: openai
    base_url: https://api.openai.com/v1
    default_model: gpt-4o
  - name: anthropic
    kind: anthropic
    base_url: https://api.anthropic.com
    default_model: claude-sonnet-4
";

fn with_base(rest: &str) -> String {
    format!("{BASE}{rest}")
}

fn load_ok(yaml: &str) -> Config {
    match load(yaml, &full_env) {
        Ok(c) => c,
        Err(e) => panic!("expected the config to load, got:\n{e}"),
    }
}

fn load_err(yaml: &str) -> Vec<ConfigError> {
    match load(yaml, &full_env) {
        Ok(_) => panic!("expected errors, the config loaded"),
        Err(ConfigErrors(errs)) => errs,
    }
}

/// Asserts that exactly one error has `path`, on `line`, with `needle` in its message.
#[track_caller]
fn assert_error(errs: &[ConfigError], path: &str, line: Option<usize>, needle: &str) {
    let found: Vec<&ConfigError> = errs.iter().filter(|e| e.path == path).collect();
    assert_eq!(
        found.len(),
        1,
        "one error at {path} expected, got {errs:#?}"
    );
    let e = found[0];
    assert_eq!(e.line, line, "line of {path}: {errs:#?}");
    assert!(
        e.message.contains(needle),
        "message of {path} should contain {needle:?}: {e}"
    );
}

#[test]
fn full_example_loads_with_expected_values() {
    let c = load_ok(FULL_EXAMPLE);
    assert_eq!(c.listen, "127.0.0.1:3000".parse().unwrap());
    assert_eq!(c.data_dir, std::path::PathBuf::from("./hale-data"));
    assert_eq!(c.storage, None);

    assert_eq!(c.auth.keys.len(), 2);
    assert_eq!(c.auth.keys[0].name, "admin");
    assert_eq!(c.auth.keys[0].token.expose(), "tok-admin-5f3a9c");
    assert_eq!(c.auth.keys[0].scope, KeyScope::Admin);
    assert_eq!(c.auth.keys[1].name, "research");
    assert_eq!(
        c.auth.keys[1].scope,
        KeyScope::Agents(vec!["research-agent".into()])
    );

    let smart = &c.routes["smart"];
    assert_eq!(
        smart,
        &vec![
            Target {
                provider: "openai".into(),
                model: "gpt-4o".into()
            },
            Target {
                provider: "anthropic".into(),
                model: "claude-sonnet-4".into()
            },
        ]
    );

    assert_eq!(c.providers.len(), 2);
    let o = c.provider("openai").unwrap();
    assert_eq!(o.kind, ProviderKind::OpenAi);
    assert_eq!(o.base_url, "https://api.openai.com/v1");
    assert_eq!(
        o.api_key.as_ref().unwrap().expose(),
        "sk-openai-secret-4d2f"
    );
    assert_eq!(o.default_model, "gpt-4o");
    assert_eq!(
        o.models,
        vec!["gpt-4o".to_owned(), "gpt-4o-mini".to_owned()]
    );
    assert_eq!(o.timeout, Duration::from_millis(60000));
    assert_eq!(o.first_token_timeout, Duration::from_millis(30000));
    assert_eq!(o.stream_idle_timeout, Duration::from_millis(30000));
    assert!(!o.supports_prefill);
    let a = c.provider("anthropic").unwrap();
    assert_eq!(a.kind, ProviderKind::Anthropic);
    assert_eq!(a.api_key.as_ref().unwrap().expose(), "sk-ant-secret-9a8b");
    assert!(a.supports_prefill, "anthropic accepts prefill by default");
    assert!(a.models.is_empty());

    assert_eq!(c.agents["default"].provider.as_deref(), Some("openai"));
    assert_eq!(c.agents["default"].fallback, None);
    let r = &c.agents["research-agent"];
    assert_eq!(r.provider.as_deref(), Some("openai"));
    assert_eq!(r.fallback, Some(vec!["anthropic".to_owned()]));
    assert_eq!(r.budget.max_tokens_per_task, Some(2_000_000));
    assert_eq!(r.budget.max_cost_usd_per_task, None);

    let sh = &c.self_healing;
    assert!(sh.enabled);
    assert_eq!(sh.max_consecutive_failures, 3);
    assert_eq!(c.compaction.threshold, 0.85);
    let b = &sh.circuit_breaker;
    assert!(b.enabled);
    assert_eq!(b.failure_threshold, Some(5));
    assert_eq!(b.window, Duration::from_secs(60));
    assert_eq!(b.half_open_after, Duration::from_secs(10));
    assert_eq!(b.max_open, Duration::from_secs(10));
    assert_eq!(b.half_open_requests, 1);
    assert_eq!(b.success_threshold, 1);
    assert!(sh.fallback_enabled);
    assert_eq!(sh.fallback_providers, vec!["anthropic".to_owned()]);

    assert_eq!(c.retry.max_retry_wait, Duration::from_secs(5));
    assert_eq!(c.retry.probe_interval, Duration::from_secs(5));
    assert_eq!(c.retry.rate_limit.max_attempts, 5);
    assert_eq!(c.retry.rate_limit.max, Duration::from_secs(60));
    assert_eq!(c.retry.server_error.max_attempts, 3);
    assert_eq!(c.retry.network.max, Duration::from_secs(30));

    assert_eq!(
        c.cooldown.for_class(ErrorClass::Auth),
        Some(Duration::from_secs(600))
    );
    assert_eq!(
        c.cooldown.for_class(ErrorClass::Billing),
        Some(Duration::from_secs(1800))
    );
    assert_eq!(
        c.cooldown.for_class(ErrorClass::ModelNotFound),
        Some(Duration::from_secs(3600))
    );
    assert_eq!(c.cooldown.for_class(ErrorClass::ContentPolicy), None);

    assert_eq!(c.guard.max_events, 2000);
    assert_eq!(c.guard.max_tool_calls, 400);
    assert_eq!(c.guard.task_timeout, Duration::from_secs(600));
    assert_eq!(c.guard.tool_caps["run_command"], 10);
    assert_eq!(c.guard.tool_loop_threshold, 4);

    assert_eq!(c.health.stuck_after, Duration::from_secs(1800));
    assert_eq!(c.health.nudge_max_attempts, 3);
    assert_eq!(c.health.escalation_timeout, Duration::from_secs(900));

    assert_eq!(c.recovery.max_per_hour, 5);
    assert_eq!(c.recovery.backoff[2], Duration::from_secs(240));

    assert_eq!(c.events.webhooks.len(), 1);
    let w = &c.events.webhooks[0];
    assert_eq!(w.url, "https://ops.example/hale");
    assert_eq!(w.secret.as_ref().unwrap().expose(), "whsec-0c1d2e3f");
    assert_eq!(
        w.kinds,
        vec!["agent.paused".to_owned(), "agent.circuit_open".to_owned()]
    );
    let n = c.events.nats.as_ref().unwrap();
    assert_eq!(n.url, "nats://127.0.0.1:4222");
    assert_eq!(n.subject_prefix, "hale.events");
    assert_eq!(n.stream, "HALE_EVENTS");
    assert_eq!(c.events.outbox_cap, 1_000_000);
}

#[test]
fn full_example_restates_the_defaults() {
    // Every number in the example is a default: sections given in full must
    // equal their Default, so the example and the code cannot drift apart.
    let c = load_ok(FULL_EXAMPLE);
    assert_eq!(c.retry, RetryConfig::default());
    assert_eq!(c.health, HealthConfig::default());
    assert_eq!(c.recovery, RecoveryConfig::default());
    assert_eq!(c.guard, GuardConfig::default());
    assert_eq!(c.cooldown, CooldownConfig::default());
    assert_eq!(c.ejection, EjectionConfig::default());
    assert_eq!(c.hedging, HedgingConfig::default());
    assert_eq!(c.crawling, CrawlingConfig::default());
    assert_eq!(
        c.self_healing.resume_probe_after,
        SelfHealingConfig::default().resume_probe_after
    );
    assert_eq!(c.self_healing.circuit_breaker, BreakerConfig::default());
    assert_eq!(c.compaction, CompactionConfig::default());
}

#[test]
fn minimal_example_loads() {
    let env = |k: &str| (k == "OPENAI_API_KEY").then(|| "sk-minimal".to_owned());
    let c = load(MINIMAL_EXAMPLE, &env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.providers.len(), 1);
    assert_eq!(c.providers[0].name, "openai");
    assert_eq!(
        c.providers[0].api_key.as_ref().unwrap().expose(),
        "sk-minimal"
    );
    assert_eq!(c.listen, "127.0.0.1:3000".parse().unwrap());
}

#[test]
fn minimal_example_without_its_env_var_names_it() {
    let errs = load(MINIMAL_EXAMPLE, &no_env).unwrap_err().0;
    assert_error(
        &errs,
        "providers[0].api_key_env",
        Some(7),
        "OPENAI_API_KEY is not set",
    );
}

#[test]
fn omitted_fields_keep_defaults() {
    let c = load_ok(BASE);
    let d = Config::with_providers(Vec::new());
    assert_eq!(c.listen, d.listen);
    assert_eq!(c.data_dir, d.data_dir);
    assert_eq!(c.storage, None);
    assert!(c.auth.keys.is_empty());
    assert!(c.routes.is_empty() && c.agents.is_empty() && c.prices.is_empty());
    let sh = SelfHealingConfig::default();
    assert_eq!(c.self_healing.enabled, sh.enabled);
    assert_eq!(
        c.self_healing.max_consecutive_failures,
        sh.max_consecutive_failures
    );
    assert_eq!(c.self_healing.circuit_breaker, sh.circuit_breaker);
    assert_eq!(c.self_healing.fallback_enabled, sh.fallback_enabled);
    assert_eq!(c.self_healing.fallback_providers, sh.fallback_providers);
    assert_eq!(c.retry, RetryConfig::default());
    assert_eq!(c.cooldown, CooldownConfig::default());
    assert_eq!(c.guard, GuardConfig::default());
    assert_eq!(c.health, HealthConfig::default());
    assert_eq!(c.recovery, RecoveryConfig::default());
    assert_eq!(c.compaction, CompactionConfig::default());
    let ev = EventsConfig::default();
    assert_eq!(c.events.outbox_cap, ev.outbox_cap);
    assert_eq!(c.events.fsync_always, ev.fsync_always);
    assert!(c.events.webhooks.is_empty() && c.events.nats.is_none());
    let p = &c.providers[0];
    assert_eq!(p.timeout, hale_core::config::DEFAULT_TIMEOUT);
    assert_eq!(
        p.first_token_timeout,
        hale_core::config::DEFAULT_FIRST_TOKEN_TIMEOUT
    );
    assert_eq!(
        p.stream_idle_timeout,
        hale_core::config::DEFAULT_STREAM_IDLE_TIMEOUT
    );
    assert!(p.api_key.is_none());
}

#[test]
fn partial_sections_override_only_what_is_given() {
    let c = load_ok(&with_base(
        "retry: {rate_limit: {max_attempts: 7, jitter: decorrelated}}\n\
         self_healing: {circuit_breaker: {window_ms: 1000}}\n\
         health: {nudge: {max_attempts: 5}}\n\
         events: {nats: {url: \"nats://n:4222\"}, fsync: always}\n",
    ));
    let d = RetryConfig::default();
    assert_eq!(c.retry.rate_limit.max_attempts, 7);
    assert_eq!(c.retry.rate_limit.jitter, Jitter::Decorrelated);
    assert_eq!(c.retry.rate_limit.initial, d.rate_limit.initial);
    assert_eq!(c.retry.rate_limit.max, d.rate_limit.max);
    assert_eq!(c.retry.server_error, d.server_error);
    let b = &c.self_healing.circuit_breaker;
    assert_eq!(b.window, Duration::from_secs(1));
    assert_eq!(
        b.failure_threshold,
        BreakerConfig::default().failure_threshold
    );
    assert_eq!(c.health.nudge_max_attempts, 5);
    assert_eq!(
        c.health.nudge_interval,
        HealthConfig::default().nudge_interval
    );
    let n = c.events.nats.unwrap();
    assert_eq!(n.subject_prefix, NatsConfig::DEFAULT_SUBJECT_PREFIX);
    assert_eq!(n.stream, NatsConfig::DEFAULT_STREAM);
    assert!(c.events.fsync_always);
}

#[test]
fn null_switches_a_breaker_rule_off() {
    let c = load_ok(&with_base(
        "self_healing:\n  circuit_breaker:\n    failure_threshold: null\n    consecutive_failures: 4\n    failure_rate: 0.5\n    slow_call_ms: 2000\n",
    ));
    let b = &c.self_healing.circuit_breaker;
    assert_eq!(b.failure_threshold, None);
    assert_eq!(b.consecutive_failures, Some(4));
    assert_eq!(b.failure_rate, Some(0.5));
    assert_eq!(b.slow_call, Some(Duration::from_secs(2)));
}

#[test]
fn prices_and_context_windows_load() {
    let c = load_ok(
        "providers:\n  - {name: p, kind: openai, base_url: \"http://localhost:8000/v1/\", default_model: m, context_windows: {m: 32768}}\nprices:\n  m: {input_per_mtok: 2.5, output_per_mtok: 10}\n",
    );
    assert_eq!(c.providers[0].base_url, "http://localhost:8000/v1");
    assert_eq!(c.providers[0].context_windows["m"], 32768);
    assert_eq!(c.prices["m"].input_per_mtok, 2.5);
    assert_eq!(c.prices["m"].output_per_mtok, 10.0);
}

// ---- parse errors: the parser stops at the first, with path and line ----

#[test]
fn unknown_key_is_reported_with_path_and_line() {
    let errs = load_err(&with_base("    bogus: 1\n"));
    assert_error(
        &errs,
        "providers[1].bogus",
        Some(10),
        "unknown field `bogus`",
    );
    let errs = load_err(&with_base("retries: {}\n"));
    assert_error(&errs, "retries", Some(10), "unknown field `retries`");
}

#[test]
fn wrong_type_is_reported_with_path_and_line() {
    let errs = load_err(&with_base(
        "retry:\n  rate_limit:\n    max_attempts: lots\n",
    ));
    assert_error(
        &errs,
        "retry.rate_limit.max_attempts",
        Some(12),
        "expected a whole number",
    );
    let errs = load_err("providers: 5\n");
    assert_error(&errs, "providers", Some(1), "sequence");
    let errs = load_err("- just\n- a list\n");
    assert_error(&errs, "", Some(1), "mapping");
}

#[test]
fn duplicate_yaml_key_is_reported() {
    let errs = load_err("listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n");
    assert_error(&errs, "listen", Some(2), "duplicate key `listen`");
    let errs = load_err(&with_base(
        "routes:\n  smart: [openai/gpt-4o]\n  smart: [anthropic/x]\n",
    ));
    assert_error(&errs, "routes.smart", Some(12), "duplicate key `smart`");
}

#[test]
fn yaml_syntax_error_has_a_line() {
    let errs = load_err("providers:\n  - name: \"unclosed\n");
    assert_eq!(errs.len(), 1);
    assert!(errs[0].line.is_some(), "{errs:?}");
}

// ---- validation rules: one test each ----

#[test]
fn no_providers_is_an_error() {
    assert_error(&load_err(""), "providers", None, "at least one provider");
    assert_error(
        &load_err("listen: 127.0.0.1:1\nproviders: []\n"),
        "providers",
        Some(2),
        "at least one provider",
    );
}

#[test]
fn duplicate_provider_name_is_an_error() {
    let errs = load_err(&with_base(
        "  - {name: openai, kind: openai, base_url: \"https://x\", default_model: m}\n",
    ));
    assert_error(
        &errs,
        "providers[2].name",
        Some(10),
        "duplicate provider name `openai` (also providers[0])",
    );
}

#[test]
fn unknown_provider_kind_is_an_error() {
    let errs = load_err(
        "providers:\n  - name: p\n    kind: gopher\n    base_url: https://x\n    default_model: m\n",
    );
    assert_error(
        &errs,
        "providers[0].kind",
        Some(3),
        "unknown provider kind `gopher`",
    );
}

/// A `kind: gemini` provider needs no `base_url` (Google's is the default),
/// takes its key from `api_key_env`, continues no prefill by default, and
/// has no `api: responses`.
#[test]
fn a_gemini_provider_defaults_its_base_url() {
    let c = load_ok(
        "providers:\n  - {name: g, kind: gemini, api_key_env: OPENAI_API_KEY, default_model: gemini-2.5-flash}\n  - {name: h, kind: gemini, base_url: \"http://127.0.0.1:9/v1beta/\", default_model: m}\n",
    );
    let g = &c.providers[0];
    assert_eq!(g.kind, ProviderKind::Gemini);
    assert_eq!(g.base_url, hale_core::config::GEMINI_BASE_URL);
    assert!(!g.supports_prefill);
    assert_eq!(c.providers[1].base_url, "http://127.0.0.1:9/v1beta");
    let errs =
        load_err("providers:\n  - {name: g, kind: gemini, api: responses, default_model: m}\n");
    assert_error(
        &errs,
        "providers[0].api",
        Some(2),
        "`api: responses` is for `kind: openai` and `kind: azure` providers",
    );
}

/// A `kind: vertex` provider: its endpoint from `location`, its publisher
/// from its models' names (Claude continues a prefill, Gemini not), its key
/// file kept as a path; what is missing or wrong is reported per key.
#[test]
fn vertex_providers_load_and_their_mistakes_are_named() {
    use hale_core::config::{Publisher, VertexCredentials};
    let c = load_ok(
        "providers:
  - {name: c, kind: vertex, project: my-proj, location: us-east5, credentials_file: /k.json, default_model: claude-sonnet-4@20250514}
  - {name: g, kind: vertex, project: my-proj, location: global, default_model: gemini-2.5-pro}
  - {name: t, kind: vertex, project: my-proj, location: europe-west1, base_url: \"http://127.0.0.1:9/\", publisher: anthropic, default_model: my-tuned}
",
    );
    let (cl, g, t) = (&c.providers[0], &c.providers[1], &c.providers[2]);
    assert_eq!(cl.kind, ProviderKind::Vertex);
    assert_eq!(cl.base_url, "https://us-east5-aiplatform.googleapis.com");
    assert!(cl.supports_prefill, "Claude continues a prefill");
    let v = cl.vertex.as_ref().expect("vertex settings");
    assert_eq!(v.project, "my-proj");
    assert_eq!(v.publisher, None);
    assert_eq!(v.credentials, VertexCredentials::KeyFile("/k.json".into()));
    assert_eq!(g.base_url, "https://aiplatform.googleapis.com");
    assert!(!g.supports_prefill);
    assert_eq!(
        g.vertex.as_ref().map(|v| &v.credentials),
        Some(&VertexCredentials::Default)
    );
    assert_eq!(t.base_url, "http://127.0.0.1:9");
    assert_eq!(
        t.vertex.as_ref().and_then(|v| v.publisher),
        Some(Publisher::Anthropic)
    );
    assert!(t.supports_prefill);

    let errs = load_err(
        "providers:
  - name: v
    kind: vertex
    location: US East
    publisher: meta
    api_key_env: OPENAI_API_KEY
    api: responses
    default_model: llama
  - name: w
    kind: vertex
    project: p-1
    location: us-east5
    base_url: https://us-east5-aiplatform.googleapis.com/v1/projects/p-1
    default_model: llama
  - {name: o, kind: openai, base_url: \"https://x\", default_model: m, project: p, credentials_file: k}
",
    );
    assert_error(
        &errs,
        "providers[0].project",
        Some(2),
        "`project` is required",
    );
    assert_error(
        &errs,
        "providers[0].location",
        Some(4),
        "a region such as us-east5",
    );
    assert_error(
        &errs,
        "providers[0].publisher",
        Some(5),
        "unknown publisher `meta`",
    );
    assert_error(
        &errs,
        "providers[0].api_key_env",
        Some(6),
        "takes no API key",
    );
    assert_error(
        &errs,
        "providers[0].api",
        Some(7),
        "`api: responses` is for",
    );
    assert_error(
        &errs,
        "providers[1].base_url",
        Some(13),
        "leave out `/v1/projects/…`",
    );
    assert_error(
        &errs,
        "providers[1].publisher",
        Some(9),
        "`publisher` is required: the model `llama`",
    );
    assert_error(
        &errs,
        "providers[2].project",
        Some(15),
        "is for `kind: vertex` providers",
    );
    assert_error(
        &errs,
        "providers[2].credentials_file",
        Some(15),
        "is for `kind: vertex`",
    );
}

#[test]
fn missing_required_provider_keys_are_all_reported() {
    let errs = load_err("providers:\n  - name: p\n");
    assert_error(&errs, "providers[0].kind", Some(2), "`kind` is required");
    assert_error(
        &errs,
        "providers[0].base_url",
        Some(2),
        "`base_url` is required",
    );
    assert_error(
        &errs,
        "providers[0].default_model",
        Some(2),
        "`default_model` is required",
    );
}

#[test]
fn base_url_must_be_http() {
    let errs = load_err(
        "providers:\n  - {name: p, kind: openai, default_model: m,\n     base_url: \"ftp://example.com\"}\n",
    );
    assert_error(
        &errs,
        "providers[0].base_url",
        Some(3),
        "http:// or https://",
    );
}

#[test]
fn undefined_provider_in_route_is_an_error() {
    let errs = load_err(&with_base(
        "routes:\n  smart: [openai/gpt-4o, mistral/large]\n",
    ));
    assert_error(
        &errs,
        "routes.smart[1]",
        Some(11),
        "provider `mistral` is not defined",
    );
}

#[test]
fn a_list_in_a_route_is_a_rank_of_equal_targets() {
    let c = load_ok(&with_base(
        "routes:\n  lb: [[openai/gpt-4o, anthropic/claude-sonnet-4], openai/gpt-4o-mini]\n  plain: [openai/gpt-4o]\n",
    ));
    assert_eq!(c.routes["lb"].len(), 3);
    assert_eq!(c.routes["lb"][1].provider, "anthropic");
    assert_eq!(c.route_ranks["lb"], vec![2, 1]);
    assert!(!c.route_ranks.contains_key("plain"));
}

#[test]
fn a_rank_names_its_bad_targets_and_is_not_empty() {
    let errs = load_err(&with_base(
        "routes:\n  lb:\n    - [openai/gpt-4o, mistral/large]\n    - []\n",
    ));
    assert_error(
        &errs,
        "routes.lb[0][1]",
        Some(12),
        "provider `mistral` is not defined",
    );
    assert_error(&errs, "routes.lb[1]", Some(13), "at least one target");
}

#[test]
fn route_target_must_be_provider_slash_model() {
    let errs = load_err(&with_base(
        "routes:\n  smart:\n    - openai\n    - /gpt-4o\n",
    ));
    assert_error(
        &errs,
        "routes.smart[0]",
        Some(12),
        "not of the form provider/model",
    );
    assert_error(
        &errs,
        "routes.smart[1]",
        Some(13),
        "not of the form provider/model",
    );
}

#[test]
fn route_model_must_be_offered_when_models_are_listed() {
    let errs = load_err(
        "providers:\n  - {name: o, kind: openai, base_url: \"https://x\", default_model: a, models: [a, b]}\nroutes:\n  r: [o/c]\n",
    );
    assert_error(&errs, "routes.r[0]", Some(4), "does not list model `c`");
}

#[test]
fn undefined_provider_in_agent_is_an_error() {
    let errs = load_err(&with_base(
        "agents:\n  coder:\n    provider: opneai\n    fallback: [anthropic, groq]\n",
    ));
    assert_error(
        &errs,
        "agents.coder.provider",
        Some(12),
        "provider `opneai` is not defined",
    );
    assert_error(
        &errs,
        "agents.coder.fallback[1]",
        Some(13),
        "provider `groq` is not defined",
    );
}

#[test]
fn undefined_provider_in_self_healing_fallback_is_an_error() {
    let errs = load_err(&with_base(
        "self_healing:\n  fallback:\n    providers: [nope]\n",
    ));
    assert_error(
        &errs,
        "self_healing.fallback.providers[0]",
        Some(12),
        "provider `nope` is not defined",
    );
}

#[test]
fn unset_api_key_env_is_an_error() {
    let errs = load_err(
        "providers:\n  - name: p\n    kind: openai\n    base_url: https://x\n    default_model: m\n    api_key_env: NOT_SET_ANYWHERE\n",
    );
    assert_error(
        &errs,
        "providers[0].api_key_env",
        Some(6),
        "environment variable NOT_SET_ANYWHERE is not set",
    );
    let shown = ConfigErrors(errs).to_string();
    assert_eq!(
        shown,
        "line 6: providers[0].api_key_env: environment variable NOT_SET_ANYWHERE is not set"
    );
}

#[test]
fn unset_token_env_is_an_error() {
    let errs = load_err(&with_base(
        "auth:\n  keys:\n    - {name: a, token_env: MISSING_TOKEN, scope: admin}\n",
    ));
    assert_error(
        &errs,
        "auth.keys[0].token_env",
        Some(12),
        "MISSING_TOKEN is not set",
    );
}

#[test]
fn unset_secret_env_is_an_error() {
    let errs = load_err(&with_base(
        "events:\n  webhooks:\n    - url: https://hook.example\n      secret_env: NO_SUCH_SECRET\n",
    ));
    assert_error(
        &errs,
        "events.webhooks[0].secret_env",
        Some(13),
        "NO_SUCH_SECRET is not set",
    );
}

#[test]
fn empty_env_value_is_an_error() {
    let env = |k: &str| (k == "EMPTY").then(String::new);
    let yaml = "providers:\n  - {name: p, kind: openai, base_url: \"https://x\", default_model: m, api_key_env: EMPTY}\n";
    let errs = load(yaml, &env).unwrap_err().0;
    assert_error(&errs, "providers[0].api_key_env", Some(2), "EMPTY is empty");
}

#[test]
fn key_scope_rules() {
    let errs = load_err(&with_base(
        "auth:\n  keys:\n    - {name: a, token_env: HALE_TOKEN, scope: root}\n    - {name: b, token_env: RESEARCH_TOKEN}\n    - {name: c, token_env: OPENAI_API_KEY, scope: admin, agents: [x]}\n",
    ));
    assert_error(
        &errs,
        "auth.keys[0].scope",
        Some(12),
        "unknown scope `root`",
    );
    assert_error(
        &errs,
        "auth.keys[1]",
        Some(13),
        "needs `scope: admin` or a list of `agents`",
    );
    assert_error(&errs, "auth.keys[2].scope", Some(14), "not both");
}

#[test]
fn two_keys_with_one_token_is_an_error() {
    let errs = load_err(&with_base(
        "auth:\n  keys:\n    - {name: a, token_env: HALE_TOKEN, scope: admin}\n    - {name: b, token_env: HALE_TOKEN, agents: [x]}\n",
    ));
    assert_error(
        &errs,
        "auth.keys[1].token_env",
        Some(13),
        "same token as auth.keys[0]",
    );
}

#[test]
fn allowed_hosts_are_normalized_names() {
    let c = load_ok(&with_base(
        "auth:\n  allowed_hosts: [hale.internal, Gateway.Example.COM., hale.internal, 10.0.0.5]\n",
    ));
    assert_eq!(
        c.auth.allowed_hosts,
        vec!["hale.internal", "gateway.example.com", "10.0.0.5"],
        "lower case, no trailing dot, each once"
    );
    assert!(c.auth.keys.is_empty(), "names need no keys");
    assert!(
        load_ok(BASE).auth.allowed_hosts.is_empty(),
        "none by default"
    );
}

#[test]
fn allowed_hosts_refuse_urls_ports_and_wildcards() {
    let errs = load_err(&with_base(
        "auth:\n  allowed_hosts:\n    - https://hale.example.com\n    - hale.example.com:443\n    - \"*.example.com\"\n    - \"\"\n    - hale..example\n",
    ));
    assert_error(&errs, "auth.allowed_hosts[0]", Some(12), "is a URL");
    assert_error(&errs, "auth.allowed_hosts[1]", Some(13), "port");
    assert_error(&errs, "auth.allowed_hosts[2]", Some(14), "wildcard");
    assert_error(
        &errs,
        "auth.allowed_hosts[3]",
        Some(15),
        "must not be empty",
    );
    assert_error(&errs, "auth.allowed_hosts[4]", Some(16), "not a host name");
    let errs = load_err(&with_base("auth:\n  allowed_host: [x]\n"));
    assert_error(
        &errs,
        "auth.allowed_host",
        Some(11),
        "unknown field `allowed_host`",
    );
}

#[test]
fn thresholds_must_be_in_zero_one() {
    let errs = load_err(&with_base(
        "self_healing:\n  compaction_threshold: 1.5\n  circuit_breaker: {failure_rate: 0}\n",
    ));
    assert_error(
        &errs,
        "self_healing.compaction_threshold",
        Some(11),
        "outside (0, 1]",
    );
    assert_error(
        &errs,
        "self_healing.circuit_breaker.failure_rate",
        Some(12),
        "outside (0, 1]",
    );
}

#[test]
fn hedging_keys_are_read_and_checked() {
    let c = load_ok(&with_base(
        "hedging: {enabled: false, default_after_ms: 2000, floor_ms: 100, ceiling_ms: 9000, quantile: 0.9, history: 20, budget_share: 0.1, budget_window_ms: 30000, slow_factor: 4, slow_floor_ms: 800}\n",
    ));
    let want = HedgingConfig {
        enabled: false,
        default_after: Duration::from_millis(2000),
        floor: Duration::from_millis(100),
        ceiling: Duration::from_millis(9000),
        quantile: 0.9,
        history: 20,
        budget_share: 0.1,
        budget_window: Duration::from_millis(30000),
        slow_factor: 4.0,
        slow_floor: Duration::from_millis(800),
    };
    assert_eq!(c.hedging, want);
    // 0 turns the slow rule off.
    let off = load_ok(&with_base("hedging: {slow_factor: 0}\n"));
    assert_eq!(off.hedging.slow_factor, 0.0);
    let errs = load_err(&with_base(
        "hedging:\n  floor_ms: 5000\n  ceiling_ms: 1000\n  quantile: 0\n  budget_share: 2\n  default_after_ms: 0\n  slow_factor: 1.2\n  slow_floor_ms: 50\n",
    ));
    assert_error(
        &errs,
        "hedging.ceiling_ms",
        Some(12),
        "is over hedging.ceiling_ms",
    );
    assert_error(&errs, "hedging.quantile", Some(13), "outside (0, 1]");
    assert_error(&errs, "hedging.budget_share", Some(14), "outside (0, 1]");
    assert_error(
        &errs,
        "hedging.default_after_ms",
        Some(15),
        "greater than 0",
    );
    assert_error(&errs, "hedging.slow_factor", Some(16), "nor at least 1.5");
    assert_error(
        &errs,
        "hedging.slow_floor_ms",
        Some(17),
        "is under hedging.floor_ms",
    );
}

#[test]
fn crawling_keys_are_read_and_checked() {
    let c = load_ok(&with_base(
        "crawling: {enabled: false, below: 0.1, after_ms: 4000, window_ms: 2000, min_samples: 3}\ncooldown_ms: {stream_crawling: 7000}\n",
    ));
    let want = CrawlingConfig {
        enabled: false,
        below: 0.1,
        after: Duration::from_millis(4000),
        window: Duration::from_millis(2000),
        min_samples: 3,
    };
    assert_eq!(c.crawling, want);
    assert_eq!(
        c.cooldown.for_class(ErrorClass::StreamCrawling),
        Some(Duration::from_millis(7000))
    );
    let errs = load_err(&with_base(
        "crawling:\n  below: 0\n  after_ms: 0\n  window_ms: 0\n  min_samples: 0\n",
    ));
    assert_error(&errs, "crawling.below", Some(11), "outside (0, 1]");
    assert_error(&errs, "crawling.after_ms", Some(12), "greater than 0");
    assert_error(&errs, "crawling.window_ms", Some(13), "greater than 0");
    assert_error(&errs, "crawling.min_samples", Some(14), "at least 1");
}

/// A removed key is refused at its line, naming what to use instead; an
/// unknown key would only be "unknown field".
#[test]
fn removed_keys_name_what_to_use_instead() {
    let errs = load_err(&with_base(
        "self_healing:\n  restart_delay_ms: 2000\nhealth:\n  heartbeat_timeout_ms: 600000\ncompaction:\n  warn_at: 0.8\n",
    ));
    assert_error(
        &errs,
        "self_healing.restart_delay_ms",
        Some(11),
        "removed: use recovery.backoff_ms",
    );
    assert_error(
        &errs,
        "health.heartbeat_timeout_ms",
        Some(13),
        "removed: use health.stale_after_ms",
    );
    assert_error(
        &errs,
        "compaction.warn_at",
        Some(15),
        "removed: use self_healing.compaction_threshold",
    );
}

#[test]
fn max_attempts_zero_is_an_error() {
    let errs = load_err(&with_base("retry:\n  network: {max_attempts: 0}\n"));
    assert_error(&errs, "retry.network.max_attempts", Some(11), "at least 1");
}

#[test]
fn initial_greater_than_max_is_an_error() {
    let errs = load_err(&with_base(
        "retry:\n  server_error:\n    initial_ms: 5000\n    max_ms: 1000\n",
    ));
    assert_error(
        &errs,
        "retry.server_error.initial_ms",
        Some(12),
        "initial_ms (5000) is greater than max_ms (1000)",
    );
    // Given only one side, the other is the default.
    let errs = load_err(&with_base("retry:\n  server_error: {max_ms: 10}\n"));
    assert_error(
        &errs,
        "retry.server_error.max_ms",
        Some(11),
        "greater than max_ms (10)",
    );
}

#[test]
fn unknown_jitter_is_an_error() {
    let errs = load_err(&with_base("retry: {network: {jitter: equal}}\n"));
    assert_error(
        &errs,
        "retry.network.jitter",
        Some(10),
        "unknown jitter `equal`",
    );
}

#[test]
fn listen_must_be_a_socket_address() {
    let errs = load_err(&format!("listen: localhost\n{BASE}"));
    assert_error(&errs, "listen", Some(1), "not a socket address");
}

#[test]
fn webhook_url_must_be_http() {
    let errs = load_err(&with_base("events:\n  webhooks: [{url: \"nats://x\"}]\n"));
    assert_error(
        &errs,
        "events.webhooks[0].url",
        Some(11),
        "http:// or https://",
    );
}

#[test]
fn unknown_event_kind_in_webhook_filter_is_an_error() {
    let errs = load_err(&with_base(
        "events:\n  webhooks:\n    - url: https://h.example\n      kinds: [agent.paused, agent.exploded]\n",
    ));
    assert_error(
        &errs,
        "events.webhooks[0].kinds[1]",
        Some(13),
        "unknown event kind `agent.exploded`",
    );
}

#[test]
fn unknown_fsync_mode_is_an_error() {
    let errs = load_err(&with_base("events: {fsync: sometimes}\n"));
    assert_error(
        &errs,
        "events.fsync",
        Some(10),
        "unknown fsync mode `sometimes`",
    );
}

#[test]
fn storage_must_be_postgres_and_is_not_echoed() {
    let errs = load_err(&with_base("storage: mysql://u:hunter2@db/x\n"));
    assert_error(&errs, "storage", Some(10), "postgres://");
    assert!(!errs[0].message.contains("hunter2"));
}

#[test]
fn zero_durations_and_counts_are_errors() {
    let errs = load_err(&with_base(
        "    timeout_ms: 0\nself_healing: {max_consecutive_failures: 0, circuit_breaker: {half_open_requests: 0, failure_threshold: 0}}\nrecovery: {backoff_ms: []}\nevents: {outbox_cap: 0}\n",
    ));
    assert_error(&errs, "providers[1].timeout_ms", Some(10), "greater than 0");
    assert_error(
        &errs,
        "self_healing.max_consecutive_failures",
        Some(11),
        "at least 1",
    );
    assert_error(
        &errs,
        "self_healing.circuit_breaker.half_open_requests",
        Some(11),
        "at least 1",
    );
    assert_error(
        &errs,
        "self_healing.circuit_breaker.failure_threshold",
        Some(11),
        "null switches",
    );
    assert_error(&errs, "recovery.backoff_ms", Some(12), "at least one");
    assert_error(&errs, "events.outbox_cap", Some(13), "at least 1");
}

#[test]
fn bad_prices_are_errors() {
    let errs = load_err(&with_base("prices:\n  gpt-4o: {input_per_mtok: -1}\n"));
    assert_error(
        &errs,
        "prices.gpt-4o.input_per_mtok",
        Some(11),
        "finite price",
    );
    assert_error(
        &errs,
        "prices.gpt-4o.output_per_mtok",
        Some(11),
        "is required",
    );
}

#[test]
fn several_problems_are_reported_at_once_in_line_order() {
    let yaml = "\
listen: nowhere
providers:
  - name: a
    kind: cohere
    base_url: https://x
    default_model: m
    api_key_env: UNSET_KEY
  - name: a
    kind: openai
    base_url: gopher://y
    default_model: m
routes:
  r: [b/m]
retry: {rate_limit: {max_attempts: 0}}
";
    let errs = load(yaml, &no_env).unwrap_err().0;
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            "listen",
            "providers[0].kind",
            "providers[0].api_key_env",
            "providers[1].name",
            "providers[1].base_url",
            "routes.r[0]",
            "retry.rate_limit.max_attempts",
        ],
        "{errs:#?}"
    );
    let lines: Vec<Option<usize>> = errs.iter().map(|e| e.line).collect();
    assert_eq!(
        lines,
        vec![
            Some(1),
            Some(4),
            Some(7),
            Some(8),
            Some(10),
            Some(13),
            Some(14)
        ]
    );
    let shown = ConfigErrors(errs).to_string();
    assert_eq!(shown.lines().count(), 7, "one problem per line:\n{shown}");
}

// ---- secrets ----

#[test]
fn secret_values_never_appear_in_debug_output() {
    let c = load_ok(FULL_EXAMPLE);
    let debug = format!("{c:?}");
    for (_, value) in SECRET_VALUES {
        assert!(!debug.contains(value), "{value} leaked into Debug output");
    }
    assert!(debug.contains("Secret(***)"));
}

#[test]
fn secret_values_never_appear_in_error_messages() {
    // Every secret is set, and the file has problems around each of them,
    // including two keys sharing one token.
    let yaml = format!("{FULL_EXAMPLE}prices:\n  m: {{input_per_mtok: -1, output_per_mtok: 1}}\n")
        .replace("RESEARCH_TOKEN, agents", "HALE_TOKEN, agents")
        .replace("kind: anthropic\n", "kind: anthropic\n    timeout_ms: 0\n");
    let errs = load(&yaml, &full_env).unwrap_err();
    assert!(errs.0.len() >= 3, "{errs}");
    let shown = format!("{errs}\n{errs:?}");
    for (_, value) in SECRET_VALUES {
        assert!(!shown.contains(value), "{value} leaked into an error");
    }
}

#[test]
fn config_error_display_formats() {
    let e = ConfigError {
        path: "a.b".into(),
        line: Some(3),
        message: "bad".into(),
    };
    assert_eq!(e.to_string(), "line 3: a.b: bad");
    let e = ConfigError {
        path: "a".into(),
        line: None,
        message: "bad".into(),
    };
    assert_eq!(e.to_string(), "a: bad");
    let e = ConfigError {
        path: String::new(),
        line: Some(1),
        message: "bad".into(),
    };
    assert_eq!(e.to_string(), "line 1: bad");
}

// ---- properties ----

mod properties {
    use super::{FULL_EXAMPLE, SECRET_VALUES, full_env, load};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Arbitrary text never panics the loader.
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
            let _ = load(&text, &full_env);
        }

        /// Dropping any line of the full example, or cutting it anywhere,
        /// either still loads or reports errors; never a panic, never a secret.
        #[test]
        fn damaged_example_never_leaks_a_secret(drop in 0usize..70, cut in 0usize..4000) {
            let damaged: String = FULL_EXAMPLE
                .lines()
                .enumerate()
                .filter(|(i, _)| *i != drop)
                .map(|(_, l)| format!("{l}\n"))
                .collect();
            let cut = damaged.char_indices().map(|(i, _)| i).find(|&i| i >= cut).unwrap_or(damaged.len());
            for text in [&damaged[..], &damaged[..cut]] {
                if let Err(errs) = load(text, &full_env) {
                    prop_assert!(!errs.0.is_empty());
                    let shown = format!("{errs}\n{errs:?}");
                    for (_, value) in SECRET_VALUES {
                        prop_assert!(!shown.contains(value));
                    }
                }
            }
        }
    }
}

#[test]
fn journal_retention_is_read_in_hours_and_zero_is_refused() {
    let cfg = load_ok(&with_base("journal: {retention_hours: 48}\n"));
    assert_eq!(cfg.journal.retention, Duration::from_secs(48 * 3600));
    let default = load_ok(&with_base(""));
    assert_eq!(default.journal, hale_core::config::JournalConfig::default());
    let errs = load_err(&with_base("journal: {retention_hours: 0}\n"));
    assert_error(&errs, "journal.retention_hours", Some(10), "at least 1");
}

#[test]
fn journal_bodies_default_to_needed_and_take_all_needed_or_off() {
    use hale_core::config::JournalBodies;
    assert_eq!(
        load_ok(&with_base("")).journal.bodies,
        JournalBodies::Needed
    );
    for (yaml, want) in [
        ("all", JournalBodies::All),
        ("needed", JournalBodies::Needed),
        ("off", JournalBodies::Off),
    ] {
        let cfg = load_ok(&with_base(&format!("journal: {{bodies: {yaml}}}\n")));
        assert_eq!(cfg.journal.bodies, want, "{yaml}");
    }
    let errs = load_err(&with_base("journal: {bodies: sometimes}\n"));
    assert!(
        errs.iter().any(|e| e.to_string().contains("sometimes")),
        "{errs:?}"
    );
}

#[test]
fn request_body_limit_defaults_to_32_mib_and_zero_is_refused() {
    let default = load_ok(&with_base(""));
    assert_eq!(default.limits.max_request_bytes, 33_554_432);
    assert_eq!(default.limits, hale_core::config::LimitsConfig::default());
    let cfg = load_ok(&with_base("limits: {max_request_bytes: 1048576}\n"));
    assert_eq!(cfg.limits.max_request_bytes, 1_048_576);
    let errs = load_err(&with_base("limits: {max_request_bytes: 0}\n"));
    assert_error(&errs, "limits.max_request_bytes", Some(10), "at least 1");
    let errs = load_err(&with_base("limits: {max_body: 5}\n"));
    assert!(
        errs.iter().any(|e| e.message.contains("max_body")),
        "{errs:?}"
    );
}

// ---- alerting ----

/// The `alerting:` example of docs/operations.md, "Alerts" (after [`BASE`]:
/// starts on line 10).
const ALERTING_EXAMPLE: &str = "\
alerting:
  dashboard_url: http://127.0.0.1:3000/
  channels:
    ops-slack: {kind: slack, url_env: SLACK_WEBHOOK_URL}
    oncall: {kind: pagerduty, routing_key_env: PD_ROUTING_KEY}
  routes:
    - {kinds: [health.escalated, recovery.failed], channels: [ops-slack, oncall], severity: critical}
    - {kinds: [agent.paused, agent.circuit_open], channels: [ops-slack], severity: warning}
";

fn alert_env(name: &str) -> Option<String> {
    match name {
        "SLACK_WEBHOOK_URL" => Some("https://hooks.slack.example/services/T0/B0/xoxsecret".into()),
        "PD_ROUTING_KEY" => Some("pd-routing-key-5e5e".into()),
        _ => None,
    }
}

fn alert_load(rest: &str) -> Result<Config, Vec<ConfigError>> {
    load(&with_base(rest), &alert_env).map_err(|ConfigErrors(e)| e)
}

#[test]
fn alerting_example_loads_channels_routes_and_the_pagerduty_default_url() {
    use hale_core::alert::Severity;
    use hale_core::config::{AlertTarget, PAGERDUTY_EVENTS_URL};
    use hale_core::event::EventKind;
    let c = alert_load(ALERTING_EXAMPLE).unwrap_or_else(|e| panic!("{e:#?}"));
    let a = &c.alerting;
    assert_eq!(a.dashboard_url.as_deref(), Some("http://127.0.0.1:3000/"));
    let slack = a.channels.iter().find(|c| c.name == "ops-slack").unwrap();
    assert!(
        matches!(&slack.target, AlertTarget::Slack { url } if url.expose().ends_with("xoxsecret"))
    );
    let pd = a.channels.iter().find(|c| c.name == "oncall").unwrap();
    assert!(
        matches!(&pd.target, AlertTarget::PagerDuty { url, routing_key }
        if url == PAGERDUTY_EVENTS_URL && routing_key.expose() == "pd-routing-key-5e5e")
    );
    assert_eq!(a.routes.len(), 2);
    assert_eq!(
        a.routes[0].kinds,
        vec![EventKind::HealthEscalated, EventKind::RecoveryFailed]
    );
    assert_eq!(
        a.routes[0].channels,
        vec!["ops-slack".to_owned(), "oncall".to_owned()]
    );
    assert_eq!(a.routes[0].severity, Severity::Critical);
    assert_eq!(a.routes[1].severity, Severity::Warning);
}

#[test]
fn alerting_is_empty_by_default() {
    let c = load_ok(BASE);
    assert!(c.alerting.channels.is_empty() && c.alerting.routes.is_empty());
    assert_eq!(c.alerting.dashboard_url, None);
}

#[test]
fn alerting_errors_name_path_and_line() {
    let errs = alert_load(
        "\
alerting:
  channels:
    ops-slack: {kind: slack, url_env: NO_SUCH_URL}
    oncall: {kind: pagerduty, routing_key_env: NO_SUCH_KEY}
    odd: {kind: teams, url: https://x.example}
  routes:
    - {kinds: [agent.paused, agent.napping], channels: [ops-slack, pager], severity: fatal}
",
    )
    .unwrap_err();
    assert_error(
        &errs,
        "alerting.channels.ops-slack.url_env",
        Some(12),
        "NO_SUCH_URL is not set",
    );
    assert_error(
        &errs,
        "alerting.channels.oncall.routing_key_env",
        Some(13),
        "NO_SUCH_KEY is not set",
    );
    assert_error(
        &errs,
        "alerting.channels.odd.kind",
        Some(14),
        "unknown channel kind `teams`",
    );
    assert_error(
        &errs,
        "alerting.routes[0].kinds[1]",
        Some(16),
        "unknown event kind `agent.napping`",
    );
    assert_error(
        &errs,
        "alerting.routes[0].channels[1]",
        Some(16),
        "channel `pager` is not defined",
    );
    assert_error(
        &errs,
        "alerting.routes[0].severity",
        Some(16),
        "unknown severity `fatal`",
    );
    assert_eq!(errs.len(), 6, "{errs:#?}");
}

#[test]
fn alerting_channel_shape_errors() {
    let errs = alert_load(
        "\
alerting:
  channels:
    a: {kind: slack}
    b: {kind: slack, url: not-a-url}
    c: {kind: pagerduty}
    d: {kind: slack, url: https://x.example, routing_key_env: PD_ROUTING_KEY}
    e: {kind: slack, url_env: SLACK_WEBHOOK_URL, url: https://x.example}
  routes:
    - {channels: [a]}
",
    )
    .unwrap_err();
    assert_error(&errs, "alerting.channels.a", Some(12), "needs `url_env`");
    assert_error(
        &errs,
        "alerting.channels.b.url",
        Some(13),
        "http:// or https://",
    );
    assert_error(
        &errs,
        "alerting.channels.c.routing_key_env",
        Some(14),
        "is required",
    );
    assert_error(
        &errs,
        "alerting.channels.d.routing_key_env",
        Some(15),
        "only a pagerduty channel",
    );
    assert_error(&errs, "alerting.channels.e", Some(16), "not both");
    assert_error(&errs, "alerting.routes[0].kinds", Some(18), "is required");
    assert_error(
        &errs,
        "alerting.routes[0].severity",
        Some(18),
        "is required",
    );
}

#[test]
fn alerting_secrets_never_appear_in_errors_or_debug() {
    let c = alert_load(ALERTING_EXAMPLE).unwrap();
    let dbg = format!("{:?}", c.alerting);
    assert!(
        !dbg.contains("xoxsecret") && !dbg.contains("pd-routing-key"),
        "{dbg}"
    );
    let errs = alert_load(&format!(
        "{ALERTING_EXAMPLE}    - {{kinds: [nope], channels: [oncall], severity: info}}\n"
    ))
    .unwrap_err();
    let all = format!("{errs:?}");
    assert!(
        !all.contains("xoxsecret") && !all.contains("pd-routing-key"),
        "{all}"
    );
}

#[test]
fn alerting_unknown_keys_are_refused() {
    let errs = alert_load(
        "alerting:\n  channels:\n    a: {kind: slack, url: https://x.example, token: t}\n",
    )
    .unwrap_err();
    assert!(
        errs.iter().any(|e| e.message.contains("token")),
        "{errs:#?}"
    );
}

#[test]
fn telemetry_reads_an_otlp_endpoint_and_refuses_what_is_not_a_url() {
    let cfg = load_ok(&with_base(
        "telemetry: {otlp_endpoint: \"http://127.0.0.1:4318/\", service_name: gw-1}\n",
    ));
    assert_eq!(
        cfg.telemetry.otlp_endpoint.as_deref(),
        Some("http://127.0.0.1:4318")
    );
    assert_eq!(cfg.telemetry.service_name, "gw-1");
    let default = load_ok(&with_base(""));
    assert_eq!(
        default.telemetry,
        hale_core::config::TelemetryConfig::default()
    );
    assert_eq!(default.telemetry.otlp_endpoint, None);
    let errs = load_err(&with_base("telemetry: {otlp_endpoint: collector:4318}\n"));
    assert_error(
        &errs,
        "telemetry.otlp_endpoint",
        Some(10),
        "http:// or https://",
    );
    let errs = load_err(&with_base("telemetry: {service_name: \"  \"}\n"));
    assert_error(
        &errs,
        "telemetry.service_name",
        Some(10),
        "must not be empty",
    );
}

#[test]
fn storage_pool_limits_are_read_and_zero_is_refused() {
    let cfg = load_ok(&with_base(
        "storage_pool: {max_connections: 3, acquire_timeout_ms: 1500}\n",
    ));
    assert_eq!(cfg.storage_pool.max_connections, 3);
    assert_eq!(
        cfg.storage_pool.acquire_timeout,
        Duration::from_millis(1500)
    );
    let default = load_ok(&with_base(""));
    assert_eq!(
        default.storage_pool,
        hale_core::config::StoragePoolConfig::default()
    );
    let errs = load_err(&with_base("storage_pool: {max_connections: 0}\n"));
    assert_error(
        &errs,
        "storage_pool.max_connections",
        Some(10),
        "at least 1",
    );
    let errs = load_err(&with_base("storage_pool: {pool: 3}\n"));
    assert!(!errs.is_empty(), "an unknown key is refused");
}

#[test]
fn memory_bounds_are_read_and_default_once() {
    let cfg = load_ok(&with_base("memory: {idle_agents: 10, idle_tasks: 0}\n"));
    assert_eq!(cfg.memory.idle_agents, 10);
    assert_eq!(cfg.memory.idle_tasks, 0);
    let default = load_ok(&with_base(""));
    assert_eq!(default.memory, hale_core::memory::MemoryConfig::default());
    assert_eq!(
        default.memory.idle_agents,
        hale_core::memory::DEFAULT_IDLE_AGENTS
    );
    let errs = load_err(&with_base("memory: {idle_agents: -1}\n"));
    assert!(!errs.is_empty(), "a negative count is refused");
    let errs = load_err(&with_base("memory: {agents: 3}\n"));
    assert!(!errs.is_empty(), "an unknown key is refused");
}

#[test]
fn journal_durability_defaults_to_durable_and_takes_durable_or_relaxed() {
    use hale_core::config::JournalDurability;
    assert_eq!(
        load_ok(&with_base("")).journal.durability,
        JournalDurability::Durable
    );
    for (yaml, want) in [
        ("durable", JournalDurability::Durable),
        ("relaxed", JournalDurability::Relaxed),
    ] {
        let cfg = load_ok(&with_base(&format!("journal: {{durability: {yaml}}}\n")));
        assert_eq!(cfg.journal.durability, want, "{yaml}");
    }
    let errs = load_err(&with_base("journal: {durability: eventually}\n"));
    assert!(
        errs.iter().any(|e| e.to_string().contains("eventually")),
        "{errs:?}"
    );
}

#[test]
fn circuit_breaker_is_another_name_for_a_tool_nodes_breaker() {
    let c = load_ok(&with_base(
        "tool_nodes:\n  - {name: a, kind: http, url: \"http://127.0.0.1:1\", circuit_breaker: {failure_threshold: 5, timeout_seconds: 60, half_open_requests: 1}}\n  - {name: b, kind: http, url: \"http://127.0.0.1:2\", breaker: {failure_threshold: 2}}\n",
    ));
    assert_eq!(c.tool_nodes[0].breaker.failure_threshold, Some(5));
    assert_eq!(c.tool_nodes[0].breaker.timeout_seconds, Some(60));
    assert_eq!(c.tool_nodes[0].breaker.half_open_requests, Some(1));
    assert_eq!(c.tool_nodes[1].breaker.failure_threshold, Some(2));
}

#[test]
fn tool_jobs_audit_log_and_workflows_load_with_defaults_and_checks() {
    let c = load_ok(&with_base(
        "tool_jobs: {audit_log: {path: audit/audit.log}}\nworkflows:\n  feedback_safe_summary:\n    tools: [{tool_id: \"tool:echo\", deterministic: true}]\n    steps:\n      - {step_id: s1, tool_name: echo, arguments: {text: \"${input.text}\"}}\n",
    ));
    let a = c.tool_jobs.audit_log.expect("audit log configured");
    assert_eq!(a.path, std::path::PathBuf::from("audit/audit.log"));
    assert_eq!(a.max_bytes, hale_core::config::DEFAULT_AUDIT_LOG_MAX_BYTES);
    assert_eq!(a.keep, hale_core::config::DEFAULT_AUDIT_LOG_KEEP);
    let w = &c.workflows["feedback_safe_summary"];
    assert_eq!(w.steps[0]["arguments"]["text"], "${input.text}");
    assert_eq!(w.tools[0]["tool_id"], "tool:echo");
    let errs = load_err(&with_base(
        "tool_jobs: {audit_log: {max_bytes: 10, keep: 0}}\nworkflows: {empty: {}}\n",
    ));
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    for p in [
        "tool_jobs.audit_log.path",
        "tool_jobs.audit_log.max_bytes",
        "tool_jobs.audit_log.keep",
        "workflows.empty",
    ] {
        assert!(paths.contains(&p), "{p} missing from {paths:?}");
    }
}

#[test]
fn provider_api_defaults_to_chat_and_takes_responses_for_openai_only() {
    let c = load_ok(&with_base(
        "  - {name: codex, kind: openai, api: responses, base_url: \"https://x\", default_model: m}\n",
    ));
    let p = c.provider("codex").unwrap();
    assert_eq!(p.api, hale_core::config::ProviderApi::Responses);
    assert!(!p.supports_prefill);
    assert_eq!(
        c.provider("openai").unwrap().api,
        hale_core::config::ProviderApi::Chat
    );
    let errs = load_err(&with_base(
        "  - {name: a, kind: anthropic, api: responses, base_url: \"https://x\", default_model: m}\n",
    ));
    assert_error(&errs, "providers[2].api", Some(10), "for `kind: openai`");
    let errs = load_err(&with_base(
        "  - {name: a, kind: openai, api: assistants, base_url: \"https://x\", default_model: m}\n",
    ));
    assert_error(
        &errs,
        "providers[2].api",
        Some(10),
        "expected chat or responses",
    );
    let errs = load_err(&with_base(
        "  - {name: a, kind: openai, api: responses, supports_prefill: true, base_url: \"https://x\", default_model: m}\n",
    ));
    assert_error(
        &errs,
        "providers[2].supports_prefill",
        Some(10),
        "no assistant prefill",
    );
}

/// `kind: azure` (issue 29): deployment URLs with a model → deployment map
/// and an `api-key`, the v1 API with an Entra token command, an Entra token
/// from the environment.
#[test]
fn azure_providers_load() {
    use hale_core::config::{AzureAuth, DEFAULT_AZURE_TOKEN_REFRESH, ProviderApi};
    let cfg = load_ok(
        "\
providers:
  - name: az
    kind: azure
    base_url: https://res.openai.azure.com/
    api_version: 2024-10-21
    api_key_env: OPENAI_API_KEY
    default_model: gpt-4o
    deployments: {gpt-4o: prod-4o}
  - name: az1
    kind: azure
    api: responses
    base_url: https://res2.openai.azure.com
    auth: entra
    token_command: az account get-access-token --query accessToken -o tsv
    default_model: o3
  - name: az2
    kind: azure
    base_url: https://res3.openai.azure.com
    auth: entra
    token_env: ANTHROPIC_API_KEY
    default_model: o3
",
    );
    let az = &cfg.providers[0];
    assert_eq!(az.kind, ProviderKind::Azure);
    assert_eq!(az.base_url, "https://res.openai.azure.com");
    assert!(!az.supports_prefill);
    let a = az.azure.as_ref().expect("azure settings");
    assert_eq!(a.api_version.as_deref(), Some("2024-10-21"));
    assert_eq!(a.deployments["gpt-4o"], "prod-4o");
    assert_eq!(a.auth, AzureAuth::ApiKey);
    assert!(az.api_key.is_some());
    let az1 = &cfg.providers[1];
    assert_eq!(az1.api, ProviderApi::Responses);
    let a1 = az1.azure.as_ref().expect("azure settings");
    assert_eq!(a1.api_version, None);
    assert_eq!(
        a1.auth,
        AzureAuth::EntraCommand {
            command: "az account get-access-token --query accessToken -o tsv".into(),
            refresh: DEFAULT_AZURE_TOKEN_REFRESH
        }
    );
    assert!(az1.api_key.is_none());
    let az2 = &cfg.providers[2];
    assert_eq!(
        az2.azure.as_ref().map(|a| &a.auth),
        Some(&AzureAuth::EntraToken)
    );
    assert!(
        az2.api_key.is_some(),
        "the token is held as the provider's secret"
    );
    assert!(cfg.providers.iter().all(|p| p.kind == ProviderKind::Azure));
    // Other kinds have none.
    assert!(load_ok(BASE).providers.iter().all(|p| p.azure.is_none()));
}

/// Every azure mistake is named with its path and line.
#[test]
fn azure_provider_errors() {
    let errs = load_err(
        "\
providers:
  - name: az
    kind: azure
    base_url: https://res.openai.azure.com/openai/v1
    api_version: 2024-10-21&x
    default_model: gpt-4o
    deployments: {gpt-4o: a/b}
    token_env: X
  - name: az1
    kind: azure
    base_url: https://res.openai.azure.com
    auth: entra
    api_key_env: OPENAI_API_KEY
    default_model: gpt-4o
  - name: az2
    kind: azure
    base_url: https://res.openai.azure.com
    auth: sso
    api_key_env: OPENAI_API_KEY
    default_model: gpt-4o
  - name: o
    kind: openai
    base_url: https://api.openai.com/v1
    default_model: gpt-4o
    api_version: 2024-10-21
",
    );
    assert_error(&errs, "providers[0].base_url", Some(4), "resource endpoint");
    assert_error(&errs, "providers[0].api_version", Some(5), "no `&`");
    assert_error(
        &errs,
        "providers[0].deployments.gpt-4o",
        Some(7),
        "URL path segment",
    );
    assert_error(
        &errs,
        "providers[0].token_env",
        Some(8),
        "for `auth: entra`",
    );
    assert_error(
        &errs,
        "providers[0].api_key_env",
        Some(2),
        "needs `api_key_env`",
    );
    assert_error(
        &errs,
        "providers[1].api_key_env",
        Some(13),
        "takes no `api_key_env`",
    );
    assert_error(&errs, "providers[1].auth", Some(9), "needs `token_env`");
    assert_error(&errs, "providers[2].auth", Some(18), "unknown auth `sso`");
    assert_error(
        &errs,
        "providers[3].api_version",
        Some(25),
        "for `kind: azure`",
    );
    assert_eq!(errs.len(), 9, "{errs:#?}");
}

/// `kind: bedrock`: the region's default `base_url`, `api` unset or
/// explicit, SigV4 with a profile, an API key from the default variable.
#[test]
fn bedrock_providers_load() {
    use hale_core::config::{BedrockApi, BedrockAuth};
    let yaml = "\
providers:
  - name: br
    kind: bedrock
    region: us-west-2
    profile: work
    default_model: us.anthropic.claude-sonnet-4-20250514-v1:0
  - name: br2
    kind: bedrock
    region: eu-west-1
    base_url: http://127.0.0.1:9000/
    api: converse
    auth: api_key
    default_model: anthropic.claude-3-haiku-20240307-v1:0
";
    let env = |k: &str| match k {
        "AWS_BEARER_TOKEN_BEDROCK" => Some("bedrock-key".to_owned()),
        other => full_env(other),
    };
    let cfg = load(yaml, &env).unwrap_or_else(|e| panic!("{e}"));
    let br = &cfg.providers[0];
    assert_eq!(br.kind, ProviderKind::Bedrock);
    assert_eq!(
        br.base_url,
        "https://bedrock-runtime.us-west-2.amazonaws.com"
    );
    assert!(br.api_key.is_none());
    let b = br.bedrock.as_ref().expect("bedrock settings");
    assert_eq!(b.region, "us-west-2");
    assert_eq!(b.api, None);
    assert_eq!(
        b.auth,
        BedrockAuth::SigV4 {
            profile: Some("work".into())
        }
    );
    let br2 = &cfg.providers[1];
    assert_eq!(br2.base_url, "http://127.0.0.1:9000");
    let b2 = br2.bedrock.as_ref().expect("bedrock settings");
    assert_eq!(b2.api, Some(BedrockApi::Converse));
    assert_eq!(b2.auth, BedrockAuth::ApiKey);
    assert_eq!(
        br2.api_key.as_ref().map(|k| k.expose()),
        Some("bedrock-key")
    );
}

/// Bedrock's keys are checked with their path and line, and refused on
/// other kinds; a missing region or API key is named.
#[test]
fn bedrock_provider_errors() {
    let errs = load_err(
        "\
providers:
  - name: br
    kind: bedrock
    default_model: m
    api: chat
  - name: br1
    kind: bedrock
    region: US_EAST_1
    auth: iam
    default_model: m
  - name: br2
    kind: bedrock
    region: us-east-1
    auth: api_key
    profile: work
    default_model: m
  - name: br3
    kind: bedrock
    region: us-east-1
    api_key_env: OPENAI_API_KEY
    default_model: m
  - name: o
    kind: openai
    base_url: https://api.openai.com/v1
    default_model: gpt-4o
    region: us-east-1
    api: converse
",
    );
    assert_error(&errs, "providers[0].region", Some(2), "needs `region`");
    assert_error(&errs, "providers[0].api", Some(5), "converse or invoke");
    assert_error(&errs, "providers[1].region", Some(8), "AWS region");
    assert_error(&errs, "providers[1].auth", Some(9), "sigv4 or api_key");
    assert_error(&errs, "providers[2].profile", Some(15), "auth: sigv4");
    assert_error(
        &errs,
        "providers[2].api_key_env",
        Some(11),
        "AWS_BEARER_TOKEN_BEDROCK",
    );
    assert_error(&errs, "providers[3].api_key_env", Some(20), "auth: api_key");
    assert_error(&errs, "providers[4].region", Some(26), "kind: bedrock");
    assert_error(&errs, "providers[4].api", Some(27), "unknown api");
}

// Moved from hale-core's tools tests with the YAML layer: a tool node's
// config as loaded, and its breaker numbers over hale_core::tools' defaults.
#[test]
fn tool_nodes_config_validates_names_kinds_and_urls() {
    use hale_core::config::ToolNodeKind;
    let env = |_: &str| None;
    let base =
        "providers:\n  - {name: p, kind: openai, base_url: http://127.0.0.1:1, default_model: m}\n";
    let ok = format!(
        "{base}tool_nodes:\n  - {{name: \"local:a\", kind: http, url: \"http://127.0.0.1:7001/\", deterministic: [unit_convert]}}\n  - {{name: b, kind: mcp, url: \"http://127.0.0.1:7002/mcp\", metadata: {{zone: eu}}}}\n"
    );
    let cfg = load(&ok, &env).unwrap();
    assert_eq!(cfg.tool_nodes.len(), 2);
    assert_eq!(cfg.tool_nodes[0].kind, ToolNodeKind::Http);
    assert_eq!(cfg.tool_nodes[0].url, "http://127.0.0.1:7001");
    assert_eq!(cfg.tool_nodes[0].deterministic, vec!["unit_convert"]);
    assert_eq!(
        cfg.tool_nodes[1].metadata.get("zone").map(String::as_str),
        Some("eu")
    );

    let bad = format!(
        "{base}tool_nodes:\n  - {{name: a, kind: grpc, url: \"http://x\"}}\n  - {{name: a, kind: http, url: \"ftp://x\"}}\n  - {{kind: http, url: \"http://x\"}}\n"
    );
    let errs = load(&bad, &env).unwrap_err().to_string();
    assert!(
        errs.contains("tool_nodes[0].kind: unknown kind `grpc`"),
        "{errs}"
    );
    assert!(
        errs.contains("tool_nodes[1].name: duplicate tool node name `a`"),
        "{errs}"
    );
    assert!(
        errs.contains("tool_nodes[1].url: must be an http"),
        "{errs}"
    );
    assert!(
        errs.contains("tool_nodes[2].name: `name` is required"),
        "{errs}"
    );
}

#[test]
fn tool_node_breaker_config_overrides_the_defaults_and_rejects_zero_or_negative() {
    use hale_core::config::NodeBreakerConfig;
    let env = |_: &str| None;
    let base =
        "providers:\n  - {name: p, kind: openai, base_url: http://127.0.0.1:1, default_model: m}\n";
    let ok = format!(
        "{base}tool_nodes:\n  - name: a\n    kind: http\n    url: http://127.0.0.1:7001\n    breaker: {{failure_threshold: 1, timeout_seconds: 30, half_open_requests: 2}}\n  - {{name: b, kind: http, url: \"http://127.0.0.1:7002\"}}\n"
    );
    let cfg = load(&ok, &env).unwrap();
    let own = cfg.tool_nodes[0].breaker;
    assert_eq!(
        own,
        NodeBreakerConfig {
            failure_threshold: Some(1),
            timeout_seconds: Some(30),
            half_open_requests: Some(2),
        }
    );
    let b = hale_core::tools::node_breaker_config_for(&own);
    assert_eq!(b.consecutive_failures, Some(1));
    assert_eq!(b.half_open_after, Duration::from_secs(30));
    assert_eq!(b.half_open_requests, 2);
    // A node without `breaker:` gets exactly the defaults.
    assert_eq!(cfg.tool_nodes[1].breaker, NodeBreakerConfig::default());
    assert_eq!(
        hale_core::tools::node_breaker_config_for(&cfg.tool_nodes[1].breaker),
        hale_core::tools::node_breaker_config()
    );

    let bad = format!(
        "{base}tool_nodes:\n  - name: a\n    kind: http\n    url: http://127.0.0.1:7001\n    breaker:\n      failure_threshold: 0\n      timeout_seconds: -5\n      half_open_requests: 1\n      jitter: 2\n  - name: b\n    kind: http\n    url: http://127.0.0.1:7002\n    breaker: {{half_open_requests: -1}}\n"
    );
    let errs = load(&bad, &env).unwrap_err().to_string();
    assert!(errs.contains("jitter"), "an unknown key is refused: {errs}");
    let bad = bad.replace("      jitter: 2\n", "");
    let errs = load(&bad, &env).unwrap_err().to_string();
    assert!(
        errs.contains(
            "line 8: tool_nodes[0].breaker.failure_threshold: must be a whole number from 1"
        ),
        "{errs}"
    );
    assert!(
        errs.contains(
            "line 9: tool_nodes[0].breaker.timeout_seconds: must be a whole number from 1"
        ),
        "{errs}"
    );
    assert!(
        errs.contains("tool_nodes[1].breaker.half_open_requests: must be a whole number from 1"),
        "{errs}"
    );
    assert!(
        !errs.contains("tool_nodes[0].breaker.half_open_requests"),
        "{errs}"
    );
}
