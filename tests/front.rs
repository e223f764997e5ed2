//! The probes under a TLS handshake flood, through the real binary: a client that replays one
//! captured ClientHello from 200 connections (it does nothing more; the server does the key
//! exchange and an RSA-4096 signature each time) reaches neither the probe port's thread nor
//! more than its share of handshakes.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::pki::Pki;
use common::sidecar::{Sidecar, free_port};
use common::{Reply, Upstream, metric};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

const PAGE: &str = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n";

/// The first flight of a TLS client to `localhost`: one ClientHello, as a replayer captures it.
fn client_hello() -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).expect("ClientHello");
    hello
}

/// One replaying connection from `from`, again and again until `stop`: connect, send the
/// ClientHello, wait for sysport to close. Counts the connections it made.
async fn replay(
    from: SocketAddr,
    to: SocketAddr,
    hello: Arc<Vec<u8>>,
    stop: Arc<AtomicBool>,
    made: Arc<AtomicU64>,
) {
    while !stop.load(Ordering::Relaxed) {
        let socket = TcpSocket::new_v4().expect("socket");
        socket.bind(from).expect("bind the flood's source address");
        let Ok(mut tcp) = socket.connect(to).await else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        made.fetch_add(1, Ordering::Relaxed);
        if tcp.write_all(&hello).await.is_err() {
            continue;
        }
        let mut sink = [0u8; 8192];
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            let read = tokio::time::timeout(Duration::from_millis(200), tcp.read(&mut sink));
            if let Ok(Ok(0) | Err(_)) = read.await {
                break;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_flood_reaches_neither_the_probe_port_nor_more_than_its_share() {
    let pki = Pki::new("flood");
    pki.ca("ca");
    pki.leaf_rsa("ca", "server", "DNS:localhost,IP:127.0.0.1", 4096);
    std::fs::write(
        pki.path("web.yml"),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    )
    .expect("web config");
    let engine = Upstream::start(Reply::text(PAGE)).await;
    let probe_port = free_port();
    let web = pki.path("web.yml");
    let sp = Sidecar::launch("flood")
        .config(|port| {
            format!(
                "listen: {{host: 127.0.0.1, port: {port}, probe_port: {probe_port}, \
                 web_config_file: {}}}\n\
                 shutdown: {{drain_delay: 0s}}\n\
                 upstreams:\n  - name: vllm\n    url: {}\n    canary_after: 0s\n",
                web.display(),
                engine.metrics_url()
            )
        })
        .live_at(format!("http://127.0.0.1:{probe_port}/live"))
        .start()
        .await;
    let main: SocketAddr = ([127, 0, 0, 1], sp.port).into();

    // 200 replaying connections from 127.0.0.2, for ten seconds.
    let hello = Arc::new(client_hello());
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicU64::new(0));
    let flood: Vec<_> = (0..200)
        .map(|_| {
            let from: SocketAddr = ([127, 0, 0, 2], 0).into();
            tokio::spawn(replay(
                from,
                main,
                hello.clone(),
                stop.clone(),
                made.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Meanwhile the kubelet probes the probe port every 50 ms, and a client of its own (from
    // 127.0.0.1) asks `/live` over TLS.
    let tls = pki.client("ca", None);
    let tls_live = tokio::spawn(async move {
        let started = Instant::now();
        let r = tls
            .get(format!("https://localhost:{}/live", main.port()))
            .timeout(Duration::from_secs(8))
            .send()
            .await;
        (r.map(|r| r.status().as_u16()), started.elapsed())
    });
    let mut times = Vec::new();
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        let (code, took) = common::probe(probe_port, "/live").await;
        assert_eq!(code, 200, "the probe port's /live");
        times.push(took);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (tls_answer, tls_took) = tls_live.await.expect("task");
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        let _ = f.await;
    }

    times.sort();
    let p99 = times[times.len() * 99 / 100];
    let connections = made.load(Ordering::Relaxed);
    eprintln!(
        "probe-port /live: {} probes, p50 {:?}, p99 {p99:?}, slowest {:?}; TLS /live {:?} after \
         {tls_took:?}; the flood made {connections} connections",
        times.len(),
        times[times.len() / 2],
        times.last(),
        tls_answer.as_ref().ok(),
    );
    assert!(
        connections >= 200,
        "the flood made {connections} connections"
    );
    assert!(
        p99 < Duration::from_millis(100),
        "probe-port /live p99 {p99:?} under a handshake flood of {connections} connections \
         (slowest {:?})",
        times.last()
    );
    assert_eq!(
        tls_answer.ok(),
        Some(200),
        "/live over TLS answered during the flood (after {tls_took:?})"
    );
    // The flood's source was held to its share: most of its connections closed unhandshaken.
    let page = pki
        .client("ca", None)
        .get(format!("https://localhost:{}/metrics", main.port()))
        .send()
        .await
        .expect("metrics over TLS")
        .text()
        .await
        .expect("body");
    let busy = metric(&page, "dynamo_sysport_http_connections_closed_total")
        .label("reason", "tls_busy")
        .value();
    assert!(
        busy > connections as f64 / 2.0,
        "{busy} of {connections} connections closed as over the source's share"
    );
}
