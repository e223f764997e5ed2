//! A loopback upstream on raw TCP: every fault writes the exact HTTP/1.1 bytes it needs, including
//! the ones no well-behaved server library would send (a stalled body, one byte a second, a reset).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::sidecar::free_port;

/// What the upstream does once it has read a request.
#[derive(Debug, Clone)]
pub(crate) enum Fault {
    /// A complete response with `Content-Length`, then close.
    Respond {
        status: &'static str,
        headers: Vec<(&'static str, String)>,
        body: Bytes,
    },
    /// Never writes a byte; holds the connection until the peer leaves.
    Silent,
    /// Headers announcing 1 MiB of body, 64 bytes of it, then nothing.
    StallMidBody,
    /// A valid response written one byte per second.
    Trickle(Bytes),
    /// `302` to its own URL, forever.
    RedirectToSelf,
    /// A 200 without `Content-Length`: `chunk` written `times` times, then close.
    Stream { chunk: Bytes, times: usize },
    /// Closes with `SO_LINGER 0`, so the client sees a reset instead of a response.
    Reset,
    /// Half a status line and header block, then close.
    PartialHeaders,
}

impl Fault {
    /// A 200 text 0.0.4 response.
    pub(crate) fn text(body: impl Into<Bytes>) -> Fault {
        Fault::ok("text/plain; version=0.0.4; charset=utf-8", body)
    }

    /// A 200 response of the given content type.
    pub(crate) fn ok(content_type: &str, body: impl Into<Bytes>) -> Fault {
        Fault::Respond {
            status: "200 OK",
            headers: vec![("Content-Type", content_type.to_string())],
            body: body.into(),
        }
    }

    /// An error status with a short plain body.
    pub(crate) fn status(status: &'static str) -> Fault {
        Fault::Respond {
            status,
            headers: vec![("Content-Type", "text/plain".to_string())],
            body: Bytes::from(format!("{status}\n")),
        }
    }
}

/// A running raw upstream; it stops with the test's runtime.
pub(crate) struct RawUpstream {
    pub(crate) addr: SocketAddr,
    requests: Arc<AtomicUsize>,
}

impl RawUpstream {
    pub(crate) async fn start(fault: Fault) -> RawUpstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let requests = Arc::new(AtomicUsize::new(0));
        let fault = Arc::new(fault);
        let counter = requests.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let fault = fault.clone();
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut stream = stream;
                    if read_request(&mut stream).await.is_ok() {
                        counter.fetch_add(1, Ordering::SeqCst);
                        // Write errors only mean the client gave up, which is what faults provoke.
                        let _ = respond(stream, &fault, addr).await;
                    }
                });
            }
        });
        RawUpstream { addr, requests }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }

    /// Requests read so far.
    pub(crate) fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// A loopback URL where nothing listens: the port was bound once, then released.
pub(crate) fn refused_url() -> String {
    format!("http://127.0.0.1:{}/metrics", free_port())
}

/// Reads up to the end of the request head (a GET has no body).
async fn read_request(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 2048];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&buf[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            return Ok(());
        }
        if head.len() > 64 << 10 {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
    }
}

/// Reads until the peer closes, so a held connection ends with the client.
async fn hold(mut stream: TcpStream) {
    let mut buf = [0u8; 1024];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}

fn head(status: &str, headers: &[(&str, String)], content_length: Option<usize>) -> Vec<u8> {
    let mut h = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (k, v) in headers {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(n) = content_length {
        h.push_str(&format!("Content-Length: {n}\r\n"));
    }
    h.push_str("\r\n");
    h.into_bytes()
}

async fn respond(mut stream: TcpStream, fault: &Fault, addr: SocketAddr) -> std::io::Result<()> {
    match fault {
        Fault::Respond {
            status,
            headers,
            body,
        } => {
            stream
                .write_all(&head(status, headers, Some(body.len())))
                .await?;
            stream.write_all(body).await?;
            stream.shutdown().await?;
        }
        Fault::Silent => hold(stream).await,
        Fault::StallMidBody => {
            let headers = [("Content-Type", "text/plain; version=0.0.4".to_string())];
            stream
                .write_all(&head("200 OK", &headers, Some(1 << 20)))
                .await?;
            stream
                .write_all(
                    b"# TYPE vllm:stalled gauge\nvllm:stalled{phase=\"mid-body\"} 1\nvllm:st",
                )
                .await?;
            hold(stream).await;
        }
        Fault::Trickle(body) => {
            let headers = [("Content-Type", "text/plain; version=0.0.4".to_string())];
            let mut all = head("200 OK", &headers, Some(body.len()));
            all.extend_from_slice(body);
            for byte in all {
                stream.write_all(&[byte]).await?;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        Fault::RedirectToSelf => {
            let headers = [("Location", format!("http://{addr}/metrics"))];
            stream
                .write_all(&head("302 Found", &headers, Some(0)))
                .await?;
            stream.shutdown().await?;
        }
        Fault::Stream { chunk, times } => {
            let headers = [("Content-Type", "text/plain; version=0.0.4".to_string())];
            stream.write_all(&head("200 OK", &headers, None)).await?;
            for _ in 0..*times {
                stream.write_all(chunk).await?;
            }
            stream.shutdown().await?;
        }
        Fault::Reset => {
            // Deprecated because a non-zero linger blocks the thread on drop; zero never does.
            #[allow(deprecated)]
            stream.set_linger(Some(Duration::ZERO))?;
            drop(stream);
        }
        Fault::PartialHeaders => {
            stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/pl")
                .await?;
            stream.shutdown().await?;
        }
    }
    Ok(())
}
