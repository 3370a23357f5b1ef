//! The failure classes (docs/operations.md, "Failure classes") against a
//! `kind: bedrock` primary (hale chaos's Bedrock mode: Bedrock's errors with
//! `x-amzn-ErrorType`, the binary event stream, exceptions inside it), through
//! Converse and through InvokeModel, in both wire modes: each fault is
//! classified by its exception, retried or moved on from as its class promises
//! (issue 29).

mod common;

use common::*;
use hale_core::config::{BedrockApi, Config};

/// A Bedrock primary failing with `fault` through `api`, an OpenAI backup.
async fn world(fault: &str, api: BedrockApi) -> (hale_chaos::ChaosHandle, Hale) {
    let c = chaos().await;
    let mut primary = bedrock("primary", &c, fault);
    if let Some(b) = primary.bedrock.as_mut() {
        b.api = Some(api);
    }
    let cfg: Config = config(vec![primary, openai("backup", &c, BACKUP_MODEL)]);
    let h = Hale::start(cfg).await;
    (c, h)
}

const APIS: [BedrockApi; 2] = [BedrockApi::Converse, BedrockApi::Invoke];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bedrock_exceptions_are_classified_and_healed() {
    for api in APIS {
        for stream in MODES {
            for (fault, class, primary_calls) in [
                // ThrottlingException once, then answered on the same target.
                ("rate-limit:retry_after=0:times=1", "rate_limit", 2),
                // ServiceUnavailableException once, retried on the same target.
                ("error-503:times=1", "overloaded", 2),
                // ModelNotReadyException (chaos's error-529): transient, retried.
                ("error-529:times=1", "overloaded", 2),
                // UnrecognizedClientException: auth, moves on at once.
                ("auth", "auth", 1),
                // ValidationException "Input is too long…": context overflow.
                ("context-overflow", "context_overflow", 1),
            ] {
                let (c, h) = world(fault, api).await;
                let r = h.openai(ROUTE).stream(stream).send().await;
                r.assert_complete(&full());
                let tl = h.timeline(&r.turn_id).await;
                assert_eq!(
                    classes_of(&tl)[0],
                    class,
                    "{fault} {api:?} stream={stream}: {tl:?}"
                );
                assert_eq!(
                    c.requests_for(fault),
                    primary_calls,
                    "{fault} {api:?} stream={stream}"
                );
            }
        }
    }
}

/// An exception inside the event stream after 10 words
/// (`internalServerException`) is resumed on the backup: the caller gets
/// it all; a stream cut likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bedrock_exception_or_cut_mid_stream_is_resumed() {
    for api in APIS {
        for (fault, class) in [
            ("stream-error:after=10", "overloaded"),
            ("cut:after=10", "stream_broken"),
        ] {
            let (c, h) = world(fault, api).await;
            let r = h.openai(ROUTE).stream(true).send().await;
            r.assert_complete(&full());
            let tl = h.timeline(&r.turn_id).await;
            assert_eq!(classes_of(&tl)[0], class, "{fault} {api:?}: {tl:?}");
            assert_eq!(c.requests_for(fault), 1, "{fault} {api:?}");
        }
    }
}

/// A malformed event in a Bedrock stream is counted and skipped: the
/// primary completes the answer, the backup is not asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_bedrock_event_is_skipped() {
    for api in APIS {
        let (c, h) = world("malformed:at=5", api).await;
        let r = h.openai(ROUTE).stream(true).send().await;
        r.assert_complete(&full());
        assert_eq!(r.provider, "primary", "{api:?}");
        assert_eq!(c.requests_for(BACKUP_MODEL), 0, "{api:?}");
        assert_eq!(classes_of(&h.timeline(&r.turn_id).await), ["ok"]);
    }
}
