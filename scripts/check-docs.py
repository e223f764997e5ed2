#!/usr/bin/env python3
"""Checks the documentation a newcomer reads: README.md is a page, not a manual (at most 12 KB),
and every relative link in README.md and docs/*.md resolves: the file or folder exists in the
repository, and a `#fragment` names a heading of the target page (GitHub's anchors: lower case,
punctuation dropped, spaces to hyphens, `-1`, `-2` for repeats).

Usage: python3 scripts/check-docs.py            (from anywhere; exits 1 on a problem)
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_MAX_BYTES = 12 * 1024

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def strip_code(text):
    """The text with fenced blocks and inline code spans blanked (links there are examples)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if FENCE.match(line.strip()):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "``", line))
    return "\n".join(out)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen, found = {}, set()
    fenced = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line.strip()):
                fenced = not fenced
                continue
            m = None if fenced else HEADING.match(line.rstrip("\n"))
            if not m:
                continue
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def pages():
    yield os.path.join(ROOT, "README.md")
    docs = os.path.join(ROOT, "docs")
    for name in sorted(os.listdir(docs)):
        if name.endswith(".md"):
            yield os.path.join(docs, name)


def main():
    problems = []
    size = os.path.getsize(os.path.join(ROOT, "README.md"))
    if size > README_MAX_BYTES:
        problems.append(f"README.md: {size} bytes, more than {README_MAX_BYTES}: move the detail to docs/")
    checked = 0
    for page in pages():
        rel_page = os.path.relpath(page, ROOT)
        with open(page, encoding="utf-8") as f:
            text = strip_code(f.read())
        for lineno, line in enumerate(text.split("\n"), 1):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                checked += 1
                path, _, fragment = target.partition("#")
                dest = page if not path else os.path.normpath(os.path.join(os.path.dirname(page), path))
                where = f"{rel_page}:{lineno}: link {target!r}"
                if not os.path.exists(dest):
                    problems.append(f"{where}: {os.path.relpath(dest, ROOT)} does not exist")
                    continue
                if not os.path.realpath(dest).startswith(ROOT + os.sep) and dest != ROOT:
                    problems.append(f"{where}: points outside the repository")
                    continue
                if fragment:
                    if not dest.endswith(".md"):
                        problems.append(f"{where}: a #fragment on a file that is not Markdown")
                    elif fragment not in anchors(dest):
                        problems.append(f"{where}: no heading #{fragment} in {os.path.relpath(dest, ROOT)}")
    for p in problems:
        print(p)
    print(f"docs: README.md {size} bytes, {checked} relative links checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
