"""What the package reads from libchorus instead of copying it, checked against the header,
and the package's module graph. One process, no job needed."""

import ast
import ctypes
import os
import re

import chorus
from chorus import _engine, _lib

from conftest import REPO

HEADER = open(os.path.join(REPO, "include", "chorus.h")).read()


def _enum(name_re):
    """The members of the typedef enum whose body matches name_re, in order."""
    for body in re.findall(r"typedef enum \{(.*?)\}", HEADER, re.S):
        if re.search(name_re, body):
            return [m for m in re.findall(r"\b(CHORUS_[A-Z0-9_]+)\b", body)
                    if not m.endswith("_COUNT")]
    raise AssertionError("no enum matching %s in chorus.h" % name_re)


def test_result_names_match_the_header():
    want = re.findall(r"X\((CHORUS_(?:OK|ERR_[A-Z_]+)),", HEADER)
    assert want and _lib.RESULT_NAMES == want
    assert _lib.lib.chorus_result_name(len(want)) is None
    assert _lib.lib.chorus_result_name(-1) is None


def test_dtype_and_op_codes_match_the_header():
    dtypes = _enum(r"CHORUS_FLOAT32")
    assert list(_lib.DTYPE) == [d[len("CHORUS_"):].lower() for d in dtypes]
    assert list(_lib.DTYPE.values()) == list(range(len(dtypes)))
    ops = _enum(r"CHORUS_SUM")
    assert [("CHORUS_" + n.upper()) for n in _lib.OP] == ops
    assert _lib.lib.chorus_dtype_name(len(dtypes)) is None
    assert _lib.lib.chorus_op_name(len(ops)) is None


def test_errors_carry_the_library_name():
    code = _lib.RESULT_NAMES.index("CHORUS_ERR_PEER_LOST")
    try:
        _lib.raise_for(code, None, "chorus test", "rank 1 went away")
    except chorus.ChorusPeerLostError as e:
        assert e.code_name == "CHORUS_ERR_PEER_LOST"
        assert str(e) == "chorus test: rank 1 went away [CHORUS_ERR_PEER_LOST]"
    else:
        raise AssertionError("raise_for did not raise")


def test_option_structs_have_the_library_layout():
    for cls, fn in ((_engine.EngineOpts, "chorus_engine_opts_size"),
                    (_engine.TensorOpts, "chorus_engine_tensor_opts_size")):
        if hasattr(_lib.lib, fn):
            f = getattr(_lib.lib, fn)
            f.restype = ctypes.c_size_t
            assert f() == ctypes.sizeof(cls)
            assert cls._fields_[0][0] == "size" and cls._fields_[1][0] == "version"


def test_bucket_plan_from_the_library():
    # the rule of chorus_engine_bucket_plan (tests/unit/bucket_plan.c), through ctypes
    assert _engine.bucket_plan([400, 100, 100, 300, 50, 60], 200) == ([2, 1, 1, 0, 0, 0], 3)
    assert _engine.bucket_plan([8, 0, 8], 0) == ([1, -1, 0], 2)
    assert _engine.bucket_plan([], 10) == ([], 0)


def _module_graph():
    """module -> set of chorus modules it imports at module level (function bodies excluded)."""
    root = os.path.join(REPO, "python")
    mods = {}
    for d, _, files in os.walk(os.path.join(root, "chorus")):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(d, f), root)[:-3].split(os.sep)
                pkg = rel[-1] == "__init__"
                mods[".".join(rel[:-1] if pkg else rel)] = (os.path.join(d, f), pkg)
    graph = {}
    for name, (path, pkg) in mods.items():
        base = name.split(".") if pkg else name.split(".")[:-1]
        edges = set()
        for node in ast.parse(open(path).read()).body:  # module level only
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    up = base[:len(base) - node.level + 1]
                    src = ".".join(up + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                targets = [src + "." + a.name if src + "." + a.name in mods else src
                           for a in node.names]
            edges |= {t for t in targets if t in mods and t != name}
        graph[name] = edges
    return graph


def test_no_import_cycle():
    graph = _module_graph()
    assert "chorus.torch.mpi_ops" in graph and "chorus._engine" in graph
    state = {}

    def visit(m, path):
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path + [m, n]))
            if n not in state:
                visit(n, path + [m])
        state[m] = 2
    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    # the layering: the engine is below the front ends, the handle registry below both
    assert "chorus.torch.mpi_ops" not in graph["chorus._engine"]
    assert graph["chorus._handles"] <= {"chorus._lib"}
