"""No import circles in the installed package.

Every module of ``petab_sciml`` (with ``petab_sciml.formats`` and
``petab_sciml.backends``, installed from ``formats/`` and ``backends/``) is parsed, and
every import it makes, at module level or inside a function, becomes an edge to the
most specific module it names.  A strongly connected component of more than one module
is a circle, even when imports inside functions keep it from failing at import time: such
a circle still means two modules that cannot be read or changed one without the other.

Only imports under ``if TYPE_CHECKING:`` may close a circle, and each one that does is
named in :data:`TYPE_CHECKING_EXCEPTIONS`.
"""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# (importer, imported) pairs allowed to close a circle, because the import only names a
# type for annotations: the helper modules of a class take the class as an argument.
TYPE_CHECKING_EXCEPTIONS: set[tuple[str, str]] = {
    # the legacy-format checks take the validation context
    ("petab_sciml.problem.legacy", "petab_sciml.problem.context"),
    # the plan builder's network and table steps take the builder
    ("petab_sciml.simulation.builder_networks", "petab_sciml.simulation.builder"),
    ("petab_sciml.simulation.builder_tables", "petab_sciml.simulation.builder"),
    # steady state is solved for a period of the PyTorch executor
    ("petab_sciml.backends.torch.steady_state", "petab_sciml.backends.torch.periods"),
    # the TorchScript reader's aten and layer handlers take the reader
    ("petab_sciml.formats.torchscript_aten", "petab_sciml.formats.torchscript"),
    ("petab_sciml.formats.torchscript_layers", "petab_sciml.formats.torchscript"),
}


def package_modules() -> dict[str, Path]:
    """Module name -> file, for every module of the installed package (pyproject's
    ``packages`` and ``package-dir``)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir = setuptools.get("package-dir", {})
    modules: dict[str, Path] = {}
    for package in setuptools["packages"]:
        folder = ROOT / package_dir.get(package, package.replace(".", "/"))
        for file in folder.glob("*.py"):
            name = package if file.stem == "__init__" else f"{package}.{file.stem}"
            modules[name] = file
    return modules


def _type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(tree: ast.AST, module: str, is_package: bool,
             type_checking: bool = False) -> list[tuple[str, bool]]:
    """(imported name, under TYPE_CHECKING) for every import statement in ``tree``."""
    found: list[tuple[str, bool]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, type_checking) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                parent = parts if is_package else parts[:-1]
                parent = parent[:len(parent) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            # ``from package import module`` names the module; ``from module import
            # name`` the module (resolved to the most specific module in import_graph).
            found += [(f"{base}.{alias.name}", type_checking) for alias in node.names]
        else:
            found += _imports(node, module, is_package,
                              type_checking or _type_checking_block(node))
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, bool]]:
    """importer -> {imported module: only under TYPE_CHECKING}."""
    graph: dict[str, dict[str, bool]] = {}
    for name, file in modules.items():
        edges: dict[str, bool] = {}
        tree = ast.parse(file.read_text(), str(file))
        for target, type_checking in _imports(tree, name, file.stem == "__init__"):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges[target] = edges.get(target, True) and type_checking
        graph[name] = edges
    return graph


def circles(graph: dict[str, dict[str, bool]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def runtime_graph(graph: dict[str, dict[str, bool]]) -> dict[str, dict[str, bool]]:
    """The graph without the named TYPE_CHECKING-only edges."""
    return {importer: {target: tc for target, tc in edges.items()
                       if not (tc and (importer, target) in TYPE_CHECKING_EXCEPTIONS)}
            for importer, edges in graph.items()}


def test_the_graph_covers_the_package():
    modules = package_modules()
    assert {"petab_sciml", "petab_sciml.formats", "petab_sciml.backends.jax",
            "petab_sciml.backends.torch", "petab_sciml.simulation.plan"} <= set(modules)
    graph = import_graph(modules)
    assert "petab_sciml.simulation.plan" in graph["petab_sciml.simulation.builder"]


def test_the_checker_finds_a_circle():
    graph = {"a": {"b": False}, "b": {"c": False}, "c": {"a": False}, "d": {"a": False}}
    assert circles(graph) == [["a", "b", "c"]]


def test_no_import_circles():
    graph = runtime_graph(import_graph(package_modules()))
    found = circles(graph)
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_type_checking_exceptions_are_still_needed():
    graph = import_graph(package_modules())
    for importer, target in TYPE_CHECKING_EXCEPTIONS:
        assert graph.get(importer, {}).get(target) is True, (importer, target)
