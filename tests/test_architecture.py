"""The map in docs/architecture.md, checked against the code.

* Import directions: every module of the five packages belongs to one *component* (the longest
  prefix in :data:`ALLOWED`), and each component may import only the components its row names.
  The walk reads every ``import`` / ``from ... import`` statement (top level, inside functions
  and under ``TYPE_CHECKING`` alike: a lazy import is still a dependency), resolves relative
  imports, and counts ``importlib.import_module("...")`` with a literal name and the module
  names of a ``_LAZY`` table (the lazy facades of ``hmbclient`` and ``hmbclient.testing``).
* spark_integration reaches hmbclient through front doors only: the ``hmbclient`` facade or a
  package/module directly under it (``hmbclient.net``, ``hmbclient.errors``), never a module
  inside a package (``hmbclient.net.connection``) nor a ``_private`` one.
* Sockets: only hmbclient.net (the client's I/O), hmbclient.broker (the server) and
  hmbclient.testing (local servers) import ``socket``/``selectors``/``ssl``; the sans-IO codec
  (hmbclient.protocol) starts no thread and takes no lock: of ``threading`` it may import only
  ``local`` (per-thread scratch buffers of the decompressors).
* No import cycle inside a component (a package of the map): the graph of module -> module
  imports between modules of one component (the same walk, lazy and ``TYPE_CHECKING`` imports
  included, each import resolved to the nearest project module) has no strongly connected
  component of more than one module. A helper two modules share lives below both (e.g. the
  message builder in ``hmbclient.protocol``, not in the broker's dispatcher). Between
  components the directions above decide (they allow one lazy loop on purpose: the
  ``hmbclient.config`` facade re-exports the component configs declared on its machinery).
* The table in docs/architecture.md is this module's :data:`ALLOWED`, row for row.
* The repository stands alone: no tracked file refers to a directory beside the clone or to an
  absolute path of one machine.

Changing a direction means changing :data:`ALLOWED` *and* the table in docs/architecture.md,
which is the point: the map cannot drift from the code.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hmbclient", "partitioners", "encoders", "rebalance", "spark_integration")

#: What the application layer may import: anything in the project.
ANYTHING = "*"

_CORE = ("hmbclient.errors", "hmbclient.clock", "hmbclient.config", "hmbclient.metrics")

#: The component configs, each beside its component (re-exported by hmbclient.config).
_CONFIGS = ("hmbclient.net.config", "hmbclient.producer.config", "hmbclient.consumer.config", "hmbclient.broker.config")

#: component -> the components it may import (besides itself). A component is a package or
#: module prefix; "hmbclient" alone is the facade (hmbclient/__init__.py), not everything below.
ALLOWED: dict[str, tuple[str, ...]] = {
    # leaves: import nothing from the project
    "hmbclient.errors": (),
    "hmbclient.clock": (),
    "hmbclient.children": (),
    # sensors and stats (Kafka's metrics model) for clients and broker alike
    "hmbclient.metrics": ("hmbclient.clock",),
    # optional exporters of those metrics (prometheus_client, OpenTelemetry; extras)
    "hmbclient.metrics_exporters": ("hmbclient.metrics",),
    "partitioners": (),
    "encoders": (),
    # the Kafka 0.8 znode layout and the topic-name rule: shared by the broker, the consumers
    # and rebalance (whose rebalance.paths re-exports it, public API)
    "hmbclient.zkpaths": (),
    "rebalance": ("hmbclient.zkpaths",),
    # the shared foundation: the settings machinery, and each component's config declared on it
    # beside the component. hmbclient.config re-exports those (lazily) for users; they import
    # only the machinery (and the clients' shared security settings), never their component.
    "hmbclient.config": ("hmbclient.errors", *_CONFIGS),
    "hmbclient.net.config": ("hmbclient.errors", "hmbclient.config"),
    "hmbclient.producer.config": ("hmbclient.errors", "hmbclient.config", "hmbclient.net.config"),
    "hmbclient.consumer.config": ("hmbclient.errors", "hmbclient.config", "hmbclient.net.config"),
    "hmbclient.broker.config": ("hmbclient.errors", "hmbclient.config"),
    "hmbclient.protocol": ("hmbclient.errors", "hmbclient.clock"),
    # the client
    "hmbclient.net": (*_CORE, "hmbclient.net.config", "hmbclient.protocol"),
    "hmbclient.producer": (*_CORE, "hmbclient.producer.config", "hmbclient.net.config", "hmbclient.protocol",
                           "hmbclient.net", "partitioners", "encoders"),
    "hmbclient.consumer": (*_CORE, "hmbclient.consumer.config", "hmbclient.net.config", "hmbclient.protocol",
                           "hmbclient.net", "hmbclient.zkpaths", "rebalance", "encoders"),
    "hmbclient": (*_CORE, "hmbclient.net", "hmbclient.producer", "hmbclient.consumer", "hmbclient.admin",
                  "rebalance", "partitioners", "encoders"),
    # asyncio fronts of the producer and the poll consumer
    "hmbclient.aio": (*_CORE, "hmbclient.producer", "hmbclient.producer.config", "hmbclient.consumer"),
    "hmbclient.admin": (*_CORE, "hmbclient", "hmbclient.protocol", "hmbclient.net", "hmbclient.consumer",
                        "hmbclient.zkpaths", "rebalance"),
    # the server and the local servers built on it
    "hmbclient.broker": (*_CORE, "hmbclient.broker.config", "hmbclient.protocol", "hmbclient.zkpaths",
                         "hmbclient.children"),
    "hmbclient.testing": (*_CORE, "hmbclient.protocol", "hmbclient.broker", "hmbclient.children", "spark_integration"),
    # on top of the client's public surface
    "spark_integration": ("hmbclient", *_CORE, "hmbclient.net", "hmbclient.producer", "hmbclient.consumer",
                          "rebalance", "partitioners", "encoders"),
    # data stores (Zeek Broker) on the client's producer, simple consumer and admin
    "hmbclient.store": (*_CORE, "hmbclient.net", "hmbclient.producer", "hmbclient.consumer", "hmbclient.admin"),
    # the application layer: the `hmb` command and its demo
    "hmbclient.cli": (ANYTHING,),
    "hmbclient.demo": (ANYTHING,),
    "hmbclient.top": (ANYTHING,),
}

#: Components that may import socket, selectors or ssl.
SOCKET_USERS = ("hmbclient.net", "hmbclient.broker", "hmbclient.testing")
_SOCKET_MODULES = {"socket", "selectors", "ssl"}

#: Optional libraries (extras) -> the only module that may import each: nothing else of the
#: packages pays for them or breaks without them.
OPTIONAL_LIBRARIES = {
    "prometheus_client": "hmbclient.metrics_exporters.prometheus",
    "opentelemetry": "hmbclient.metrics_exporters.otel",
}

#: Not part of the installed packages: nothing in them may be imported by the packages.
_OUTSIDE = {"tests", "bench", "examples", "docs"}


def component_of(module: str) -> str | None:
    """The component a module belongs to: the longest key of ALLOWED that prefixes it."""
    if module == "hmbclient":
        return "hmbclient"
    best = None
    for key in ALLOWED:
        if key != "hmbclient" and (module == key or module.startswith(key + ".")):
            if best is None or len(key) > len(best):
                best = key
    return best


def project_modules() -> dict[str, Path]:
    """Every module of the five packages: dotted name -> file."""
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imported_modules(module: str, is_package: bool, source: str, known: set[str]) -> Iterator[tuple[int, str]]:
    """(line, dotted module) for every import in ``source``, relative ones resolved.

    ``from a import b`` counts as importing ``a.b`` when that is a module in ``known``, else
    ``a``. Absolute imports outside the project are yielded too (callers filter).
    """
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base_parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield node.lineno, sub if sub in known else base
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "import_module" and node.args and isinstance(node.args[0], ast.Constant):
                if isinstance(node.args[0].value, str):
                    yield node.lineno, node.args[0].value
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in targets) and isinstance(node.value, ast.Dict):
                for v in node.value.values:
                    if isinstance(v, ast.Constant) and isinstance(v.value, str):
                        yield v.lineno, v.value


def violations(module: str, is_package: bool, source: str, known: set[str]) -> list[str]:
    """Every import of ``module`` that points the wrong way, as readable lines."""
    own = component_of(module)
    if own is None:
        return [f"{module}: belongs to no component; add it to ALLOWED and docs/architecture.md"]
    allowed = ALLOWED[own]
    found: list[str] = []
    # ``from threading import local`` (and nothing else on that line): scratch, not concurrency
    thread_locals = {
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module == "threading" and [a.name for a in node.names] == ["local"]
    }
    for line, target in imported_modules(module, is_package, source, known):
        top = target.split(".")[0]
        if top in _OUTSIDE:
            found.append(f"{module}:{line} imports {target}, which is not part of the packages")
            continue
        if top in _SOCKET_MODULES and own not in SOCKET_USERS:
            found.append(f"{module}:{line} imports {target}: only {', '.join(SOCKET_USERS)} touch sockets")
        if top in OPTIONAL_LIBRARIES and module != OPTIONAL_LIBRARIES[top]:
            found.append(f"{module}:{line} imports {target}, an optional library: only "
                         f"{OPTIONAL_LIBRARIES[top]} may import it")
        if own == "hmbclient.protocol" and top == "threading" and line not in thread_locals:
            found.append(f"{module}:{line} imports threading: the codec is sans-IO")
        if top not in PACKAGES:
            continue
        theirs = component_of(target)
        if theirs == own or ANYTHING in allowed:
            continue
        if theirs not in allowed:
            may = ", ".join(allowed) or "nothing from the project"
            found.append(f"{module}:{line} imports {target} ({theirs}); {own} may import {may}")
            continue
        if own == "spark_integration" and top == "hmbclient":
            parts = target.split(".")
            if len(parts) > 2 or any(p.startswith("_") for p in parts):
                found.append(f"{module}:{line} imports {target}: spark_integration uses hmbclient's "
                             "front doors only (the facade or hmbclient.<package>)")
    return found


def import_graph(sources: Mapping[str, tuple[bool, str]]) -> dict[str, dict[str, int]]:
    """module -> {imported module: first line} over the modules of ``sources`` (dotted name ->
    (is a package, source)). An import of something inside a module (``from a.b import f``)
    or of a name below a known module counts as an import of the nearest known module; imports
    of anything outside ``sources`` and of the module itself are left out."""
    known = set(sources)
    graph: dict[str, dict[str, int]] = {}
    for module, (is_package, source) in sources.items():
        edges: dict[str, int] = {}
        for line, target in imported_modules(module, is_package, source, known):
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def import_cycles(graph: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """Every import cycle, one per strongly connected component of more than one module, as a
    path that starts and ends at the same module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return [_cycle_through(graph, set(c), c[0]) for c in components]


def _cycle_through(graph: Mapping[str, Mapping[str, int]], members: set[str], start: str) -> list[str]:
    # The shortest path start -> ... -> start inside one component (breadth first).
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child not in members:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, node, start]
                if child not in came_from:
                    came_from[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"{start} is in a component but on no cycle")  # pragma: no cover


def _describe(graph: Mapping[str, Mapping[str, int]], cycle: list[str]) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)) + f" -> {cycle[-1]}"


def within_components(graph: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """``graph`` without the imports from one component to another."""
    return {m: {t: line for t, line in edges.items() if component_of(t) == component_of(m)} for m, edges in graph.items()}


def test_no_import_cycle() -> None:
    """No module imports itself back inside its component, however far round and however lazily."""
    sources = {name: (path.name == "__init__.py", path.read_text()) for name, path in project_modules().items()}
    graph = within_components(import_graph(sources))
    found = [_describe(graph, c) for c in import_cycles(graph)]
    assert not found, "import cycles (move what both sides need below them):\n" + "\n".join(found)


def test_the_cycle_check_catches_cycles() -> None:
    """The check itself, on small synthetic packages: a two-module cycle hidden in a function,
    a three-module one through a relative import and import_module, a cycle through a package's
    __init__; an acyclic package passes, and importing a name of a module counts as the module."""
    cyclic = {
        "pkg": (True, "from pkg.c import C\n"),
        "pkg.a": (False, "from pkg.b import helper\n"),
        "pkg.b": (False, "def helper():\n    from pkg.a import thing\n    return thing\n"),
        "pkg.c": (False, "from .d import D\n"),
        "pkg.d": (False, "import importlib\nE = importlib.import_module('pkg.e')\n"),
        "pkg.e": (False, "from pkg.c import C\n"),
        "pkg.f": (False, "from pkg import C\n"),
        "pkg.g": (False, "from pkg.a import helper\nimport os\n"),
    }
    graph = import_graph(cyclic)
    cycles = {frozenset(c) for c in import_cycles(graph)}
    assert cycles == {frozenset({"pkg.a", "pkg.b"}), frozenset({"pkg.c", "pkg.d", "pkg.e"})}
    for c in import_cycles(graph):
        assert c[0] == c[-1] and all(b in graph[a] for a, b in zip(c, c[1:], strict=False)), c
    # pkg.f imports the package, whose __init__ imports pkg.c, which never comes back: no cycle;
    # make pkg.c import pkg.f and the package's __init__ is on a cycle too (one cycle is shown
    # per tangle of modules: the shortest through its first module).
    through_init = dict(cyclic, **{"pkg.c": (False, "from .d import D\nfrom pkg.f import x\n")})
    assert ["pkg", "pkg.c", "pkg.f", "pkg"] in import_cycles(import_graph(through_init))
    acyclic = {
        "pkg": (True, "from pkg.a import A\n"),
        "pkg.a": (False, "from pkg.b import B\nfrom pkg.b.inner import f\n"),
        "pkg.b": (True, "def f():\n    from pkg.c import C\n"),
        "pkg.c": (False, "import pkg.d.x\n"),
        "pkg.d": (False, "X = 1\n"),
    }
    assert import_cycles(import_graph(acyclic)) == []
    assert import_graph(acyclic)["pkg.c"] == {"pkg.d": 1}
    # the check as the repository runs it: inside one component a lazy cycle is caught, a loop
    # between two components (the config facade's) is left to the direction rules
    real = {
        "hmbclient.broker.apis": (False, "from hmbclient.broker.security.hooks import allowed\n"),
        "hmbclient.broker.security.hooks": (False, "def f():\n    from hmbclient.broker.apis import _make\n"),
        "hmbclient.config": (False, "_LAZY = {'BrokerConfig': 'hmbclient.broker.config'}\n"),
        "hmbclient.broker.config": (False, "from hmbclient.config import Config\n"),
    }
    assert [set(c) for c in import_cycles(within_components(import_graph(real)))] == [
        {"hmbclient.broker.apis", "hmbclient.broker.security.hooks"}
    ]
    assert len(import_cycles(import_graph(real))) == 2


def test_imports_point_the_right_way() -> None:
    modules = project_modules()
    known = set(modules)
    found: list[str] = []
    for name, path in modules.items():
        found += violations(name, path.name == "__init__.py", path.read_text(), known)
    assert not found, "imports against docs/architecture.md:\n" + "\n".join(found)


def test_the_checker_catches_wrong_directions() -> None:
    """The walk itself: each wrong direction the map forbids is reported, right ones are not."""
    known = set(project_modules())
    wrong = {
        ("hmbclient.protocol.frame", "from hmbclient.net import NetClient"),
        ("hmbclient.protocol.records.v2", "from ...broker import log"),
        ("hmbclient.broker.apis", "from hmbclient.producer import Producer"),
        ("hmbclient.broker.replica_manager", "def f():\n    from hmbclient.net.client import NetClient"),
        ("hmbclient.broker.server", "from hmbclient.consumer.simple import SimpleConsumer"),
        ("hmbclient.net.client", "from hmbclient.producer import Producer"),
        ("hmbclient.producer.sender", "from hmbclient.consumer import SimpleConsumer"),
        ("partitioners.hashed", "from hmbclient.errors import ConfigError"),
        ("encoders.builtin", "import hmbclient"),
        ("rebalance.paths", "from hmbclient.errors import CoordinationError"),
        ("hmbclient.zkpaths", "from hmbclient.errors import CoordinationError"),
        ("hmbclient.broker.controller.store", "from rebalance.registry import BrokerInfo"),
        ("spark_integration.rdd", "from hmbclient.net.connection import BrokerConnection"),
        ("spark_integration.rdd", "from hmbclient.testing._process import preexec_for_current_thread"),
        ("spark_integration.rdd", "from hmbclient.broker import EmbeddedBroker"),
        ("hmbclient.consumer.fetcher", "import socket"),
        ("hmbclient.protocol.frame", "import threading"),
        ("hmbclient.protocol.frame", "from threading import Lock, local"),
        ("hmbclient.errors", "import importlib\nimportlib.import_module('hmbclient.net')"),
        ("hmbclient.testing.plugin", "from tests.client.conftest import unique"),
        ("hmbclient.producer.producer", "def f():\n    import prometheus_client"),
        ("hmbclient.metrics_exporters.prometheus", "from opentelemetry import metrics"),
        ("hmbclient.metrics_exporters", "from prometheus_client import REGISTRY"),
        ("hmbclient.metrics_exporters.otel", "from hmbclient.producer import Producer"),
    }
    for module, source in wrong:
        pkg = (ROOT / Path(*module.split(".")) / "__init__.py").exists()
        assert violations(module, pkg, source, known), f"not caught: {module}: {source!r}"
    right = {
        ("hmbclient.protocol.frame", "from .types import Struct\nfrom hmbclient.errors import ProtocolError"),
        ("hmbclient.protocol.records.codecs", "from threading import local as _thread_local"),
        ("hmbclient.broker.log.log", "from ..topics import is_valid_topic_name"),
        ("spark_integration.rdd", "from hmbclient.net import Metadata\nfrom hmbclient import SimpleConsumer"),
        ("hmbclient.cli", "from hmbclient.demo import run_demo"),
        ("hmbclient.metrics_exporters.otel", "from opentelemetry.metrics import Meter\nfrom hmbclient.metrics import Metrics"),
    }
    for module, source in right:
        assert violations(module, False, source, known) == [], module


def test_every_module_has_a_component() -> None:
    unplaced = [m for m in project_modules() if component_of(m) is None]
    assert unplaced == [], f"modules outside the map (add them to ALLOWED and docs/architecture.md): {unplaced}"


def _doc_table() -> dict[str, tuple[str, ...]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("<!-- import-rules:start -->", 1)[1].split("<!-- import-rules:end -->", 1)[0]
    rows: dict[str, tuple[str, ...]] = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        targets = tuple(re.findall(r"`([^`]+)`", cells[1]))
        if cells[1].lower().startswith("anything"):
            targets = (ANYTHING,)
        for name in re.findall(r"`([^`]+)`", cells[0]):
            rows[name] = targets
    return rows


def test_the_map_in_the_docs_is_the_one_checked() -> None:
    doc = _doc_table()
    code = {k: tuple(v) for k, v in ALLOWED.items()}
    assert sorted(doc) == sorted(code), "components differ between docs/architecture.md and ALLOWED"
    for name in code:
        assert set(doc[name]) == set(code[name]), f"{name}: docs say {doc[name]}, ALLOWED says {code[name]}"


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        return [ROOT / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an unpacked sdist)
        files = []
        for d, dirs, names in os.walk(ROOT):
            dirs[:] = [x for x in dirs if not x.startswith(".") and x not in ("build", "dist", "__pycache__")
                       and not x.endswith(".egg-info")]
            files += [Path(d) / n for n in names]
        return files


def test_the_repository_stands_alone() -> None:
    """No tracked file points outside the clone: not at a sibling directory, not at a path of
    the machine it was written on. (The patterns are assembled so this file passes its own test.)"""
    forbidden = [(".." + "/shared").encode(), ("/" + "work/").encode()]
    hits = []
    for path in _tracked_files():
        if not path.is_file():
            continue  # deleted in the work tree, not yet committed
        data = path.read_bytes()
        for pattern in forbidden:
            for n, line in enumerate(data.splitlines(), 1):
                if pattern in line:
                    hits.append(f"{path.relative_to(ROOT)}:{n}: {line.decode(errors='replace').strip()[:120]}")
    assert not hits, "files that depend on something outside the repository:\n" + "\n".join(hits)
