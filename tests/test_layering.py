"""The structure of the library (docs/ARCHITECTURE.md, "Layers: who may import whom"), read from the source with
``ast``: no import cycle (imports inside functions count; ``if TYPE_CHECKING:`` ones do not), the core never
imports a backend and spells out none of their names (it names them in ``circuitgrad/targets.py``), a toy
target defined in a test alone trains through ``compile_model``, no module uses another's private names, and
no function is over 150 lines."""
from __future__ import annotations

import ast
import os
from functools import lru_cache

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: where each installed package's source lives (setup.py maps circuitgrad.backends to backends/)
SOURCES = {"circuitgrad": "circuitgrad", "circuitgrad.backends": "backends"}
MAX_FUNCTION_LINES = 150
#: cycles still to remove, each with the reason it stays for now; the test fails on any other
#: cycle, and on one of these once it is gone (so the list only shrinks)
KNOWN_CYCLES: dict[frozenset[str], str] = {}


@lru_cache(maxsize=None)
def modules() -> dict[str, str]:
    """Every library module's dotted name -> its file."""
    out = {}
    for pkg, folder in SOURCES.items():
        base = os.path.join(ROOT, folder)
        for dirpath, dirnames, files in os.walk(base):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for f in files:
                if not f.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), base)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                if pkg == "circuitgrad" and rel[:1] == ["backends"]:
                    continue
                out[".".join([pkg, *rel])] = os.path.join(dirpath, f)
    return out


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST):
    """Every import statement, not counting those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _targets(mod: str, node: ast.AST, mods: dict[str, str]) -> list[tuple[str, str | None]]:
    """``(module imported, name taken from it or None)`` for each name of an import statement in ``mod``."""
    if isinstance(node, ast.Import):
        return [(a.name, None) for a in node.names]
    base = mod if mods[mod].endswith("__init__.py") else mod.rpartition(".")[0]
    if node.level:
        parts = base.split(".")
        base = ".".join(parts[:len(parts) - node.level + 1])
        source = f"{base}.{node.module}" if node.module else base
    else:
        source = node.module
    out = []
    for a in node.names:
        sub = f"{source}.{a.name}"
        out.append((sub, None) if sub in mods else (source, a.name))
    return out


@lru_cache(maxsize=None)
def graph() -> dict[str, set[str]]:
    mods = modules()
    g: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for node in _imports(ast.parse(open(path).read())):
            for target, _ in _targets(m, node, mods):
                if target in mods and target != m:
                    g[m].add(target)
    return g


def cycles(g: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = set()
            while True:
                w = stack.pop()
                on.discard(w)
                scc.add(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(frozenset(scc))
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    found = set(cycles(graph()))
    new = [sorted(c) for c in found - set(KNOWN_CYCLES)]
    assert new == [], f"import cycles (imports inside functions count): {new}"
    gone = [sorted(c) for c in set(KNOWN_CYCLES) - found]
    assert gone == [], f"these cycles are gone: remove them from KNOWN_CYCLES: {gone}"


def test_the_cycle_finder_finds_cycles():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(g) == [frozenset("abc")]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_core_never_imports_a_backend():
    """The core reaches a backend only through ``circuitgrad.targets`` (by name, when asked)."""
    bad = sorted(f"{m} -> {t}" for m, ts in graph().items() if not m.startswith("circuitgrad.backends")
                 for t in ts if t.startswith("circuitgrad.backends"))
    assert bad == []


def _names(tree: ast.AST) -> list[tuple[int, str]]:
    """The string constants of a module's code (docstrings left out), with their lines."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def _backend_names() -> set[str]:
    """What the core must not spell out: the runtimes of the targets whose code is under ``backends/``, and
    their packages."""
    from circuitgrad.targets import TARGETS
    out = set()
    for t in TARGETS.values():
        if t.package.startswith("circuitgrad.backends"):
            out |= set(t.backends) | {t.package}
    return out


def test_the_core_names_no_backend():
    """Only ``circuitgrad/targets.py`` names a backend's runtimes and modules; ``compile.py`` names no runtime at
    all (not even the CPU's): a new runtime is a row in the table, not an edit of the core."""
    from circuitgrad.targets import TARGETS
    banned = _backend_names()
    bad = []
    for m, path in modules().items():
        if m.startswith("circuitgrad.backends") or m == "circuitgrad.targets":
            continue
        here = banned | ({b for t in TARGETS.values() for b in t.backends} if m == "circuitgrad.compile" else set())
        tree = ast.parse(open(path, encoding="utf-8").read())
        bad += [f"{m}:{line}: {v!r}" for line, v in _names(tree)
                if v in here or v.startswith("circuitgrad.backends")]
    assert bad == []


def test_the_backend_name_check_finds_names():
    tree = ast.parse('"""the cupy backend"""\nx = "cupy-emulated"\ndef f():\n    """cupy"""\n    return "cupy"\n')
    assert [v for _, v in _names(tree) if v in _backend_names()] == ["cupy-emulated", "cupy"]


def _private_uses(mod: str, tree: ast.AST, mods: dict[str, str]) -> list[str]:
    out, aliases = [], {}
    for node in _imports(tree):
        for target, name in _targets(mod, node, mods):
            if name is not None and name.startswith("_") and not name.startswith("__") and target in mods \
                    and target != mod:
                out.append(f"{mod}:{node.lineno} imports {target}.{name}")
        if isinstance(node, ast.Import):
            aliases.update({a.asname or a.name.split(".")[0]: a.name for a in node.names if a.asname})
        else:
            for a, (target, name) in zip(node.names, _targets(mod, node, mods)):
                if name is None:
                    aliases[a.asname or a.name] = target
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            target = aliases.get(node.value.id)
            if target in mods and target != mod:
                out.append(f"{mod}:{node.lineno} uses {target}.{node.attr}")
    return out


def test_no_module_uses_another_modules_private_names():
    mods = modules()
    bad = [u for m, path in sorted(mods.items()) for u in _private_uses(m, ast.parse(open(path).read()), mods)]
    assert bad == []


def test_no_function_over_150_lines():
    long = sorted((node.end_lineno - node.lineno + 1, f"{m}.{node.name}")
                  for m, path in modules().items() for node in ast.walk(ast.parse(open(path).read()))
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES)
    assert long == [], f"functions over {MAX_FUNCTION_LINES} lines: {long}"


@pytest.mark.parametrize("source, found", [
    ("from .b import _x\n", ["circuitgrad.a:1 imports circuitgrad.b._x"]),
    ("from . import b\nb._y\n", ["circuitgrad.a:2 uses circuitgrad.b._y"]),
    ("from .b import x\nfrom . import b\nb.z\n", []),
])
def test_the_private_name_check_finds_private_names(source, found):
    fake = {"circuitgrad.a": os.path.join(ROOT, "circuitgrad", "a.py"),
            "circuitgrad.b": os.path.join(ROOT, "circuitgrad", "b.py")}
    assert _private_uses("circuitgrad.a", ast.parse(source), fake) == found


def test_no_test_imports_bench():
    """Tests import the library and their own helpers (``tests/_*.py``, ``tests/peers/``), never a benchmark:
    a benchmark may change its tables without breaking a test."""
    here = os.path.dirname(os.path.abspath(__file__))
    ours = {f[:-3] for f in os.listdir(here) if f.endswith(".py")} | {"peers"}
    bench = {f[:-3] for f in os.listdir(os.path.join(ROOT, "bench")) if f.endswith(".py")} - ours
    bad = []
    for f in sorted(os.listdir(here)):
        if not f.endswith(".py") or f == os.path.basename(__file__):
            continue
        tree = ast.parse(open(os.path.join(here, f)).read())
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        if "bench" in strings:
            bad.append(f"{f} names the bench folder")
        for node in _imports(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            bad += [f"{f} imports {n}" for n in names if n.split(".")[0] in bench]
    assert bad == []


def test_backends_import_core_modules_not_the_package_root():
    """``from circuitgrad.compile import compile_model``, not ``import circuitgrad as cg``: a backend names the core
    modules it uses, so what it depends on is visible and the root's ``__init__`` may import anything."""
    mods = modules()
    bad = []
    for m, path in sorted(mods.items()):
        if not m.startswith("circuitgrad.backends"):
            continue
        for node in _imports(ast.parse(open(path).read())):
            if isinstance(node, ast.Import):
                bad += [f"{m}:{node.lineno} import {a.name}" for a in node.names if a.name == "circuitgrad"]
            else:
                bad += [f"{m}:{node.lineno} from circuitgrad import {name}"
                        for target, name in _targets(m, node, mods) if target == "circuitgrad" and name]
    assert bad == []


class _Interpreted:
    """The toy runtime's compiled function: the program run by the reference interpreter, counting calls."""

    def __init__(self, program, arg_names, name, donate_pairs=None):
        from circuitgrad.interpret import run
        self.calls, self.source, self.launches = 0, f"# toy: {name}({', '.join(arg_names)})", 1
        self.donate_pairs = donate_pairs

        def call(*xs):
            self.calls += 1
            return run(program, xs)
        self.run = call


def test_a_toy_target_registered_in_the_test_alone_compiles_and_runs_a_model(monkeypatch):
    import sys
    import types

    import numpy as np

    import circuitgrad as cg
    from circuitgrad import nn
    from circuitgrad.targets import TARGETS, Runtime, Target, backend_target, backends

    """A runtime is a row: a target defined here (its module too) trains through ``compile_model``, and its
    options are checked from the row, with the core unchanged."""
    toy = types.ModuleType("toy_target")
    toy.compile_function = _Interpreted
    monkeypatch.setitem(sys.modules, "toy_target", toy)
    monkeypatch.setitem(TARGETS, "toy", Target("toy", "toy_target", "circuitgrad.interpret:FLOAT_RULES",
                                               "circuitgrad.costmodel.cpu",
                                               (Runtime("toy", "toy_target:compile_function", options=("donate",)),),
                                               title="the toy"))
    assert "toy" in backends() and backend_target("toy").name == "toy"
    model = nn.mlp(4, [3, 5, 2])
    step = cg.compile_model(model, nn.mse, nn.sgd(0.1), backend="toy", donate=True)
    ref = cg.compile_model(model, nn.mse, nn.sgd(0.1))
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    y = np.cos(x[:, :2])
    p = q = ref.init_params(seed=3)
    for _ in range(3):
        p, q = step.step(p, x, y), ref.step(q, x, y)
    f = step.fn("step").compiled
    assert isinstance(f, _Interpreted) and f.calls == 3 and f.donate_pairs is not None
    assert step.source.startswith("# toy: step(") and step.launches_per_step == 1
    for k in q:            # the interpreter against generated NumPy: float32 sums in another order
        np.testing.assert_allclose(p[k], q[k], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError) as e:
        cg.compile_model(model, nn.mse, nn.sgd(0.1), backend="toy", precision="tf32")
    assert str(e.value) == ("compile_model: precision='tf32' is for the GPU (backend='cupy' or 'cupy-emulated'); "
                            "the toy backend multiplies in the model's dtype")
    with pytest.raises(ValueError) as e:
        cg.compile_model(model, nn.mse, nn.sgd(0.1), backend="toy", dtype=cg.fixed(16, 8))
    assert str(e.value).startswith("compile_model: the toy backend computes in float32/float64, not fixed(16,8); "
                                   "fixed point runs on backend='numpy'")
