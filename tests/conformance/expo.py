"""Exposition helpers for the conformance suite: parsing with prometheus_client, sample maps,
value comparison, promtool, and a small line scanner for what the parsers let through."""

import math
import os
import re
import subprocess
import tempfile
from fractions import Fraction

from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.parser import text_string_to_metric_families as text_families

ENGINE_PREFIXES = ("vllm:", "lmcache:")
OWN_PREFIX = "dynamo_sysport_"
SUFFIXES = ("", "_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info")
NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def parse(body: str, fmt: str) -> list:
    """All families, with prometheus_client's parser for the format ("text" or "om")."""
    return list(om_families(body) if fmt == "om" else text_families(body))


def kept(families, prefixes=ENGINE_PREFIXES) -> list:
    return [f for f in families if f.name.startswith(prefixes)]


def norm_ts(ts, fmt: str):
    """A timestamp as an exact number of seconds."""
    if ts is None:
        return None
    if fmt == "text":  # the text parser divided milliseconds by 1000
        return Fraction(round(ts * 1000), 1000)
    if hasattr(ts, "sec"):
        return Fraction(ts.sec) + Fraction(ts.nsec, 10**9)
    return Fraction(ts)


def sample_map(families, fmt: str):
    """{(name, frozenset(labels)): (value, timestamp)} and the keys seen more than once."""
    out, dups = {}, []
    for f in families:
        for s in f.samples:
            key = (s.name, frozenset(s.labels.items()))
            if key in out:
                dups.append(key)
                continue
            out[key] = (float(s.value), norm_ts(s.timestamp, fmt))
    return out, dups


def same_value(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def fmt_key(key) -> str:
    name, labels = key
    inner = ",".join(f'{k}="{esc(v)}"' for k, v in sorted(labels))
    return f"{name}{{{inner}}}"


def esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def fmt_val(v) -> str:
    value, ts = v
    return repr(value) if ts is None else f"{value!r} @{float(ts)!r}"


def compare(expected: dict, got: dict, limit: int = 8) -> list:
    """Differences between two sample maps; sysport's own series in `got` are ignored."""
    problems = []
    missing = [k for k in expected if k not in got]
    extra = [k for k in got if k not in expected and not k[0].startswith(OWN_PREFIX)]
    changed = [
        k for k in expected
        if k in got and not (same_value(expected[k][0], got[k][0]) and expected[k][1] == got[k][1])
    ]
    for k in missing[:limit]:
        problems.append(f"missing {fmt_key(k)} (expected {fmt_val(expected[k])})")
    for k in changed[:limit]:
        problems.append(f"{fmt_key(k)}: expected {fmt_val(expected[k])}, got {fmt_val(got[k])}")
    for k in extra[:limit]:
        problems.append(f"unexpected {fmt_key(k)} = {fmt_val(got[k])}")
    more = max(0, len(missing) - limit) + max(0, len(changed) - limit) + max(0, len(extra) - limit)
    if problems:
        names = sorted({k[0] for k in missing + changed + extra})
        problems.insert(0, f"{len(missing)} missing, {len(changed)} different, {len(extra)} unexpected "
                           f"(sample names: {', '.join(names[:5])}{', ...' if len(names) > 5 else ''})")
    if more:
        problems.append(f"... and {more} more")
    return problems


# --- input preparation -------------------------------------------------------------------------

def unescape_om_names(body: str) -> str:
    """Undo prometheus_client's default OpenMetrics escaping of sample names
    (prometheus/client_python#1177): under `# TYPE vllm:x counter` the samples read `vllm_x_total`.
    A sample is renamed only when it is the escaped form of the family declared just above it."""
    out, current = [], None
    for line in body.split("\n"):
        if line.startswith("# "):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE", "UNIT"):
                current = parts[2]
        elif line and current and ":" in current:
            m = NAME_RE.match(line)
            escaped = current.replace(":", "_")
            if m and not m.group(0).startswith(current) and m.group(0).startswith(escaped):
                suffix = m.group(0)[len(escaped):]
                if suffix in SUFFIXES:
                    line = current + suffix + line[m.end():]
        out.append(line)
    return "\n".join(out)


def split_invalid_text_lines(body: str):
    """Text input lines that prometheus_client's text parser refuses on their own (such as a
    reserved `__` label name): returns the body without them and the removed lines."""
    good, bad = [], []
    for line in body.split("\n"):
        if line and not line.startswith("#"):
            try:
                list(text_families(line + "\n"))
            except Exception:
                bad.append(line)
                continue
        good.append(line)
    return "\n".join(good), bad


# --- promtool ----------------------------------------------------------------------------------

LINT_LINE_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]* \S.*$")


def promtool_check(body: bytes, promtool: str = "promtool"):
    """`promtool check metrics` on stdin (`promtool`: which one). It exits 0 (clean), 3 (lint problems only, one
    `<metric> <problem>` line each) or 1 (`error while linting: <parse error>`). Lint problems
    (names with `:`, units, `_total`) are expected for engine families; anything else fails.
    Returns None when the body parses, else the reason."""
    r = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=60)
    out = (r.stdout + r.stderr).decode("utf-8", "replace")
    lines = [l for l in out.splitlines() if l.strip()]
    errors = [l for l in lines if "error while linting" in l or not LINT_LINE_RE.match(l)]
    if r.returncode not in (0, 3) or errors:
        return f"exit {r.returncode}: " + ("; ".join(errors[:3]) or out.strip()[:300])
    return None


def inject_timestamps(body: str, ts: str = "1700000000") -> str:
    """Gives every OpenMetrics sample line a timestamp (the backfill parser wants one)."""
    out = []
    for line in body.split("\n"):
        if not line or line.startswith("#"):
            out.append(line)
            continue
        end = series_end(line)
        rest = line[end:]
        head, sep, exemplar = rest.partition(" # ")
        if len(head.split()) == 1:
            head = f"{head} {ts}"
        out.append(line[:end] + head + sep + exemplar)
    return "\n".join(out)


def prometheus_om_check(body: bytes, tmpdir: str, promtool: str = "promtool"):
    """Prometheus' own OpenMetrics parser (the one a scrape with the default Accept header
    uses), reached through `promtool tsdb create-blocks-from openmetrics`. Returns None when
    it reads the body, else the reason."""
    with tempfile.TemporaryDirectory(dir=tmpdir) as d:
        src = os.path.join(d, "in.txt")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write(inject_timestamps(body.decode("utf-8")))
        r = subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", src, os.path.join(d, "out")],
            capture_output=True, timeout=120,
        )
        if r.returncode != 0:
            out = (r.stdout + r.stderr).decode("utf-8", "replace").strip()
            return f"exit {r.returncode}: {out[-400:]}"
    return None


# --- line scanner ------------------------------------------------------------------------------

def series_end(line: str) -> int:
    """Index just past a sample line's name and label set."""
    m = NAME_RE.match(line)
    i = m.end() if m else 0
    if i < len(line) and line[i] == "{":
        i += 1
        in_str = False
        while i < len(line):
            c = line[i]
            if in_str:
                if c == "\\":
                    i += 1
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c == "}":
                i += 1
                break
            i += 1
    return i


def scan(body: str):
    """Line-level facts the parsers do not report: metadata lines per family, repeated series
    (prometheus_client's OpenMetrics parser drops exact repeats silently), sample names."""
    meta = {}  # (kind, name) -> count
    series = {}
    names = []
    for line in body.split("\n"):
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE", "UNIT"):
                meta[(parts[1], parts[2])] = meta.get((parts[1], parts[2]), 0) + 1
            continue
        end = series_end(line)
        s = line[:end]
        series[s] = series.get(s, 0) + 1
        m = NAME_RE.match(line)
        names.append(m.group(0) if m else line[:40])
    repeated_meta = [f"{k} {n} x{c}" for (k, n), c in meta.items() if c > 1]
    repeated_series = [f"{s} x{c}" for s, c in series.items() if c > 1]
    meta_names = sorted({n for (_, n) in meta})
    return repeated_meta, repeated_series, names, meta_names


# --- OpenMetrics expressibility and histogram integrity ---------------------------------------

def om_inexpressible(family):
    """Why OpenMetrics cannot carry this family (prometheus_client writes it as OpenMetrics and
    its own OpenMetrics parser refuses it: a NaN or negative counter, a stateset without its
    state label, a histogram without `+Inf`...), or None when it can."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.openmetrics.exposition import ALLOWUTF8
    from prometheus_client.openmetrics.exposition import generate_latest as om_latest

    class One:
        def collect(self):
            yield family

    reg = CollectorRegistry(auto_describe=False)
    reg.register(One())
    try:
        list(om_families(om_latest(reg, escaping=ALLOWUTF8).decode("utf-8")))
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:120]}"
    return None


def histogram_problems(families) -> dict:
    """{(family, labels without le): problem} for histogram MetricPoints whose buckets are not
    cumulative, lack `+Inf`, or disagree with `_count`."""
    out = {}
    for f in families:
        if f.type != "histogram":
            continue
        groups = {}
        for s in f.samples:
            suffix = s.name[len(f.name):]
            g = frozenset((k, v) for k, v in s.labels.items() if k != "le")
            d = groups.setdefault(g, {"buckets": [], "count": None})
            if suffix == "_bucket":
                try:
                    d["buckets"].append((float(s.labels.get("le", "nan")), float(s.value)))
                except ValueError:
                    d["buckets"].append((float("nan"), float(s.value)))
            elif suffix == "_count":
                d["count"] = float(s.value)
        for g, d in groups.items():
            b = sorted(d["buckets"])
            key = (f.name, g)
            if not b:
                continue
            if b[-1][0] != float("inf"):
                out[key] = "no +Inf bucket"
            elif any(b2[1] < b1[1] for b1, b2 in zip(b, b[1:])):
                drops = [f'le="{b1[0]:g}" {b1[1]:g} then le="{b2[0]:g}" {b2[1]:g}'
                         for b1, b2 in zip(b, b[1:]) if b2[1] < b1[1]]
                out[key] = "bucket counts decrease: " + ", ".join(drops[:3])
            elif d["count"] is not None and d["count"] != b[-1][1]:
                out[key] = f"_count {d['count']:g} != +Inf bucket {b[-1][1]:g}"
    return out


def fmt_group(key) -> str:
    name, labels = key
    return f"{name}{{{','.join(f'{k}={esc(v)!r}' for k, v in sorted(labels))}}}"


def om_inexpressible_families(body: str) -> dict:
    """{family: reason} for the families of an OpenMetrics body (names already unescaped) that
    prometheus_client's OpenMetrics parser refuses when read on their own."""
    chunks, name, cur = [], None, []
    for line in body.split("\n"):
        if not line or line == "# EOF":
            continue
        if line.startswith("# "):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE", "UNIT") and parts[2] != name:
                if cur:
                    chunks.append((name, cur))
                name, cur = parts[2], []
        cur.append(line)
    if cur:
        chunks.append((name, cur))
    out = {}
    for name, lines in chunks:
        try:
            list(om_families("\n".join(lines) + "\n# EOF\n"))
        except Exception as e:
            out[name] = f"{type(e).__name__}: {str(e)[:120]}"
    return out


def engine_line(line: str) -> bool:
    """A sample, HELP or TYPE line of a family sysport keeps (`vllm:`, `lmcache:`)."""
    if line.startswith(("# HELP ", "# TYPE ")):
        return line.split(" ", 3)[2].startswith(ENGINE_PREFIXES)
    return line.startswith(ENGINE_PREFIXES)


COMPATIBLE_TYPES = [{"histogram", "gaugehistogram"}, {"gauge", "stateset", "info"}]


def meta_map(families) -> dict:
    """{family name: (type, HELP text)}, first occurrence."""
    out = {}
    for f in families:
        out.setdefault(f.name, (f.type, f.documentation))
    return out


def compare_meta(expected: dict, got: dict, limit: int = 4) -> list:
    """HELP text and TYPE of the families both sides name alike (the formats name some
    families differently: `x_info`, `x_created`)."""
    problems = []
    for name, (etyp, edoc) in expected.items():
        if name not in got:
            continue
        gtyp, gdoc = got[name]
        if etyp != gtyp and not any({etyp, gtyp} <= c for c in COMPATIBLE_TYPES):
            problems.append(f"{name}: TYPE {gtyp}, expected {etyp}")
        if edoc != gdoc:
            problems.append(f"{name}: HELP {gdoc[:80]!r}, expected {edoc[:80]!r}")
    if len(problems) > limit:
        problems = problems[:limit] + [f"... {len(problems) - limit} more"]
    return problems
