//! AWS Bedrock's side of an attempt (`kind: bedrock`): the URL, the body
//! InvokeModel takes (Anthropic's Messages body without `model`, with
//! `anthropic_version`), the credentials and the SigV4 signature, and the
//! binary event-stream framing of a streamed answer. The rules (API per
//! model, paths, exceptions, profile files, when credentials are due) are
//! `hale_core::bedrock`'s; this file carries them out.
//!
//! Credentials are held by a [`Keychain`], part of the `Credentials` the gateway builds
//! once and lends every attempt (no process-wide state): per provider, the
//! credentials last resolved, their expiry, and whether Bedrock refused
//! them. They are resolved as the AWS SDKs do, in this order:
//!
//! 1. a provider's `profile:` — that profile of the shared files only;
//! 2. the environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!    `AWS_SESSION_TOKEN`;
//! 3. the shared files (`AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`,
//!    by default `~/.aws/credentials` and `~/.aws/config`), profile
//!    `AWS_PROFILE` or `default`, when it is there;
//! 4. a web identity: `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`,
//!    exchanged at STS (`AssumeRoleWithWebIdentity`, at
//!    `AWS_ENDPOINT_URL_STS` or `https://sts.{region}.amazonaws.com`).
//!
//! Temporary credentials are resolved again
//! [`CREDENTIAL_REFRESH_MARGIN`](hale_core::bedrock::CREDENTIAL_REFRESH_MARGIN)
//! before they expire, and any after Bedrock refused them. One resolution at
//! a time per provider. No key, secret or token reaches a log, an event or
//! an error: a failure is a [`CredentialError`] naming only what was tried.

use crate::secrets::Redactor;
use aws_credential_types::Credentials;
use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::{HeaderValue, Message};
use bytes::{Buf, Bytes, BytesMut};
use hale_core::bedrock;
use hale_core::config::{BedrockAuth, BedrockConfig, ProviderConfig};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The attempt's URL for `model` (refused: [`bedrock::path`]).
pub fn url(
    provider: &ProviderConfig,
    bc: &BedrockConfig,
    model: &str,
    stream: bool,
) -> Result<String, hale_core::segment::Refusal> {
    let api = bedrock::api_for(bc.api, model);
    Ok(format!(
        "{}{}",
        provider.base_url,
        bedrock::path(api, model, stream)?
    ))
}

/// An Anthropic Messages body (the client's JSON or hale's rendering) as
/// InvokeModel takes it: [`hale_proto::anthropic::platform_body`] with Bedrock's
/// version, no `stream` either (the operation says it), and the client's
/// `anthropic-beta` header as the body's `anthropic_beta` list. Every other
/// field stays as it came.
pub fn invoke_body(body: &serde_json::Value, beta: Option<&str>) -> serde_json::Value {
    let mut body = hale_proto::anthropic::platform_body(body, bedrock::ANTHROPIC_VERSION);
    body.remove("stream");
    if let Some(b) = beta {
        let list: Vec<serde_json::Value> = b
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| serde_json::Value::String(s.to_owned()))
            .collect();
        if !list.is_empty() {
            body.insert("anthropic_beta".into(), serde_json::Value::Array(list));
        }
    }
    serde_json::Value::Object(body)
}

/// Why no credentials could be had: safe to show (no secret in it).
#[derive(Debug)]
pub struct CredentialError(pub String);

/// Credentials as resolved, and until when they hold.
struct Held {
    creds: Credentials,
    expires: Option<SystemTime>,
    refused: bool,
}

type Slot = Arc<tokio::sync::Mutex<Option<Held>>>;

/// A slot's key: the provider's name, region, endpoint and auth.
type SlotKey = (String, String, String, String);

/// A lookup of environment variables.
type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Where the environment and files are read from (the process's, or a
/// test's).
#[derive(Clone)]
pub struct Sources {
    env: EnvLookup,
}

impl Sources {
    /// The process environment.
    pub fn process() -> Self {
        Self {
            env: Arc::new(|k| std::env::var(k).ok()),
        }
    }

    /// A fixed environment (tests).
    pub fn from_env(env: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        Self { env: Arc::new(env) }
    }

    fn var(&self, k: &str) -> Option<String> {
        (self.env)(k).filter(|v| !v.trim().is_empty())
    }
}

/// The credentials of every bedrock provider, resolved on first use and
/// again when due. Built once by the gateway from its config, which hale
/// reads once at start (there is no reload), so no slot outlives its
/// provider; a slot is keyed by name, region, endpoint and auth.
pub struct Keychain {
    slots: Mutex<HashMap<SlotKey, Slot>>,
    sources: Sources,
}

impl Default for Keychain {
    fn default() -> Self {
        Self::new(Sources::process())
    }
}

impl Keychain {
    pub fn new(sources: Sources) -> Self {
        Self {
            slots: Mutex::default(),
            sources,
        }
    }

    fn slot(&self, provider: &ProviderConfig, bc: &BedrockConfig) -> Slot {
        let key = (
            provider.name.clone(),
            bc.region.clone(),
            provider.base_url.clone(),
            format!("{:?}", bc.auth),
        );
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default()
            .clone()
    }

    /// Signs `req` (method, URL, `content-type` and body as built) with the
    /// provider's credentials, or sets its API key as a bearer. `http`
    /// reaches STS for a web identity. Credentials resolved are remembered
    /// by `secrets` (masked wherever hale shows text).
    pub async fn authorize(
        &self,
        http: &reqwest::Client,
        provider: &ProviderConfig,
        bc: &BedrockConfig,
        req: &mut http::Request<Bytes>,
        secrets: &Redactor,
    ) -> Result<(), CredentialError> {
        let profile = match &bc.auth {
            BedrockAuth::ApiKey => {
                if let Some(k) = &provider.api_key {
                    let mut v = http::HeaderValue::from_str(&format!("Bearer {}", k.expose()))
                        .map_err(|_| {
                            CredentialError(
                                "the Bedrock API key is not a valid header value".into(),
                            )
                        })?;
                    v.set_sensitive(true);
                    req.headers_mut().insert(http::header::AUTHORIZATION, v);
                }
                return Ok(());
            }
            BedrockAuth::SigV4 { profile } => profile.clone(),
        };
        let slot = self.slot(provider, bc);
        let mut held = slot.lock().await;
        let now = SystemTime::now();
        let due = match held.as_ref() {
            None => true,
            Some(h) => bedrock::credentials_due(h.expires, now, h.refused),
        };
        if due {
            let (creds, expires) = self
                .resolve(http, profile.as_deref(), &bc.region, provider.timeout)
                .await?;
            let source = format!("bedrock:{}", provider.name);
            secrets.remember(&format!("{source}:key-id"), creds.access_key_id());
            secrets.remember(&format!("{source}:secret"), creds.secret_access_key());
            if let Some(t) = creds.session_token() {
                secrets.remember(&format!("{source}:session"), t);
            }
            *held = Some(Held {
                creds,
                expires,
                refused: false,
            });
        }
        let creds = match held.as_ref() {
            Some(h) => h.creds.clone(),
            None => return Err(CredentialError("no AWS credentials".into())),
        };
        sign(req, creds, &bc.region, now)
    }

    /// Bedrock refused the provider's credentials: they are resolved again
    /// before the next attempt.
    pub async fn refused(&self, provider: &ProviderConfig, bc: &BedrockConfig) {
        if let Some(h) = self.slot(provider, bc).lock().await.as_mut() {
            h.refused = true;
        }
    }

    /// Resolves credentials in the documented order.
    async fn resolve(
        &self,
        http: &reqwest::Client,
        profile: Option<&str>,
        region: &str,
        limit: Duration,
    ) -> Result<(Credentials, Option<SystemTime>), CredentialError> {
        let s = &self.sources;
        if profile.is_none()
            && let (Some(id), Some(secret)) =
                (s.var("AWS_ACCESS_KEY_ID"), s.var("AWS_SECRET_ACCESS_KEY"))
        {
            let token = s.var("AWS_SESSION_TOKEN");
            return Ok((Credentials::new(id, secret, token, None, "hale-env"), None));
        }
        let name = profile
            .map(str::to_owned)
            .or_else(|| s.var("AWS_PROFILE"))
            .unwrap_or_else(|| bedrock::DEFAULT_PROFILE.to_owned());
        let home = s.var("HOME").unwrap_or_default();
        let read = |var: &str, default: &str| {
            let path = s
                .var(var)
                .unwrap_or_else(|| format!("{home}/.aws/{default}"));
            std::fs::read_to_string(path).unwrap_or_default()
        };
        let config = read("AWS_CONFIG_FILE", "config");
        let credentials = read("AWS_SHARED_CREDENTIALS_FILE", "credentials");
        let from_files = bedrock::profile_credentials(&config, &credentials, &name);
        let web = match (from_files, profile) {
            (
                Ok(bedrock::ProfileCredentials::Static {
                    access_key_id,
                    secret_access_key,
                    session_token,
                }),
                _,
            ) => {
                let creds = Credentials::new(
                    access_key_id,
                    secret_access_key.expose(),
                    session_token.map(|t| t.expose().to_owned()),
                    None,
                    "hale-profile",
                );
                return Ok((creds, None));
            }
            (
                Ok(bedrock::ProfileCredentials::WebIdentity {
                    role_arn,
                    token_file,
                    session_name,
                }),
                _,
            ) => (role_arn, token_file, session_name),
            // A named profile is the only source.
            (Err(why), Some(_)) => return Err(CredentialError(why)),
            (Err(why), None) => match (s.var("AWS_ROLE_ARN"), s.var("AWS_WEB_IDENTITY_TOKEN_FILE"))
            {
                (Some(role), Some(file)) => (role, file, s.var("AWS_ROLE_SESSION_NAME")),
                (Some(_), None) | (None, Some(_)) | (None, None) => {
                    return Err(CredentialError(format!(
                        "no AWS credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are not set, \
                         {why}, and AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN is not set"
                    )));
                }
            },
        };
        self.assume_role(http, web, region, limit).await
    }

    /// STS AssumeRoleWithWebIdentity with the token in `file`.
    async fn assume_role(
        &self,
        http: &reqwest::Client,
        (role_arn, file, session): (String, String, Option<String>),
        region: &str,
        limit: Duration,
    ) -> Result<(Credentials, Option<SystemTime>), CredentialError> {
        let token = std::fs::read_to_string(&file).map_err(|e| {
            CredentialError(format!(
                "the web identity token file could not be read: {}",
                e.kind()
            ))
        })?;
        let endpoint = self
            .sources
            .var("AWS_ENDPOINT_URL_STS")
            .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com"));
        let session = session.unwrap_or_else(|| "hale".to_owned());
        let form = [
            ("Action", "AssumeRoleWithWebIdentity"),
            ("Version", "2011-06-15"),
            ("RoleArn", role_arn.as_str()),
            ("RoleSessionName", session.as_str()),
            ("WebIdentityToken", token.trim()),
        ];
        let body: String = form
            .iter()
            .map(|(k, v)| format!("{k}={}", form_encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let send = http
            .post(endpoint.trim_end_matches('/').to_owned() + "/")
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send();
        let resp = match tokio::time::timeout(limit, send).await {
            Err(_) => return Err(CredentialError("STS did not answer in time".into())),
            Ok(Err(_)) => return Err(CredentialError("STS could not be reached".into())),
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let role = bedrock::parse_assume_role(&text).map_err(|why| {
            CredentialError(format!("{why} (STS answered HTTP {})", status.as_u16()))
        })?;
        let expires = aws_smithy_types::DateTime::from_str(
            &role.expiration,
            aws_smithy_types::date_time::Format::DateTime,
        )
        .ok()
        .and_then(|d| SystemTime::try_from(d).ok());
        let creds = Credentials::new(
            role.access_key_id,
            role.secret_access_key.expose(),
            Some(role.session_token.expose().to_owned()),
            expires,
            "hale-web-identity",
        );
        Ok((creds, expires))
    }
}

/// `v` encoded for an `application/x-www-form-urlencoded` body.
fn form_encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Signs `req` with SigV4 for the `bedrock` service in `region` at `now`:
/// its method, URL, headers and body bytes as built.
pub fn sign(
    req: &mut http::Request<Bytes>,
    creds: Credentials,
    region: &str,
    now: SystemTime,
) -> Result<(), CredentialError> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings};
    let identity = creds.into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(bedrock::SIGNING_SERVICE)
        .time(now)
        .settings(SigningSettings::default())
        .build()
        .map_err(|_| CredentialError("the SigV4 parameters are incomplete".into()))?
        .into();
    let uri = req.uri().to_string();
    let signable = SignableRequest::new(
        req.method().as_str(),
        &uri,
        req.headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?))),
        SignableBody::Bytes(req.body()),
    )
    .map_err(|_| CredentialError("the request could not be signed".into()))?;
    let (instructions, _) = aws_sigv4::http_request::sign(signable, &params)
        .map_err(|_| CredentialError("the request could not be signed".into()))?
        .into_parts();
    let (headers, _) = instructions.into_parts();
    for h in headers {
        let mut value = http::HeaderValue::from_str(h.value())
            .map_err(|_| CredentialError("a signature header is not a valid value".into()))?;
        value.set_sensitive(h.sensitive());
        let name = http::HeaderName::from_static(h.name());
        req.headers_mut().insert(name, value);
    }
    Ok(())
}

/// The largest event-stream message hale buffers (Bedrock's are far
/// smaller; the framing allows 16 MiB).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// One message of an event stream, as the decoder of its API reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// An event: its `:event-type` and payload.
    Event { kind: String, payload: bytes::Bytes },
    /// An exception: its `:exception-type` and payload (`{"message"}`).
    Exception { kind: String, payload: bytes::Bytes },
}

/// Why an event stream could not be read (a bad prelude, CRC, header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameError(pub String);

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "event stream: {}", self.0)
    }
}

/// Reads event-stream messages from bytes as they arrive.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: BytesMut,
    decoder: MessageFrameDecoder,
    failed: bool,
}

fn header_str(m: &Message, name: &str) -> Option<String> {
    m.headers()
        .iter()
        .find(|h| h.name().as_str() == name)
        .and_then(|h| match h.value() {
            HeaderValue::String(s) => Some(s.as_str().to_owned()),
            _ => None,
        })
}

impl FrameReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds bytes that arrived.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Whether bytes of an unfinished message are waiting.
    pub fn pending(&self) -> bool {
        !self.buf.is_empty()
    }

    /// The next complete message; `None` until more bytes come. After an
    /// error, nothing more is read.
    pub fn next_frame(&mut self) -> Option<Result<Frame, FrameError>> {
        if self.failed {
            return None;
        }
        if self.buf.len() > MAX_FRAME {
            self.failed = true;
            return Some(Err(FrameError("a message over 16 MiB".into())));
        }
        match self.decoder.decode_frame(&mut self.buf) {
            Ok(DecodedFrame::Incomplete) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(FrameError(e.to_string())))
            }
            Ok(DecodedFrame::Complete(m)) => {
                let payload = m.payload().clone();
                let kind = |h| header_str(&m, h).unwrap_or_default();
                Some(Ok(match header_str(&m, ":message-type").as_deref() {
                    Some("exception") => Frame::Exception {
                        kind: kind(":exception-type"),
                        payload,
                    },
                    Some("error") => Frame::Exception {
                        kind: kind(":error-code"),
                        payload,
                    },
                    Some(_) | None => Frame::Event {
                        kind: kind(":event-type"),
                        payload,
                    },
                }))
            }
        }
    }

    /// Bytes left in the buffer that no message used (for tests).
    pub fn leftover(&self) -> usize {
        self.buf.remaining()
    }
}

/// An InvokeModelWithResponseStream `chunk` event's payload
/// (`{"bytes": base64}`) as the provider's event JSON (an Anthropic SSE
/// event's data).
pub fn chunk_json(payload: &[u8]) -> Result<Vec<u8>, String> {
    let v: serde_json::Value = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
    let b64 = v
        .get("bytes")
        .and_then(serde_json::Value::as_str)
        .ok_or("a chunk without `bytes`")?;
    aws_smithy_types::base64::decode(b64).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hale_core::config::{ProviderKind, Secret};

    /// AWS's published SigV4 test vector `get-vanilla` (the suite's
    /// AKIDEXAMPLE credentials, 2015-08-30T12:36:00Z, service `service`,
    /// us-east-1), signed by aws-sigv4 as hale calls it, gives AWS's
    /// documented signature.
    #[test]
    fn sigv4_matches_aws_get_vanilla_vector() {
        use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings};
        let creds = Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            None,
            None,
            "test",
        );
        let identity = creds.into();
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160);
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region("us-east-1")
            .name("service")
            .time(time)
            .settings(SigningSettings::default())
            .build()
            .unwrap()
            .into();
        let req = SignableRequest::new(
            "GET",
            "https://example.amazonaws.com/",
            [("host", "example.amazonaws.com")].into_iter(),
            SignableBody::Bytes(&[]),
        )
        .unwrap();
        let (_, signature) = aws_sigv4::http_request::sign(req, &params)
            .unwrap()
            .into_parts();
        assert_eq!(
            signature,
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }

    /// hale's signing of a Bedrock request sets the SigV4 headers, with
    /// the session token, and the secret in none of them.
    #[test]
    fn a_signed_request_carries_the_signature_and_no_secret() {
        let mut req = http::Request::post(
            "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-v2%3A1/invoke",
        )
        .header("content-type", "application/json")
        .body(Bytes::from_static(b"{}"))
        .unwrap();
        let creds = Credentials::new("AKID", "SECRETKEY", Some("TOKEN".into()), None, "t");
        sign(&mut req, creds, "us-east-1", SystemTime::now()).unwrap();
        let auth = req.headers()["authorization"].to_str().unwrap();
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKID/"),
            "{auth}"
        );
        assert!(auth.contains("/us-east-1/bedrock/aws4_request"), "{auth}");
        assert_eq!(req.headers()["x-amz-security-token"], "TOKEN");
        assert!(req.headers().contains_key("x-amz-date"));
        assert!(req.headers()["x-amz-security-token"].is_sensitive());
        for (_, v) in req.headers() {
            assert!(!v.to_str().unwrap().contains("SECRETKEY"));
        }
    }

    #[test]
    fn invoke_bodies_drop_model_and_stream_and_name_the_version() {
        let body = serde_json::json!({"model": "claude", "stream": true, "max_tokens": 5,
            "messages": [], "thinking": {"type": "enabled", "budget_tokens": 1024}});
        let out = invoke_body(&body, Some("interleaved-thinking-2025-05-14, x"));
        assert_eq!(
            out,
            serde_json::json!({"max_tokens": 5, "messages": [],
                "thinking": {"type": "enabled", "budget_tokens": 1024},
                "anthropic_version": "bedrock-2023-05-31",
                "anthropic_beta": ["interleaved-thinking-2025-05-14", "x"]})
        );
    }

    fn post() -> http::Request<Bytes> {
        http::Request::post("http://127.0.0.1:9/x")
            .body(Bytes::from_static(b"{}"))
            .unwrap()
    }

    fn bedrock_provider(auth: BedrockAuth) -> (ProviderConfig, BedrockConfig) {
        let p = ProviderConfig::new("br", ProviderKind::Bedrock, "http://127.0.0.1:9", "m");
        let bc = BedrockConfig {
            region: "us-east-1".into(),
            api: None,
            auth,
        };
        (p, bc)
    }

    /// Credentials from the environment, then from a profile file (the
    /// environment keys unset), each used to sign.
    #[tokio::test]
    async fn credentials_from_env_and_profile_files() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        let (p, bc) = bedrock_provider(BedrockAuth::SigV4 { profile: None });
        let chain = Keychain::new(Sources::from_env(|k| match k {
            "AWS_ACCESS_KEY_ID" => Some("AKIDENV".into()),
            "AWS_SECRET_ACCESS_KEY" => Some("env-secret-access-key".into()),
            "AWS_SESSION_TOKEN" => Some("env-session-token".into()),
            _ => None,
        }));
        let mut req = post();
        let secrets = Redactor::default();
        chain
            .authorize(&http, &p, &bc, &mut req, &secrets)
            .await
            .unwrap();
        let auth = req.headers()["authorization"].to_str().unwrap().to_owned();
        assert!(auth.contains("Credential=AKIDENV/"), "{auth}");
        // What was resolved is masked from now on.
        assert_eq!(
            secrets.mask("env-secret-access-key env-session-token"),
            "[redacted] [redacted]"
        );

        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("credentials");
        std::fs::write(
            &creds,
            "[work]\naws_access_key_id = AKIDFILE\naws_secret_access_key = s\n",
        )
        .unwrap();
        let creds_s = creds.display().to_string();
        let chain = Keychain::new(Sources::from_env(move |k| match k {
            "AWS_SHARED_CREDENTIALS_FILE" => Some(creds_s.clone()),
            "AWS_CONFIG_FILE" => Some("/nonexistent".into()),
            _ => None,
        }));
        let (p, bc) = bedrock_provider(BedrockAuth::SigV4 {
            profile: Some("work".into()),
        });
        let mut req = post();
        chain
            .authorize(&http, &p, &bc, &mut req, &Redactor::default())
            .await
            .unwrap();
        let auth = req.headers()["authorization"].to_str().unwrap().to_owned();
        assert!(auth.contains("Credential=AKIDFILE/"), "{auth}");

        // Nothing anywhere: an error naming what was tried, no secret.
        let chain = Keychain::new(Sources::from_env(|_| None));
        let (p, bc) = bedrock_provider(BedrockAuth::SigV4 { profile: None });
        let mut req = post();
        let e = chain
            .authorize(&http, &p, &bc, &mut req, &Redactor::default())
            .await
            .unwrap_err();
        assert!(e.0.contains("AWS_ACCESS_KEY_ID"), "{}", e.0);
    }

    #[tokio::test]
    async fn an_api_key_is_a_bearer() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        let (mut p, bc) = bedrock_provider(BedrockAuth::ApiKey);
        p.api_key = Some(Secret::new("bedrock-key"));
        let chain = Keychain::new(Sources::from_env(|_| None));
        let mut req = post();
        chain
            .authorize(&http, &p, &bc, &mut req, &Redactor::default())
            .await
            .unwrap();
        assert_eq!(req.headers()["authorization"], "Bearer bedrock-key");
    }

    fn message(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
        use aws_smithy_types::event_stream::Header;
        let mut m = Message::new(bytes::Bytes::copy_from_slice(payload));
        for (k, v) in headers {
            m = m.add_header(Header::new(
                k.to_string(),
                HeaderValue::String(v.to_string().into()),
            ));
        }
        let mut out = Vec::new();
        aws_smithy_eventstream::frame::write_message_to(&m, &mut out).unwrap();
        out
    }

    /// Messages split at every byte still come out whole, in order; a
    /// broken CRC is an error and the end of reading.
    #[test]
    fn frames_are_read_across_any_split() {
        let a = message(
            &[(":message-type", "event"), (":event-type", "messageStart")],
            b"{\"role\":\"assistant\"}",
        );
        let b = message(
            &[
                (":message-type", "exception"),
                (":exception-type", "throttlingException"),
            ],
            b"{\"message\":\"slow down\"}",
        );
        let all = [a.clone(), b].concat();
        let mut r = FrameReader::new();
        let mut got = Vec::new();
        for byte in &all {
            r.push(&[*byte]);
            while let Some(f) = r.next_frame() {
                got.push(f.unwrap());
            }
        }
        assert_eq!(got.len(), 2);
        assert!(matches!(&got[0], Frame::Event { kind, .. } if kind == "messageStart"));
        assert!(matches!(&got[1], Frame::Exception { kind, .. } if kind == "throttlingException"));
        assert!(!r.pending());
        let mut bad = a;
        let n = bad.len();
        bad[n - 1] ^= 0xff;
        let mut r = FrameReader::new();
        r.push(&bad);
        assert!(matches!(r.next_frame(), Some(Err(_))));
        assert!(r.next_frame().is_none());
    }
}
