//! The OpenAI Responses dialect (`/v1/responses`): the API Codex, the
//! OpenAI Agents SDK and the AI SDK speak.
//!
//! Translates between the Responses wire shapes and the canonical types of
//! [`super`]: requests (parse from a caller, render for an upstream),
//! `response` objects (parse from an upstream, render for a caller), error
//! bodies, and the event stream in both directions. Like the other dialects
//! it depends on the canonical model and on `json.rs` only.
//!
//! Rules worth knowing:
//! - `instructions` and leading `system`/`developer` input messages become
//!   [`ChatRequest::system`] (in that order, joined by a blank line).
//! - Consecutive assistant-side input items (an assistant message, function
//!   and custom tool calls, reasoning, hosted tools' calls) fold into one
//!   canonical assistant message, as Chat Completions needs its tool calls
//!   in one message; each `function_call_output` is one [`Role::Tool`]
//!   message.
//! - `custom` (free-form) tools are canonical functions taking
//!   `{"input": string}`; the request's `extra` names them
//!   ([`CUSTOM_TOOLS_KEY`]) so a Responses provider or caller gets
//!   `custom` tools and `custom_tool_call` items back. Hosted tools
//!   (`web_search`, `file_search`, `mcp`, …) have no canonical form: kept in
//!   `extra` ([`HOSTED_TOOLS_KEY`]) for a Responses provider only.
//! - Reasoning items (with `encrypted_content`), hosted tools' calls and
//!   input images/files are opaque parts of this dialect: relayed as sent
//!   to a Responses provider or caller, dropped (and named in `changes`)
//!   elsewhere, images excepted (they have a form in every dialect).
//! - `status: incomplete` with `max_output_tokens` is
//!   [`StopReason::MaxTokens`]; `failed`, `response.failed` and `error`
//!   events are errors carrying the provider's code and message
//!   ([`error_body`] gives them in the shape hale's classifier reads).
//! - Usage: `input_tokens` already counts the cached tokens and
//!   `output_tokens` the reasoning tokens, as the canonical counts mean.
//!
//! - `previous_response_id`: `chain.rs` holds a turn's own input items and
//!   the body that carries the whole conversation instead (the pipeline
//!   expands a chain hale keeps for a deployment that does not hold it).
//!
//! The codec is split by direction: `request.rs` parses a caller's request
//! and renders one for a provider, `response.rs` does the same for complete
//! responses (with the status mapping and error bodies), `stream.rs`
//! decodes a provider's event stream and encodes one for a caller.
//!
//! [`ChatRequest::system`]: super::ChatRequest::system
//! [`Role::Tool`]: super::Role::Tool
//! [`StopReason::MaxTokens`]: super::StopReason::MaxTokens

mod chain;
mod request;
mod response;
mod stream;

use super::canonical::Dialect;

/// The [`Dialect`] of this codec's requests and opaque parts.
pub(crate) const DIALECT: Dialect = Dialect::Responses;

pub use super::sse::SseFrame;
pub use chain::{expanded_body, own_input, previous_response_id, stores, turn_items};
pub use request::{
    CUSTOM_TOOLS_KEY, HOSTED_TOOLS_KEY, arguments_to_custom_input, custom_input_to_arguments,
    custom_schema, custom_tools, parse_request, render_request,
};
pub(crate) use request::{continues_run, parse_request_traced, render_message};
pub use response::{
    parse_response, parse_status, render_error, render_response, render_response_with, response_id,
    status,
};
pub use stream::{StreamDecoder, StreamEncoder, error_body};
