//! Google's Generative Language API dialect (`kind: gemini`):
//! `models/{model}:generateContent` and `:streamGenerateContent?alt=sse`.
//!
//! Translates between Gemini's wire shapes and the canonical types of
//! [`super`], both ways: hale renders requests for a `kind: gemini`
//! provider and reads its answers and streams, and it reads a Gemini
//! client's request (Gemini CLI, the `google-genai` SDKs) and answers it in
//! Gemini's shape — a complete answer, a stream, an error in Google's
//! `{"error": {"code", "message", "status"}}`.
//!
//! Reading a client's request ([`parse_request_traced`]; the model and
//! whether to stream are the URL's): `contents` (roles `user` and `model`),
//! text, `functionCall` (ids minted, `gemini_call_{n}`, when the client
//! gives none; a `functionResponse` without an id answers the first
//! unanswered call of its name), images in `inlineData` / `fileData` (as
//! Anthropic-form images, which every dialect renders), thought parts and
//! every other part kept opaque (so a Gemini provider gets them back,
//! `thoughtSignature` included), `systemInstruction`,
//! `tools[].functionDeclarations` (`parametersJsonSchema`, or `parameters`
//! in Google's OpenAPI subset turned into JSON Schema), `toolConfig`, and
//! `generationConfig`'s `maxOutputTokens`, `temperature`, `topP`,
//! `stopSequences` (`candidateCount` above 1 is refused). The rest
//! (`safetySettings`, `cachedContent`, the rest of `generationConfig`) is
//! kept for a Gemini provider and named dropped for any other.
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

pub use request::{
    GENERATION_MAPPED, MAX_STOP_SEQUENCES, MINTED_CALL_ID, carries, openapi_to_json_schema,
    parse_request, render_request,
};
pub(crate) use request::{parse_request_traced, render_message, tool_names};
pub use response::{
    answer_failure, parse_response, render_count, render_error, render_model, render_models,
    render_response, stop_reason,
};
pub use stream::{StreamDecoder, StreamEncoder};
