"""Encoders and decoders for message keys and values.

``Encoder`` (``to_message(obj) -> bytes``) and ``Decoder`` (``from_message(bytes) -> obj``)
are Protocols, as in Kafka 0.8's ``kafka.serializer``. ``None`` always maps to ``None``
(Kafka's null key / tombstone value). Implementations:

- :class:`DefaultEncoder` / :class:`DefaultDecoder` — bytes pass through.
- :class:`StringEncoder` / :class:`StringDecoder` — text, utf-8 unless told otherwise.
- :class:`JsonEncoder` / :class:`JsonDecoder` — compact utf-8 JSON, optional sorted keys.

This package imports nothing from hmbclient.
"""

from encoders.base import Decoder, Encoder
from encoders.builtin import (
    DefaultDecoder,
    DefaultEncoder,
    JsonDecoder,
    JsonEncoder,
    StringDecoder,
    StringEncoder,
)

__all__ = [
    "Encoder",
    "Decoder",
    "DefaultEncoder",
    "DefaultDecoder",
    "StringEncoder",
    "StringDecoder",
    "JsonEncoder",
    "JsonDecoder",
]
