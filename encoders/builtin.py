"""Built-in encoders and decoders: raw bytes, text, and JSON."""

from __future__ import annotations

import codecs
import json
from typing import Any

__all__ = [
    "DefaultEncoder",
    "DefaultDecoder",
    "StringEncoder",
    "StringDecoder",
    "JsonEncoder",
    "JsonDecoder",
]

_Bytes = bytes | bytearray | memoryview


class DefaultEncoder:
    """Bytes pass through (``bytearray``/``memoryview`` are copied to ``bytes``)."""

    def to_message(self, obj: _Bytes | None) -> bytes | None:
        """Return ``obj`` as immutable bytes.

        Args:
            obj: bytes-like, or None.

        Returns:
            ``bytes(obj)``, or None for None.

        Raises:
            TypeError: ``obj`` is not bytes-like (a ``str`` needs a StringEncoder).
        """
        if obj is None or type(obj) is bytes:
            return obj
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return bytes(obj)
        raise TypeError(
            f"DefaultEncoder takes bytes, not {type(obj).__name__}; "
            "use StringEncoder or JsonEncoder for other types"
        )

    def __repr__(self) -> str:
        return "DefaultEncoder()"


class DefaultDecoder:
    """Bytes pass through."""

    def from_message(self, data: _Bytes | None) -> bytes | None:
        """Return the message bytes unchanged (copied if not already ``bytes``).

        Args:
            data: The message bytes, or None.

        Returns:
            bytes, or None.
        """
        if data is None or type(data) is bytes:
            return data
        return bytes(data)

    def __repr__(self) -> str:
        return "DefaultDecoder()"


def _check_encoding(encoding: str) -> str:
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        raise ValueError(f"unknown text encoding {encoding!r}") from None


class StringEncoder:
    """``str`` -> bytes in a text encoding (utf-8 by default, Kafka's ``serializer.encoding``)."""

    def __init__(self, encoding: str = "utf-8") -> None:
        """Create the encoder.

        Args:
            encoding: A Python codec name (default "utf-8").

        Raises:
            ValueError: The encoding is unknown.
        """
        self.encoding = _check_encoding(encoding)

    def to_message(self, obj: str | None) -> bytes | None:
        """Encode ``obj``.

        Args:
            obj: The text, or None.

        Returns:
            ``obj.encode(encoding)``, or None.

        Raises:
            TypeError: ``obj`` is not a str.
            UnicodeEncodeError: ``obj`` cannot be represented in the encoding.
        """
        if obj is None:
            return None
        if not isinstance(obj, str):
            raise TypeError(f"StringEncoder takes str, not {type(obj).__name__}")
        return obj.encode(self.encoding)

    def __repr__(self) -> str:
        return f"StringEncoder(encoding={self.encoding!r})"


class StringDecoder:
    """bytes -> ``str`` in a text encoding (utf-8 by default)."""

    def __init__(self, encoding: str = "utf-8") -> None:
        """Create the decoder.

        Args:
            encoding: A Python codec name (default "utf-8").

        Raises:
            ValueError: The encoding is unknown.
        """
        self.encoding = _check_encoding(encoding)

    def from_message(self, data: _Bytes | None) -> str | None:
        """Decode ``data``.

        Args:
            data: The message bytes, or None.

        Returns:
            The text, or None.

        Raises:
            UnicodeDecodeError: (a ValueError) ``data`` is not valid in the encoding.
        """
        if data is None:
            return None
        return bytes(data).decode(self.encoding)

    def __repr__(self) -> str:
        return f"StringDecoder(encoding={self.encoding!r})"


class JsonEncoder:
    """JSON-serializable object -> compact utf-8 JSON (``{"a":1}``, no spaces).

    Non-ASCII text is written as utf-8, not ``\\uXXXX`` escapes. ``sort_keys=True`` gives a
    canonical form (equal dicts -> equal bytes), useful for keys and for compaction.
    """

    def __init__(self, sort_keys: bool = False, default: Any = None) -> None:
        """Create the encoder.

        Args:
            sort_keys: Write object keys in sorted order.
            default: Passed to ``json.dumps``: called for objects JSON cannot serialize.
        """
        self.sort_keys = sort_keys
        self._default = default

    def to_message(self, obj: Any) -> bytes | None:
        """Serialize ``obj`` to JSON bytes.

        Args:
            obj: Any JSON-serializable object; ``None`` is Kafka's null, not JSON ``null``.

        Returns:
            utf-8 JSON bytes, or None.

        Raises:
            TypeError: ``obj`` (or something inside it) is not JSON-serializable.
            ValueError: ``obj`` holds NaN/Infinity or a circular reference.
        """
        if obj is None:
            return None
        return json.dumps(
            obj,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
            sort_keys=self.sort_keys,
            default=self._default,
        ).encode("utf-8")

    def __repr__(self) -> str:
        return f"JsonEncoder(sort_keys={self.sort_keys!r})"


class JsonDecoder:
    """utf-8 JSON bytes -> Python objects (``json.loads``)."""

    def from_message(self, data: _Bytes | None) -> Any:
        """Parse ``data`` as JSON.

        Args:
            data: utf-8 (or utf-16/32, as json.loads detects) JSON bytes, or None.

        Returns:
            The parsed object, or None for a null message.

        Raises:
            ValueError: ``data`` is not valid JSON (``json.JSONDecodeError``) or text.
        """
        if data is None:
            return None
        return json.loads(bytes(data))

    def __repr__(self) -> str:
        return "JsonDecoder()"
