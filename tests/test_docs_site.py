"""The docs site builds with warnings as errors, as ``make docs`` builds it, and holds what it
promises: every page of the nav, the configuration tables generated from the code, the API
reference generated from the docstrings, and docs/architecture.md itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    warnings = [line for line in r.stderr.splitlines() if line.startswith("WARNING")]
    assert warnings == []

    def html(page: str) -> Path:  # "consumers" -> consumers/index.html, "reference/index" -> reference/index.html
        return site / page.removesuffix("index") / "index.html"

    def text(page: str) -> str:
        return re.sub(r"<[^>]+>", " ", html(page).read_text())

    nav = re.findall(r"^\s+- (?:[\w ]+: )?([\w/-]+)\.md$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert {"getting-started", "consumers", "broker", "spark", "security", "operations",
            "architecture", "reference/index"} <= set(nav)
    for page in nav:
        assert html(page).is_file(), page
    # generated from the code at build time
    assert "queue_buffering_max_ms" in text("configuration") and "<!-- config-tables -->" not in text("configuration")
    assert "Import directions" in text("architecture")
    reference = {"reference/producer": ["send_record", "RecordMetadata"],
                 "reference/consumer": ["get_offsets_before", "create_message_streams", "KafkaStream"],
                 "reference/broker": ["EmbeddedCluster", "await_isr", "BrokerProcess"],
                 "reference/spark": ["create_rdd", "OffsetRange"],
                 "reference/testing": ["LocalZooKeeper", "hmb_cluster"]}
    for page, names in reference.items():
        body = text(page)
        for name in names:
            assert name in body, f"{page} lacks {name}"
    # Sphinx roles in docstrings are rewritten to code (docs/site_hooks/griffe_roles.py)
    assert ":class:" not in text("reference/consumer")
