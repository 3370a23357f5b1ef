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
/// output items of the response it got. Output items hale or the provider
/// numbered keep no `id` (optional in input, and an id a provider did not
/// issue may be refused), except reasoning items, whose id goes with their
/// encrypted content.
pub fn turn_items(input: &Value, response: &Value, out: &mut Vec<Value>) {
    if let Value::Array(items) = input {
        out.extend(items.iter().cloned());
    }
    if let Some(Value::Array(items)) = response.get("output") {
        for item in items {
            let mut item = item.clone();
            let ty = item.get("type").and_then(Value::as_str).unwrap_or("");
            if ty != "reasoning"
                && let Some(o) = item.as_object_mut()
            {
                o.remove("id");
            }
            out.push(item);
        }
    }
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
        turn_items(
            &json!([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q1"}]}]),
            &json!({"id": "resp_1", "output": [
                {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAA"},
                {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "a1", "annotations": []}]}
            ]}),
            &mut earlier,
        );
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
        assert_eq!(
            kinds,
            [
                "message",
                "reasoning",
                "message",
                "message",
                "function_call",
                "function_call_output"
            ]
        );
        // Reasoning keeps its id (its encrypted content goes with it); others lose theirs.
        assert_eq!(input[1]["id"], "rs_1");
        assert!(input[2].get("id").is_none() && input[4].get("id").is_none());
        assert_eq!(input[2]["content"][0]["text"], "a1");
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
