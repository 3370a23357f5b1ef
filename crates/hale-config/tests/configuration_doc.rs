//! `docs/configuration.md` documents every config key: each struct that the
//! YAML (or `POST /nodes`) is deserialised into has a section in the doc, and
//! each of its keys is a row of that section's table (and each value of a
//! deserialised enum is named there).
//!
//! The keys are not copied here: serde lists them. Parsing an object with one
//! unknown key into a `deny_unknown_fields` type makes serde answer "unknown
//! field `x`, expected one of `a`, `b`, …", so a probe per type reads its
//! keys through the public `hale_config::parse` (the raw types are private).
//! So that no type is forgotten, hale-config's sources and hale-core's
//! `src/config.rs` (the validated types, some deserialised as they are) are
//! scanned for every `struct` or `enum` that derives `Deserialize`, and one
//! without a probe fails the test. A row naming a key that no longer exists fails too.

use hale_core::config::{NodeBreakerConfig, ToolNodeKind};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The unknown key (or value) every probe sends.
const UNKNOWN: &str = "zz_undocumented";

/// How a type's keys (or an enum's values) are listed.
enum Source {
    /// A YAML config holding [`UNKNOWN`] where the type is read.
    Yaml(&'static str),
    /// Another way to get serde's "expected …" message.
    Message(fn() -> String),
}

/// One deserialised type, where the doc describes it and how to list its keys.
struct Probe {
    /// The type's name in the source.
    ty: &'static str,
    /// The title of its section in the doc (the heading's text).
    section: &'static str,
    /// A struct's keys must be table rows; an enum's values named in the section.
    is_enum: bool,
    source: Source,
}

const fn key(ty: &'static str, section: &'static str, yaml: &'static str) -> Probe {
    Probe {
        ty,
        section,
        is_enum: false,
        source: Source::Yaml(yaml),
    }
}

fn probes() -> Vec<Probe> {
    vec![
        key("RawConfig", "Top level", "zz_undocumented: 1\n"),
        key("RawAuth", "`auth`", "auth: {zz_undocumented: 1}\n"),
        key(
            "RawKey",
            "`auth.keys[]`",
            "auth: {keys: [{zz_undocumented: 1}]}\n",
        ),
        key(
            "RawProvider",
            "`providers[]`",
            "providers: [{zz_undocumented: 1}]\n",
        ),
        key(
            "RawAgent",
            "`agents.<name>`",
            "agents: {a: {zz_undocumented: 1}}\n",
        ),
        key(
            "RawBudget",
            "`agents.<name>.budget`",
            "agents: {a: {budget: {zz_undocumented: 1}}}\n",
        ),
        key(
            "RawSelfHealing",
            "`self_healing`",
            "self_healing: {zz_undocumented: 1}\n",
        ),
        key(
            "RawBreaker",
            "`self_healing.circuit_breaker`",
            "self_healing: {circuit_breaker: {zz_undocumented: 1}}\n",
        ),
        key(
            "RawFallback",
            "`self_healing.fallback`",
            "self_healing: {fallback: {zz_undocumented: 1}}\n",
        ),
        key("RawRetry", "`retry`", "retry: {zz_undocumented: 1}\n"),
        key(
            "RawPolicy",
            "`retry.rate_limit`, `retry.server_error`, `retry.network`",
            "retry: {network: {zz_undocumented: 1}}\n",
        ),
        key(
            "RawEjection",
            "`ejection`",
            "ejection: {zz_undocumented: 1}\n",
        ),
        key("RawHedging", "`hedging`", "hedging: {zz_undocumented: 1}\n"),
        key(
            "RawCrawling",
            "`crawling`",
            "crawling: {zz_undocumented: 1}\n",
        ),
        key(
            "RawCooldown",
            "`cooldown_ms`",
            "cooldown_ms: {zz_undocumented: 1}\n",
        ),
        key("RawGuard", "`guard`", "guard: {zz_undocumented: 1}\n"),
        key("RawHealth", "`health`", "health: {zz_undocumented: 1}\n"),
        key(
            "RawNudge",
            "`health.nudge`",
            "health: {nudge: {zz_undocumented: 1}}\n",
        ),
        key(
            "RawRecovery",
            "`recovery`",
            "recovery: {zz_undocumented: 1}\n",
        ),
        key(
            "RawCompaction",
            "`compaction`",
            "compaction: {zz_undocumented: 1}\n",
        ),
        key("RawLimits", "`limits`", "limits: {zz_undocumented: 1}\n"),
        key(
            "RawToolNode",
            "`tool_nodes[]`",
            "tool_nodes: [{zz_undocumented: 1}]\n",
        ),
        key(
            "RawNodeBreaker",
            "`tool_nodes[].breaker`",
            "tool_nodes: [{breaker: {zz_undocumented: 1}}]\n",
        ),
        Probe {
            ty: "NodeBreakerConfig",
            section: "`tool_nodes[].breaker`",
            is_enum: false,
            source: Source::Message(|| {
                serde_json::from_str::<NodeBreakerConfig>(r#"{"zz_undocumented": 1}"#)
                    .expect_err("an unknown key is refused")
                    .to_string()
            }),
        },
        Probe {
            ty: "ToolNodeKind",
            section: "`tool_nodes[]`",
            is_enum: true,
            source: Source::Message(|| {
                serde_json::from_str::<ToolNodeKind>(r#""zz_undocumented""#)
                    .expect_err("an unknown kind is refused")
                    .to_string()
            }),
        },
        key(
            "RawToolJobs",
            "`tool_jobs`",
            "tool_jobs: {zz_undocumented: 1}\n",
        ),
        key(
            "RawAuditLog",
            "`tool_jobs.audit_log`",
            "tool_jobs: {audit_log: {zz_undocumented: 1}}\n",
        ),
        key(
            "RawWorkflow",
            "`workflows.<name>`",
            "workflows: {w: {zz_undocumented: 1}}\n",
        ),
        key(
            "RawAlerting",
            "`alerting`",
            "alerting: {zz_undocumented: 1}\n",
        ),
        key(
            "RawAlertChannel",
            "`alerting.channels.<name>`",
            "alerting: {channels: {c: {zz_undocumented: 1}}}\n",
        ),
        key(
            "RawAlertRoute",
            "`alerting.routes[]`",
            "alerting: {routes: [{zz_undocumented: 1}]}\n",
        ),
        key("RawEvents", "`events`", "events: {zz_undocumented: 1}\n"),
        key(
            "RawWebhook",
            "`events.webhooks[]`",
            "events: {webhooks: [{zz_undocumented: 1}]}\n",
        ),
        key(
            "RawNats",
            "`events.nats`",
            "events: {nats: {zz_undocumented: 1}}\n",
        ),
        key("RawJournal", "`journal`", "journal: {zz_undocumented: 1}\n"),
        Probe {
            ty: "JournalBodies",
            section: "`journal`",
            is_enum: true,
            source: Source::Yaml("journal: {bodies: zz_undocumented}\n"),
        },
        Probe {
            ty: "JournalDurability",
            section: "`journal`",
            is_enum: true,
            source: Source::Yaml("journal: {durability: zz_undocumented}\n"),
        },
        key(
            "RawStoragePool",
            "`storage_pool`",
            "storage_pool: {zz_undocumented: 1}\n",
        ),
        key("RawMemory", "`memory`", "memory: {zz_undocumented: 1}\n"),
        key(
            "RawTelemetry",
            "`telemetry`",
            "telemetry: {zz_undocumented: 1}\n",
        ),
        key(
            "RawPrice",
            "`prices.<model>`",
            "prices: {m: {zz_undocumented: 1}}\n",
        ),
    ]
}

/// The names serde lists after "expected" in an unknown-field or
/// unknown-variant message: "expected `a`", "expected `a` or `b`",
/// "expected one of `a`, `b`, `c`" — with or without the backticks (the
/// YAML parser drops them), and without serde_json's " at line N column M".
fn expected_names(message: &str) -> Vec<String> {
    let Some(at) = message.find("expected ") else {
        return Vec::new();
    };
    let mut list = &message[at + "expected ".len()..];
    if let Some(end) = list.find(" at line ") {
        list = &list[..end];
    }
    let list = list.strip_prefix("one of ").unwrap_or(list);
    list.split(", ")
        .flat_map(|part| part.split(" or "))
        .map(|name| name.trim().trim_matches('`').to_owned())
        .filter(|name| !name.is_empty())
        .collect()
}

/// The keys (or values) of one probed type, from serde's message.
fn names_of(p: &Probe) -> Vec<String> {
    let message = match &p.source {
        Source::Yaml(yaml) => hale_config::parse(yaml)
            .map(|_| String::new())
            .unwrap_or_else(|e| e.message),
        Source::Message(f) => f(),
    };
    assert!(
        message.contains(&format!("unknown field `{UNKNOWN}`"))
            || message.contains(&format!("unknown variant `{UNKNOWN}`")),
        "the probe of {} did not reach it: {message:?}",
        p.ty
    );
    let names = expected_names(&message);
    assert!(
        !names.is_empty(),
        "no names in the message for {}: {message:?}",
        p.ty
    );
    names
}

/// The lines of the section whose heading's text is `title`, up to the next
/// heading (a `#` line inside a fenced code block is not a heading).
fn section<'a>(doc: &'a str, title: &str) -> Option<Vec<&'a str>> {
    let mut in_fence = false;
    let mut found: Option<Vec<&str>> = None;
    for line in doc.lines() {
        if line.starts_with("```") {
            in_fence = !in_fence;
        }
        let heading = !in_fence && line.starts_with('#');
        match &mut found {
            None if heading && line.trim_start_matches('#').trim() == title => {
                found = Some(Vec::new());
            }
            None => {}
            Some(_) if heading => break,
            Some(lines) => lines.push(line),
        }
    }
    found
}

/// The first cell of each table row of a section that names a key: `` | `key` | ``.
fn row_keys<'a>(lines: &[&'a str]) -> Vec<&'a str> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once("` |").map(|(k, _)| k))
        .collect()
}

/// Every file of hale-config's `src/` (recursively) and hale-core's
/// `src/config.rs`, the validated types.
fn config_sources(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.join("../hale-core/src/config.rs")];
    let mut dirs = vec![root.join("src")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The names of the structs and enums in `text` that derive `Deserialize`
/// (the attributes above a declaration are read, a multi-line derive too).
fn deserialised_types(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut attrs = String::new();
    let mut depth = 0i32;
    for line in text.lines() {
        let t = line.trim();
        if depth > 0 || t.starts_with("#[") {
            attrs.push_str(t);
            depth += t.matches('[').count() as i32 - t.matches(']').count() as i32;
            continue;
        }
        if t.is_empty() || t.starts_with("//") {
            continue;
        }
        let decl = t
            .strip_prefix("pub(crate) ")
            .or_else(|| t.strip_prefix("pub(super) "))
            .or_else(|| t.strip_prefix("pub "))
            .unwrap_or(t);
        let name = decl
            .strip_prefix("struct ")
            .or_else(|| decl.strip_prefix("enum "))
            .map(|rest| {
                rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or_default()
            });
        if let Some(name) = name
            && attrs.contains("derive(")
            && attrs.contains("Deserialize")
        {
            out.push(name.to_owned());
        }
        attrs.clear();
    }
    out
}

/// The text of `docs/configuration.md`.
fn doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn every_config_key_is_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = doc();
    let probes = probes();
    let mut problems = Vec::new();

    // Every deserialised type of the config sources has a probe.
    let probed: BTreeSet<&str> = probes.iter().map(|p| p.ty).collect();
    for file in config_sources(root) {
        let text = std::fs::read_to_string(&file).expect("read a config source");
        for ty in deserialised_types(&text) {
            if !probed.contains(ty.as_str()) {
                problems.push(format!(
                    "{} declares `{ty}`, which derives Deserialize but has no probe in \
                     tests/configuration_doc.rs: add one (and its section to docs/configuration.md)",
                    file.strip_prefix(root).unwrap_or(&file).display()
                ));
            }
        }
    }

    // Every key of every probed type is a row of its section (every enum
    // value named in it), and every row of a section names a key.
    for p in &probes {
        let names = names_of(p);
        let Some(lines) = section(&doc, p.section) else {
            problems.push(format!(
                "docs/configuration.md has no section titled {:?} (for {})",
                p.section, p.ty
            ));
            continue;
        };
        if p.is_enum {
            let text = lines.join("\n");
            for v in &names {
                if !text.contains(&format!("`{v}`")) {
                    problems.push(format!(
                        "value `{v}` of {} is not named in section {:?}",
                        p.ty, p.section
                    ));
                }
            }
            continue;
        }
        let rows = row_keys(&lines);
        for k in &names {
            if !rows.contains(&k.as_str()) {
                problems.push(format!(
                    "key `{k}` of {} has no row `| `{k}` | …` in section {:?}",
                    p.ty, p.section
                ));
            }
        }
        // A section may document several types (`tool_nodes[].breaker`):
        // a row is stale only when no type of that section has the key.
        let all_keys: BTreeSet<String> = probes
            .iter()
            .filter(|q| q.section == p.section && !q.is_enum)
            .flat_map(names_of)
            .collect();
        for r in rows {
            if !all_keys.contains(r) {
                problems.push(format!(
                    "section {:?} documents `{r}`, which is not a key of {}",
                    p.section, p.ty
                ));
            }
        }
    }

    problems.sort();
    problems.dedup();
    assert!(
        problems.is_empty(),
        "docs/configuration.md is out of date with the config types:\n  {}",
        problems.join("\n  ")
    );
}

/// The complete example loads (every `*_env` variable set) and writes every
/// key, but a removed one (its row says **Removed**: a config that sets it
/// does not load).
#[test]
fn the_complete_example_is_valid_and_complete() {
    let doc = doc();
    let lines = section(&doc, "Complete example").expect("a section titled Complete example");
    let yaml: String = lines
        .iter()
        .skip_while(|l| !l.starts_with("```yaml"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(!yaml.is_empty(), "no ```yaml block in the Complete example");
    let env = |name: &str| Some(format!("value-of-{name}"));
    if let Err(e) = hale_config::load(&yaml, &env) {
        panic!("the complete example does not load:\n{e}");
    }
    let mut missing = Vec::new();
    for p in probes().iter().filter(|p| !p.is_enum) {
        for k in names_of(p) {
            let removed = doc.contains(&format!("| `{k}` | — | — | **Removed**"));
            if !removed && !yaml.contains(&format!("{k}:")) {
                missing.push(format!("`{k}` ({})", p.ty));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the complete example does not write {}",
        missing.join(", ")
    );
}

#[test]
fn serde_messages_are_read_as_expected() {
    assert_eq!(
        expected_names("unknown field `x`, expected `a`"),
        vec!["a".to_owned()]
    );
    assert_eq!(
        expected_names("unknown field `x`, expected `a` or `b`"),
        vec!["a".to_owned(), "b".to_owned()]
    );
    assert_eq!(
        expected_names("unknown variant `x`, expected one of `a`, `b`, `c` at line 1 column 3"),
        vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]
    );
    assert_eq!(
        expected_names("unknown field `x`, expected one of a, b, c"),
        vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]
    );
}

#[test]
fn a_section_ends_at_the_next_heading_outside_code() {
    let doc = "# A\n\n## B\none\n```yaml\n# comment\n```\ntwo\n## C\nthree\n";
    assert_eq!(
        section(doc, "B"),
        Some(vec!["one", "```yaml", "# comment", "```", "two"])
    );
    assert_eq!(section(doc, "D"), None);
}

#[test]
fn the_source_scan_finds_derived_types() {
    let text = "\
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawA {
    x: u32,
}

/// Doc.
#[derive(
    Debug,
    serde::Deserialize,
)]
pub enum B { X }

#[derive(Debug)]
struct NotDeserialised;

pub(crate) struct Plain;
";
    assert_eq!(
        deserialised_types(text),
        vec!["RawA".to_owned(), "B".to_owned()]
    );
}
