//! The real `sysport` binary as a child process: its configuration in a temp dir, a free loopback
//! port (another one when that port was taken before sysport bound it), stderr to a log file,
//! killed when dropped so a failing test leaves no process behind.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_sysport");

/// Attempts with a fresh port each before giving up.
const ATTEMPTS: usize = 3;
/// How long one attempt may take to answer `/live`.
const LIVE_WITHIN: Duration = Duration::from_secs(15);

/// One upstream entry of the configuration [`Sidecar::start`] writes.
pub struct UpstreamSpec<'a> {
    pub name: &'a str,
    pub url: &'a str,
    pub timeout: &'a str,
    /// Whether readiness needs it.
    pub required: bool,
}

/// A `/metrics` (or other) answer and how long it took, body included.
pub struct Timed {
    pub status: u16,
    pub elapsed: Duration,
    pub body: Vec<u8>,
}

/// How to run sysport: see [`Sidecar::launch`].
pub struct Launch<'a> {
    test: &'a str,
    config: Option<Box<dyn Fn(u16) -> String + 'a>>,
    args: Box<dyn Fn(u16) -> Vec<String> + 'a>,
    wrapper: &'a [&'a str],
    stdout: bool,
    env: Vec<(&'a str, &'a str)>,
    live: Option<String>,
}

impl<'a> Launch<'a> {
    /// The configuration file for the port sysport gets; it is passed with `--config`.
    pub fn config(mut self, yaml: impl Fn(u16) -> String + 'a) -> Self {
        self.config = Some(Box::new(yaml));
        self
    }

    /// The command line (before `--config`) for the port sysport gets, for example
    /// `demo --port PORT`.
    pub fn args(mut self, args: impl Fn(u16) -> Vec<String> + 'a) -> Self {
        self.args = Box::new(args);
        self
    }

    /// A command that runs sysport, for example `prlimit --nofile=1024:1024`.
    pub fn wrapper(mut self, wrapper: &'a [&'a str]) -> Self {
        self.wrapper = wrapper;
        self
    }

    /// Sets an environment variable for sysport.
    pub fn env(mut self, key: &'a str, value: &'a str) -> Self {
        self.env.push((key, value));
        self
    }

    /// Where to ask `/live` to know sysport has started (a plain probe port when the main port
    /// serves TLS), instead of the main port.
    pub fn live_at(mut self, url: String) -> Self {
        self.live = Some(url);
        self
    }

    /// Keeps stdout for [`Sidecar::printed_until`] instead of discarding it.
    pub fn stdout(mut self) -> Self {
        self.stdout = true;
        self
    }

    /// Starts sysport and waits until it answers `/live` on its port.
    pub async fn start(self) -> Sidecar {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sysport-test-{}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            self.test
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let client = super::client();
        // The free port may be taken between the probe and sysport's bind: try a few.
        for _ in 0..ATTEMPTS {
            let port = free_port();
            let config = dir.join("sysport.yaml");
            let log = std::fs::File::create(dir.join("sysport.log")).expect("log file");
            let (program, args) = match self.wrapper.split_first() {
                Some((program, args)) => (*program, [args, &[BIN]].concat()),
                None => (BIN, Vec::new()),
            };
            let mut command = Command::new(program);
            command.args(args).args((self.args)(port));
            if let Some(yaml) = &self.config {
                std::fs::write(&config, yaml(port)).expect("write config");
                command.arg("--config").arg(&config);
            }
            let child = command
                .env("SYSPORT_LOG", "info")
                .env_remove("DYN_SYSTEM_PORT")
                .env_remove("DYN_SYSTEM_HOST")
                .env_remove("SYSPORT_CONFIG")
                .envs(self.env.iter().copied())
                .stdin(Stdio::null())
                .stdout(if self.stdout {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stderr(log)
                .kill_on_drop(true)
                .spawn()
                .expect("spawn sysport");
            let mut sidecar = Sidecar {
                child,
                port,
                base: format!("http://127.0.0.1:{port}"),
                config,
                dir: dir.clone(),
                client: client.clone(),
                stdout: None,
            };
            let live = self.live.clone().unwrap_or_else(|| sidecar.url("/live"));
            if sidecar.wait_live(&live).await {
                sidecar.stdout = sidecar
                    .child
                    .stdout
                    .take()
                    .map(|out| BufReader::new(out).lines());
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
}

/// The `sysport` binary running on a loopback port.
pub struct Sidecar {
    child: Child,
    pub port: u16,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    config: PathBuf,
    dir: PathBuf,
    client: reqwest::Client,
    stdout: Option<Lines<BufReader<ChildStdout>>>,
}

impl Sidecar {
    /// How to run sysport for `test` (which names its temp dir): no arguments and no
    /// configuration file until [`Launch::args`] and [`Launch::config`] give them.
    pub fn launch(test: &str) -> Launch<'_> {
        Launch {
            test,
            config: None,
            args: Box::new(|_| Vec::new()),
            wrapper: &[],
            stdout: false,
            env: Vec::new(),
            live: None,
        }
    }

    /// Starts sysport in front of `upstreams` and waits until `/live` answers. `extra` is more
    /// YAML appended to the file (for example a `limits:` section).
    pub async fn start(test: &str, upstreams: &[UpstreamSpec<'_>], extra: &str) -> Sidecar {
        Sidecar::launch(test)
            .config(|port| config_yaml(port, upstreams, extra))
            .start()
            .await
    }

    /// Whether this child, not another process that took the port, answers `/live` there.
    async fn wait_live(&mut self, live: &str) -> bool {
        let deadline = Instant::now() + LIVE_WITHIN;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return false;
            }
            if let Ok(r) = self.client.get(live).send().await
                && r.status() == 200
                && self
                    .child
                    .id()
                    .is_some_and(|pid| listens_on(pid, self.port))
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("sysport is running")
    }

    /// The configuration file, which a test may rewrite before a SIGHUP.
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// GET `path` with extra headers; the clock runs from the request until the whole body.
    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Timed {
        let started = Instant::now();
        let mut req = self.client.get(self.url(path));
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
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sysport.log")).expect("read sysport.log")
    }

    /// The lines sysport printed on stdout ([`Launch::stdout`]) up to the first that starts
    /// with `last`, that one included; at most `max` lines.
    pub async fn printed_until(&mut self, last: &str, max: usize) -> Vec<String> {
        let lines = self.stdout.as_mut().expect("stdout kept (Launch::stdout)");
        let mut printed = Vec::new();
        while printed.len() < max {
            let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
                .await
                .expect("sysport prints within 20 s")
                .expect("read stdout");
            let Some(line) = line else { break };
            let done = line.starts_with(last);
            printed.push(line);
            if done {
                break;
            }
        }
        printed
    }

    /// Peak resident set size (`VmHWM`) in KiB.
    pub fn vm_hwm_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("read /proc/PID/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("a VmHWM line")
    }

    /// Sends `sig` (`-HUP`, `-TERM`) with `kill`.
    pub fn signal(&self, sig: &str) {
        let pid = self.pid().to_string();
        let sent = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill {sig} {pid}");
    }

    /// Waits for sysport to exit, which it must within `within`.
    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("sysport did not exit within {within:?}"))
            .expect("wait for sysport")
    }

    /// SIGTERM, then waits for a clean exit; returns what sysport logged.
    pub async fn stop(mut self) -> String {
        self.signal("-TERM");
        let status = self.wait_exit(Duration::from_secs(20)).await;
        assert!(
            status.success(),
            "sysport exited with {status} after SIGTERM"
        );
        self.log()
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        // A child still running is killed by `kill_on_drop`.
        if std::thread::panicking() {
            eprintln!(
                "--- sysport log ({}) ---\n{}",
                self.dir.display(),
                std::fs::read_to_string(self.dir.join("sysport.log")).unwrap_or_default()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A loopback port nothing listens on at the moment.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.local_addr().expect("local addr").port()
}

/// Whether process `pid` holds the socket listening on `port` (from `/proc/net/tcp` and the
/// process's descriptors).
fn listens_on(pid: u32, port: u16) -> bool {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout
            // inode ...
            let fields: Vec<&str> = line.split_whitespace().collect();
            let listening = fields.get(3) == Some(&"0A");
            let on_port = fields
                .get(1)
                .and_then(|local| local.rsplit_once(':'))
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                == Some(port);
            if listening
                && on_port
                && let Some(inode) = fields.get(9)
            {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
    })
}

pub fn config_yaml(port: u16, upstreams: &[UpstreamSpec<'_>], extra: &str) -> String {
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
