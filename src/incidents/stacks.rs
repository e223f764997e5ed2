//! The engine's Python stacks at an incident's opening, taken with py-spy
//! (`py-spy dump --nonblocking --pid P`, which works on a running and on a stopped process)
//! for every process of the engine: the process listening on the upstream's port, found from
//! `/proc/net/tcp{,6}` and `/proc/*/fd`, or those whose command line matches the upstream's
//! `incidents.processes` pattern, and their descendants. One dump at a time, each bounded in
//! time (killed at `stacks_timeout`) and in output ([`MAX_OUTPUT`]); when none can be taken,
//! the reason.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::AsyncReadExt;

/// Most bytes kept of one process's dump (and of its error output, a tenth of it).
pub(crate) const MAX_OUTPUT: usize = 4 << 20;

/// The niceness py-spy runs at, below sysport's own threads.
const PY_SPY_NICE: i32 = 10;

/// What py-spy says of a process without a Python interpreter in it (py-spy 0.4's
/// `python_process_info::get_python_version`): a native engine such as llama-server.
const NOT_PYTHON: &str = "Failed to find python version from target process";

/// Where the engine's processes are found.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// The process listening on this port.
    Port(u16),
    /// The processes whose command line matches (`incidents.processes`), but sysport's own.
    Command(regex::Regex),
}

/// What was taken.
#[derive(Debug, Clone)]
pub(crate) enum Taken {
    /// One dump per process of the engine.
    Dumps(Vec<Dump>),
    /// Why there are none: no py-spy, no such process, no Python in the engine's processes.
    Unavailable(String),
}

/// One process's dump.
#[derive(Debug, Clone)]
pub(crate) struct Dump {
    pub pid: u32,
    /// `ok`, `failed` (py-spy's own words in `error`) or `timeout`.
    pub result: &'static str,
    pub error: Option<String>,
    pub text: String,
    pub cut: bool,
    /// How long py-spy took (to its end, or to its kill).
    pub took: Duration,
}

/// py-spy and its limits.
#[derive(Debug)]
pub(crate) struct Taker {
    pub py_spy: Option<PathBuf>,
    pub timeout: Duration,
    /// One dump at a time, whatever the number of incidents opening.
    one: tokio::sync::Mutex<()>,
}

impl Taker {
    pub(crate) fn new(configured: Option<PathBuf>, timeout: Duration) -> Taker {
        Taker {
            py_spy: configured.or_else(|| on_path("py-spy")),
            timeout,
            one: tokio::sync::Mutex::new(()),
        }
    }

    /// The stacks of every process of the engine at `target`.
    pub(crate) async fn take(&self, target: &Target) -> Taken {
        let Some(py_spy) = self.py_spy.clone() else {
            return Taken::Unavailable(
                "no py-spy: none on PATH and incidents.py_spy not set".to_owned(),
            );
        };
        // A walk of every process' open files in /proc: on the blocking pool, never on the
        // runtime thread that answers /status and runs the checks.
        let target = target.clone();
        let found = tokio::task::spawn_blocking(move || match &target {
            Target::Port(port) => processes(*port),
            Target::Command(pattern) => commands(pattern),
        })
        .await;
        let pids = match found {
            Ok(Ok(pids)) => pids,
            Ok(Err(why)) => return Taken::Unavailable(why),
            Err(err) => {
                return Taken::Unavailable(format!("the search for the processes failed: {err}"));
            }
        };
        let mut dumps = Vec::new();
        for pid in pids {
            let _one = self.one.lock().await;
            dumps.push(dump(&py_spy, pid, self.timeout).await);
        }
        not_python(&dumps).unwrap_or(Taken::Dumps(dumps))
    }
}

/// Why there are no stacks when py-spy found Python in none of the processes: a native
/// engine has no Python stacks to take.
fn not_python(dumps: &[Dump]) -> Option<Taken> {
    let native = |d: &Dump| d.error.as_deref().is_some_and(|e| e.contains(NOT_PYTHON));
    if dumps.is_empty() || !dumps.iter().all(native) {
        return None;
    }
    let pids: Vec<String> = dumps.iter().map(|d| d.pid.to_string()).collect();
    Some(Taken::Unavailable(format!(
        "not a Python process: py-spy found no Python interpreter in the engine's processes \
         (pid {}): a native engine such as llama-server has no Python stacks (py-spy: {NOT_PYTHON})",
        pids.join(", ")
    )))
}

/// `name` in a directory of `PATH`, if it is there.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// One process's dump, within `timeout`.
async fn dump(py_spy: &Path, pid: u32, timeout: Duration) -> Dump {
    let mut dump = Dump {
        pid,
        result: "failed",
        error: None,
        text: String::new(),
        cut: false,
        took: Duration::ZERO,
    };
    let started = std::time::Instant::now();
    let spawned = tokio::process::Command::new(py_spy)
        .args(["dump", "--nonblocking", "--pid", &pid.to_string()])
        // Its error in words, without the Rust backtrace a RUST_BACKTRACE=1 adds to it.
        .env("RUST_BACKTRACE", "0")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            dump.error = Some(format!("cannot run {}: {e}", py_spy.display()));
            return dump;
        }
    };
    // py-spy reads the engine's memory for up to seconds, in sysport's container and from its
    // CPU share, just as the checks that say whether the engine comes back matter most: at a
    // lower priority it takes what they leave (nice 10 weighs a tenth of sysport's threads).
    if let Some(pid) = child
        .id()
        .and_then(|id| rustix::process::Pid::from_raw(id as i32))
    {
        let _ = rustix::process::setpriority_process(Some(pid), PY_SPY_NICE);
    }
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let run = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let mut out_bounded = (&mut stdout).take(MAX_OUTPUT as u64 + 1);
        let mut err_bounded = (&mut stderr).take(MAX_OUTPUT as u64 / 10);
        let (_, _) = tokio::join!(
            out_bounded.read_to_end(&mut out),
            err_bounded.read_to_end(&mut err),
        );
        // Whatever is left unread is the process's to drop: closing the pipes ends it.
        drop(stdout);
        drop(stderr);
        (child.wait().await, out, err)
    };
    match tokio::time::timeout(timeout, run).await {
        Err(_) => {
            dump.result = "timeout";
            dump.error = Some(format!("py-spy took over {timeout:?}: killed"));
        }
        Ok((status, mut out, err)) => {
            dump.cut = out.len() > MAX_OUTPUT;
            out.truncate(MAX_OUTPUT);
            dump.text = String::from_utf8_lossy(&out).into_owned();
            match status {
                Ok(s) if s.success() => dump.result = "ok",
                Ok(s) => {
                    let words = String::from_utf8_lossy(&err).trim().to_owned();
                    dump.error = Some(format!("py-spy {s}: {words}"));
                }
                Err(e) => dump.error = Some(format!("py-spy: {e}")),
            }
        }
    }
    dump.took = started.elapsed();
    dump
}

/// The process listening on `port` and its descendants, in order; or why there is none.
pub(crate) fn processes(port: u16) -> Result<Vec<u32>, String> {
    let inodes = listening(port);
    if inodes.is_empty() {
        return Err(format!(
            "no such process: nothing listens on port {port} here"
        ));
    }
    let mut denied = false;
    let mut roots = BTreeSet::new();
    let mut parents = Vec::new();
    for pid in pids() {
        if let Some(ppid) = parent(pid) {
            parents.push((pid, ppid));
        }
        match std::fs::read_dir(format!("/proc/{pid}/fd")) {
            Ok(fds) => {
                let holds = fds.filter_map(Result::ok).any(|fd| {
                    std::fs::read_link(fd.path()).ok().is_some_and(|l| {
                        let l = l.to_string_lossy();
                        l.strip_prefix("socket:[")
                            .and_then(|s| s.strip_suffix(']'))
                            .and_then(|s| s.parse::<u64>().ok())
                            .is_some_and(|i| inodes.contains(&i))
                    })
                });
                if holds {
                    roots.insert(pid);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => denied = true,
            Err(_) => {}
        }
    }
    if roots.is_empty() {
        return Err(if denied {
            format!(
                "no permission: the process listening on port {port} is not readable \
                 (another user's; in Kubernetes, SYS_PTRACE)"
            )
        } else {
            format!(
                "no such process: the process listening on port {port} is not visible \
                 (in Kubernetes, shareProcessNamespace: true)"
            )
        });
    }
    Ok(with_descendants(&roots, &parents))
}

/// The processes whose command line (its arguments joined by spaces) `pattern` matches, and
/// their descendants, but sysport and its own; or why there is none.
pub(crate) fn commands(pattern: &regex::Regex) -> Result<Vec<u32>, String> {
    let me = std::process::id();
    let mut roots = BTreeSet::new();
    let mut parents = Vec::new();
    for pid in pids() {
        let Some(ppid) = parent(pid) else { continue };
        parents.push((pid, ppid));
        if pid == me || ppid == me {
            continue;
        }
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let line = String::from_utf8_lossy(&raw).replace('\0', " ");
        if pattern.is_match(line.trim_end()) {
            roots.insert(pid);
        }
    }
    if roots.is_empty() {
        return Err(format!(
            "no such process: no command line here matches `{pattern}` (incidents.processes; \
             in Kubernetes, shareProcessNamespace: true)"
        ));
    }
    Ok(with_descendants(&roots, &parents))
}

/// `roots` and their descendants, breadth first, given each process's parent.
fn with_descendants(roots: &BTreeSet<u32>, parents: &[(u32, u32)]) -> Vec<u32> {
    let mut all: Vec<u32> = roots.iter().copied().collect();
    let mut at = 0;
    while at < all.len() {
        let p = all[at];
        for (child, _) in parents.iter().filter(|(_, ppid)| *ppid == p) {
            if !all.contains(child) {
                all.push(*child);
            }
        }
        at += 1;
    }
    all
}

/// The inodes of the sockets listening on `port` (IPv4 and IPv6).
fn listening(port: u16) -> HashSet<u64> {
    let mut inodes = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st ... inode (the tenth field); 0A is LISTEN.
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
                continue;
            };
            let local_port = local
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if *state == "0A" && local_port == Some(port) {
                if let Ok(inode) = inode.parse() {
                    inodes.insert(inode);
                }
            }
        }
    }
    inodes
}

fn pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The parent of `pid`, from `/proc/<pid>/stat` (the field after the command's parenthesis).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_process_is_found_from_its_port() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let found = processes(port).expect("this process listens");
        assert_eq!(found.first(), Some(&std::process::id()));
        drop(listener);
        let why = processes(port).expect_err("nothing listens now");
        assert!(why.starts_with("no such process"), "{why}");
    }

    #[test]
    fn processes_are_found_by_their_command_line_with_their_descendants() {
        // A shell whose command line names a marker, with a child of its own, started apart
        // (setsid, its parent gone): sysport's own process and children are left out, and the
        // test's process holds the pattern in its arguments too.
        let marker = format!("sysport-cmdline-{}", std::process::id());
        let status = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("setsid sh -c 'sleep 30 & wait # {marker}' >/dev/null 2>&1 &"),
            ])
            .status()
            .expect("sh");
        assert!(status.success());
        let pattern = regex::Regex::new(&format!("# {marker}$")).expect("pattern");
        let mut found = Vec::new();
        for _ in 0..250 {
            found = commands(&pattern).unwrap_or_default();
            if found.len() == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for pid in found.iter().rev() {
            let _ = std::process::Command::new("kill")
                .arg(pid.to_string())
                .status();
        }
        assert_eq!(found.len(), 2, "the shell and its sleep: {found:?}");
        assert!(!found.contains(&std::process::id()));
        let child = std::fs::read(format!("/proc/{}/cmdline", found[1])).unwrap_or_default();
        assert!(child.is_empty() || child.starts_with(b"sleep"), "{found:?}");
        let none = regex::Regex::new("^no process has this command line$").expect("pattern");
        let why = commands(&none).expect_err("no match");
        assert!(
            why.starts_with("no such process: no command line here matches"),
            "{why}"
        );
    }
}
