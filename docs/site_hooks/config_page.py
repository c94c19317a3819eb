"""MkDocs hook: a page's ``<!-- config-tables -->`` line becomes the configuration tables that
docs/config_tables.py renders from the config classes (the same text the README holds), so the
site documents the settings of the code it was built from."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

_DOCS = Path(__file__).resolve().parents[1]
_MARKER = "<!-- config-tables -->"


def _render() -> str:
    root = str(_DOCS.parent)
    if root not in sys.path:
        sys.path.insert(0, root)  # this checkout's packages, not another installed copy
    spec = importlib.util.spec_from_file_location("_config_tables", _DOCS / "config_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.render())


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if _MARKER not in markdown:
        return markdown
    return markdown.replace(_MARKER, _render())
