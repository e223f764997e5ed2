//! The web configuration (exporter-toolkit's format) in force: HTTPS, basic auth in front of
//! everything but the probes, certificates re-read from disk, client certificates, and the
//! configuration errors that name the web file's line. Certificates are made with `openssl`.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use common::pki::Pki;
use common::{Reply, Running, Upstream, eventually, metric};
use sysport::config::{self, Config, Overrides};
use sysport::server::Sysport;
use tokio::net::TcpListener;

const PAGE: &str = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 4\n";

/// The configuration for one upstream at `url` with the web configuration `web_yaml` written
/// next to the certificates.
fn load(pki: &Pki, web_yaml: &str, url: &str) -> Result<Config, config::ConfigError> {
    let web = pki.path("web.yml");
    std::fs::write(&web, web_yaml).expect("write web config");
    let overrides = Overrides {
        host: Some("127.0.0.1".parse().expect("ip")),
        port: Some(0),
        upstreams: vec![format!("vllm={url}")],
        web_config: Some(web),
        ..Overrides::default()
    };
    sysport::server::load_config(&overrides, &HashMap::<String, String>::new())
}

/// The body of `path` over HTTPS with the `prometheus` user's credentials.
async fn as_prometheus(client: &reqwest::Client, running: &Running, path: &str) -> String {
    client
        .get(https(running, path))
        .basic_auth("prometheus", Some("s3cret"))
        .send()
        .await
        .expect("answers")
        .text()
        .await
        .expect("body")
}

fn https(running: &Running, path: &str) -> String {
    format!("{}{path}", running.base.replace("http://", "https://"))
}

#[tokio::test]
async fn https_with_basic_auth_guards_metrics_and_leaves_the_probes_open() {
    let pki = Pki::new("basic");
    pki.ca("ca");
    pki.leaf("ca", "server", "DNS:localhost,IP:127.0.0.1");
    let engine = Upstream::start(Reply::text(PAGE)).await;
    let hash = bcrypt::hash("s3cret", 4).expect("hash");
    let web = format!(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
         basic_auth_users:\n  prometheus: '{hash}'\n\
         http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
    );
    let config = load(&pki, &web, &engine.metrics_url()).expect("valid");
    let sp = Running::start(config).await;
    let client = pki.client("ca", None);

    let anonymous = client
        .get(https(&sp, "/metrics"))
        .send()
        .await
        .expect("answers");
    assert_eq!(anonymous.status(), 401);
    assert!(anonymous.headers().contains_key("www-authenticate"));
    assert_eq!(anonymous.headers()["x-frame-options"], "deny");
    for (user, password) in [("prometheus", "wrong"), ("nobody", "s3cret")] {
        let r = client
            .get(https(&sp, "/metrics"))
            .basic_auth(user, Some(password))
            .send()
            .await
            .expect("answers");
        assert_eq!(r.status(), 401, "{user}:{password}");
    }
    for _ in 0..3 {
        let r = client
            .get(https(&sp, "/metrics"))
            .basic_auth("prometheus", Some("s3cret"))
            .send()
            .await
            .expect("answers");
        assert_eq!(r.status(), 200);
        let body = r.text().await.expect("body");
        assert_eq!(metric(&body, "vllm:num_requests_running").value(), 4.0);
    }
    // The probes need no credentials; an unknown path still does.
    let live = client
        .get(https(&sp, "/live"))
        .send()
        .await
        .expect("answers");
    assert_eq!(live.status(), 200);
    assert_eq!(live.headers()["x-frame-options"], "deny");
    let health = client
        .get(https(&sp, "/health"))
        .send()
        .await
        .expect("answers");
    assert_ne!(health.status(), 401);
    // Without credentials a probe tells the status and each upstream's ready or not only:
    // no error texts, checks or engine numbers for whoever can reach the port.
    let body: serde_json::Value =
        serde_json::from_str(&health.text().await.expect("body")).expect("JSON");
    let keys: Vec<&String> = body.as_object().expect("object").keys().collect();
    assert_eq!(keys, ["endpoints", "status"], "{body}");
    assert!(body["endpoints"]["vllm"].is_string(), "{body}");
    // With credentials, the whole body.
    let full: serde_json::Value =
        serde_json::from_str(&as_prometheus(&client, &sp, "/health").await).expect("JSON");
    assert!(full["upstreams"]["vllm"]["check"].is_string(), "{full}");
    assert!(full["uptime"].is_number(), "{full}");
    // The engine container's liveness probe too: the kubelet sends no credentials for it.
    let engine = client
        .get(https(&sp, "/live/engine"))
        .send()
        .await
        .expect("answers");
    assert_eq!(engine.status(), 200);
    let body: serde_json::Value =
        serde_json::from_str(&engine.text().await.expect("body")).expect("JSON");
    let keys: Vec<&String> = body.as_object().expect("object").keys().collect();
    assert_eq!(keys, ["endpoints", "status"], "{body}");
    let other = client
        .get(https(&sp, "/nope"))
        .send()
        .await
        .expect("answers");
    assert_eq!(other.status(), 401);
    // The incidents (engine pages, configuration) are as guarded as /metrics.
    for path in ["/incidents", "/incidents/1-1", "/incidents/1-1.tar.gz"] {
        let anonymous = client.get(https(&sp, path)).send().await.expect("answers");
        assert_eq!(anonymous.status(), 401, "{path}");
    }
    let listed = as_prometheus(&client, &sp, "/incidents").await;
    assert_eq!(listed, "[]");

    // Plain HTTP on the TLS port gets a 400 that says why, and no metrics.
    let plain = common::client()
        .get(sp.url("/metrics"))
        .send()
        .await
        .expect("answers");
    assert_eq!(plain.status(), 400);
    let text = plain.text().await.expect("body");
    assert!(text.contains("HTTP request to an HTTPS server"), "{text}");
    assert!(!text.contains("vllm:"));
    let page = as_prometheus(&client, &sp, "/metrics").await;
    let closed = metric(&page, "dynamo_sysport_http_connections_closed_total");
    assert_eq!(closed.label("reason", "plain_http").value(), 1.0);
    assert!(
        metric(&page, "dynamo_sysport_http_requests_total")
            .label("code", "401")
            .count()
            >= 1
    );
}

/// Writes `name`'s pair over `cert.pem` and `key.pem`, the key first, each with a rename (as
/// the kubelet swaps a Secret's files).
fn install(pki: &Pki, name: &str) {
    for (from, to) in [
        (format!("{name}.key"), "key.pem"),
        (format!("{name}.crt"), "cert.pem"),
    ] {
        let tmp = pki.path(&format!("{to}.tmp"));
        std::fs::copy(pki.path(&from), &tmp).expect("copy");
        std::fs::rename(&tmp, pki.path(to)).expect("rename");
    }
}

#[tokio::test]
async fn a_replaced_certificate_reaches_new_connections_and_a_broken_one_is_kept_out() {
    let pki = Pki::new("reload");
    for ca in ["ca_a", "ca_b"] {
        pki.ca(ca);
    }
    pki.leaf("ca_a", "server_a", "IP:127.0.0.1");
    pki.leaf("ca_b", "server_b", "IP:127.0.0.1");
    install(&pki, "server_a");
    let web = "tls_server_config: { cert_file: cert.pem, key_file: key.pem }\n";
    let config = load(&pki, web, "http://127.0.0.1:9/metrics").expect("valid");
    let sp = Running::start(config).await;
    let (trusts_a, trusts_b) = (pki.client("ca_a", None), pki.client("ca_b", None));
    let live = |client: &reqwest::Client| {
        let request = client.get(https(&sp, "/live")).send();
        async move { request.await.is_ok_and(|r| r.status() == 200) }
    };
    assert!(live(&trusts_a).await);
    assert!(!live(&trusts_b).await);

    // A certificate that is not one: the old pair stays, the failure is counted.
    std::fs::write(
        pki.path("cert.pem"),
        "-----BEGIN CERTIFICATE-----\nbroken\n",
    )
    .expect("write");
    let page = || {
        let request = trusts_a.get(https(&sp, "/metrics")).send();
        async move { request.await.expect("answers").text().await.expect("body") }
    };
    eventually(
        Duration::from_secs(10),
        "the failed reload is counted",
        || async {
            let text = page().await;
            metric(&text, "dynamo_sysport_tls_certificate_reloads_total")
                .label("result", "failure")
                .value()
                >= 1.0
        },
    )
    .await;
    assert!(
        live(&trusts_a).await,
        "the previous certificate is still served"
    );

    install(&pki, "server_b");
    eventually(
        Duration::from_secs(10),
        "the new certificate is served",
        || live(&trusts_b),
    )
    .await;
    assert!(!live(&trusts_a).await);
    let text = trusts_b
        .get(https(&sp, "/metrics"))
        .send()
        .await
        .expect("answers")
        .text()
        .await
        .expect("body");
    assert!(
        metric(&text, "dynamo_sysport_tls_certificate_reloads_total")
            .label("result", "success")
            .value()
            >= 1.0
    );
}

#[tokio::test]
async fn required_client_certificates_refuse_clients_without_one_and_probes_use_their_own_port() {
    let pki = Pki::new("mtls");
    for ca in ["ca", "rogue_ca"] {
        pki.ca(ca);
    }
    pki.leaf("ca", "server", "IP:127.0.0.1");
    pki.leaf("ca", "scraper", "DNS:scraper.example");
    pki.leaf("ca", "other", "DNS:other.example");
    pki.leaf("rogue_ca", "rogue", "DNS:scraper.example");
    let engine = Upstream::start(Reply::text(PAGE)).await;
    let web = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
               client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n";
    let config = load(&pki, web, &engine.metrics_url()).expect("valid");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let probes = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let sysport = Sysport::from_listener(listener, config).with_probe_listener(probes);
    let base = format!("https://{}", sysport.local_addr().expect("addr"));
    let probe_base = format!("http://{}", sysport.probe_addr().expect("probe addr"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(sysport.run(async {
        let _ = stopped.await;
    }));

    let get = |client: reqwest::Client, path: &str| {
        let request = client.get(format!("{base}{path}")).send();
        async move { request.await.map(|r| r.status().as_u16()) }
    };
    assert!(get(pki.client("ca", None), "/metrics").await.is_err());
    assert!(get(pki.client("ca", None), "/live").await.is_err());
    assert!(
        get(pki.client("ca", Some("rogue")), "/metrics")
            .await
            .is_err()
    );
    assert_eq!(
        get(pki.client("ca", Some("scraper")), "/metrics")
            .await
            .ok(),
        Some(200)
    );
    assert_eq!(
        get(pki.client("ca", Some("other")), "/metrics").await.ok(),
        Some(200)
    );

    // The kubelet presents no certificate: it probes the plain probe port, which serves
    // nothing else.
    let plain = common::client();
    let live = plain
        .get(format!("{probe_base}/live"))
        .send()
        .await
        .expect("answers");
    assert_eq!(live.status(), 200);
    let engine = plain
        .get(format!("{probe_base}/live/engine"))
        .send()
        .await
        .expect("answers");
    assert_eq!(engine.status(), 200);
    let metrics = plain
        .get(format!("{probe_base}/metrics"))
        .send()
        .await
        .expect("answers");
    assert_eq!(metrics.status(), 404);
    let _ = stop.send(());
    task.await.expect("task").expect("run");
}

#[tokio::test]
async fn client_allowed_sans_admit_only_certificates_that_carry_one() {
    let pki = Pki::new("sans");
    pki.ca("ca");
    pki.leaf("ca", "server", "IP:127.0.0.1");
    pki.leaf("ca", "scraper", "DNS:scraper.example,email:ops@example.com");
    pki.leaf("ca", "other", "DNS:other.example");
    let web = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
               client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  \
               client_allowed_sans: [ops@example.com]\n";
    let config = load(&pki, web, "http://127.0.0.1:9/metrics").expect("valid");
    let sp = Running::start(config).await;
    let status = |client: reqwest::Client| {
        let request = client.get(https(&sp, "/live")).send();
        async move { request.await.map(|r| r.status().as_u16()).ok() }
    };
    assert_eq!(status(pki.client("ca", Some("scraper"))).await, Some(200));
    assert_eq!(status(pki.client("ca", Some("other"))).await, None);
}

#[tokio::test]
async fn web_config_problems_name_the_web_file_line_and_field() {
    let pki = Pki::new("errors");
    pki.ca("ca");
    pki.leaf("ca", "server", "IP:127.0.0.1");
    let cases: [(&str, &str, &str); 8] = [
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  colour: red\n",
            "4:3",
            "unknown field",
        ),
        (
            "tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n",
            "2:14: tls_server_config.cert_file",
            "missing.crt",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: ca.key\n",
            "3:13: tls_server_config.key_file",
            "do not make a pair",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: Sometimes\n",
            "4:21: tls_server_config.client_auth_type",
            "invalid client_auth_type",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS10\n",
            "4:16: tls_server_config.min_version",
            "TLS 1.2 and 1.3 only",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n",
            "tls_server_config.cipher_suites",
            "not available",
        ),
        (
            "basic_auth_users:\n  prometheus: plaintext\n",
            "2:15: basic_auth_users.prometheus",
            "not a bcrypt hash",
        ),
        (
            "http_server_config:\n  headers:\n    Server: sysport\n",
            "3:5: http_server_config.headers.Server",
            "can not be configured",
        ),
    ];
    for (yaml, place, message) in cases {
        let err = load(&pki, yaml, "http://127.0.0.1:9/metrics").expect_err(yaml);
        let text = err.to_string();
        let web = pki.path("web.yml").display().to_string();
        assert!(text.contains(&web), "names the web file: {text}");
        assert!(text.contains(place), "{place:?} in {text}");
        assert!(text.contains(message), "{message:?} in {text}");
    }
    let err = load(
        &pki,
        "rate_limit: { interval: 1s, burst: 5 }\n",
        "http://127.0.0.1:9/m",
    )
    .expect_err("refused");
    assert!(
        err.to_string().contains("rate_limit: not supported"),
        "{err}"
    );
    assert!(Path::new(&pki.path("web.yml")).exists());
}

/// Sends `GET /metrics` with basic credentials on a raw connection and returns the status code
/// (`None` when the connection closed without an answer).
async fn basic_status(addr: &str, user: &str, password: &str) -> Option<u16> {
    use base64::Engine as _;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let head = format!(
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Basic {token}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.ok()?;
    let mut buf = [0u8; 12];
    s.read_exact(&mut buf).await.ok()?;
    std::str::from_utf8(&buf[9..12]).ok()?.parse().ok()
}

#[tokio::test]
async fn cancelled_and_flooded_logins_leave_a_place_for_a_right_password() {
    let pki = Pki::new("gate");
    let engine = Upstream::start(Reply::text(PAGE)).await;
    // bcrypt at cost 10, as htpasswd -B makes it: tens of milliseconds a check.
    let guessed = bcrypt::hash("right-a", 10).expect("hash");
    let second = bcrypt::hash("right-b", 10).expect("hash");
    let third = bcrypt::hash("right-c", 10).expect("hash");
    let web =
        format!("basic_auth_users:\n  alice: '{guessed}'\n  bob: '{second}'\n  carol: '{third}'\n");
    let config = load(&pki, &web, &engine.metrics_url()).expect("valid");
    let sp = Running::start(config).await;
    let addr = sp.base.trim_start_matches("http://").to_owned();

    // 40 wrong passwords whose connections are reset 20 ms after sending: each request ends
    // while it waits for bcrypt, and must give its place back.
    let mut resets = Vec::new();
    for i in 0..40 {
        let addr = addr.clone();
        resets.push(tokio::spawn(async move {
            use base64::Engine as _;
            use tokio::io::AsyncWriteExt;
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("alice:guess-{i}"));
            let mut s = tokio::net::TcpStream::connect(&addr)
                .await
                .expect("connect");
            let head = format!(
                "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Basic {token}\r\n\r\n"
            );
            s.write_all(head.as_bytes()).await.expect("send");
            tokio::time::sleep(Duration::from_millis(20)).await;
            // A reset (RST), not a close: the server sees the connection fail mid-request. (The
            // deprecation is about a linger that blocks on drop; a zero linger resets at once.)
            #[allow(deprecated)]
            s.set_linger(Some(Duration::ZERO)).expect("linger");
            drop(s);
        }));
    }
    for r in resets {
        r.await.expect("task");
    }
    // A right password never checked before is answered (not refused as if the queue were
    // full), within a few seconds.
    let answered = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match basic_status(&addr, "bob", "right-b").await {
                Some(200) => return,
                Some(429) | None => tokio::time::sleep(Duration::from_millis(100)).await,
                Some(other) => panic!("bob's right password got {other}"),
            }
        }
    })
    .await;
    assert!(answered.is_ok(), "the cancelled checks kept the gate full");

    // 48 clients guessing alice's password; meanwhile a user who never logged in gets 200
    // within a few seconds: the guesses wait behind each other, not in front of carol.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut flood = Vec::new();
    for c in 0..48 {
        let (addr, stop) = (addr.clone(), stop.clone());
        flood.push(tokio::spawn(async move {
            let mut refused = 0u32;
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && n < 100_000 {
                n += 1;
                if basic_status(&addr, "alice", &format!("flood-{c}-{n}")).await == Some(429) {
                    refused += 1;
                }
            }
            refused
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    let mut code = None;
    while started.elapsed() < Duration::from_secs(3) {
        code = basic_status(&addr, "carol", "right-c").await;
        if code == Some(200) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let waited = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut refused = 0;
    for f in flood {
        refused += f.await.expect("task");
    }
    assert!(
        refused > 0,
        "the flood was large enough to fill alice's queue"
    );
    assert_eq!(
        code,
        Some(200),
        "carol's first login waited {waited:?} behind the flood"
    );
    let (code, _) = sp.get("/live").await;
    assert_eq!(code, 200);
}
