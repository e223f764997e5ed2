"""Conformance of sysport's /metrics against promtool and prometheus_client.

Inputs: every exposition file in tests/fixtures/ and exposition rendered now by
prometheus_client (see inputs.py). Each input is served from a loopback HTTP server; one
sysport per input checks that every kept sample comes out with the same name, labels, value and
timestamp, in text 0.0.4, in OpenMetrics and gzip-encoded; one sysport with every input as an
upstream checks the merge. Prints one line per check and `conformance: N passed, M failed`.

Run from the repository root with SYSPORT_BIN set (tests/suites/conformance.sh does this).
"""

import re
import gzip
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parent))

import expo  # noqa: E402
import procs  # noqa: E402
from inputs import OM_CT, TEXT_CT, all_inputs  # noqa: E402

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
# This fixture has one line with a reserved label name (`__block__size__resolved`): sysport drops
# that line and counts it as malformed; the expectations leave it out the same way.
DOTS_FIXTURE = "small.text_escaping-dots.prom"
PARALLEL = 3
# The whole run normally takes 10-20 s; past this, it stops everything and fails.
DEADLINE_S = 150


@dataclass
class Expect:
    """What sysport should make of one input on its own."""
    samples: dict  # kept samples: (name, labels) -> (value, timestamp)
    families: list  # kept families in text 0.0.4 terms: (name, type, [sample keys])
    dropped: int  # samples of families not kept
    malformed: list  # lines of kept families sysport must drop
    dups: list = field(default_factory=list)  # repeated series inside the input
    om_samples: dict = field(default_factory=dict)  # what OpenMetrics output can carry
    om_left_out: list = field(default_factory=list)  # families it cannot, with the reason
    hist_problems: dict = field(default_factory=dict)  # inconsistent histograms in the input
    meta: dict = field(default_factory=dict)  # family -> (TYPE, HELP)


class Report:
    def __init__(self):
        self.passed = 0
        self.failed = []
        self.lock = threading.Lock()

    def emit(self, lines):
        with self.lock:
            for ok, text in lines:
                if ok:
                    self.passed += 1
                    print(f"ok   {text}")
                else:
                    self.failed.append(text)
                    print(f"FAIL {text}")
            sys.stdout.flush()


class Checks:
    """Collects the check lines of one group so that parallel groups print contiguously."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.lines = []

    def check(self, name: str, problems):
        if isinstance(problems, str):
            problems = [problems]
        problems = [p for p in (problems or []) if p]
        if problems:
            self.lines.append((False, f"{self.prefix} {name}: " + "; ".join(problems)))
        else:
            self.lines.append((True, f"{self.prefix} {name}"))
        return not problems


# --- expectations ------------------------------------------------------------------------------

def text_model(families, fmt: str):
    """Families as text 0.0.4 names them (as prometheus_client's text parser does):
    [(name, type, [sample key])]. OpenMetrics counters split into `x` and gauge `x_created`,
    info `x` becomes gauge `x_info`, stateset a gauge, gauge histogram a histogram plus gauges
    `x_gcount` and `x_gsum`."""
    out = []
    for f in families:
        smap, _ = expo.sample_map([f], fmt)
        if fmt == "text":
            out.append((f.name, f.type, list(smap)))
            continue
        groups = {}
        for key in smap:
            suffix = key[0][len(f.name):]
            if suffix == "_created":
                groups.setdefault((f.name + "_created", "gauge"), []).append(key)
            elif f.type == "gaugehistogram" and suffix in ("_gcount", "_gsum"):
                groups.setdefault((f.name + suffix, "gauge"), []).append(key)
            else:
                typ = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram"}.get(f.type, f.type)
                name = f.name + "_info" if f.type == "info" else f.name
                groups.setdefault((name, typ), []).append(key)
        out.extend((n, t, keys) for (n, t), keys in groups.items())
    return out


def expectations(inp) -> Expect:
    if inp.text_twin is not None:
        src, fmt = inp.text_twin.decode("utf-8"), "text"
    else:
        src, fmt = inp.body.decode("utf-8"), inp.fmt
        if fmt == "om":
            src = expo.unescape_om_names(src)
    removed = []
    try:
        families = expo.parse(src, fmt)
    except Exception:
        if fmt != "text":
            raise
        src, removed = expo.split_invalid_text_lines(src)
        families = expo.parse(src, fmt)
    kept = expo.kept(families)
    samples, dups = expo.sample_map(kept, fmt)
    total = sum(len(f.samples) for f in families)
    kept_lines = sum(len(f.samples) for f in kept)
    malformed = [l for l in removed if l.startswith(expo.ENGINE_PREFIXES)]
    # Families OpenMetrics cannot express are left out of OpenMetrics output (and counted);
    # a counter's or histogram's `_created` gauge goes with it.
    if inp.fmt == "om":
        # As the upstream wrote them (an Enum named `vllm:x` is a stateset whose state label
        # prometheus_client escaped to `vllm_x`: not a valid stateset).
        left_out = expo.om_inexpressible_families(expo.unescape_om_names(inp.body.decode("utf-8")))
    else:
        left_out = {f.name: why for f in kept if (why := expo.om_inexpressible(f))}
    # An info or stateset OpenMetrics cannot carry is written as the gauge it is in text.
    declared = expo.unescape_om_names(inp.body.decode("utf-8")) if inp.fmt == "om" else ""
    as_gauge = {f.name for f in kept if f.type in ("info", "stateset")} | {
        m.group(1) for m in re.finditer(r"^# TYPE (\S+) (?:info|stateset)$", declared, re.M)}
    left_out = {n: why for n, why in left_out.items() if n.startswith(expo.ENGINE_PREFIXES) and n not in as_gauge}
    gone = {n + sfx for n in left_out for sfx in ("", "_created", "_info", "_gcount", "_gsum")}
    om_samples = dict(samples)
    for f in kept:
        if f.name in gone:
            for s in f.samples:
                om_samples.pop((s.name, frozenset(s.labels.items())), None)
    return Expect(samples, text_model(kept, fmt), total - kept_lines + (len(removed) - len(malformed)),
                  malformed, dups, om_samples, [f"{n} ({why})" for n, why in left_out.items()],
                  expo.histogram_problems(kept), expo.meta_map(kept))


# --- checks on one response --------------------------------------------------------------------

def check_exposition(c: Checks, label: str, body: bytes, fmt: str, tmpdir: str, promtool_om: bool,
                     hist_known=None, meta=None):
    """Validity, structure, metadata and names of one response body. Returns its sample map,
    or None when it does not parse."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        c.check(f"{label} utf-8", str(e))
        return None
    if fmt == "text":
        c.check(f"{label} promtool check metrics", expo.promtool_check(body))
    elif promtool_om:
        c.check(f"{label} Prometheus OpenMetrics parser", expo.prometheus_om_check(body, tmpdir))
    parser = "prometheus_client.openmetrics.parser" if fmt == "om" else "prometheus_client.parser"
    try:
        families = expo.parse(text, fmt)
    except Exception as e:
        c.check(f"{label} {parser}", f"{type(e).__name__}: {str(e)[:300]}")
        return None
    c.check(f"{label} {parser}", None)

    names = [f.name for f in families]
    # prometheus_client's text parser makes a family of each untyped sample: only a name that
    # comes back after another family counts as split.
    runs = Counter(n for i, n in enumerate(names) if i == 0 or names[i - 1] != n)
    repeated_fams = sorted(n for n, k in runs.items() if k > 1)
    repeated_meta, repeated_series, sample_names, meta_names = expo.scan(text)
    smap, dups = expo.sample_map(families, fmt)
    problems = []
    if repeated_fams:
        problems.append(f"families split or repeated: {repeated_fams[:5]}")
    if repeated_meta:
        problems.append(f"repeated metadata: {repeated_meta[:5]}")
    if repeated_series or dups:
        shown = repeated_series[:3] + [expo.fmt_key(k) for k in dups[:3]]
        problems.append(f"repeated series: {shown}")
    c.check(f"{label} each family and series once", problems)

    if hist_known is not None:
        new_problems = {k: v for k, v in expo.histogram_problems(families).items() if k not in hist_known}
        c.check(f"{label} histograms consistent (cumulative buckets, +Inf, _count)",
                [f"{expo.fmt_group(k)}: {v}" for k, v in list(new_problems.items())[:4]]
                + ([f"{len(new_problems)} MetricPoints in all"] if new_problems else []))

    if meta is not None:
        c.check(f"{label} HELP and TYPE preserved", expo.compare_meta(meta, expo.meta_map(families)))

    allowed = expo.ENGINE_PREFIXES + (expo.OWN_PREFIX,)
    bad = sorted({n for n in sample_names + meta_names + names if not n.startswith(allowed)})
    c.check(f"{label} only vllm:/lmcache:/dynamo_sysport_ names", f"foreign names: {bad[:8]}" if bad else None)
    return smap


def fetch_and_check(c: Checks, sp, exp, tmpdir: str):
    """The three fetches of /metrics and every check on them. Returns the sample map of the
    last (gzip, text) response, whose own metrics count what the earlier two did, and the body
    of the first (text) response."""
    # Text 0.0.4: no Accept header.
    status, headers, body = sp.get("/metrics")
    body_text = body
    ct = headers.get("content-type")
    c.check("text: status 200 and Content-Type", [
        f"status {status}" if status != 200 else None,
        f"Content-Type {ct!r}, expected {TEXT_CT!r}" if ct != TEXT_CT else None,
    ])
    text_map = check_exposition(c, "text:", body, "text", tmpdir, False, exp.hist_problems, exp.meta)
    if text_map is not None:
        c.check("text: samples equal the input's", expo.compare(exp.samples, text_map))

    # OpenMetrics: Prometheus' default Accept header.
    status, headers, body = sp.get("/metrics", {"Accept": PROMETHEUS_ACCEPT})
    ct = headers.get("content-type")
    om_map = None
    if ct != OM_CT:
        c.check("openmetrics: negotiated", f"asked with Prometheus' Accept header, got status {status} and "
                f"Content-Type {ct!r} instead of {OM_CT!r}; OpenMetrics checks not run")
    else:
        eofs = body.split(b"\n").count(b"# EOF")
        c.check("openmetrics: status 200, Content-Type, one final # EOF", [
            f"status {status}" if status != 200 else None,
            None if body.endswith(b"\n# EOF\n") and eofs == 1 else f"body ends {body[-40:]!r}, {eofs} '# EOF' lines",
        ])
        om_map = check_exposition(c, "openmetrics:", body, "om", tmpdir, True, None, exp.meta)
        if om_map is not None:
            note = ""
            if exp.om_left_out:
                note = f" (left out as inexpressible: {'; '.join(exp.om_left_out[:3])})"
            c.check("openmetrics: samples equal the input's" + note, expo.compare(exp.om_samples, om_map))

    # gzip.
    status, headers, zbody = sp.get("/metrics", {"Accept-Encoding": "gzip"})
    problems, zmap = [], None
    if headers.get("content-encoding") != "gzip":
        problems.append(f"Content-Encoding {headers.get('content-encoding')!r}")
    else:
        try:
            raw = gzip.decompress(zbody)
            problems.append(expo.promtool_check(raw))
            if headers.get("content-type") != TEXT_CT:
                problems.append(f"Content-Type {headers.get('content-type')!r}")
            zmap, _ = expo.sample_map(expo.parse(raw.decode("utf-8"), "text"), "text")
            problems += expo.compare(exp.samples, zmap)
        except Exception as e:
            problems.append(f"{type(e).__name__}: {str(e)[:200]}")
    c.check("gzip: Content-Encoding gzip, decompresses to the same valid text exposition (promtool, "
            "prometheus_client)", problems)

    if om_map is not None and zmap is not None:
        counted = sum(v for (n, _), (v, _) in zmap.items() if n == "dynamo_sysport_openmetrics_dropped_series_total")
        left_out = sum(1 for k in exp.samples if k not in om_map)
        c.check("openmetrics: every series left out is counted in dynamo_sysport_openmetrics_dropped_series_total",
                None if counted == left_out else f"counter is {counted:g}, {left_out} series missing from the output")
    return (zmap if zmap is not None else text_map), body_text


def series_stats(text_map, upstream: str):
    """dynamo_sysport_upstream_series{upstream=...} by outcome, and upstream_up."""
    stats, up = {}, None
    for (name, labels), (value, _) in (text_map or {}).items():
        lab = dict(labels)
        if lab.get("upstream") != upstream:
            continue
        if name == "dynamo_sysport_upstream_series":
            stats[lab.get("outcome")] = value
        elif name == "dynamo_sysport_upstream_up":
            up = value
    return stats, up


# --- one sysport per input ---------------------------------------------------------------------

def run_single(inp, exp: Expect, up: procs.Upstreams, binary: str, tmpdir: str):
    c = Checks(f"[{inp.name}]")
    sp = procs.Sysport(binary, [(inp.name, up.url(inp))], tmpdir, inp.name,
                       compressed={inp.name} if inp.gzip else frozenset())
    try:
        sp.start()
    except Exception as e:
        c.check("sysport starts", str(e))
        return c.lines
    try:
        if inp.name == DOTS_FIXTURE:
            c.check("input: exactly the __block__size__resolved line is invalid", None if (
                len(exp.malformed) == 1 and "__block__size__resolved=" in exp.malformed[0]
            ) else f"invalid lines found: {[l[:80] for l in exp.malformed]}")
        if exp.dups:
            c.check("input: no repeated series", f"{[expo.fmt_key(k) for k in exp.dups[:3]]}")
        text_map, text_body = fetch_and_check(c, sp, exp, tmpdir)
        if inp.fmt == "text":
            # Rule 2: a kept family's HELP, TYPE and sample lines come out byte-for-byte.
            out_lines = set(text_body.split(b"\n"))
            bad = set(exp.malformed)
            changed = [l for l in inp.body.split(b"\n") if l and l.decode("utf-8") not in bad
                       and expo.engine_line(l.decode("utf-8")) and l not in out_lines]
            c.check("text: kept HELP/TYPE/sample lines unchanged byte for byte",
                    [f"{len(changed)} lines changed or missing, first: {changed[0][:200]!r}"] if changed else None)
        stats, upv = series_stats(text_map, inp.name)
        want = {"kept": len(exp.samples), "dropped": exp.dropped, "malformed": len(exp.malformed),
                "duplicate": len(exp.dups), "conflict": 0}
        problems = [] if upv == 1 else [f"dynamo_sysport_upstream_up = {upv}"]
        for outcome, n in want.items():
            if stats.get(outcome) != n:
                problems.append(f'upstream_series{{outcome="{outcome}"}} = {stats.get(outcome)}, expected {n}')
        uptime = [v for (n, _), (v, _) in (text_map or {}).items() if n == "dynamo_sysport_uptime_seconds"]
        if len(uptime) != 1 or not 0 <= uptime[0] < 3600:
            problems.append(f"dynamo_sysport_uptime_seconds = {uptime} (an upstream must not override it)")
        c.check("own metrics: upstream up, series kept/dropped/malformed/duplicate/conflict", problems)
    except Exception as e:
        c.check("run", f"{type(e).__name__}: {e}; sysport log: {sp.log_tail()!r}")
    finally:
        sp.stop()
    return c.lines


# --- one sysport with every input --------------------------------------------------------------

def merged_expectation(inputs, exps):
    """First upstream wins: a family keeps the first TYPE seen (later upstreams' samples of it
    with another TYPE are conflicts), a series seen before is a duplicate. A histogram or
    summary series (its label set without `le` / `quantile`) comes whole from the first
    upstream that brings it: a later upstream's buckets for it are all duplicates."""
    types, merged, source = {}, {}, {}
    owner = {}
    counts = {}
    for inp in inputs:
        exp = exps[inp.name]
        dup = conflict = 0
        for name, typ, keys in exp.families:
            if types.setdefault(name, typ) != typ:
                conflict += len(keys)
                continue
            for key in keys:
                if typ in ("histogram", "summary"):
                    gid = (name, frozenset((k, v) for k, v in key[1] if k not in ("le", "quantile")))
                    if owner.setdefault(gid, inp.name) != inp.name:
                        dup += 1
                        continue
                if key in merged:
                    dup += 1
                else:
                    merged[key] = exp.samples[key]
                    source[key] = inp.name
        counts[inp.name] = {"duplicate": dup + len(exp.dups), "conflict": conflict}
    # OpenMetrics output leaves out what it cannot express, judged by the upstream that won.
    om = {k: v for k, v in merged.items() if k in exps[source[k]].om_samples}
    return merged, om, counts


def run_merged(inputs, exps, up: procs.Upstreams, binary: str, tmpdir: str):
    c = Checks("[all inputs merged]")
    sp = procs.Sysport(binary, [(i.name, up.url(i)) for i in inputs], tmpdir, "merged",
                       compressed={i.name for i in inputs if i.gzip})
    try:
        sp.start()
    except Exception as e:
        c.check("sysport starts", str(e))
        return c.lines
    try:
        merged, om, counts = merged_expectation(inputs, exps)
        hist, meta = {}, {}
        for inp in inputs:  # the first upstream to bring a family gives its TYPE and HELP
            e = exps[inp.name]
            hist.update(e.hist_problems)
            for name, m in e.meta.items():
                meta.setdefault(name, m)
        exp = Expect(merged, [], 0, [], om_samples=om, hist_problems=hist, meta=meta,
                     om_left_out=sorted({x for e in exps.values() for x in e.om_left_out}) if len(om) < len(merged) else [])
        text_map, _ = fetch_and_check(c, sp, exp, tmpdir)
        problems, total_dup = [], 0
        for inp in inputs:
            stats, upv = series_stats(text_map, inp.name)
            if upv != 1:
                problems.append(f"{inp.name}: upstream_up = {upv}")
            total_dup += stats.get("duplicate") or 0
            want = dict(counts[inp.name], malformed=len(exps[inp.name].malformed))
            for outcome, n in want.items():
                if stats.get(outcome) != n:
                    problems.append(f"{inp.name}: {outcome} = {stats.get(outcome)}, expected {n}")
        if total_dup <= 0:
            problems.append("no duplicate series counted although upstreams overlap")
        c.check("own metrics: every upstream up; duplicate, conflict and malformed counts per upstream", problems)
        dots = [i for i in inputs if i.name == DOTS_FIXTURE]
        if dots:
            stats, _ = series_stats(text_map, DOTS_FIXTURE)
            c.check(f'own metrics: upstream_series{{upstream="{DOTS_FIXTURE}",outcome="malformed"}} = 1',
                    None if stats.get("malformed") == 1 else f"got {stats.get('malformed')}")
        # sysport must ask upstreams for text 0.0.4 whatever the scraper asked for (its pages:
        # the canaries' model lookups, on other paths, are no scrape).
        bad = sorted({h.get("accept", "<none>") for path, h in up.requests
                      if path.split("?")[0] in up.routes
                      and not h.get("accept", "").lower().replace(" ", "").startswith("text/plain;version=0.0.4")})
        c.check("upstream requests ask for text/plain;version=0.0.4 (scraper's Accept not forwarded)",
                f"Accept headers seen: {bad[:3]}" if bad else None)
        # Every upstream is on loopback: gzip is asked for only where the configuration says so.
        asked = [(path.split("?")[0], h.get("accept-encoding", "<none>")) for path, h in up.requests]
        wrong = sorted({(route, encoding) for route, encoding in asked if route in up.routes
                        and encoding != ("gzip" if up.routes[route].gzip else "identity")})
        c.check("upstream requests ask for gzip only with enable_compression (identity on loopback)",
                f"(path, Accept-Encoding) seen: {wrong[:3]}" if wrong else None)
    except Exception as e:
        c.check("run", f"{type(e).__name__}: {e}; sysport log: {sp.log_tail()!r}")
    finally:
        sp.stop()
    return c.lines


def main() -> int:
    binary = os.environ.get("SYSPORT_BIN")
    if not binary or not os.access(binary, os.X_OK):
        print("conformance: SYSPORT_BIN must name the sysport binary", file=sys.stderr)
        return 2
    if shutil.which("promtool") is None:
        print("conformance: promtool not on PATH", file=sys.stderr)
        return 2
    root = Path(__file__).resolve().parents[2]
    report = Report()
    t0 = time.monotonic()
    tmpdir = tempfile.mkdtemp(prefix="sysport-conformance-")
    try:
        inputs = all_inputs(root / "tests" / "fixtures", Path(tmpdir))
        exps, setup = {}, Checks("[inputs]")
        for inp in inputs:
            try:
                exps[inp.name] = expectations(inp)
            except Exception as e:
                setup.check(f"{inp.name} parses with prometheus_client", f"{type(e).__name__}: {e}")
        setup.check(f"{len(inputs)} inputs ({len(exps)} usable), "
                    f"{sum(len(e.samples) for e in exps.values())} kept samples expected", None)
        report.emit(setup.lines)
        usable = [i for i in inputs if i.name in exps]
        up = procs.Upstreams(usable)
        pool = ThreadPoolExecutor(max_workers=PARALLEL)
        try:
            for lines in pool.map(lambda i: run_single(i, exps[i.name], up, binary, tmpdir), usable):
                report.emit(lines)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        report.emit(run_merged(usable, exps, up, binary, tmpdir))
    finally:
        procs.stop_all()
        shutil.rmtree(tmpdir, ignore_errors=True)
    n_failed = len(report.failed)
    print(f"conformance: took {time.monotonic() - t0:.1f} s")
    print(f"conformance: {report.passed} passed, {n_failed} failed")
    return 1 if n_failed else 0


class Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.code = 128 + signum


def _terminate(signum, _frame):
    raise Interrupted(signum)


def _watchdog():
    time.sleep(DEADLINE_S)
    print(f"conformance: still running after {DEADLINE_S} s, stopping", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    threading.Thread(target=_watchdog, daemon=True).start()
    try:
        sys.exit(main())
    except (Interrupted, KeyboardInterrupt) as e:
        print("conformance: interrupted; every process it started was stopped", flush=True)
        sys.exit(getattr(e, "code", 130))
