//! Google's Generative Language API route
//! (`POST /v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent?alt=sse`): answers, the key header, the faults
//! in Google's shapes and its safety blocks.

mod common;

use common::*;
use hale_chaos::ChaosHandle;
use serde_json::{Value, json};

fn gurl(h: &ChaosHandle, model: &str, stream: bool) -> String {
    if stream {
        format!(
            "{}/models/{model}:streamGenerateContent?alt=sse",
            h.base_url_gemini
        )
    } else {
        format!("{}/models/{model}:generateContent", h.base_url_gemini)
    }
}

fn gbody() -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": "hello"}]}]})
}

async fn gpost(h: &ChaosHandle, model: &str, stream: bool) -> reqwest::Response {
    client()
        .post(gurl(h, model, stream))
        .header("x-goog-api-key", "k")
        .json(&gbody())
        .send()
        .await
        .unwrap()
}

/// The text of every chunk's first candidate, one entry per chunk with text.
fn texts(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .filter_map(|f| {
            f.json()["candidates"][0]["content"]["parts"][0]["text"]
                .as_str()
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
        })
        .collect()
}

#[tokio::test]
async fn answers_in_googles_shapes_and_needs_the_key() {
    let h = server().await;
    let r = gpost(&h, "gemini-2.5-flash", false).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["candidates"][0]["content"]["role"], "model");
    assert!(
        v["candidates"][0]["content"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("w0 w1")
    );
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    assert!(v["usageMetadata"]["promptTokenCount"].as_u64().unwrap() > 0);
    assert_eq!(v["modelVersion"], "gemini-2.5-flash");

    let (text, _) = read_all(gpost(&h, "gemini-2.5-flash", true).await).await;
    let frames = parse_sse(&text);
    let words = texts(&frames);
    assert!(words.len() > 3 && words[0] == "w0", "{words:?}");
    let last = frames.last().unwrap().json();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");

    let r = client()
        .post(gurl(&h, "m", false))
        .json(&gbody())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["status"], "PERMISSION_DENIED");
    assert_eq!(h.requests_for("m"), 0);
}

#[tokio::test]
async fn a_tool_call_comes_whole() {
    let h = server().await;
    for stream in [false, true] {
        let r = gpost(&h, "tool:name=look:args={\"x\":1}", stream).await;
        let part = if stream {
            let (text, _) = read_all(r).await;
            parse_sse(&text)[0].json()["candidates"][0]["content"]["parts"][0].clone()
        } else {
            r.json::<Value>().await.unwrap()["candidates"][0]["content"]["parts"][0].clone()
        };
        assert_eq!(
            part,
            json!({"functionCall": {"name": "look", "args": {"x": 1}}}),
            "stream {stream}"
        );
    }
}

#[tokio::test]
async fn faults_have_googles_shapes() {
    let h = server().await;
    for (model, status, google) in [
        ("rate-limit", 429, "RESOURCE_EXHAUSTED"),
        ("error-500", 500, "INTERNAL"),
        ("error-503", 503, "UNAVAILABLE"),
        ("context-overflow", 400, "INVALID_ARGUMENT"),
        ("auth", 400, "INVALID_ARGUMENT"),
    ] {
        let r = gpost(&h, model, false).await;
        assert_eq!(r.status(), status, "{model}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["status"], google, "{model}");
        assert_eq!(v["error"]["code"], status, "{model}");
    }
    // A safety block is a 200: the prompt's blockReason, or a candidate
    // finished by SAFETY in a stream.
    let r = gpost(&h, "content-filter", false).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["promptFeedback"]["blockReason"], "SAFETY");
    let (text, _) = read_all(gpost(&h, "content-filter", true).await).await;
    assert_eq!(
        parse_sse(&text)[0].json()["candidates"][0]["finishReason"],
        "SAFETY"
    );
    // A cut stream ends after its words, with no finish.
    let (text, broke) = read_all(gpost(&h, "cut:after=3", true).await).await;
    assert!(broke, "the connection drops");
    let frames = parse_sse(&text);
    assert_eq!(texts(&frames), vec!["w0", " w1", " w2"]);
    assert!(
        frames
            .iter()
            .all(|f| f.json()["candidates"][0].get("finishReason").is_none())
    );
    // The in-band error is Google's.
    let (text, _) = read_all(gpost(&h, "stream-error:after=2", true).await).await;
    let frames = parse_sse(&text);
    assert_eq!(
        frames.last().unwrap().json()["error"]["status"],
        "UNAVAILABLE"
    );
}
