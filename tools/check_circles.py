#!/usr/bin/env python3
"""check_circles.py - the circles of check_structure.py found a second, independent way.

check_structure.py reads the #include lines itself and finds strongly connected components
of the graphs it builds from nm. This script shares none of that: the include graph is what
the compiler reports (gcc -MM, every header a file reaches, through other headers too), the
call graph is read from readelf's symbol tables, and a module is on a circle when it can reach
itself, found by a search from every module. Modules are the same: a file's path without its
extension (a .c file and the .h beside it are one), over src/, nn/ and tools/.

Each circle is printed once as the sorted set of its modules. KNOWN lists those of today's
tree, to be removed with the change that breaks each; a listed circle that no longer occurs
fails the check as stale.

Usage: check_circles.py [--root DIR] [BUILD]   (BUILD: the build folder with obj/, default
build; --root checks another tree than this one)
Exit status 0 when there is no circle but the known ones, 1 otherwise.
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TREES = ("src", "nn", "tools")

KNOWN = [
    "include circle: src/transport/shm/cma src/transport/shm/shm",
    "call circle: src/base/config src/base/log src/base/result",
    "call circle: src/transport/shm/cma src/transport/shm/shm",
    "call circle: nn/layers nn/model nn/recompute nn/tensor_parallel",
    "call circle: tools/chorus-train tools/train_parallel",
]


def sources(exts):
    out = []
    for tree in TREES:
        for d, _, names in os.walk(os.path.join(ROOT, tree)):
            out += [os.path.relpath(os.path.join(d, n), ROOT) for n in names if n.endswith(exts)]
    return sorted(out)


def module(path):
    return path.rsplit(".", 1)[0]


def compiler_edges():
    """Module -> modules whose headers its files reach, as gcc -MM lists them."""
    files = sources((".c", ".h"))
    cmd = [os.environ.get("CC") or "cc", "-MM", "-D_GNU_SOURCE", "-Iinclude", "-Isrc", "-x", "c"] + files
    text = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    edges = {module(f): set() for f in files}
    for rule in text.replace("\\\n", " ").splitlines():
        if ":" not in rule:
            continue
        deps = rule.split(":", 1)[1].split()
        if not deps:
            continue
        me = module(os.path.normpath(deps[0]))  # the first prerequisite is the file itself
        for d in deps[1:]:
            other = module(os.path.normpath(d))
            if other != me and other in edges:
                edges[me].add(other)
    return edges


def symbol_table(obj):
    """(defined, undefined) global names of an object, from readelf."""
    out = subprocess.run(["readelf", "-sW", obj], capture_output=True, text=True,
                         check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        cols = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(cols) < 8 or not cols[0].endswith(":") or cols[4] not in ("GLOBAL", "WEAK"):
            continue
        (undefined if cols[6] == "UND" else defined).add(cols[7])
    return defined, undefined


def linker_edges(build):
    tables = {}
    for f in sources((".c",)):
        obj = os.path.join(ROOT, build, "obj", module(f) + ".o")
        if not os.path.exists(obj):
            sys.exit("check_circles: no %s: build first (make trainer)" % obj)
        tables[module(f)] = symbol_table(obj)
    edges = {m: set() for m in tables}
    for m, (_, used) in tables.items():
        for other, (defined, _) in tables.items():
            if other == m or not (used & defined):
                continue
            # Every tool defines main; a program's other names are its own.
            shared = used & defined
            if shared == {"main"}:
                continue
            edges[m].add(other)
    return edges


def circles(edges):
    """Each set of modules that reach one another (more than one, or one reaching itself)."""
    reach = {}
    for start in edges:
        seen, todo = set(), list(edges[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo += edges.get(m, ())
        reach[start] = seen
    groups = set()
    for m in edges:
        if m in reach[m]:
            groups.add(tuple(sorted(o for o in reach[m] if m in reach.get(o, ()))))
    return sorted(groups)


def main():
    global ROOT
    args = sys.argv[1:]
    if args[:1] == ["--root"] and len(args) > 1:
        ROOT, args = os.path.abspath(args[1]), args[2:]
    build = args[0] if args else "build"
    found = ["include circle: " + " ".join(g) for g in circles(compiler_edges())]
    found += ["call circle: " + " ".join(g) for g in circles(linker_edges(build))]
    bad = 0
    for f in found:
        known = f in KNOWN
        print(("known: " if known else "") + f)
        bad += not known
    for k in KNOWN:
        if k not in found:
            print("stale KNOWN entry (fixed: remove it): " + k)
            bad += 1
    print("circles (gcc -MM, readelf): %d found, %d problem(s)" % (len(found), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
