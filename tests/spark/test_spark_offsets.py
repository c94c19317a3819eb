"""Pure planning parts of spark_integration: OffsetRange, JSON offsets, options, read limits.

No Spark session, no broker: these run in milliseconds.
"""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hmbclient.errors import ConfigError
from spark_integration.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    limit_ends,
    offsets_from_dict,
    offsets_to_dict,
    offsets_to_json,
    parse_offset_spec,
    parse_offsets_json,
    plan_ranges,
    resolve_offsets,
)
from spark_integration.options import parse_options
from spark_integration.rdd import parse_kafka_params


def test_offset_range_fields_count_and_pickle() -> None:
    r = OffsetRange("events", 3, 10, 25)
    assert (r.topic, r.partition, r.from_offset, r.until_offset) == ("events", 3, 10, 25)
    assert r.count == 15
    assert r.topic_partition == ("events", 3)
    assert pickle.loads(pickle.dumps(r)) == r
    assert str(r) == "events-3 [10, 25)"
    assert OffsetRange("t", 0, 5, 5).count == 0


@pytest.mark.parametrize(
    "args",
    [("", 0, 0, 1), ("t", -1, 0, 1), ("t", 0, -1, 1), ("t", 0, 5, 4), ("t", 0, True, 4), ("t", 0, 1.0, 4)],
)
def test_offset_range_rejects_bad_values(args: tuple) -> None:
    with pytest.raises(ValueError):
        OffsetRange(*args)


def test_offsets_json_roundtrip_is_canonical() -> None:
    offsets = {("b", 10): 5, ("a", 2): 7, ("b", 2): 0, ("a", 0): 1}
    text = offsets_to_json(offsets)
    assert text == '{"a":{"0":1,"2":7},"b":{"2":0,"10":5}}'
    assert parse_offsets_json(text) == offsets
    assert offsets_from_dict(offsets_to_dict(offsets)) == offsets
    assert list(offsets_to_dict(offsets)["b"]) == ["2", "10"]


@given(
    st.dictionaries(
        st.tuples(st.text(min_size=1, max_size=5), st.integers(0, 1000)),
        st.integers(0, 2**62),
        max_size=20,
    )
)
def test_offsets_json_roundtrip_property(offsets: dict) -> None:
    assert parse_offsets_json(offsets_to_json(offsets)) == offsets
    # Canonical: the same map built in another order serializes identically.
    assert offsets_to_json(dict(reversed(list(offsets.items())))) == offsets_to_json(offsets)


@pytest.mark.parametrize(
    "text",
    ["[1]", '{"t": 5}', '{"t": {"x": 1}}', '{"t": {"0": -3}}', '{"t": {"0": "5"}}',
     '{"t": {"0": 1.5}}', '{"t": {"-1": 1}}', "{not json", '{"": {"0": 1}}'],
)
def test_offsets_json_rejects_bad_input(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_offsets_json(text)


def test_checkpoint_offsets_reject_sentinels() -> None:
    with pytest.raises(ConfigError):
        offsets_from_dict({"t": {"0": -1}})


def test_offset_spec_keywords_and_json() -> None:
    assert parse_offset_spec(None, option="x", default="latest").kind == "latest"
    assert parse_offset_spec(" Earliest ", option="x", default="latest").kind == "earliest"
    spec = parse_offset_spec('{"t": {"0": -2, "1": 7}}', option="x", default="latest")
    assert spec.kind == "specific" and spec.offsets == {("t", 0): EARLIEST, ("t", 1): 7}
    with pytest.raises(ConfigError, match="startingOffsets"):
        parse_offset_spec("newest", option="startingOffsets", default="latest")


def test_resolve_offsets_and_plan() -> None:
    parts = [("t", 0), ("t", 1), ("t", 2)]
    earliest = {("t", 0): 0, ("t", 1): 5, ("t", 2): 0}
    latest = {("t", 0): 10, ("t", 1): 20, ("t", 2): 3}
    spec = parse_offset_spec('{"t": {"0": 4, "1": -2}}', option="s", default="earliest")
    starts = resolve_offsets(spec, parts, earliest, latest, option="s", default="earliest")
    assert starts == {("t", 0): 4, ("t", 1): 5, ("t", 2): 0}
    end_spec = parse_offset_spec('{"t": {"0": 8, "2": -1}}', option="e", default="latest")
    ends = resolve_offsets(end_spec, parts, earliest, latest, option="e", default="latest")
    assert ends == {("t", 0): 8, ("t", 1): 20, ("t", 2): 3}
    assert plan_ranges(starts, ends) == [
        OffsetRange("t", 0, 4, 8), OffsetRange("t", 1, 5, 20), OffsetRange("t", 2, 0, 3)
    ]
    with pytest.raises(ConfigError, match="before starting offset"):
        plan_ranges({("t", 0): 5}, {("t", 0): 4})


def test_resolve_offsets_rejects_unknown_partitions_and_unavailable_offsets() -> None:
    parts = [("t", 0)]
    e, lt = {("t", 0): 5}, {("t", 0): 10}
    with pytest.raises(ConfigError, match="t-7"):
        resolve_offsets(parse_offset_spec('{"t": {"7": 1}}', option="s", default="earliest"),
                        parts, e, lt, option="s", default="earliest")
    with pytest.raises(ConfigError, match=r"outside the available range \[5, 10\]"):
        resolve_offsets(parse_offset_spec('{"t": {"0": 11}}', option="s", default="earliest"),
                        parts, e, lt, option="s", default="earliest")
    assert resolve_offsets(parse_offset_spec("latest", option="s", default="earliest"),
                           parts, e, lt, option="s", default="earliest") == {("t", 0): 10}
    assert LATEST == -1


def test_limit_ends_shares_budget_exactly() -> None:
    starts = {("t", 0): 0, ("t", 1): 100, ("t", 2): 7}
    latest = {("t", 0): 1000, ("t", 1): 400, ("t", 2): 7}
    ends = limit_ends(starts, latest, 100)
    assert sum(ends[tp] - starts[tp] for tp in starts) == 100
    assert ends[("t", 2)] == 7
    assert ends[("t", 0)] - 0 > ends[("t", 1)] - 100  # proportional to backlog
    assert limit_ends(starts, latest, None) == latest
    assert limit_ends(starts, latest, 10_000) == latest


@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)), min_size=1, max_size=12),
    st.integers(1, 5_000),
)
def test_limit_ends_property(pairs: list, budget: int) -> None:
    starts = {("t", i): s for i, (s, _) in enumerate(pairs)}
    latest = {("t", i): s + b for i, (s, b) in enumerate(pairs)}
    ends = limit_ends(starts, latest, budget)
    total = sum(latest[tp] - starts[tp] for tp in starts)
    assert sum(ends[tp] - starts[tp] for tp in starts) == min(budget, total)
    assert all(starts[tp] <= ends[tp] <= latest[tp] for tp in starts)
    assert limit_ends(starts, latest, budget) == ends  # deterministic


def test_limit_ends_never_moves_backwards() -> None:
    # latest below the position (a truncated or recreated topic): no progress, no rewind.
    assert limit_ends({("t", 0): 50}, {("t", 0): 10}, 5) == {("t", 0): 50}


@pytest.mark.parametrize("bad", ["a", "a:x", "a:0", ":9"])
def test_broker_lists_use_the_one_parser(bad: str) -> None:
    # hmbclient.config.parse_broker_list: the bad entry is named, in both option sets.
    with pytest.raises(ConfigError, match=repr(bad)):
        parse_options({"metadata.broker.list": f"h:1,{bad}", "topic": "t"}, streaming=False)
    with pytest.raises(ConfigError, match=repr(bad)):
        parse_kafka_params({"metadata.broker.list": f"h:1,{bad}"})
    for empty in ("", " , "):
        with pytest.raises(ConfigError, match="metadata.broker.list"):
            parse_options({"metadata.broker.list": empty, "topic": "t"}, streaming=False)
        with pytest.raises(ConfigError, match="metadata.broker.list"):
            parse_kafka_params({"metadata.broker.list": empty})
    opts = parse_options({"bootstrap.servers": "a:1, [::1]:9092", "topic": "t"}, streaming=False)
    assert opts.metadata_broker_list == (("a", 1), ("::1", 9092))


def test_source_options_batch_and_stream() -> None:
    opts = parse_options(
        {"metadata.broker.list": "h:1", "TOPICS": "a, b", "startingOffsets": '{"a": {"0": 3}}'},
        streaming=False,
    )
    assert opts.topic_names == ("a", "b") and opts.metadata_broker_list == (("h", 1),)
    assert opts.starting_offsets is not None and opts.starting_offsets.kind == "specific"
    assert opts.ending_offsets is None  # the reader's default (latest) applies
    assert opts.matches("a") and not opts.matches("c")
    s = parse_options(
        {"metadata.broker.list": "h:1", "topicPattern": r"ev\..*", "maxOffsetsPerTrigger": "50",
         "zookeeper.connect": "z:2181", "group.id": "g"},
        streaming=True,
    )
    assert s.starting_offsets is None and s.max_offsets_per_trigger == 50
    assert s.topic_names is None
    assert s.matches("ev.x") and not s.matches("xev.x")


def test_source_options_as_spark_passes_them() -> None:
    # Spark lower-cases option names and passes every value as a string.
    from pyspark.sql.datasource import CaseInsensitiveDict

    given = CaseInsensitiveDict(
        {"metadata.broker.list": "h:1", "topic": "t", "startingOffsets": "earliest",
         "fetch.message.max.bytes": "4096", "socket.timeout.ms": "500", "api.version": "0.10",
         "refresh.leader.backoff.ms": "50", "maxOffsetsPerTrigger": "7", "group.id": "",
         "zookeeper.connect": ""}
    )
    assert "startingoffsets" in given.data
    opts = parse_options(given, streaming=True)
    assert (opts.fetch_message_max_bytes, opts.socket_timeout_ms, opts.api_version) == (
        4096, 500, "0.10"
    )
    assert opts.max_offsets_per_trigger == 7 and opts.group_id is None  # "" = not given
    settings = opts.read_settings()
    assert (settings.brokers, settings.retry_backoff_ms, settings.client_id) == (
        (("h", 1),), 50, "hmb-spark"
    )
    assert pickle.loads(pickle.dumps(settings)) == settings
    # The config machinery's round trip: rendered as properties, parsed back equal.
    assert parse_options(opts.to_properties(), streaming=True) == opts


@pytest.mark.parametrize(
    ("options", "streaming", "match"),
    [
        ({"topic": "t"}, False, "metadata.broker.list"),
        ({"metadata.broker.list": "h:1"}, False, "exactly one"),
        ({"metadata.broker.list": "h:1", "topic": "t", "topics": "a"}, False, "exactly one"),
        ({"metadata.broker.list": "h:1", "topics": " , "}, False, "no topic names"),
        ({"metadata.broker.list": "h:1", "topic": "a/b"}, False, "illegal topic name 'a/b'"),
        ({"metadata.broker.list": "h:1", "topic": "t", "bogus": "1"}, False, "bogus"),
        ({"metadata.broker.list": "h:1", "topic": "t", "startingOfsets": "latest"}, False,
         "did you mean"),
        ({"metadata.broker.list": "h:1", "topic": "t", "endingOffsets": "latest"}, True, "batch"),
        ({"metadata.broker.list": "h:1", "topic": "t", "maxOffsetsPerTrigger": "5"}, False,
         "streaming"),
        ({"metadata.broker.list": "h:1", "topic": "t", "maxOffsetsPerTrigger": "0"}, True,
         "maxOffsetsPerTrigger"),
        ({"metadata.broker.list": "h:1", "topic": "t", "maxOffsetsPerTrigger": "many"}, True,
         "maxOffsetsPerTrigger"),
        ({"metadata.broker.list": "h:1", "topic": "t", "api.version": "0.9"}, False, "api.version"),
        ({"metadata.broker.list": "h:1", "topic": "t", "startingOffsets": "newest"}, False,
         "startingOffsets"),
        ({"metadata.broker.list": "h:1", "topicPattern": "("}, True, "regex"),
        ({"metadata.broker.list": "h:1", "topic": "t", "zookeeper.connect": "127.0.0.1:2181"}, True,
         "needs group.id"),
        ({"metadata.broker.list": "h:1", "topic": "t", "group.id": "a/b",
          "zookeeper.connect": "z:1"}, True, "group.id"),
        ({"metadata.broker.list": "h:1", "topic": "t", "endingOffsets": "earliest"}, False,
         "reads nothing"),
        ({"metadata.broker.list": "h:1", "topic": "t", "endingOffsets": '{"t": {"0": -2}}'},
         False, "-2"),
        ({"metadata.broker.list": "h:1", "topic": "t", "path": "/x"}, False, "no path"),
    ],
)
def test_source_options_errors(options: dict, streaming: bool, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        parse_options(options, streaming=streaming)
    assert str(err.value).startswith("format 'hmb'")


def test_kafka_params() -> None:
    p = parse_kafka_params({"metadata.broker.list": "h:1", "fetch.message.max.bytes": "4096"})
    assert p.read_settings().brokers == (("h", 1),)
    assert p.read_settings().fetch_message_max_bytes == 4096
    assert p.auto_offset_reset == "largest"
    with pytest.raises(ConfigError, match="nope"):
        parse_kafka_params({"metadata.broker.list": "h:1", "nope": 1})
    with pytest.raises(ConfigError, match="metadata.broker.list"):
        parse_kafka_params({})
    with pytest.raises(ConfigError, match="auto.offset.reset"):
        parse_kafka_params({"metadata.broker.list": "h:1", "auto.offset.reset": "first"})
    with pytest.raises(ConfigError, match="refresh.leader.backoff.ms"):
        parse_kafka_params({"metadata.broker.list": "h:1", "refresh.leader.backoff.ms": 0})
    assert parse_kafka_params(
        {"metadata.broker.list": "h:1", "auto.offset.reset": "earliest"}
    ).auto_offset_reset == "smallest"
    # Any spelling, as for every other hmbclient config.
    assert parse_kafka_params({"bootstrap_servers": "h:1", "group_id": "g"}).group_id == "g"
