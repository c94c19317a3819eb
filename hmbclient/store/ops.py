"""The store's commands as pure functions, and the wire format of keys, values and records.

Values: None, bool, int, float, str, bytes, list, set, dict (keys of a dict: str) nest freely;
they travel as tagged JSON (``{"b": base64}`` for bytes, ``{"set": [...]}`` for sets, ``{"d":
[[k, v], ...]}`` for dicts, ``{"l": [...]}`` for lists) so a set comes back a set. Store keys are
str, int, float, bool or bytes (one JSON value each).

``apply(get, cmd, now_ms)`` decides one command against the current table (``get(key)`` ->
``Entry`` or None) and returns ``(changes, result)``: the entries to write (None = erase) and
the command's answer (put_unique: whether it inserted). Cases:

* put: the key takes the value (and the expiry, if given);
* put_unique: as put when the key is absent (result True), nothing otherwise (False);
* erase: the key goes (nothing if absent);
* expire: the key goes if its expiry (absolute wall ms) has passed (the master's own timer);
* add / subtract: an int or float changes by the delta; a set gains/loses the element; a dict
  gains ``(k, v)`` / loses key k; a list appends / removes the first equal element. An absent
  key starts from the delta's kind for add (a number: 0; a pair: an empty table; anything
  else: an empty set); subtract of an absent key does
  nothing. Anything else is StoreTypeError, answered to the writer, the table unchanged;
* clear: every key goes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from hmbclient.errors import HmbError

__all__ = ["Entry", "StoreTypeError", "apply", "encode_key", "decode_key", "encode_value", "decode_value", "COMMANDS"]

COMMANDS = ("put", "put_unique", "erase", "expire", "add", "subtract", "clear")


class StoreTypeError(HmbError):
    """A command that does not fit the value it targets (add to a string, a bad key type)."""


class Entry(NamedTuple):
    value: Any
    expiry_ms: int | None = None  # absolute wall-clock ms; None: never


def _enc(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, bytes | bytearray):
        return {"b": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, set | frozenset):
        return {"set": sorted((_enc(x) for x in v), key=json.dumps)}
    if isinstance(v, dict):
        return {"d": [[_enc(k), _enc(x)] for k, x in v.items()]}
    if isinstance(v, list | tuple):
        return {"l": [_enc(x) for x in v]}
    raise StoreTypeError(f"a store value cannot be a {type(v).__name__}")


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(v)
    return v


def _dec(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    if "b" in v:
        return base64.b64decode(v["b"])
    if "set" in v:
        return {_hashable(_dec(x)) for x in v["set"]}
    if "d" in v:
        return {_hashable(_dec(k)): _dec(x) for k, x in v["d"]}
    if "l" in v:
        return [_dec(x) for x in v["l"]]
    raise StoreTypeError(f"unknown value encoding {v!r}")


def encode_value(v: Any) -> Any:
    """A JSON-ready form of a store value.

    Args:
        v: the value.
    Returns:
        Its tagged JSON form.
    Raises:
        StoreTypeError: a type a store cannot hold.
    """
    return _enc(v)


def decode_value(v: Any) -> Any:
    """The value of a tagged JSON form (``encode_value``'s inverse).

    Args:
        v: the JSON form.
    Returns:
        The value.
    Raises:
        StoreTypeError: an unknown tag.
    """
    return _dec(v)


def encode_key(key: Any) -> bytes:
    """A store key as the record key of the state topic.

    Args:
        key: str, int, float, bool or bytes.
    Returns:
        ``b"k"`` + its JSON form.
    Raises:
        StoreTypeError: another type.
    """
    if not isinstance(key, str | int | float | bool | bytes):
        raise StoreTypeError(f"a store key is str, int, float, bool or bytes, not {type(key).__name__}")
    return b"k" + json.dumps(_enc(key), separators=(",", ":")).encode()


def decode_key(raw: bytes) -> Any:
    """``encode_key``'s inverse.

    Args:
        raw: a record key starting with ``b"k"``.
    Returns:
        The store key.
    """
    return _dec(json.loads(raw[1:]))


def _zero_like(delta: Any) -> Any:
    if isinstance(delta, bool):
        raise StoreTypeError("cannot add a bool")
    if isinstance(delta, int | float):
        return 0
    if isinstance(delta, list | tuple) and len(delta) == 2:
        return {}  # a (key, value) pair starts a table
    return set()


def _add(cur: Any, delta: Any) -> Any:
    if isinstance(cur, bool):
        raise StoreTypeError("cannot add to a bool")
    if isinstance(cur, int | float) and isinstance(delta, int | float) and not isinstance(delta, bool):
        return cur + delta
    if isinstance(cur, set):
        return cur | {_hashable(delta)}
    if isinstance(cur, dict):
        if not (isinstance(delta, list | tuple) and len(delta) == 2):
            raise StoreTypeError("add to a table takes a (key, value) pair")
        out = dict(cur)
        out[_hashable(delta[0])] = delta[1]
        return out
    if isinstance(cur, list):
        return [*cur, delta]
    raise StoreTypeError(f"cannot add {type(delta).__name__} to {type(cur).__name__}")


def _subtract(cur: Any, delta: Any) -> Any:
    if isinstance(cur, bool):
        raise StoreTypeError("cannot subtract from a bool")
    if isinstance(cur, int | float) and isinstance(delta, int | float) and not isinstance(delta, bool):
        return cur - delta
    if isinstance(cur, set):
        return cur - {_hashable(delta)}
    if isinstance(cur, dict):
        out = dict(cur)
        out.pop(_hashable(delta[0] if isinstance(delta, list | tuple) else delta), None)
        return out
    if isinstance(cur, list):
        out_l = list(cur)
        if delta in out_l:
            out_l.remove(delta)
        return out_l
    raise StoreTypeError(f"cannot subtract {type(delta).__name__} from {type(cur).__name__}")


def apply(get: Callable[[Any], Entry | None], cmd: dict[str, Any], now_ms: int, keys: Callable[[], Iterable[Any]] = lambda: ()) -> tuple[list[tuple[Any, Entry | None]], Any]:
    """Decide one command (see the module docstring).

    Args:
        get: the current entry of a key, or None.
        cmd: ``{"op": ..., "k": key, "v": value, "x": expiry in ms from now or None, "d": delta}``
            (decoded values).
        now_ms: wall-clock now, for expiries.
        keys: every key (for clear).
    Returns:
        ``(changes, result)``.
    Raises:
        StoreTypeError: an unknown command or a type mismatch.
    """
    op = cmd.get("op")
    key = cmd.get("k")
    x = cmd.get("x")
    expiry = None if x is None else now_ms + int(x)
    if op == "put":
        return [(key, Entry(cmd.get("v"), expiry))], None
    if op == "put_unique":
        if get(key) is not None:
            return [], False
        return [(key, Entry(cmd.get("v"), expiry))], True
    if op == "erase":
        return ([(key, None)] if get(key) is not None else []), None
    if op == "expire":
        cur = get(key)
        if cur is not None and cur.expiry_ms is not None and cur.expiry_ms <= now_ms:
            return [(key, None)], None
        return [], None
    if op in ("add", "subtract"):
        cur = get(key)
        delta = cmd.get("d")
        if cur is None:
            if op == "subtract":
                return [], None
            value = _add(_zero_like(delta), delta)
            return [(key, Entry(value, expiry))], None
        value = _add(cur.value, delta) if op == "add" else _subtract(cur.value, delta)
        return [(key, Entry(value, expiry if x is not None else cur.expiry_ms))], None
    if op == "clear":
        return [(k, None) for k in list(keys())], None
    raise StoreTypeError(f"unknown store command {op!r}")
