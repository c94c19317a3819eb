"""Mutation check of the broker's authorization: every authorization call in hmbclient/broker is
replaced by ``True`` in turn (the file restored after each run) and the ACL matrix
(tests/broker/test_acl_matrix.py) must fail for each. A mutant that survives is a check no test
needs: a hole the matrix would not see.

    .venv/bin/python tests/broker/acl_mutants.py            # every call site
    .venv/bin/python tests/broker/acl_mutants.py --list     # only list the sites

Not collected by pytest (no ``test_`` prefix): it runs the matrix once per site, a minute or
two in all. Exit status 1 when a mutant survives.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BROKER = ROOT / "hmbclient" / "broker"
MATRIX = ["tests/broker/test_acl_matrix.py"]
# an authorization call: self._allowed(...), allowed(...), authorizer.authorize(...)
_CALL = re.compile(r"(?:self\._allowed|(?<![\w.])allowed|\bauthorizer\.authorize)\(")


def _end_of_call(text: str, open_paren: int) -> int:
    depth = 0
    for i in range(open_paren, len(text)):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError("unbalanced call")


def sites() -> list[tuple[Path, int, int, str]]:
    """Every authorization call: (file, start, end, the line it is on)."""
    out = []
    for path in sorted(BROKER.rglob("*.py")):
        text = path.read_text()
        for m in _CALL.finditer(text):
            line_start = text.rfind("\n", 0, m.start()) + 1
            line = text[line_start:text.find("\n", m.start())]
            if line.lstrip().startswith(("def ", "#")) or "``" in line:  # a definition, a comment, a docstring
                continue
            end = _end_of_call(text, m.end() - 1)
            out.append((path, m.start(), end, line.strip()))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    found = sites()
    survivors = []
    for i, (path, start, end, line) in enumerate(found, 1):
        before = path.read_text()[:start]
        where = f"{path.relative_to(ROOT)}:{before.count(chr(10)) + 1}:{start - before.rfind(chr(10))}"
        if args.list:
            print(f"{where}  {line}")
            continue
        original = path.read_text()
        try:
            path.write_text(original[:start] + "True" + original[end:])
            r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *MATRIX],
                               cwd=ROOT, capture_output=True, text=True, timeout=600)
        finally:
            path.write_text(original)
        caught = r.returncode != 0
        print(f"[{i}/{len(found)}] {'caught  ' if caught else 'SURVIVED'} {where}  {line[:100]}", flush=True)
        if not caught:
            survivors.append(where)
    if not args.list:
        print(f"{len(found) - len(survivors)} of {len(found)} mutants caught" + (f"; survived: {survivors}" if survivors else ""))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
