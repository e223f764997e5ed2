//! Each upstream checked on its own schedule, through the real binary: a hanging neighbour
//! delays no other upstream's checks, nor how soon `/health` tells of its failure.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::sidecar::Sidecar;
use common::{KeepAlive, Reply, Upstream, eventually, keep_alive_engine};
use tokio::net::TcpListener;

const PAGE: &str = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n";

/// A loopback port that accepts connections and never answers, holding each until the test
/// ends; returns how many it took.
async fn hanging() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let taken = Arc::new(AtomicUsize::new(0));
    let count = taken.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        // Bounded: 20 upstreams, one connection each at a time, for the few seconds of the test.
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(tcp);
            if held.len() > 1_000 {
                held.remove(0);
            }
        }
    });
    (format!("http://{addr}"), taken)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_hanging_upstreams_delay_neither_a_healthy_ones_checks_nor_its_failure() {
    // Measured before: one check loop joined every upstream's check, so a healthy upstream was
    // checked only when the hanging ones timed out (every 10 s), and its failure reached
    // /health up to 10 s late.
    let healthy = Upstream::start(Reply::text(PAGE)).await;
    let (hang, taken) = hanging().await;
    let metrics = healthy.metrics_url();
    let sp = Sidecar::launch("checks-own-schedule")
        .config(|port| {
            let mut y = format!(
                "listen: {{host: 127.0.0.1, port: {port}}}\n\
                 health: {{interval: 1s}}\n\
                 shutdown: {{drain_delay: 0s}}\n\
                 upstreams:\n  - name: healthy\n    url: {metrics}\n    keep: [\"vllm:\"]\n    \
                 timeout: 2s\n"
            );
            for i in 0..20 {
                y.push_str(&format!(
                    "  - name: hanging{i}\n    url: {hang}/{i}/metrics\n    keep: [\"vllm:\"]\n    \
                     timeout: 10s\n    required: false\n"
                ));
            }
            y
        })
        .start()
        .await;
    eventually(Duration::from_secs(5), "ready", || async {
        sp.get("/health", &[]).await.status == 200
    })
    .await;
    eventually(Duration::from_secs(5), "the hanging ones asked", || async {
        taken.load(Ordering::SeqCst) >= 20
    })
    .await;
    // Checked every second while the others hang (their checks take 10 s each).
    let before = healthy.requests();
    let window = Duration::from_secs(6);
    tokio::time::sleep(window).await;
    let checks = healthy.requests() - before;
    assert!(
        (5..=8).contains(&checks),
        "{checks} checks of the healthy upstream in {window:?}"
    );
    // Its failure is on /health within one interval and its own timeout.
    let mut failing = Reply::text("engine error");
    failing.status = StatusCode::INTERNAL_SERVER_ERROR;
    healthy.set(failing);
    let failed = Instant::now();
    let within = Duration::from_secs(1) + Duration::from_secs(2);
    eventually(within + Duration::from_secs(1), "/health 503", || async {
        sp.get("/health", &[]).await.status == 503
    })
    .await;
    let took = failed.elapsed();
    // And its recovery.
    healthy.set(Reply::text(PAGE));
    eventually(
        within + Duration::from_secs(1),
        "/health 200 again",
        || async { sp.get("/health", &[]).await.status == 200 },
    )
    .await;
    let log = sp.stop().await;
    assert!(took <= within + Duration::from_secs(1), "{took:?}\n{log}");
}

/// A sidecar `test` in front of the engine at `engine` (its `/metrics` and `/health`), checked
/// every `interval` with `timeout`, without canaries; once `/health` says 200.
async fn ready_sidecar(test: &str, engine: &str, interval: &str, timeout: &str) -> Sidecar {
    let sp = Sidecar::launch(test)
        .config(|port| {
            format!(
                "listen: {{host: 127.0.0.1, port: {port}}}\n\
                 health: {{interval: {interval}}}\n\
                 shutdown: {{drain_delay: 0s}}\n\
                 upstreams:\n  - name: vllm\n    url: {engine}/metrics\n    \
                 health_url: {engine}/health\n    keep: [\"vllm:\"]\n    timeout: {timeout}\n    \
                 canary_after: 0s\n"
            )
        })
        .start()
        .await;
    eventually(Duration::from_secs(5), "ready", || async {
        sp.get("/health", &[]).await.status == 200
    })
    .await;
    sp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_every_5s_never_meets_an_engines_5s_keep_alive_closing() {
    // Before, idle connections were kept 60 s: with checks every 5 s (the default) each check
    // went out on the connection the last one left, idle just under 5 s, and met the engine's
    // keep-alive close often enough to flip /health to 503 for a whole interval
    // ("connection reset or closed mid-response").
    let KeepAlive {
        url: engine,
        closed,
        ..
    } = keep_alive_engine(PAGE, Some(Duration::from_millis(4500)), || {}).await;
    let sp = ready_sidecar("checks-keep-alive", &engine, "5s", "2s").await;
    // Four checks after the first, /health read every 100 ms.
    let until = Instant::now() + Duration::from_secs(21);
    let mut not_ready = Vec::new();
    while Instant::now() < until {
        let r = sp.get("/health", &[]).await;
        if r.status != 200 {
            not_ready.push(String::from_utf8_lossy(&r.body).into_owned());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = sp.stop().await;
    assert_eq!(
        closed.load(Ordering::SeqCst),
        0,
        "requests sent on connections the engine was closing\n{log}"
    );
    assert!(
        not_ready.is_empty(),
        "/health: {:?}\n{log}",
        &not_ready[..not_ready.len().min(3)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_whose_kept_alive_connection_closes_as_it_goes_out_is_sent_again() {
    // The engine answers one request per connection and closes it, without an answer, when the
    // next one arrives on it: the race of its keep-alive close with a request that went out as
    // it fired, here on every request sent on a kept-alive connection. A CI run met it when
    // sysport came back from 6 s without a CPU: it had taken a connection from the pool, the
    // engines closed theirs meanwhile, and both engines' checks "closed mid-response", both
    // counted down, an incident each, /health 503. Before: every check and scrape after the
    // first failed so, /health 503, vllm down on the page.
    let KeepAlive {
        url: engine,
        closed,
        ..
    } = keep_alive_engine(PAGE, Some(Duration::ZERO), || {}).await;
    let sp = ready_sidecar("checks-closed-as-sent", &engine, "500ms", "2s").await;
    let until = Instant::now() + Duration::from_secs(6);
    let (mut not_ready, mut down) = (Vec::new(), 0);
    while Instant::now() < until {
        let r = sp.get("/health", &[]).await;
        if r.status != 200 {
            not_ready.push(String::from_utf8_lossy(&r.body).into_owned());
        }
        let page = String::from_utf8_lossy(&sp.get("/metrics", &[]).await.body).into_owned();
        if !page.contains("vllm:num_requests_running 0")
            || !page.contains("dynamo_sysport_upstream_up{upstream=\"vllm\"} 1")
        {
            down += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = sp.stop().await;
    let closed = closed.load(Ordering::SeqCst);
    assert!(closed >= 20, "only {closed} requests met a close\n{log}");
    assert!(
        not_ready.is_empty(),
        "/health: {:?}\n{log}",
        &not_ready[..not_ready.len().min(3)]
    );
    assert_eq!(down, 0, "pages without vllm's series\n{log}");
    assert!(
        !log.contains("not healthy") && !log.contains("is down"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_came_while_sysport_was_off_the_cpu_past_the_timeout_is_not_a_timeout() {
    // A CPU engine busy on every core kept sysport's threads runnable without a CPU for seconds
    // (measured in the real-engines run at equal priority: 2.0 s of 2.0 s). Here sysport is
    // stopped (SIGSTOP) just as the engine gets a check, and continued 3.5 s later, past the
    // check's 2 s timeout; the engine answers at once meanwhile. Before: the client's timeout,
    // polled first as sysport came back, called the check "timed out after 2s": vllm down,
    // /health 503, an incident opened, for sysport's own lateness.
    let stopped = Arc::new(AtomicU32::new(0));
    let armed = stopped.clone();
    let KeepAlive { url: engine, .. } = keep_alive_engine(PAGE, None, move || {
        let pid = armed.swap(0, Ordering::SeqCst);
        if pid == 0 {
            return;
        }
        signal(pid, "-STOP");
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(3500));
            signal(pid, "-CONT");
        });
    })
    .await;
    let sp = ready_sidecar("checks-off-cpu", &engine, "1s", "2s").await;
    for round in 0..2 {
        stopped.store(sp.pid(), Ordering::SeqCst);
        eventually(Duration::from_secs(5), "a check met the stop", || async {
            stopped.load(Ordering::SeqCst) == 0
        })
        .await;
        // Continued 3.5 s after the stop; then two more checks.
        tokio::time::sleep(Duration::from_millis(5500)).await;
        let r = sp.get("/health", &[]).await;
        assert_eq!(
            r.status,
            200,
            "round {round}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    let log = sp.stop().await;
    assert!(
        !log.contains("not healthy") && !log.contains("timed out"),
        "a check timed out for sysport's own lateness:\n{log}"
    );
}

/// Sends `sig` (`-STOP`, `-CONT`) to process `pid`.
fn signal(pid: u32, sig: &str) {
    let sent = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(sent.success(), "kill {sig} {pid}");
}
