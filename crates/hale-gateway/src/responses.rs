//! Responses API conversations hale keeps: a turn's `previous_response_id`
//! read back from the store, and the answer kept for the next turn.
//!
//! Why hale keeps them: a provider holds only the responses it answered, so
//! a conversation continued with `previous_response_id` could not fail over
//! (another kind, another OpenAI account) nor come back after a turn another
//! kind served. hale keeps each Responses answer with its own turn's input
//! and the id it continued (`hale_store::ResponseRecord`, in the turn's
//! commit), and before a turn ([`prepare`]) walks the chain back into the
//! whole conversation. Each attempt then asks `hale_core::responses::link`:
//! the deployment that answered the previous response gets the client's
//! request with the id (the provider's own), any other the expanded
//! conversation, named in the attempt's `changes`.
//!
//! Who may use an id is `hale_core::responses::may_continue`: an id kept
//! for an agent the caller may not act as — or, for an agent-scoped key,
//! an id hale does not keep — is refused here with OpenAI's 404, before
//! any provider is called, so a tenant never continues a conversation the
//! provider holds under the operator's key for someone else.
//!
//! This module reads the store and builds requests; it holds no state of
//! its own across turns: a turn carries its [`Continuation`].

use std::sync::Arc;

use axum::http::StatusCode;
use hale_core::responses::{self as rules, Continue, Link, Previous};
use hale_store::{ResponseRecord, Store, StoredResponse};
use serde_json::Value;

use crate::error::HaleError;
use hale_proto::{ChatRequest, Dialect, responses as codec};

/// What a Responses turn carries about its conversation.
#[derive(Debug, Clone, Default)]
pub struct Continuation {
    /// The `previous_response_id` the client sent.
    pub previous: Option<String>,
    /// What hale keeps of it: (provider that answered it, its id there is
    /// known); `None`: hale does not keep it (and the caller may act as
    /// every agent: `hale_core::responses::may_continue` forwards it).
    pub holder: Option<(String, bool)>,
    /// The chain is kept whole and within `CHAIN_MAX`: the turn's request
    /// is the expanded conversation.
    pub expandable: bool,
    /// The request for the deployment that holds the previous response: the
    /// client's own (with the provider's id when hale gave the client
    /// another); `None`: the turn's request itself.
    pub as_sent: Option<Arc<ChatRequest>>,
    /// This turn's own input items, as sent.
    pub own_input: Vec<Value>,
    /// `store` was not `false`: the answer is kept.
    pub store: bool,
    /// hale changed the expanded conversation (compaction, a nudge).
    pub changed: bool,
    /// A stream's: the serving provider's id of the response, when a
    /// Responses provider served it whole (no resume).
    pub upstream_id: Option<String>,
}

impl Continuation {
    fn previous_state(&self) -> Option<Previous<'_>> {
        self.previous.as_ref()?;
        Some(match &self.holder {
            None => Previous::Unknown,
            Some((provider, provider_id)) => Previous::Kept {
                provider,
                provider_id: *provider_id,
                expandable: self.expandable,
            },
        })
    }

    /// How an attempt on a deployment of `provider` carries the
    /// conversation (`responses`: it speaks the Responses API).
    pub fn link(&self, provider: &str, responses: bool) -> Link {
        match self.previous_state() {
            None => Link::Expand,
            Some(p) => rules::link(p, provider, responses, self.changed),
        }
    }

    /// The request of an attempt that passes the conversation through.
    pub fn passthrough(&self) -> Option<Arc<ChatRequest>> {
        self.as_sent.clone()
    }
}

/// OpenAI's 404 for a `previous_response_id` that no deployment of the turn
/// can hold.
pub fn previous_not_found(id: &str) -> HaleError {
    let mut e = HaleError::new(
        StatusCode::NOT_FOUND,
        hale_core::classify::PREVIOUS_RESPONSE_NOT_FOUND,
        format!("Previous response with id '{id}' not found."),
    );
    e.hale = serde_json::json!({"param": "previous_response_id"});
    e
}

/// Reads a Responses request's conversation: with a `previous_response_id`
/// hale keeps (and `allowed` may see), the request becomes the expanded
/// conversation and the client's own is kept for the deployment that holds
/// the previous response; an id `allowed` may not use
/// (`hale_core::responses::may_continue`) is [`previous_not_found`]. Other
/// dialects' requests are returned as they are.
pub async fn prepare(
    store: &Store,
    allowed: Option<&[String]>,
    req: ChatRequest,
) -> Result<(ChatRequest, Option<Continuation>), HaleError> {
    let Some(origin) = req
        .origin
        .clone()
        .filter(|o| o.dialect == Dialect::Responses)
    else {
        return Ok((req, None));
    };
    let body = &origin.body;
    let mut c = Continuation {
        own_input: codec::own_input(body),
        store: codec::stores(body),
        ..Continuation::default()
    };
    let Some(prev) = codec::previous_response_id(body) else {
        return Ok((req, Some(c)));
    };
    c.previous = Some(prev.to_owned());
    let chain = store
        .response_chain(prev, rules::CHAIN_MAX)
        .await
        .map_err(|e| {
            HaleError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                format!("cannot read previous_response_id {prev}, so the call was not made: {e}"),
            )
        })?;
    // Who may use the id (hale_core::responses::may_continue): another
    // agent's, or for an agent-scoped key one hale does not keep, is the
    // 404 of an id that does not exist, and no provider is called.
    let last = chain.last().filter(|r| r.id == prev);
    let last = match (
        rules::may_continue(allowed, last.map(|r| r.agent.as_str())),
        last,
    ) {
        (Continue::Kept, Some(last)) => last,
        (Continue::Forward, _) => return Ok((req, Some(c))),
        (Continue::Refuse | Continue::Kept, _) => return Err(previous_not_found(prev)),
    };
    c.holder = Some((last.provider.clone(), last.provider_id.is_some()));
    c.expandable = chain.first().is_some_and(|r| r.previous_id.is_none())
        && chain.iter().all(|r| rules::may_read(allowed, &r.agent));
    // The holder gets the client's request, naming the response by the
    // provider's own id.
    let mut own = req;
    if let Some(pid) = last.provider_id.as_deref().filter(|pid| *pid != prev) {
        let mut b = body.clone();
        b.insert("previous_response_id".into(), Value::String(pid.to_owned()));
        own = hale_proto::parse_rewritten(
            Dialect::Responses,
            Value::Object(b),
            &origin,
            "previous_response_id: the provider's own id".into(),
        )
        .map_err(|e| HaleError::bad_request(format!("invalid request: {e}")))?;
    }
    if !c.expandable {
        return Ok((own, Some(c)));
    }
    let mut earlier = Vec::new();
    let mut reasoning = 0;
    for r in &chain {
        reasoning += codec::turn_items(&r.input, &r.response, &mut earlier);
    }
    let n = earlier.len();
    let note = match reasoning {
        0 => format!("expanded: previous_response_id ({n} items)"),
        k => format!(
            "expanded: previous_response_id ({n} items; {k} earlier reasoning items left out)"
        ),
    };
    let expanded = hale_proto::parse_rewritten(
        Dialect::Responses,
        codec::expanded_body(body, earlier),
        &origin,
        note,
    )
    .map_err(|e| HaleError::bad_request(format!("invalid request: {e}")))?;
    c.as_sent = Some(Arc::new(own));
    Ok((expanded, Some(c)))
}

/// The response object a client received: a JSON body, or the `response`
/// of a stream's last `response.completed` / `response.incomplete` event.
pub fn response_object(stored: &StoredResponse) -> Option<Value> {
    if stored.content_type.starts_with("text/event-stream") {
        let text = std::str::from_utf8(&stored.body).ok()?;
        text.lines()
            .rev()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|v| {
                matches!(
                    v.get("type").and_then(Value::as_str),
                    Some("response.completed" | "response.incomplete")
                )
            })
            .and_then(|v| v.get("response").cloned())
    } else {
        serde_json::from_slice::<Value>(&stored.body)
            .ok()
            .filter(|v| v.get("object").and_then(Value::as_str) == Some("response"))
    }
}

/// Who answered a turn, for its kept response.
pub struct Served<'a> {
    pub turn_id: &'a str,
    pub agent: &'a str,
    pub provider: &'a str,
    pub model: &'a str,
    /// The provider speaks the Responses API.
    pub responses: bool,
    pub now_ms: u64,
}

/// The record to keep of a Responses turn's answer: `None` with
/// `store: false` or when the answer holds no response object.
pub fn record(
    c: &Continuation,
    served: &Served<'_>,
    stored: &StoredResponse,
) -> Option<ResponseRecord> {
    if !c.store {
        return None;
    }
    let response = response_object(stored)?;
    let id = response.get("id").and_then(Value::as_str)?.to_owned();
    let streamed = stored.content_type.starts_with("text/event-stream");
    // A complete answer of a Responses provider carries its id (as sent, or
    // rendered from it); a stream carries hale's, the provider's is beside it.
    let provider_id = match (served.responses, streamed) {
        (false, _) => None,
        (true, false) => Some(id.clone()),
        (true, true) => c.upstream_id.clone(),
    };
    Some(ResponseRecord {
        id,
        agent: served.agent.to_owned(),
        turn_id: served.turn_id.to_owned(),
        created_ms: served.now_ms,
        previous_id: c.previous.clone(),
        provider: served.provider.to_owned(),
        model: served.model.to_owned(),
        provider_id,
        input: Value::Array(c.own_input.clone()),
        response,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(content_type: &str, body: &str) -> StoredResponse {
        StoredResponse {
            status: 200,
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
            content_type: content_type.into(),
        }
    }

    #[test]
    fn the_response_object_of_a_body_or_a_stream() {
        let body = json!({"id": "resp_1", "object": "response", "output": []}).to_string();
        assert_eq!(
            response_object(&stored("application/json", &body)).unwrap()["id"],
            "resp_1"
        );
        let sse = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_h\",\"status\":\"in_progress\"}}\n\n\
                   event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_h\",\"status\":\"completed\"}}\n\n";
        let r = response_object(&stored("text/event-stream", sse)).unwrap();
        assert_eq!(r["status"], "completed");
        assert!(response_object(&stored("application/json", "{\"error\":{}}")).is_none());
    }

    #[test]
    fn record_keeps_the_provider_id_only_when_a_responses_provider_answered_whole() {
        let c = Continuation {
            store: true,
            previous: Some("resp_0".into()),
            own_input: vec![json!({"role": "user", "content": "q"})],
            upstream_id: Some("resp_up".into()),
            ..Continuation::default()
        };
        let body = json!({"id": "resp_1", "object": "response", "output": []}).to_string();
        let served = |responses| Served {
            turn_id: "t",
            agent: "a",
            provider: "p",
            model: "m",
            responses,
            now_ms: 5,
        };
        let complete = stored("application/json", &body);
        let r = record(&c, &served(true), &complete).unwrap();
        assert_eq!(r.provider_id.as_deref(), Some("resp_1"));
        assert_eq!(r.previous_id.as_deref(), Some("resp_0"));
        assert_eq!(r.input, json!([{"role": "user", "content": "q"}]));
        assert_eq!(
            record(&c, &served(false), &complete).unwrap().provider_id,
            None
        );
        let sse = "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_h\",\"object\":\"response\"}}\n\n";
        let r = record(&c, &served(true), &stored("text/event-stream", sse)).unwrap();
        assert_eq!(
            (r.id.as_str(), r.provider_id.as_deref()),
            ("resp_h", Some("resp_up"))
        );
        let off = Continuation {
            store: false,
            ..c.clone()
        };
        assert!(record(&off, &served(true), &complete).is_none());
    }
}
