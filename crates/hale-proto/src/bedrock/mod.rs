//! AWS Bedrock's Converse dialect (`kind: bedrock` with `api: converse`):
//! `POST /model/{modelId}/converse` and `/converse-stream`.
//!
//! Translates between Converse's JSON and the canonical types of
//! [`super`]. Converse is a provider dialect: hale renders requests for it
//! and reads its answers and stream events; no client speaks it (the answer
//! side here exists for `hale_gateway::wire`'s exhaustive matches). A bedrock
//! provider with `api: invoke` speaks [`super::anthropic`] instead (the
//! Messages body through InvokeModel), so it is not in this folder.
//!
//! The stream's binary event-stream framing is the upstream client's
//! (`hale_gateway::upstream::bedrock`): this folder sees each event's type and its
//! JSON payload.
//!
//! What the rendering does:
//!
//! - roles are `user` and `assistant`, turns alternate (consecutive turns
//!   of one role merge); the system prompt (and leading system messages)
//!   become `system` blocks, later system messages user text in place;
//! - content blocks: `text`, `image` (`{format, source: {bytes}}` from a
//!   base64 data URL or Anthropic base64 source), `toolUse` (`input` an
//!   object), `toolResult` (`content: [{text}]`, `status: "error"`) and the
//!   answer's `reasoningContent` (kept opaque, sent back to Converse);
//! - `inferenceConfig` carries `maxTokens`, `temperature`, `topP`,
//!   `stopSequences`; `toolConfig` the tools (`toolSpec` with
//!   `inputSchema.json`) and the choice (`auto`, `any`, `tool`; Converse
//!   has no `none`: the tools are left out then).

mod request;
mod response;
mod stream;

pub use request::render_request;
pub use response::{parse_response, parse_stop_reason, render_error, render_response, stop_reason};
pub use stream::{StreamDecoder, StreamEncoder};
