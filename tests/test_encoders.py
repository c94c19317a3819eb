"""Encoders/decoders: hypothesis round-trips, None handling, exact JSON bytes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from encoders import (
    Decoder,
    DefaultDecoder,
    DefaultEncoder,
    Encoder,
    JsonDecoder,
    JsonEncoder,
    StringDecoder,
    StringEncoder,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


@given(st.binary())
def test_default_round_trip(data: bytes) -> None:
    assert DefaultDecoder().from_message(DefaultEncoder().to_message(data)) == data


@given(st.binary())
def test_default_copies_buffers_to_bytes(data: bytes) -> None:
    for buf in (bytearray(data), memoryview(data)):
        out = DefaultEncoder().to_message(buf)
        assert type(out) is bytes and out == data
        back = DefaultDecoder().from_message(buf)
        assert type(back) is bytes and back == data


@given(st.text())
def test_string_round_trip_utf8(text: str) -> None:
    enc, dec = StringEncoder(), StringDecoder()
    assert enc.to_message(text) == text.encode("utf-8")
    assert dec.from_message(enc.to_message(text)) == text


@given(st.text(alphabet=st.characters(max_codepoint=255)))
def test_string_round_trip_latin1(text: str) -> None:
    enc, dec = StringEncoder("latin-1"), StringDecoder("latin-1")
    assert enc.to_message(text) == text.encode("latin-1")
    assert dec.from_message(enc.to_message(text)) == text


@given(json_values.filter(lambda v: v is not None))
def test_json_round_trip(value: Any) -> None:
    for enc in (JsonEncoder(), JsonEncoder(sort_keys=True)):
        assert JsonDecoder().from_message(enc.to_message(value)) == value


@given(st.dictionaries(st.text(), st.integers()))
def test_json_sort_keys_is_canonical(d: dict[str, int]) -> None:
    reordered = dict(reversed(list(d.items())))
    enc = JsonEncoder(sort_keys=True)
    assert enc.to_message(d) == enc.to_message(reordered)


def test_json_is_compact_utf8() -> None:
    assert JsonEncoder().to_message({"b": [1, 2], "a": "é"}) == '{"b":[1,2],"a":"é"}'.encode()
    assert JsonEncoder(sort_keys=True).to_message({"b": 1, "a": 2}) == b'{"a":2,"b":1}'
    assert JsonEncoder(default=str).to_message({"s": {1}}) == b'{"s":"{1}"}'


def test_none_is_kafka_null_everywhere() -> None:
    for enc in (DefaultEncoder(), StringEncoder(), JsonEncoder()):
        assert enc.to_message(None) is None
    for dec in (DefaultDecoder(), StringDecoder(), JsonDecoder()):
        assert dec.from_message(None) is None


def test_type_and_value_errors() -> None:
    with pytest.raises(TypeError, match="StringEncoder"):
        DefaultEncoder().to_message("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        StringEncoder().to_message(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        JsonEncoder().to_message({"s": {1}})
    with pytest.raises(ValueError):
        JsonEncoder().to_message(float("nan"))
    with pytest.raises(ValueError):
        StringDecoder().from_message(b"\xff\xfe\xfa")
    with pytest.raises(json.JSONDecodeError):
        JsonDecoder().from_message(b"{not json")
    with pytest.raises(ValueError, match="unknown text encoding"):
        StringEncoder("no-such-codec")


def test_protocols_are_satisfied() -> None:
    for enc in (DefaultEncoder(), StringEncoder(), JsonEncoder()):
        assert isinstance(enc, Encoder)
    for dec in (DefaultDecoder(), StringDecoder(), JsonDecoder()):
        assert isinstance(dec, Decoder)
