//! The scripted task model (issue 41) on every wire chaos plays: a task is
//! driven to its checked final answer with each step sent in another
//! provider's shape (OpenAI chat, Anthropic, Gemini, the Responses API,
//! Azure, Bedrock Converse and InvokeModel, Vertex's Gemini and Claude),
//! the shell steps run by a real shell; the same conversation gets the same
//! move from every kind; a prompt that mentions summarising does not stop
//! the task, and hale's compaction mark does get a summary.

mod common;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::*;
use hale_chaos::task::{self, Task, Wrong};
use hale_chaos::{COMPACTION_HEADER, ChaosHandle};
use serde_json::{Value, json};

/// Every wire a task can be continued on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    OpenAiChat,
    Anthropic,
    Gemini,
    Responses,
    Azure,
    Converse,
    Invoke,
    VertexGemini,
    VertexClaude,
}

const KINDS: [Kind; 9] = [
    Kind::OpenAiChat,
    Kind::Anthropic,
    Kind::Gemini,
    Kind::Responses,
    Kind::Azure,
    Kind::Converse,
    Kind::Invoke,
    Kind::VertexGemini,
    Kind::VertexClaude,
];

/// The conversation, wire-neutral: the prompt and each call with its output.
struct Conversation {
    system: String,
    prompt: String,
    turns: Vec<(String, Value, String)>,
}

fn shell_schema() -> Value {
    json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]})
}

fn echo_schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}})
}

/// The tools (`shell`, `echo`) in `kind`'s shape.
fn tools(kind: Kind) -> Value {
    let list = [("shell", shell_schema()), ("echo", echo_schema())];
    match kind {
        Kind::OpenAiChat | Kind::Azure => json!(
            list.iter()
                .map(|(n, s)| json!({"type": "function",
            "function": {"name": n, "description": "d", "parameters": s}}))
                .collect::<Vec<_>>()
        ),
        Kind::Responses => json!(
            list.iter()
                .map(|(n, s)| json!({"type": "function", "name": n,
            "description": "d", "parameters": s}))
                .collect::<Vec<_>>()
        ),
        Kind::Anthropic | Kind::Invoke | Kind::VertexClaude => json!(
            list.iter()
                .map(|(n, s)| json!({"name": n, "description": "d", "input_schema": s}))
                .collect::<Vec<_>>()
        ),
        Kind::Gemini | Kind::VertexGemini => {
            json!([{"functionDeclarations": list.iter().map(|(n, s)|
            json!({"name": n, "description": "d", "parameters": s})).collect::<Vec<_>>()}])
        }
        Kind::Converse => json!(
            list.iter()
                .map(|(n, s)| json!({"toolSpec": {"name": n,
            "description": "d", "inputSchema": {"json": s}}}))
                .collect::<Vec<_>>()
        ),
    }
}

/// The request body of `conv` in `kind`'s shape (the model in the body
/// where the wire has it there).
fn render(kind: Kind, model: &str, conv: &Conversation) -> Value {
    let id = |i: usize| format!("call_{i}");
    match kind {
        Kind::OpenAiChat | Kind::Azure => {
            let mut msgs = vec![
                json!({"role": "system", "content": conv.system}),
                json!({"role": "user", "content": conv.prompt}),
            ];
            for (i, (name, args, out)) in conv.turns.iter().enumerate() {
                msgs.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": id(i),
                    "type": "function", "function": {"name": name, "arguments": args.to_string()}}]}));
                msgs.push(json!({"role": "tool", "tool_call_id": id(i), "content": out}));
            }
            json!({"model": model, "messages": msgs, "tools": tools(kind)})
        }
        Kind::Anthropic | Kind::Invoke | Kind::VertexClaude => {
            let mut msgs = vec![json!({"role": "user", "content": conv.prompt})];
            for (i, (name, args, out)) in conv.turns.iter().enumerate() {
                msgs.push(
                    json!({"role": "assistant", "content": [{"type": "tool_use", "id": id(i),
                    "name": name, "input": args}]}),
                );
                msgs.push(json!({"role": "user", "content": [{"type": "tool_result",
                    "tool_use_id": id(i), "content": out}]}));
            }
            let mut b = json!({"max_tokens": 1024, "system": conv.system, "messages": msgs,
                "tools": tools(kind)});
            match kind {
                Kind::Anthropic => b["model"] = json!(model),
                Kind::Invoke => b["anthropic_version"] = json!("bedrock-2023-05-31"),
                _ => b["anthropic_version"] = json!("vertex-2023-10-16"),
            }
            b
        }
        Kind::Responses => {
            let mut input = vec![json!({"role": "user", "content": conv.prompt})];
            for (i, (name, args, out)) in conv.turns.iter().enumerate() {
                input.push(
                    json!({"type": "function_call", "call_id": id(i), "name": name,
                    "arguments": args.to_string()}),
                );
                input
                    .push(json!({"type": "function_call_output", "call_id": id(i), "output": out}));
            }
            json!({"model": model, "instructions": conv.system, "input": input, "tools": tools(kind)})
        }
        Kind::Gemini | Kind::VertexGemini => {
            let mut contents = vec![json!({"role": "user", "parts": [{"text": conv.prompt}]})];
            for (name, args, out) in &conv.turns {
                contents.push(json!({"role": "model", "parts": [{"functionCall": {"name": name, "args": args}}]}));
                contents.push(
                    json!({"role": "user", "parts": [{"functionResponse": {"name": name,
                    "response": {"result": out}}}]}),
                );
            }
            json!({"systemInstruction": {"parts": [{"text": conv.system}]}, "contents": contents,
                "tools": tools(kind)})
        }
        Kind::Converse => {
            let mut msgs = vec![json!({"role": "user", "content": [{"text": conv.prompt}]})];
            for (i, (name, args, out)) in conv.turns.iter().enumerate() {
                msgs.push(
                    json!({"role": "assistant", "content": [{"toolUse": {"toolUseId": id(i),
                    "name": name, "input": args}}]}),
                );
                msgs.push(
                    json!({"role": "user", "content": [{"toolResult": {"toolUseId": id(i),
                    "content": [{"text": out}]}}]}),
                );
            }
            json!({"system": [{"text": conv.system}], "messages": msgs,
                "toolConfig": {"tools": tools(kind)}})
        }
    }
}

/// A Vertex token minted by chaos's token endpoint.
async fn vertex_token(h: &ChaosHandle) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let claims = json!({"iss": "sa@p.iam.gserviceaccount.com",
        "scope": "https://www.googleapis.com/auth/cloud-platform",
        "aud": "http://x/token", "iat": now, "exp": now + 3595});
    let assertion = format!(
        "{}.{}.{}",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"RS256","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(claims.to_string()),
        URL_SAFE_NO_PAD.encode(b"not-checked")
    );
    let v: Value = client()
        .post(format!("http://{}/token", h.addr))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={assertion}"
        ))
        .send()
        .await
        .expect("chaos answers")
        .json()
        .await
        .expect("a token");
    v["access_token"].as_str().expect("a token").to_owned()
}

/// Sends `body` on `kind`'s route for `model` (with `extra` headers).
async fn send_kind(
    h: &ChaosHandle,
    kind: Kind,
    model: &str,
    body: &Value,
    vertex: &str,
    extra: &[(&str, &str)],
) -> Value {
    let base = format!("http://{}", h.addr);
    let rb = match kind {
        Kind::OpenAiChat => client()
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth("k"),
        Kind::Responses => client().post(format!("{base}/v1/responses")).bearer_auth("k"),
        Kind::Anthropic => client()
            .post(format!("{base}/v1/messages"))
            .header("anthropic-version", "2023-06-01")
            .header("x-api-key", "k"),
        Kind::Gemini => client()
            .post(format!("{base}/v1beta/models/{model}:generateContent"))
            .header("x-goog-api-key", "k"),
        Kind::Azure => client()
            .post(format!(
                "{base}/openai/deployments/{model}/chat/completions?api-version=2024-10-21"
            ))
            .header("api-key", "k"),
        Kind::Converse => client()
            .post(format!("{base}/model/{model}/converse"))
            .bearer_auth("bedrock-key"),
        Kind::Invoke => client()
            .post(format!("{base}/model/{model}/invoke"))
            .bearer_auth("bedrock-key"),
        Kind::VertexGemini => client()
            .post(format!(
                "{base}/v1/projects/p/locations/us-east5/publishers/google/models/{model}:generateContent"
            ))
            .bearer_auth(vertex),
        Kind::VertexClaude => client()
            .post(format!(
                "{base}/v1/projects/p/locations/us-east5/publishers/anthropic/models/{model}:rawPredict"
            ))
            .bearer_auth(vertex),
    };
    let rb = extra
        .iter()
        .fold(rb.json(body), |rb, (k, v)| rb.header(*k, *v));
    let r = rb.send().await.expect("chaos answers");
    let status = r.status();
    let v: Value = r.json().await.expect("a JSON answer");
    assert!(status.is_success(), "{kind:?}: {status} {v}");
    v
}

/// What a model answered: a call (name, arguments) or text.
#[derive(Debug, Clone, PartialEq)]
enum Said {
    Call(String, Value),
    Text(String),
}

fn said(kind: Kind, v: &Value) -> Said {
    let args = |s: &Value| serde_json::from_str(s.as_str().expect("arguments")).expect("JSON");
    let name = |s: &Value| s.as_str().expect("a name").to_owned();
    match kind {
        Kind::OpenAiChat | Kind::Azure => {
            let m = &v["choices"][0]["message"];
            match m["tool_calls"][0]["function"].as_object() {
                Some(f) => Said::Call(name(&f["name"]), args(&f["arguments"])),
                None => Said::Text(name(&m["content"])),
            }
        }
        Kind::Anthropic | Kind::Invoke | Kind::VertexClaude => {
            let b = &v["content"][0];
            match b["type"].as_str() {
                Some("tool_use") => Said::Call(name(&b["name"]), b["input"].clone()),
                _ => Said::Text(name(&b["text"])),
            }
        }
        Kind::Responses => {
            let o = &v["output"][0];
            match o["type"].as_str() {
                Some("function_call") => Said::Call(name(&o["name"]), args(&o["arguments"])),
                _ => Said::Text(name(&o["content"][0]["text"])),
            }
        }
        Kind::Gemini | Kind::VertexGemini => {
            let p = &v["candidates"][0]["content"]["parts"][0];
            match p["functionCall"].as_object() {
                Some(c) => Said::Call(name(&c["name"]), c["args"].clone()),
                None => Said::Text(name(&p["text"])),
            }
        }
        Kind::Converse => {
            let b = &v["output"]["message"]["content"][0];
            match b["toolUse"].as_object() {
                Some(u) => Said::Call(name(&u["name"]), u["input"].clone()),
                None => Said::Text(name(&b["text"])),
            }
        }
    }
}

/// Runs a call as an agent would: the shell in `dir`, or the echo.
fn run_tool(dir: &std::path::Path, name: &str, args: &Value) -> String {
    match name {
        "shell" => {
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(args["command"].as_str().expect("a command"))
                .current_dir(dir)
                .output()
                .expect("bash runs");
            assert!(out.status.success(), "{args}: {out:?}");
            String::from_utf8(out.stdout).expect("text")
        }
        "echo" => json!({"echo": args}).to_string(),
        other => panic!("no tool {other}"),
    }
}

/// A system prompt that mentions summarising, as Claude Code's does.
const SYSTEM: &str = "You are an agent. When the conversation grows long, summarize it.";

#[tokio::test]
async fn a_task_is_driven_to_its_checked_answer_across_every_wire() {
    let h = server().await;
    let vertex = vertex_token(&h).await;
    let work = tempfile::tempdir().expect("a work dir");
    let t = Task::new(41, 9).expect("a task");
    let model = t.name();
    let mut conv = Conversation {
        system: SYSTEM.into(),
        prompt: "Run the task.".into(),
        turns: Vec::new(),
    };
    let mut kinds_used = Vec::new();
    let answer = loop {
        // Step n goes out on the n-th kind: each continues what another began.
        let kind = KINDS[conv.turns.len() % KINDS.len()];
        kinds_used.push(kind);
        let v = send_kind(&h, kind, &model, &render(kind, &model, &conv), &vertex, &[]).await;
        match said(kind, &v) {
            Said::Call(name, args) => {
                let out = run_tool(work.path(), &name, &args);
                conv.turns.push((name, args, out));
            }
            Said::Text(text) => break text,
        }
        assert!(conv.turns.len() <= 9, "the task does not end");
    };
    assert_eq!(conv.turns.len(), 9, "one call per step");
    assert_eq!(kinds_used.len(), 10);
    assert_eq!(task::check(&t, &answer), Ok(()), "{answer}");
    let names: Vec<&str> = conv.turns.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "shell", "shell", "echo", "shell", "shell", "echo", "shell", "shell", "echo"
        ]
    );
    // The shell steps' files, written by the real shell.
    for k in [1, 2, 4, 5, 7, 8] {
        let f = work.path().join(t.file(k));
        assert_eq!(
            std::fs::read_to_string(&f).expect("the step's file"),
            format!("{}\n", t.token(k))
        );
    }
}

#[tokio::test]
async fn the_same_conversation_gets_the_same_move_from_every_kind() {
    let h = server().await;
    let vertex = vertex_token(&h).await;
    let t = Task::new(5, 6).expect("a task");
    let model = t.name();
    // Two steps done (their outputs as a shell prints them), the third next.
    let conv = Conversation {
        system: SYSTEM.into(),
        prompt: "Run the task.".into(),
        turns: (1..=2)
            .map(|k| {
                (
                    "shell".to_owned(),
                    json!({"command": t.command(k)}),
                    format!("{}\n", t.marker(k)),
                )
            })
            .collect(),
    };
    let want = Said::Call("echo".into(), json!({"text": t.marker(3)}));
    for kind in KINDS {
        let v = send_kind(&h, kind, &model, &render(kind, &model, &conv), &vertex, &[]).await;
        assert_eq!(said(kind, &v), want, "{kind:?}");
    }
    // A model named `task` alone plays the task its prompt names.
    let named = Conversation {
        prompt: format!("Run {model}."),
        ..conv
    };
    let v = send_kind(
        &h,
        Kind::Anthropic,
        "task",
        &render(Kind::Anthropic, "task", &named),
        &vertex,
        &[],
    )
    .await;
    assert_eq!(said(Kind::Anthropic, &v), want);
}

#[tokio::test]
async fn only_hales_compaction_mark_gets_a_summary() {
    let h = server().await;
    let vertex = vertex_token(&h).await;
    let conv = Conversation {
        system: SYSTEM.into(),
        prompt: "Please summarize the repository layout.".into(),
        turns: Vec::new(),
    };
    for kind in [
        Kind::OpenAiChat,
        Kind::Anthropic,
        Kind::Gemini,
        Kind::Responses,
    ] {
        // The task's model: its first call, whatever the prompt mentions.
        let v = send_kind(
            &h,
            kind,
            "task-3-6",
            &render(kind, "task-3-6", &conv),
            &vertex,
            &[],
        )
        .await;
        assert!(matches!(said(kind, &v), Said::Call(..)), "{kind:?}: {v}");
        // A plain model: the plain answer, not a summary.
        let v = send_kind(
            &h,
            kind,
            "gpt-4o",
            &render(kind, "gpt-4o", &conv),
            &vertex,
            &[],
        )
        .await;
        assert_eq!(said(kind, &v), Said::Text(words(60)), "{kind:?}");
        // hale's compaction request: a summary, task or not.
        for model in ["task-3-6", "gpt-4o"] {
            let mark = [(COMPACTION_HEADER, "1")];
            let v = send_kind(&h, kind, model, &render(kind, model, &conv), &vertex, &mark).await;
            let Said::Text(text) = said(kind, &v) else {
                panic!("{kind:?}: {v}")
            };
            assert!(
                text.starts_with("Summary of 1 messages"),
                "{kind:?}: {text}"
            );
        }
    }
}

#[tokio::test]
async fn a_stream_cut_inside_a_task_call_is_the_same_call_whole_on_the_next_request() {
    let h = server().await;
    let t = Task::new(9, 6).expect("a task");
    let conv = Conversation {
        system: SYSTEM.into(),
        prompt: "Run the task.".into(),
        turns: Vec::new(),
    };
    let model = format!("{}:cut:after=2", t.name());
    let mut body = render(Kind::OpenAiChat, &model, &conv);
    body["stream"] = json!(true);
    let r = send(&h, D::OpenAi, &body).await.expect("chaos answers");
    let (text, broke) = read_all(r).await;
    assert!(broke, "the stream was cut: {text}");
    let args: String = parse_sse(&text)
        .iter()
        .filter_map(|f| {
            f.json()["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(args.len(), 16, "two fragments of the arguments: {args}");
    // The next request (`times` defaults to 1 for `cut`) gets the whole call.
    let r = send(&h, D::OpenAi, &body).await.expect("chaos answers");
    let (text, broke) = read_all(r).await;
    assert!(!broke);
    let whole: String = parse_sse(&text)
        .iter()
        .filter_map(|f| {
            f.json()["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert!(whole.starts_with(&args), "{args} / {whole}");
    assert_eq!(
        serde_json::from_str::<Value>(&whole).expect("JSON"),
        json!({"command": t.command(1)})
    );
}

#[test]
fn the_checker_rejects_a_wrong_digest() {
    let t = Task::new(41, 9).expect("a task");
    let right = t.expected_answer();
    let digest = right
        .rsplit("Digest: ")
        .next()
        .expect("a digest")
        .trim_end_matches('.');
    let wrong = right.replace(digest, &"f".repeat(16));
    assert!(matches!(task::check(&t, &wrong), Err(Wrong::Digest { .. })));
    assert_eq!(task::check(&t, &right), Ok(()));
}

/// A tool call's id is unique across chaos servers, in every dialect: a
/// task failed over from one chaos deployment to another (or continued on
/// one restarted, its counter back at zero) must not be handed a call id
/// it has already completed — the OpenAI Agents SDK stops the run on one
/// (`ModelBehaviorError: Model reused a completed tool call ID`), seen in
/// the chaos hour.
#[tokio::test]
async fn tool_call_ids_never_repeat_across_servers() {
    let (a, b) = (server().await, server().await);
    let mut ids = std::collections::BTreeSet::new();
    for h in [&a, &b] {
        for d in BOTH {
            let r = post(h, d, "tool:name=shell", false).await;
            assert!(r.status().is_success(), "{}", r.status());
            let v: Value = r.json().await.unwrap();
            let id = match d {
                D::OpenAi => v["choices"][0]["message"]["tool_calls"][0]["id"].clone(),
                D::Anthropic => v["content"]
                    .as_array()
                    .and_then(|c| c.iter().find(|b| b["type"] == "tool_use"))
                    .map(|b| b["id"].clone())
                    .unwrap_or(Value::Null),
            };
            let id = id
                .as_str()
                .unwrap_or_else(|| panic!("no call id in {v}"))
                .to_owned();
            assert!(ids.insert(id.clone()), "{id} was issued twice");
        }
    }
}
