"""A griffe extension for the docs site: the docstrings are written to be read in an editor,
with Sphinx roles (``:class:`Producer```, ``:mod:`~pkg.mod```) and reST's ``Usage::`` before
an indented example; in Markdown those would show as written. Each role becomes a code span of
the name it shows (``~`` keeps the last part), and a ``::`` ending a line becomes ``:`` (the
indented block after it is already a code block in Markdown), so the API reference reads as
the source does."""

from __future__ import annotations

import re
from typing import Any

import griffe

_LITERAL = re.compile(r"(?m)(\S)::$")
_BARE_LITERAL = re.compile(r"(?m)^[ \t]*::$")
_ROLE = re.compile(r":(?:py:)?(?:class|mod|func|meth|data|attr|exc|obj|const):`(~?)([^`]+)`")


def _plain(match: re.Match[str]) -> str:
    name = match.group(2).lstrip(".")
    if match.group(1):
        name = name.rsplit(".", 1)[-1]
    return f"`{name}`"


class SphinxRolesToCode(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            text = _ROLE.sub(_plain, obj.docstring.value)
            text = _BARE_LITERAL.sub("", _LITERAL.sub(r"\1:", text))
            obj.docstring.value = text
