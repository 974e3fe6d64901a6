#!/usr/bin/env python3
"""check_structure.py - structure rules anyone can rerun (make check-structure; a test too).

  1. No include cycles among the C files of src/coll/ and src/engine/ (and their subfolders):
     a module is a .c file and the .h of the same name beside it; module A depends on module B
     when a file of A includes B's header. A cycle of modules is reported with its path.
  2. No call cycles among those modules either, read from the built objects with nm: A depends
     on B when A's object uses a symbol B's object defines (an algorithm calling up into the
     file that dispatches to it is such a cycle even when no header shows it).
  3. No layer calls upward: the objects of a lower folder of src/ use no symbol defined in a
     higher one (base < wire < bootstrap < transport < reduce < coll < engine, elastic, ps).
  4. No import cycles among the modules of python/chorus/ (a package's __init__ included).
  5. Every function declared in include/ has a contract comment directly above it (or above
     the group of declarations it belongs to, with no blank line between).
  6. No getenv() outside src/base/config.c in src/, tools/, nn/.

Usage: check_structure.py [BUILD]   (BUILD: the build folder with obj/, default build)
Exit status 0 when every rule holds, 1 with one line per violation otherwise.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C_DIRS = ["src/coll", "src/engine"]
LAYERS = [["base"], ["wire"], ["bootstrap"], ["transport"], ["reduce"], ["coll"],
          ["engine", "elastic", "ps"]]
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def files_under(rel, exts):
    out = []
    for d, _, names in os.walk(os.path.join(ROOT, rel)):
        for n in sorted(names):
            if n.endswith(exts):
                out.append(os.path.relpath(os.path.join(d, n), ROOT))
    return sorted(out)


def find_cycles(graph):
    """Strongly connected components with more than one node (or a self loop), each as a
    list of nodes in a cycle order."""
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
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
            if len(comp) > 1 or v in graph.get(v, ()):
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return comps


def cycle_path(graph, comp):
    """One concrete cycle inside a strongly connected component, for the message."""
    members = set(comp)
    start = comp[0]
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def module_of(path):
    return os.path.splitext(path)[0]


def include_graph():
    graph = {}
    for rel in C_DIRS:
        for f in files_under(rel, (".c", ".h")):
            m = module_of(f)
            graph.setdefault(m, set())
            with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
                for line in fh:
                    mt = INCLUDE_RE.match(line)
                    if not mt:
                        continue
                    inc = mt.group(1)
                    for cand in (os.path.join(os.path.dirname(f), inc), os.path.join("src", inc)):
                        cand = os.path.normpath(cand)
                        if os.path.exists(os.path.join(ROOT, cand)):
                            dm = module_of(cand)
                            if dm != m and any(dm.startswith(d + "/") for d in C_DIRS):
                                graph[m].add(dm)
                            break
    return graph


def nm_symbols(obj):
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRVWGS" and parts[1].isupper():
            defined.add(parts[2])
    return defined, undefined


def object_symbols(build):
    objs = {}
    base = os.path.join(ROOT, build, "obj")
    for d, _, names in os.walk(os.path.join(base, "src")):
        for n in names:
            if n.endswith(".o"):
                o = os.path.join(d, n)
                src = os.path.relpath(o, base)[:-2] + ".c"
                if os.path.exists(os.path.join(ROOT, src)):
                    objs[module_of(src)] = nm_symbols(o)
    return objs


def call_graph(objs):
    owner = {}
    for m, (defined, _) in objs.items():
        for s in defined:
            owner[s] = m
    graph = {}
    for m, (_, undefined) in objs.items():
        graph[m] = {owner[s] for s in undefined if s in owner and owner[s] != m}
    return graph, owner


def layer_of(module):
    parts = module.split("/")
    if len(parts) < 2 or parts[0] != "src":
        return None
    for i, names in enumerate(LAYERS):
        if parts[1] in names:
            return i
    return None


def python_graph():
    """Module -> modules of python/chorus it imports, read with ast (so docstrings and
    comments do not count, and imports inside functions do)."""
    import ast
    pkg_root = os.path.join(ROOT, "python")
    mods = {}
    for f in files_under("python/chorus", (".py",)):
        rel = os.path.relpath(os.path.join(ROOT, f), pkg_root)[:-3].split(os.sep)
        if rel[-1] == "__init__":
            mods[".".join(rel[:-1])] = (f, rel[:-1])
        else:
            mods[".".join(rel)] = (f, rel[:-1])
    graph = {}
    for name, (f, pkg) in mods.items():
        with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), f)
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in mods)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = pkg[: len(pkg) - (node.level - 1)]
                    target = ".".join(anchor + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target in mods:
                    deps.add(target)
                for a in node.names:
                    sub = target + "." + a.name
                    if sub in mods:
                        deps.add(sub)
        # Importing a.b runs package a first: that edge (module -> its own package) is how
        # Python works, not a cycle to report.
        graph[name] = {d for d in deps if d != name and not name.startswith(d + ".")}
    return graph


DECL_RE = re.compile(r"^[A-Za-z_][\w \t\*]*\b(chorus_\w+)\s*\(")


def contract_comments():
    bad = []
    for f in files_under("include", (".h",)):
        with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
            lines = fh.read().splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            m = DECL_RE.match(line)
            if not m or line.lstrip().startswith(("typedef", "#", "return", "/*", "*")):
                i += 1
                continue
            if "/*" in line:  # a comment on the declaration's own line
                i += 1
                continue
            # Walk back over the declarations of this group (no blank line between) to the
            # comment that documents them.
            j, ok = i - 1, False
            while j >= 0:
                prev = lines[j].strip()
                if prev == "":
                    break
                if prev.endswith("*/"):
                    ok = True
                    break
                j -= 1
            if not ok:
                bad.append("%s:%d: %s has no contract comment above it" % (f, i + 1, m.group(1)))
            # skip the rest of a multi-line declaration
            while i < len(lines) and ";" not in lines[i] and "{" not in lines[i]:
                i += 1
            i += 1
    return bad


def getenv_calls():
    bad = []
    rx = re.compile(r"\b(secure_)?getenv\s*\(")
    for rel in ("src", "tools", "nn"):
        for f in files_under(rel, (".c", ".h")):
            if f == "src/base/config.c":
                continue
            with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
                for n, line in enumerate(fh, 1):
                    code = line.split("//")[0]
                    if rx.search(code) and not code.lstrip().startswith(("*", "/*")):
                        bad.append("%s:%d: getenv outside the config module" % (f, n))
    return bad


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    problems = []

    g = include_graph()
    for comp in find_cycles(g):
        problems.append("include cycle: " + " -> ".join(cycle_path(g, comp)))

    if os.path.isdir(os.path.join(ROOT, build, "obj", "src")):
        objs = object_symbols(build)
        cg, owner = call_graph(objs)
        sub = {m: {d for d in ds if any(d.startswith(x + "/") for x in C_DIRS)}
               for m, ds in cg.items() if any(m.startswith(x + "/") for x in C_DIRS)}
        for comp in find_cycles(sub):
            problems.append("call cycle among %d modules: " % len(comp)
                            + " -> ".join(cycle_path(sub, comp)))
        for m, (_, undefined) in sorted(objs.items()):
            lm = layer_of(m)
            for s in sorted(undefined):
                d = owner.get(s)
                ld = layer_of(d) if d else None
                if lm is not None and ld is not None and ld > lm:
                    problems.append("upward call: %s uses %s from %s" % (m, s, d))
    else:
        problems.append("no objects under %s/obj/src: build first (make)" % build)

    pg = python_graph()
    for comp in find_cycles(pg):
        problems.append("python import cycle: " + " -> ".join(cycle_path(pg, comp)))

    problems += contract_comments()
    problems += getenv_calls()

    for p in problems:
        print(p)
    nmods = len(g)
    print("structure: %d C modules, %d Python modules checked; %d problem(s)"
          % (nmods, len(pg), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
