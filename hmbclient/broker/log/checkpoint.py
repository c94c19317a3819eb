"""CheckpointFile: Kafka's small text files of broker state (high watermarks, leader epochs).

File layout (as Kafka's ``CheckpointFile``)::

    0                    <- version, always 0
    2                    <- number of entries
    <field> <field> ...  <- one entry per line, fields separated by one space
    <field> <field> ...

Used for ``replication-offset-checkpoint`` in the log directory (``topic partition hw``) and
``leader-epoch-checkpoint`` in each partition folder (``epoch start_offset``).

Contract:
* ``write`` is atomic: the new content goes to ``<path>.tmp``, which is fsynced, renamed over
  ``path`` and then the folder is fsynced (so the rename itself survives a machine crash). A crash
  at any point leaves either the old file or the new one, never a mix; a leftover ``.tmp`` is
  garbage that the next ``write`` overwrites (and partition start-up deletes).
* ``write(..., sync=False)`` skips both fsyncs: still atomic against a process crash (the rename
  is done by the kernel), but a machine crash may bring back an older whole file until ``sync``
  (fsync of the file and its folder) has run. For callers that decide themselves when the file
  must be durable (the leader epoch cache: before log bytes that need it are written).
* ``read`` of a missing file is ``[]`` (nothing checkpointed yet). Anything malformed -- a
  version other than 0, a count that disagrees with the lines, a line with the wrong number of
  fields or a field that does not parse -- is a StorageError naming the file and the line: a
  checkpoint is never guessed at.

:func:`write_json_atomically` and :func:`read_json` are the same discipline for the broker's
small JSON files (``topic-ids.json``, ``topic-configs.json``, ``dynamic-configs.json``): the
whole new file or the old one after any crash, a missing file read as a default, an unreadable
one a StorageError.

An ``entry_format`` is one parser per field (``int_field``, ``str_field``); entries are tuples of
the parsed values, written back with ``str``. Parsers are strict (``int_field`` accepts only an
optional minus and decimal digits), so what ``read`` accepts is exactly what ``write`` produces.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from hmbclient.errors import StorageError

__all__ = [
    "read_json",
    "write_json_atomically",
    "CheckpointFile",
    "EntryFormat",
    "int_field",
    "str_field",
    "TMP_SUFFIX",
    "CHECKPOINT_VERSION",
    "EPOCH_ENTRY_FORMAT",
    "HW_ENTRY_FORMAT",
    "fsync_dir",
]

CHECKPOINT_VERSION = 0
TMP_SUFFIX = ".tmp"

EntryFormat = Sequence[Callable[[str], Any]]

_INT = re.compile(r"-?[0-9]+")


def int_field(text: str) -> int:
    """A decimal integer field (an optional ``-`` and digits, nothing else)."""
    if _INT.fullmatch(text) is None:
        raise ValueError(f"{text!r} is not a decimal integer")
    return int(text)


def str_field(text: str) -> str:
    """A non-empty field without whitespace (a topic name)."""
    if not text or any(c.isspace() for c in text):
        raise ValueError(f"{text!r} is not a single word")
    return text


# leader-epoch-checkpoint: "epoch start_offset"
EPOCH_ENTRY_FORMAT: EntryFormat = (int_field, int_field)
# replication-offset-checkpoint: "topic partition high_watermark"
HW_ENTRY_FORMAT: EntryFormat = (str_field, int_field, int_field)


def fsync_dir(directory: str) -> None:
    """fsync a folder, so a rename, creation or unlink in it survives a machine crash."""
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomically(path: str, body: Any) -> None:
    """Replace ``path`` with ``body`` as JSON (keys sorted): written to ``<path>.tmp``, fsynced,
    renamed over ``path``, the folder fsynced. A crash at any point leaves the old file or the
    new one, never half of one; a leftover ``.tmp`` is overwritten by the next write.

    Args:
        path: the file (its folder must exist).
        body: anything ``json.dump`` takes.

    Raises:
        StorageError: the file could not be written (the old content is still in place).
    """
    tmp = path + TMP_SUFFIX
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(body, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(os.path.dirname(path))
    except OSError as e:
        raise StorageError(f"cannot write {path}: {e}") from e


def read_json(path: str, default: Any) -> Any:
    """The JSON value in ``path``, or ``default`` when there is no such file.

    Args:
        path: the file.
        default: what a missing file reads as.

    Returns:
        The parsed value (its shape is the caller's to check).

    Raises:
        StorageError: the file exists but cannot be read or is not JSON.
    """
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as e:
        raise StorageError(f"cannot read {path}: {e}") from e


class CheckpointFile:
    """One checkpoint file.

    Args:
        path: the file (its folder must exist).
        entry_format: one parser per field, e.g. ``EPOCH_ENTRY_FORMAT``.
    """

    def __init__(self, path: str, entry_format: EntryFormat) -> None:
        if not entry_format:
            raise ValueError("a checkpoint entry has at least one field")
        self.path = path
        self.entry_format = tuple(entry_format)

    def write(self, entries: Iterable[Sequence[Any]], *, sync: bool = True) -> None:
        """Replace the file's content with ``entries`` (atomically, see the module docstring);
        ``sync=False`` leaves the fsyncs to a later ``sync``.

        Raises:
            StorageError: the file could not be written (the old content is still in place).
            ValueError: an entry has the wrong number of fields or a field with whitespace.
        """
        n = len(self.entry_format)
        lines = []
        for e in entries:
            fields = [str(f) for f in e]
            if len(fields) != n or any(not f or " " in f or "\n" in f for f in fields):
                raise ValueError(f"{self.path}: cannot write entry {tuple(e)!r} ({n} fields without spaces)")
            lines.append(" ".join(fields))
        text = f"{CHECKPOINT_VERSION}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
        tmp = self.path + TMP_SUFFIX
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                data = memoryview(text.encode("utf-8"))
                while data:
                    data = data[os.write(fd, data) :]
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            if sync:
                fsync_dir(os.path.dirname(self.path))
        except OSError as e:
            raise StorageError(f"cannot write checkpoint {self.path}: {e}") from e

    def sync(self) -> None:
        """Make the last ``write(..., sync=False)`` durable: fsync the file, then its folder (the
        rename). Nothing to do if the file does not exist.

        Raises:
            StorageError: the fsync failed.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        except OSError as e:
            raise StorageError(f"cannot sync checkpoint {self.path}: {e}") from e
        try:
            os.fsync(fd)
            fsync_dir(os.path.dirname(self.path))
        except OSError as e:
            raise StorageError(f"cannot sync checkpoint {self.path}: {e}") from e
        finally:
            os.close(fd)

    def read(self) -> list[tuple[Any, ...]]:
        """The entries, in file order; ``[]`` if the file does not exist.

        Raises:
            StorageError: unreadable or malformed file (the message names the file and line).
        """
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StorageError(f"cannot read checkpoint {self.path}: {e}") from e
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise StorageError(f"malformed checkpoint {self.path}: not UTF-8 text at byte {e.start}") from None
        lines = text.split("\n")
        # A complete file ends with a newline, which leaves one empty string after the split.
        if lines and lines[-1] == "":
            lines.pop()

        def bad(lineno: int, why: str) -> StorageError:
            return StorageError(f"malformed checkpoint {self.path}, line {lineno}: {why}")

        if not lines:
            raise bad(1, "empty file (expected the version line)")
        try:
            version = int_field(lines[0])
        except ValueError as e:
            raise bad(1, str(e)) from None
        if version != CHECKPOINT_VERSION:
            raise bad(1, f"unsupported version {version} (expected {CHECKPOINT_VERSION})")
        if len(lines) < 2:
            raise bad(2, "missing the entry count")
        try:
            count = int_field(lines[1])
        except ValueError as e:
            raise bad(2, str(e)) from None
        if count < 0:
            raise bad(2, f"negative entry count {count}")
        body = lines[2:]
        if len(body) != count:
            raise bad(2 + min(len(body), count) + 1, f"the count says {count} entries but the file has {len(body)}")
        n = len(self.entry_format)
        out: list[tuple[Any, ...]] = []
        for i, line in enumerate(body, start=3):
            fields = line.split(" ")
            if len(fields) != n:
                raise bad(i, f"{line!r} has {len(fields)} fields, expected {n}")
            try:
                out.append(tuple(parse(f) for parse, f in zip(self.entry_format, fields, strict=True)))
            except ValueError as e:
                raise bad(i, f"{line!r}: {e}") from None
        return out

    def __repr__(self) -> str:
        return f"CheckpointFile({self.path!r})"
