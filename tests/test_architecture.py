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
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hmbclient", "partitioners", "encoders", "rebalance", "spark_integration")

#: What the application layer may import: anything in the project.
ANYTHING = "*"

_CORE = ("hmbclient.errors", "hmbclient.clock", "hmbclient.config")

#: The component configs, each beside its component (re-exported by hmbclient.config).
_CONFIGS = ("hmbclient.net.config", "hmbclient.producer.config", "hmbclient.consumer.config", "hmbclient.broker.config")

#: component -> the components it may import (besides itself). A component is a package or
#: module prefix; "hmbclient" alone is the facade (hmbclient/__init__.py), not everything below.
ALLOWED: dict[str, tuple[str, ...]] = {
    # leaves: import nothing from the project
    "hmbclient.errors": (),
    "hmbclient.clock": (),
    "hmbclient.children": (),
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
    "hmbclient.admin": (*_CORE, "hmbclient", "hmbclient.protocol", "hmbclient.net", "hmbclient.consumer",
                        "hmbclient.zkpaths", "rebalance"),
    # the server and the local servers built on it
    "hmbclient.broker": (*_CORE, "hmbclient.broker.config", "hmbclient.protocol", "hmbclient.zkpaths",
                         "hmbclient.children"),
    "hmbclient.testing": (*_CORE, "hmbclient.protocol", "hmbclient.broker", "hmbclient.children", "spark_integration"),
    # on top of the client's public surface
    "spark_integration": ("hmbclient", *_CORE, "hmbclient.net", "hmbclient.producer", "hmbclient.consumer",
                          "rebalance", "partitioners", "encoders"),
    # the application layer: the `hmb` command and its demo
    "hmbclient.cli": (ANYTHING,),
    "hmbclient.demo": (ANYTHING,),
}

#: Components that may import socket, selectors or ssl.
SOCKET_USERS = ("hmbclient.net", "hmbclient.broker", "hmbclient.testing")
_SOCKET_MODULES = {"socket", "selectors", "ssl"}

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
