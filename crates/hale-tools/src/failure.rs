//! How one call to a tool node failed ([`CallFailure`]), in the terms of
//! hale-core's classifier (a status, or a transport failure, and whether the
//! request was sent), with the node's message cut to [`MAX_MESSAGE_CHARS`].
//! Shared by both ways of calling a node (plain HTTP and MCP) and the runner.

use hale_core::classify::{Transport, transport_of};
use hale_core::tools::ToolObservation;
use std::time::Duration;

/// Longest error message kept from a node's answer.
pub const MAX_MESSAGE_CHARS: usize = 300;

/// How one call failed.
#[derive(Debug, Clone)]
pub struct CallFailure {
    pub obs: ToolObservation,
    /// The request reached the node (it may have run).
    pub sent: bool,
    pub retry_after: Option<Duration>,
    pub message: String,
}

impl CallFailure {
    pub(crate) fn transport(t: Transport, sent: bool, message: String) -> Self {
        CallFailure {
            obs: ToolObservation {
                status: None,
                transport: Some(t),
                output_invalid: false,
            },
            sent,
            retry_after: None,
            message,
        }
    }

    /// A failure with a status (HTTP, or an MCP error mapped onto one).
    pub fn status(status: u16, message: String, retry_after: Option<Duration>) -> Self {
        CallFailure {
            obs: ToolObservation {
                status: Some(status),
                transport: None,
                output_invalid: false,
            },
            sent: true,
            retry_after,
            message,
        }
    }

    /// A call hale refused to send: the caller's input (a 400, final on
    /// every node), with the request never made.
    pub fn refused(message: String) -> Self {
        CallFailure {
            obs: ToolObservation {
                status: Some(400),
                transport: None,
                output_invalid: false,
            },
            sent: false,
            retry_after: None,
            message,
        }
    }

    /// A 2xx whose output is not usable.
    pub fn invalid_output(message: String) -> Self {
        CallFailure {
            obs: ToolObservation {
                status: Some(200),
                transport: None,
                output_invalid: true,
            },
            sent: true,
            retry_after: None,
            message,
        }
    }

    /// Classifies a client error (reqwest, rmcp) by walking its causes.
    pub fn from_error(
        e: &(dyn std::error::Error + 'static),
        timed_out: bool,
        connect: bool,
    ) -> Self {
        let t = if timed_out {
            Transport::HeadersTimeout
        } else if connect {
            match transport_of(e) {
                Transport::Dns => Transport::Dns,
                _ => Transport::ConnectRefused,
            }
        } else {
            transport_of(e)
        };
        CallFailure::transport(t, !connect, truncate(&error_chain(e)))
    }

    /// The attempt timed out locally.
    pub fn timeout(after: Duration) -> Self {
        CallFailure::transport(
            Transport::HeadersTimeout,
            true,
            format!("no answer within {} ms", after.as_millis()),
        )
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    let mut depth = 0;
    while let Some(c) = cur {
        if depth >= 4 {
            break;
        }
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
        depth += 1;
    }
    s
}

/// Cuts a message to [`MAX_MESSAGE_CHARS`].
pub fn truncate(s: &str) -> String {
    if s.chars().count() <= MAX_MESSAGE_CHARS {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(MAX_MESSAGE_CHARS).collect();
        t.push('…');
        t
    }
}
