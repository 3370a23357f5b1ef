//! Issue 42, items 1 and 5: what one tenant may reach through the real
//! `hale serve`, with an admin key and two agent keys (alice, bob), its
//! providers played by `hale chaos` on loopback.
//!
//! - A provider's own response id, handed to bob, cannot be continued by
//!   alice: hale refuses it (404) before any provider is called, and so an
//!   id hale does not keep, to an agent key; bob continues his own, and an
//!   admin key still has an unknown id forwarded.
//! - `/mcp` refuses a body over `limits.max_request_bytes` (413).
//! - Gemini's `countTokens` refuses an `X-Hale-Agent` the key may not act as.
//! - A checkpoint body that is not UTF-8 is refused (400), never stored.

mod common;

use common::*;
use serde_json::{Value, json};

const ADMIN: &str = "tok-admin-42";
const ALICE: &str = "tok-alice-42";
const BOB: &str = "tok-bob-42";

/// The body limit of the rig (`limits.max_request_bytes`), small enough to
/// be crossed cheaply and under `/mcp`'s library's own 4 MiB cap.
const LIMIT: usize = 64 * 1024;

/// `hale chaos` and `hale serve` with an admin key and the agent keys of
/// alice and bob; route `r` is a Responses provider (`api: responses`),
/// whose non-streamed answers carry the provider's own ids.
async fn rig() -> ChaosRig {
    ChaosRig::start_with(
        &format!(
            "\
routes:
  r: [resp/gpt-5]
providers:
  - name: resp
    kind: openai
    api: responses
    base_url: {{chaos}}/v1
    default_model: gpt-5
agents:
  alice: {{}}
  bob: {{}}
limits: {{max_request_bytes: {LIMIT}}}
auth:
  keys:
    - {{name: ops, token_env: HALE_T_ADMIN, scope: admin}}
    - {{name: alice, token_env: HALE_T_ALICE, agents: [alice]}}
    - {{name: bob, token_env: HALE_T_BOB, agents: [bob]}}
"
        ),
        &[],
        &[
            ("HALE_T_ADMIN", ADMIN),
            ("HALE_T_ALICE", ALICE),
            ("HALE_T_BOB", BOB),
        ],
    )
    .await
}

/// `POST path` with a bearer `token`, extra headers and a raw body:
/// (status, JSON body or `Null`).
async fn post_raw(
    rig: &ChaosRig,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, Value) {
    let mut rb = rig
        .http
        .post(format!("{}{path}", rig.base))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json");
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let r = rb.body(body).send().await.expect("hale answers");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn post(rig: &ChaosRig, path: &str, token: &str, body: Value) -> (u16, Value) {
    post_raw(rig, path, token, &[], body.to_string().into_bytes()).await
}

/// How many requests chaos received naming `id` as `previous_response_id`.
async fn sent_to_provider(rig: &ChaosRig, id: &str) -> usize {
    rig.chaos_bodies()
        .await
        .iter()
        .filter(|b| b["previous_response_id"] == id)
        .count()
}

/// Item 1: bob's turn is answered whole by the Responses provider, so bob
/// gets the provider's own id. alice sending it as `previous_response_id`
/// gets hale's 404, and the provider never sees it (before the fix hale
/// forwarded it and the provider continued bob's conversation for alice).
/// An id hale never handed out, and bob's `store: false` id (which hale
/// does not keep), are refused to alice the same way. bob continues his own
/// conversation through the provider; an admin key's unknown id still goes
/// to the provider as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_continue_another_tenants_conversation_through_the_provider() {
    let rig = rig().await;
    let (s, bobs) = post(
        &rig,
        "/v1/responses",
        BOB,
        json!({"model": "r", "input": "bob's private question"}),
    )
    .await;
    assert_eq!(s, 200, "{bobs}");
    let bob_id = bobs["id"].as_str().expect("an id").to_owned();
    assert!(
        bob_id.starts_with("resp_chaos_"),
        "the provider's own id reached bob: {bobs}"
    );

    // alice, with bob's id: hale's own 404, in OpenAI's shape, no provider call.
    let (s, e) = post(
        &rig,
        "/v1/responses",
        ALICE,
        json!({"model": "r", "input": "go on", "previous_response_id": bob_id}),
    )
    .await;
    assert_eq!(s, 404, "alice must not continue bob's response: {e}");
    assert_eq!(e["error"]["type"], "previous_response_not_found", "{e}");
    assert_eq!(
        e["error"]["message"],
        format!("Previous response with id '{bob_id}' not found."),
        "{e}"
    );
    assert_eq!(
        sent_to_provider(&rig, &bob_id).await,
        0,
        "bob's id was forwarded for alice"
    );

    // An id hale never handed out: the same 404 to an agent key, not forwarded.
    let never = "resp_chaos_never_handed_out";
    let (s, e) = post(
        &rig,
        "/v1/responses",
        ALICE,
        json!({"model": "r", "input": "go on", "previous_response_id": never}),
    )
    .await;
    assert_eq!(s, 404, "{e}");
    assert_eq!(e["error"]["type"], "previous_response_not_found", "{e}");
    assert_eq!(sent_to_provider(&rig, never).await, 0);

    // bob's `store: false` answer: the provider's id, not kept by hale.
    let (s, unkept) = post(
        &rig,
        "/v1/responses",
        BOB,
        json!({"model": "r", "input": "not kept", "store": false}),
    )
    .await;
    assert_eq!(s, 200, "{unkept}");
    let unkept_id = unkept["id"].as_str().expect("an id").to_owned();
    let (s, e) = post(
        &rig,
        "/v1/responses",
        ALICE,
        json!({"model": "r", "input": "go on", "previous_response_id": unkept_id}),
    )
    .await;
    assert_eq!(s, 404, "{e}");
    assert_eq!(e["error"]["type"], "previous_response_not_found", "{e}");
    assert_eq!(sent_to_provider(&rig, &unkept_id).await, 0);

    // bob continues his own: the provider gets his request, id and all.
    let (s, next) = post(
        &rig,
        "/v1/responses",
        BOB,
        json!({"model": "r", "input": "and then?", "previous_response_id": bob_id}),
    )
    .await;
    assert_eq!(s, 200, "bob continues his own conversation: {next}");
    assert_eq!(sent_to_provider(&rig, &bob_id).await, 1);

    // An admin key may act as every agent: an id hale does not keep goes
    // to the provider as sent, whose own 404 comes back.
    let (s, e) = post(
        &rig,
        "/v1/responses",
        ADMIN,
        json!({"model": "r", "input": "go on", "previous_response_id": never}),
    )
    .await;
    assert_eq!(s, 404, "{e}");
    assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
    assert_eq!(sent_to_provider(&rig, never).await, 1);
}

/// Item 5a: `/mcp` reads at most `limits.max_request_bytes`, as every other
/// route: a larger body is a 413 `request_too_large`. Before the fix its
/// library's own 4 MiB cap applied and the body was served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_refuses_a_body_over_max_request_bytes() {
    let rig = rig().await;
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "tenant-isolation", "version": "1"}}
    })
    .to_string();
    let accept = [("accept", "application/json, text/event-stream")];
    // Under the limit: served (its answer, an event stream, is not read).
    let served = rig
        .http
        .post(format!("{}/mcp", rig.base))
        .bearer_auth(ALICE)
        .header("content-type", "application/json")
        .header(accept[0].0, accept[0].1)
        .body(init.clone())
        .send()
        .await
        .expect("hale answers");
    assert_eq!(
        served.status().as_u16(),
        200,
        "an initialize under the limit is served"
    );
    drop(served);
    // The same request padded with whitespace (still valid JSON) past the limit.
    let mut big = init.into_bytes();
    big.extend(std::iter::repeat_n(b' ', LIMIT + 1));
    let (s, e) = post_raw(&rig, "/mcp", ALICE, &accept, big).await;
    assert_eq!(s, 413, "{e}");
    assert_eq!(e["error"]["type"], "request_too_large", "{e}");
}

/// Item 5b: Gemini's `countTokens` is a model route: alice's key naming bob
/// in `X-Hale-Agent` is a 403 in Google's shape, as on `generateContent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_refuses_an_agent_the_key_may_not_act_as() {
    let rig = rig().await;
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "count me"}]}]});
    for action in ["countTokens", "generateContent"] {
        let path = format!("/v1beta/models/r:{action}");
        let (s, e) = post_raw(
            &rig,
            &path,
            ALICE,
            &[("x-hale-agent", "bob")],
            body.to_string().into_bytes(),
        )
        .await;
        assert_eq!(s, 403, "{action}: {e}");
        assert_eq!(e["error"]["status"], "PERMISSION_DENIED", "{action}: {e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("may not act as agent bob")),
            "{action}: {e}"
        );
    }
    // Her own agent, named or by default: counted.
    for headers in [&[("x-hale-agent", "alice")][..], &[]] {
        let (s, v) = post_raw(
            &rig,
            "/v1beta/models/r:countTokens",
            ALICE,
            headers,
            body.to_string().into_bytes(),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        assert!(v["totalTokens"].as_u64().is_some_and(|n| n > 0), "{v}");
    }
}

/// Item 5c: a checkpoint body that is JSON to a parser that skips strings
/// but is not UTF-8 is refused with a 400 naming UTF-8, and nothing is
/// stored (before the fix it was stored and served back as JSON).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_body_that_is_not_utf8_is_refused() {
    let rig = rig().await;
    let path = "/agents/alice/tasks/t1/checkpoints";
    let (s, e) = post_raw(
        &rig,
        path,
        ALICE,
        &[],
        b"{\"state\": \"\xff\xfe\"}".to_vec(),
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("UTF-8")),
        "{e}"
    );
    let list = rig
        .http
        .get(format!("{}{path}", rig.base))
        .bearer_auth(ALICE)
        .send()
        .await
        .expect("hale answers");
    assert_eq!(list.status().as_u16(), 200);
    let list: Value = list.json().await.expect("JSON");
    assert_eq!(list["checkpoints"], json!([]), "nothing stored: {list}");
    // A UTF-8 JSON body is kept.
    let (s, cp) = post(&rig, path, ALICE, json!({"state": "caf\u{e9}"})).await;
    assert_eq!(s, 201, "{cp}");
    assert_eq!(cp["valid"], true, "{cp}");
}
