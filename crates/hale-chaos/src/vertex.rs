//! Google Vertex AI as the chaos server plays it: the publisher routes
//! (`/v1/projects/{p}/locations/{l}/publishers/{google|anthropic}/models/{m}:{method}`),
//! the `Authorization: Bearer` check against the tokens it minted, and a
//! loopback OAuth2 **token endpoint** (`POST /token`, the JWT-bearer grant a
//! service-account key's `token_uri` names) that mints them.
//!
//! The token endpoint checks what Google checks of an assertion: a JWT
//! signed RS256, whose claims name an issuer (the key's `client_email`),
//! the `cloud-platform` scope, an audience, and an issue and expiry time at
//! most an hour apart that include now. Given the service-account key
//! (`hale chaos --vertex-key FILE`), it also requires the issuer to be the
//! key's `client_email` and verifies the signature with the key's public
//! half (ring, already hale's crypto library).
//!
//! The bodies: a Gemini body must give every content a `role` (Vertex
//! refuses one without, where the Generative Language API does not); a
//! Claude body must carry `anthropic_version: "vertex-2023-10-16"` and no
//! `model` (the URL names it). The faults and answers are the other
//! dialects' (`server`); a rate limit is Google's `RESOURCE_EXHAUSTED` for
//! both publishers, as Vertex's quota answers it, with a `RetryInfo` wait.

use std::collections::HashSet;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};

/// The scope a token must be asked for.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The `anthropic_version` a Claude body on Vertex carries.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";
/// The grant type of a service account's assertion.
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// How long a minted token lives, as the token endpoint says (`expires_in`).
pub const TOKEN_LIFETIME_SECS: u64 = 3600;

/// The method a Vertex model path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    GenerateContent,
    StreamGenerateContent,
    RawPredict,
    StreamRawPredict,
}

impl Method {
    pub fn stream(self) -> bool {
        match self {
            Method::GenerateContent | Method::RawPredict => false,
            Method::StreamGenerateContent | Method::StreamRawPredict => true,
        }
    }
}

/// `{model}:{method}` of a path's last segment, for `publisher`; `None`
/// when the method is not one of that publisher's.
pub fn split_action<'a>(publisher: &str, action: &'a str) -> Option<(&'a str, Method)> {
    let (model, method) = action.rsplit_once(':')?;
    let m = match (publisher, method) {
        ("google", "generateContent") => Method::GenerateContent,
        ("google", "streamGenerateContent") => Method::StreamGenerateContent,
        ("anthropic", "rawPredict") => Method::RawPredict,
        ("anthropic", "streamRawPredict") => Method::StreamRawPredict,
        _other => return None,
    };
    Some((model, m))
}

/// A service-account key, as `--vertex-key` gives it: who it is and the
/// public half of its private key.
#[derive(Debug, Clone)]
pub struct Key {
    pub client_email: String,
    /// DER `RSAPublicKey`.
    public_key: Vec<u8>,
}

impl Key {
    /// Reads a service-account key file's JSON.
    pub fn from_json(text: &str) -> Result<Key, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let email = v["client_email"]
            .as_str()
            .ok_or("no `client_email`")?
            .to_owned();
        let pem = v["private_key"].as_str().ok_or("no `private_key`")?;
        let b64: String = pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .map(str::trim)
            .collect();
        let der = STANDARD
            .decode(b64)
            .map_err(|_| "`private_key` is not PEM")?;
        let pair = ring::signature::RsaKeyPair::from_pkcs8(&der)
            .map_err(|_| "`private_key` is not a PKCS#8 RSA key")?;
        Ok(Key {
            client_email: email,
            public_key: ring::signature::KeyPair::public_key(&pair)
                .as_ref()
                .to_vec(),
        })
    }

    fn verifies(&self, signed: &[u8], signature: &[u8]) -> bool {
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            &self.public_key,
        )
        .verify(signed, signature)
        .is_ok()
    }
}

/// The tokens minted and the grants that asked for them.
#[derive(Debug, Default)]
pub struct Tokens {
    valid: HashSet<String>,
    /// Every token minted, oldest first.
    minted: Vec<String>,
    /// Each accepted assertion's claims, oldest first.
    grants: Vec<Value>,
    /// Requests refused for a missing or unknown token.
    refused: u64,
}

impl Tokens {
    /// Mints a token for an accepted grant (`claims`).
    pub fn mint(&mut self, tag: &str, claims: Value) -> String {
        self.grants.push(claims);
        let token = format!("ya29.chaos-{tag}-{}", self.grants.len());
        self.valid.insert(token.clone());
        self.minted.push(token.clone());
        token
    }

    /// Whether `token` was minted and not revoked; a refusal is counted.
    pub fn admits(&mut self, token: Option<&str>) -> bool {
        let ok = token.is_some_and(|t| self.valid.contains(t));
        if !ok {
            self.refused += 1;
        }
        ok
    }

    /// Every token minted so far stops being accepted.
    pub fn revoke(&mut self) {
        self.valid.clear();
    }

    /// `GET /chaos/vertex/tokens`.
    pub fn view(&self) -> Value {
        json!({"minted": self.grants.len(), "valid": self.valid.len(),
               "refused": self.refused, "grants": self.grants, "tokens": self.minted})
    }
}

/// The claims of `assertion` if the token endpoint accepts it at
/// `now_secs` (Unix seconds); else what is wrong (the `invalid_grant`
/// description).
pub fn check_assertion(
    grant_type: Option<&str>,
    assertion: Option<&str>,
    key: Option<&Key>,
    now_secs: i64,
) -> Result<Value, String> {
    if grant_type != Some(GRANT_TYPE) {
        return Err(format!("grant_type must be {GRANT_TYPE}"));
    }
    let jwt = assertion.ok_or("no assertion")?;
    let parts: Vec<&str> = jwt.split('.').collect();
    let [head, body, sig] = parts[..] else {
        return Err("the assertion is not a JWT (three dot-separated parts)".into());
    };
    let decode = |s: &str| URL_SAFE_NO_PAD.decode(s.trim_end_matches('='));
    let header: Value = decode(head)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or("the JWT header does not read")?;
    if header["alg"] != "RS256" {
        return Err("the JWT must be signed RS256".into());
    }
    let claims: Value = decode(body)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or("the JWT claims do not read")?;
    let iss = claims["iss"].as_str().unwrap_or("");
    if !iss.contains('@') {
        return Err("the issuer (iss) must be the service account's client_email".into());
    }
    let scopes = claims["scope"].as_str().unwrap_or("");
    if !scopes.split(' ').any(|s| s == SCOPE) {
        return Err(format!("the scope must include {SCOPE}"));
    }
    if claims["aud"].as_str().is_none_or(str::is_empty) {
        return Err("no audience (aud)".into());
    }
    let (Some(iat), Some(exp)) = (claims["iat"].as_i64(), claims["exp"].as_i64()) else {
        return Err("iat and exp must be numbers".into());
    };
    if exp <= iat || exp - iat > 3600 {
        return Err("exp must be after iat, by an hour at most".into());
    }
    if now_secs + 300 < iat || now_secs > exp {
        return Err("the assertion is not valid now (iat/exp)".into());
    }
    let signature = decode(sig).map_err(|_| "the JWT signature does not read")?;
    if let Some(k) = key {
        if iss != k.client_email {
            return Err(format!("unknown issuer {iss}"));
        }
        let signed = &jwt[..head.len() + 1 + body.len()];
        if !k.verifies(signed.as_bytes(), &signature) {
            return Err("Invalid JWT Signature.".into());
        }
    }
    Ok(claims)
}

/// The token endpoint's refusal (OAuth2's error shape).
pub fn grant_error(description: &str) -> String {
    json!({"error": "invalid_grant", "error_description": description}).to_string()
}

/// The token endpoint's answer.
pub fn token_body(token: &str) -> String {
    json!({"access_token": token, "expires_in": TOKEN_LIFETIME_SECS, "token_type": "Bearer"})
        .to_string()
}

/// Google's 401 for a request without an accepted token.
pub fn unauthenticated() -> String {
    crate::gemini::error(
        401,
        "UNAUTHENTICATED",
        "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
        json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "ACCESS_TOKEN_TYPE_UNSUPPORTED"}]),
    )
}

/// What Vertex refuses in a body for `method` (`None`: it is fine).
pub fn body_problem(method: Method, body: &[u8]) -> Option<String> {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Some("the body is not JSON".into());
    };
    match method {
        Method::GenerateContent | Method::StreamGenerateContent => {
            let contents = v["contents"].as_array().cloned().unwrap_or_default();
            contents
                .iter()
                .any(|c| c["role"].as_str().is_none_or(str::is_empty))
                .then(|| "Please use a valid role: user, model.".to_owned())
        }
        Method::RawPredict | Method::StreamRawPredict => {
            if v.get("model").is_some() {
                Some("model: Extra inputs are not permitted".into())
            } else if v["anthropic_version"] != ANTHROPIC_VERSION {
                Some(format!("anthropic_version: must be {ANTHROPIC_VERSION}"))
            } else {
                None
            }
        }
    }
}

/// Vertex's 429 (both publishers): `RESOURCE_EXHAUSTED`, with a `RetryInfo`
/// wait when the fault names one.
pub fn rate_limit_body(retry_after: Option<u64>) -> String {
    let mut details = vec![json!({"@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "RATE_LIMIT_EXCEEDED", "domain": "aiplatform.googleapis.com"})];
    if let Some(secs) = retry_after {
        details.push(json!({"@type": "type.googleapis.com/google.rpc.RetryInfo",
            "retryDelay": format!("{secs}s")}));
    }
    crate::gemini::error(
        429,
        "RESOURCE_EXHAUSTED",
        "Quota exceeded for aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model with base model. Please submit a quota increase request.",
        Value::Array(details),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(header: &Value, claims: &Value) -> String {
        format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string()),
            URL_SAFE_NO_PAD.encode(b"sig")
        )
    }

    #[test]
    fn assertions_are_checked() {
        let h = json!({"alg": "RS256", "typ": "JWT"});
        let good = json!({"iss": "sa@p.iam.gserviceaccount.com", "scope": SCOPE,
            "aud": "http://x/token", "iat": 1000, "exp": 4595});
        let ok = jwt(&h, &good);
        let check = |gt: &str, a: &str| check_assertion(Some(gt), Some(a), None, 2000);
        assert!(check(GRANT_TYPE, &ok).is_ok());
        assert!(check("password", &ok).is_err());
        assert!(check(GRANT_TYPE, "a.b").is_err());
        assert!(check(GRANT_TYPE, &jwt(&json!({"alg": "none"}), &good)).is_err());
        for (field, bad) in [
            ("iss", json!("")),
            (
                "scope",
                json!("https://www.googleapis.com/auth/userinfo.email"),
            ),
            ("aud", json!(null)),
            ("exp", json!(900)),
            ("exp", json!(99999)),
        ] {
            let mut c = good.clone();
            c[field] = bad;
            assert!(check(GRANT_TYPE, &jwt(&h, &c)).is_err(), "{field}");
        }
        // Not yet or no longer valid.
        assert!(check_assertion(Some(GRANT_TYPE), Some(&ok), None, 5000).is_err());
    }

    #[test]
    fn actions_and_bodies() {
        assert_eq!(
            split_action("google", "gemini-2.5-flash:streamGenerateContent"),
            Some(("gemini-2.5-flash", Method::StreamGenerateContent))
        );
        assert_eq!(
            split_action("anthropic", "claude-x@1:rawPredict"),
            Some(("claude-x@1", Method::RawPredict))
        );
        assert_eq!(split_action("anthropic", "claude-x:generateContent"), None);
        assert_eq!(split_action("google", "gemini"), None);
        let g = br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
        assert_eq!(body_problem(Method::GenerateContent, g), None);
        let g = br#"{"contents":[{"parts":[{"text":"hi"}]}]}"#;
        assert!(body_problem(Method::GenerateContent, g).is_some());
        let a = br#"{"anthropic_version":"vertex-2023-10-16","max_tokens":5,"messages":[]}"#;
        assert_eq!(body_problem(Method::RawPredict, a), None);
        let a = br#"{"model":"claude","anthropic_version":"vertex-2023-10-16","messages":[]}"#;
        assert!(body_problem(Method::RawPredict, a).is_some());
        let a = br#"{"max_tokens":5,"messages":[]}"#;
        assert!(body_problem(Method::StreamRawPredict, a).is_some());
    }
}
