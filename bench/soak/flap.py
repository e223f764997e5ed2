"""Runs an upstream.py and kills it (SIGKILL, like a crashed engine) every --period seconds,
restarting it on the same port after --down seconds. SIGTERM stops the child and exits.

    flap.py --period 20 --down 2 -- PYTHON upstream.py --port P
"""

import argparse
import signal
import subprocess
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--period", type=float, default=20.0)
    ap.add_argument("--down", type=float, default=2.0)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    child = None

    def stop(*_):
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    kills = 0
    while True:
        child = subprocess.Popen(command)
        time.sleep(args.period)
        child.kill()
        child.wait()
        kills += 1
        print(f"flap: killed the upstream ({kills})", file=sys.stderr, flush=True)
        time.sleep(args.down)


if __name__ == "__main__":
    main()
