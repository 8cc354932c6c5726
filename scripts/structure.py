#!/usr/bin/env python3
"""Structure figures of the broker's source: import cycles between top-level modules of src/
(non-test code), modules below `api` that import it, files over 1,500 lines and functions over
150 lines (counted by brace matching). Prints only.

    scripts/structure.py [REPO]     # REPO: another checkout to measure (default: this one)
"""
import collections
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CRATES = ["src", "tiering/src", "compaction/src", "metadata/src", "records/src"]
ABOVE_API = {"server", "runtime", "admin_http", "services", "cli"}


def rust_files(root):
    for d, _, fs in os.walk(os.path.join(ROOT, root)):
        for f in fs:
            if f.endswith(".rs"):
                yield os.path.join(d, f)


def import_graph():
    """Top-level module -> modules its non-test code names through `crate::`."""
    src = os.path.join(ROOT, "src")
    edges = collections.defaultdict(set)
    for p in rust_files("src"):
        name = os.path.basename(p)
        if name.endswith("tests.rs") or name == "test_support.rs":
            continue
        text = open(p, encoding="utf-8").read()
        if "#[cfg(test)]" in text:
            text = text[: text.index("#[cfg(test)]")]
        first = os.path.relpath(p, src).split(os.sep)[0]
        module = first[:-3] if first.endswith(".rs") else first
        if module in ("main", "lib"):
            continue
        code = "\n".join(l for l in text.split("\n") if not l.strip().startswith("//"))
        for m in re.finditer(r"crate::([a-z_]+)", code):
            if m.group(1) != module:
                edges[module].add(m.group(1))
    return edges


def cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def functions(path):
    """(lines, name, first line) of every fn with a body."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"\s*(pub(\([a-z]+\))? )?(async )?(unsafe )?fn (\w+)", line)
        if not m:
            i += 1
            continue
        depth, started, j = 0, False, i
        while j < len(lines):
            t = re.sub(r'"(\\.|[^"\\])*"', '""', lines[j])
            t = re.sub(r"'(\\.|[^'\\])'", "''", t).split("//")[0]
            if not started and ";" in t and "{" not in t:
                break
            depth += t.count("{") - t.count("}")
            started = started or "{" in t
            if started and depth <= 0:
                break
            j += 1
        if started:
            yield (j - i + 1, m.group(5), i + 1)
            i = j + 1
        else:
            i += 1


def main():
    edges = import_graph()
    found = cycles(edges)
    print("module import cycles (non-test code):", found or "none")
    below = sorted(m for m, ws in edges.items() if "api" in ws and m not in ABOVE_API and m != "api")
    print("modules below api that import api:", below or "none")
    long_files, long_fns = [], []
    for crate in CRATES:
        for p in rust_files(crate):
            rel = os.path.relpath(p, ROOT)
            n = sum(1 for _ in open(p, encoding="utf-8"))
            if n > 1500:
                long_files.append((n, rel))
            for length, name, line in functions(p):
                if length > 150:
                    long_fns.append((length, f"{rel}:{line} {name}"))
    print("files over 1,500 lines:", ", ".join(f"{r} ({n})" for n, r in sorted(long_files, reverse=True)) or "none")
    print(f"functions over 150 lines: {len(long_fns)}")
    for length, where in sorted(long_fns, reverse=True):
        print(f"  {length:4} {where}")


if __name__ == "__main__":
    main()
