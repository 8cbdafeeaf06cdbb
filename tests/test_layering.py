"""gnnc's layers import downward only, without cycles, and the runtime never loads the compiler.

The layers follow the data's walk (ARCHITECTURE.md): source text goes
through `lang` into the `ir`, is rewritten by `transforms` and `conversion`,
becomes machine code in `target`, all driven by `driver`; beside them and
below the driver, a `graph` carries per-graph data, `autotune` decides what
to run on it, and the `runtime` loads, checks and calls. Every import,
including the lazy ones inside functions, is an edge; an edge to a layer not
listed below for its importer is a violation.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gnnc"

#: Leaves every layer may import: the error family, gnnc's version, the host CPU's features,
#: the caches' private directory, loading a shared object from its checked bytes.
LEAVES = {"errors", "version", "host", "cachedir", "sharedlib"}

#: What each layer may import besides itself and the leaves. `gnnc` is the
#: package's own __init__ (the public API).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "version": set(),
    "host": {"errors"},
    "cachedir": {"errors"},
    "sharedlib": set(),
    "ir": {"errors"},
    "lang": {"errors", "ir"},
    "transforms": {"errors", "ir"},
    "conversion": {"errors", "ir", "transforms"},
    "target": {"errors", "host", "ir"},
    "driver": {"errors", "host", "ir", "lang", "transforms", "conversion", "target"},
    "graph": {"errors", "ir"},
    "autotune": {"errors", "host", "ir", "graph"},
    "runtime": {"errors", "host", "ir", "graph", "autotune"},
    "reference": {"errors", "ir", "lang", "graph", "runtime"},
    "api": {"errors", "host", "ir", "lang", "driver", "graph", "autotune", "runtime", "reference"},
    "torch": {"errors", "host", "ir", "lang", "driver", "graph", "autotune", "runtime", "reference", "api", "gnnc"},
    "nn": {
        "errors",
        "host",
        "ir",
        "lang",
        "driver",
        "graph",
        "autotune",
        "runtime",
        "reference",
        "api",
        "torch",
        "gnnc",
    },
    "tools": {
        "errors",
        "host",
        "ir",
        "lang",
        "transforms",
        "conversion",
        "target",
        "driver",
        "graph",
        "autotune",
        "runtime",
        "reference",
        "api",
        "torch",
        "gnnc",
    },
    "gnnc": {"errors", "host", "ir", "graph", "autotune", "runtime", "api"},
}

#: Layers that run where the compiler may be absent: no xDSL, no llvmlite.
COMPILER_FREE = {"errors", "version", "host", "cachedir", "sharedlib", "graph", "autotune", "runtime"}
#: Modules of the ir layer that the runtime reads (plain Python records).
COMPILER_FREE_MODULES = {"gnnc.ir.abi", "gnnc.ir.schedule", "gnnc.ir.signature"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "gnnc"


def _imports(path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the file, lazy ones included."""
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                # `from pkg import sub` is an edge to the submodule when there is one
                found.append((f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base, node.lineno))
    return found


def _edges() -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: {m for m, _ in _imports(path, modules) if m in modules and m != name} for name, path in modules.items()
    }


def test_every_import_goes_down_a_layer():
    modules = _modules()
    bad = []
    for name, path in sorted(modules.items()):
        layer = _layer(name)
        assert layer in ALLOWED, f"{name}: layer '{layer}' is not in ALLOWED; say where it sits"
        for target, line in _imports(path, modules):
            if target.split(".")[0] != "gnnc":
                continue
            other = _layer(target)
            if other != layer and other not in ALLOWED[layer] | LEAVES:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {layer} imports {target} ({other})")
    assert not bad, "imports that go up a layer:\n" + "\n".join(bad)


def test_no_import_cycles():
    edges = _edges()
    # Tarjan's strongly connected components: any component of two or more modules is a cycle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_runtime_layers_import_no_compiler():
    modules = _modules()
    bad = []
    for name, path in sorted(modules.items()):
        if _layer(name) not in COMPILER_FREE and name not in COMPILER_FREE_MODULES:
            continue
        for target, line in _imports(path, modules):
            root = target.split(".")[0]
            if root in ("xdsl", "llvmlite") or (
                root == "gnnc" and _layer(target) == "ir" and target not in COMPILER_FREE_MODULES
            ):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line}: imports {target}")
    assert not bad, "the runtime side imports the compiler:\n" + "\n".join(bad)


def test_loading_and_calling_a_kernel_loads_no_compiler(tmp_path):
    # what a user script that only calls pre-compiled kernels pays for
    code = (
        "import sys, gnnc, gnnc.runtime.module, gnnc.graph.graph, gnnc.graph.plans, gnnc.autotune.heuristic\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('xdsl', 'llvmlite'))\n"
        "print(loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
