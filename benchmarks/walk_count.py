"""A key's walk through ``verify``: the audit functions one verification enters, counted.

How hard the audit is to follow is measured by the walk a reader takes from
:func:`espew_integrations.core.verify.verify_callable` to the verdict, found statically
(with :mod:`ast`; nothing is imported or run):

* the walk starts in ``core/verify.py:verify_callable``, whose ``key`` parameter is *the key*;
* from each function on the walk, every call that resolves to a function of the
  package is looked at (a name imported or defined in the module, ``module.f``,
  ``Class.method``, ``super().method``, and a method called on the key's design:
  ``key.design.m(...)``, ``self.m(...)`` inside a design, resolved through the
  default design's classes, ``MapDesign`` for ``"map"``);
* a call *enters* the function it resolves to when that function is in
  ``core/verify.py`` or ``core/audit/pipeline.py`` (the pipeline itself), or when
  it is in ``core/audit/`` or ``core/designs/`` (or is a design's method) and the
  call passes it the key, its design or the plan: an argument that is one of
  them (a parameter that received one; the names ``key``, ``design`` and ``plan``;
  ``key.design``), or the design itself as ``self``;
* a class called as a constructor enters its own ``__init__`` under the same rule.

**Stays** are the distinct functions the walk enters (``verify`` included);
**returns** are the ``return`` statements in their bodies (a nested function's
and a lambda's are not the walk's). Each function is entered once, whichever
call reaches it first. The *module tour* is a second reading of the same walk: the
modules it is in, in call order (a call into another module and back is two stays),
and how many of those stays come back to a module already visited.
``tests/unit/test_walk.py`` holds the ceilings; ``docs/results/walk.txt`` is this
script's output.

Run it::

    PYTHONPATH=. python benchmarks/walk_count.py            # the default design's walk
    PYTHONPATH=. python benchmarks/walk_count.py --design words
"""

from __future__ import annotations

import argparse
import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "espew_integrations"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
CORE = f"{PACKAGE}.core"
#: Modules whose every function a call enters.
PIPELINE = (f"{CORE}.verify", f"{CORE}.audit.pipeline")
#: Rooms whose functions a call enters when it hands them the key, its design or the plan.
AUDIT_ROOMS = (f"{CORE}.audit", f"{CORE}.designs")
#: Names that are the key, its design or the plan wherever they are bound.
CARRIER_NAMES = frozenset({"key", "design", "plan"})


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@dataclass
class Module:
    name: str
    is_package: bool
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.name.split(".")
    if not module.is_package:
        base = base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


@functools.cache
def load(root: Path = ROOT) -> dict[str, Module]:
    """Every module of the package: its top-level functions, classes and imports."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        module = Module(_module_name(path, root), path.name == "__init__.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                source = _absolute(module, node)
                for alias in node.names:
                    module.imports[alias.asname or alias.name] = (source, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    module.imports[alias.asname or alias.name] = (alias.name, None)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                module.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                module.classes[node.name] = node
        modules[module.name] = module
    return modules


@dataclass(frozen=True)
class Function:
    """A function of the package: its module, its class (or None) and its name."""

    module: str
    cls: str | None
    name: str

    def __str__(self) -> str:
        short = self.module.removeprefix(f"{CORE}.")
        return f"{short}.{self.cls}.{self.name}" if self.cls else f"{short}.{self.name}"


class Walker:
    """The walk from ``verify`` for keys of one design (see the module docstring)."""

    def __init__(self, modules: dict[str, Module], design: str):
        self.modules = modules
        self.design = self._design_class(design)
        self.entered: list[Function] = []
        self.tour: list[str] = []  # the modules the walk is in, in call order

    # ------------------------------------------------------------------ resolving
    def _design_class(self, name: str) -> tuple[str, str]:
        for module in self.modules.values():
            for cls in module.classes.values():
                for node in cls.body:
                    if (
                        isinstance(node, ast.Assign)
                        and any(isinstance(t, ast.Name) and t.id == "name" for t in node.targets)
                        and isinstance(node.value, ast.Constant)
                        and node.value.value == name
                        and module.name.startswith(f"{CORE}.designs")
                    ):
                        return module.name, cls.name
        raise SystemExit(f"no design named {name!r} in {CORE}.designs")

    def resolve(self, module: str, name: str) -> tuple[str, str, str] | None:
        """``(kind, module, name)`` a name of ``module`` is: a function, a class or a module."""
        mod = self.modules.get(module)
        if mod is None:
            return None
        if name in mod.functions:
            return "function", module, name
        if name in mod.classes:
            return "class", module, name
        if name in mod.imports:
            source, imported = mod.imports[name]
            if imported is None or f"{source}.{imported}" in self.modules:
                target = source if imported is None else f"{source}.{imported}"
                return ("module", target, "") if target in self.modules else None
            return self.resolve(source, imported)
        return None

    def mro(self, module: str, cls: str) -> Iterator[tuple[str, ast.ClassDef]]:
        """The class and its package bases, depth first (single inheritance here)."""
        node = self.modules[module].classes[cls]
        yield module, node
        for base in node.bases:
            if isinstance(base, ast.Name) and (found := self.resolve(module, base.id)):
                kind, base_module, base_name = found
                if kind == "class":
                    yield from self.mro(base_module, base_name)

    def method(self, module: str, cls: str, name: str, after: str | None = None) -> Function | None:
        seen_after = after is None
        for owner_module, owner in self.mro(module, cls):
            if not seen_after:
                seen_after = owner.name == after
                continue
            for node in owner.body:
                if isinstance(node, ast.FunctionDef) and node.name == name:
                    return Function(owner_module, owner.name, name)
        return None

    def node(self, function: Function) -> ast.FunctionDef:
        module = self.modules[function.module]
        if function.cls is None:
            return module.functions[function.name]
        cls = module.classes[function.cls]
        return next(
            n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == function.name
        )

    # ------------------------------------------------------------------ the walk
    def _is_carrier(self, node: ast.AST, carriers: set[str]) -> bool:
        if isinstance(node, ast.Name):
            return node.id in carriers or node.id in CARRIER_NAMES
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "design"
            and self._is_carrier(node.value, carriers)
        )

    def _callee(
        self, function: Function, call: ast.Call, carriers: set[str]
    ) -> tuple[Function, bool] | None:
        """The function a call reaches and whether it is a method bound to the design."""
        here, func = function.module, call.func
        if isinstance(func, ast.Name):
            found = self.resolve(here, func.id)
            if found and found[0] == "function":
                return Function(found[1], None, found[2]), False
            if found and found[0] == "class":
                init = self.method(found[1], found[2], "__init__")
                return (init, False) if init else None
            return None
        if not isinstance(func, ast.Attribute):
            return None
        owner = func.value
        in_design = function.cls is not None and any(
            m == function.module and c.name == function.cls for m, c in self.mro(*self.design)
        )
        if (
            (isinstance(owner, ast.Name) and owner.id == "self" and in_design)
            or (
                isinstance(owner, ast.Attribute)
                and owner.attr == "design"
                and self._is_carrier(owner.value, carriers)
            )
            or (isinstance(owner, ast.Name) and owner.id == "design")
        ):
            found_method = self.method(*self.design, func.attr)
            return (found_method, True) if found_method else None
        if (
            isinstance(owner, ast.Call)
            and isinstance(owner.func, ast.Name)
            and owner.func.id == "super"
        ):
            assert function.cls is not None
            found_method = self.method(*self.design, func.attr, after=function.cls)
            return (found_method, True) if found_method else None
        if isinstance(owner, ast.Name) and (found := self.resolve(here, owner.id)):
            kind, module, name = found
            if kind == "class":
                found_method = self.method(module, name, func.attr)
                return (found_method, False) if found_method else None
            if kind == "module" and func.attr in self.modules[module].functions:
                return Function(module, None, func.attr), False
        return None

    def _passed(
        self, callee: Function, call: ast.Call, carriers: set[str], bound: bool
    ) -> set[str] | None:
        """The callee's parameters that receive the key, its design or the plan, or None
        when the call hands it none of them (and the callee is not the design's own)."""
        params = [a.arg for a in self.node(callee).args.args]
        if callee.cls is not None and params and params[0] in ("self", "cls"):
            params = params[1:]
        passed = {
            param
            for param, arg in zip(params, call.args, strict=False)
            if self._is_carrier(arg, carriers)
        }
        passed |= {k.arg for k in call.keywords if k.arg and self._is_carrier(k.value, carriers)}
        return passed if passed or bound else None

    def walk(self, function: Function, carriers: set[str]) -> None:
        if function in self.entered:
            return
        self._visit(function.module)
        self.entered.append(function)
        body = self.node(function)
        for call in _calls(body):
            found = self._callee(function, call, carriers)
            if found is None:
                continue
            callee, bound = found
            passed = self._passed(callee, call, carriers, bound)
            in_audit = callee.module.startswith(AUDIT_ROOMS) or bound
            if callee.module in PIPELINE or (in_audit and passed is not None):
                self.walk(callee, passed or set())
                self._visit(function.module)  # back in the caller

    def _visit(self, module: str) -> None:
        if not self.tour or self.tour[-1] != module:
            self.tour.append(module)


def _calls(function: ast.FunctionDef) -> Iterator[ast.Call]:
    """The calls in a function's body, in source order, nested functions' included."""
    calls = [n for n in ast.walk(function) if isinstance(n, ast.Call)]
    yield from sorted(calls, key=lambda n: (n.lineno, n.col_offset))


def returns(function: ast.FunctionDef) -> int:
    """``return`` statements of the function's own body (not a nested function's)."""
    count, stack = 0, list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            count += 1
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return count


@dataclass(frozen=True)
class Walk:
    """A walk: each function entered with its ``return`` count, and the module tour."""

    steps: list[tuple[Function, int]]
    tour: list[str]

    @property
    def stays(self) -> int:
        return len(self.steps)

    @property
    def returns(self) -> int:
        return sum(n for _, n in self.steps)

    @property
    def module_stays(self) -> int:
        return len(self.tour)

    @property
    def module_returns(self) -> int:
        return len(self.tour) - len(set(self.tour))


def walk(design: str = "map", root: Path = ROOT) -> Walk:
    """The walk from ``verify`` for keys of ``design``."""
    walker = Walker(load(root), design)
    walker.walk(Function(f"{CORE}.verify", None, "verify_callable"), {"key"})
    return Walk([(f, returns(walker.node(f))) for f in walker.entered], walker.tour)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--design", default="map", help="the key's design (default: map)")
    args = parser.parse_args()
    found = walk(args.design)
    for function, n in found.steps:
        print(f"  {function}  ({n} return{'s' * (n != 1)})")
    tour = " > ".join(m.removeprefix(f"{CORE}.") for m in found.tour)
    print(f"module tour: {tour}")
    print(f"{args.design}: {found.stays} stays / {found.returns} returns")
    print(
        f"{args.design} (module tour): {found.module_stays} stays / "
        f"{found.module_returns} returns to a module already visited"
    )


if __name__ == "__main__":
    main()
