#!/usr/bin/env python3
"""Helpers for `scripts/real-engines.sh lock`, which rewrites the hash-pinned requirement files.

  lock.py requirements METADATA            print the Requires-Dist of a wheel's METADATA whose
                                           markers hold here (no extras), leaving out torch,
                                           torchaudio, torchvision and torchcodec
  lock.py write REPORT.json OUT HEADER...  write OUT from `pip install --dry-run --report`:
                                           every package `name==version` with the sha256 of the
                                           very file pip chose; HEADER lines go on top as comments

Runs with the python of a scratch venv (it uses pip's vendored `packaging`).
"""
import email
import json
import sys

LEFT_OUT = {"torch", "torchaudio", "torchvision", "torchcodec"}


def requirements(metadata_path):
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

    with open(metadata_path, encoding="utf-8") as f:
        msg = email.message_from_string(f.read())
    for line in msg.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if canonicalize_name(req.name) in LEFT_OUT:
            continue
        req.marker = None
        print(req)


def write(report_path, out_path, header):
    from pip._vendor.packaging.utils import canonicalize_name

    with open(report_path, encoding="utf-8") as f:
        report = json.load(f)
    entries = []
    for item in report["install"]:
        meta = item["metadata"]
        info = item["download_info"]
        sha = info.get("archive_info", {}).get("hashes", {}).get("sha256")
        url = info["url"]
        if not sha:
            sys.exit(f"lock.py: no sha256 for {meta['name']} ({url})")
        if not url.endswith(".whl"):
            sys.exit(f"lock.py: {meta['name']} resolved to a non-wheel {url}")
        entries.append((canonicalize_name(meta["name"]), meta["version"], sha, url.rsplit("/", 1)[-1]))
    entries.sort()
    with open(out_path, "w", encoding="utf-8") as f:
        for line in header:
            f.write(f"# {line}\n" if line else "#\n")
        for name, version, sha, filename in entries:
            f.write(f"{name}=={version} \\\n    --hash=sha256:{sha}\n    # {filename}\n")
    print(f"lock.py: {len(entries)} packages written to {out_path}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "requirements":
        requirements(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        sys.exit(__doc__)
