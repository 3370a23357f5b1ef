//! What a request is answered with: the deterministic text, prefill
//! continuation, summaries, and the few request facts the faults and the
//! task model ([`crate::task`]) look at.
//!
//! Determinism is the point: the same request always yields the same text
//! (`w0 w1 w2 …`, one word per stream chunk), so a client that resumes a cut
//! stream can align the new output with what it already delivered. Only the
//! fields that matter are deserialised; message content stays a
//! `serde_json::Value` and is walked without copying where possible.

use serde::Deserialize;
use serde_json::Value;

/// The request fields the chaos server reads (both dialects).
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub messages: Vec<Message>,
    /// Anthropic's top-level system prompt (string or text blocks).
    #[serde(default)]
    pub system: Option<Value>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    /// The tools offered, in the dialect's own shape ([`crate::task::offered`]
    /// reads them all; Converse's `toolConfig.tools` is put here).
    #[serde(default)]
    pub tools: Option<Value>,
}

/// One message; only role and content matter.
#[derive(Debug, Deserialize)]
pub struct Message {
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub content: Value,
}

/// OpenAI `stream_options`.
#[derive(Debug, Deserialize, Default)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

impl ChatRequest {
    /// Whether the answer is streamed.
    pub fn is_stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    /// Whether OpenAI's final usage chunk was asked for.
    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }

    /// The output limit the client set, if any.
    pub fn max_output(&self) -> Option<u64> {
        self.max_completion_tokens.or(self.max_tokens)
    }

    /// Characters of every message and the system prompt.
    pub fn message_chars(&self) -> usize {
        let mut n = 0;
        let mut count = |s: &str| n += s.chars().count();
        if let Some(sys) = &self.system {
            visit_text(sys, &mut count);
        }
        for m in &self.messages {
            visit_text(&m.content, &mut count);
        }
        n
    }

    /// The assistant prefill: the last message's text when it is the assistant's.
    pub fn prefill(&self) -> Option<String> {
        let last = self.messages.last()?;
        if last.role != "assistant" {
            return None;
        }
        let mut s = String::new();
        visit_text(&last.content, &mut |t| s.push_str(t));
        Some(s)
    }

    /// Whether the last message is the assistant's (a prefill, even an empty one).
    pub fn ends_with_assistant(&self) -> bool {
        self.messages.last().is_some_and(|m| m.role == "assistant")
    }

    /// The conversation's texts that are neither the assistant's nor the
    /// system prompt's: tool results (wherever the dialect puts them: `tool`
    /// messages, `tool_result` blocks, function responses) and user text.
    /// The task model reads its tools' markers here.
    pub fn observed_texts(&self) -> Vec<String> {
        self.messages
            .iter()
            .filter(|m| !matches!(m.role.as_str(), "assistant" | "system" | "developer"))
            .map(|m| {
                let mut s = String::new();
                visit_text(&m.content, &mut |t| {
                    s.push_str(t);
                    s.push('\n');
                });
                s
            })
            .collect()
    }

    /// Tool results in the conversation: `tool` messages, and `tool_result`
    /// blocks in the others (Anthropic's user turns).
    pub fn tool_results(&self) -> usize {
        self.messages
            .iter()
            .map(|m| match (m.role.as_str(), &m.content) {
                ("tool", _) => 1,
                (_, Value::Array(blocks)) => blocks
                    .iter()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                    .count(),
                (_, _) => 0,
            })
            .sum()
    }

    /// The task the user messages name (`task-<seed>-<steps>`), for a
    /// model named `task` alone.
    pub fn named_task(&self) -> Option<crate::task::Task> {
        self.messages
            .iter()
            .filter(|m| m.role == "user")
            .find_map(|m| {
                let mut found = None;
                visit_text(&m.content, &mut |t| {
                    if found.is_none() {
                        found = crate::task::named_in(t);
                    }
                });
                found
            })
    }

    /// The tools offered, read from any dialect's shape.
    pub fn offered_tools(&self) -> Vec<crate::task::Offered> {
        self.tools
            .as_ref()
            .map(crate::task::offered)
            .unwrap_or_default()
    }

    /// "Summary of N messages: …" — the first few words of each non-system
    /// message. A trailing assistant message is the prefill being continued,
    /// not a message of the conversation: leaving it out keeps the summary
    /// the same text, so a resumed summary continues where it was cut.
    pub fn summary(&self) -> String {
        let conversation = match self.messages.split_last() {
            Some((_, before)) if self.ends_with_assistant() => before,
            Some(_) | None => &self.messages[..],
        };
        let msgs: Vec<&Message> = conversation
            .iter()
            .filter(|m| m.role != "system" && m.role != "developer")
            .collect();
        let mut out = format!("Summary of {} messages:", msgs.len());
        for (i, m) in msgs.iter().take(SUMMARY_MAX_MESSAGES).enumerate() {
            let mut text = String::new();
            visit_text(&m.content, &mut |t| {
                text.push_str(t);
                text.push(' ');
            });
            let words: Vec<&str> = text.split_whitespace().take(SUMMARY_WORDS).collect();
            if i > 0 {
                out.push(';');
            }
            out.push(' ');
            out.push_str(&m.role);
            out.push(':');
            for w in words {
                out.push(' ');
                out.push_str(w);
            }
        }
        if msgs.len() > SUMMARY_MAX_MESSAGES {
            out.push_str("; …");
        }
        out
    }
}

/// Words taken from each message in a summary.
pub const SUMMARY_WORDS: usize = 4;
/// Messages listed in a summary; the rest are elided.
pub const SUMMARY_MAX_MESSAGES: usize = 32;

/// Calls `f` with every piece of text in a message content: a string, text
/// blocks, and the content of tool results.
pub fn visit_text(v: &Value, f: &mut dyn FnMut(&str)) {
    match v {
        Value::String(s) => f(s),
        Value::Array(items) => {
            for item in items {
                visit_text(item, f);
            }
        }
        Value::Object(o) => {
            if let Some(Value::String(t)) = o.get("text") {
                f(t);
            }
            if let Some(c) = o.get("content") {
                visit_text(c, f);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// Every string inside a tool result's JSON (a Gemini `functionResponse`'s
/// `response`, a Bedrock `toolResult`'s `content`), one per line, as the
/// model would read them: never the serialized JSON, whose escapes (`\n`
/// before a marker) would hide a marker's word boundary.
pub fn json_text(v: &Value) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                out.push_str(s);
                out.push('\n');
            }
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            Value::Object(o) => o.values().for_each(|i| walk(i, out)),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    let mut out = String::new();
    walk(v, &mut out);
    out
}

/// The deterministic answer: `n` words `w0 w1 …`, one chunk per word, every
/// chunk after the first carrying its leading space.
pub fn word_chunks(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            if i == 0 {
                "w0".to_owned()
            } else {
                format!(" w{i}")
            }
        })
        .collect()
}

/// Splits a text into word chunks the same way (`"a b"` → `["a", " b"]`).
pub fn text_chunks(text: &str) -> Vec<String> {
    text.split_whitespace()
        .enumerate()
        .map(|(i, w)| {
            if i == 0 {
                w.to_owned()
            } else {
                format!(" {w}")
            }
        })
        .collect()
}

/// The chunks left after a prefill: when the prefill is a prefix of the full
/// text, only the rest (split at the chunk boundaries, a partly covered chunk
/// keeping its tail); otherwise the full text.
pub fn continue_after(chunks: Vec<String>, prefill: &str) -> Vec<String> {
    if prefill.is_empty() {
        return chunks;
    }
    let total: usize = chunks.iter().map(String::len).sum();
    let mut full = String::with_capacity(total);
    for c in &chunks {
        full.push_str(c);
    }
    if !full.starts_with(prefill) {
        return chunks;
    }
    let mut skip = prefill.len();
    let mut out = Vec::with_capacity(chunks.len());
    for c in chunks {
        if skip >= c.len() {
            skip -= c.len();
        } else if skip > 0 {
            out.push(c[skip..].to_owned());
            skip = 0;
        } else {
            out.push(c);
        }
    }
    out
}

/// Why an answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// Natural end.
    Stop,
    /// Cut by the client's `max_tokens`.
    Length,
    /// A tool call.
    ToolUse,
}

/// What the answer carries.
#[derive(Debug, Clone)]
pub enum Content {
    /// Text, as stream chunks.
    Text(Vec<String>),
    /// One tool call; `arguments` is compact JSON, `pieces` its stream fragments.
    Tool {
        id: String,
        name: String,
        arguments: String,
        pieces: Vec<String>,
    },
}

/// A finished answer, ready for either dialect.
#[derive(Debug, Clone)]
pub struct Answer {
    pub content: Content,
    pub finish: Finish,
    pub output_tokens: u64,
}

impl Answer {
    /// A text answer, cut to `max_output` chunks when the client set a limit.
    pub fn text(mut chunks: Vec<String>, max_output: Option<u64>) -> Self {
        let mut finish = Finish::Stop;
        if let Some(max) = max_output {
            let max = usize::try_from(max).unwrap_or(usize::MAX);
            if chunks.len() > max {
                chunks.truncate(max);
                finish = Finish::Length;
            }
        }
        let output_tokens = chunks.len() as u64;
        Answer {
            content: Content::Text(chunks),
            finish,
            output_tokens,
        }
    }

    /// A tool-call answer.
    pub fn tool(id: String, name: &str, arguments: &str) -> Self {
        let pieces = split_pieces(arguments, TOOL_ARG_PIECE);
        let output_tokens = (arguments.len() as u64 / 4).max(1);
        Answer {
            content: Content::Tool {
                id,
                name: name.to_owned(),
                arguments: arguments.to_owned(),
                pieces,
            },
            finish: Finish::ToolUse,
            output_tokens,
        }
    }

    /// The stream pieces (text chunks or argument fragments).
    pub fn pieces(&self) -> &[String] {
        match &self.content {
            Content::Text(c) => c,
            Content::Tool { pieces, .. } => pieces,
        }
    }

    /// The whole text (empty for a tool call).
    pub fn full_text(&self) -> String {
        match &self.content {
            Content::Text(c) => c.concat(),
            Content::Tool { .. } => String::new(),
        }
    }
}

/// Bytes per streamed fragment of tool arguments.
pub const TOOL_ARG_PIECE: usize = 8;

fn split_pieces(s: &str, size: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for ch in s.chars() {
        cur.push(ch);
        if cur.len() >= size {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_deterministic() {
        assert_eq!(word_chunks(3), ["w0", " w1", " w2"]);
        assert_eq!(word_chunks(3).concat(), "w0 w1 w2");
    }

    #[test]
    fn prefill_continues_at_chunk_boundaries() {
        let c = || word_chunks(5);
        assert_eq!(continue_after(c(), "w0 w1"), [" w2", " w3", " w4"]);
        assert_eq!(continue_after(c(), "w0 w1 "), ["w2", " w3", " w4"]);
        assert_eq!(continue_after(c(), "w0 w"), ["1", " w2", " w3", " w4"]);
        assert_eq!(continue_after(c(), "nope"), c());
        assert!(continue_after(c(), "w0 w1 w2 w3 w4").is_empty());
    }

    fn request(body: serde_json::Value) -> ChatRequest {
        serde_json::from_value(body).expect("a chat request")
    }

    #[test]
    fn a_summary_resumed_with_a_prefill_continues_the_same_text() {
        let asked = serde_json::json!({"role": "user", "content": "Please summarize: a b c d e"});
        let whole = request(serde_json::json!({"messages": [asked]})).summary();
        assert_eq!(whole, "Summary of 1 messages: user: Please summarize: a b");
        let cut = &whole[..20];
        let resumed = request(serde_json::json!({"messages": [
            asked, {"role": "assistant", "content": cut}
        ]}));
        assert_eq!(resumed.summary(), whole, "the prefill is not summarised");
        let rest = continue_after(text_chunks(&resumed.summary()), cut).concat();
        assert_eq!(format!("{cut}{rest}"), whole);
    }

    #[test]
    fn tool_pieces_rejoin() {
        let a = Answer::tool("id".into(), "t", r#"{"path":"a.rs","x":"é"}"#);
        assert_eq!(a.pieces().concat(), r#"{"path":"a.rs","x":"é"}"#);
    }
}
