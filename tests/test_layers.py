"""The rules of the package's structure, as tests.

* Layers: a package imports only packages below it (lowest first):
  basics (``memfit._errors``, ``_units``, ``_events``, ``_choices``, ``_gpus``, ``_series``,
  ``_display``, ``_forked``, ``_interrupt``, ``_lazy``, ``_host_memory``, ``_patching``,
  ``_data_dirs``) <
  allocator < technique < workload < trace < estimator < advice < planner, monitor < snapshot <
  oom < runtime < report < integrations < cli. Packages on one rung (planner, monitor) do not import
  each other. Every import counts: at module level, inside functions, under ``TYPE_CHECKING``, and
  ``importlib.import_module("memfit...")`` with a literal name.
* No module imports another package's private module (``memfit.<pkg>._<mod>`` from outside
  ``memfit/<pkg>``): what others need is exported by the package's ``__init__``.
* The modules whose docstring says they import only the standard library (they are copied into
  programs whose Python has no memfit, see ``memfit.oom._bootstrap``) do: no memfit, no third
  party module; inside functions, torch (once the program has imported it) and optional
  modules guarded by ``except ImportError``.
"""

from __future__ import annotations

import ast
import pathlib
import sys
from collections.abc import Iterator

import memfit

SRC = pathlib.Path(memfit.__file__).parent

BASICS = "basics"
ORDER: list[set[str]] = [
    {BASICS},
    {"allocator"},
    {"technique"},
    {"workload"},
    {"trace"},
    {"estimator"},
    {"advice"},
    {"planner", "monitor"},
    {"snapshot"},
    {"oom"},
    {"runtime"},
    {"report"},
    {"integrations"},
    {"cli"},
]
RANK = {unit: rank for rank, units in enumerate(ORDER) for unit in units}
BASIC_MODULES = {
    "_errors",
    "_units",
    "_events",
    "_choices",
    "_gpus",
    "_series",
    "_tensors",
    "_display",
    "_forked",
    "_interrupt",
    "_lazy",
    "_host_memory",
    "_patching",
    "_data_dirs",
}
# the package's front door, ``python -m memfit`` and the command's first lines: above every layer
TOP = {"__init__", "__main__", "_command"}


def _sources() -> list[pathlib.Path]:
    return sorted(SRC.rglob("*.py"))


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["memfit", *parts])


def _imports(path: pathlib.Path) -> Iterator[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in the file, wherever it stands;
    ``from memfit.x import y`` gives ``memfit.x``, and ``memfit.x.y`` too where ``memfit.x`` is
    a package (``y`` may be one of its modules)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            yield node.lineno, base
            if _is_package(base):
                for alias in node.names:
                    yield node.lineno, f"{base}.{alias.name}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Attribute, ast.Name))
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def _is_package(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "memfit" and (SRC.joinpath(*parts[1:]) / "__init__.py").exists()


def _unit(module: str) -> str | None:
    """The layer unit of a ``memfit...`` module name: a package, ``basics``, or ``None`` for
    the root (``memfit`` itself) or names inside the root that are no module."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    if parts[1] in BASIC_MODULES:
        return BASICS
    if (SRC / parts[1]).is_dir():
        return parts[1]
    return None


def _own_unit(path: pathlib.Path) -> str:
    rel = path.relative_to(SRC)
    if len(rel.parts) > 1:
        return rel.parts[0]
    return rel.stem if rel.stem in TOP else BASICS


def _memfit_imports() -> Iterator[tuple[pathlib.Path, int, str]]:
    for path in _sources():
        for line, name in _imports(path):
            if name == "memfit" or name.startswith("memfit."):
                yield path, line, name


def test_every_package_has_a_place_in_the_layer_order():
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert packages - set(RANK) == set()
    roots = {p.stem for p in SRC.glob("*.py")}
    assert roots - BASIC_MODULES - TOP == set()


def test_no_package_imports_one_at_or_above_its_layer():
    violations = []
    for path, line, name in _memfit_imports():
        own = _own_unit(path)
        if own in TOP:
            continue
        if name == "memfit":
            violations.append(f"{path.relative_to(SRC)}:{line} imports {name} (the root)")
            continue
        target = _unit(name)
        if target is None or target == own:
            continue
        if RANK[target] >= RANK[own]:
            violations.append(f"{path.relative_to(SRC)}:{line} ({own}) imports {name} ({target})")
    assert sorted(set(violations)) == [], "\n".join(sorted(set(violations)))


def test_no_module_imports_another_packages_private_module():
    violations = []
    for path, line, name in _memfit_imports():
        parts = name.split(".")
        if len(parts) < 3 or parts[1] in BASIC_MODULES or not (SRC / parts[1]).is_dir():
            continue
        private = any(p.startswith("_") for p in parts[2:])
        if private and _own_unit(path) != parts[1]:
            violations.append(f"{path.relative_to(SRC)}:{line} imports {name}")
    assert sorted(set(violations)) == [], "\n".join(sorted(set(violations)))


# --- standard library only ------------------------------------------------------------------

_MARK = "imports only the standard library"
_LATE = {"torch", "tensorflow", "jax"}  # once the program imported them: inside functions only


def _stdlib_only_modules() -> list[pathlib.Path]:
    return [p for p in _sources() if _MARK in (ast.get_docstring(ast.parse(p.read_text())) or "")]


def _guards_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        caught = handler.type
        names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        if any(isinstance(n, ast.Name) and n.id in {"ImportError", "ModuleNotFoundError"}
               for n in names):  # fmt: skip
            return True
    return False


def _outside_stdlib(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Imports of the tree that break the rule: ``(line, module)``."""

    def visit(node: ast.AST, in_function: bool, guarded: bool) -> Iterator[tuple[int, str]]:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = ["." * node.level + (node.module or "")]
        for name in names:
            top = name.split(".")[0]
            if name.startswith(".") or top == "memfit":
                yield node.lineno, name
            elif top in sys.stdlib_module_names:
                continue
            elif not in_function or not (top in _LATE or guarded):
                yield node.lineno, name
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if isinstance(node, ast.Try) and _guards_import_error(node):
            for child in node.body:
                yield from visit(child, inner, True)
            for part in (node.handlers, node.orelse, node.finalbody):
                for child in part:
                    yield from visit(child, inner, guarded)
            return
        for child in ast.iter_child_nodes(node):
            yield from visit(child, inner, guarded)

    yield from visit(tree, False, False)


def test_the_standard_library_only_modules_are_found():
    found = {p.relative_to(SRC).as_posix() for p in _stdlib_only_modules()}
    assert {
        "oom/_observer.py",
        "monitor/_publisher.py",
        "monitor/_frameworks.py",
        "monitor/_framework_numbers.py",
    } <= found


def test_the_standard_library_only_modules_import_nothing_else():
    violations = []
    for path in _stdlib_only_modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, name in _outside_stdlib(tree):
            violations.append(f"{path.relative_to(SRC)}:{line} imports {name}")
    assert violations == [], "\n".join(violations)


def test_the_standard_library_check_sees_what_it_must():
    source = """
import json
import numpy
from memfit import _errors
def late():
    import torch
    import rich
    try:
        import pynvml
    except ImportError:
        pass
    from . import sibling
import torch
"""
    got = [name for _, name in _outside_stdlib(ast.parse(source))]
    assert got == ["numpy", "memfit", "rich", ".", "torch"]


MAX_PARAMETERS = 8  # a function that takes more is split, or its options become one object


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args]
    own = 1 if names and names[0] in ("self", "cls") else 0
    count = len(names) - own + len(a.kwonlyargs)
    return count + (a.vararg is not None) + (a.kwarg is not None)


def test_no_function_takes_more_than_eight_parameters():
    over = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = _parameters(node)
                if n > MAX_PARAMETERS:
                    over.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} takes {n}")
    assert over == [], "\n".join(over)


def test_the_parameter_count_sees_keywords_and_leaves_self_out():
    fn = ast.parse("def f(self, a, b=1, *args, c, **kw): pass").body[0]
    assert isinstance(fn, ast.FunctionDef)
    assert _parameters(fn) == 5
