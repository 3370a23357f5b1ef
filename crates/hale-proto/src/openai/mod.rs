//! The OpenAI Chat Completions dialect (`/v1/chat/completions`, `/v1/models`).
//!
//! Everything here translates between the OpenAI wire shapes and the canonical
//! types of [`super`]: requests (parse from a caller, render for an upstream),
//! responses (parse from an upstream, render for a caller), error bodies, and
//! the SSE stream in both directions. Any OpenAI-compatible server (vLLM, Groq,
//! Ollama, …) speaks this dialect, so parsing is lenient where those servers
//! differ harmlessly (missing `id`, `null` for absent fields, a tool call
//! without `index`) and strict where a wrong guess would change meaning
//! (non-string tool arguments, a tool message without `tool_call_id`). Every
//! error names the JSON path of the offending field.
//!
//! Rules worth knowing:
//! - `system`/`developer` messages before the first other message are lifted
//!   into [`ChatRequest::system`], joined by a blank line; a system message in
//!   the middle of the conversation stays a [`Role::System`] message in place.
//! - Each `role: tool` message becomes one [`Role::Tool`] message with one
//!   [`Part::ToolResult`]; the Anthropic codec produces the same shape.
//! - A caller that spelled the limit `max_completion_tokens` has that key kept
//!   in [`ChatRequest::extra`] as a marker of its spelling; rendering for an
//!   OpenAI upstream then uses `max_completion_tokens` (reasoning models
//!   reject `max_tokens`), always with the value of [`ChatRequest::max_tokens`].
//! - [`StreamEvent::Usage`] is a cumulative snapshot: the latest one wins.
//! - An unknown `finish_reason` string (`eos`, vendor-specific) ends the turn
//!   normally ([`StopReason::EndTurn`]): the provider did declare it finished.
//!
//! The codec is split by direction: `request.rs` parses a caller's request
//! and renders one for a provider, `response.rs` does the same for complete
//! responses (with stop reasons and error bodies), `stream.rs` decodes a
//! provider's SSE stream and encodes one for a caller.
//!
//! [`ChatRequest::system`]: super::ChatRequest::system
//! [`Role::System`]: super::Role::System
//! [`Role::Tool`]: super::Role::Tool
//! [`Part::ToolResult`]: super::Part::ToolResult
//! [`ChatRequest::extra`]: super::ChatRequest::extra
//! [`ChatRequest::max_tokens`]: super::ChatRequest::max_tokens
//! [`StreamEvent::Usage`]: super::StreamEvent::Usage
//! [`StopReason::EndTurn`]: super::StopReason::EndTurn

mod request;
mod response;
mod stream;

pub use super::sse::SseFrame;
pub(crate) use request::{
    ask_for_usage, image_from_anthropic, image_from_responses, parse_request_traced,
    render_message, with_usage,
};
pub use request::{parse_request, render_request};
pub use response::{
    finish_reason, parse_finish_reason, parse_response, parse_response_bytes, render_error,
    render_models, render_response,
};
pub use stream::{StreamDecoder, StreamEncoder};
