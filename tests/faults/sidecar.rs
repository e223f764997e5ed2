//! The real `sysport` binary as a child process: a YAML file in a temp dir, a free loopback port,
//! SIGTERM at the end, its peak memory read from `/proc`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// One upstream entry of the generated config.
pub(crate) struct UpstreamSpec<'a> {
    pub(crate) name: &'a str,
    pub(crate) url: &'a str,
    pub(crate) timeout: &'a str,
    /// Whether readiness needs it.
    pub(crate) required: bool,
}

/// A `/metrics` (or other) answer and how long it took, body included.
pub(crate) struct Timed {
    pub(crate) status: u16,
    pub(crate) elapsed: Duration,
    pub(crate) body: Vec<u8>,
}

pub(crate) struct Sidecar {
    child: Child,
    pub(crate) base: String,
    dir: PathBuf,
    client: reqwest::Client,
}

impl Sidecar {
    /// Starts sysport in front of `upstreams` and waits until `/live` answers. `extra` is more
    /// YAML appended to the file (for example a `limits:` section).
    pub(crate) async fn start(test: &str, upstreams: &[UpstreamSpec<'_>], extra: &str) -> Sidecar {
        Sidecar::launch(test, |port| config_yaml(port, upstreams, extra), &[]).await
    }

    /// Starts sysport with the configuration `yaml(port)` gives for a free port, its command
    /// line prefixed by `wrapper` (for example `prlimit --nofile=1024:1024`), and waits until
    /// `/live` answers.
    pub(crate) async fn launch(
        test: &str,
        yaml: impl Fn(u16) -> String,
        wrapper: &[&str],
    ) -> Sidecar {
        let dir =
            std::env::temp_dir().join(format!("sysport-faults-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(20))
            .build()
            .expect("client");
        // The free port may be taken between the probe and sysport's bind: try a few.
        for _ in 0..3 {
            let port = free_port();
            let config = dir.join("sysport.yaml");
            std::fs::write(&config, yaml(port)).expect("write config");
            let log = std::fs::File::create(dir.join("sysport.log")).expect("log file");
            let bin = env!("CARGO_BIN_EXE_sysport");
            let (program, args) = match wrapper.split_first() {
                Some((program, args)) => (*program, [args, &[bin]].concat()),
                None => (bin, Vec::new()),
            };
            let child = Command::new(program)
                .args(args)
                .arg("--config")
                .arg(&config)
                .env("SYSPORT_LOG", "info")
                .env_remove("DYN_SYSTEM_PORT")
                .env_remove("DYN_SYSTEM_HOST")
                .env_remove("SYSPORT_CONFIG")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .kill_on_drop(true)
                .spawn()
                .expect("spawn sysport");
            let mut sidecar = Sidecar {
                child,
                base: format!("http://127.0.0.1:{port}"),
                dir: dir.clone(),
                client: client.clone(),
            };
            if sidecar.wait_live().await {
                return sidecar;
            }
            let _ = sidecar.child.start_kill();
            let _ = sidecar.child.wait().await;
        }
        panic!(
            "sysport did not start; log:\n{}",
            std::fs::read_to_string(dir.join("sysport.log")).unwrap_or_default()
        );
    }

    async fn wait_live(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return false;
            }
            if let Ok(r) = self.client.get(format!("{}/live", self.base)).send().await
                && r.status() == 200
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id().expect("sysport is running")
    }

    /// GET `path` with extra headers; the clock runs from the request until the whole body.
    pub(crate) async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Timed {
        let started = Instant::now();
        let mut req = self.client.get(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let r = req.send().await.expect("sysport answers");
        let status = r.status().as_u16();
        let body = r.bytes().await.expect("sysport sends the body").to_vec();
        Timed {
            status,
            elapsed: started.elapsed(),
            body,
        }
    }

    /// What sysport has logged so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sysport.log")).expect("read sysport.log")
    }

    /// Peak resident set size (`VmHWM`) in KiB.
    pub(crate) fn vm_hwm_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("read /proc/PID/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("a VmHWM line")
    }

    /// SIGTERM, then waits for a clean exit.
    pub(crate) async fn stop(mut self) {
        let pid = self.pid().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM {pid}");
        let status = tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .expect("sysport exits within 10 s of SIGTERM")
            .expect("wait for sysport");
        assert!(
            status.success(),
            "sysport exited with {status} after SIGTERM"
        );
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- sysport log ({}) ---\n{}",
                self.dir.display(),
                self.log()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.local_addr().expect("local addr").port()
}

fn config_yaml(port: u16, upstreams: &[UpstreamSpec<'_>], extra: &str) -> String {
    // One health round at start-up, then none: each test's own scrapes drive the counters.
    let mut y = format!(
        "listen: {{host: 127.0.0.1, port: {port}}}\n\
         health: {{interval: 1h}}\n\
         shutdown: {{drain_delay: 0s}}\n\
         upstreams:\n"
    );
    for u in upstreams {
        y.push_str(&format!(
            "  - name: {}\n    url: {}\n    keep: [\"vllm:\"]\n    timeout: {}\n    required: {}\n",
            u.name, u.url, u.timeout, u.required
        ));
    }
    y.push_str(extra);
    y
}
