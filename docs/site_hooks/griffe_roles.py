"""A griffe extension for the docs site: the docstrings are written to be read in an editor,
with Sphinx roles (``:class:`Producer```, ``:mod:`~pkg.mod```); in Markdown those would show
their role names. Each becomes a code span of the name it shows (``~`` keeps the last part),
so the API reference reads as the source does."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|mod|func|meth|data|attr|exc|obj|const):`(~?)([^`]+)`")


def _plain(match: re.Match[str]) -> str:
    name = match.group(2).lstrip(".")
    if match.group(1):
        name = name.rsplit(".", 1)[-1]
    return f"`{name}`"


class SphinxRolesToCode(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_plain, obj.docstring.value)
