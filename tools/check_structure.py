#!/usr/bin/env python3
"""check_structure.py - structure rules anyone can rerun (make check-structure; a test too).

A module is a file's path without its extension: a .c file and the .h of the same name beside
it are one module. The rules, over every module of src/, nn/ and tools/:

  1. No include circle: module A depends on module B when a file of A includes B's header.
  2. No call circle, read from the built objects with nm: A depends on B when A's object uses
     a symbol B's object defines (a file calling up into the one that calls it is a circle
     even when no header shows it).
  3. Layers in order, by includes and by calls: base < wire < bootstrap < transport < reduce <
     coll < engine, elastic, ps < launch (the folders of src/) < nn < tools. No file includes a
     header of a higher layer, no object uses a symbol a higher layer defines.
  4. The tools include only the public headers (include/chorus.h, include/chorus/*.h) and the
     headers of their own folder.
  5. Sizes: no file of src/, nn/ or tools/ over 900 lines, no C function over 120 lines (from
     the line its declaration starts on to its closing brace).
  6. No import circle among the modules of python/ (a package's __init__ included).
  7. Every function declared in include/ has a contract comment directly above it (or above
     the group of declarations it belongs to, with no blank line between).
  8. No getenv() outside src/base/config.c in src/, tools/, nn/, and no chorus__env("NAME") of
     a variable of src/base/config_table.h (a row or a job variable) outside it: those are
     read through the table (chorus__config_text, chorus__job_vars_read).
  9. The Python package passes options to the library through the C API
     (chorus_config_set), never by writing a CHORUS_* variable into os.environ.
 10. docs/ARCHITECTURE.md stays true: its one picture of the layers lists the folders of
     LAYERS below, highest first; each of its walks of a gradient (a fenced block whose first
     line is "walk: ...", then one file per line) names files that exist, and visits their
     folders in layer order, highest first (the Python package above tools/, a sub-package
     above its package), none twice.
 11. Transports apart: no file of one transport (src/transport/<name>/) includes a header of
     another, and no object of one uses a symbol another defines; they meet through
     src/transport/transport.h (what one needs of another comes as a chorus_transport).

check_circles.py finds the circles of rules 1 and 2 a second way (the compiler's dependency
lists and readelf's symbol tables, reachability instead of strongly connected components);
make check-structure runs both.

ALLOWED below lists the violations known today, each by its exact key: they are printed as
known and do not fail the check. An entry that no longer occurs fails it as stale, so the list
only shrinks; it is empty once the tree obeys every rule.

Usage: check_structure.py [--no-allow] [--allow KEY]... [--root DIR] [BUILD]   (BUILD: the
build folder with obj/, default build; --no-allow reports the listed violations as failures
too; --allow adds an entry to ALLOWED for this run; --root checks another tree than this one,
as the structure_selftest test does)
Exit status 0 when every rule holds, 1 with one line per violation otherwise.
"""

import ast
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C_TREES = ["src", "nn", "tools"]
LAYERS = [["src/base"], ["src/wire"], ["src/bootstrap"], ["src/transport"], ["src/reduce"],
          ["src/coll"], ["src/engine", "src/elastic", "src/ps"], ["src/launch"], ["nn"],
          ["tools"]]
MAX_FILE_LINES = 900
MAX_FUNCTION_LINES = 120
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+[<"]([^">]+)[">]')

# Violations known today, each named exactly as the check prints it. Remove an entry with
# the change that fixes it (a stale entry fails the check); add none.
ALLOWED = [
]


def files_under(rel, exts):
    out = []
    for d, _, names in os.walk(os.path.join(ROOT, rel)):
        for n in sorted(names):
            if n.endswith(exts):
                out.append(os.path.relpath(os.path.join(d, n), ROOT))
    return sorted(out)


def c_files():
    return [f for t in C_TREES for f in files_under(t, (".c", ".h"))]


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


def layer_of(module):
    for i, folders in enumerate(LAYERS):
        if any(module == f or module.startswith(f + "/") for f in folders):
            return i
    return None


def resolve_include(f, inc):
    """The file an #include of f names, as the compiler finds it (-Iinclude -Isrc), or None
    for a system header."""
    for cand in (os.path.join(os.path.dirname(f), inc), os.path.join("src", inc),
                 os.path.join("include", inc)):
        cand = os.path.normpath(cand)
        if os.path.exists(os.path.join(ROOT, cand)):
            return cand
    return None


def includes():
    """(file, line number, included file) for every include of src/, nn/ and tools/ that
    names a file of the repository."""
    out = []
    for f in c_files():
        with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                mt = INCLUDE_RE.match(line)
                if mt:
                    target = resolve_include(f, mt.group(1))
                    if target:
                        out.append((f, n, target))
    return out


def include_graph(incs):
    graph = {module_of(f): set() for f in c_files()}
    for f, _, target in incs:
        m, dm = module_of(f), module_of(target)
        if dm != m and dm in graph:
            graph[m].add(dm)
    return graph


def transport_of(path):
    """The transport a file or module belongs to (src/transport/<name>/...), or None."""
    m = re.match(r"src/transport/([^/]+)/", path)
    return m.group(1) if m else None


def include_rules(incs):
    """Rules 3 and 9 by includes, and rule 4."""
    bad = []
    for f, _, target in incs:
        tf, tt = transport_of(f), transport_of(target)
        if tf and tt and tf != tt:
            bad.append(("cross-transport include: %s includes %s" % (f, target), ""))
        lf, lt = layer_of(module_of(f)), layer_of(module_of(target))
        if lf is not None and lt is not None and lt > lf:
            bad.append(("upward include: %s includes %s" % (f, target), ""))
        if f.startswith("tools/") and not target.startswith("include/") \
                and os.path.dirname(target) != os.path.dirname(f):
            bad.append(("private include: %s includes %s" % (f, target), ""))
    return bad


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
    """Module -> (symbols defined, symbols used) of its object; the .c files without one."""
    objs, missing = {}, []
    for f in c_files():
        if not f.endswith(".c"):
            continue
        o = os.path.join(ROOT, build, "obj", f[:-2] + ".o")
        if os.path.exists(o):
            objs[module_of(f)] = nm_symbols(o)
        else:
            missing.append(f)
    return objs, missing


def call_graph(objs):
    """Module -> modules whose symbols it uses. A name several modules define (each tool's
    main) belongs to the one in the user's own folder."""
    owners = {}
    for m, (defined, _) in objs.items():
        for s in defined:
            owners.setdefault(s, []).append(m)
    graph, owner_of = {}, {}
    for m, (_, undefined) in objs.items():
        graph[m] = set()
        for s in undefined:
            cands = owners.get(s, [])
            near = [c for c in cands if os.path.dirname(c) == os.path.dirname(m)]
            d = (near or cands or [None])[0]
            if d and d != m:
                graph[m].add(d)
                owner_of[(m, s)] = d
    return graph, owner_of


def upward_calls(objs, owner_of):
    bad = []
    for m, (_, undefined) in sorted(objs.items()):
        lm = layer_of(m)
        for s in sorted(undefined):
            d = owner_of.get((m, s))
            ld = layer_of(d) if d else None
            if lm is not None and ld is not None and ld > lm:
                bad.append(("upward call: %s uses %s from %s" % (m, s, d), ""))
            tm, td = transport_of(m), transport_of(d) if d else None
            if tm and td and tm != td:
                bad.append(("cross-transport call: %s uses %s from %s" % (m, s, d), ""))
    return bad


def strip_c(text):
    """The text with comments, string and character literals and preprocessor lines blanked
    (newlines kept, so line numbers hold)."""
    out, i, n = [], 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            while i < n and text[i] != "\n":  # a directive, with its continuation lines
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append("\n")
                    i += 2
                    continue
                i += 1
            continue
        if c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "/" and text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j, n - 1) - i + 1))
            i = j + 1
            continue
        out.append(c)
        if c == "\n":
            at_line_start = True
        elif not c.isspace():
            at_line_start = False
        i += 1
    return "".join(out)


def function_name(head):
    """The name before the parameter list that ends a declaration ("int f(int a)" -> "f"), or
    None when the text does not end in one (an initializer, a struct)."""
    body = head.rstrip()
    if not body.endswith(")") or "=" in body:
        return None
    depth = 0
    for i in range(len(body) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(body[i], 0)
        if depth == 0:
            mt = re.search(r"(\w+)\s*$", body[:i])
            return mt.group(1) if mt else None
    return None


def c_functions(f):
    """(name, lines) of every function defined in the C file f: a brace at file level whose
    declaration ends in a parameter list; lines from the declaration's first to the closing
    brace."""
    with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
        text = strip_c(fh.read())
    funcs, depth, line, head, head_line, start = [], 0, 1, "", None, None
    for c in text:
        if depth == 0:
            if c == "{":
                name = function_name(head)
                kw = head.split()[0] if head.split() else ""
                start = (name, head_line) if name and kw not in (
                    "struct", "union", "enum", "typedef") else None
                depth = 1
            elif c == ";":
                head, head_line = "", None
            else:
                if not c.isspace() and head_line is None:
                    head_line = line
                head += c
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                if start:
                    funcs.append((start[0], line - start[1] + 1))
                head, head_line, start = "", None, None
        if c == "\n":
            line += 1
    return funcs


def size_rules():
    bad = []
    for t in C_TREES:
        for f in files_under(t, (".c", ".h", ".py", ".sh", ".map")):
            with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
                n = sum(1 for _ in fh)
            if n > MAX_FILE_LINES:
                bad.append(("long file: " + f, " (%d lines, at most %d)" % (n, MAX_FILE_LINES)))
            if f.endswith(".c"):
                for name, lines in c_functions(f):
                    if lines > MAX_FUNCTION_LINES:
                        bad.append(("long function: %s %s" % (f, name),
                                    " (%d lines, at most %d)" % (lines, MAX_FUNCTION_LINES)))
    return bad


def python_graph():
    """Module -> modules of python/ it imports (the package, setup.py and the build helpers;
    not the build output python/build/), read with ast (so docstrings and comments do not
    count, and imports inside functions do)."""
    pkg_root = os.path.join(ROOT, "python")
    mods = {}
    for f in files_under("python", (".py",)):
        if f.startswith("python/build/"):
            continue
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


def table_names():
    """The variables of the config table and the job variables (src/base/config_table.h)."""
    path = os.path.join(ROOT, "src", "base", "config_table.h")
    if not os.path.exists(path):
        return set()
    with open(path, encoding="utf-8") as fh:
        return set(re.findall(r"^CHORUS_(?:CFG|JOB_VAR)\((\w+),", fh.read(), re.M))


def getenv_calls():
    """Rule 8: no getenv outside the config module, and no chorus__env of a variable of the
    tables (those are read through them: chorus__config_text, chorus__job_vars_read)."""
    bad = []
    names = table_names()
    getenv_rx = re.compile(r"\b(secure_)?getenv\s*\(")
    env_rx = re.compile(r'\bchorus__env\s*\(\s*"(\w+)"')
    for rel in ("src", "tools", "nn"):
        for f in files_under(rel, (".c", ".h")):
            if f == "src/base/config.c":
                continue
            with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
                for n, line in enumerate(fh, 1):
                    code = line.split("//")[0]
                    if getenv_rx.search(code) and not code.lstrip().startswith(("*", "/*")):
                        bad.append("%s:%d: getenv outside the config module" % (f, n))
                    for name in env_rx.findall(code):
                        if name in names:
                            bad.append("%s:%d: chorus__env(\"%s\") reads a variable of the "
                                       "config table around it" % (f, n, name))
    return bad


def _chorus_var(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, str) \
        and node.value.startswith("CHORUS_")


def _is_environ(node):
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def python_env_writes():
    """Rule 9: CHORUS_* variables written into os.environ (an assignment, update, setdefault
    or putenv) by the Python package, instead of chorus_config_set."""
    bad = []
    for f in files_under("python/chorus", (".py",)):
        with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), f)
        for node in ast.walk(tree):
            hit = None
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                hit = any(isinstance(t, ast.Subscript) and _is_environ(t.value)
                          and _chorus_var(t.slice) for t in targets)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                fn = node.func
                if fn.attr in ("update", "setdefault") and _is_environ(fn.value):
                    hit = any(_chorus_var(a) for a in node.args[:1]) or any(
                        (k.arg or "").startswith("CHORUS_") for k in node.keywords)
                elif fn.attr == "putenv":
                    hit = any(_chorus_var(a) for a in node.args[:1])
            if hit:
                bad.append("%s:%d: a CHORUS_* variable written into os.environ (pass it with "
                           "chorus_config_set)" % (f, node.lineno))
    return bad


DOC = "docs/ARCHITECTURE.md"


def doc_blocks(lines, first):
    """The fenced blocks of a document whose first line starts with `first`: (line number of
    that line, its text, [(line number, text) of the lines after it])."""
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```") and i + 1 < len(lines) and lines[i + 1].startswith(first):
            j = i + 2
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append((i + 2, lines[i + 1], [(k + 1, lines[k]) for k in range(i + 2, j)]))
            i = j
        i += 1
    return out


def walk_rank(path):
    """Where a file's folder stands in the layers: a layer of LAYERS, above them the Python
    package (a sub-package above the package it lies in)."""
    if path.startswith("python/"):
        return len(LAYERS) + path.count("/") - 1
    return layer_of(module_of(path))


def doc_rules():
    """Rule 10: docs/ARCHITECTURE.md's picture of the layers lists the folders of LAYERS, top
    row the highest; each of its walks (a block starting "walk:") names files that exist, and
    the folders it visits are in layer order, highest first, none visited twice."""
    path = os.path.join(ROOT, DOC)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    bad, folder_rx = [], re.compile(r"^((?:src|nn|tools)(?:/\w+)*)/$")
    pictures = doc_blocks(lines, "layers:")
    if len(pictures) != 1:
        bad.append("%s: %d pictures of the layers (a block starting \"layers:\"), want one"
                   % (DOC, len(pictures)))
    for _, _, body in pictures:
        rows = []
        for _, text in body:
            cells = [c.strip() for c in text.strip().strip("|").split("  ") if c.strip()]
            folders = [c for c in (cells[0].split() if cells else []) if folder_rx.match(c)]
            if folders:
                rows.append([f.rstrip("/") for f in folders])
        if rows != list(reversed(LAYERS)):
            bad.append("%s: the picture of the layers shows %s, LAYERS (highest first) is %s"
                       % (DOC, rows, list(reversed(LAYERS))))
    walks = doc_blocks(lines, "walk:")
    if len(walks) < 2:
        bad.append("%s: %d walks of a gradient (blocks starting \"walk:\"), want two"
                   % (DOC, len(walks)))
    for n, title, body in walks:
        name = title[len("walk:"):].strip()
        seen, prev = [], None
        for ln, text in body:
            f = text.split()[0] if text.split() else ""
            if not f:
                continue
            if not os.path.exists(os.path.join(ROOT, f)):
                bad.append("%s:%d: walk %s names %s, which does not exist" % (DOC, ln, name, f))
                continue
            folder, rank = os.path.dirname(f), walk_rank(f)
            if rank is None:
                bad.append("%s:%d: walk %s: %s is in no layer" % (DOC, ln, name, f))
            elif seen and folder != seen[-1][0] and folder in [s[0] for s in seen]:
                bad.append("%s:%d: walk %s comes back to %s/" % (DOC, ln, name, folder))
            elif prev is not None and rank > prev:
                bad.append("%s:%d: walk %s goes up, from %s/ to %s/"
                           % (DOC, ln, name, seen[-1][0], folder))
            if rank is not None:
                prev = rank
                seen.append((folder, rank))
        if not seen:
            bad.append("%s:%d: walk %s names no file" % (DOC, n, name))
    return bad


def circle(kind, graph, comp, why):
    """A circle's key (its modules) and detail (one loop through them, then every edge among
    them, with a symbol that makes each call edge)."""
    members = set(comp)
    edges = ["%s -> %s%s" % (m, d, " (%s)" % why[(m, d)] if (m, d) in why else "")
             for m in sorted(comp) for d in sorted(graph.get(m, ())) if d in members]
    return ("%s circle: %s" % (kind, ", ".join(sorted(comp))),
            "\n    loop: %s\n    edges: %s" % (" -> ".join(cycle_path(graph, comp)),
                                              ", ".join(edges)))


def main():
    global ROOT
    args = sys.argv[1:]
    use_allow = "--no-allow" not in args
    args = [a for a in args if a != "--no-allow"]
    while args[:1] == ["--allow"] and len(args) > 1:  # an entry more, as if listed in ALLOWED
        ALLOWED.append(args[1])
        args = args[2:]
    if args[:1] == ["--root"] and len(args) > 1:
        ROOT, args = os.path.abspath(args[1]), args[2:]
    build = args[0] if args else "build"
    found = []  # (key, detail): the key names the violation, the detail measures it

    incs = includes()
    g = include_graph(incs)
    for comp in find_cycles(g):
        found.append(circle("include", g, comp, {}))
    found += include_rules(incs)

    objs, missing = object_symbols(build)
    for f in missing:
        found.append(("no object for %s under %s/obj: build first (make trainer)" % (f, build),
                      ""))
    cg, owner_of = call_graph(objs)
    why = {}
    for (m, s), d in sorted(owner_of.items()):
        why.setdefault((m, d), s)
    for comp in find_cycles(cg):
        found.append(circle("call", cg, comp, why))
    found += upward_calls(objs, owner_of)
    found += size_rules()

    pg = python_graph()
    for comp in find_cycles(pg):
        found.append(circle("python import", pg, comp, {}))
    found += [(p, "") for p in contract_comments()]
    found += [(p, "") for p in getenv_calls()]
    found += [(p, "") for p in python_env_writes()]
    found += [(p, "") for p in doc_rules()]

    allowed = set(ALLOWED) if use_allow else set()
    keys = {k for k, _ in found}
    problems = 0
    for k, detail in found:
        if k in allowed:
            print("known (allow-list): " + k + detail)
        else:
            print(k + detail)
            problems += 1
    for k in ALLOWED if use_allow else []:
        if k not in keys:
            print("stale allow-list entry (fixed: remove it from ALLOWED): " + k)
            problems += 1
    known = sum(1 for k, _ in found if k in allowed)
    print("structure: %d C modules (%d objects), %d Python modules checked; %d problem(s), "
          "%d known" % (len(g), len(objs), len(pg), problems, known))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
