//! Plain HTTP reads a test makes of a server it started: `GET` a URL and
//! take its body as JSON or text, panicking (with the URL) when it fails.

/// `GET url`, the body as JSON.
pub async fn get_json(http: &reqwest::Client, url: &str) -> serde_json::Value {
    http.get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: not JSON: {e}"))
}

/// `GET url`, the body as text.
pub async fn get_text(http: &reqwest::Client, url: &str) -> String {
    http.get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .text()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: no text: {e}"))
}

/// A reqwest client whose requests give up after `timeout` (the crypto
/// provider installed first, as the binaries do).
pub fn client(timeout: std::time::Duration) -> reqwest::Client {
    crate::install_crypto();
    reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .expect("a reqwest client")
}
