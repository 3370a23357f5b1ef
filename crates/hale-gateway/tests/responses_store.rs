//! Issue 27: the Responses answers hale keeps, through the real server
//! against `hale chaos`: an agent key reads and continues only its own
//! agents' responses (another agent's id is the same 404 as one never
//! issued, and is never expanded into its turn), `store: false` is not
//! kept, `input_items` pages in OpenAI's list shape, `DELETE` forgets.
//! The whole conversation across kinds, through the OpenAI SDK, is in
//! `crates/hale/tests/sdk_responses.rs`.

mod common;

use common::*;
use hale_core::config::{ApiKey, KeyScope, ProviderApi, Secret};
use serde_json::{Value, json};

/// `method path` with a bearer token and a JSON body: (status, JSON).
async fn call(
    h: &Hale,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut rb = h
        .http
        .request(method, format!("{}{path}", h.base))
        .header("authorization", format!("Bearer {token}"));
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let r = rb.send().await.expect("the gateway answers");
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

fn key(name: &str, agent: &str) -> ApiKey {
    ApiKey {
        name: name.into(),
        token: Secret::new(format!("tok-{name}")),
        scope: KeyScope::Agents(vec![agent.into()]),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_responses_are_scoped_paged_deleted_and_not_kept_with_store_false() {
    let c = chaos().await;
    let mut resp = openai("resp", &c, "gpt-5");
    resp.api = ProviderApi::Responses;
    let mut cfg = config(vec![resp, anthropic("anth", &c, "claude-x")]);
    // `anth-only` serves no Responses provider: an id it cannot expand is a 404.
    cfg.routes.insert(
        "anth-only".into(),
        vec![hale_core::config::Target {
            provider: "anth".into(),
            model: "claude-x".into(),
        }],
    );
    cfg.auth.keys.push(key("a", "alice"));
    cfg.auth.keys.push(key("b", "bob"));
    let h = Hale::start(cfg).await;
    let post = reqwest::Method::POST;
    let get = reqwest::Method::GET;

    let input = json!([
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
        {"role": "user", "content": "three"}
    ]);
    let (s, r1) = call(
        &h,
        post.clone(),
        "/v1/responses",
        "tok-a",
        Some(json!({"model": ROUTE, "input": input})),
    )
    .await;
    assert_eq!(s, 200, "{r1}");
    let id = r1["id"].as_str().expect("an id").to_owned();

    // Alice reads it back as she got it; Bob gets the 404 of an unknown id.
    let (s, got) = call(
        &h,
        get.clone(),
        &format!("/v1/responses/{id}"),
        "tok-a",
        None,
    )
    .await;
    assert_eq!((s, &got), (200, &r1));
    let (s, other) = call(
        &h,
        get.clone(),
        &format!("/v1/responses/{id}"),
        "tok-b",
        None,
    )
    .await;
    assert_eq!(s, 404, "{other}");
    assert_eq!(other["error"]["type"], "not_found", "{other}");
    let (s, _) = call(
        &h,
        get.clone(),
        &format!("/v1/responses/{id}/input_items"),
        "tok-b",
        None,
    )
    .await;
    assert_eq!(s, 404);
    // Bob cannot continue Alice's conversation through hale's store: on a
    // route without a Responses provider it is OpenAI's 404, and Alice's
    // words never reach the provider.
    let before = c.last_requests().len();
    let (s, e) = call(
        &h,
        post.clone(),
        "/v1/responses",
        "tok-b",
        Some(json!({"model": "anth-only", "input": "go on", "previous_response_id": id})),
    )
    .await;
    assert_eq!(s, 404, "{e}");
    assert_eq!(e["error"]["code"], "previous_response_not_found", "{e}");
    assert_eq!(c.last_requests().len(), before, "no provider was called");
    // Alice can: the Anthropic deployment gets her whole conversation.
    let (s, r2) = call(
        &h,
        post.clone(),
        "/v1/responses",
        "tok-a",
        Some(json!({"model": "anth-only", "input": "go on", "previous_response_id": id})),
    )
    .await;
    assert_eq!(s, 200, "{r2}");
    let sent = c.last_requests();
    let last = sent.last().expect("a request").to_string();
    assert!(
        ["one", "two", "three", "go on"]
            .iter()
            .all(|w| last.contains(w)),
        "{last}"
    );

    // input_items: OpenAI's list shape, newest first by default, paged.
    let path = format!("/v1/responses/{id}/input_items");
    let (s, page) = call(&h, get.clone(), &path, "tok-a", None).await;
    assert_eq!(s, 200, "{page}");
    assert_eq!(page["object"], "list");
    let texts = |p: &Value| -> Vec<String> {
        p["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["content"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    assert_eq!(texts(&page), ["three", "two", "one"], "{page}");
    assert_eq!(page["has_more"], false);
    let (_, asc) = call(
        &h,
        get.clone(),
        &format!("{path}?order=asc&limit=2"),
        "tok-a",
        None,
    )
    .await;
    assert_eq!(texts(&asc), ["one", "two"], "{asc}");
    assert_eq!(asc["has_more"], true);
    assert_eq!(asc["first_id"], asc["data"][0]["id"]);
    let after = asc["last_id"].as_str().unwrap();
    let (_, rest) = call(
        &h,
        get.clone(),
        &format!("{path}?order=asc&limit=2&after={after}"),
        "tok-a",
        None,
    )
    .await;
    assert_eq!(texts(&rest), ["three"], "{rest}");
    assert_eq!(rest["has_more"], false);
    for bad in ["?order=sideways", "?limit=0", "?limit=101", "?after=nope"] {
        let (s, e) = call(&h, get.clone(), &format!("{path}{bad}"), "tok-a", None).await;
        assert_eq!(s, 400, "{bad}: {e}");
    }

    // store: false is not kept.
    let (s, unkept) = call(
        &h,
        post.clone(),
        "/v1/responses",
        "tok-a",
        Some(json!({"model": ROUTE, "input": "x", "store": false})),
    )
    .await;
    assert_eq!(s, 200, "{unkept}");
    let uid = unkept["id"].as_str().unwrap();
    let (s, _) = call(
        &h,
        get.clone(),
        &format!("/v1/responses/{uid}"),
        "tok-a",
        None,
    )
    .await;
    assert_eq!(s, 404);

    // DELETE: Bob cannot, Alice can, once.
    let del = reqwest::Method::DELETE;
    let (s, _) = call(
        &h,
        del.clone(),
        &format!("/v1/responses/{id}"),
        "tok-b",
        None,
    )
    .await;
    assert_eq!(s, 404);
    let (s, d) = call(
        &h,
        del.clone(),
        &format!("/v1/responses/{id}"),
        "tok-a",
        None,
    )
    .await;
    assert_eq!(
        (s, d),
        (
            200,
            json!({"id": id, "object": "response", "deleted": true})
        )
    );
    let (s, _) = call(&h, del, &format!("/v1/responses/{id}"), "tok-a", None).await;
    assert_eq!(s, 404);
    let (s, _) = call(&h, get, &format!("/v1/responses/{id}"), "tok-a", None).await;
    assert_eq!(s, 404);
    h.stop().await;
}
