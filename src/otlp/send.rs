//! One OTLP request over http/protobuf or gRPC, and what the receiver's answer means: taken
//! (maybe in part), worth retrying (and when), too large, or refused.

use std::time::Duration;

use bytes::Bytes;
use prost::Message;

use super::answer::{Answer, error_chain, read_file, taken};
use super::grpc::Grpc;
use crate::config::{OtlpConfig, OtlpProtocol};

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Tls {
        what: &'static str,
        source: reqwest::Error,
    },
    #[error("gRPC client: {0}")]
    Grpc(#[from] super::grpc::GrpcSetupError),
}

/// The transport of a configuration.
pub(crate) enum Transport {
    Http(reqwest::Client),
    Grpc(Grpc),
}

impl Transport {
    /// A client for `config`'s protocol, TLS files and timeout.
    ///
    /// # Errors
    /// When a TLS file cannot be read or used.
    pub(crate) fn new(config: &OtlpConfig) -> Result<Transport, ClientError> {
        match config.protocol {
            OtlpProtocol::Grpc => Ok(Transport::Grpc(Grpc::new(config)?)),
            OtlpProtocol::HttpProtobuf => {
                let mut b = reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .timeout(config.timeout)
                    .user_agent(concat!("sysport/", env!("CARGO_PKG_VERSION")));
                if let Some(ca) = &config.certificate {
                    for cert in
                        reqwest::Certificate::from_pem_bundle(&read(ca)?).map_err(|source| {
                            ClientError::Tls {
                                what: "CA certificate",
                                source,
                            }
                        })?
                    {
                        b = b.add_root_certificate(cert);
                    }
                }
                if let (Some(key), Some(cert)) = (&config.client_key, &config.client_certificate) {
                    let mut pem = read(cert)?;
                    pem.push(b'\n');
                    pem.extend(read(key)?);
                    let identity =
                        reqwest::Identity::from_pem(&pem).map_err(|source| ClientError::Tls {
                            what: "client certificate and key",
                            source,
                        })?;
                    b = b.identity(identity);
                }
                let client = b.build().map_err(|source| ClientError::Tls {
                    what: "HTTP client",
                    source,
                })?;
                Ok(Transport::Http(client))
            }
        }
    }

    /// Sends one encoded `ExportMetricsServiceRequest` (gzipped already when `gzip`).
    pub(crate) async fn send(&self, config: &OtlpConfig, body: Bytes, gzip: bool) -> Answer {
        match self {
            Transport::Http(client) => http(client, config, body, gzip).await,
            Transport::Grpc(grpc) => grpc.send(config, body, gzip).await,
        }
    }
}

fn read(path: &std::path::Path) -> Result<Vec<u8>, ClientError> {
    read_file(path).map_err(|(path, source)| ClientError::Read { path, source })
}

async fn http(client: &reqwest::Client, config: &OtlpConfig, body: Bytes, gzip: bool) -> Answer {
    let mut req = client
        .post(config.endpoint.clone())
        .header("content-type", "application/x-protobuf");
    if gzip {
        req = req.header("content-encoding", "gzip");
    }
    for (k, v) in &config.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let response = match req.body(body).send().await {
        Ok(r) => r,
        Err(err) => {
            let why = if err.is_timeout() {
                format!("no answer within {:?}", config.timeout)
            } else {
                format!("request failed: {}", error_chain(&err))
            };
            return Answer::Retry { after: None, why };
        }
    };
    let status = response.status();
    let after = retry_after(response.headers());
    let body = response.bytes().await.unwrap_or_default();
    if status.is_success() {
        return taken(&body);
    }
    let why = format!("HTTP {status}{}", status_message(&body));
    match status.as_u16() {
        429 | 502 | 503 | 504 => Answer::Retry { after, why },
        413 => Answer::TooLarge { why },
        _ => Answer::Refused { why },
    }
}

/// An OTLP/HTTP error body is a `google.rpc.Status` (its field 2 the message); a receiver
/// may answer plain text too. Either way, a short printable excerpt.
fn status_message(body: &[u8]) -> String {
    #[derive(Clone, PartialEq, prost::Message)]
    struct Status {
        #[prost(int32, tag = "1")]
        code: i32,
        #[prost(string, tag = "2")]
        message: String,
    }
    let text = match Status::decode(body) {
        Ok(s) if !s.message.is_empty() => s.message,
        _ => String::from_utf8_lossy(body).into_owned(),
    };
    let text: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
    if text.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", text.trim())
    }
}

/// `Retry-After` as seconds (RFC 9110 §10.2.3; an HTTP date is read as no advice).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}
