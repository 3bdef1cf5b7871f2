"""The package's layering: every import goes down the pipeline's stage order.

The stages, bottom first (a module may import its own stage and any stage below it):

    _errors  <  _units  <  expr  <  forest, derive  <  plan  <  schedule  <  lower  <  budget
        <  _pipeline  <  cc, viz  <  sq_jax (the package's public facade)

Stages of equal rank (``forest`` and ``derive``; ``cc`` and ``viz``) may not import each
other. ``derive`` (CC equation derivation) only writes equation text, so it sits just
above ``expr``, below ``cc``, whose drivers derive equations on demand.

The rule is checked on the source, not on ``sys.modules``: each module under
``src/sq_jax`` is parsed with :mod:`ast`, its relative imports are resolved, and every
``import``/``from ... import`` it runs *at import time* is an edge — module level,
inside ``try``/``if`` blocks, and under ``if TYPE_CHECKING:`` (type-only imports obey
the order too). An import inside a function body runs only when called; such a lazy
import may point up the stages only when it is listed in :data:`LAZY_UPWARD` with its
reason (an optional feature reached from below, like plotting a program).

Besides the order: no import cycle between stages, no import cycle between the modules
themselves (module-level imports), so every module can be imported first, and no module
reaches into another stage's private names (``from ..forest.x import _helper``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "sq_jax"

STAGES: dict[str, int] = {
    "_errors": 0,
    "_units": 1,
    "_enums": 1,
    "expr": 2,
    "derive": 3,
    "forest": 3,
    "plan": 4,
    "schedule": 5,
    "lower": 6,
    "budget": 7,
    "_pipeline": 8,
    "cc": 9,
    "viz": 9,
    "": 10,  # sq_jax/__init__.py: the public facade re-exports every stage
}
"""Rank of each stage (first component below ``sq_jax``): a module imports its own
stage or stages of a lower rank."""

LAZY_UPWARD: dict[tuple[str, str], str] = {
    ("sq_jax.lower.program", "sq_jax.viz"): "Program.plot_* draw the program's schedule",
}
"""Function-level imports allowed to point up the stages: (importer, imported stage)."""


def module_name(path: Path) -> str:
    """``sq_jax.plan.batch`` for ``src/sq_jax/plan/batch.py`` (a package: its name)."""
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage_of(module: str) -> str:
    """The stage a module belongs to: its first component below ``sq_jax``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(module: str, source: str, is_package: bool) -> list[tuple[str, int, bool]]:
    """``(imported module, line, lazy)`` for each ``sq_jax`` import in ``source``.

    ``lazy`` marks an import inside a function (runs when called). A ``from X import
    y`` where ``X.y`` is a module of the package counts as an import of ``X.y``.
    """
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def resolve(node: ast.ImportFrom) -> str:
        if node.level == 0:
            return node.module or ""
        base = package.split(".")
        base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def visit(nodes: list[ast.stmt], lazy: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.extend((a.name, node.lineno, lazy) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                target = resolve(node)
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.append((sub if is_module(sub) else target, node.lineno, lazy))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(node.body, True)
            elif isinstance(node, ast.If):
                visit(node.body, lazy)
                visit(node.orelse, lazy)
            elif isinstance(node, ast.Try):
                visit(node.body + node.orelse + node.finalbody, lazy)
                for handler in node.handlers:
                    visit(handler.body, lazy)
            elif isinstance(node, (ast.ClassDef, ast.With)):
                visit(node.body, lazy)

    visit(ast.parse(source).body, False)
    return [(m, line, lazy) for m, line, lazy in found if m.split(".")[0] == PACKAGE]


def is_module(name: str) -> bool:
    """Whether ``name`` is a module or package of ``src/``."""
    path = SRC.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def violations(module: str, source: str, is_package: bool = False) -> list[str]:
    """The imports of ``module`` that point up the stage order (one line each)."""
    here = stage_of(module)
    out = []
    for target, line, lazy in imports_of(module, source, is_package):
        there = stage_of(target)
        if there == here or STAGES[there] < STAGES[here]:
            continue
        if lazy and (module, f"{PACKAGE}.{there}" if there else PACKAGE) in LAZY_UPWARD:
            continue
        how = "in a function" if lazy else "at import time"
        out.append(
            f"{module}:{line} imports {target} {how}: stage `{there or PACKAGE}` "
            f"(rank {STAGES[there]}) is not below `{here or PACKAGE}` (rank {STAGES[here]})"
        )
    return out


def package_modules() -> dict[str, tuple[str, bool]]:
    """Every module of the package: name -> (source, is a package)."""
    return {
        module_name(p): (p.read_text(encoding="utf-8"), p.name == "__init__.py")
        for p in sorted((SRC / PACKAGE).rglob("*.py"))
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of nodes (first == last), or ``None``."""
    color: dict[str, int] = {}
    for start in sorted(graph):
        if color.get(start):
            continue
        path = [start]
        color[start] = 1
        stack = [iter(sorted(graph[start]))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                color[path.pop()] = 2
                stack.pop()
            elif color.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif not color.get(nxt):
                color[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


MODULES = package_modules()


def test_every_stage_is_known():
    unknown = {stage_of(m) for m in MODULES} - set(STAGES)
    assert not unknown, f"modules in stages without a rank: {sorted(unknown)}; add them to STAGES"


def test_imports_follow_the_stage_order():
    problems = [v for m, (src, pkg) in MODULES.items() for v in violations(m, src, pkg)]
    assert not problems, "imports up the stages:\n" + "\n".join(problems)


def test_lazy_upward_imports_are_still_needed():
    used = {
        (m, f"{PACKAGE}.{stage_of(t)}")
        for m, (src, pkg) in MODULES.items()
        for t, _, lazy in imports_of(m, src, pkg)
        if lazy
    }
    assert set(LAZY_UPWARD) <= used, f"stale LAZY_UPWARD entries: {set(LAZY_UPWARD) - used}"


def test_no_cycles_between_stages():
    graph: dict[str, set[str]] = {s: set() for s in STAGES}
    for m, (src, pkg) in MODULES.items():
        for target, _, lazy in imports_of(m, src, pkg):
            if not lazy and stage_of(target) != stage_of(m):
                graph[stage_of(m)].add(stage_of(target))
    assert _cycle(graph) is None, f"stages import each other: {_cycle(graph)}"


def test_no_import_cycles_between_modules():
    graph = {m: set() for m in MODULES}
    for m, (src, pkg) in MODULES.items():
        for target, _, lazy in imports_of(m, src, pkg):
            if not lazy and target != m and target in graph:
                graph[m].add(target)
    # a package's __init__ re-exports its modules; a module importing its own package
    # back (``from . import x``) would close a cycle through it and is caught here
    assert _cycle(graph) is None, f"modules import each other: {_cycle(graph)}"


def private_imports(module: str, source: str, is_package: bool) -> list[str]:
    """``from X import _name`` lines of ``module`` where ``X`` is in another stage."""
    package = module if is_package else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = package.split(".")
        target = node.module or ""
        if node.level:
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        if target.split(".")[0] != PACKAGE or stage_of(target) == stage_of(module):
            continue
        hidden = [a.name for a in node.names if a.name.startswith("_")]
        if hidden:
            out.append(f"{module}:{node.lineno} imports {hidden} from {target}")
    return out


def test_no_private_names_across_stages():
    problems = [v for m, (src, pkg) in MODULES.items() for v in private_imports(m, src, pkg)]
    assert not problems, "private names used across stages:\n" + "\n".join(problems)
    assert private_imports("sq_jax.lower.execute", "from ..forest.reference import _x\n", False)
    assert not private_imports("sq_jax.lower.execute", "from .ir import _y\n", False)


@pytest.mark.parametrize(
    ("module", "source", "stage"),
    [
        ("sq_jax.plan.batch", "from ..lower import lower_schedule\n", "lower"),
        ("sq_jax.plan.batch", "from ..lower.program import Program\n", "lower"),
        ("sq_jax.forest.nodes", "if TYPE_CHECKING:\n    from ..schedule import X\n", "schedule"),
        ("sq_jax.expr.parse", "import sq_jax.forest.build\n", "forest"),
        ("sq_jax.schedule.rich", "def f():\n    from ..budget import plan_for_budget\n", "budget"),
        ("sq_jax._units", "from .expr import Index\n", "expr"),
        ("sq_jax.cc.cli", "from ..viz import plot_loop_nest\n", "viz"),
        ("sq_jax._errors", "from ._units import parse_bytes\n", "_units"),
    ],
)
def test_an_upward_import_is_caught(module, source, stage):
    (problem,) = violations(module, source)
    assert f"stage `{stage}`" in problem and module in problem


def test_downward_and_sibling_imports_pass():
    assert violations("sq_jax.lower.program", "from ..schedule import ScheduledForest\n") == []
    assert violations("sq_jax.lower.program", "from .memory import memory_model\n") == []
    assert violations("sq_jax.budget.search", "from .._units import parse_bytes\n") == []
    # the one allowed lazy upward import, and only lazily
    lazy = "def plot(self):\n    from ..viz import plot_peak_profile\n"
    assert violations("sq_jax.lower.program", lazy) == []
    assert violations("sq_jax.lower.program", "from ..viz import plot_peak_profile\n")


def test_a_cycle_is_found():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_tests_import_shared_code_from_tests_helpers():
    """A test module never imports another test module or a helper by bare name."""
    tests_dir = Path(__file__).parent
    local = {p.stem for p in tests_dir.glob("*.py")} | {
        p.stem for p in (tests_dir / "helpers").glob("*.py")
    }
    problems = []
    for path in sorted(tests_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            bad = [n for n in names if n.split(".")[0] in local or n.startswith("tests.test_")]
            problems += [f"{path.relative_to(tests_dir)}: import {n}" for n in bad]
    assert problems == [], "import shared test code from tests.helpers:\n" + "\n".join(problems)
