"""The README's promises that code can check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_config_tables_match_the_code() -> None:
    readme = (ROOT / "README.md").read_text()
    current = readme.split("<!-- config-tables:start -->\n", 1)[1].split("<!-- config-tables:end -->", 1)[0]
    generated = subprocess.run([sys.executable, str(ROOT / "docs" / "config_tables.py")],
                               capture_output=True, text=True, check=True).stdout
    assert current == generated, "README config tables are stale: regenerate with docs/config_tables.py"


def test_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci


def test_quickstart_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quickstart", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    r = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "[0, 1, 2]"
    assert lines[1:] == ["0 user-1 a", "1 user-1 b", "2 user-1 c"] or lines[1:] == [
        "0 b'user-1' b'a'", "1 b'user-1' b'b'", "2 b'user-1' b'c'"]


def _consumer_styles_blocks() -> list[str]:
    section = (ROOT / "README.md").read_text().split("## Two consumer styles", 1)[1].split("\n## ", 1)[0]
    return [b.split("```", 1)[0] for b in section.split("```python\n")[1:]]


def test_the_two_consumer_styles_run() -> None:
    both, aio = _consumer_styles_blocks()
    r = subprocess.run([sys.executable, "-c", both], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "[b'e0', b'e1', b'e2']",
        "assigned [TopicPartition(topic='events', partition=0)]",
        "[(0, b'e0'), (1, b'e1'), (2, b'e2')]",
    ]
    r = subprocess.run([sys.executable, "-c", aio], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[0, 1, 2]", "0 b'c0'", "1 b'c1'", "2 b'c2'"]
