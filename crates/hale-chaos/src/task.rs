//! The scripted task model: chaos playing an agent's model through a
//! multi-step tool task, and the checker that says whether a final answer
//! is the task's right one.
//!
//! A task (`task-<seed>-<steps>`) is `steps` tool calls — shell commands that
//! create a file and read it back, or calls of an `echo` tool — then a final
//! answer that lists what every call returned and a digest of it. The model
//! keeps no state: the next move is read from the conversation it is sent.
//! Each step's output carries a marker (`CT<seed>-<kk>-<HEX>`) that only the
//! tool produces (the shell upper-cases the token the command writes in
//! lower case), so the model finds which steps are done by scanning what
//! came back, and asks for the first one that is not. Any provider kind
//! chaos plays can therefore continue a task another kind began — after a
//! failover, a resume, a restart — because they all read the same
//! conversation the same way.
//!
//! The tool is picked from the `tools` the request offers ([`offered`]
//! reads every dialect's shape): a shell tool by its name (Claude Code's
//! `Bash`, Codex's `exec_command`, Gemini CLI's `run_shell_command`, an SDK
//! loop's `shell`, …; the argument's shape from its schema), and an `echo`
//! tool (the chaos tool node's, behind hale's `/mcp`, or an SDK loop's) for
//! every third step when one is offered. The final answer is built from the
//! markers *seen*, so a tool output lost, doubled or garbled on its way
//! through a gateway gives a wrong digest: [`check`] (pure: the task and
//! the final text) tells a task finished correctly from one that merely
//! ended.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// Steps of a task whose name gives none (`task`, `task-<seed>`).
pub const DEFAULT_TASK_STEPS: u32 = 6;
/// The most steps a task may have.
pub const MAX_TASK_STEPS: u32 = 24;
/// Tool results per step after which the model gives up (a step whose
/// output never carries its marker would otherwise be asked for forever).
pub const TOOL_RESULTS_PER_STEP: usize = 3;
/// Every this-many-th step calls an `echo` tool when one is offered.
pub const ECHO_EVERY: u32 = 3;
/// The model-name head of a task.
pub const TASK_HEAD: &str = "task";

/// A task: which markers, how many steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Task {
    pub seed: u64,
    pub steps: u32,
}

/// Which task a spec names: a fixed one, or the one the conversation's user
/// messages name (`task` alone: the first `task-<seed>-<steps>` word in them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskRef {
    Fixed(Task),
    FromPrompt,
}

impl Task {
    /// A task of `steps` steps (1 to [`MAX_TASK_STEPS`]).
    pub fn new(seed: u64, steps: u32) -> Result<Task, String> {
        if !(1..=MAX_TASK_STEPS).contains(&steps) {
            return Err(format!(
                "a task has 1 to {MAX_TASK_STEPS} steps, not {steps}"
            ));
        }
        Ok(Task { seed, steps })
    }

    /// `task-<seed>-<steps>`: the model name that plays it.
    pub fn name(&self) -> String {
        format!("{TASK_HEAD}-{}-{}", self.seed, self.steps)
    }

    /// The directory the shell steps write in (relative to the agent's
    /// working directory).
    pub fn dir(&self) -> String {
        format!("chaos-task-{}", self.seed)
    }

    /// The file step `k` (1-based) writes.
    pub fn file(&self, k: u32) -> String {
        format!("{}/step-{k:02}.txt", self.dir())
    }

    /// What step `k` writes in its file: the marker in lower case.
    pub fn token(&self, k: u32) -> String {
        format!("ct{}-{k:02}-{}", self.seed, hex8(self.seed, k))
    }

    /// The marker step `k`'s output carries: [`Task::token`] upper-cased.
    pub fn marker(&self, k: u32) -> String {
        self.token(k).to_ascii_uppercase()
    }

    /// The shell command of step `k`: write the token, read it back upper-cased.
    pub fn command(&self, k: u32) -> String {
        format!(
            "mkdir -p {dir} && printf '%s\\n' {tok} > {file} && tr a-z A-Z < {file}",
            dir = self.dir(),
            tok = self.token(k),
            file = self.file(k),
        )
    }

    /// The final answer of a task whose every step was seen, as the model
    /// gives it and [`check`] wants it.
    pub fn expected_answer(&self) -> String {
        let markers: Vec<String> = (1..=self.steps).map(|k| self.marker(k)).collect();
        final_answer(self, &markers)
    }

    /// The markers in `text` that belong to this task, by step (the first
    /// one seen of each step).
    pub fn markers_in<'a>(
        &self,
        texts: impl IntoIterator<Item = &'a str>,
    ) -> BTreeMap<u32, String> {
        let mut seen = BTreeMap::new();
        let head = format!("CT{}-", self.seed);
        for text in texts {
            let b = text.as_bytes();
            let mut from = 0;
            while let Some(at) = text[from..].find(&head) {
                let start = from + at;
                from = start + head.len();
                if start > 0 && b[start - 1].is_ascii_alphanumeric() {
                    continue;
                }
                // `kk-HHHHHHHH` after the head, and no more hex after it.
                let rest = &b[from..];
                let well_formed = rest.len() >= 11
                    && rest[..2].iter().all(u8::is_ascii_digit)
                    && rest[2] == b'-'
                    && rest[3..11]
                        .iter()
                        .all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(c))
                    && rest.get(11).is_none_or(|c| !c.is_ascii_alphanumeric());
                if !well_formed {
                    continue;
                }
                let k = u32::from(rest[0] - b'0') * 10 + u32::from(rest[1] - b'0');
                if (1..=self.steps).contains(&k) {
                    let marker = &text[start..from + 11];
                    seen.entry(k).or_insert_with(|| marker.to_owned());
                }
            }
        }
        seen
    }
}

/// Eight lower-case hex digits of step `k` of task `seed`.
fn hex8(seed: u64, k: u32) -> String {
    let d = ring::digest::digest(
        &ring::digest::SHA256,
        format!("hale-chaos task {seed} step {k}").as_bytes(),
    );
    d.as_ref()[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// The digest of the outputs seen: the first 16 hex digits of the SHA-256
/// of the markers, one a line.
pub fn digest(markers: &[String]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, markers.join("\n").as_bytes());
    d.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

fn final_answer(task: &Task, markers: &[String]) -> String {
    format!(
        "Task {} finished: {} steps. Outputs: {}. Digest: {}.",
        task.name(),
        markers.len(),
        markers.join(" "),
        digest(markers)
    )
}

/// Parses a model-name head: `task`, `task-<seed>` or `task-<seed>-<steps>`.
/// `None`: not a task head; `Some(Err)`: a task head with a bad number.
pub fn parse_head(head: &str) -> Option<Result<TaskRef, String>> {
    if head == TASK_HEAD {
        return Some(Ok(TaskRef::FromPrompt));
    }
    let rest = head.strip_prefix("task-")?;
    let mut parts = rest.split('-');
    let (seed, steps) = (parts.next()?, parts.next());
    if parts.next().is_some() || !seed.bytes().all(|c| c.is_ascii_digit()) || seed.is_empty() {
        return None;
    }
    Some(parse_numbers(seed, steps).map(TaskRef::Fixed))
}

fn parse_numbers(seed: &str, steps: Option<&str>) -> Result<Task, String> {
    let seed: u64 = seed
        .parse()
        .map_err(|_| format!("task seed `{seed}` is not a whole number"))?;
    let steps = match steps {
        None => DEFAULT_TASK_STEPS,
        Some(s) => s
            .parse()
            .map_err(|_| format!("task steps `{s}` is not a whole number"))?,
    };
    Task::new(seed, steps)
}

/// The task a user text names: its first `task-<seed>-<steps>` word.
pub fn named_in(text: &str) -> Option<Task> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find_map(|w| match parse_head(w) {
            Some(Ok(TaskRef::Fixed(t))) => Some(t),
            Some(Ok(TaskRef::FromPrompt) | Err(_)) | None => None,
        })
}

/// A tool a request offers: its name and its input schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Offered {
    pub name: String,
    pub schema: Value,
}

/// The function tools in a request's `tools`, whatever the dialect: OpenAI
/// chat (`{type: function, function: {name, parameters}}`), the Responses
/// API (`{type: function, name, parameters}`), Anthropic (`{name,
/// input_schema}`), Gemini (`{functionDeclarations: [{name, parameters |
/// parametersJsonSchema}]}`, or the proto's snake_case names, as LiteLLM
/// sends them), Bedrock Converse (`toolConfig.tools`:
/// `{toolSpec: {name, inputSchema: {json}}}`). Hosted tools (web search, a
/// Responses `local_shell`, …) have no name here and are left out.
pub fn offered(tools: &Value) -> Vec<Offered> {
    let mut out = Vec::new();
    let Value::Array(items) = tools else {
        return out;
    };
    for t in items {
        if let Some(decls) = t
            .get("functionDeclarations")
            .or_else(|| t.get("function_declarations"))
            .and_then(Value::as_array)
        {
            for d in decls {
                push(
                    &mut out,
                    d,
                    &[
                        "parametersJsonSchema",
                        "parameters_json_schema",
                        "parameters",
                    ],
                );
            }
        } else if let Some(spec) = t.get("toolSpec") {
            let schema = spec
                .pointer("/inputSchema/json")
                .cloned()
                .unwrap_or(Value::Null);
            if let Some(name) = spec.get("name").and_then(Value::as_str) {
                out.push(Offered {
                    name: name.to_owned(),
                    schema,
                });
            }
        } else if let Some(f) = t.get("function").filter(|f| f.is_object()) {
            push(&mut out, f, &["parameters"]);
        } else if t
            .get("type")
            .is_none_or(|ty| ty == "function" || ty == "custom")
        {
            push(&mut out, t, &["parameters", "input_schema"]);
        }
    }
    out
}

fn push(out: &mut Vec<Offered>, t: &Value, schema_keys: &[&str]) {
    let Some(name) = t.get("name").and_then(Value::as_str) else {
        return;
    };
    let schema = schema_keys
        .iter()
        .find_map(|k| t.get(*k))
        .cloned()
        .unwrap_or(Value::Null);
    out.push(Offered {
        name: name.to_owned(),
        schema,
    });
}

/// Shell tools by name, in the order they are preferred when several are
/// offered: Claude Code, Codex, Gemini CLI, then common SDK loop names.
pub const SHELL_TOOLS: &[&str] = &[
    "Bash",
    "exec_command",
    "run_shell_command",
    "shell",
    "bash",
    "run_shell",
    "shell_command",
    "execute_command",
];

/// How a shell tool takes its command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShellArgs {
    /// `{"command": "…"}` (Claude Code, Gemini CLI, most SDK loops).
    Command,
    /// `{"command": ["bash", "-lc", "…"]}` (Codex's `shell`).
    CommandArgv,
    /// `{"cmd": "…"}` (Codex's `exec_command`).
    Cmd,
}

fn property_type<'a>(schema: &'a Value, key: &str) -> Option<&'a str> {
    let p = schema.get("properties")?.get(key)?;
    Some(p.get("type").and_then(Value::as_str).unwrap_or(""))
}

fn shell_tool(tools: &[Offered]) -> Option<(&Offered, ShellArgs)> {
    let t = SHELL_TOOLS
        .iter()
        .find_map(|n| tools.iter().find(|t| t.name == *n))?;
    let args = match (
        property_type(&t.schema, "command"),
        property_type(&t.schema, "cmd"),
    ) {
        (Some(ty), _) if ty.eq_ignore_ascii_case("array") => ShellArgs::CommandArgv,
        (None, Some(_)) => ShellArgs::Cmd,
        (Some(_) | None, _) => ShellArgs::Command,
    };
    Some((t, args))
}

/// An `echo` tool: named `echo`, or ending in `__echo`, `.echo`, `/echo`,
/// `:echo` (an MCP tool as a client names it, e.g. Claude Code's
/// `mcp__hale__echo`).
fn echo_tool(tools: &[Offered]) -> Option<&Offered> {
    tools.iter().find(|t| {
        let n = t.name.as_str();
        n == "echo"
            || ["__echo", ".echo", "/echo", ":echo"]
                .iter()
                .any(|s| n.ends_with(s))
    })
}

/// What the conversation holds for the model to read.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The tools the request offers.
    pub tools: &'a [Offered],
    /// Every text of the conversation that is not the assistant's or the
    /// system prompt's (tool results wherever a dialect puts them, user text).
    pub texts: &'a [String],
    /// Tool results in the conversation.
    pub tool_results: usize,
}

/// The model's next move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Move {
    /// Call `name` with `arguments` (compact JSON).
    Call { name: String, arguments: String },
    /// Answer with this text (the final answer, or why the task cannot go on).
    Answer(String),
}

/// The next move of `task` in a conversation: a call for the first step
/// whose marker was not seen, or the final answer when all were.
pub fn next_move(task: &Task, seen: Seen<'_>) -> Move {
    let markers = task.markers_in(seen.texts.iter().map(String::as_str));
    let Some(k) = (1..=task.steps).find(|k| !markers.contains_key(k)) else {
        let markers: Vec<String> = markers.into_values().collect();
        return Move::Answer(final_answer(task, &markers));
    };
    let limit = TOOL_RESULTS_PER_STEP * task.steps as usize;
    if seen.tool_results >= limit {
        return Move::Answer(format!(
            "Task {} failed: step {k}'s output never came back ({} tool results).",
            task.name(),
            seen.tool_results
        ));
    }
    let shell = shell_tool(seen.tools);
    let echo = echo_tool(seen.tools);
    match (shell, echo) {
        (None, Some(e)) => echo_call(task, k, e),
        (Some(_), Some(e)) if k % ECHO_EVERY == 0 => echo_call(task, k, e),
        (Some((t, args)), Some(_) | None) => {
            let cmd = task.command(k);
            let arguments = match args {
                ShellArgs::Command => json!({"command": cmd}),
                ShellArgs::CommandArgv => json!({"command": ["bash", "-lc", cmd]}),
                ShellArgs::Cmd => json!({"cmd": cmd}),
            };
            Move::Call {
                name: t.name.clone(),
                arguments: arguments.to_string(),
            }
        }
        (None, None) => {
            let names: Vec<&str> = seen.tools.iter().map(|t| t.name.as_str()).collect();
            Move::Answer(format!(
                "Task {} cannot run: no shell or echo tool among the {} offered [{}].",
                task.name(),
                names.len(),
                names.join(", ")
            ))
        }
    }
}

fn echo_call(task: &Task, k: u32, tool: &Offered) -> Move {
    Move::Call {
        name: tool.name.clone(),
        arguments: json!({"text": task.marker(k)}).to_string(),
    }
}

/// Why a final text is not `task`'s right answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wrong {
    /// No answer of this task in the text.
    Missing,
    /// The task's answer, but not the right one (a step's output missing or
    /// garbled): the digest the text gives, and the right one.
    Digest { got: String, want: String },
    /// The model gave up or could not run (its own words).
    Failed(String),
    /// The right answer, more than once (a resumed stream that repeated it).
    Repeated(usize),
}

impl std::fmt::Display for Wrong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wrong::Missing => write!(f, "no final answer of the task"),
            Wrong::Digest { got, want } => write!(f, "digest {got}, want {want}"),
            Wrong::Failed(why) => write!(f, "the task did not finish: {why}"),
            Wrong::Repeated(n) => write!(f, "the answer appears {n} times"),
        }
    }
}

/// Whether `text` (a client's final output) holds `task`'s right final
/// answer, exactly once. Pure: the bench and the tests call it on whatever
/// a client printed.
pub fn check(task: &Task, text: &str) -> Result<(), Wrong> {
    let want = task.expected_answer();
    match text.matches(&want).count() {
        1 => return Ok(()),
        0 => {}
        n => return Err(Wrong::Repeated(n)),
    }
    let name = task.name();
    let finished = format!("Task {name} finished:");
    if let Some(at) = text.find(&finished) {
        let got = text[at..]
            .split("Digest: ")
            .nth(1)
            .map(|d| d.chars().take_while(char::is_ascii_hexdigit).collect())
            .unwrap_or_default();
        return Err(Wrong::Digest {
            got,
            want: digest(&(1..=task.steps).map(|k| task.marker(k)).collect::<Vec<_>>()),
        });
    }
    for stop in [
        format!("Task {name} failed:"),
        format!("Task {name} cannot run:"),
    ] {
        if let Some(at) = text.find(&stop) {
            let why = text[at..].lines().next().unwrap_or_default().to_owned();
            return Err(Wrong::Failed(why));
        }
    }
    Err(Wrong::Missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Task {
        Task::new(7, 6).unwrap()
    }

    fn tools(v: Value) -> Vec<Offered> {
        offered(&v)
    }

    #[test]
    fn heads_parse() {
        assert_eq!(parse_head("task"), Some(Ok(TaskRef::FromPrompt)));
        assert_eq!(parse_head("task-7-6"), Some(Ok(TaskRef::Fixed(t()))));
        assert_eq!(
            parse_head("task-7"),
            Some(Ok(TaskRef::Fixed(
                Task::new(7, DEFAULT_TASK_STEPS).unwrap()
            )))
        );
        assert!(matches!(parse_head("task-7-0"), Some(Err(_))));
        assert!(matches!(parse_head("task-7-99"), Some(Err(_))));
        assert_eq!(parse_head("task-force"), None);
        assert_eq!(parse_head("gpt-4o"), None);
        assert_eq!(
            named_in("Please run task-9-8 now."),
            Some(Task::new(9, 8).unwrap())
        );
        assert_eq!(named_in("no task here"), None);
    }

    #[test]
    fn markers_are_found_only_whole_and_only_for_the_task() {
        let task = t();
        let m3 = task.marker(3);
        let text = format!(
            "Output:\n{m3}\nX{m1} {other} {low} {m3}F",
            m1 = task.marker(1),
            other = Task::new(8, 6).unwrap().marker(2),
            low = task.token(2),
        );
        let seen = task.markers_in([text.as_str()]);
        assert_eq!(seen.keys().copied().collect::<Vec<_>>(), [3], "{text}");
        assert_eq!(seen[&3], m3);
        // Escaped inside JSON (a Gemini functionResponse), still found.
        let json = json!({"result": format!("{}\n", task.marker(2))}).to_string();
        assert!(task.markers_in([json.as_str()]).contains_key(&2));
    }

    #[test]
    fn every_dialects_tools_are_read() {
        let schema = json!({"type": "object", "properties": {"command": {"type": "string"}}});
        let shapes = [
            json!([{"type": "function", "function": {"name": "Bash", "parameters": schema}}]),
            json!([{"type": "function", "name": "Bash", "parameters": schema}]),
            json!([{"name": "Bash", "input_schema": schema}]),
            json!([{"functionDeclarations": [{"name": "Bash", "parametersJsonSchema": schema}]}]),
            json!([{"toolSpec": {"name": "Bash", "inputSchema": {"json": schema}}}]),
        ];
        for s in shapes {
            assert_eq!(
                tools(s.clone()),
                [Offered {
                    name: "Bash".into(),
                    schema: schema.clone()
                }],
                "{s}"
            );
        }
        assert!(tools(json!([{"type": "web_search"}])).is_empty());
    }

    #[test]
    fn the_shell_tool_and_its_argument_shape_come_from_the_tools() {
        let task = t();
        let cmd = task.command(1);
        let cases = [
            (
                json!([{"name": "Read", "input_schema": {}}, {"name": "Bash", "input_schema":
                    {"properties": {"command": {"type": "string"}}}}]),
                "Bash",
                json!({"command": cmd}),
            ),
            (
                json!([{"type": "function", "name": "exec_command", "parameters":
                    {"properties": {"cmd": {"type": "string"}}}}]),
                "exec_command",
                json!({"cmd": cmd}),
            ),
            (
                json!([{"type": "function", "name": "shell", "parameters":
                    {"properties": {"command": {"type": "array"}}}}]),
                "shell",
                json!({"command": ["bash", "-lc", cmd]}),
            ),
            (
                json!([{"functionDeclarations": [{"name": "run_shell_command", "parameters":
                    {"properties": {"command": {"type": "STRING"}}}}]}]),
                "run_shell_command",
                json!({"command": cmd}),
            ),
        ];
        for (offered, name, args) in cases {
            let offered = tools(offered);
            let m = next_move(
                &task,
                Seen {
                    tools: &offered,
                    texts: &[],
                    tool_results: 0,
                },
            );
            assert_eq!(
                m,
                Move::Call {
                    name: name.into(),
                    arguments: args.to_string()
                }
            );
        }
    }

    /// Plays a task to its end in memory: each call's output is what a
    /// shell (or echo) returns.
    fn play(task: &Task, offered: &[Offered]) -> (Vec<String>, String) {
        let mut texts = Vec::new();
        let mut calls = Vec::new();
        loop {
            let m = next_move(
                task,
                Seen {
                    tools: offered,
                    texts: &texts,
                    tool_results: texts.len(),
                },
            );
            match m {
                Move::Call { name, arguments } => {
                    let args: Value = serde_json::from_str(&arguments).unwrap();
                    let out = if name.ends_with("echo") {
                        json!({"echo": args}).to_string()
                    } else {
                        // The shell: the token written, read back upper-cased.
                        let cmd = args["command"].as_str().unwrap();
                        let tok = cmd
                            .split_whitespace()
                            .find(|w| w.starts_with("ct"))
                            .unwrap();
                        format!("{}\n", tok.to_ascii_uppercase())
                    };
                    calls.push(name);
                    texts.push(out);
                }
                Move::Answer(a) => return (calls, a),
            }
        }
    }

    #[test]
    fn a_task_plays_to_its_checked_answer_mixing_shell_and_echo() {
        let task = t();
        let offered = tools(json!([
            {"name": "Bash", "input_schema": {"properties": {"command": {"type": "string"}}}},
            {"name": "mcp__hale__echo", "input_schema": {}},
        ]));
        let (calls, answer) = play(&task, &offered);
        assert_eq!(
            calls,
            [
                "Bash",
                "Bash",
                "mcp__hale__echo",
                "Bash",
                "Bash",
                "mcp__hale__echo"
            ]
        );
        assert_eq!(answer, task.expected_answer());
        assert_eq!(check(&task, &answer), Ok(()));
        assert_eq!(check(&task, &format!("Done.\n{answer}\n")), Ok(()));
    }

    #[test]
    fn the_checker_rejects_a_wrong_digest_a_repeat_a_failure_and_nothing() {
        let task = t();
        let right = task.expected_answer();
        // A step's output garbled on the way: seen, but not as the tool said it.
        let mut markers: Vec<String> = (1..=task.steps).map(|k| task.marker(k)).collect();
        markers[2] = format!("CT7-03-{}", "0".repeat(8));
        let wrong = final_answer(&task, &markers);
        assert!(
            matches!(check(&task, &wrong), Err(Wrong::Digest { .. })),
            "{wrong}"
        );
        // A digest edited by hand is refused as well.
        let edited = right.replace("Digest: ", "Digest: 0");
        assert!(matches!(check(&task, &edited), Err(Wrong::Digest { .. })));
        // Repeated by a resume that sent it twice.
        assert_eq!(
            check(&task, &format!("{right}{right}")),
            Err(Wrong::Repeated(2))
        );
        // Cut short.
        assert!(check(&task, &right[..right.len() - 5]).is_err());
        assert_eq!(check(&task, "w0 w1 w2"), Err(Wrong::Missing));
        // Another task's answer is not this one's.
        let other = Task::new(8, 6).unwrap().expected_answer();
        assert_eq!(check(&task, &other), Err(Wrong::Missing));
    }

    #[test]
    fn a_step_whose_output_never_comes_back_ends_the_task_in_a_failure() {
        let task = t();
        let offered = tools(json!([{"name": "Bash", "input_schema": {}}]));
        let texts: Vec<String> = vec!["bash: tr: command not found".into(); 18];
        let m = next_move(
            &task,
            Seen {
                tools: &offered,
                texts: &texts,
                tool_results: 18,
            },
        );
        let Move::Answer(a) = m else { panic!("{m:?}") };
        assert!(matches!(check(&task, &a), Err(Wrong::Failed(_))), "{a}");
        let none = next_move(
            &task,
            Seen {
                tools: &[],
                texts: &[],
                tool_results: 0,
            },
        );
        let Move::Answer(a) = none else {
            panic!("{none:?}")
        };
        assert!(a.contains("cannot run"), "{a}");
    }

    #[test]
    fn tokens_are_distinct_per_step_and_seed() {
        let a = t();
        let b = Task::new(8, 6).unwrap();
        let all: std::collections::HashSet<String> =
            (1..=6).flat_map(|k| [a.marker(k), b.marker(k)]).collect();
        assert_eq!(all.len(), 12);
        assert_eq!(a.marker(1).len(), "CT7-01-".len() + 8);
    }
}
