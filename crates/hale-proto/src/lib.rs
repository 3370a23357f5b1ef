//! hale-proto: one canonical chat model, and translation to and from the wire
//! dialects. Pure, as hale-core is: bytes and JSON in, bytes and JSON out — no
//! runtime, sockets or files (`.ci/run` checks its dependencies). The gateway
//! carries what it translates over HTTP; the fuzz targets and the golden
//! tests (`tests/`, and the fixtures beside each dialect) drive it alone. A
//! crate of its own so that it compiles beside hale-store and hale-events
//! rather than inside hale-gateway (BENCHMARKS.md, "First build").
//!
//! Agents speak OpenAI Chat Completions (`/v1/chat/completions`), Anthropic
//! Messages (`/v1/messages`), OpenAI Responses (`/v1/responses`) or Gemini
//! (`/v1beta/models/{model}:generateContent`);
//! providers speak any of them too. Rather than translate dialect to dialect, every
//! request, response and stream event passes through the canonical types here,
//! so a chain can mix provider kinds and the agent sees its own dialect
//! whoever served it. [`openai`], [`anthropic`], [`responses`] and
//! [`gemini`] (Google's Generative Language API) hold the codecs; each is
//! spoken both ways, by clients calling hale and by providers hale calls.
//! [`bedrock`] (AWS Bedrock's Converse API) is a provider dialect only,
//! rendered to and read from, not spoken to clients.
//!
//! The canonical model is what hale reasons about, not what it sends when it
//! need not translate: a request parsed by [`parse_request`] keeps the client's
//! JSON (its [`Origin`]), and [`fidelity::render_for`] sends a provider of the
//! same dialect that JSON with only what hale changed patched in.
//!
//! The files, each depending only on those listed before it:
//!
//! - `canonical.rs`: the canonical types ([`ChatRequest`], [`ChatResponse`],
//!   [`Message`], [`StreamEvent`], …), with what a request keeps of what its
//!   client sent ([`Origin`], [`fidelity::Trace`]);
//! - `json.rs`: the small JSON readers every codec parses with (each error
//!   names the JSON path of the offending field);
//! - `sse.rs`: the server-sent event an encoder writes ([`openai::SseFrame`]);
//! - `scan.rs`: a hand-written JSON reader for the stream decoders' per-token
//!   fast paths (anything it does not understand goes to serde);
//! - [`openai`], [`anthropic`], [`responses`] and [`gemini`]: one folder per wire dialect, each split
//!   into `request.rs` (parse and render requests), `response.rs` (parse and
//!   render responses, stop reasons, error bodies) and `stream.rs` (decode a
//!   provider's stream, encode a caller's). A dialect depends on the
//!   canonical model and on `json.rs`, never on another dialect;
//! - [`fidelity`]: rendering a request for a provider of any dialect,
//!   patching the client's JSON when the dialects match;
//! - `parse.rs`: reading a client's request body in its dialect
//!   ([`parse_request`], [`parse_sent`]).

pub mod anthropic;
pub mod bedrock;
mod canonical;
pub mod fidelity;
pub mod gemini;
mod json;
mod layout;
pub mod openai;
mod parse;
pub mod responses;
mod scan;
mod sse;

pub use canonical::fingerprint_hasher;
pub use canonical::{
    AnswerError, ChatRequest, ChatResponse, Dialect, Message, Origin, Part, ProtoError, Role,
    StopReason, StreamEvent, Tool, Usage,
};
pub use fidelity::{Outgoing, Prepared, prepare, render_for};
pub use parse::{
    Sent, parse_gemini_sent, parse_request, parse_request_sent, parse_rewritten, parse_sent,
};
