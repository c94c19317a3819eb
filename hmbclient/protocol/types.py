"""Primitive wire types and declarative schemas. Sans-IO: bytes in, values out.

Every type has two methods:

* ``write(out, value)`` appends the encoded bytes of ``value`` to the list ``out`` (the caller
  joins once; a ``Records`` field may append a non-bytes part such as the broker's
  ``FileSlice`` so a response can be sent partly with ``os.sendfile``);
* ``read(buf, pos) -> (value, new_pos)`` decodes from a ``bytes``/``memoryview`` at ``pos``.

Readers bounds-check every length against the buffer before slicing (a slice past the end would
silently truncate) and every array count against the bytes left, so a hostile count cannot make
us loop or allocate past the frame. They raise :class:`ProtocolError`; ``struct.error`` and
friends are turned into ``ProtocolError`` at :func:`Struct.decode`, the one entry point.

Speed: ``Struct`` compiles a reader and a writer per schema (consecutive fixed-width fields in one
``struct.Struct`` call, no per-field dispatch loop) and arrays of one fixed-width primitive
decode/encode as one run; the plain field-by-field loop stays as the reference and the error path.

Layout facts (Kafka protocol guide): integers are big-endian two's complement; ``string`` is an
int16 length (-1 = null) + UTF-8; ``bytes`` is an int32 length (-1 = null); arrays are an int32
count (-1 = null) followed by the elements; varints are zigzag (signed) or plain (unsigned) LEB128.

Flexible versions (KIP-482) use the compact forms: ``CompactString``/``CompactBytes``/
``CompactArray`` carry an unsigned varint of length + 1 (0 = null), and every struct ends with a
tagged-field section (an unsigned varint count, then per field its tag, its size and its bytes,
in ascending tag order; unknown tags are skipped). :func:`flexible` turns a version's field list
into its flexible form (every string, bytes and array made compact, every struct given its
section), and ``Struct(..., tagged=...)`` adds tagged fields: they are ordinary fields of the
value (their defaults when absent), so a caller builds a flexible version as any other.

Building (the one builder): ``Struct.build(**fields)`` makes a value from a *superset* of its
fields (names the struct lacks are dropped, nested dicts are fitted the same way, missing names
take their defaults), so one call site describes a message for every version;
``Struct.nested(*path)`` is the struct of a nested entry (``"topics", "partitions"``) and
``Struct.row(*names)`` a cached positional builder of it for hot loops.
"""

from __future__ import annotations

import struct
import uuid
from collections import namedtuple
from collections.abc import Callable, Sequence
from functools import cache
from operator import itemgetter
from typing import Any

from hmbclient.errors import ProtocolError

__all__ = [
    "Type",
    "Int8",
    "Int16",
    "Float64",
    "Int32",
    "Int64",
    "UInt32",
    "Boolean",
    "String",
    "NullableString",
    "Bytes",
    "NullableBytes",
    "Records",
    "VarInt",
    "VarLong",
    "UnsignedVarInt",
    "Uuid",
    "ZERO_UUID",
    "CompactString",
    "CompactNullableString",
    "CompactBytes",
    "CompactNullableBytes",
    "CompactRecords",
    "Array",
    "CompactArray",
    "Struct",
    "flexible",
    "flexible_struct",
    "encode_varint",
    "decode_varint",
    "encode_unsigned_varint",
    "decode_unsigned_varint",
    "zigzag_encode",
    "zigzag_decode",
]

_i8 = struct.Struct(">b")
_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")
_i64 = struct.Struct(">q")
_u32 = struct.Struct(">I")


class Type:
    """A wire type. ``min_size`` is the fewest bytes one value can take (array count checks)."""

    min_size = 1
    default: Any = None

    def write(self, out: list[Any], value: Any) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def read(self, buf: Any, pos: int) -> tuple[Any, int]:  # pragma: no cover - interface
        raise NotImplementedError

    def encode(self, value: Any) -> bytes:
        out: list[Any] = []
        self.write(out, value)
        return b"".join(out)


class _Fixed(Type):
    def __init__(self, name: str, st: struct.Struct, default: Any = 0) -> None:
        self.name = name
        self._st = st
        self.min_size = st.size
        self.default = default
        self._pack = st.pack
        self._unpack_from = st.unpack_from
        self._size = st.size

    def write(self, out: list[Any], value: Any) -> None:
        try:
            out.append(self._pack(value))
        except struct.error as e:
            raise ProtocolError(f"{self.name}: cannot encode {value!r}: {e}") from None

    def read(self, buf: Any, pos: int) -> tuple[Any, int]:
        end = pos + self._size
        if end > len(buf):
            raise ProtocolError(f"{self.name}: need {self._size} bytes at {pos}, have {len(buf) - pos}")
        return self._unpack_from(buf, pos)[0], end

    def __repr__(self) -> str:
        return self.name


Int8 = _Fixed("Int8", _i8)
Int16 = _Fixed("Int16", _i16)
Int32 = _Fixed("Int32", _i32)
Int64 = _Fixed("Int64", _i64)
UInt32 = _Fixed("UInt32", _u32)
Float64 = _Fixed("Float64", struct.Struct(">d"), 0.0)


class _Boolean(Type):
    default = False

    def write(self, out: list[Any], value: Any) -> None:
        out.append(b"\x01" if value else b"\x00")

    def read(self, buf: Any, pos: int) -> tuple[Any, int]:
        if pos >= len(buf):
            raise ProtocolError("Boolean: no byte left")
        return buf[pos] != 0, pos + 1

    def __repr__(self) -> str:
        return "Boolean"


Boolean = _Boolean()


class _Uuid(Type):
    """Kafka's ``uuid`` (KIP-516 topic ids): 16 bytes, most significant first, as
    :class:`uuid.UUID` values; the default is the all-zero id (Kafka's ``Uuid.ZERO_UUID``).
    ``write`` also takes the 16 bytes themselves."""

    min_size = 16
    default = uuid.UUID(int=0)

    def write(self, out: list[Any], value: Any) -> None:
        if isinstance(value, uuid.UUID):
            out.append(value.bytes)
        elif isinstance(value, bytes | bytearray) and len(value) == 16:
            out.append(bytes(value))
        else:
            raise ProtocolError(f"Uuid: cannot encode {value!r} (a uuid.UUID or 16 bytes)")

    def read(self, buf: Any, pos: int) -> tuple[Any, int]:
        end = pos + 16
        if end > len(buf):
            raise ProtocolError(f"Uuid: need 16 bytes at {pos}, have {len(buf) - pos}")
        return uuid.UUID(bytes=bytes(buf[pos:end])), end

    def __repr__(self) -> str:
        return "Uuid"


Uuid = _Uuid()
ZERO_UUID: uuid.UUID = _Uuid.default


class _String(Type):
    """int16 length + UTF-8. ``nullable`` decides whether None (length -1) is legal."""

    min_size = 2

    def __init__(self, nullable: bool) -> None:
        self.nullable = nullable
        self.default = None if nullable else ""

    def write(self, out: list[Any], value: Any) -> None:
        if value is None:
            if not self.nullable:
                raise ProtocolError("String: None given for a non-nullable string")
            out.append(b"\xff\xff")
            return
        if isinstance(value, str):
            data = value.encode("utf-8")
        elif isinstance(value, bytes | bytearray | memoryview):
            # Already-encoded UTF-8 (e.g. a topic name kept as bytes).
            data = bytes(value)
        else:
            # bytes(5) would silently write five zero bytes: refuse anything that is not text.
            raise ProtocolError(f"String: expected str, got {type(value).__name__}")
        if len(data) > 32767:
            raise ProtocolError(f"String: {len(data)} bytes is over the int16 limit")
        out.append(_i16.pack(len(data)))
        out.append(data)

    def read(self, buf: Any, pos: int) -> tuple[Any, int]:
        if pos + 2 > len(buf):
            raise ProtocolError("String: truncated length")
        (n,) = _i16.unpack_from(buf, pos)
        pos += 2
        if n < 0:
            if n == -1 and self.nullable:
                return None, pos
            raise ProtocolError(f"String: invalid length {n}")
        end = pos + n
        if end > len(buf):
            raise ProtocolError(f"String: length {n} runs past the buffer")
        try:
            return str(buf[pos:end], "utf-8"), end
        except UnicodeDecodeError as e:
            raise ProtocolError(f"String: not UTF-8: {e}") from None

    def __repr__(self) -> str:
        return "NullableString" if self.nullable else "String"


String = _String(nullable=False)
NullableString = _String(nullable=True)


class _Bytes(Type):
    """int32 length + raw bytes. Reads return ``bytes`` (copy) unless ``view`` (memoryview)."""

    min_size = 4

    def __init__(self, nullable: bool, view: bool = False, name: str = "Bytes") -> None:
        self.nullable = nullable
        self.view = view
        self.name = name
        self.default = None if nullable else b""

    def write(self, out: list[Any], value: Any) -> None:
        if value is None:
            if not self.nullable:
                raise ProtocolError(f"{self.name}: None given for non-nullable bytes")
            out.append(b"\xff\xff\xff\xff")
            return
        if isinstance(value, bytes | bytearray):
            out.append(_i32.pack(len(value)))
            out.append(value)
            return
        if isinstance(value, memoryview):
            # len() of a view counts items, not bytes; frame sizes add up len() of the parts, so
            # hand on a flat byte view.
            if value.itemsize != 1 or value.ndim != 1:
                value = value.cast("B") if value.c_contiguous else memoryview(value.tobytes())
            out.append(_i32.pack(len(value)))
            out.append(value)
            return
        if isinstance(value, str) or not hasattr(value, "__len__"):
            raise ProtocolError(f"{self.name}: expected bytes, got {type(value).__name__}")
        # Anything else that knows its length and how to be sent (e.g. the broker's FileSlice,
        # written with os.sendfile) travels as its own part.
        length = len(value)
        out.append(_i32.pack(length))
        out.append(value)

    def read(self, buf: Any, pos: int) -> tuple[Any, int]:
        if pos + 4 > len(buf):
            raise ProtocolError(f"{self.name}: truncated length")
        (n,) = _i32.unpack_from(buf, pos)
        pos += 4
        if n < 0:
            if n == -1 and self.nullable:
                return None, pos
            raise ProtocolError(f"{self.name}: invalid length {n}")
        end = pos + n
        if end > len(buf):
            raise ProtocolError(f"{self.name}: length {n} runs past the buffer")
        if self.view:
            return memoryview(buf)[pos:end], end
        return bytes(buf[pos:end]), end

    def __repr__(self) -> str:
        return self.name


Bytes = _Bytes(nullable=False)
NullableBytes = _Bytes(nullable=True, name="NullableBytes")
# A record set (MessageSet v0/v1 or RecordBatch v2 bytes). Decoded as a zero-copy memoryview;
# the records package parses it lazily.
Records = _Bytes(nullable=True, view=True, name="Records")


# --- varints -----------------------------------------------------------------------------


def zigzag_encode(n: int) -> int:
    """Map a signed 64-bit int onto an unsigned one (0, -1, 1, -2 -> 0, 1, 2, 3)."""
    return (n << 1) ^ (n >> 63)


def zigzag_decode(n: int) -> int:
    """Inverse of :func:`zigzag_encode`."""
    return (n >> 1) ^ -(n & 1)


def encode_unsigned_varint(n: int) -> bytes:
    """Unsigned LEB128 of ``n`` (7 bits a byte, low group first). Raises ProtocolError if n < 0."""
    if n < 0:
        raise ProtocolError(f"unsigned varint: negative value {n}")
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def decode_unsigned_varint(buf: Any, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """Decode an unsigned LEB128 varint. Raises ProtocolError if truncated or too long."""
    result = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos >= end:
            raise ProtocolError("varint: truncated")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        del i
    raise ProtocolError(f"varint: longer than {max_bytes} bytes")


def encode_varint(n: int) -> bytes:
    """Zigzag varint of a signed 64-bit value."""
    if not -(1 << 63) <= n < (1 << 63):
        raise ProtocolError(f"varint: {n} is outside int64")
    return encode_unsigned_varint(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def decode_varint(buf: Any, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """Decode a zigzag varint (a signed 64-bit value). Raises ProtocolError if truncated,
    longer than ``max_bytes`` or wider than 64 bits (a 10th byte above 0x01)."""
    raw, pos = decode_unsigned_varint(buf, pos, max_bytes)
    if raw >> 64:
        raise ProtocolError("varint: value overflows 64 bits")
    return (raw >> 1) ^ -(raw & 1), pos


class _VarInt(Type):
    default = 0

    def __init__(self, name: str, signed: bool, bits: int) -> None:
        self.name = name
        self.signed = signed
        self.bits = bits
        self.max_bytes = 5 if bits == 32 else 10

    def write(self, out: list[Any], value: Any) -> None:
        if not isinstance(value, int):
            raise ProtocolError(f"{self.name}: expected int, got {type(value).__name__}")
        if self.signed:
            lo, hi = -(1 << (self.bits - 1)), 1 << (self.bits - 1)
            if not lo <= value < hi:
                raise ProtocolError(f"{self.name}: {value} out of range")
            out.append(encode_unsigned_varint(((value << 1) ^ (value >> (self.bits - 1))) & ((1 << self.bits) - 1)))
        else:
            if not 0 <= value < (1 << self.bits):
                raise ProtocolError(f"{self.name}: {value} out of range")
            out.append(encode_unsigned_varint(value))

    def read(self, buf: Any, pos: int) -> tuple[Any, int]:
        raw, pos = decode_unsigned_varint(buf, pos, self.max_bytes)
        if raw >= (1 << self.bits):
            raise ProtocolError(f"{self.name}: value overflows {self.bits} bits")
        if self.signed:
            return (raw >> 1) ^ -(raw & 1), pos
        return raw, pos

    def __repr__(self) -> str:
        return self.name


VarInt = _VarInt("VarInt", signed=True, bits=32)
VarLong = _VarInt("VarLong", signed=True, bits=64)
UnsignedVarInt = _VarInt("UnsignedVarInt", signed=False, bits=32)


# --- compact (flexible-version) strings and bytes: unsigned varint of length + 1, 0 = null ----


def _compact_length(buf: Any, pos: int, name: str) -> tuple[int, int]:
    """(length, or -1 for null; the position after it) of a compact string, bytes or array."""
    raw, pos = decode_unsigned_varint(buf, pos, 5)
    if raw > 0x80000000:
        raise ProtocolError(f"{name}: length {raw - 1} is over the int32 limit")
    return raw - 1, pos


class _CompactString(_String):
    min_size = 1

    def write(self, out: list[Any], value: Any) -> None:
        if value is None:
            if not self.nullable:
                raise ProtocolError("CompactString: None given for a non-nullable string")
            out.append(b"\x00")
            return
        if isinstance(value, str):
            data = value.encode("utf-8")
        elif isinstance(value, bytes | bytearray | memoryview):
            data = bytes(value)
        else:
            raise ProtocolError(f"CompactString: expected str, got {type(value).__name__}")
        if len(data) > 32767:
            raise ProtocolError(f"CompactString: {len(data)} bytes is over the int16 limit")
        out.append(encode_unsigned_varint(len(data) + 1))
        out.append(data)

    def read(self, buf: Any, pos: int) -> tuple[Any, int]:
        n, pos = _compact_length(buf, pos, "CompactString")
        if n < 0:
            if self.nullable:
                return None, pos
            raise ProtocolError("CompactString: null in a non-nullable string")
        end = pos + n
        if end > len(buf):
            raise ProtocolError(f"CompactString: length {n} runs past the buffer")
        try:
            return str(buf[pos:end], "utf-8"), end
        except UnicodeDecodeError as e:
            raise ProtocolError(f"CompactString: not UTF-8: {e}") from None

    def __repr__(self) -> str:
        return "CompactNullableString" if self.nullable else "CompactString"


CompactString = _CompactString(nullable=False)
CompactNullableString = _CompactString(nullable=True)


class _CompactBytes(Type):
    """Unsigned varint of length + 1 (0 = null) + raw bytes; ``view`` as for ``Records``."""

    min_size = 1

    def __init__(self, nullable: bool, view: bool = False, name: str = "CompactBytes") -> None:
        self.nullable = nullable
        self.view = view
        self.name = name
        self.default = None if nullable else b""

    def write(self, out: list[Any], value: Any) -> None:
        if value is None:
            if not self.nullable:
                raise ProtocolError(f"{self.name}: None given for non-nullable bytes")
            out.append(b"\x00")
            return
        if isinstance(value, str) or not hasattr(value, "__len__"):
            raise ProtocolError(f"{self.name}: expected bytes, got {type(value).__name__}")
        if isinstance(value, memoryview) and (value.itemsize != 1 or value.ndim != 1):
            value = value.cast("B") if value.c_contiguous else memoryview(value.tobytes())
        out.append(encode_unsigned_varint(len(value) + 1))
        out.append(value)

    def read(self, buf: Any, pos: int) -> tuple[Any, int]:
        n, pos = _compact_length(buf, pos, self.name)
        if n < 0:
            if self.nullable:
                return None, pos
            raise ProtocolError(f"{self.name}: null in non-nullable bytes")
        end = pos + n
        if end > len(buf):
            raise ProtocolError(f"{self.name}: length {n} runs past the buffer")
        if self.view:
            return memoryview(buf)[pos:end], end
        return bytes(buf[pos:end]), end

    def __repr__(self) -> str:
        return self.name


CompactBytes = _CompactBytes(nullable=False)
CompactNullableBytes = _CompactBytes(nullable=True, name="CompactNullableBytes")
CompactRecords = _CompactBytes(nullable=True, view=True, name="CompactRecords")


# --- composites ----------------------------------------------------------------------------

# (name, type) or (name, type, default): the default is what ``values(...)`` uses for a field
# left out (the type's default otherwise; schemas give Kafka's sentinels such as -1 here).
FieldSpec = tuple[Any, ...]

# Types whose encoding is one fixed-width struct format code: a run of them inside a Struct is
# read and written with a single struct.Struct call (see Struct._compile).
_FIXED_CODES: dict[int, str] = {
    id(Int8): "b",
    id(Int16): "h",
    id(Int32): "i",
    id(Int64): "q",
    id(UInt32): "I",
    # '?' unpacks any non-zero byte as True and packs truthiness as 1/0, as Boolean does.
    id(Boolean): "?",
}


def _as_type(spec: Any, name: str) -> Type:
    """A field's type: a Type, or a sequence of (name, type) pairs meaning an inline Struct."""
    if isinstance(spec, Type):
        return spec
    if isinstance(spec, list | tuple):
        return Struct(_camel(name), spec)
    raise TypeError(f"not a wire type: {spec!r}")


def _camel(name: str) -> str:
    return "".join(p.capitalize() for p in name.split("_")) or "Anon"


class Array(Type):
    """int32 count (-1 = null) + elements. ``Array(T)`` or ``Array(("f", T), ...)``.

    Decoding returns a list (``None`` for a null nullable array; a null count in a non-nullable
    position decodes leniently as ``[]``). Encoding accepts any sized iterable; ``None`` in a
    non-nullable position is written as an empty array.
    """

    min_size = 4
    default: Any = ()

    def __init__(self, *spec: Any, nullable: bool = False, name: str = "item") -> None:
        if len(spec) == 1 and isinstance(spec[0], Type):
            self.item = spec[0]
        else:
            self.item = Struct(_camel(name), list(spec))
        self.nullable = nullable
        if nullable:
            self.default = None
        # Every element takes at least one byte as far as the count check is concerned, so a
        # hostile count of zero-width elements cannot make us loop 2^31 times.
        self._item_min = max(1, self.item.min_size)
        # Arrays of one fixed-width primitive ([]int32 replicas, []int64 offsets) decode and
        # encode with one struct call for the whole run.
        self._code = _FIXED_CODES.get(id(self.item))
        self._by_count: dict[int, struct.Struct] = {}

    def write(self, out: list[Any], value: Any) -> None:
        if value is None:
            if not self.nullable:
                # Kafka treats a null array as empty in non-nullable positions on encode.
                out.append(b"\x00\x00\x00\x00")
                return
            out.append(b"\xff\xff\xff\xff")
            return
        try:
            n = len(value)
        except TypeError:
            raise ProtocolError(f"Array: expected a sequence, got {type(value).__name__}") from None
        if n > 0x7FFFFFFF:
            raise ProtocolError(f"Array: {n} elements is over the int32 limit")
        out.append(_i32.pack(n))
        w = self.item.write
        if self._code is not None and n:
            try:
                out.append(self._run(n).pack(*value))
                return
            except struct.error:
                pass  # the element loop below names the bad value
        for v in value:
            w(out, v)

    def read(self, buf: Any, pos: int) -> tuple[Any, int]:
        if pos + 4 > len(buf):
            raise ProtocolError("Array: truncated count")
        (n,) = _i32.unpack_from(buf, pos)
        pos += 4
        if n < 0:
            if n == -1:
                return (None if self.nullable else []), pos
            raise ProtocolError(f"Array: invalid count {n}")
        # Checked before looping or allocating anything: O(1) rejection of a hostile count.
        if n * self._item_min > len(buf) - pos:
            raise ProtocolError(f"Array: count {n} cannot fit in {len(buf) - pos} bytes")
        if self._code is not None:
            st = self._run(n)
            return list(st.unpack_from(buf, pos)), pos + st.size
        r = self.item.read
        items: list[Any] = []
        append = items.append
        for _ in range(n):
            v, pos = r(buf, pos)
            append(v)
        return items, pos

    def _run(self, n: int) -> struct.Struct:
        # The struct.Struct for n fixed-width items; small counts (replica lists, offsets) are
        # cached so the format is parsed once.
        st = self._by_count.get(n)
        if st is None:
            st = struct.Struct(f">{n}{self._code}")
            if n <= 256:
                self._by_count[n] = st
        return st

    @property
    def struct(self) -> Struct:
        assert isinstance(self.item, Struct)
        return self.item

    def __repr__(self) -> str:
        return f"Array({self.item!r})"


class CompactArray(Array):
    """Unsigned varint of count + 1 (0 = null) + elements: the array of flexible versions.
    Otherwise as :class:`Array` (same leniency for null in a non-nullable position)."""

    min_size = 1

    def write(self, out: list[Any], value: Any) -> None:
        if value is None:
            out.append(b"\x00" if self.nullable else b"\x01")
            return
        try:
            n = len(value)
        except TypeError:
            raise ProtocolError(f"CompactArray: expected a sequence, got {type(value).__name__}") from None
        if n > 0x7FFFFFFE:
            raise ProtocolError(f"CompactArray: {n} elements is over the int32 limit")
        out.append(encode_unsigned_varint(n + 1))
        if self._code is not None and n:
            try:
                out.append(self._run(n).pack(*value))
                return
            except struct.error:
                pass
        w = self.item.write
        for v in value:
            w(out, v)

    def read(self, buf: Any, pos: int) -> tuple[Any, int]:
        n, pos = _compact_length(buf, pos, "CompactArray")
        if n < 0:
            return (None if self.nullable else []), pos
        if n * self._item_min > len(buf) - pos:
            raise ProtocolError(f"CompactArray: count {n} cannot fit in {len(buf) - pos} bytes")
        if self._code is not None:
            st = self._run(n)
            return list(st.unpack_from(buf, pos)), pos + st.size
        r = self.item.read
        items: list[Any] = []
        append = items.append
        for _ in range(n):
            v, pos = r(buf, pos)
            append(v)
        return items, pos

    def __repr__(self) -> str:
        return f"CompactArray({self.item!r})"


class _TaggedSection:
    """The tagged fields of a flexible struct (KIP-482): an unsigned varint count, then per
    field an unsigned varint tag, an unsigned varint size and the field's bytes.

    ``tags`` are (tag, type, default) in ascending tag order. A field equal to its default is
    not written (as Kafka does). Reading: tags must ascend with no repeats; a known tag's value
    must fill exactly its size; an unknown tag is skipped; an absent one takes its default.
    """

    def __init__(self, struct_name: str, tags: Sequence[tuple[int, Type, Any]]) -> None:
        self.name = struct_name
        self.tags = list(tags)
        self.index = {tag: i for i, (tag, _, _) in enumerate(self.tags)}
        self.defaults = tuple(d for _, _, d in self.tags)

    def write(self, out: list[Any], values: tuple[Any, ...]) -> None:
        present = [(tag, t, v) for (tag, t, d), v in zip(self.tags, values, strict=True) if v != d]
        if not present:
            out.append(b"\x00")
            return
        out.append(encode_unsigned_varint(len(present)))
        for tag, t, v in present:
            body: list[Any] = []
            t.write(body, v)
            out.append(encode_unsigned_varint(tag))
            out.append(encode_unsigned_varint(sum(len(b) for b in body)))
            out.extend(body)

    def read(self, buf: Any, pos: int) -> tuple[tuple[Any, ...], int]:
        n, pos = decode_unsigned_varint(buf, pos, 5)
        if not n:
            return self.defaults, pos
        if n * 2 > len(buf) - pos:
            raise ProtocolError(f"{self.name}: {n} tagged fields cannot fit in {len(buf) - pos} bytes")
        values = list(self.defaults)
        last = -1
        for _ in range(n):
            tag, pos = decode_unsigned_varint(buf, pos, 5)
            size, pos = decode_unsigned_varint(buf, pos, 5)
            if tag <= last:
                raise ProtocolError(f"{self.name}: tagged field {tag} after {last} (tags must ascend)")
            last = tag
            end = pos + size
            if end > len(buf):
                raise ProtocolError(f"{self.name}: tagged field {tag} of {size} bytes runs past the buffer")
            i = self.index.get(tag)
            if i is not None:
                v, used = self.tags[i][1].read(memoryview(buf)[:end], pos)
                if used != end:
                    raise ProtocolError(f"{self.name}: tagged field {tag} is {size} bytes, its value {used - pos}")
                values[i] = v
            pos = end
        return tuple(values), pos


_SEQUENCES = (list, tuple)


class Struct(Type):
    """A sequence of named fields. ``values`` is a namedtuple class whose fields default to the
    field's declared default or else the type default, so ``struct.values(a=1)`` builds a value
    and decoding returns instances.

    ``write`` accepts the namedtuple, any tuple in field order, or a dict of field names (missing
    names take their defaults). ``read``/``write`` are compiled per struct when ``values`` is
    set: consecutive fixed-width fields become one ``struct.Struct`` call, the other fields call
    their type directly, and the tuple is built without ``_make``. Behaviour equals the plain
    field-by-field loop (kept as ``_read_fields``/``_write_fields``, also used for error text).

    A ``flexible`` struct (KIP-482) ends with a tagged-field section; ``tagged`` names its known
    fields as ``(tag, name, type)`` or ``(tag, name, type, default)`` (and implies
    ``flexible``). Tagged fields come after the others in ``names`` and in the value.
    """

    def __init__(
        self, name: str, fields: Sequence[FieldSpec], *, tagged: Sequence[tuple[Any, ...]] = (), flexible: bool = False
    ) -> None:
        self.name = name
        self.fields: list[tuple[str, Type]] = []
        self.defaults: list[Any] = []
        for spec in fields:
            if len(spec) not in (2, 3):
                raise TypeError(f"{name}: a field is (name, type) or (name, type, default), not {spec!r}")
            t = _as_type(spec[1], spec[0])
            self.fields.append((spec[0], t))
            self.defaults.append(spec[2] if len(spec) == 3 else t.default)
        #: fields before the tagged section (all of them unless flexible)
        self.n_plain = len(self.fields)
        self.flexible = flexible or bool(tagged)
        self.tagged: _TaggedSection | None = None
        if self.flexible:
            tags: list[tuple[int, Type, Any]] = []
            for spec in sorted(tagged, key=lambda x: x[0]):
                if len(spec) not in (3, 4) or (tags and spec[0] == tags[-1][0]):
                    raise TypeError(f"{name}: a tagged field is (tag, name, type[, default]) with a unique tag, not {spec!r}")
                t = _as_type(spec[2], spec[1])
                default = spec[3] if len(spec) == 4 else t.default
                self.fields.append((spec[1], t))
                self.defaults.append(default)
                tags.append((spec[0], t, default))
            self.tagged = _TaggedSection(name, tags)
        self.names = [f for f, _ in self.fields]
        self.types = [t for _, t in self.fields]
        self.min_size = sum(t.min_size for t in self.types[: self.n_plain]) + (1 if self.flexible else 0)
        self.default = None
        self._name_set = frozenset(self.names)
        # Fields whose value may be given as a dict (a struct) or a list of dicts (an array of
        # structs): ``build`` fits those too.
        # (name, an array?, the struct); the shared () when there are none (most structs: every
        # object here is one more for the garbage collector to walk, for the life of the process)
        nested = [
            (fname, isinstance(t, Array), t.item if isinstance(t, Array) else t)
            for fname, t in self.fields
            if isinstance(t, Struct) or (isinstance(t, Array) and isinstance(t.item, Struct))
        ]
        self._nested_fields: tuple[tuple[str, bool, Any], ...] = tuple(nested) if nested else ()
        self.values = namedtuple(name, self.names, defaults=self.defaults)  # type: ignore[misc]

    # -- building values (the one builder: see the module docstring) --------------------------

    def build(self, **fields: Any) -> Any:
        """A value of this struct from a superset of its fields.

        Names the struct lacks are dropped (``throttle_time_ms`` on a v0 response), names left
        out take their defaults, and a nested struct given as a dict, or an array of structs
        given as dicts, is fitted the same way. Tuples and namedtuples are taken as they are
        (field order of this struct).
        """
        names = self._name_set
        if not names.issuperset(fields):  # (mostly they are all this version's: no copy then)
            fields = {k: v for k, v in fields.items() if k in names}
        for fname, is_array, item in self._nested_fields:
            v = fields.get(fname)
            if not v:
                continue
            if not is_array:
                if type(v) is dict:
                    fields[fname] = item.build(**v)
            elif type(v) in _SEQUENCES:
                for e in v:
                    if type(e) is dict:
                        fields[fname] = [item.build(**x) if type(x) is dict else x for x in v]
                        break
        return self._values(**fields)

    @cache  # noqa: B019 - structs live as long as the process; C-speed lookups on hot paths
    def nested(self, *path: str) -> Struct:
        """The struct reached through ``path`` (a struct field, or an array of structs' items):
        ``ProduceResponse[7].SCHEMA.nested("topics", "partitions")`` is a partition entry.

        Raises:
            KeyError: a name on the path is not a field, or not a struct / array of structs.
        """
        cur: Type = self
        for name in path:
            assert isinstance(cur, Struct)
            t = cur.field(name)
            if isinstance(t, Array):
                t = t.item
            if not isinstance(t, Struct):
                raise KeyError(f"{cur.name}.{name} is not a struct")
            cur = t
        assert isinstance(cur, Struct)
        return cur

    @cache  # noqa: B019 - as nested; emptied when a struct's values class changes
    def row(self, *names: str) -> Callable[..., Any]:
        """A positional builder for hot loops: ``row("a", "b")(1, 2)`` is ``build(a=1, b=2)``
        (names this struct lacks are dropped, fields not named take their defaults) without a
        dict per value; one cached itemgetter per (struct, names). Values are taken as they
        are (no dict fitting)."""
        shape = self._values
        fields = self.names
        missing = [f for f in fields if f not in names]
        pad = tuple(self.defaults[fields.index(f)] for f in missing)
        width = len(names)
        picks = [names.index(f) if f in names else width + missing.index(f) for f in fields]
        new = tuple.__new__
        if len(picks) == 1:
            pick = picks[0]

            def made(*values: Any) -> Any:
                return new(shape, ((values + pad)[pick],))
        else:
            get = itemgetter(*picks)

            def made(*values: Any) -> Any:
                return new(shape, get(values + pad))
        return made

    @property
    def values(self) -> type:
        """The class decoded values are built from (the API class itself for messages)."""
        return self._values

    @values.setter
    def values(self, cls: type) -> None:
        self._values = cls
        Struct.row.cache_clear()  # rows bind the class (values are set while schemas are defined)
        self._compile()

    # -- compiled fast paths ----------------------------------------------------------------

    def _compile(self) -> None:
        # Groups: ("fixed", [field indexes], struct.Struct) or ("type", index, Type).
        groups: list[tuple[str, Any, Any]] = []
        run: list[int] = []

        def close_run() -> None:
            if run:
                fmt = ">" + "".join(_FIXED_CODES[id(self.types[i])] for i in run)
                groups.append(("fixed", list(run), struct.Struct(fmt)))
                run.clear()

        for i, t in enumerate(self.types[: self.n_plain]):
            if id(t) in _FIXED_CODES:
                run.append(i)
            else:
                close_run()
                groups.append(("type", i, t))
        close_run()

        env: dict[str, Any] = {
            "_new": tuple.__new__,
            "_cls": self._values,
            "ProtocolError": ProtocolError,
            "_struct_error": struct.error,
            "_slow_write": self._write_fields,
            "_name": self.name,
            "_tags": self.tagged,
        }
        n = len(self.types)
        f = [f"f{i}" for i in range(n)]
        rd = ["def read(buf, pos):"]
        wr = [
            "def write(out, value):",
            "    if isinstance(value, dict):",
            "        try:",
            "            value = _cls(**value)",
            "        except TypeError as e:",
            "            raise ProtocolError(f'{_name}: {e}') from None",
            "    mark = len(out)",
            "    try:",
        ]
        if n:
            wr.append(f"        {', '.join(f)}, = value")
        else:
            wr.append("        () = value")
        for g, (kind, idx, obj) in enumerate(groups):
            if kind == "fixed":
                env[f"_u{g}"] = obj.unpack_from
                env[f"_p{g}"] = obj.pack
                names = ", ".join(f[i] for i in idx)
                rd += [
                    f"    end = pos + {obj.size}",
                    "    if end > len(buf):",
                    f"        raise ProtocolError(f'{{_name}}: need {obj.size} bytes at {{pos}}, have {{len(buf) - pos}}')",
                    f"    {names}, = _u{g}(buf, pos)",
                    "    pos = end",
                ]
                wr.append(f"        out.append(_p{g}({names}))")
            else:
                # Looked up per call (one attribute load), not bound now: a nested struct
                # may be recompiled later, and the old plain loop also resolved t.read late.
                env[f"_t{g}"] = obj
                rd.append(f"    {f[idx]}, pos = _t{g}.read(buf, pos)")
                wr.append(f"        _t{g}.write(out, {f[idx]})")
        plain = "".join(x + ", " for x in f[: self.n_plain])
        if self.tagged is not None:
            tagged = "".join(x + ", " for x in f[self.n_plain :])
            rd.append("    tv, pos = _tags.read(buf, pos)")
            rd.append(f"    return _new(_cls, ({plain}) + tv), pos")
            wr.append(f"        _tags.write(out, ({tagged}))")
        else:
            rd.append(f"    return _new(_cls, ({plain})), pos")
        wr += [
            "    except (_struct_error, ValueError, TypeError):",
            "        # Redo the plain loop: it raises a ProtocolError naming the field.",
            "        del out[mark:]",
            "        _slow_write(out, value)",
        ]
        exec(compile("\n".join(rd) + "\n\n" + "\n".join(wr) + "\n", f"<Struct {self.name}>", "exec"), env)  # noqa: S102
        self.read = env["read"]  # type: ignore[method-assign]
        self.write = env["write"]  # type: ignore[method-assign]

    # -- the plain (reference) implementations ---------------------------------------------

    def _write_fields(self, out: list[Any], value: Any) -> None:
        if isinstance(value, dict):
            try:
                value = self._values(**value)
            except TypeError as e:
                raise ProtocolError(f"{self.name}: {e}") from None
        try:
            pairs = list(zip(self.names, self.types, value, strict=True))
        except (ValueError, TypeError) as e:
            raise ProtocolError(f"{self.name}: expected {len(self.types)} fields: {e}") from None
        for fname, t, v in pairs[: self.n_plain]:
            try:
                t.write(out, v)
            except ProtocolError as e:
                raise ProtocolError(f"{self.name}.{fname}: {e}") from None
            except (ValueError, TypeError) as e:
                raise ProtocolError(f"{self.name}.{fname}: cannot encode {v!r}: {e}") from None
        if self.tagged is not None:
            try:
                self.tagged.write(out, tuple(v for _, _, v in pairs[self.n_plain :]))
            except (ValueError, TypeError) as e:
                raise ProtocolError(f"{self.name}: cannot encode a tagged field: {e}") from None

    def _read_fields(self, buf: Any, pos: int) -> tuple[Any, int]:
        vals: list[Any] = []
        append = vals.append
        for t in self.types[: self.n_plain]:
            v, pos = t.read(buf, pos)
            append(v)
        if self.tagged is not None:
            tv, pos = self.tagged.read(buf, pos)
            vals.extend(tv)
        return self._values._make(vals), pos  # type: ignore[attr-defined]

    def write(self, out: list[Any], value: Any) -> None:  # replaced per instance by _compile
        self._write_fields(out, value)

    def read(self, buf: Any, pos: int) -> tuple[Any, int]:  # replaced per instance by _compile
        return self._read_fields(buf, pos)

    def field(self, name: str) -> Type:
        """The type of field ``name``. Raises KeyError if the struct has no such field."""
        for fname, t in self.fields:
            if fname == name:
                return t
        raise KeyError(name)

    def decode(self, buf: Any, pos: int = 0, *, exact: bool = True) -> Any:
        """Decode one value from ``buf`` at ``pos``.

        Args:
            buf: bytes, bytearray or memoryview. ``Records`` fields come back as memoryviews of it.
            pos: where the value starts.
            exact: if true, bytes left after the value are an error.

        Returns:
            The decoded value (an instance of ``values``).

        Raises:
            ProtocolError: whatever the bytes; nothing else leaves this function.
        """
        try:
            value, end = self.read(buf, pos)
        except ProtocolError:
            raise
        except (struct.error, IndexError, UnicodeDecodeError, ValueError, OverflowError, TypeError) as e:
            raise ProtocolError(f"{self.name}: malformed: {e}") from None
        if exact and end != len(buf):
            raise ProtocolError(f"{self.name}: {len(buf) - end} trailing bytes")
        return value

    def __repr__(self) -> str:
        return f"Struct({self.name})"


# --- flexible versions ------------------------------------------------------------------------

_COMPACT: dict[int, Type] = {
    id(String): CompactString,
    id(NullableString): CompactNullableString,
    id(Bytes): CompactBytes,
    id(NullableBytes): CompactNullableBytes,
    id(Records): CompactRecords,
}


def _compact_type(t: Type) -> Type:
    if id(t) in _COMPACT:
        return _COMPACT[id(t)]
    if isinstance(t, CompactArray) or isinstance(t, _CompactString | _CompactBytes):
        return t
    if isinstance(t, Array):
        item = _compact_type(t.item)
        return CompactArray(item, nullable=t.nullable)
    if isinstance(t, Struct):
        if t.flexible:
            return t
        return flexible_struct(t)
    return t


def flexible_struct(st: Struct, tagged: Sequence[tuple[Any, ...]] = ()) -> Struct:
    """``st`` in its flexible form: compact strings, bytes and arrays, nested structs flexible
    too, a tagged-field section (with ``tagged`` fields, see :class:`Struct`)."""
    return Struct(st.name, flexible(list(zip(st.names[: st.n_plain], st.types, st.defaults, strict=False))), tagged=tagged, flexible=True)


def flexible(fields: Sequence[FieldSpec]) -> list[FieldSpec]:
    """A version's field list in its flexible (KIP-482) form, for ``Struct(..., flexible=True)``
    or ``define(..., flexible=True)``: each string, bytes, record set and array becomes its
    compact type, each nested struct gains its tagged-field section. Fixed-width fields and
    defaults stay. Tagged fields are added by the caller (``tagged=``)."""
    out: list[FieldSpec] = []
    for spec in fields:
        t = _as_type(spec[1], spec[0])
        out.append((spec[0], _compact_type(t), *spec[2:]))
    return out
