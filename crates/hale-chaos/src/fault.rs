//! The fault grammar: what a model name, an `x-chaos-fault` header or a script
//! step asks the server to do.
//!
//! A spec is `HEAD[:key=value]*` (see the crate docs for the table). Parsing is
//! pure and happens per request, so it is kept allocation-free for the common
//! case (`ok` or a real model name such as `gpt-4o` or `llama3:8b`): only a
//! known fault name is parsed further. Unknown heads are a normal answer, so a
//! chaos server can stand in for any model; a known head with a bad parameter
//! is an error, so a typo in a test does not silently test nothing.

use std::fmt;
use std::time::Duration;

use crate::task::{self, TaskRef};

/// Words in a normal answer when `tokens` is not given.
pub const DEFAULT_TOKENS: usize = 60;
/// Words sent by `cut` before the connection is dropped.
pub const DEFAULT_CUT_AFTER: usize = 40;
/// Words sent by `stall` before it stalls.
pub const DEFAULT_STALL_AFTER: usize = 20;
/// How long `stall` stalls.
pub const DEFAULT_STALL_MS: u64 = 60_000;
/// How long `slow-first-token` waits before the first content.
pub const DEFAULT_SLOW_MS: u64 = 20_000;
/// How long `slow-stream` waits before each word after the first.
pub const DEFAULT_SLOW_STREAM_MS: u64 = 500;
/// The word before which `malformed` inserts its garbage line.
pub const DEFAULT_MALFORMED_AT: usize = 10;
/// Words sent by `stream-error` before its in-band error event.
pub const DEFAULT_STREAM_ERROR_AFTER: usize = 10;
/// How long `down` answers 503, from the first request for that model.
pub const DEFAULT_DOWN_SECS: u64 = 60;
/// `flaky` fails every this-many-th request (10 %).
pub const DEFAULT_FLAKY_EVERY: u64 = 10;
/// The tool `tool` calls when no `name` is given.
pub const DEFAULT_TOOL_NAME: &str = "edit_file";
/// Largest `tokens` accepted, so a model name cannot make the server build a huge answer.
pub const MAX_TOKENS_PARAM: usize = 100_000;

/// One fault, with its own parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// A normal answer.
    Ok,
    /// 429, with `Retry-After` when given.
    RateLimit { retry_after: Option<u64> },
    /// 500 `server_error` / `api_error`.
    Error500,
    /// 503.
    Error503,
    /// 529 `overloaded_error`.
    Error529,
    /// Close the connection before any response header.
    Reset,
    /// Never answer.
    Hang,
    /// Headers at once, content after `ms`.
    SlowFirstToken { ms: u64 },
    /// Send `after` words, then drop the connection.
    Cut { after: usize },
    /// Send `after` words, stall `ms`, then go on.
    Stall { after: usize, ms: u64 },
    /// Send each word `ms` after the one before: a stream that crawls
    /// (or, with a small `ms`, one at a steady pace).
    SlowStream { ms: u64 },
    /// A garbage SSE line before word `at`.
    Malformed { at: usize },
    /// A stream without `[DONE]` / `message_stop` and without usage.
    NoDone,
    /// Send `after` words, then an in-band error event, then end. `event`
    /// picks the Responses API's shape (the other dialects have one).
    StreamError { after: usize, event: InBand },
    /// 400 context length exceeded (only over `max_chars` message characters, when given).
    ContextOverflow { max_chars: Option<usize> },
    /// 400 content policy.
    ContentFilter,
    /// 401 invalid key.
    Auth,
    /// 401 whose message echoes the credentials the request carried, as a
    /// misconfigured upstream or proxy does.
    AuthEcho,
    /// 400 when the last message is an assistant prefill.
    NoPrefill,
    /// 503 for `secs` from the first request for that model.
    Down { secs: u64 },
    /// 503 until `POST /chaos/reset`.
    DownUntilReset,
    /// 503 for every `every`-th request of its key (the 10th, 20th… with
    /// `every=10`): a deterministic 10 % failure rate.
    Flaky { every: u64 },
    /// A tool call instead of text; `arguments` is a compact JSON object.
    /// `cut_after`: drop the connection after this many argument fragments
    /// of a streamed call (a call cut inside its arguments).
    Tool {
        name: String,
        arguments: String,
        cut_after: Option<usize>,
    },
    /// A deterministic summary of the request's messages.
    Summarize,
}

/// Which in-band failure `stream-error` sends on the Responses API
/// (`event=error|failed|both`); the other dialects have a single shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InBand {
    /// `event: error` (`{"type": "error", "code", "message", "param"}`), then the end.
    Error,
    /// `event: response.failed` (the response with `status: "failed"` and its `error`).
    Failed,
    /// `event: error`, then `event: response.failed` (the default).
    #[default]
    Both,
}

/// Every fault name, in the order the docs list them.
pub const FAULT_NAMES: &[&str] = &[
    "ok",
    "rate-limit",
    "error-500",
    "error-503",
    "error-529",
    "reset",
    "hang",
    "slow-first-token",
    "cut",
    "stall",
    "slow-stream",
    "malformed",
    "no-done",
    "stream-error",
    "context-overflow",
    "content-filter",
    "auth",
    "auth-echo",
    "no-prefill",
    "down",
    "down-until-reset",
    "flaky",
    "tool",
    "summarize",
];

impl Fault {
    /// The fault's name, as written in a spec (the label of `/chaos/stats`).
    pub fn name(&self) -> &'static str {
        match self {
            Fault::Ok => "ok",
            Fault::RateLimit { .. } => "rate-limit",
            Fault::Error500 => "error-500",
            Fault::Error503 => "error-503",
            Fault::Error529 => "error-529",
            Fault::Reset => "reset",
            Fault::Hang => "hang",
            Fault::SlowFirstToken { .. } => "slow-first-token",
            Fault::Cut { .. } => "cut",
            Fault::Stall { .. } => "stall",
            Fault::SlowStream { .. } => "slow-stream",
            Fault::Malformed { .. } => "malformed",
            Fault::NoDone => "no-done",
            Fault::StreamError { .. } => "stream-error",
            Fault::ContextOverflow { .. } => "context-overflow",
            Fault::ContentFilter => "content-filter",
            Fault::Auth => "auth",
            Fault::AuthEcho => "auth-echo",
            Fault::NoPrefill => "no-prefill",
            Fault::Down { .. } => "down",
            Fault::DownUntilReset => "down-until-reset",
            Fault::Flaky { .. } => "flaky",
            Fault::Tool { .. } => "tool",
            Fault::Summarize => "summarize",
        }
    }

    /// How many requests the fault applies to when `times` is not given
    /// (`None`: every request). Stream breakers default to once, so that the
    /// resumed request of a recovering client can be answered.
    fn default_times(&self) -> Option<u64> {
        match self {
            Fault::Cut { .. } | Fault::Stall { .. } | Fault::StreamError { .. } => Some(1),
            Fault::Ok
            | Fault::RateLimit { .. }
            | Fault::Error500
            | Fault::Error503
            | Fault::Error529
            | Fault::Reset
            | Fault::Hang
            | Fault::SlowFirstToken { .. }
            | Fault::SlowStream { .. }
            | Fault::Malformed { .. }
            | Fault::NoDone
            | Fault::ContextOverflow { .. }
            | Fault::ContentFilter
            | Fault::Auth
            | Fault::AuthEcho
            | Fault::NoPrefill
            | Fault::Down { .. }
            | Fault::DownUntilReset
            | Fault::Flaky { .. }
            | Fault::Tool { .. }
            | Fault::Summarize => None,
        }
    }

    /// `slow-first-token`'s delay, if this is one.
    pub fn first_token_delay(&self) -> Option<Duration> {
        match self {
            Fault::SlowFirstToken { ms } => Some(Duration::from_millis(*ms)),
            _ => None,
        }
    }
}

/// A parsed spec: the fault, how many requests it applies to, and the answer length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultSpec {
    /// What to do.
    pub fault: Fault,
    /// The fault applies to the first `times` requests of its key, then the answer is ok.
    /// `None`: every request.
    pub times: Option<u64>,
    /// Words in the answer text.
    pub tokens: usize,
    /// The task the answers play (`task-<seed>-<steps>:FAULT…`), whose
    /// tool calls and final answer the fault then shapes; `None`: the
    /// plain answers.
    pub task: Option<TaskRef>,
}

impl FaultSpec {
    /// A plain ok answer of the default length.
    pub fn ok() -> Self {
        FaultSpec {
            fault: Fault::Ok,
            times: None,
            tokens: DEFAULT_TOKENS,
            task: None,
        }
    }
}

/// Why a spec did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// The spec as given.
    pub spec: String,
    /// What is wrong with it.
    pub problem: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad fault spec `{}`: {}", self.spec, self.problem)
    }
}

impl std::error::Error for SpecError {}

/// Parses a spec as found in a model name or header: an unknown head (a real
/// model name) is `Ok(None)`, meaning a normal answer.
pub fn parse_lenient(spec: &str) -> Result<Option<FaultSpec>, SpecError> {
    let spec = spec.trim();
    let (head, rest) = split_head(spec);
    if let Some(task) = task::parse_head(head) {
        return parse_task(spec, task, rest).map(Some);
    }
    if head == "chaos" {
        // `chaos` alone is ok; `chaos:<fault>:…` names the fault after it;
        // `chaos:tokens=5` is ok with parameters.
        let (next, _) = split_head(rest);
        if rest.is_empty() {
            return Ok(Some(FaultSpec::ok()));
        }
        if FAULT_NAMES.contains(&next) {
            return parse_lenient(rest);
        }
        return parse_known(spec, "ok", rest).map(Some);
    }
    if !FAULT_NAMES.contains(&head) {
        return Ok(None);
    }
    parse_known(spec, head, rest).map(Some)
}

/// Parses a spec strictly (script steps): an unknown fault name is an error.
pub fn parse_strict(spec: &str) -> Result<FaultSpec, SpecError> {
    match parse_lenient(spec)? {
        Some(s) => Ok(s),
        None => Err(SpecError {
            spec: spec.to_owned(),
            problem: format!(
                "unknown fault `{}` (known: chaos, {})",
                split_head(spec.trim()).0,
                FAULT_NAMES.join(", ")
            ),
        }),
    }
}

/// `task-<seed>-<steps>[:FAULT…]`: the task, and the fault that shapes its
/// answers (none: `ok`). A fault name is required after the task (a typo
/// must not silently play the task unfaulted); `tool` is refused, as the
/// task makes its own calls (`cut:after=N` cuts inside one).
fn parse_task(
    spec: &str,
    task: Result<TaskRef, String>,
    rest: &str,
) -> Result<FaultSpec, SpecError> {
    let err = |problem: String| SpecError {
        spec: spec.to_owned(),
        problem,
    };
    let task = task.map_err(err)?;
    let mut out = if rest.is_empty() {
        FaultSpec::ok()
    } else {
        match parse_lenient(rest)? {
            Some(s) => s,
            None => {
                return Err(err(format!(
                    "`{}` after the task is not a fault (known: {})",
                    split_head(rest).0,
                    FAULT_NAMES.join(", ")
                )));
            }
        }
    };
    if matches!(out.fault, Fault::Tool { .. }) {
        return Err(err(
            "a task makes its own tool calls: `tool` does not apply (`cut:after=N` cuts inside one)"
                .into(),
        ));
    }
    if out.task.is_some() {
        return Err(err("a spec names one task".into()));
    }
    out.task = Some(task);
    Ok(out)
}

fn split_head(spec: &str) -> (&str, &str) {
    match spec.split_once(':') {
        Some((h, r)) => (h, r),
        None => (spec, ""),
    }
}

/// Splits `k=v:k=v:…`; `args=` takes the rest of the string, colons included,
/// so a JSON object can follow it.
fn split_params(rest: &str) -> Result<Vec<(&str, &str)>, String> {
    let mut out = Vec::new();
    let mut s = rest;
    while !s.is_empty() {
        if let Some(v) = s.strip_prefix("args=") {
            out.push(("args", v));
            break;
        }
        let (seg, next) = match s.split_once(':') {
            Some((seg, next)) => (seg, next),
            None => (s, ""),
        };
        let Some((k, v)) = seg.split_once('=') else {
            return Err(format!("parameter `{seg}` is not key=value"));
        };
        if k.is_empty() {
            return Err(format!("parameter `{seg}` has no name"));
        }
        out.push((k, v));
        s = next;
    }
    Ok(out)
}

fn num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, String> {
    v.parse::<T>()
        .map_err(|_| format!("parameter `{key}`: `{v}` is not a whole number"))
}

/// The parameters each fault takes besides `times` and `tokens`.
fn own_params(head: &str) -> &'static [&'static str] {
    match head {
        "rate-limit" => &["retry_after"],
        "slow-first-token" => &["ms"],
        "cut" => &["after"],
        "stream-error" => &["after", "event"],
        "stall" => &["after", "ms"],
        "slow-stream" => &["ms"],
        "malformed" => &["at"],
        "context-overflow" => &["max_chars"],
        "down" => &["secs"],
        "flaky" => &["every"],
        "tool" => &["name", "cut_after", "args"],
        _ => &[],
    }
}

fn parse_known(spec: &str, head: &str, rest: &str) -> Result<FaultSpec, SpecError> {
    let err = |problem: String| SpecError {
        spec: spec.to_owned(),
        problem,
    };
    let params = split_params(rest).map_err(err)?;
    let mut times = None;
    let mut tokens = DEFAULT_TOKENS;
    let own = own_params(head);
    let get = |key: &str| {
        params
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    };
    for (k, v) in &params {
        match *k {
            "times" => {
                let t: u64 = num(k, v).map_err(err)?;
                if t == 0 {
                    return Err(err("parameter `times` must be at least 1".into()));
                }
                times = Some(t);
            }
            "tokens" => {
                tokens = num(k, v).map_err(err)?;
                if tokens > MAX_TOKENS_PARAM {
                    return Err(err(format!(
                        "parameter `tokens` must be at most {MAX_TOKENS_PARAM}"
                    )));
                }
            }
            k if own.contains(&k) => {}
            k => {
                let mut takes: Vec<&str> = own.to_vec();
                takes.extend(["times", "tokens"]);
                return Err(err(format!(
                    "fault `{head}` has no parameter `{k}` (it takes: {})",
                    takes.join(", ")
                )));
            }
        }
    }
    let num_or = |key: &str, default: u64| -> Result<u64, SpecError> {
        get(key).map_or(Ok(default), |v| num(key, v).map_err(err))
    };
    let usize_or = |key: &str, default: usize| -> Result<usize, SpecError> {
        get(key).map_or(Ok(default), |v| num(key, v).map_err(err))
    };
    let fault = match head {
        "ok" => Fault::Ok,
        "rate-limit" => Fault::RateLimit {
            retry_after: get("retry_after")
                .map(|v| num("retry_after", v).map_err(err))
                .transpose()?,
        },
        "error-500" => Fault::Error500,
        "error-503" => Fault::Error503,
        "error-529" => Fault::Error529,
        "reset" => Fault::Reset,
        "hang" => Fault::Hang,
        "slow-first-token" => Fault::SlowFirstToken {
            ms: num_or("ms", DEFAULT_SLOW_MS)?,
        },
        "cut" => Fault::Cut {
            after: usize_or("after", DEFAULT_CUT_AFTER)?,
        },
        "stall" => Fault::Stall {
            after: usize_or("after", DEFAULT_STALL_AFTER)?,
            ms: num_or("ms", DEFAULT_STALL_MS)?,
        },
        "slow-stream" => Fault::SlowStream {
            ms: num_or("ms", DEFAULT_SLOW_STREAM_MS)?,
        },
        "malformed" => Fault::Malformed {
            at: usize_or("at", DEFAULT_MALFORMED_AT)?,
        },
        "no-done" => Fault::NoDone,
        "stream-error" => Fault::StreamError {
            after: usize_or("after", DEFAULT_STREAM_ERROR_AFTER)?,
            event: match get("event") {
                None | Some("both") => InBand::Both,
                Some("error") => InBand::Error,
                Some("failed") => InBand::Failed,
                Some(other) => {
                    return Err(err(format!(
                        "parameter `event`: `{other}` is not error, failed or both"
                    )));
                }
            },
        },
        "context-overflow" => Fault::ContextOverflow {
            max_chars: get("max_chars")
                .map(|v| num("max_chars", v).map_err(err))
                .transpose()?,
        },
        "content-filter" => Fault::ContentFilter,
        "auth" => Fault::Auth,
        "auth-echo" => Fault::AuthEcho,
        "no-prefill" => Fault::NoPrefill,
        "down" => Fault::Down {
            secs: num_or("secs", DEFAULT_DOWN_SECS)?,
        },
        "down-until-reset" => Fault::DownUntilReset,
        "flaky" => Fault::Flaky {
            every: num_or("every", DEFAULT_FLAKY_EVERY)?.max(1),
        },
        "tool" => Fault::Tool {
            name: get("name").unwrap_or(DEFAULT_TOOL_NAME).to_owned(),
            arguments: parse_args(get("args").unwrap_or("{}")).map_err(err)?,
            cut_after: get("cut_after")
                .map(|v| num("cut_after", v).map_err(err))
                .transpose()?,
        },
        "summarize" => Fault::Summarize,
        other => {
            return Err(err(format!("unknown fault `{other}`")));
        }
    };
    let times = times.or_else(|| fault.default_times());
    Ok(FaultSpec {
        fault,
        times,
        tokens,
        task: None,
    })
}

/// `args` of `tool`: a JSON object (`{"path":"a.rs"}`), the same percent-encoded
/// (`%7B%22path%22…`), or the simplified `path=a.rs,line=3` (string values).
/// Returns the object as compact JSON.
fn parse_args(raw: &str) -> Result<String, String> {
    let decoded = if raw.contains('%') {
        percent_decode(raw)
            .ok_or_else(|| format!("parameter `args`: bad percent-encoding in `{raw}`"))?
    } else {
        raw.to_owned()
    };
    let t = decoded.trim();
    if t.starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(t)
            .map_err(|e| format!("parameter `args`: not a JSON object: {e}"))?;
        if !v.is_object() {
            return Err("parameter `args`: not a JSON object".into());
        }
        return Ok(v.to_string());
    }
    let mut obj = serde_json::Map::new();
    for pair in t.split(',').filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(format!("parameter `args`: `{pair}` is not key=value"));
        };
        obj.insert(k.to_owned(), serde_json::Value::String(v.to_owned()));
    }
    Ok(serde_json::Value::Object(obj).to_string())
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_model_names_are_ok() {
        assert_eq!(parse_lenient("gpt-4o").unwrap(), None);
        assert_eq!(parse_lenient("llama3:8b").unwrap(), None);
        assert_eq!(parse_lenient("chaos").unwrap(), Some(FaultSpec::ok()));
    }

    #[test]
    fn params_parse() {
        let s = parse_lenient("rate-limit:retry_after=2:times=1")
            .unwrap()
            .unwrap();
        assert_eq!(
            s.fault,
            Fault::RateLimit {
                retry_after: Some(2)
            }
        );
        assert_eq!(s.times, Some(1));
        let s = parse_lenient("cut:after=40:tokens=60").unwrap().unwrap();
        assert_eq!(s.fault, Fault::Cut { after: 40 });
        assert_eq!((s.times, s.tokens), (Some(1), 60));
        let s = parse_lenient("slow-stream:ms=40:tokens=20")
            .unwrap()
            .unwrap();
        assert_eq!(s.fault, Fault::SlowStream { ms: 40 });
        assert_eq!((s.times, s.tokens), (None, 20));
        let s = parse_lenient("slow-stream").unwrap().unwrap();
        assert_eq!(
            s.fault,
            Fault::SlowStream {
                ms: DEFAULT_SLOW_STREAM_MS
            }
        );
        let s = parse_lenient("chaos:stall:after=3:ms=5").unwrap().unwrap();
        assert_eq!(s.fault, Fault::Stall { after: 3, ms: 5 });
        let s = parse_lenient("error-503").unwrap().unwrap();
        assert_eq!(s.times, None);
    }

    #[test]
    fn tool_args_forms() {
        let want = r#"{"path":"a.rs"}"#;
        for spec in [
            r#"tool:name=edit_file:args={"path":"a.rs"}"#,
            "tool:name=edit_file:args=%7B%22path%22%3A%22a.rs%22%7D",
            "tool:name=edit_file:args=path=a.rs",
        ] {
            let s = parse_lenient(spec).unwrap().unwrap();
            assert_eq!(
                s.fault,
                Fault::Tool {
                    name: "edit_file".into(),
                    arguments: want.into(),
                    cut_after: None,
                },
                "{spec}"
            );
        }
    }

    #[test]
    fn a_tool_call_cut_inside_its_arguments_parses() {
        let s = parse_lenient(r#"tool:name=f:cut_after=2:args={"a":"b:c"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            s.fault,
            Fault::Tool {
                name: "f".into(),
                arguments: r#"{"a":"b:c"}"#.into(),
                cut_after: Some(2),
            }
        );
        assert_eq!(s.times, None, "every request is cut");
        assert!(parse_lenient("tool:cut_after=x").is_err());
    }

    #[test]
    fn a_task_takes_a_fault_after_it() {
        let t = crate::task::Task::new(7, 6).unwrap();
        let s = parse_lenient("task-7-6").unwrap().unwrap();
        assert_eq!((s.fault, s.task), (Fault::Ok, Some(TaskRef::Fixed(t))));
        let s = parse_lenient("task-7-6:cut:after=2").unwrap().unwrap();
        assert_eq!(s.fault, Fault::Cut { after: 2 });
        assert_eq!((s.times, s.task), (Some(1), Some(TaskRef::Fixed(t))));
        let s = parse_lenient("task:error-503:times=2").unwrap().unwrap();
        assert_eq!(s.fault, Fault::Error503);
        assert_eq!((s.times, s.task), (Some(2), Some(TaskRef::FromPrompt)));
        for bad in [
            "task-7-6:cutt",
            "task-7-6:times=2",
            "task-7-0",
            "task-7-6:tool:name=x",
            "task-7-6:task-8-6",
        ] {
            assert!(parse_lenient(bad).is_err(), "{bad}");
        }
        // Not a task: a model name.
        assert_eq!(parse_lenient("task-force").unwrap(), None);
    }

    #[test]
    fn bad_params_are_named() {
        let e = parse_lenient("cut:aftr=3").unwrap_err();
        assert!(e.to_string().contains("no parameter `aftr`"), "{e}");
        let e = parse_lenient("cut:after=x").unwrap_err();
        assert!(e.to_string().contains("`after`"), "{e}");
        let e = parse_strict("rate-limt").unwrap_err();
        assert!(e.to_string().contains("unknown fault `rate-limt`"), "{e}");
        assert!(parse_lenient("ok:times=0").is_err());
    }
}
