"""The floors of the Python package (docs/architecture.md, "The floors"): every import
runs from a floor to the same floor or a lower one, and no import, at module level or
inside a function, closes a cycle.

The graph is read with :mod:`ast` from ``python/ferromq``, nothing is imported. An edge
is every ``import ferromq...`` and ``from ferromq... import ...`` anywhere in a module
(module level, inside a function, a method or an ``if``), and every
``importlib.import_module("ferromq...")`` with a literal name. Importing ``a.b.c`` also
runs the packages ``a.b`` and ``a``: those are edges too, except to the importer's own
packages, which Python has run before it. Imports under ``if TYPE_CHECKING:`` never run:
they keep the floors (a type named from a higher floor is a dependency the wrong way
round all the same) but do not count as cycles (an annotation of ``Broker`` in the
admin listener, which the broker starts, is not one).

:data:`FLOORS` is the table, top first; it is the one on the map in
docs/architecture.md, which must say the same. A module's floor is that of the longest
entry that names it or one of its packages (``ferromq.auth.cli`` is a command,
``ferromq.auth.users`` a part); ``ferromq`` itself (the compiled core's version) is
named alone. A module of no floor fails the test: a new module takes its place here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

PACKAGE: Final = "ferromq"
ROOT: Final = Path(__file__).resolve().parents[2] / "python" / PACKAGE

FLOORS: Final = (
    ("command line", ("ferromq.__main__", "ferromq.cli")),
    (
        "commands and the supervisor",
        (
            "ferromq.arguments",
            "ferromq.auth.cli",
            "ferromq.bans_cli",
            "ferromq.bench",
            "ferromq.bench_memory",
            "ferromq.config_reference",
            "ferromq.ctl",
            "ferromq.file_cli",
            "ferromq.node",
            "ferromq.pipeline",
            "ferromq.preflight",
            "ferromq.starter_config",
        ),
    ),
    ("broker", ("ferromq.admin", "ferromq.broker", "ferromq.listener", "ferromq.reload")),
    (
        "broker's parts",
        (
            "ferromq.acl",
            "ferromq.auth",
            "ferromq.auto_subscribe",
            "ferromq.bridge",
            "ferromq.client_log",
            "ferromq.crl",
            "ferromq.engine",
            "ferromq.file_watch",
            "ferromq.pidfile",
            "ferromq.plugin_host",
            "ferromq.proxy_protocol",
            "ferromq.rewrite",
            "ferromq.sd_notify",
            "ferromq.shutdown",
            "ferromq.tls",
            "ferromq.tls_revocation",
            "ferromq.validation",
            "ferromq.websocket_upgrade",
        ),
    ),
    (
        "state",
        (
            "ferromq.admission",
            "ferromq.after_flush",
            "ferromq.bans",
            "ferromq.cluster",
            "ferromq.histogram",
            "ferromq.shard",
            "ferromq.storage",
            "ferromq.stream",
            "ferromq.sys_topics",
            "ferromq.tls_tickets",
        ),
    ),
    (
        "foundation",
        (
            "ferromq.codec",
            "ferromq.config",
            "ferromq.log",
            "ferromq.mosquitto_conf",
            "ferromq.plugins",
            "ferromq.topic",
            "ferromq.websocket_client",
        ),
    ),
    ("low floor", ("ferromq", "ferromq.exits", "ferromq.fileio", "ferromq.sockets")),
)
"""Top first: the floor's name and the modules and packages on it."""


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    typing_only: bool  # under ``if TYPE_CHECKING:``

    def __str__(self) -> str:
        where = " (TYPE_CHECKING)" if self.typing_only else ""
        return f"{self.source}:{self.line} imports {self.target}{where}"


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES: Final = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _named(module: str, node: ast.AST) -> Iterator[str]:
    """The package's modules ``node`` imports by name (not yet their packages)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: from the importer's package, up ``level - 1``
            package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
            package = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
            base = f"{package}.{base}" if base else package
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            yield submodule if submodule in MODULES else base
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "import_module"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        yield node.args[0].value


def _imports(module: str) -> Iterator[Import]:
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))

    def walk(node: ast.AST, typing_only: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for statement in child.body:
                    yield from visit(statement, True)
                for statement in child.orelse:
                    yield from visit(statement, typing_only)
            else:
                yield from visit(child, typing_only)

    def visit(node: ast.AST, typing_only: bool) -> Iterator[Import]:
        for name in _named(module, node):
            if name != PACKAGE and not name.startswith(f"{PACKAGE}."):
                continue
            # ``a.b.c`` runs ``a.b.c``, ``a.b`` and ``a``; the importer's own packages ran first.
            parts = name.split(".")
            for end in range(len(parts), 0, -1):
                target = ".".join(parts[:end])
                if target == module or module.startswith(f"{target}."):
                    break
                if target in MODULES:
                    yield Import(module, target, getattr(node, "lineno", 0), typing_only)
        yield from walk(node, typing_only)

    yield from walk(tree, False)


IMPORTS: Final = tuple(dict.fromkeys(imp for module in MODULES for imp in _imports(module)))


def floor_of(module: str) -> int | None:
    """The index in :data:`FLOORS` (0: top) of ``module``'s floor."""
    floors = {entry: index for index, (_, entries) in enumerate(FLOORS) for entry in entries}
    if module == PACKAGE:
        return floors.get(PACKAGE)
    parts = module.split(".")
    for end in range(len(parts), 1, -1):
        index = floors.get(".".join(parts[:end]))
        if index is not None:
            return index
    return None


def test_the_floor_table_names_each_entry_once() -> None:
    entries = [entry for _, floor in FLOORS for entry in floor]
    assert len(entries) == len(set(entries))
    assert [entry for entry in entries if entry not in MODULES] == []


def test_every_module_has_a_floor() -> None:
    assert [module for module in MODULES if floor_of(module) is None] == []


def test_imports_run_down_the_floors() -> None:
    upward = []
    for imp in IMPORTS:
        source, target = floor_of(imp.source), floor_of(imp.target)
        if source is not None and target is not None and target < source:
            upward.append(f"{imp}: from {FLOORS[source][0]!r} up to {FLOORS[target][0]!r}")
    assert upward == [], "\n".join(upward)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as the chain of its modules, first one last again."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                found = visit(target)
                if found is not None:
                    return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found is not None:
                return found
    return None


def test_no_import_cycle() -> None:
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for imp in IMPORTS:
        if not imp.typing_only:
            graph[imp.source].add(imp.target)
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


MAP_HEADER: Final = "| floor | modules and packages (top first) |"


def _shown(entry: str) -> str:
    """A module or package as the map writes it (`` `auth/cli` ``, `` `node/` ``) as a name."""
    name = entry.strip("`").removesuffix("/").replace("/", ".")
    return name if name == PACKAGE else f"{PACKAGE}.{name}"


def test_the_map_shows_the_same_floors() -> None:
    """docs/architecture.md's table of floors says what :data:`FLOORS` says."""
    lines = (ROOT.parents[1] / "docs" / "architecture.md").read_text().splitlines()
    start = lines.index(MAP_HEADER) + 2  # past the header and its rule
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        name, entries = (cell.strip() for cell in line.strip("|").split("|"))
        rows.append((name, sorted(_shown(entry) for entry in entries.split(" · "))))
    assert rows == [(name, sorted(entries)) for name, entries in FLOORS]
