//! What a receiver's answer to one request means, for both transports.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use prost::Message;

/// What became of one request.
#[derive(Debug)]
pub(crate) enum Answer {
    /// Taken; `rejected` points refused with the receiver's message (`partial_success`).
    Taken { rejected: i64, message: String },
    /// Try again later (gRPC UNAVAILABLE or RESOURCE_EXHAUSTED; HTTP 429, 502, 503, 504, or no
    /// answer), after `after` when the receiver said so.
    Retry {
        after: Option<Duration>,
        why: String,
    },
    /// Over the receiver's size limit (HTTP 413, or RESOURCE_EXHAUSTED about the size).
    TooLarge { why: String },
    /// Refused; sending it again would not help.
    Refused { why: String },
}

/// The answer to a request that was taken: whole, or `partial_success`.
pub(super) fn taken(body: &[u8]) -> Answer {
    let partial = ExportMetricsServiceResponse::decode(body)
        .ok()
        .and_then(|r| r.partial_success);
    match partial {
        Some(p) if p.rejected_data_points > 0 || !p.error_message.is_empty() => Answer::Taken {
            rejected: p.rejected_data_points,
            message: p.error_message,
        },
        _ => Answer::Taken {
            rejected: 0,
            message: String::new(),
        },
    }
}

/// A TLS file's bytes, or its path and why it could not be read.
pub(super) fn read_file(path: &std::path::Path) -> Result<Vec<u8>, (String, std::io::Error)> {
    std::fs::read(path).map_err(|source| (path.display().to_string(), source))
}

pub(super) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
