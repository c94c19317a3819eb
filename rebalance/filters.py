"""Topic filters for wildcard subscriptions: :class:`Whitelist` and :class:`Blacklist`.

Contract (as Kafka 0.8's ``kafka.consumer.TopicFilter``):

* the raw pattern is normalised the Java way -- surrounding whitespace and quotes are
  stripped, ``,`` becomes ``|`` and spaces are removed -- so ``"a, b"`` means ``a|b``;
* a topic is *allowed* when the regular expression matches the **whole** name (Java's
  ``String.matches``); a Blacklist allows every topic the pattern does not match;
* internal topics (``__consumer_offsets``) are never allowed while ``exclude_internal_topics``
  is true, whatever the pattern says;
* ``pattern_name`` is what the consumer registration znode stores in its ``"pattern"`` field
  (``"white_list"`` / ``"black_list"``), and :func:`filter_from_registration` turns such a
  registration back into a filter, so every member of a group evaluates every other member's
  subscription identically.

An invalid regular expression raises :class:`ValueError` at construction, never later inside
the rebalance loop.

Example::

    f = Whitelist(r"events\\..*")
    f.is_topic_allowed("events.clicks")   # True
    Blacklist("audit").is_topic_allowed("audit")   # False
"""

from __future__ import annotations

import re
from typing import ClassVar

__all__ = [
    "TopicFilter",
    "Whitelist",
    "Blacklist",
    "INTERNAL_TOPICS",
    "WHITE_LIST",
    "BLACK_LIST",
    "STATIC",
    "filter_from_registration",
]

#: The ``"pattern"`` values of a consumer registration znode (Java's ``TopicCount``).
STATIC = "static"
WHITE_LIST = "white_list"
BLACK_LIST = "black_list"

#: Topics the brokers keep for themselves.
INTERNAL_TOPICS: frozenset[str] = frozenset({"__consumer_offsets"})


def _normalise(raw: str) -> str:
    # Java: rawRegex.trim.replace(',', '|').replace(" ", "").replaceAll("^[\"']+", "")
    #        .replaceAll("[\"']+$", "")
    regex = raw.strip().replace(",", "|").replace(" ", "")
    return regex.lstrip("\"'").rstrip("\"'")


class TopicFilter:
    """A regular expression over topic names (abstract: use Whitelist or Blacklist).

    Args:
        pattern: a regular expression (Java syntax largely matches Python's ``re``); commas
            mean alternation, as in Kafka.

    Raises:
        ValueError: the pattern is empty or is not a valid regular expression.
    """

    pattern_name: ClassVar[str] = ""

    __slots__ = ("regex", "_compiled")

    def __init__(self, pattern: str) -> None:
        if type(self) is TopicFilter:
            raise TypeError("TopicFilter is abstract: use Whitelist or Blacklist")
        if not isinstance(pattern, str):
            raise ValueError(f"topic filter pattern must be a str, got {type(pattern).__name__}")
        regex = _normalise(pattern)
        if not regex:
            raise ValueError("topic filter pattern is empty")
        try:
            self._compiled = re.compile(regex)
        except re.error as exc:
            raise ValueError(f"{regex!r} is not a valid regular expression: {exc}") from exc
        self.regex = regex

    def _matches(self, topic: str) -> bool:
        return self._compiled.fullmatch(topic) is not None

    def is_topic_allowed(self, topic: str, exclude_internal_topics: bool = True) -> bool:
        """Whether ``topic`` belongs to this subscription.

        Args:
            topic: a topic name.
            exclude_internal_topics: refuse internal topics such as ``__consumer_offsets``.

        Returns:
            True when the topic is allowed.
        """
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopicFilter) and type(other) is type(self) and other.regex == self.regex

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.regex))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.regex!r})"


class Whitelist(TopicFilter):
    """Allow the topics whose whole name matches the pattern."""

    pattern_name: ClassVar[str] = WHITE_LIST
    __slots__ = ()

    def is_topic_allowed(self, topic: str, exclude_internal_topics: bool = True) -> bool:
        if exclude_internal_topics and topic in INTERNAL_TOPICS:
            return False
        return self._matches(topic)


class Blacklist(TopicFilter):
    """Allow every topic whose whole name does not match the pattern."""

    pattern_name: ClassVar[str] = BLACK_LIST
    __slots__ = ()

    def is_topic_allowed(self, topic: str, exclude_internal_topics: bool = True) -> bool:
        if exclude_internal_topics and topic in INTERNAL_TOPICS:
            return False
        return not self._matches(topic)


def filter_from_registration(pattern_name: str, regex: str) -> TopicFilter:
    """The filter another member registered (``"pattern"`` and the subscription's key).

    Args:
        pattern_name: ``"white_list"`` or ``"black_list"``.
        regex: the subscription key, already normalised by the registering member.

    Returns:
        The equivalent Whitelist or Blacklist.

    Raises:
        ValueError: unknown pattern name or invalid regex.
    """
    if pattern_name == WHITE_LIST:
        return Whitelist(regex)
    if pattern_name == BLACK_LIST:
        return Blacklist(regex)
    raise ValueError(f"unknown subscription pattern {pattern_name!r}")
