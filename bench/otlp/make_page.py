"""A 16.6 MB vLLM-like page: tests/fixtures/medium.prom (4 engines) with every family's samples
repeated 45 times, each copy's `engine` label moved on by 4 (series without one repeat as exact
duplicates, which sysport drops and counts). Usage: python3 make_page.py OUT"""
import re
import sys
from pathlib import Path

src = (Path(__file__).resolve().parents[2] / "tests/fixtures/medium.prom").read_text().split("\n")
blocks, cur = [], None
for line in src:
    if line.startswith("# HELP"):
        cur = ([], [])
        blocks.append(cur)
    if cur is None:
        continue
    (cur[0] if line.startswith("#") else cur[1]).append(line)
out = []
for head, samples in blocks:
    out += head
    for c in range(45):
        for s in samples:
            if s:
                out.append(re.sub(r'engine="(\d+)"', lambda m: 'engine="%d"' % (int(m.group(1)) + 4 * c), s))
Path(sys.argv[1]).write_text("\n".join(out) + "\n")
