"""Every Sphinx role in the package's and the lab's docstrings and comments names a thing.

A reference such as ``:func:`.plan.plan_audit```, ``:meth:`..mark.design.MarkingDesign.decide```,
``:class:`~espew_integrations.core.keys.key.WatermarkKey``` or a bare
``:class:`AuditOptions``` goes stale silently when a module moves or a name is
renamed: nothing imports a docstring (issue 52 counted 71 of 174 relative ``:mod:``
references naming modules that had moved). This test parses every module of
``espew_integrations`` and ``espew_lab`` with :mod:`ast`, importing nothing, so it runs
in the core-only unit tier, and resolves each ``:mod:``, ``:func:``, ``:class:``,
``:meth:``, ``:attr:``, ``:data:``, ``:exc:`` and ``:obj:`` target in their docstrings
and comments:

- A leading ``~`` (show the last part) or ``!`` (no link) is dropped, and
  ``title <target>`` resolves ``target``.
- A target with leading dots is relative, resolved as Python resolves ``from .x
  import y``: one dot is the module's own package, each further dot one package up.
- A target whose first part is a top-level package of the tree is absolute.
- Any other target is bare, looked up where it is written: the enclosing classes'
  members (innermost first), the module's own top-level names, the names it imports
  (followed to where they are defined), the builtins, and dotted names under
  :data:`EXTERNAL` or the standard library (a bare ``trace`` is not the stdlib's).

A relative or absolute target names an address: its module must be a file or package
of the tree and must *define* the next part (a top-level ``def``, ``class`` or
assignment), and each part after it must be a member of that class (a method, a
property, a class-level or ``self.`` attribute, a dataclass field; a base class's
members in the tree count). A name the module only imports is not at that address
(issue 52: one address per name, no package re-exports below the root), except in a
distribution root (:data:`LENDING_ROOTS`), whose imports are the public API. A bare
name follows the writing module's imports, but a package below the root lends its
docstring nothing. A ``:mod:`` target must be a module, any other role's must not.
"""

from __future__ import annotations

import ast
import builtins
import io
import re
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The trees whose docstrings and comments are checked (a path and the package it holds).
SCANNED = (
    (REPO / "espew_integrations", "espew_integrations"),
    (REPO / "lab" / "espew_lab", "espew_lab"),
)
#: The distribution roots: their ``__init__`` is the public API, so the names it imports count.
LENDING_ROOTS = frozenset({"espew_integrations", "espew_lab"})
#: Top-level packages outside the tree that a dotted reference may name, as the standard
#: library's modules (:data:`sys.stdlib_module_names`) may; not checked further.
EXTERNAL = frozenset({"numpy", "scipy"})
ROLES = ("mod", "func", "class", "meth", "attr", "data", "exc", "obj")  # obj: any of them
ROLE = re.compile(r":(" + "|".join(ROLES) + r"):`([^`]+)`")
#: How many imports a name is followed through before the lookup gives up.
MAX_HOPS = 8


@dataclass
class ClassInfo:
    """What a class body defines: its members, its nested classes and its bases' expressions."""

    members: set[str] = field(default_factory=set)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    bases: list[str] = field(default_factory=list)  # dotted source text, resolved lazily


@dataclass
class ModuleInfo:
    """One parsed module: its top-level names, its classes and the names it imports."""

    name: str
    is_package: bool
    source: str
    tree: ast.Module
    defined: set[str] = field(default_factory=set)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    imports: dict[str, tuple[str, str | None]] = field(
        default_factory=dict
    )  # name -> (module, attr)
    exported: set[str] = field(default_factory=set)  # a literal ``__all__``

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    if isinstance(node, ast.Subscript):  # Generic[T], Protocol[...]
        return _dotted(node.value)
    return None


def _target_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [name for element in target.elts for name in _target_names(element)]
    return []


def _class_info(node: ast.ClassDef) -> ClassInfo:
    info = ClassInfo(bases=[b for b in map(_dotted, node.bases) if b is not None])
    for statement in _flatten(node.body):
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            info.members.add(statement.name)
            for inner in ast.walk(statement):  # self.x = ... in any method
                targets = inner.targets if isinstance(inner, ast.Assign) else []
                if isinstance(inner, ast.AnnAssign | ast.AugAssign):
                    targets = [inner.target]
                for target in targets:
                    if isinstance(target, ast.Attribute) and _dotted(target.value) == "self":
                        info.members.add(target.attr)
        elif isinstance(statement, ast.ClassDef):
            info.members.add(statement.name)
            info.classes[statement.name] = _class_info(statement)
        elif isinstance(statement, ast.Assign):
            info.members.update(n for t in statement.targets for n in _target_names(t))
        elif isinstance(statement, ast.AnnAssign | ast.AugAssign):
            info.members.update(_target_names(statement.target))
    return info


def _flatten(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of ``body``, with those under ``if``/``try``/``with`` at the same level."""
    flat: list[ast.stmt] = []
    for statement in body:
        flat.append(statement)
        if isinstance(statement, ast.If | ast.With | ast.For | ast.While):
            flat += _flatten(statement.body) + _flatten(getattr(statement, "orelse", []))
        elif isinstance(statement, ast.Try):
            flat += (
                _flatten(statement.body)
                + _flatten(statement.orelse)
                + _flatten(statement.finalbody)
            )
            for handler in statement.handlers:
                flat += _flatten(handler.body)
    return flat


def parse_module(name: str, source: str, is_package: bool) -> ModuleInfo:
    """The names ``source``, the module ``name``, defines and imports."""
    module = ModuleInfo(name, is_package, source, ast.parse(source))
    for statement in _flatten(module.tree.body):
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            module.defined.add(statement.name)
        elif isinstance(statement, ast.ClassDef):
            module.defined.add(statement.name)
            module.classes[statement.name] = _class_info(statement)
        elif isinstance(statement, ast.Assign):
            names = [n for t in statement.targets for n in _target_names(t)]
            module.defined.update(names)
            if names == ["__all__"] and isinstance(statement.value, ast.List | ast.Tuple):
                module.exported = {
                    e.value for e in statement.value.elts if isinstance(e, ast.Constant)
                }
        elif isinstance(statement, ast.AnnAssign | ast.AugAssign):
            module.defined.update(_target_names(statement.target))
        elif isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.asname:
                    module.imports[alias.asname] = (alias.name, None)
                else:
                    top = alias.name.partition(".")[0]
                    module.imports[top] = (top, None)
        elif isinstance(statement, ast.ImportFrom):
            base = _absolute(module.package, "." * statement.level + (statement.module or ""))
            for alias in statement.names:
                if alias.name != "*":
                    module.imports[alias.asname or alias.name] = (base, alias.name)
    return module


def _absolute(package: str, dotted: str) -> str:
    """``dotted`` (``.x``, ``..x.y``, ``x.y``) made absolute, as ``from dotted import`` is."""
    level = len(dotted) - len(dotted.lstrip("."))
    if level == 0:
        return dotted
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)] if level - 1 < len(parts) else []
    rest = dotted[level:]
    return ".".join(base + ([rest] if rest else []))


class Index:
    """The modules of some trees, by name, and the lookups that resolve a reference in them."""

    def __init__(
        self, modules: dict[str, ModuleInfo], lending_roots: frozenset[str] = LENDING_ROOTS
    ):
        self.modules = modules
        self.tops = {name.partition(".")[0] for name in modules}
        self.lending_roots = lending_roots

    @classmethod
    def from_sources(
        cls, sources: dict[str, str], lending_roots: frozenset[str] = frozenset()
    ) -> Index:
        """An index of in-memory modules; a name ending in ``.__init__`` is a package."""
        modules = {}
        for name, source in sources.items():
            package = name.endswith(".__init__")
            name = name.removesuffix(".__init__")
            modules[name] = parse_module(name, source, package)
        return cls(modules, lending_roots)

    @classmethod
    def from_trees(cls, trees=SCANNED) -> tuple[Index, dict[str, Path]]:
        modules, paths = {}, {}
        for root, package in trees:
            for path in sorted(root.rglob("*.py")):
                parts = (package, *path.relative_to(root).with_suffix("").parts)
                is_package = parts[-1] == "__init__"
                name = ".".join(parts[:-1] if is_package else parts)
                modules[name] = parse_module(name, path.read_text(encoding="utf-8"), is_package)
                paths[name] = path
        return cls(modules), paths

    def is_external(self, dotted: str) -> bool:
        top = dotted.partition(".")[0]
        return top not in self.tops and (top in EXTERNAL or top in sys.stdlib_module_names)

    # -- resolving ---------------------------------------------------------------------
    def resolve(self, dotted: str, hops: int = MAX_HOPS, follow: bool = False) -> str | None:
        """What the absolute ``dotted`` is ("module", "class", "object"), or None if it is not.

        ``follow``: the names its module imports count (an import is being followed);
        otherwise only a distribution root's do, and the module named must define the name.
        """
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            module = self.modules.get(".".join(parts[:cut]))
            if module is not None:
                if cut == len(parts):
                    return "module"
                return self._in_module(module, parts[cut:], hops, follow)
        return "external" if self.is_external(dotted) else None

    def _in_module(
        self, module: ModuleInfo, parts: list[str], hops: int, follow: bool
    ) -> str | None:
        """``parts`` looked up in ``module``; ``follow``: the names it imports count."""
        head, rest = parts[0], parts[1:]
        if head in module.classes:
            return self._in_class(module, module.classes[head], rest, hops)
        if head in module.defined:
            return "object" if not rest else None
        if head in module.imports and hops > 0:
            if not (follow or module.name in self.lending_roots):
                return None  # an import is no address (issue 52: one address per name)
            return self._follow(module.imports[head], rest, hops - 1)
        if head in module.exported and module.name in self.lending_roots and not rest:
            return "object"  # a root's lazy export (its ``__getattr__`` imports it on first use)
        return None

    def _follow(self, imported: tuple[str, str | None], rest: list[str], hops: int) -> str | None:
        source, attr = imported
        target = source if attr is None else f"{source}.{attr}"
        if target in self.modules:  # a module (``import x.y as z``, ``from . import y``)
            return self.resolve(".".join([target, *rest]), hops, follow=True)
        if source not in self.modules:
            return "external" if self.is_external(source) else None
        assert attr is not None
        return self._in_module(self.modules[source], [attr, *rest], hops, follow=True)

    def _in_class(
        self, module: ModuleInfo, info: ClassInfo, parts: list[str], hops: int
    ) -> str | None:
        if not parts:
            return "class"
        head, rest = parts[0], parts[1:]
        if head in info.classes:
            return self._in_class(module, info.classes[head], rest, hops)
        if head in info.members:
            return "object" if not rest else None
        for base in info.bases:  # an inherited member: look it up on the base, where it is
            found = (
                self.lookup(module, base.split(".") + parts, [], hops=hops - 1)
                if hops > 0
                else None
            )
            if found not in (None, "external"):
                return found
        return None

    def lookup(self, module, parts, scopes, role="obj", hops=MAX_HOPS):
        """A bare (maybe dotted) ``role`` target written in ``module`` inside ``scopes``."""
        head, rest = parts[0], parts[1:]
        for scope in reversed(scopes):  # :meth:`save` in a class body names the class's own
            found = self._in_class(module, scope, parts, hops)
            if found is not None:
                return found
        if head in module.classes or head in module.defined:
            return self._in_module(module, parts, hops, follow=False)
        if head in module.imports:  # what the module imports, but a package lends nothing
            follow = not module.is_package or module.name in self.lending_roots
            return self._in_module(module, parts, hops, follow)
        if head in self.tops:
            return self.resolve(".".join(parts), hops)
        if head in dir(builtins) or (self.is_external(head) and (rest or role == "mod")):
            return "external"  # a bare ``trace`` is no reference to the standard library's
        return None

    def check(
        self, module: ModuleInfo, role: str, target: str, scopes: list[ClassInfo]
    ) -> str | None:
        """Why ``:role:`target``` written in ``module`` does not resolve, or None if it does."""
        target = target.strip()
        if "<" in target and target.endswith(">"):
            target = target[target.rindex("<") + 1 : -1]
        target = target.lstrip("~!").removesuffix("()")
        if target.startswith("."):
            absolute = _absolute(module.package, target)
            found = self.resolve(absolute) if absolute else None
        else:
            found = self.lookup(module, target.split("."), scopes, role)
        if found is None:
            return "names nothing"
        if role == "mod" and found not in ("module", "external"):
            return f"is a {found}, not a module"
        if role not in ("mod", "obj") and found == "module":
            return "is a module"
        return None


def references(module: ModuleInfo) -> list[tuple[int, str, str, list[ClassInfo]]]:
    """Every role in ``module``'s docstrings and comments: (line, role, target, classes)."""
    texts: list[tuple[int, str]] = []
    for node in ast.walk(module.tree):  # docstrings, and attribute docstrings after a field
        if isinstance(node, ast.Expr) and isinstance(getattr(node.value, "value", None), str):
            texts.append((node.lineno, node.value.value))
    for token in tokenize.generate_tokens(io.StringIO(module.source).readline):
        if token.type == tokenize.COMMENT:
            texts.append((token.start[0], token.string))
    spans = _class_spans(module)
    found = []
    for first, text in texts:
        for match in ROLE.finditer(text):
            line = first + text.count("\n", 0, match.start())
            scopes = [info for start, end, info in spans if start <= line <= end]
            found.append((line, match.group(1), match.group(2), scopes))
    return sorted(found, key=lambda item: item[0])


def _class_spans(module: ModuleInfo) -> list[tuple[int, int, ClassInfo]]:
    """(first line, last line, info) of every class, outer classes before inner ones."""
    spans = []

    def visit(node: ast.AST, classes: dict[str, ClassInfo]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef) and child.name in classes:
                info = classes[child.name]
                spans.append((child.lineno, child.end_lineno or child.lineno, info))
                visit(child, info.classes)
            elif isinstance(child, ast.If | ast.Try | ast.With):  # a class under ``if``
                visit(child, classes)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, {})  # a class inside a function is no member of anything

    visit(module.tree, module.classes)
    return spans


def unresolved(index: Index) -> list[str]:
    """Every reference in ``index`` that does not resolve: ``module:line :role:`target` why``."""
    problems = []
    for name, module in sorted(index.modules.items()):
        for line, role, target, scopes in references(module):
            why = index.check(module, role, target, scopes)
            if why is not None:
                problems.append(f"{name}:{line} :{role}:`{target}` {why}")
    return problems


# -- the checker on synthetic sources ------------------------------------------------------

SYNTHETIC = {
    "pkg.__init__": '"""The root: :class:`Plan` is public here."""\nfrom .audit.plan import Plan\n',
    "pkg.audit.__init__": '"""The audit: see :mod:`.plan`."""\nfrom .plan import Plan\n',
    "pkg.audit.plan": (
        "from dataclasses import dataclass\n"
        "from ..mark.design import Design\n"
        "from ..mark import design as designs\n"
        "@dataclass\nclass Plan(Design):\n"
        "    rows: int = 0\n"
        "    @property\n    def size(self):\n        return self.rows\n"
        "    def run(self):\n        self.done = True\n"
        "def plan_audit():\n    pass\n"
    ),
    "pkg.mark.__init__": "",
    "pkg.mark.design": "class Design:\n    def decide(self):\n        pass\nLIMIT = 3\n",
}


def _problems(docstring: str, where: str = "pkg.audit.plan") -> list[str]:
    sources = dict(SYNTHETIC)
    sources[where] = f'"""{docstring}"""\n' + sources.get(where, "")
    return unresolved(Index.from_sources(sources, lending_roots=frozenset({"pkg"})))


def test_the_checker_accepts_relative_absolute_tilde_and_bare_references():
    text = (
        ":mod:`..mark.design`, :class:`~.plan.Plan`, :meth:`..mark.design.Design.decide`, "
        ":func:`pkg.audit.plan.plan_audit`, :data:`..mark.design.LIMIT`, :class:`Design`, "
        ":meth:`Plan.decide`, :attr:`Plan.rows`, :attr:`Plan.size`, :attr:`Plan.done`, "
        ":func:`designs.Design.decide`, :class:`pkg.Plan`, :mod:`.`, :class:`int`, "
        ":class:`numpy.ndarray`, :func:`Plan.run <.plan.Plan.run>`, :mod:`json`"
    )
    assert _problems(text) == []


def test_the_checker_catches_a_module_that_moved():
    assert _problems(":mod:`.design`, :class:`.design.Design`") == [
        "pkg.audit.plan:1 :mod:`.design` names nothing",
        "pkg.audit.plan:1 :class:`.design.Design` names nothing",
    ]


def test_the_checker_catches_a_missing_name_or_member():
    assert _problems(":func:`.plan.missing` and :meth:`Plan.missing`") == [
        "pkg.audit.plan:1 :func:`.plan.missing` names nothing",
        "pkg.audit.plan:1 :meth:`Plan.missing` names nothing",
    ]


def test_a_name_a_package_below_the_root_only_imports_has_no_address_there():
    assert _problems(":class:`pkg.audit.Plan`") == [
        "pkg.audit.plan:1 :class:`pkg.audit.Plan` names nothing"
    ]
    assert _problems(":class:`Plan`", where="pkg.audit.__init__") == [
        "pkg.audit:1 :class:`Plan` names nothing"
    ]


def test_a_name_a_module_only_imports_has_no_address_there_but_resolves_bare():
    assert _problems(":class:`.plan.Design`, :class:`Design`") == [
        "pkg.audit.plan:1 :class:`.plan.Design` names nothing"
    ]


def test_a_bare_name_is_no_standard_library_module_unless_a_mod_role_says_so():
    assert _problems(":func:`trace`, :mod:`trace`, :func:`json.dumps`") == [
        "pkg.audit.plan:1 :func:`trace` names nothing"
    ]


def test_the_checker_reads_comments_and_the_class_a_reference_sits_in():
    sources = dict(SYNTHETIC)
    sources["pkg.mark.design"] = (
        "class Design:\n    # :meth:`decide` and :meth:`undecided`\n"
        "    def decide(self):\n        pass\n"
        "# :meth:`decide` outside the class\n"
    )
    assert unresolved(Index.from_sources(sources, lending_roots=frozenset({"pkg"}))) == [
        "pkg.mark.design:2 :meth:`undecided` names nothing",
        "pkg.mark.design:5 :meth:`decide` names nothing",
    ]


def test_a_mod_role_names_a_module_and_other_roles_do_not():
    assert _problems(":mod:`.plan.Plan`, :class:`..mark.design`") == [
        "pkg.audit.plan:1 :mod:`.plan.Plan` is a class, not a module",
        "pkg.audit.plan:1 :class:`..mark.design` is a module",
    ]


# -- the package and the lab ---------------------------------------------------------------


def test_every_docstring_reference_in_the_package_and_the_lab_resolves():
    index, _ = Index.from_trees()
    assert sum(len(references(module)) for module in index.modules.values()) > 1000  # it reads them
    problems = unresolved(index)
    assert not problems, f"{len(problems)} references name nothing:\n" + "\n".join(problems)
