//! `sysport`: command line only; everything else is in the library.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sysport::config::{self, Overrides, ProcessEnv};
use sysport::model::{ShownUrl, routes};
use sysport::server::{Handle, Sysport};

/// System-port sidecar for LLM inference workers: one /metrics, /health and /live.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// YAML configuration file (also `SYSPORT_CONFIG`).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Address to listen on (also `DYN_SYSTEM_HOST`; default 0.0.0.0).
    #[arg(long)]
    host: Option<IpAddr>,
    /// Port to listen on (also `DYN_SYSTEM_PORT`; default 8081).
    #[arg(long)]
    port: Option<u16>,
    /// An upstream as NAME=URL; repeatable. Replaces the file's upstream list (also for
    /// `check-config`).
    #[arg(long = "upstream", value_name = "NAME=URL", global = true)]
    upstreams: Vec<String>,
    /// Web configuration file in Prometheus exporter-toolkit's format: TLS, client
    /// certificates, basic auth (also `SYSPORT_WEB_CONFIG`, `listen.web_config_file`).
    #[arg(long = "web.config.file", value_name = "FILE", global = true)]
    web_config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a configuration file and print the effective configuration.
    CheckConfig,
    /// Run simulated vLLM and LMCache endpoints in-process with sysport in front of them.
    Demo {
        /// Port for sysport (the simulated engines take free ports).
        #[arg(long, default_value_t = 8081)]
        port: u16,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1")]
        host: IpAddr,
    },
}

/// Runtime worker threads (`TOKIO_WORKER_THREADS` overrides). One: a sidecar answers a few
/// scrapers, and a large page's parse takes a thread of its own besides. A second worker
/// bought 25% more scrapes/s at 8 connections of a 740 KB page (2,800 → 3,500/s) but cost every
/// single scrape ~0.15 ms of wake-ups between the two threads, and each thread that renders a
/// large page keeps a block of that size in its own glibc arena.
const WORKERS: usize = 1;

/// The allocator: mimalloc gives freed memory back to the OS within milliseconds. glibc's
/// malloc raises its mmap threshold after a large block is freed and then keeps the pages of
/// later page-sized blocks in its arenas: after slow clients that held 15 MB answers left,
/// sysport stayed over a gigabyte (bench/RESULTS.md, "memory after slow readers").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(message) = init_logging() {
        eprintln!("{message}");
        return ExitCode::from(2);
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        builder.worker_threads(WORKERS);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("sysport: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(run(cli))
}

/// The log as `SYSPORT_LOG` (filter) and `SYSPORT_LOG_FORMAT` (`text` or `json`) ask; the
/// problem with the latter, else.
fn init_logging() -> Result<(), String> {
    use sysport::logging::{Format, SYSPORT_LOG_FORMAT};
    let filter = tracing_subscriber::EnvFilter::try_from_env("SYSPORT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let text = std::env::var(SYSPORT_LOG_FORMAT).unwrap_or_default();
    let format = Format::parse(&text).ok_or_else(|| {
        format!("{SYSPORT_LOG_FORMAT}: unknown log format {text:?}: expected text or json")
    })?;
    sysport::logging::init(filter, format);
    Ok(())
}

async fn run(cli: Cli) -> ExitCode {
    let overrides = Overrides {
        config: cli.config.clone(),
        host: cli.host,
        port: cli.port,
        upstreams: cli.upstreams.clone(),
        web_config: cli.web_config.clone(),
    };
    match cli.command {
        Some(Command::CheckConfig) => match sysport::server::load_config(&overrides, &ProcessEnv) {
            Ok(config) => {
                use std::io::Write as _;
                // `check-config | head` closes the pipe early: that is not an error.
                let fd_limit = sysport::listener::fds::fd_hard_limit();
                let cap = sysport::listener::fds::default_max_connections(fd_limit);
                let rendered = config.render().with_connection_cap(cap, fd_limit);
                match write!(std::io::stdout().lock(), "{rendered}") {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                    Err(err) => {
                        eprintln!("sysport: cannot print the configuration: {err}");
                        ExitCode::from(1)
                    }
                }
            }
            Err(err) => {
                eprintln!("{err}");
                ExitCode::from(2)
            }
        },
        Some(Command::Demo { port, host }) => demo(host, port).await,
        None => {
            let config = match sysport::server::load_config(&overrides, &ProcessEnv) {
                Ok(c) => c,
                Err(err) => {
                    eprintln!("{err}");
                    return ExitCode::from(2);
                }
            };
            serve(config, overrides).await
        }
    }
}

async fn serve(config: config::Config, overrides: Overrides) -> ExitCode {
    let upstreams: Vec<String> = config
        .upstreams
        .iter()
        .map(|u| format!("{}={}", u.name, ShownUrl(&u.url)))
        .collect();
    let (sysport, addr) = match bind(config).await {
        Ok(bound) => bound,
        Err(code) => return code,
    };
    tracing::info!(%addr, upstreams = ?upstreams, "sysport listening");
    let handle = sysport.handle();
    tokio::spawn(reload_on_sighup(handle.clone(), overrides));
    match sysport.run(signals(handle)).await {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(err) => {
            tracing::error!(error = %err, "server failed");
            ExitCode::from(1)
        }
    }
}

/// Raises the open-file limit, then binds the configured address; a failure is logged and
/// becomes exit code 1.
async fn bind(config: config::Config) -> Result<(Sysport, String), ExitCode> {
    if let Some((Some(before), Some(after))) = sysport::listener::fds::raise_fd_limit()
        && before != after
    {
        tracing::debug!(before, after, "raised the open-file limit");
    }
    match Sysport::bind(config).await {
        Ok(sysport) => {
            let addr = sysport
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            Ok((sysport, addr))
        }
        Err(err) => {
            tracing::error!("{err}");
            Err(ExitCode::from(1))
        }
    }
}

/// Resolves on the first SIGTERM or SIGINT; a second one exits at once.
async fn signals(_handle: Handle) {
    wait_for_signal().await;
    tokio::spawn(async {
        wait_for_signal().await;
        tracing::warn!("second signal: exiting now");
        std::process::exit(130);
    });
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler installs");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}

/// SIGHUP re-reads the configuration file with the same flags and environment; an invalid file
/// is refused and the running configuration stays.
#[cfg(unix)]
async fn reload_on_sighup(handle: Handle, overrides: Overrides) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    while hup.recv().await.is_some() {
        if handle.config().source.is_none() {
            tracing::warn!("SIGHUP ignored: sysport was started without a configuration file");
            handle.reload_failed();
            continue;
        }
        match sysport::server::load_config(&overrides, &ProcessEnv) {
            Ok(new) => handle.reload(new),
            Err(err) => {
                tracing::error!(error = %err, "configuration reload refused; the previous configuration stays");
                handle.reload_failed();
            }
        }
    }
}

#[cfg(not(unix))]
async fn reload_on_sighup(_handle: Handle, _overrides: Overrides) {}

async fn demo(host: IpAddr, port: u16) -> ExitCode {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let engines = match sysport::demo::DemoUpstreams::start(host, async {
        let _ = stop_rx.await;
    })
    .await
    {
        Ok(e) => e,
        Err(err) => {
            tracing::error!(error = %err, "cannot start the simulated engines");
            return ExitCode::from(1);
        }
    };
    let config = demo_config(&engines, host, port);
    let (sysport, addr) = match bind(config).await {
        Ok(bound) => bound,
        Err(code) => return code,
    };
    println!(
        "sysport demo: simulated vLLM at {} and LMCache at {}",
        engines.vllm_metrics_url(),
        engines.lmcache_metrics_url()
    );
    println!("  status page: http://{addr}/ (the same facts as JSON: /status)");
    println!("  metrics:   http://{addr}/metrics");
    println!("  readiness: http://{addr}/health");
    println!("  liveness:  http://{addr}/live");
    println!(
        "  for endpoint pickers (two data-parallel engines, combined): http://{addr}/metrics/router"
    );
    println!(
        "  a selective read: http://{addr}/metrics?name=vllm:num_requests_waiting&name=vllm:kv_cache_usage_perc"
    );
    println!(
        "  the engine's liveness (stall_after {}s): http://{addr}/live/engine",
        DEMO_STALL_AFTER.as_secs()
    );
    println!(
        "To watch a stall, hang the simulated engine with requests running (its own /health stays 200):"
    );
    println!("  curl -X POST {}", engines.vllm_stall_url());
    println!(
        "  within about {}s /health and /live/engine answer 503 and dynamo_sysport_engine_stalled is 1;",
        (DEMO_STALL_AFTER + DEMO_INTERVAL).as_secs()
    );
    println!(
        "  let it go on with: curl -X POST {} (both answer 200 at the next check)",
        engines.vllm_resume_url()
    );
    println!(
        "To watch a canary, break generation on a quiet engine (traffic stops, /health stays 200):"
    );
    println!("  curl -X POST {}", engines.vllm_break_generate_url());
    println!(
        "  once the engines drain and sit idle for {}s, a one-token canary hangs and after its 3s \
         timeout /health answers 503 (\"vllm: canary failed\"); heal it with the resume above",
        DEMO_CANARY_AFTER.as_secs()
    );
    println!("Ctrl-C stops it.");
    let handle = sysport.handle();
    let result = sysport.run(signals(handle)).await;
    let _ = stop_tx.send(());
    engines.wait().await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(error = %err, "server failed");
            ExitCode::from(1)
        }
    }
}

/// How often the demo checks its upstreams.
const DEMO_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);
/// How long the demo's vLLM may sit idle before a canary request.
const DEMO_CANARY_AFTER: std::time::Duration = std::time::Duration::from_secs(10);
/// How long the demo's vLLM may run requests without progress.
const DEMO_STALL_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// sysport in front of the simulated engines: vLLM required (with its health URL and stall
/// detection), LMCache not.
fn demo_config(engines: &sysport::demo::DemoUpstreams, host: IpAddr, port: u16) -> config::Config {
    use config::{
        Config, HealthConfig, Limits, Listen, ShutdownConfig, StallConfig, StartingStatus,
        UpstreamConfig,
    };
    use std::time::Duration;
    use sysport::model::{Engine, Url};
    let url = |s: String| Url::parse(&s).expect("the demo servers have valid URLs");
    let upstream =
        |name: &str, metrics: String, keep: &str, health: Option<String>, required: bool| {
            UpstreamConfig {
                keep: vec![keep.to_string()],
                health_url: health.map(url),
                required,
                ..UpstreamConfig::new(name, url(metrics))
            }
        };
    Config {
        otlp: None,
        listen: Listen {
            host,
            port,
            ..Listen::default()
        },
        health: HealthConfig {
            path: routes::HEALTH.into(),
            live_path: routes::LIVE.into(),
            starting_status: StartingStatus::NotReady,
            interval: DEMO_INTERVAL,
        },
        labels: vec![("worker_id".into(), "demo-0".into())],
        upstreams: vec![
            {
                let vllm = UpstreamConfig {
                    stall: Some(StallConfig::preset(Engine::Vllm, DEMO_STALL_AFTER)),
                    ..upstream(
                        "vllm",
                        engines.vllm_metrics_url(),
                        "vllm:",
                        Some(engines.vllm_health_url()),
                        true,
                    )
                };
                UpstreamConfig {
                    canary: Some(config::CanaryConfig::preset(&vllm, DEMO_CANARY_AFTER)),
                    ..vllm
                }
            },
            upstream(
                "lmcache",
                engines.lmcache_metrics_url(),
                "lmcache:",
                None,
                false,
            ),
        ],
        limits: Limits::default(),
        shutdown: ShutdownConfig {
            drain_delay: Duration::ZERO,
        },
        vitals: config::VitalsConfig::default(),
        views: Vec::new(),
        metric_relabel_configs: Vec::new(),
        control: config::ControlConfig::default(),
        incidents: config::IncidentsConfig::default(),
        source: None,
    }
}
