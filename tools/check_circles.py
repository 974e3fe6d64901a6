#!/usr/bin/env python3
"""check_circles.py - the circles of check_structure.py found a second, independent way.

check_structure.py reads the #include lines itself and finds strongly connected components
of the graphs it builds from nm. This script shares none of that: the include graph is what
the compiler reports (gcc -MM, every header a file reaches, through other headers too), the
call graph is read from readelf's symbol tables, the Python imports from the token stream
(tokenize, where check_structure.py walks the syntax tree), and a module is on a circle when it
can reach itself, found by a search from every module. Modules are the same: a file's path
without its extension (a .c file and the .h beside it are one), over src/, nn/ and tools/, and
the dotted names of python/.

Each circle is printed once as the sorted set of its modules. KNOWN lists those of today's
tree, to be removed with the change that breaks each; a listed circle that no longer occurs
fails the check as stale.

Usage: check_circles.py [--root DIR] [BUILD]   (BUILD: the build folder with obj/, default
build; --root checks another tree than this one)
Exit status 0 when there is no circle but the known ones, 1 otherwise.
"""

import io
import os
import subprocess
import sys
import tokenize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TREES = ("src", "nn", "tools")

KNOWN = [
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


def python_edges():
    """Module -> modules of python/ it imports, read from the token stream (tokenize, not a
    syntax tree): every `import a.b` and `from .x import y` statement, wherever it is. A
    module importing a package it lies in is how Python loads it, not an edge."""
    base = os.path.join(ROOT, "python")
    files = {}
    for d, dirs, names in os.walk(base):
        dirs[:] = [x for x in dirs if x != "build"] if d == base else dirs
        for n in names:
            if n.endswith(".py"):
                parts = os.path.relpath(os.path.join(d, n), base)[:-3].split(os.sep)
                is_pkg = parts[-1] == "__init__"
                name = ".".join(parts[:-1] if is_pkg else parts)
                files[name] = (os.path.join(d, n), parts[:-1])
    edges = {}
    for name, (path, pkg) in files.items():
        with open(path, "rb") as fh:
            toks = [t for t in tokenize.tokenize(io.BytesIO(fh.read()).readline)
                    if t.type in (tokenize.NAME, tokenize.OP, tokenize.NEWLINE)]
        targets = set()
        for i, t in enumerate(toks):
            first = i == 0 or toks[i - 1].type == tokenize.NEWLINE or toks[i - 1].string == ":"
            if not first or t.string not in ("import", "from"):
                continue
            stmt = []
            for u in toks[i + 1:]:
                if u.type == tokenize.NEWLINE or u.string == ";":
                    break
                stmt.append(u.string)
            if t.string == "import":
                words = " ".join(stmt).replace(" . ", ".").replace(",", " , ").split()
                targets.update(w for w in words if w not in (",", "as"))
                continue
            dots = 0
            while stmt and stmt[0] in (".", "..."):
                dots += len(stmt.pop(0))
            mod = []
            while stmt and stmt[0] != "import":
                mod.append(stmt.pop(0))
            anchor = pkg[: len(pkg) - dots + 1] if dots else []
            target = ".".join(anchor + ["".join(mod)] if mod else anchor)
            targets.add(target)
            names = [w for w in stmt[1:] if w not in (",", "(", ")", "as")]
            targets.update(target + "." + w for w in names)
        edges[name] = {x for x in targets if x in files and x != name
                       and not name.startswith(x + ".")}
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
    found += ["python import circle: " + " ".join(g) for g in circles(python_edges())]
    bad = 0
    for f in found:
        known = f in KNOWN
        print(("known: " if known else "") + f)
        bad += not known
    for k in KNOWN:
        if k not in found:
            print("stale KNOWN entry (fixed: remove it): " + k)
            bad += 1
    print("circles (cc -MM, readelf, tokenize): %d found, %d problem(s)" % (len(found), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
