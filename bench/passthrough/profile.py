"""Where a sysport build spends its CPU at one connection, by stage: sysport in front of nginx as
bench/passthrough/run.py sets them up, wrk -c1 for 12 s, `perf record --call-graph dwarf` on
sysport for 8 s of it, then each sample put in the first stage whose frame is on its stack.

Build with symbols first, in a target directory of its own (same code, symbols kept):
    CARGO_PROFILE_RELEASE_DEBUG=true CARGO_PROFILE_RELEASE_STRIP=none \
      cargo build --release --locked --bin sysport --target-dir target/prof

    python3 bench/passthrough/profile.py OUT_DIR SYSPORT_BIN PAGE_FILE
"""
import collections
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402

# (frame substring, stage), first match wins.
STAGES = [
    ("parse_after", "parse"),
    ("sysport_expfmt::parse::", "parse"),
    ("merge_write", "merge and write (expfmt)"),
    ("render_own", "sysport's own families"),
    ("Telemetry::render_text", "sysport's own families"),
    ("scrape::http::get", "upstream request, body copied into its buffer"),
    ("reqwest", "upstream connection: socket reads"),
    ("hyper_util::client", "upstream connection: socket reads"),
    ("hyper::proto::h1::dispatch", "answer: request head and socket writes"),
    ("tokio::runtime::io", "waiting for sockets (epoll)"),
    ("vitals", "vitals"),
    ("health::", "health checks"),
]


def stage(stack):
    for key, name in STAGES:
        if any(key in frame for frame in stack):
            return name
    return "other"


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    out, binary, page = (os.path.abspath(a) for a in sys.argv[1:])
    os.makedirs(out, exist_ok=True)
    name = os.path.basename(page)
    nginx, nginx_port, _ = run.start_nginx(out, [(name, page)])
    sysport, port = run.start_sysport(out, "profile", binary, nginx_port, name)
    data = os.path.join(out, "perf.data")
    try:
        wrk = subprocess.Popen(["wrk", "-t1", "-c1", "-d12s", "--latency", f"http://127.0.0.1:{port}/metrics"],
                               stdout=subprocess.PIPE, text=True)
        time.sleep(1)
        subprocess.run(["perf", "record", "-q", "-F", "499", "--call-graph", "dwarf,32768", "-o", data,
                        "-p", str(sysport.pid), "--", "sleep", "8"], check=True)
        print(wrk.communicate()[0])
    finally:
        for p in (sysport, nginx):
            p.terminate()
            p.wait()
    script = subprocess.run(["perf", "script", "-i", data, "-F", "comm,ip,sym"], capture_output=True,
                            text=True, check=True).stdout
    counts = collections.Counter()
    for sample in script.split("\n\n"):
        lines = sample.strip().splitlines()
        if len(lines) < 2:
            continue
        thread = lines[0].split()[0]
        frames = [line.strip().split(None, 1)[-1] for line in lines[1:]]
        counts[(thread, stage(frames))] += 1
    total = sum(counts.values())
    print(f"{total} samples of sysport's threads")
    for (thread, name), n in counts.most_common():
        print(f"{100 * n / total:5.1f} %  {thread:16} {name}")


if __name__ == "__main__":
    main()
