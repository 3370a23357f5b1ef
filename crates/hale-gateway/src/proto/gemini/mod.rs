//! Google's Generative Language API dialect (`kind: gemini`):
//! `models/{model}:generateContent` and `:streamGenerateContent?alt=sse`.
//!
//! Translates between Gemini's wire shapes and the canonical types of
//! [`super`]. Gemini is a provider dialect: hale renders requests for it and
//! reads its answers and streams; the other direction (a Gemini client
//! calling hale) is a later step, of which only the answer side exists here
//! (a complete answer, an error body and a stream encoder, for
//! [`crate::wire`]'s exhaustive matches).
//!
//! What the rendering does that other dialects never had to:
//!
//! - roles are `user` and `model`; the system prompt (and leading system
//!   messages) become `systemInstruction`, later system messages (a nudge)
//!   become user text in place; consecutive turns of the same role merge;
//! - a tool call is a `functionCall` part with `args` an object (the
//!   arguments parsed, or `{"_hale_raw_arguments": …}` when they do not
//!   parse, as for Anthropic); a tool result is a `functionResponse` part
//!   in a user turn, which names the function (looked up from the call it
//!   answers) and carries an object (`{"result": …}` unless the content is
//!   a JSON object; `{"error": …}` for an error result);
//! - tools are `functionDeclarations` with `parametersJsonSchema` (full JSON
//!   Schema: `parameters` takes only an OpenAPI subset and rejects
//!   `additionalProperties`, which strict OpenAI tools always carry);
//! - images with a data URL become `inlineData`, others `fileData`;
//! - `generationConfig` carries `maxOutputTokens`, `temperature`, `topP`,
//!   `stopSequences` (at most [`MAX_STOP_SEQUENCES`]), a JSON answer format
//!   (OpenAI `response_format`, Responses `text.format`: `responseMimeType`
//!   and `responseJsonSchema`) and thinking (Anthropic `thinking.budget_tokens`,
//!   OpenAI `reasoning_effort`, Responses `reasoning.effort`: `thinkingConfig`).
//!
//! Parsing an answer reads the first candidate: text parts, `functionCall`
//! parts (ids minted when Gemini gives none), thought parts kept opaque,
//! `finishReason` and `usageMetadata` (`promptTokenCount` already holds the
//! cached tokens; output is `candidatesTokenCount` plus `thoughtsTokenCount`).
//! Whether an answer is a safety block is hale-core's rule
//! ([`hale_core::gemini::answer_failure`]), asked through [`answer_failure`].

mod request;
mod response;
mod stream;

pub use request::{MAX_STOP_SEQUENCES, carries, render_request};
pub use response::{answer_failure, parse_response, render_error, render_response, stop_reason};
pub use stream::{StreamDecoder, StreamEncoder};
