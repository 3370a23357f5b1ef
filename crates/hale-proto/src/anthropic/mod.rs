//! The Anthropic Messages dialect (`/v1/messages`).
//!
//! Translates between Anthropic's wire shapes and the canonical types of
//! [`super`]: requests, responses, error bodies and the SSE stream, both ways.
//! Anthropic is stricter than OpenAI about the shape of a conversation, so
//! rendering does the work a caller of the other dialect never had to:
//!
//! - roles must alternate: consecutive messages of the same role (several
//!   tool results, a tool result then user text) merge into one message, and
//!   in a user message the `tool_result` blocks come first, as Anthropic
//!   requires;
//! - there is no system role in `messages`: leading [`Role::System`] messages
//!   join the `system` prompt, later ones (a nudge injected at the end) become
//!   user text in place;
//! - empty or whitespace-only text blocks and whitespace-only stop sequences
//!   are rejected upstream, so they are left out; `temperature` is clamped to
//!   Anthropic's range 0–1;
//! - a final assistant message (the prefill) may not end in whitespace, so a
//!   prefill is sent with its trailing whitespace trimmed ([`effective_prefill`]);
//! - `tool_use.id` must match `^[a-zA-Z0-9_-]+$`: other characters in ids
//!   minted by OpenAI-compatible servers are replaced by `_`, the same way in
//!   the call and in its result, so they still pair up;
//! - `tool_use.input` must be an object, while OpenAI arguments are a string
//!   that may not parse: see [`arguments_to_input`] for the rule that keeps the
//!   raw string so the round trip loses nothing.
//!
//! Parsing turns each `tool_result` block into its own [`Role::Tool`] message
//! (the shape the OpenAI codec produces from `role: tool` messages), and a
//! user message's other blocks into a [`Role::User`] message, in order.
//! Usage sums `input_tokens` with the cache creation and cache read tokens, so
//! `input_tokens` means the whole prompt, as OpenAI's `prompt_tokens` does.
//!
//! Decoding an upstream stream reads the event sent per token — a
//! `content_block_delta` of text or tool-call arguments — as a typed struct
//! (`PlainBlockDelta`) and every other event, or one that is not quite
//! right, through a `Value` tree, which names what is wrong.
//!
//! The codec is split by direction: `request.rs` parses a caller's request
//! and renders one for a provider, `response.rs` does the same for complete
//! responses (with stop reasons and error bodies), `stream.rs` decodes a
//! provider's event stream and encodes one for a caller.
//!
//! [`Role::System`]: super::Role::System
//! [`Role::Tool`]: super::Role::Tool
//! [`Role::User`]: super::Role::User

mod request;
mod response;
mod stream;

pub use super::sse::SseFrame;
pub use request::{
    DEFAULT_MAX_TOKENS, RAW_ARGUMENTS_KEY, arguments_to_input, effective_prefill,
    input_to_arguments, parse_request, platform_body, render_request,
};
pub(crate) use request::{
    image_from_openai, image_from_responses, parse_request_traced, text_block, turn_of,
};
pub use response::{
    parse_response, parse_response_bytes, parse_stop_reason, render_error, render_response,
    stop_reason,
};
pub use stream::{StreamDecoder, StreamEncoder};
