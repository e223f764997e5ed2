#!/usr/bin/env python3
"""Checks that sysport's modules import one way: no import cycle between the files of src/, and
no import from a lower layer into a higher one, nor between the modules of a layer whose row says
they import none of each other (the layer table of docs/architecture.md, read by read_layers).

Each file of the library crate (src/, without src/main.rs, which is a crate of its own) is a
node; a parent module's file and its child's are separate nodes, `x/mod.rs` is the module `x`.
An edge goes from a file to the file of the module a path names, from
  - `use` declarations whose path starts with `crate::`, `super::`, `self::`, or the name of a
    child module (`use aliases::X` after `mod aliases;`), braces and globs expanded;
  - paths written inline in the code: `crate::x::y`, `super::x`, `self::x`.
A path resolves to the longest module prefix that is a file (`crate::scrape::Scraper` → the file
of `scrape`), or to the inline module inside a file that it names (`mod tests { .. }` is part of
its file). Paths into the crate root (`crate::expfmt`, the re-exported exposition crate) name no
module file and make no edge. Comments, strings and character literals are ignored.

A cycle is a strongly connected component of more than one file: every file in it reaches every
other one through imports. The layers say who may use whom: a file of a module on layer N may
import modules on layer N or below, never above.

The exposition crate (crates/expfmt/src) is checked for one rule of its own: its lib.rs is only
the crate's face, so it holds modules and public re-exports (`mod x;`, `pub use x::Y;`) and
defines nothing, and no file of the crate imports an item defined in lib.rs (a path into the
crate root, `crate::Y` or `super::Y`, that names an item lib.rs defines). Each module imports
what it uses from the module that defines it.

Usage: python3 scripts/check-layers.py --self-test (adds cycles on purpose to copies of src/ and
                                                   fails unless each is caught)
       python3 scripts/check-layers.py            (exits 1 on a cycle or an import against the
                                                   layers, 0 when there is none)
       python3 scripts/check-layers.py --report   (prints the same, always exits 0)
       python3 scripts/check-layers.py --src DIR  (another source tree, for the script's own test)
       python3 scripts/check-layers.py --expfmt DIR  (another crates/expfmt/src, the same way)
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHITECTURE = os.path.join(ROOT, "docs", "architecture.md")
EXPFMT = os.path.join(ROOT, "crates", "expfmt", "src")


def read_layers(path=ARCHITECTURE):
    """The layer table of docs/architecture.md, the one place the layers are written: module
    (top-level, under src/, or a child module such as `canary::config` that sits on a layer of
    its own) → layer, and the layers whose modules import none of each other ("none of each
    other" in the row's "may use" column). Layer 0, the exposition crate, is outside src/ and
    left out."""
    layers, apart = {}, set()
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    start = lines.index("## Layers")
    end = next((i for i, l in enumerate(lines[start:]) if l.startswith("## ") and i), len(lines))
    rows = [l for l in lines[start:start + end] if l.startswith("| ")][1:]
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].isdigit():
            continue
        layer = int(cells[0])
        for name in re.findall(r"`([a-z_]+(?:::[a-z_]+)*)`(?! \(crate\))", cells[1]):
            layers[name] = layer
        if "none of each other" in cells[3]:
            apart.add(layer)
    if not layers:
        raise SystemExit(f"no layer table under '## Layers' in {path}")
    return layers, apart


LAYERS, APART = read_layers()

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
INLINE_PATH = re.compile(r"(?<![A-Za-z0-9_:])((?:crate|super|self)(?:\s*::\s*(?:r#)?" + IDENT + r")+)")


def strip_code(text):
    """The source with comments, string and character literals blanked (lines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = len(re.match(r"r(#*)\"", text[i:]).group(1))
            end = text.find('"' + "#" * hashes, i + 2 + hashes)
            end = n if end < 0 else end + 1 + hashes
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == "b" and text.startswith('b"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            out.append("b")
            i += 1
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'":
            # A character literal ('a', '\n', '\u{1F600}'), or a lifetime ('a, 'static).
            m = re.match(r"'(?:\\(?:u\{[0-9A-Fa-f]+\}|x[0-9A-Fa-f]{2}|.)|[^\\'])'", text[i:i + 12])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use(tree):
    """`a::{b, c::{d, e}}` → ['a::b', 'a::c::d', 'a::c::e'] (without `as` renames)."""
    tree = re.sub(r"\s+as\s+(?:r#)?" + IDENT, "", tree)
    return _expand(re.sub(r"\s+", "", tree))


def _expand(tree):
    depth, start = 0, None
    for i, c in enumerate(tree):
        if c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}":
            depth -= 1
    if start is None:
        return [tree] if tree else []
    prefix, inner = tree[:start], tree[start + 1:tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for c in inner:
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += c == "{"
        depth -= c == "}"
        cur += c
    parts.append(cur)
    paths = []
    for p in parts:
        if not p:
            continue
        if p == "self":
            paths.append(prefix.rstrip(":"))
        else:
            paths.extend(prefix + q for q in _expand(p))
    return paths


def module_of(rel):
    """`scrape/mod.rs` → ('scrape',), `scrape/flight.rs` → ('scrape', 'flight'), lib.rs → ()."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return tuple(parts)


class Graph:
    def __init__(self, src):
        self.files = {}  # module path → relative file name
        for dirpath, _, names in os.walk(src):
            for name in names:
                if not name.endswith(".rs"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), src).replace(os.sep, "/")
                if rel == "main.rs":
                    continue
                self.files[module_of(rel)] = rel
        self.inline = {}  # module path of an inline module → the module of its file
        texts = {m: strip_code(open(os.path.join(src, f), encoding="utf-8").read()) for m, f in self.files.items()}
        # Every file's inline modules are known before any path is resolved.
        scopes = {m: self._scopes(m, text) for m, text in texts.items()}
        self.edges = {f: {} for f in self.files.values()}  # file → {file: (line, path as written)}
        for m, text in texts.items():
            self._scan(m, text, scopes[m])

    def _scopes(self, file_mod, text):
        """The module path at each brace of `text`, as (offset, path) marks in order; inline
        modules (`mod tests { .. }`) are noted in `self.inline` on the way."""
        marks = []
        stack = []
        for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{|\{|\}", text):
            tok = m.group(0)
            if tok == "}":
                if stack:
                    stack.pop()
            elif tok == "{":
                stack.append(None)
            else:
                self.inline[file_mod + tuple(n for n in stack if n) + (m.group(1),)] = file_mod
                stack.append(m.group(1))
            marks.append((m.end(), file_mod + tuple(n for n in stack if n)))
        return marks

    def _children(self, mod):
        return {p[-1] for p in list(self.files) + list(self.inline) if len(p) == len(mod) + 1 and p[:-1] == mod}

    def _resolve(self, scope, path):
        """The module path a written path starts in, absolute, or None for another crate."""
        segs = [s.strip().removeprefix("r#") for s in path.split("::") if s.strip()]
        if not segs:
            return None
        if segs[0] == "crate":
            base, rest = (), segs[1:]
        elif segs[0] in ("super", "self"):
            base, rest = scope, segs
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    base = base[:-1]
                rest = rest[1:]
        elif segs[0] in self._children(scope):
            base, rest = scope, segs
        else:
            return None
        return base + tuple(rest)

    def _file_of(self, full):
        """The file a module path lies in: its longest prefix that is a file or inline module."""
        for k in range(len(full), -1, -1):
            p = full[:k]
            if p in self.files:
                return self.files[p]
            if p in self.inline:
                return self.files[self.inline[p]]
        return None

    def _add(self, file_mod, scope, written, line):
        full = self._resolve(scope, written)
        if full is None:
            return
        target = self._file_of(full)
        me = self.files[file_mod]
        if target is None or target == me or target == "lib.rs":
            return
        self.edges[me].setdefault(target, (line, written))

    def _scan(self, file_mod, text, marks):

        def scope_at(offset):
            scope = file_mod
            for end, mod in marks:
                if end > offset:
                    break
                scope = mod
            return scope

        line_at = lambda offset: text.count("\n", 0, offset) + 1
        uses = list(re.finditer(r"\buse\s+([^;]*);", text))
        for u in uses:
            tree = u.group(1)
            for path in expand_use(tree):
                path = path.rstrip(":*").rstrip(":")
                self._add(file_mod, scope_at(u.start()), path, line_at(u.start()))
        covered = [(u.start(), u.end()) for u in uses]
        for p in INLINE_PATH.finditer(text):
            if any(a <= p.start() < b for a, b in covered):
                continue
            written = re.sub(r"\s+", "", p.group(1))
            self._add(file_mod, scope_at(p.start()), written, line_at(p.start()))

    def cycles(self):
        """Strongly connected components of more than one file (Tarjan), each sorted."""
        index, low, on, stack, out = {}, {}, set(), [], []
        counter = [0]

        def visit(v):
            work = [(v, iter(sorted(self.edges[v])))]
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on.add(v)
            while work:
                node, it = work[-1]
                advanced = False
                for w in it:
                    if w not in index:
                        index[w] = low[w] = counter[0]
                        counter[0] += 1
                        stack.append(w)
                        on.add(w)
                        work.append((w, iter(sorted(self.edges[w]))))
                        advanced = True
                        break
                    if w in on:
                        low[node] = min(low[node], index[w])
                if advanced:
                    continue
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))

        for v in sorted(self.edges):
            if v not in index:
                visit(v)
        return sorted(out)

    def cycle_path(self, comp):
        """One cycle through the component's first file, as a list of (file, line, path)."""
        members = set(comp)
        start = comp[0]
        # Breadth-first from start back to start, inside the component.
        prev = {}
        frontier = [start]
        seen = {start}
        while frontier:
            nxt = []
            for v in frontier:
                for w in sorted(self.edges[v]):
                    if w not in members:
                        continue
                    if w == start:
                        steps = [(v, w)]
                        while v != start:
                            steps.append((prev[v], v))
                            v = prev[v]
                        return list(reversed(steps))
                    if w not in seen:
                        seen.add(w)
                        prev[w] = v
                        nxt.append(w)
            frontier = nxt
        return []

    def violations(self):
        """Imports from a lower layer into a higher one, and modules without a layer."""
        out, unknown = [], set()
        for f, targets in sorted(self.edges.items()):
            a = top(f)
            for g, (line, written) in sorted(targets.items()):
                b = top(g)
                if a == b:
                    continue
                for m in (a, b):
                    if m not in LAYERS:
                        unknown.add(m)
                if a in LAYERS and b in LAYERS and LAYERS[a] < LAYERS[b]:
                    out.append((f, line, written, g, a, b))
                elif a in LAYERS and b in LAYERS and LAYERS[a] == LAYERS[b] and LAYERS[a] in APART:
                    out.append((f, line, written, g, a, b))
        return out, sorted(unknown)


def top(rel):
    """The module of the layer table a file belongs to: the longest module path of the file
    (`canary/config.rs` → `canary::config`) that the table names, else its top-level module."""
    parts = module_of(rel)
    for k in range(len(parts), 1, -1):
        name = "::".join(parts[:k])
        if name in LAYERS:
            return name
    return parts[0] if parts else ""


def top_items(text):
    """The top-level items of a file whose comments and literals are blanked, as (line, text),
    attributes (`#[..]`, `#![..]`) left out."""
    items, i, n, depth, start = [], 0, len(text), 0, None
    while i < n:
        c = text[i]
        if depth == 0 and c == "#" and re.match(r"#!?\s*\[", text[i:i + 8]):
            i = text.index("[", i)
            level = 0
            while i < n:
                level += text[i] == "["
                level -= text[i] == "]"
                i += 1
                if level == 0:
                    break
            continue
        if start is None:
            if c.isspace():
                i += 1
                continue
            start = i
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth -= 1
        end = None
        if depth == 0 and c == ";":
            end = i + 1
        elif depth == 0 and c == "}":
            j = i + 1
            while j < n and text[j].isspace():
                j += 1
            end = j + 1 if j < n and text[j] == ";" else i + 1
        if end is not None:
            items.append((text.count("\n", 0, start) + 1, re.sub(r"\s+", " ", text[start:end])))
            start, i = None, end
            continue
        i += 1
    return items


ITEM_NAME = re.compile(r"\b(struct|enum|union|trait|type|fn|const|static|mod|macro_rules!)\s*(" + IDENT + ")")


def root_definitions(lib_text):
    """What a lib.rs (blanked) holds besides modules and public re-exports, as (line, what, name);
    name is the item a path could import (None for an `impl`, a private `use`, ...)."""
    out = []
    for line, item in top_items(lib_text):
        if re.fullmatch(r"(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+" + IDENT + r"\s*;", item):
            continue
        if re.match(r"pub\s+use\b", item):
            continue
        head = item.rstrip(";") if re.match(r"(?:pub\S*\s+)?use\b", item) else re.split(r"[{;=]", item)[0].strip()
        m = ITEM_NAME.search(head)
        out.append((line, head, m.group(2) if m else None))
    return out


class RootImports(Graph):
    """The paths of a crate's files (lib.rs aside) into items its lib.rs defines."""

    def __init__(self, src, defined):
        self.defined, self.hits = defined, []
        super().__init__(src)

    def _add(self, file_mod, scope, written, line):
        me = self.files[file_mod]
        full = self._resolve(scope, written)
        if me == "lib.rs" or full is None or not self.defined:
            return
        if full == ():  # a glob: `use super::*` in a child of the root
            self.hits.append((me, line, written + "::*", "every item lib.rs defines"))
            return
        if full[0] in self.defined and full[:1] not in self.files and full[:1] not in self.inline:
            self.hits.append((me, line, written, full[0]))


def check_root(src):
    """lib.rs's definitions and the imports of them from the crate's other files."""
    with open(os.path.join(src, "lib.rs"), encoding="utf-8") as f:
        defined = root_definitions(strip_code(f.read()))
    g = RootImports(src, {name for _, _, name in defined if name})
    return defined, sorted(set(g.hits))


def self_test():
    """The check fails on a cycle added on purpose: between two files of one module (a child
    importing its sibling back) and between two modules (the bottom layer importing one above
    it), and passes on the tree as it is; it fails when the exposition crate's lib.rs defines an
    item, used or not. Runs on copies of src/ and crates/expfmt/src in a temporary folder."""
    import contextlib
    import io
    import shutil
    import tempfile

    cases = [
        ("as it is", None, 0),
        ("config/data.rs imports config/assemble.rs, which imports it", ("config/data.rs", "use super::assemble::Overrides;\n"), 1),
        ("model imports telemetry, which imports model", ("model/mod.rs", "use crate::telemetry::Telemetry;\n"), 1),
        ("stall imports canary, beside it", ("stall/mod.rs", "use crate::canary::Tracker;\n"), 1),
        ("canary::config imports canary, a layer above it", ("canary/config.rs", "use crate::canary::Tracker;\n"), 1),
    ]
    expfmt_cases = [
        ("expfmt's lib.rs defines a type that parse/mod.rs imports",
         [("lib.rs", "pub struct Extra;\n"), ("parse/mod.rs", "use crate::Extra;\n")],
         [" pub struct Extra\n", "parse/mod.rs:"]),
        ("expfmt's lib.rs defines a function nothing names", [("lib.rs", "fn unused() {}\n")],
         [" fn unused()\n"]),
        ("expfmt's lib.rs imports a type for itself", [("lib.rs", "use bytes::Bytes;\n")],
         [" use bytes::Bytes\n"]),
    ]
    failed = 0
    for what, change, want in cases:
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            shutil.copytree(os.path.join(ROOT, "src"), src)
            if change:
                path, line = change
                with open(os.path.join(src, path), "a", encoding="utf-8") as f:
                    f.write(line)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                got = main(["--src", src])
        cycle = "import cycle through" in out.getvalue()
        against = "imports against the layers (" in out.getvalue()
        ok = got == want and (cycle or against) == bool(change)
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'}  {what}: exit {got}, {'a cycle found' if cycle else 'no cycle'}")
    for what, changes, wanted in expfmt_cases:
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            shutil.copytree(EXPFMT, src)
            for path, line in changes:
                with open(os.path.join(src, path), "a", encoding="utf-8") as f:
                    f.write(line)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                got = main(["--expfmt", src])
        text = out.getvalue()
        missing = [w.strip() for w in wanted if w not in text]
        ok = got == 1 and not missing
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'}  {what}: exit {got}, {'reported' if not missing else 'not reported: ' + ', '.join(missing)}")
    return 1 if failed else 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    report = "--report" in argv
    src = os.path.join(ROOT, "src")
    if "--src" in argv:
        src = argv[argv.index("--src") + 1]
    expfmt = argv[argv.index("--expfmt") + 1] if "--expfmt" in argv else EXPFMT
    g = Graph(src)
    cycles = g.cycles()
    violations, unknown = g.violations()
    edges = sum(len(t) for t in g.edges.values())
    print(f"{len(g.files)} files, {edges} imports between them")
    for comp in cycles:
        print(f"\nimport cycle through {len(comp)} files: {', '.join(comp)}")
        for a, b in g.cycle_path(comp):
            line, written = g.edges[a][b]
            print(f"  {a}:{line} uses {written} ({b})")
    if violations:
        print(f"\n{len(violations)} imports against the layers (a module may use its own layer and those below, "
              f"but not a module beside it on layers {sorted(APART)}):")
        for f, line, written, g_, a, b in violations:
            print(f"  {f}:{line} uses {written}: {a} (layer {LAYERS[a]}) → {b} (layer {LAYERS[b]})")
    for m in unknown:
        print(f"\nmodule {m!r} has no layer: add it to the layer table of docs/architecture.md")
    bad = bool(cycles or violations or unknown)
    if not bad:
        print("no import cycle, no import against the layers")
    else:
        print(f"\n{len(cycles)} cycles, {len(violations)} imports against the layers")
    defined, upward = check_root(expfmt)
    if defined:
        print(f"\n{len(defined)} items in lib.rs of {expfmt} besides modules and `pub use` re-exports "
              f"(move each into the module it belongs to):")
        for line, head, _ in defined:
            print(f"  lib.rs:{line} {head}")
    if upward:
        print(f"\n{len(upward)} imports of items defined in lib.rs of {expfmt} (import from the "
              f"module that defines the item):")
        for f, line, written, name in upward:
            print(f"  {f}:{line} uses {written} ({name})")
    if not defined and not upward:
        print(f"{os.path.relpath(expfmt, ROOT)}: lib.rs defines nothing, no file imports into it")
    bad = bad or bool(defined or upward)
    return 0 if report or not bad else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
