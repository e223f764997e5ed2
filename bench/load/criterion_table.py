"""Markdown table of the last `cargo bench --bench expfmt` run, from criterion's own files
(target/criterion/expfmt_*/*/new/): median time per iteration, throughput, and each
implementation's speed relative to the grep-like line filter on the same bytes.

    python bench/load/criterion_table.py [TARGET_DIR]
"""
import json
import os
import sys

root = os.path.join(sys.argv[1] if len(sys.argv) > 1 else "target", "criterion")
rows = {}
for group in sorted(os.listdir(root)):
    if not group.startswith("expfmt_"):
        continue
    for bench in os.listdir(os.path.join(root, group)):
        new = os.path.join(root, group, bench, "new")
        if not os.path.isfile(os.path.join(new, "benchmark.json")):
            continue
        meta = json.load(open(os.path.join(new, "benchmark.json")))
        est = json.load(open(os.path.join(new, "estimates.json")))
        impl, size = meta["function_id"].split("/")
        nbytes = meta["throughput"]["Bytes"]
        seconds = est["median"]["point_estimate"] / 1e9
        rows[(group[len("expfmt_"):], size, impl)] = (nbytes, seconds)

order = ["small", "typical", "large", "huge"]
print("| input | format | bytes | sysport | sysport+label | grep-like | sysport / grep-like |")
print("|---|---|---:|---:|---:|---:|---:|")


def cell(r):
    if not r:
        return "—"
    nbytes, s = r
    t = f"{s * 1e6:.1f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms"
    return f"{t} ({nbytes / s / 2**20:,.0f} MiB/s)"


for fmt in ["text", "openmetrics"]:
    for size in order:
        sp, lab, grep = (rows.get((fmt, size, i)) for i in ["sysport", "sysport+label", "grep-like"])
        if not sp:
            continue
        ratio = f"{sp[1] / grep[1]:.1f}x slower" if grep else "—"
        print(f"| {size} | {fmt} | {sp[0]} | {cell(sp)} | {cell(lab)} | {cell(grep)} | {ratio} |")
