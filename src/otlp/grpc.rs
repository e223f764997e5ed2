//! OTLP/gRPC: one unary call of `opentelemetry.proto.collector.metrics.v1.MetricsService/Export`
//! over hyper's HTTP/2 client (h2c, or TLS with ALPN `h2`).
//!
//! A unary call is a POST with a length-prefixed message and an answer whose `grpc-status`
//! comes in the trailers (gRPC over HTTP/2, "PROTOCOL-HTTP2.md"). sysport makes one call a
//! minute, so a connection per export is cheap, and this keeps tonic, its code generator and
//! its tower stack out of the build.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;

use super::answer::{Answer, error_chain, read_file, taken};
use crate::config::OtlpConfig;

const PATH: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// Why the gRPC client could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GrpcSetupError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{what} holds no usable PEM data")]
    Pem { what: &'static str },
    #[error("TLS settings: {0}")]
    Tls(#[from] rustls::Error),
}

/// The gRPC client of one configuration.
pub(crate) struct Grpc {
    tls: Option<tokio_rustls::TlsConnector>,
}

impl Grpc {
    /// TLS for an `https` endpoint: the CA file's roots (else the Mozilla roots), and the client
    /// certificate when configured.
    pub(crate) fn new(config: &OtlpConfig) -> Result<Grpc, GrpcSetupError> {
        if config.endpoint.scheme() != "https" {
            return Ok(Grpc { tls: None });
        }
        let read = |p: &std::path::Path| {
            read_file(p).map_err(|(path, source)| GrpcSetupError::Read { path, source })
        };
        let mut roots = rustls::RootCertStore::empty();
        match &config.certificate {
            Some(ca) => {
                for cert in CertificateDer::pem_slice_iter(&read(ca)?) {
                    let cert = cert.map_err(|_| GrpcSetupError::Pem {
                        what: "the CA file",
                    })?;
                    roots.add(cert)?;
                }
                if roots.is_empty() {
                    return Err(GrpcSetupError::Pem {
                        what: "the CA file",
                    });
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let mut tls = match (&config.client_certificate, &config.client_key) {
            (Some(cert), Some(key)) => {
                let chain: Vec<CertificateDer<'static>> =
                    CertificateDer::pem_slice_iter(&read(cert)?)
                        .collect::<Result<_, _>>()
                        .map_err(|_| GrpcSetupError::Pem {
                            what: "the client certificate",
                        })?;
                let key = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|_| {
                    GrpcSetupError::Pem {
                        what: "the client key",
                    }
                })?;
                builder.with_client_auth_cert(chain, key)?
            }
            _ => builder.with_no_client_auth(),
        };
        tls.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Grpc {
            tls: Some(tokio_rustls::TlsConnector::from(Arc::new(tls))),
        })
    }

    /// One call, within the configured timeout.
    pub(crate) async fn send(&self, config: &OtlpConfig, body: Bytes, gzip: bool) -> Answer {
        match tokio::time::timeout(config.timeout, self.call(config, body, gzip)).await {
            Ok(answer) => answer,
            Err(_) => Answer::Retry {
                after: None,
                why: format!("no answer within {:?}", config.timeout),
            },
        }
    }

    async fn call(&self, config: &OtlpConfig, body: Bytes, gzip: bool) -> Answer {
        let url = &config.endpoint;
        let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
        let port = url.port_or_known_default().unwrap_or(4317);
        let tcp = match TcpStream::connect((host, port)).await {
            Ok(s) => s,
            Err(err) => return retry(format!("cannot connect to {host}:{port}: {err}")),
        };
        let _ = tcp.set_nodelay(true);
        let mut sender = match &self.tls {
            None => match handshake(tcp).await {
                Ok(s) => s,
                Err(why) => return retry(why),
            },
            Some(tls) => {
                let Ok(name) = ServerName::try_from(host.to_owned()) else {
                    return Answer::Refused {
                        why: format!("{host:?} is no TLS server name"),
                    };
                };
                match tls.connect(name, tcp).await {
                    Ok(stream) => match handshake(stream).await {
                        Ok(s) => s,
                        Err(why) => return retry(why),
                    },
                    Err(err) => return retry(format!("TLS handshake: {err}")),
                }
            }
        };
        let mut framed = BytesMut::with_capacity(body.len() + 5);
        framed.put_u8(u8::from(gzip));
        framed.put_u32(u32::try_from(body.len()).unwrap_or(u32::MAX));
        framed.put_slice(&body);
        let authority = match url.port() {
            Some(p) => format!("{}:{p}", url.host_str().unwrap_or_default()),
            None => url.host_str().unwrap_or_default().to_owned(),
        };
        let uri = format!("{}://{authority}{PATH}", url.scheme());
        let mut req = Request::post(uri)
            .header("content-type", "application/grpc+proto")
            .header("te", "trailers")
            .header("grpc-timeout", format!("{}m", config.timeout.as_millis()))
            .header("user-agent", concat!("sysport/", env!("CARGO_PKG_VERSION")));
        if gzip {
            req = req.header("grpc-encoding", "gzip");
        }
        for (k, v) in &config.headers {
            req = req.header(k.to_ascii_lowercase(), v.as_str());
        }
        let req = match req.body(Full::new(framed.freeze())) {
            Ok(r) => r,
            Err(err) => {
                return Answer::Refused {
                    why: format!("request: {err}"),
                };
            }
        };
        let response = match sender.send_request(req).await {
            Ok(r) => r,
            Err(err) => return retry(format!("request failed: {}", error_chain(&err))),
        };
        let status = response.status();
        let headers = response.headers().clone();
        if !status.is_success() {
            let why = format!("HTTP {status} from a gRPC endpoint");
            return match status.as_u16() {
                429 | 502 | 503 | 504 => retry(why),
                413 => Answer::TooLarge { why },
                _ => Answer::Refused { why },
            };
        }
        let collected = match response.into_body().collect().await {
            Ok(c) => c,
            Err(err) => return retry(format!("answer cut off: {err}")),
        };
        let trailers = collected.trailers().cloned().unwrap_or_default();
        let data = collected.to_bytes();
        let field = |name: &str| {
            trailers
                .get(name)
                .or_else(|| headers.get(name))
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let code: u32 = field("grpc-status")
            .and_then(|c| c.parse().ok())
            .unwrap_or(2);
        let message = field("grpc-message")
            .map(|m| percent_decode(&m))
            .unwrap_or_default();
        let why = format!("gRPC status {code} ({}): {message}", code_name(code));
        match code {
            0 => {
                let message = data.get(5..).unwrap_or_default();
                let compressed = data.first() == Some(&1);
                if compressed {
                    let mut out = Vec::new();
                    let mut d = flate2::read::GzDecoder::new(message);
                    if std::io::Read::read_to_end(&mut d, &mut out).is_ok() {
                        return taken(&out);
                    }
                }
                taken(message)
            }
            8 if is_about_size(&message) => Answer::TooLarge { why },
            8 | 14 => Answer::Retry { after: None, why },
            _ => Answer::Refused { why },
        }
    }
}

fn retry(why: String) -> Answer {
    Answer::Retry { after: None, why }
}

async fn handshake<S>(
    stream: S,
) -> Result<hyper::client::conn::http2::SendRequest<Full<Bytes>>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .keep_alive_timeout(Duration::from_secs(20))
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|err| format!("HTTP/2 handshake: {}", error_chain(&err)))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// RESOURCE_EXHAUSTED is also a receiver's answer to a message over its size limit (grpc-go:
/// "received message larger than max", "message too large").
fn is_about_size(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "larger than max",
        "too large",
        "exceeds",
        "message size",
        "max size",
    ]
    .iter()
    .any(|w| m.contains(w))
}

fn code_name(code: u32) -> &'static str {
    match code {
        0 => "OK",
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        16 => "UNAUTHENTICATED",
        _ => "other",
    }
}

/// `grpc-message` is percent-encoded (PROTOCOL-HTTP2.md).
fn percent_decode(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%')
            .then(|| b.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
