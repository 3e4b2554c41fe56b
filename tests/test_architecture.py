"""Tier 1: the package's shape (issue 11's rules, kept by a test): no import circle between
dpmpi's modules, no module using another's private names, no file over 400 lines, no class over
250 lines."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_FILE_LINES = 400
MAX_CLASS_LINES = 250


def _modules():
    mods = {}
    for path in (ROOT / "dpmpi").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODS = _modules()


def _owner(name):
    """The dpmpi module that ``name`` (a dotted import target) lives in."""
    while name and name not in MODS:
        name = name.rpartition(".")[0]
    return name


def _imports(mod, path):
    """(edges to other dpmpi modules, private names used from them) for one module. Imports
    under ``if TYPE_CHECKING:`` do not run and do not count."""
    tree = ast.parse(path.read_text())
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    skip = {id(n) for t in ast.walk(tree) if isinstance(t, ast.If) and "TYPE_CHECKING" in ast.unparse(t.test)
            for n in ast.walk(t)}
    edges, private, bound = set(), [], {}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("dpmpi."):
                    edges.add(_owner(a.name))
                    bound[a.asname or a.name] = _owner(a.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            if not (base == "dpmpi" or base.startswith("dpmpi.")):
                continue
            for a in node.names:
                full = f"{base}.{a.name}"
                if full in MODS:
                    edges.add(full)
                    bound[a.asname or a.name] = full
                else:
                    edges.add(_owner(base))
                    if a.name.startswith("_") and not a.name.startswith("__") and a.name != "_cext":
                        private.append(f"from {base} import {a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            target = bound[node.value.id]
            if node.attr.startswith("_") and not node.attr.startswith("__") and f"{target}.{node.attr}" not in MODS:
                private.append(f"{node.value.id}.{node.attr} ({target})")
    edges.discard(mod)
    edges.discard("dpmpi")  # every submodule's import runs the package's __init__: not a circle
    return edges, private


def _cycles(graph):
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle():
    graph = {m: _imports(m, p)[0] for m, p in MODS.items() if m != "dpmpi"}
    assert _cycles(graph) == []


def test_a_circle_is_found():  # the check itself can fail
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("mod", sorted(MODS))
def test_no_private_name_of_another_module(mod):
    assert _imports(mod, MODS[mod])[1] == []


@pytest.mark.parametrize("mod", sorted(MODS))
def test_small_files_and_classes(mod):
    text = MODS[mod].read_text()
    assert len(text.splitlines()) <= MAX_FILE_LINES, f"{MODS[mod].relative_to(ROOT)}: split it along its seams"
    big = [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(text))
           if isinstance(n, ast.ClassDef) and n.end_lineno - n.lineno + 1 > MAX_CLASS_LINES]
    assert big == []
