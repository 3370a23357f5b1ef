//! Webhook receivers: a POST route on a loopback port whose requests a test
//! records as it likes and answers with a status it chooses.

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};

/// Serves `POST path` on a free loopback port for the rest of the test,
/// answering each request with what `answer` returns for its headers and
/// body (where the test records it); returns the full URL of the route.
pub async fn hook<F>(path: &str, answer: F) -> String
where
    F: Fn(&HeaderMap, &Bytes) -> StatusCode + Clone + Send + Sync + 'static,
{
    let app = axum::Router::new().route(
        path,
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let answer = answer.clone();
            async move { answer(&headers, &body) }
        }),
    );
    format!("{}{path}", crate::serve(app).await)
}
