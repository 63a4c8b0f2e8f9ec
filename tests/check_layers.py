#!/usr/bin/env python3
"""The layers of src/ and the circles between its files (docs/development.md).

    tests/check_layers.py [BUILD]

Layers, lowest first: core, store, linalg, analysis, app, api, http. A file may
use its own layer and the ones below it. Two graphs are checked:

  includes  every #include "..." of src/ and include/embedscope/, file to file
            (a public header belongs to the layer that implements it: the table
            below, else the layer with a .c file of its name);
  calls     with BUILD (a build folder holding src/**/*.o): which object file
            uses a global symbol another one defines (nm), file to file.

Each fails on an edge that goes up a layer, on any circle between folders and
on any circle between files, of one folder or of several (in the call graph
too: the files of one folder call each other in one direction, so each can be
read, tested and moved with the ones below it). The rules are first tried on
made-up graphs (self_test). The last line is "layers: N passed, N failed";
exit 1 on any failure.
"""
import collections
import glob
import os
import re
import subprocess
import sys

LAYERS = ["core", "store", "linalg", "analysis", "app", "api", "http"]
# Public headers whose name is not that of a .c file of their layer.
HEADER_LAYER = {
    "core.h": "core", "blas.h": "core", "lru.h": "core",
    "store.h": "store", "labels.h": "store",
    "linalg.h": "linalg",
    "analysis.h": "analysis", "positional.h": "analysis",
    "config.h": "app",
    # the service's headers (docs/development.md, "The service's headers")
    "params.h": "api", "problem.h": "api", "route.h": "api", "version.h": "api", "descriptor.h": "api",
    "format.h": "api", "render.h": "api", "negotiate.h": "api",
    "cost.h": "api", "pool.h": "api", "results.h": "api", "metrics.h": "api", "app.h": "api", "jobs.h": "api",
    "uploads.h": "api", "exchange.h": "api",
}
# (caller, callee) -> the callee's symbols the caller uses, to name the edges of a circle.
CALLED = collections.defaultdict(list)
# Sizes (issue 30): no file of src/ over MAX_SOURCE lines, no header over MAX_HEADER, the transport's
# request glue (server.c) under MAX_SERVER, and only src/http/ knows libmicrohttpd.
MAX_SOURCE, MAX_HEADER, MAX_SERVER = 1200, 450, 700
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path, problems):
    parts = path.split("/")
    if parts[0] == "src" and parts[1] in LAYERS:
        return parts[1]
    name = parts[-1]
    if name in HEADER_LAYER:
        return HEADER_LAYER[name]
    owners = {p.split("/")[1] for p in glob.glob("src/*/" + name[:-2] + ".c")} & set(LAYERS)
    if len(owners) == 1:
        return owners.pop()
    problems.append("%s: no layer known (add it to HEADER_LAYER in tests/check_layers.py)" % path)
    return None


def include_graph(problems):
    files = sorted(glob.glob("src/**/*.[ch]", recursive=True) + glob.glob("include/embedscope/*.h"))
    edges = collections.defaultdict(set)
    for f in files:
        for name in INCLUDE.findall(open(f, encoding="utf-8").read()):
            for base in (os.path.dirname(f), "include", "src"):  # the compiler's order: -Iinclude -Isrc
                target = os.path.normpath(os.path.join(base, name))
                if os.path.isfile(target):
                    edges[f].add(target)
                    break
            # an include found nowhere here is a system or test header
    return files, edges


def call_graph(build):
    objects = sorted(glob.glob(os.path.join(build, "src", "**", "*.o"), recursive=True))
    defined, used = {}, collections.defaultdict(set)
    sources = {}
    for o in objects:
        src = os.path.relpath(o, build)[:-2]
        src = next((src + ext for ext in (".c", ".cc", ".S") if os.path.exists(src + ext)), None)
        if src is None:
            continue  # the object of a file that moved or went away
        sources[o] = src
        out = subprocess.run(["nm", "-g", o], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[1] not in "Uvw":
                defined.setdefault(fields[2], src)
            elif len(fields) == 2 and fields[0] == "U":
                used[src].add(fields[1])
    edges = collections.defaultdict(set)
    for src, symbols in used.items():
        for s in symbols:
            if s in defined and defined[s] != src:
                edges[src].add(defined[s])
                CALLED[src, defined[s]].append(s)
    return sorted(sources.values()), edges


def circles(nodes, edges):
    """The strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def check(kind, nodes, edges, problems, quiet=False):
    layer = {n: layer_of(n, problems) for n in set(nodes) | {t for ts in edges.values() for t in ts}}
    rank = {l: i for i, l in enumerate(LAYERS)}
    folders = collections.defaultdict(set)
    n_edges = 0
    for a in sorted(edges):
        for b in sorted(edges[a]):
            n_edges += 1
            la, lb = layer[a], layer[b]
            if la is None or lb is None:
                continue
            if rank[lb] > rank[la]:
                problems.append("%s: %s (%s) uses %s (%s), a layer above it" % (kind, a, la, b, lb))
            if la != lb:
                folders[la].add(lb)
    for comp in circles(layer.keys(), edges):
        within = sorted({layer[n] for n in comp if layer[n]})
        lines = ["%s: a circle of %d files within %s: %s" % (kind, len(comp), ", ".join(within), ", ".join(comp))]
        for a in comp:  # its edges, each with what it uses, so the one to move is easy to find
            for b in sorted(edges.get(a, ())):
                if b in comp:
                    names = sorted(CALLED.get((a, b), ()))
                    lines.append("    %s -> %s%s" % (a, b, " (%s)" % " ".join(names[:6] + ["..."] * (len(names) > 6))
                                                    if names else ""))
        problems.append("\n".join(lines))
    for comp in circles(LAYERS, folders):
        problems.append("%s: a circle of layers: %s" % (kind, ", ".join(comp)))
    order = [l for l in LAYERS if any(layer[n] == l for n in layer)]
    uses = "; ".join("%s -> %s" % (l, ",".join(sorted(folders[l], key=rank.get)) or "-") for l in order)
    if not quiet:
        print("%s: %d files, %d edges; layers used: %s" % (kind, len(layer), n_edges, uses))


def sizes(problems):
    """Every file of src/ and include/ within its size, and <microhttpd.h> included only in src/http/."""
    files = glob.glob("src/**/*.[ch]", recursive=True) + glob.glob("include/**/*.h", recursive=True)
    for path in sorted(files):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        limit = MAX_SERVER if path == "src/http/server.c" else MAX_HEADER if path.endswith(".h") else MAX_SOURCE
        lines = text.count("\n")
        if lines > limit:
            problems.append("sizes: %s has %d lines, more than %d" % (path, lines, limit))
        if re.search(r'^\s*#\s*include\s+<microhttpd\.h>', text, re.M) and not path.startswith("src/http/"):
            problems.append("sizes: %s includes <microhttpd.h>; only src/http/ may" % path)
    print("sizes: %d files of src/ and include/ checked: at most %d lines (headers %d, server.c %d)"
          % (len(files), MAX_SOURCE, MAX_HEADER, MAX_SERVER))


def self_test(problems):
    """The rules on made-up graphs, so that a check that stopped failing fails here."""
    a, b, c = "src/api/a.c", "src/api/b.c", "src/api/c.c"
    cases = [  # (what, edges, how many problems the rules must find)
        ("calls one way within a folder", {a: {b}, b: {c}}, 0),
        ("a circle of calls within a folder", {a: {b}, b: {c}, c: {a}}, 1),
        ("a circle of calls through two folders", {a: {"src/app/x.c"}, "src/app/x.c": {a}}, 3),  # up, 2 circles
    ]
    for what, edges, want in cases:
        found = []
        check("calls", sorted(set(edges) | {t for ts in edges.values() for t in ts}), edges, found, quiet=True)
        if len(found) != want:
            problems.append("self-test: %s gave %d problems, not %d: %s" % (what, len(found), want, found))


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    problems = []
    self_test(problems)
    check("includes", *include_graph(problems), problems)
    sizes(problems)
    if len(sys.argv) > 1:
        check("calls", *call_graph(sys.argv[1]), problems)
    for p in problems:
        print("FAIL: " + p)
    print("layers: %d passed, %d failed" % (0 if problems else 1, len(problems)))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
