//! A `previous_response_id` conversation as input items: what a turn's own
//! input is, and the request body that carries the whole conversation when
//! the deployment serving the turn does not hold the previous response.
//!
//! The expansion is the API's own rule for continuing by hand: each earlier
//! turn's input items, then that turn's output items, in order, then this
//! turn's input; `previous_response_id` is left out. `instructions` are not
//! carried over (the API does not carry them across `previous_response_id`
//! either): the request's own apply.

use serde_json::{Map, Value, json};

/// This turn's input items as the client sent them: a string `input` is one
/// user message item; no `input`, none.
pub fn own_input(body: &Map<String, Value>) -> Vec<Value> {
    match body.get("input") {
        Some(Value::String(s)) => vec![json!({
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": s}],
        })],
        Some(Value::Array(items)) => items.clone(),
        Some(Value::Null | Value::Bool(_) | Value::Number(_) | Value::Object(_)) | None => {
            Vec::new()
        }
    }
}

/// One earlier turn's part of the conversation: its input items, then the
/// output items of the response it got. Output items keep no `id`
/// (optional in input, and an id another provider did not issue may be
/// refused); reasoning items are left out: they are the answering
/// provider's own (a stored item's id, or content encrypted for its
/// account), which another deployment cannot read. Returns how many
/// reasoning items were left out.
pub fn turn_items(input: &Value, response: &Value, out: &mut Vec<Value>) -> usize {
    if let Value::Array(items) = input {
        out.extend(items.iter().cloned());
    }
    let mut left_out = 0;
    if let Some(Value::Array(items)) = response.get("output") {
        for item in items {
            if item.get("type").and_then(Value::as_str) == Some("reasoning") {
                left_out += 1;
                continue;
            }
            let mut item = item.clone();
            if let Some(o) = item.as_object_mut() {
                o.remove("id");
            }
            out.push(item);
        }
    }
    left_out
}

/// The client's body carrying the whole conversation: `earlier` (from
/// [`turn_items`]) then its own input, without `previous_response_id`.
pub fn expanded_body(body: &Map<String, Value>, earlier: Vec<Value>) -> Value {
    let mut b = body.clone();
    b.remove("previous_response_id");
    let mut input = earlier;
    input.extend(own_input(body));
    b.insert("input".into(), Value::Array(input));
    Value::Object(b)
}

/// The `previous_response_id` of a Responses request body, when it names one.
pub fn previous_response_id(body: &Map<String, Value>) -> Option<&str> {
    body.get("previous_response_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Whether the client asked the API to keep the response (`store`, true
/// unless it is `false`, as the API's default is).
pub fn stores(body: &Map<String, Value>) -> bool {
    body.get("store") != Some(&Value::Bool(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn own_input_table() {
        let table = [
            (json!({"input": "hi"}), 1usize),
            (
                json!({"input": [{"role": "user", "content": "a"}, {"type": "function_call_output", "call_id": "c", "output": "x"}]}),
                2,
            ),
            (json!({}), 0),
            (json!({"input": 3}), 0),
        ];
        for (body, n) in table {
            assert_eq!(own_input(&obj(body.clone())).len(), n, "{body}");
        }
        assert_eq!(
            own_input(&obj(json!({"input": "hi"}))),
            vec![
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]})
            ]
        );
    }

    #[test]
    fn expansion_is_earlier_inputs_and_outputs_in_order_then_this_turn() {
        let mut earlier = Vec::new();
        let left_out = turn_items(
            &json!([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q1"}]}]),
            &json!({"id": "resp_1", "output": [
                {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAA"},
                {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "a1", "annotations": []}]}
            ]}),
            &mut earlier,
        );
        assert_eq!(left_out, 1);
        turn_items(
            &json!([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q2"}]}]),
            &json!({"output": [{"id": "fc_2", "type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"}]}),
            &mut earlier,
        );
        let body = obj(json!({
            "model": "m", "instructions": "be brief", "previous_response_id": "resp_2",
            "input": [{"type": "function_call_output", "call_id": "c2", "output": "done"}],
            "store": true
        }));
        let out = expanded_body(&body, earlier);
        assert!(out.get("previous_response_id").is_none());
        assert_eq!(out["instructions"], "be brief");
        assert_eq!(out["store"], true);
        let input = out["input"].as_array().unwrap();
        let kinds: Vec<&str> = input
            .iter()
            .map(|i| i["type"].as_str().unwrap_or(""))
            .collect();
        // The earlier reasoning item is the first provider's own: left out.
        assert_eq!(
            kinds,
            [
                "message",
                "message",
                "message",
                "function_call",
                "function_call_output"
            ]
        );
        assert!(input[1].get("id").is_none() && input[3].get("id").is_none());
        assert_eq!(input[1]["content"][0]["text"], "a1");
        // The expanded body parses as a Responses request: the whole conversation.
        let req = super::super::parse_request(&out).unwrap();
        assert_eq!(req.messages.len(), 5, "{:?}", req.messages);
    }

    #[test]
    fn previous_and_store_read_the_body() {
        assert_eq!(
            previous_response_id(&obj(json!({"previous_response_id": "resp_1"}))),
            Some("resp_1")
        );
        assert_eq!(
            previous_response_id(&obj(json!({"previous_response_id": ""}))),
            None
        );
        assert_eq!(
            previous_response_id(&obj(json!({"previous_response_id": null}))),
            None
        );
        assert!(stores(&obj(json!({}))));
        assert!(stores(&obj(json!({"store": true}))));
        assert!(!stores(&obj(json!({"store": false}))));
    }
}
