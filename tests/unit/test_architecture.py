"""The package's import graph keeps its shape: no cycles, a closed core, arrows only downward.

Every module of ``espew_integrations`` is parsed with :mod:`ast` (nothing is
imported), its imports are resolved to modules of the package, and three rules
are checked on the resulting graph. :data:`LAYERS` below *is* the architecture:
a module may import its own layer or a lower one, never a higher one.

Every import is an arrow: one at load time, one inside a function (call-time)
and one under ``if TYPE_CHECKING:`` alike. A call-time or TYPE_CHECKING import
hides a circle from the interpreter, not from the reader, so it closes a cycle
only when :data:`CALL_TIME_EDGES` lists it with the reason it cannot be avoided.

Four more rules hold: no module imports an underscore name
another module of the package defines, no file is longer than
:data:`MAX_LINES`, the package root exports at most :data:`MAX_ROOT_ALL`
names, and no module outside :data:`DESIGN_MODULES` branches on a key's marking
design (``marking == "field"``, ``key.field is None``...): it asks the design.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "espew_integrations"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE

#: The layers, lowest first. A module's layer is that of the longest prefix
#: naming it (the package root names only itself). New top-level modules must be
#: placed here, or the test fails.
LAYERS: dict[str, int] = {
    # 0. The core: the watermark, keys, verification. Standard library, numpy, scipy.
    f"{PACKAGE}.core": 0,
    # 1. Everything built on the core: the public facade, suspects, evidence,
    #    framework wrappers, the HTTP server and client, offline models and data.
    PACKAGE: 1,  # the package root re-exports the public API
    f"{PACKAGE}.suspects": 1,
    f"{PACKAGE}.evidence": 1,
    f"{PACKAGE}.timestamp": 1,
    f"{PACKAGE}._wrapper_common": 1,
    f"{PACKAGE}.langchain": 1,
    f"{PACKAGE}.llama_index": 1,
    f"{PACKAGE}.chroma": 1,
    f"{PACKAGE}.ray": 1,
    f"{PACKAGE}.http": 1,
    f"{PACKAGE}.offline": 1,
    f"{PACKAGE}.models": 1,
    f"{PACKAGE}.textfiles": 1,
    f"{PACKAGE}.arguments": 1,
    f"{PACKAGE}._optional": 1,
    f"{PACKAGE}._blas_threads": 1,  # installs the core's BLAS scope where threadpoolctl is
    # 2. Tools for people: the command line. (The robustness lab is a distribution of its
    #    own, espew-lab in lab/, that imports only the public names: lab/tests.)
    f"{PACKAGE}.cli": 2,
}
LAYER_NAMES = {0: "core", 1: "library", 2: "tools"}

#: Call-time or TYPE_CHECKING imports allowed to close a cycle: (importer, imported) -> why
#: no layout without the circle exists. Each entry must still occur and must not be a
#: load-time import.
CALL_TIME_EDGES: dict[tuple[str, str], str] = {}

#: Known violations in areas still being reworked: (importer, imported) -> owner and why.
#: Each entry must still occur (a stale entry fails), so the list only shrinks.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}

ALLOWED_IN_CORE = {"numpy", "scipy"}

#: No source file of the package is longer than this many lines.
MAX_LINES = 600
#: The package root's ``__all__`` names at most this many names.
MAX_ROOT_ALL = 20


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    call_time: bool
    line: int
    type_checking: bool = False
    name: str | None = None  # the name a ``from ... import name`` takes, unless a module

    @property
    def deferred(self) -> bool:
        """Not run when the importer loads: inside a function or under TYPE_CHECKING."""
        return self.call_time or self.type_checking

    def __str__(self) -> str:
        kind = (
            "TYPE_CHECKING"
            if self.type_checking
            else "call-time"
            if self.call_time
            else "load-time"
        )
        return f"{self.importer} -> {self.imported} ({kind}, line {self.line})"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def resolve(importer: str, node: ast.ImportFrom | ast.Import) -> list[tuple[str, str | None]]:
    """``(module, imported name)`` pairs an import statement names."""
    if isinstance(node, ast.Import):
        return [(alias.name, None) for alias in node.names]
    if node.level:
        base = importer.split(".")
        if not is_package(importer):
            base = base[:-1]
        base = base[: len(base) - node.level + 1]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    return [(module, alias.name) for alias in node.names]


def internal_target(module: str, name: str | None) -> str | None:
    """The package module an import reaches: a submodule if ``name`` is one, else ``module``."""
    if name and f"{module}.{name}" in MODULES:
        return f"{module}.{name}"
    if module in MODULES:
        return module
    return None


class ImportCollector(ast.NodeVisitor):
    def __init__(self, importer: str):
        self.importer = importer
        self.depth = 0  # > 0 inside a function or class body
        self.type_checking = 0  # > 0 inside an ``if TYPE_CHECKING:`` body
        self.internal: list[Edge] = []
        self.external: list[tuple[str, int]] = []

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        if name == "TYPE_CHECKING":  # no import at run time, still an arrow
            self.type_checking += 1
            for child in node.body:
                self.visit(child)
            self.type_checking -= 1
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def _nested(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _nested

    def _record(self, node: ast.Import | ast.ImportFrom) -> None:
        for module, name in resolve(self.importer, node):
            if module == PACKAGE or module.startswith(PACKAGE + "."):
                target = internal_target(module, name)
                assert target, f"{self.importer} line {node.lineno}: {module} does not exist"
                edge = Edge(
                    self.importer,
                    target,
                    self.depth > 0,
                    node.lineno,
                    type_checking=self.type_checking > 0,
                    name=None if target == f"{module}.{name}" else name,
                )
                self.internal.append(edge)
            else:
                self.external.append((module.split(".")[0], node.lineno))

    visit_Import = visit_ImportFrom = _record


def collect() -> tuple[list[Edge], dict[str, list[tuple[str, int]]]]:
    edges: list[Edge] = []
    external: dict[str, list[tuple[str, int]]] = {}
    for name, path in MODULES.items():
        collector = ImportCollector(name)
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        edges += [e for e in collector.internal if e.imported != name]
        external[name] = collector.external
    return edges, external


EDGES, EXTERNAL = collect()


def layer(module: str) -> int:
    matches = [
        prefix
        for prefix in LAYERS
        if module == prefix or (prefix != PACKAGE and module.startswith(prefix + "."))
    ]
    assert matches, f"{module} is in no layer: place it in LAYERS (tests/unit/test_architecture.py)"
    return LAYERS[max(matches, key=len)]


def find_cycle(edges: list[Edge]) -> list[str] | None:
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in edges:
        graph[edge.importer].add(edge.imported)
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def known(edge: Edge) -> bool:
    return (edge.importer, edge.imported) in KNOWN_EXCEPTIONS


# ---------------------------------------------------------------------- the rules
def private_imports(edges: list[Edge]) -> list[Edge]:
    """Imports of an underscore name that another module defines.

    A dunder (``__version__``) is public. A private *module* (``_optional``) is a
    package-internal helper meant to be shared, so importing it is allowed; an
    underscore name inside it, or inside any other module, is that module's own.
    A package's modules importing its ``__init__``'s private names count: the
    ``__init__`` is another module.
    """
    return [
        e
        for e in edges
        if e.name
        and e.name.startswith("_")
        and not (e.name.startswith("__") and e.name.endswith("__"))
        and e.imported != e.importer
    ]


def test_the_import_graph_has_no_cycles():
    edges = [
        e
        for e in EDGES
        if not (e.deferred and (e.importer, e.imported) in CALL_TIME_EDGES) and not known(e)
    ]
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_allowed_call_time_edge_still_exists_and_is_call_time_only():
    for pair, why in CALL_TIME_EDGES.items():
        found = [e for e in EDGES if (e.importer, e.imported) == pair]
        assert found, f"stale CALL_TIME_EDGES entry {pair} ({why})"
        assert all(e.deferred for e in found), f"{pair} is imported at load time: {found}"


def test_no_module_imports_another_modules_underscore_name():
    found = [f"{e}: {e.name}" for e in private_imports(EDGES)]
    assert not found, "underscore names imported across modules:\n" + "\n".join(found)


def test_no_source_file_is_longer_than_the_limit():
    long = {
        str(path.relative_to(ROOT.parent)): n
        for path in MODULES.values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"files over {MAX_LINES} lines (split them by concern): {long}"


def _root_all() -> list[str]:
    tree = ast.parse(MODULES[PACKAGE].read_text(encoding="utf-8"))
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{PACKAGE}/__init__.py defines no literal __all__")


def test_the_package_root_exports_a_small_api():
    names = _root_all()
    assert len(names) <= MAX_ROOT_ALL, (
        f"{PACKAGE}.__all__ has {len(names)} names, at most {MAX_ROOT_ALL}: "
        "export the rest from their submodule"
    )


def test_the_core_imports_only_the_standard_library_numpy_scipy_and_itself():
    core = f"{PACKAGE}.core"
    wrong = [str(e) for e in EDGES if layer(e.importer) == 0 and layer(e.imported) != 0]
    for module, imports in EXTERNAL.items():
        if layer(module) != 0:
            continue
        for top, line in imports:
            if top not in sys.stdlib_module_names and top not in ALLOWED_IN_CORE:
                wrong.append(f"{module} -> {top} (line {line})")
    assert not wrong, f"{core} must import only the stdlib, numpy, scipy and itself:\n" + "\n".join(
        wrong
    )


def test_no_module_imports_a_higher_layer():
    upward = [
        f"{e}: layer {LAYER_NAMES[layer(e.importer)]} imports {LAYER_NAMES[layer(e.imported)]}"
        for e in EDGES
        if layer(e.importer) < layer(e.imported) and not known(e)
    ]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_every_module_has_a_layer_and_known_exceptions_are_not_stale():
    for module in MODULES:
        layer(module)
    for pair, owner in KNOWN_EXCEPTIONS.items():
        assert any((e.importer, e.imported) == pair for e in EDGES), f"stale: {pair} ({owner})"


#: The core's rooms, lowest first: a room may import its own modules or a lower room's,
#: never a higher one's. The core's own top (``core/__init__``, ``verify``, ``trace``,
#: ``evidence_check``: the front ends that put an audit and its records together) may
#: import every room. docs/architecture.md draws them. Each room's job is stated once, in
#: the first line of its ``__init__``'s docstring (:func:`room_job`).
ROOMS: dict[str, int] = {
    name: rank
    for rank, name in enumerate(("ground", "mark", "stats", "keys", "audit", "designs", "records"))
}
CORE_TOP = len(ROOMS)


def room(module: str) -> int:
    parts = module.split(".")
    if parts[:2] != [PACKAGE, "core"] or len(parts) == 2:
        return CORE_TOP
    assert parts[2] in ROOMS or f"{PACKAGE}.core.{parts[2]}" in MODULES, module
    return ROOMS.get(parts[2], CORE_TOP)


def room_job(name: str) -> str:
    """A room's job: the first line of its ``__init__``'s docstring, its one statement."""
    source = MODULES[f"{PACKAGE}.core.{name}"].read_text(encoding="utf-8")
    return (ast.get_docstring(ast.parse(source)) or "").splitlines()[0]


def test_every_room_states_its_job_in_the_first_line_of_its_init():
    for name in ROOMS:
        job = room_job(name)
        assert job.endswith(".") and len(job) <= 96, f"core/{name}/__init__.py: {job!r}"


def test_the_architecture_page_draws_each_room_with_the_job_its_init_states():
    page = (ROOT.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [name for name in ROOMS if f"\n{name + '/':<11}{room_job(name)}\n" not in page]
    assert not missing, f"docs/architecture.md's drawing of rooms {missing}: copy each job line"


def test_the_cores_rooms_import_only_their_own_or_a_lower_room():
    core = f"{PACKAGE}.core"
    wrong = [
        f"{e.importer} ({room_job(sorted(ROOMS, key=ROOMS.get)[room(e.importer)])}) -> {e.imported}"
        for e in EDGES
        if e.importer.startswith(core)
        and e.imported.startswith(core)
        and room(e.importer) < room(e.imported)
    ]
    assert not wrong, "a room imports a higher room:\n" + "\n".join(wrong)


def test_every_core_module_lives_in_a_room_or_is_a_front_end():
    flat = {
        name.rsplit(".", 1)[1]
        for name in MODULES
        if name.count(".") == 2 and name.startswith(f"{PACKAGE}.core.")
    }
    assert flat - set(ROOMS) == {"verify", "trace", "evidence_check"}


def test_the_audit_writes_only_through_its_recorder_protocol():
    """The audit decides and writes no record: it hands what it asked and heard to a
    :class:`~espew_integrations.core.audit.recorder.Recorder` that the records implement."""
    wrong = [
        str(e)
        for e in EDGES
        if e.importer.startswith(f"{PACKAGE}.core.audit")
        and e.imported.startswith(f"{PACKAGE}.core.records")
    ]
    assert not wrong, "the audit imports the records it must only call:\n" + "\n".join(wrong)


#: No function of the package (the lab aside: it is moving to its own distribution) is
#: longer than this many lines, its signature and docstring counted: a longer one does
#: several jobs, each of which deserves a name.
MAX_FUNCTION_LINES = 60


def test_no_function_is_longer_than_the_limit():
    long = []
    for name, path in MODULES.items():
        if name.startswith(f"{PACKAGE}.lab") or name == f"{PACKAGE}.cli.lab":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name} (line {node.lineno}): {length} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


# ---------------------------------------------------------------------- the checker itself
@pytest.mark.parametrize(
    ("importer", "source", "expected"),
    [
        (f"{PACKAGE}.core.verify", "from ..evidence import save_evidence", f"{PACKAGE}.evidence"),
        (
            f"{PACKAGE}.core.verify",
            "from .audit.report import VerificationReport",
            f"{PACKAGE}.core.audit.report",
        ),
        (f"{PACKAGE}.core", "from .keys.key import WatermarkKey", f"{PACKAGE}.core.keys.key"),
        (f"{PACKAGE}.cli.verify", "from .. import watermark", PACKAGE),
        (f"{PACKAGE}.cli.verify", "from ..core.keys import keygen", f"{PACKAGE}.core.keys.keygen"),
    ],
)
def test_relative_imports_resolve_to_the_module_they_name(importer, source, expected):
    (module, name), *_ = resolve(importer, ast.parse(source).body[0])
    assert internal_target(module, name) == expected


def test_the_checker_catches_the_violations_it_exists_for():
    """The core -> evidence import of an earlier main, and a two-module cycle, are caught."""
    upward = Edge(f"{PACKAGE}.core.verify", f"{PACKAGE}.evidence", True, 1)
    assert layer(upward.importer) < layer(upward.imported)
    cycle = [
        Edge(f"{PACKAGE}.core.key", f"{PACKAGE}.core.verify", True, 1),
        Edge(f"{PACKAGE}.core.verify", f"{PACKAGE}.core.key", False, 1),
    ]
    assert find_cycle(cycle) is not None
    source = (
        "import numpy\n"
        "if TYPE_CHECKING:\n    from .audit.report import VerificationReport\n"
        "def f():\n    from .keys.key import WatermarkKey\n"
    )
    collector = ImportCollector(f"{PACKAGE}.core")
    collector.visit(ast.parse(source))
    assert collector.external == [("numpy", 1)]
    kinds = {(e.imported, e.type_checking, e.call_time) for e in collector.internal}
    assert kinds == {
        (f"{PACKAGE}.core.audit.report", True, False),
        (f"{PACKAGE}.core.keys.key", False, True),
    }
    hidden = [
        Edge(f"{PACKAGE}.core.report", f"{PACKAGE}.core.evidence_files", False, 1),
        Edge(f"{PACKAGE}.core.evidence_files", f"{PACKAGE}.core.report", False, 2, True),
    ]
    assert find_cycle(hidden) is not None  # a TYPE_CHECKING arrow closes a circle too


@pytest.mark.parametrize(
    ("importer", "source", "private"),
    [
        (f"{PACKAGE}.cli.verify", "from ..core.keys.key import _digest", True),
        (f"{PACKAGE}.cli.verify", "from .. import _something", True),  # the root's __init__
        (f"{PACKAGE}.cli.verify", "from .. import __version__", False),
        (f"{PACKAGE}.cli.verify", "from .. import _optional", False),  # a shared helper module
        (f"{PACKAGE}.cli.verify", "from ..core.trace import trace as _trace", False),
    ],
)
def test_the_privacy_rule_catches_underscore_names_only(importer, source, private):
    collector = ImportCollector(importer)
    collector.visit(ast.parse(source))
    assert bool(private_imports(collector.internal)) is private


# ---------------------------------------------------------------------- one interface per design
#: The modules that may speak of one design by name: the designs themselves, the
#: interface and registry, and the field's own record (``FieldMark``, its equality).
DESIGN_MODULES = (
    f"{PACKAGE}.core.designs",
    f"{PACKAGE}.core.mark.design",
    f"{PACKAGE}.core.mark.field",
)
#: Attributes whose None-ness says which design a key or a plan is of.
_DESIGN_OPTIONALS = {"field", "_field", "field_z"}
#: Classes whose isinstance says which design something is (the interface is not one).
_DESIGN_CLASSES = {"FieldMark", "FieldDesign", "WordDesign"}


def _named(node: ast.AST) -> str:
    """The name an expression reads: ``x``, ``a.x`` and ``a["x"]`` all read ``x``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    return ""


def _is_text(node: ast.AST) -> bool:
    """A string literal, or a tuple, list or set of them."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return bool(node.elts) and all(_is_text(e) for e in node.elts)
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _branches_on_design(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        named = any("marking" in _named(o) for o in operands) and any(map(_is_text, operands))
        optional = any(isinstance(op, ast.Is | ast.IsNot) for op in node.ops) and any(
            _named(o) in _DESIGN_OPTIONALS for o in operands
        )
        return named or optional
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        return False
    args = node.args
    if node.func.id == "isinstance" and len(args) == 2:
        classes = args[1].elts if isinstance(args[1], ast.Tuple) else [args[1]]
        return any(_named(c) in _DESIGN_CLASSES for c in classes)
    return (
        node.func.id in ("getattr", "hasattr")
        and len(args) >= 2
        and isinstance(args[1], ast.Constant)
        and args[1].value in _DESIGN_OPTIONALS
    )


def design_branches(tree: ast.AST) -> list[int]:
    """The lines of ``tree`` that branch on a key's design instead of asking it:
    ``marking == "field"`` (or ``!=``, ``in`` literals), ``X.field is None`` (and
    ``field_z``), ``isinstance(x, FieldMark)`` (or a design class) and
    ``getattr(x, "field", ...)``. An ``assert`` (a type's narrowing, not a branch) is not."""
    asserted = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert)
        for inner in ast.walk(node)
    }
    return [
        node.lineno  # type: ignore[attr-defined]
        for node in ast.walk(tree)
        if id(node) not in asserted and _branches_on_design(node)
    ]


def test_no_module_outside_the_designs_branches_on_a_keys_design():
    """A key's design is asked (:class:`~espew_integrations.core.mark.design.MarkingDesign`),
    never named: a new design is one module, and no other file changes."""
    found = [
        f"{name} line {line}"
        for name, path in MODULES.items()
        if not name.startswith(DESIGN_MODULES)
        for line in design_branches(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not found, "branches on a key's design outside the design modules:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "branches"),
    [
        ('if key.marking == "field":\n    pass', True),
        ('field = args.marking == "field"', True),
        ('if options["marking"] != "words": pass', True),
        ("if key.field is None: pass", True),
        ("verdict = decide_field if key.field is not None else decide", True),
        ("if plan.field_z is not None: pass", True),
        ("ok = isinstance(f, FieldMark)", True),
        ("ok = isinstance(d, (WordDesign, int))", True),
        ('field = getattr(key, "field", None)', True),
        ("key.design.decide(key, scores, 0.5, {})", False),
        ("ok = isinstance(design, MarkingDesign)", False),
        ('if statistic == "field": pass', False),
        ("if marking not in design_names(): raise KeyError", False),
        ('marked = key.marking in ("field", "stripe")', True),
        ("assert plan.field_z is not None", False),
    ],
)
def test_the_design_scan_catches_branches_on_the_design(source, branches):
    assert bool(design_branches(ast.parse(source))) is branches


# ---------------------------------------------------------------------- who writes files
#: The core's modules outside the records room that write files, each with why: the
#: keys room (below the records) stores the key and the ring itself, through the one
#: secret-file primitive. Each entry must still write (a stale one fails): it only shrinks.
FILE_WRITERS_OUTSIDE_RECORDS: dict[str, str] = {
    f"{PACKAGE}.core.ground.secret_files": "the secret file (mode 0600, atomic, bounded "
    "reads) through which the keys room, below the records, stores keys and rings",
    f"{PACKAGE}.core.keys.key_storage": "WatermarkKey.save: the key file (secret_files)",
    f"{PACKAGE}.core.keys.keyring": "KeyRing.save: the ring file (secret_files)",
}
#: Functions that write or create files, by the module they are called on (None: any).
_OS_WRITES = frozenset({"open", "fdopen", "replace", "rename", "renames", "remove", "unlink"})
_OS_WRITES |= {"link", "symlink", "mkdir", "makedirs", "rmdir", "removedirs", "chmod", "write"}
_NUMPY_SAVES = frozenset({"save", "savez", "savez_compressed", "savetxt"})
_WRITING_CALLS: dict[str, frozenset[str] | None] = {
    "os": _OS_WRITES | {"truncate", "mkfifo"},
    "io": frozenset({"open"}),
    "shutil": None,
    "tempfile": None,
    "np": _NUMPY_SAVES,
    "numpy": _NUMPY_SAVES,
    "json": frozenset({"dump"}),
    "pickle": frozenset({"dump"}),
}
#: Methods that write whatever they are called on (``Path``'s, an array's ``tofile``), the
#: builtin ``open``, and the package's own file primitives.
_WRITING_METHODS = frozenset({"open", "write_text", "write_bytes", "mkdir", "touch", "unlink"})
_WRITING_METHODS |= {"rmdir", "symlink_to", "hardlink_to", "chmod", "tofile"}
_FILE_PRIMITIVES = frozenset({"SafeDirectory", "write_secret_file", "replace_atomically"})


def file_writes(tree: ast.AST) -> list[str]:
    """The calls in ``tree`` that write to the file system (``line: call``): the builtin
    ``open``, ``os``/``shutil``/``tempfile``/``np.save``-style functions, ``Path`` methods
    (``write_text``, ``mkdir``...) and the package's file primitives (``SafeDirectory``,
    ``write_secret_file``, ``replace_atomically``)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name):
            writes = func.id == "open" or func.id in _FILE_PRIMITIVES
            name = func.id
        elif isinstance(func, ast.Attribute):
            owner = func.value.id if isinstance(func.value, ast.Name) else ""
            module_calls = _WRITING_CALLS.get(owner, frozenset())
            writes = (
                (owner in _WRITING_CALLS and (module_calls is None or func.attr in module_calls))
                or func.attr in _WRITING_METHODS
                or func.attr in _FILE_PRIMITIVES
            )
            name = f"{owner or '...'}.{func.attr}"
        else:
            continue
        if writes:
            found.append(f"{node.lineno}: {name}")
    return found


def test_only_the_records_room_writes_files_in_the_core():
    """The audit and every other room decide; the records write (the transcript, the
    evidence, the traffic sample), save the key's own files
    (:data:`FILE_WRITERS_OUTSIDE_RECORDS`)."""
    core, records = f"{PACKAGE}.core", f"{PACKAGE}.core.records"
    writers = {
        name: writes
        for name, path in MODULES.items()
        if name.startswith(core + ".") or name == core
        if not name.startswith(records + ".") and name != records
        if (writes := file_writes(ast.parse(path.read_text(encoding="utf-8"))))
    }
    wrong = [f"{n}: {w}" for n, w in writers.items() if n not in FILE_WRITERS_OUTSIDE_RECORDS]
    assert not wrong, "core modules outside core/records write files:\n" + "\n".join(wrong)
    stale = set(FILE_WRITERS_OUTSIDE_RECORDS) - set(writers)
    assert not stale, f"stale FILE_WRITERS_OUTSIDE_RECORDS entries (they write no file): {stale}"


@pytest.mark.parametrize(
    ("source", "writes"),
    [
        ('with open(path, "w") as f: pass', True),
        ("Path(p).write_text(text)", True),
        ("target.write_bytes(data)", True),
        ("directory.mkdir(parents=True)", True),
        ("os.replace(tmp, path)", True),
        ("fd = os.open(path, os.O_WRONLY)", True),
        ("shutil.copyfile(a, b)", True),
        ("np.save(path, rows)", True),
        ("json.dump(data, stream)", True),
        ("with SafeDirectory(d) as target: pass", True),
        ("write_secret_file(path, data)", True),
        ("text = json.dumps(data)", False),
        ('name = text.replace("a", "b")', False),
        ("data = path.read_text()", False),
        ("rows = np.asarray(rows)", False),
        ("record(subject, answers)", False),
    ],
)
def test_the_file_scan_catches_writes(source, writes):
    assert bool(file_writes(ast.parse(source))) is writes
