//! AWS Bedrock's wire rules (`kind: bedrock`): which API an attempt uses
//! (Converse, or Anthropic's Messages body through InvokeModel), its URL,
//! how Bedrock's exceptions are classified, how the shared AWS profile files
//! are read, and when temporary credentials are fetched again. Pure: the
//! gateway's upstream client asks and carries out (signing, HTTP, files).
//!
//! - **APIs**: `converse` (`/model/{id}/converse`, `/converse-stream`) speaks
//!   one JSON shape for every model family; `invoke` (`/model/{id}/invoke`,
//!   `/invoke-with-response-stream`) carries the model's own body, which
//!   hale uses for Anthropic's Messages API so Anthropic-only features
//!   survive. An unset `api` is `invoke` for Anthropic model ids (cross-region
//!   inference profiles such as `us.anthropic.…` are model ids too) and
//!   `converse` for the rest ([`api_for`]).
//! - **Errors**: Bedrock names its exception in the `x-amzn-ErrorType`
//!   header (or the body's `__type`), in the event stream as
//!   `:exception-type`. [`exception_of`] reads the name, [`class_of`] maps
//!   it, exhaustively, to the existing classes; a `ValidationException`
//!   whose message says the input is too long is a context overflow.
//! - **Health scopes** as for every kind (docs/operations.md, "What hale does
//!   to a call"): credentials refused → the provider (and hale fetches them
//!   again once), a region that cannot be reached → the `base_url`, the rest →
//!   the deployment.

use crate::class::ErrorClass;
use crate::classify::{self, Classified, Observation};
use crate::config::BedrockApi;
use crate::segment::{Refusal, Segment};
use std::time::{Duration, SystemTime};

/// The SigV4 service name of the Bedrock runtime.
pub const SIGNING_SERVICE: &str = "bedrock";
/// The environment variable a Bedrock API key is read from by default.
pub const DEFAULT_KEY_ENV: &str = "AWS_BEARER_TOKEN_BEDROCK";
/// The `anthropic_version` InvokeModel's Anthropic bodies carry.
pub const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";
/// The header naming a Bedrock error's exception.
pub const ERROR_TYPE_HEADER: &str = "x-amzn-errortype";
/// Temporary credentials are fetched again this long before they expire.
pub const CREDENTIAL_REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);
/// The profile used when neither config nor `AWS_PROFILE` names one.
pub const DEFAULT_PROFILE: &str = "default";

/// The default `base_url` of a bedrock provider in `region`.
pub fn default_base_url(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

/// What is wrong with a region name (`None`: fine). It becomes a host name
/// label and a SigV4 scope: lower-case letters, digits and `-`.
pub fn region_problem(region: &str) -> Option<&'static str> {
    if region.is_empty() {
        Some("must not be empty")
    } else if !region
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        || region.starts_with('-')
        || region.ends_with('-')
    {
        Some("must be an AWS region such as us-east-1 (lower-case letters, digits and `-`)")
    } else {
        None
    }
}

/// Whether `model` is an Anthropic model on Bedrock: `anthropic.…`, a
/// cross-region inference profile (`us.anthropic.…`, `global.anthropic.…`)
/// or an ARN whose last segment is one of those.
pub fn is_anthropic_model(model: &str) -> bool {
    let id = model.rsplit('/').next().unwrap_or(model);
    if id.starts_with("anthropic.") {
        return true;
    }
    match id.split_once('.') {
        Some((geo, rest)) => {
            !geo.is_empty()
                && geo.bytes().all(|b| b.is_ascii_lowercase())
                && rest.starts_with("anthropic.")
        }
        None => false,
    }
}

/// The API an attempt at `model` uses: the configured one, else by model id.
pub fn api_for(configured: Option<BedrockApi>, model: &str) -> BedrockApi {
    match configured {
        Some(api) => api,
        None if is_anthropic_model(model) => BedrockApi::Invoke,
        None => BedrockApi::Converse,
    }
}

/// The path after `base_url` of an attempt at `model` through `api`: the
/// model id (or ARN) one encoded path segment ([`crate::segment`]: `:` and
/// `/` of ARNs encoded too), refused when empty or with a dot part.
pub fn path(api: BedrockApi, model: &str, stream: bool) -> Result<String, Refusal> {
    let op = match (api, stream) {
        (BedrockApi::Converse, false) => "converse",
        (BedrockApi::Converse, true) => "converse-stream",
        (BedrockApi::Invoke, false) => "invoke",
        (BedrockApi::Invoke, true) => "invoke-with-response-stream",
    };
    Ok(format!("/model/{}/{op}", Segment::new(model)?))
}

/// Bedrock's exceptions, as far as hale tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exception {
    Throttling,
    ServiceUnavailable,
    ServiceQuotaExceeded,
    ModelNotReady,
    ModelTimeout,
    ModelError,
    ModelStreamError,
    InternalServer,
    Validation,
    AccessDenied,
    UnrecognizedClient,
    ExpiredToken,
    InvalidSignature,
    ResourceNotFound,
}

/// The exception a name stands for: `ThrottlingException`, the header's
/// `ThrottlingException:http://internal…`, a body `__type` such as
/// `com.amazon.bedrock#ThrottlingException`, or the stream's lower-camel
/// `throttlingException`. `None`: not one hale knows.
pub fn exception_of(name: &str) -> Option<Exception> {
    let name = name.split(':').next().unwrap_or(name);
    let name = name.rsplit('#').next().unwrap_or(name).trim();
    let lower = name.to_ascii_lowercase();
    let bare = lower.strip_suffix("exception").unwrap_or(&lower);
    Some(match bare {
        "throttling" | "toomanyrequests" => Exception::Throttling,
        "serviceunavailable" => Exception::ServiceUnavailable,
        "servicequotaexceeded" => Exception::ServiceQuotaExceeded,
        "modelnotready" => Exception::ModelNotReady,
        "modeltimeout" => Exception::ModelTimeout,
        "modelerror" => Exception::ModelError,
        "modelstreamerror" => Exception::ModelStreamError,
        "internalserver" | "internalfailure" => Exception::InternalServer,
        "validation" => Exception::Validation,
        "accessdenied" => Exception::AccessDenied,
        "unrecognizedclient" => Exception::UnrecognizedClient,
        "expiredtoken" => Exception::ExpiredToken,
        "invalidsignature" | "incompletesignature" | "signaturedoesnotmatch" => {
            Exception::InvalidSignature
        }
        "resourcenotfound" => Exception::ResourceNotFound,
        _ => return None,
    })
}

/// The exception name of an error: the `x-amzn-ErrorType` header, else the
/// body's `__type` (or `code`).
pub fn error_type(header: Option<&str>, body: &str) -> Option<String> {
    if let Some(h) = header.filter(|h| !h.trim().is_empty()) {
        return Some(h.trim().to_owned());
    }
    let v: serde_json::Value = serde_json::from_str(body.trim()).ok()?;
    ["__type", "code"]
        .iter()
        .find_map(|k| v.get(*k).and_then(serde_json::Value::as_str))
        .map(str::to_owned)
}

/// Whether a `ValidationException`'s message says the input is over the
/// model's context window.
pub fn says_context_overflow(message: &str) -> bool {
    let t = message.to_ascii_lowercase();
    [
        "input is too long",
        "too many input tokens",
        "prompt is too long",
        "maximum context length",
        "context length",
        "context window",
        "too many tokens",
        "exceeds the maximum number of tokens",
        "input token count",
    ]
    .iter()
    .any(|p| t.contains(p))
}

/// The class of exception `e` with message `message`.
pub fn class_of(e: Exception, message: &str) -> ErrorClass {
    match e {
        Exception::Throttling | Exception::ServiceQuotaExceeded => ErrorClass::RateLimit,
        Exception::ServiceUnavailable | Exception::InternalServer | Exception::ModelError => {
            ErrorClass::Overloaded
        }
        // The model is being loaded: transient, retried and moved on from.
        Exception::ModelNotReady => ErrorClass::Overloaded,
        Exception::ModelTimeout => ErrorClass::Timeout,
        Exception::ModelStreamError => ErrorClass::StreamBroken,
        Exception::Validation if says_context_overflow(message) => ErrorClass::ContextOverflow,
        Exception::Validation => ErrorClass::BadRequest,
        Exception::AccessDenied
        | Exception::UnrecognizedClient
        | Exception::ExpiredToken
        | Exception::InvalidSignature => ErrorClass::Auth,
        Exception::ResourceNotFound => ErrorClass::ModelNotFound,
    }
}

/// Whether exception `e` means the credentials were refused, so temporary
/// ones are fetched again before the next attempt (once).
pub fn refetch_credentials(e: Exception) -> bool {
    match e {
        Exception::UnrecognizedClient
        | Exception::ExpiredToken
        | Exception::InvalidSignature
        | Exception::AccessDenied => true,
        Exception::Throttling
        | Exception::ServiceUnavailable
        | Exception::ServiceQuotaExceeded
        | Exception::ModelNotReady
        | Exception::ModelTimeout
        | Exception::ModelError
        | Exception::ModelStreamError
        | Exception::InternalServer
        | Exception::Validation
        | Exception::ResourceNotFound => false,
    }
}

/// Classifies a Bedrock error response (or an in-stream exception, with
/// `obs.status` `None`): the exception named by `error_type` decides the
/// class; the shared classifier gives the message and wait, and decides
/// alone when no known exception is named.
pub fn classify(obs: &Observation<'_>, error_type: Option<&str>) -> Classified {
    let mut c = classify::classify(obs);
    if let Some(e) = error_type.and_then(exception_of) {
        c.class = class_of(e, &c.message);
        if c.code.is_none() {
            c.code = error_type.map(|t| t.split(':').next().unwrap_or(t).to_owned());
        }
    }
    c
}

/// Credentials as the shared profile files give them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileCredentials {
    /// `aws_access_key_id`, `aws_secret_access_key`, maybe `aws_session_token`.
    Static {
        access_key_id: String,
        secret_access_key: crate::config::Secret,
        session_token: Option<crate::config::Secret>,
    },
    /// `role_arn` with `web_identity_token_file`: STS AssumeRoleWithWebIdentity.
    WebIdentity {
        role_arn: String,
        token_file: String,
        session_name: Option<String>,
    },
}

/// One INI file's sections: `(section name, [(key, value)])`, keys
/// lower-cased, comments (`#`, `;`) and blank lines left out.
fn ini_sections(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        if let Some(name) = l.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            out.push((name.trim().to_owned(), Vec::new()));
            continue;
        }
        // A continuation line (an indented nested value) is not a key here.
        if line.starts_with([' ', '\t']) {
            continue;
        }
        if let (Some((k, v)), Some(last)) = (l.split_once('='), out.last_mut()) {
            last.1
                .push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    out
}

/// The keys of `profile` in the config file (`[profile name]`, or
/// `[default]`) and the credentials file (`[name]`); the credentials file
/// wins where both set a key.
fn profile_keys(config: &str, credentials: &str, profile: &str) -> Vec<(String, String)> {
    let mut keys = Vec::new();
    for (name, kv) in ini_sections(config) {
        let matches = name == format!("profile {profile}")
            || (profile == DEFAULT_PROFILE && name == DEFAULT_PROFILE);
        if matches {
            keys.extend(kv);
        }
    }
    for (name, kv) in ini_sections(credentials) {
        if name == profile {
            for (k, v) in kv {
                keys.retain(|(kk, _)| *kk != k);
                keys.push((k, v));
            }
        }
    }
    keys
}

/// The credentials `profile` names in the shared files (their texts; a
/// missing file is empty), or why there are none (no secret in the reason).
pub fn profile_credentials(
    config: &str,
    credentials: &str,
    profile: &str,
) -> Result<ProfileCredentials, String> {
    let keys = profile_keys(config, credentials, profile);
    if keys.is_empty() {
        return Err(format!(
            "the AWS profile `{profile}` is not in the shared config or credentials file"
        ));
    }
    let get = |k: &str| {
        keys.iter()
            .find(|(kk, _)| kk == k)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    match (
        get("aws_access_key_id"),
        get("aws_secret_access_key"),
        get("role_arn"),
        get("web_identity_token_file"),
    ) {
        (Some(id), Some(secret), _, _) => Ok(ProfileCredentials::Static {
            access_key_id: id,
            secret_access_key: crate::config::Secret::new(secret),
            session_token: get("aws_session_token").map(crate::config::Secret::new),
        }),
        (Some(_), None, _, _) => Err(format!(
            "the AWS profile `{profile}` has aws_access_key_id but no aws_secret_access_key"
        )),
        (None, _, Some(role_arn), Some(token_file)) => Ok(ProfileCredentials::WebIdentity {
            role_arn,
            token_file,
            session_name: get("role_session_name"),
        }),
        (None, _, Some(_), None) => Err(format!(
            "the AWS profile `{profile}` assumes a role from another source (source_profile, \
             credential_source), which hale does not support: give keys or web_identity_token_file"
        )),
        (None, _, None, _) => Err(format!(
            "the AWS profile `{profile}` has no aws_access_key_id (SSO and credential_process \
             profiles are not supported)"
        )),
    }
}

/// The region `profile` sets in the shared config file, if any.
pub fn profile_region(config: &str, profile: &str) -> Option<String> {
    profile_keys(config, "", profile)
        .into_iter()
        .find(|(k, _)| k == "region")
        .map(|(_, v)| v)
}

/// Whether credentials expiring at `expires` (never: `None`) must be
/// fetched again at `now`: within [`CREDENTIAL_REFRESH_MARGIN`] of expiry,
/// or after the provider refused them (`refused`).
pub fn credentials_due(expires: Option<SystemTime>, now: SystemTime, refused: bool) -> bool {
    if refused {
        return true;
    }
    match expires {
        None => false,
        Some(at) => now + CREDENTIAL_REFRESH_MARGIN >= at,
    }
}

/// What STS's AssumeRoleWithWebIdentity answered: the temporary credentials
/// and their expiry as STS wrote it (ISO 8601).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssumedRole {
    pub access_key_id: String,
    pub secret_access_key: crate::config::Secret,
    pub session_token: crate::config::Secret,
    pub expiration: String,
}

fn xml_text<'a>(xml: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&close)?;
    Some(xml[start..end].trim())
}

/// Reads an AssumeRoleWithWebIdentity response body (STS answers XML);
/// `Err` says what is missing, or STS's error `Code` and `Message`.
pub fn parse_assume_role(xml: &str) -> Result<AssumedRole, String> {
    if let Some(code) = xml_text(xml, "Code") {
        let msg = xml_text(xml, "Message").unwrap_or_default();
        return Err(format!("STS refused the web identity: {code}: {msg}"));
    }
    let creds = xml_text(xml, "Credentials").ok_or("STS answered no Credentials")?;
    let get = |t: &str| {
        xml_text(creds, t)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| format!("STS answered no {t}"))
    };
    Ok(AssumedRole {
        access_key_id: get("AccessKeyId")?,
        secret_access_key: crate::config::Secret::new(get("SecretAccessKey")?),
        session_token: crate::config::Secret::new(get("SessionToken")?),
        expiration: get("Expiration")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apis_paths_and_model_ids() {
        for (api, model, stream, want_api, path_) in [
            (
                None,
                "anthropic.claude-3-5-sonnet-20241022-v2:0",
                false,
                BedrockApi::Invoke,
                "/model/anthropic.claude-3-5-sonnet-20241022-v2%3A0/invoke",
            ),
            (
                None,
                "us.anthropic.claude-sonnet-4-20250514-v1:0",
                true,
                BedrockApi::Invoke,
                "/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/invoke-with-response-stream",
            ),
            (
                None,
                "meta.llama3-70b-instruct-v1:0",
                false,
                BedrockApi::Converse,
                "/model/meta.llama3-70b-instruct-v1%3A0/converse",
            ),
            (
                None,
                "amazon.nova-pro-v1:0",
                true,
                BedrockApi::Converse,
                "/model/amazon.nova-pro-v1%3A0/converse-stream",
            ),
            (
                Some(BedrockApi::Converse),
                "anthropic.claude-3-haiku-20240307-v1:0",
                false,
                BedrockApi::Converse,
                "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse",
            ),
            (
                None,
                "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-7-sonnet-20250219-v1:0",
                false,
                BedrockApi::Invoke,
                "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-3-7-sonnet-20250219-v1%3A0/invoke",
            ),
        ] {
            let got = api_for(api, model);
            assert_eq!(got, want_api, "{model}");
            assert_eq!(path(got, model, stream).as_deref(), Ok(path_), "{model}");
        }
        // `.` and `..` would be dot segments of `/model/{id}/…` (docs/operations.md, "Threat model").
        for (model, want) in [
            (".", Refusal::DotPart),
            ("..", Refusal::DotPart),
            ("../../x", Refusal::DotPart),
            ("", Refusal::Empty),
        ] {
            assert_eq!(
                path(BedrockApi::Converse, model, false),
                Err(want),
                "{model}"
            );
        }
        assert!(!is_anthropic_model("mistral.anthropic-lookalike"));
        assert!(!is_anthropic_model("cohere.command-r-v1:0"));
        assert_eq!(
            default_base_url("eu-west-1"),
            "https://bedrock-runtime.eu-west-1.amazonaws.com"
        );
        assert!(region_problem("us-east-1").is_none());
        assert!(region_problem("US-EAST-1").is_some());
        assert!(region_problem("us-east-1.evil.com").is_some());
        assert!(region_problem("").is_some());
    }

    /// (header, body, status) → class: every exception the issue names.
    #[test]
    fn exceptions_are_classified() {
        use ErrorClass as C;
        let rows: [(Option<&str>, &str, u16, C); 14] = [
            (
                Some("ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
                r#"{"message":"Too many requests, please wait before trying again."}"#,
                429,
                C::RateLimit,
            ),
            (
                None,
                r#"{"__type":"com.amazon.bedrock#ThrottlingException","message":"Rate exceeded"}"#,
                400,
                C::RateLimit,
            ),
            (
                Some("ServiceUnavailableException"),
                r#"{"message":"Service unavailable"}"#,
                503,
                C::Overloaded,
            ),
            (
                Some("ModelNotReadyException"),
                r#"{"message":"Model is not ready for inference. Wait and try your request again."}"#,
                429,
                C::Overloaded,
            ),
            (
                Some("ModelTimeoutException"),
                r#"{"message":"Model has timed out in processing the request."}"#,
                408,
                C::Timeout,
            ),
            (
                Some("ValidationException"),
                r#"{"message":"Malformed input request: #: required key [messages] not found"}"#,
                400,
                C::BadRequest,
            ),
            (
                Some("ValidationException"),
                r#"{"message":"Input is too long for requested model."}"#,
                400,
                C::ContextOverflow,
            ),
            (
                Some("ValidationException"),
                r#"{"message":"The model returned the following errors: prompt is too long: 210000 tokens > 200000 maximum"}"#,
                400,
                C::ContextOverflow,
            ),
            (
                Some("ValidationException"),
                r#"{"message":"too many input tokens"}"#,
                400,
                C::ContextOverflow,
            ),
            (
                Some("AccessDeniedException"),
                r#"{"message":"You don't have access to the model with the specified model ID."}"#,
                403,
                C::Auth,
            ),
            (
                Some("UnrecognizedClientException"),
                r#"{"message":"The security token included in the request is invalid."}"#,
                403,
                C::Auth,
            ),
            (
                Some("ExpiredTokenException"),
                r#"{"message":"The security token included in the request is expired"}"#,
                403,
                C::Auth,
            ),
            (
                Some("ResourceNotFoundException"),
                r#"{"message":"Could not resolve the foundation model from the provided model identifier."}"#,
                404,
                C::ModelNotFound,
            ),
            (
                Some("modelStreamErrorException"),
                r#"{"message":"stream broke"}"#,
                400,
                C::StreamBroken,
            ),
        ];
        for (header, body, status, want) in rows {
            let mut obs = Observation::new(SystemTime::UNIX_EPOCH);
            obs.status = Some(status);
            obs.body = Some(body);
            let t = error_type(header, body);
            let c = classify(&obs, t.as_deref());
            assert_eq!(c.class, want, "{header:?} {body}");
            assert!(!c.message.is_empty());
        }
        // No exception named: the shared classifier decides on the status.
        let mut obs = Observation::new(SystemTime::UNIX_EPOCH);
        obs.status = Some(503);
        assert_eq!(classify(&obs, None).class, ErrorClass::Overloaded);
        assert!(refetch_credentials(Exception::ExpiredToken));
        assert!(!refetch_credentials(Exception::Throttling));
        assert_eq!(exception_of("somethingElse"), None);
    }

    #[test]
    fn profiles_are_read_from_both_files() {
        let config = "[default]\nregion = us-west-2\n\n[profile web]\nrole_arn = arn:aws:iam::1:role/r\nweb_identity_token_file = /tmp/tok\n# comment\n[profile keys]\naws_access_key_id = FROMCONFIG\naws_secret_access_key = s1\n[profile sso]\nsso_start_url = https://x\n";
        let creds = "[default]\naws_access_key_id = AKID\naws_secret_access_key = SECRET\naws_session_token = TOKEN\n[keys]\naws_access_key_id = FROMCREDS\n";
        match profile_credentials(config, creds, "default").unwrap() {
            ProfileCredentials::Static {
                access_key_id,
                secret_access_key,
                session_token,
            } => {
                assert_eq!(access_key_id, "AKID");
                assert_eq!(secret_access_key.expose(), "SECRET");
                assert_eq!(session_token.unwrap().expose(), "TOKEN");
            }
            other => panic!("{other:?}"),
        }
        // The credentials file wins key by key.
        match profile_credentials(config, creds, "keys").unwrap() {
            ProfileCredentials::Static {
                access_key_id,
                secret_access_key,
                ..
            } => {
                assert_eq!(access_key_id, "FROMCREDS");
                assert_eq!(secret_access_key.expose(), "s1");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            profile_credentials(config, creds, "web").unwrap(),
            ProfileCredentials::WebIdentity {
                role_arn: "arn:aws:iam::1:role/r".into(),
                token_file: "/tmp/tok".into(),
                session_name: None,
            }
        );
        let e = profile_credentials(config, creds, "sso").unwrap_err();
        assert!(e.contains("SSO"), "{e}");
        let e = profile_credentials(config, creds, "missing").unwrap_err();
        assert!(e.contains("missing"), "{e}");
        assert_eq!(
            profile_region(config, "default").as_deref(),
            Some("us-west-2")
        );
    }

    #[test]
    fn credentials_are_refreshed_before_expiry() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let exp = t0 + Duration::from_secs(3600);
        assert!(!credentials_due(None, t0, false));
        assert!(credentials_due(None, t0, true));
        assert!(!credentials_due(Some(exp), t0, false));
        assert!(!credentials_due(
            Some(exp),
            exp - CREDENTIAL_REFRESH_MARGIN - Duration::from_secs(1),
            false
        ));
        assert!(credentials_due(
            Some(exp),
            exp - CREDENTIAL_REFRESH_MARGIN,
            false
        ));
        assert!(credentials_due(
            Some(exp),
            exp + Duration::from_secs(1),
            false
        ));
    }

    #[test]
    fn sts_answers_are_read() {
        let ok = "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>ASIA1</AccessKeyId><SecretAccessKey>sk</SecretAccessKey><SessionToken>st</SessionToken><Expiration>2026-11-26T17:00:00Z</Expiration></Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
        let r = parse_assume_role(ok).unwrap();
        assert_eq!(r.access_key_id, "ASIA1");
        assert_eq!(r.session_token.expose(), "st");
        assert_eq!(r.expiration, "2026-11-26T17:00:00Z");
        let err = "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code><Message>bad token</Message></Error></ErrorResponse>";
        let e = parse_assume_role(err).unwrap_err();
        assert!(e.contains("InvalidIdentityToken"), "{e}");
        assert!(parse_assume_role("<x/>").is_err());
    }
}
