"""api_version="hmb" against a replay of the real HMB broker, and against our embedded broker.

The replay server (hmb_replay.py) answers from tests/data/hmb/hmb-wire.json and records
every API key it receives: anything but Produce/Fetch/Metadata v0 is a violation (on the real
HMB it kills the request handler).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hmbclient import FetchRequest, Producer, ProducerData, SimpleConsumer
from hmbclient.broker import EmbeddedBroker
from hmbclient.errors import UnknownTopicOrPartitionError, UnsupportedByBroker
from hmbclient.net import Metadata, NetClient

from .conftest import read_partition, unique
from .hmb_replay import HmbReplayServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def hmb() -> Iterator[HmbReplayServer]:
    with HmbReplayServer() as s:
        yield s
        assert s.violations == [], f"sent APIs HMB cannot take: {s.violations}"
        assert 18 not in s.seen


def test_metadata_one_broker_one_partition(hmb: HmbReplayServer) -> None:
    with NetClient(hmb.bootstrap, api_version="hmb") as c:
        md = Metadata(c)
        view = md.refresh(["test"])
        assert dict(view.brokers) == {0: ("127.0.0.1", hmb.port)}
        assert list(view.topics["test"].partitions) == [0]
        assert view.leader("test", 0) == 0
        with pytest.raises(UnknownTopicOrPartitionError):
            md.partitions_for("nosuch", timeout_ms=300)
    assert set(hmb.seen) == {3}


@pytest.mark.parametrize("ptype", ["sync", "async"])
@pytest.mark.parametrize("acks", [1, 0])
def test_produce_acknowledged_without_an_offset(hmb: HmbReplayServer, ptype: str, acks: int) -> None:
    with Producer(metadata_broker_list=hmb.bootstrap, api_version="hmb", producer_type=ptype, request_required_acks=acks) as p:
        futs = p.send(ProducerData("test", None, [b"alpha", b"beta", b"gamma"]))
        p.flush()
        assert [f.result(10) for f in futs] == [("test", 0, None)] * 3
        # HMB cannot take a keyed message (it never answers): refused before anything is sent.
        before = list(hmb.seen)
        with pytest.raises(UnsupportedByBroker, match="HMB.*key"):
            p.send(ProducerData("test", b"k", [b"v"]))
        assert hmb.seen == before
    assert hmb.produced >= 1


def test_fetch_500_messages_with_the_quirky_frame(hmb: HmbReplayServer) -> None:
    with SimpleConsumer(hmb.host, hmb.port, api_version="hmb") as c:
        ms = c.fetch(FetchRequest("test", 0, 0, 1 << 20))
        recs = list(ms)
    assert [r.offset for r in recs] == list(range(500))
    assert [r.value for r in recs] == [b"m%03d" % i for i in range(500)]
    assert all(r.key is None for r in recs)
    assert hmb.fetches == 1


def test_max_bytes_is_honoured_locally_without_refetching(hmb: HmbReplayServer) -> None:
    values: list[bytes] = []
    with SimpleConsumer(hmb.host, hmb.port, api_version="hmb") as c:
        offset = 0
        for _ in range(2000):
            ms = c.fetch(FetchRequest("test", 0, offset, 100))
            assert ms.size_in_bytes <= 100
            recs = list(ms)
            if not recs:
                break
            values += [r.value for r in recs]
            offset = recs[-1].next_offset
            if offset == 500:
                break
    assert values == [b"m%03d" % i for i in range(500)]
    assert hmb.fetches == 1  # every later call was served from what HMB already sent


def test_fetch_before_flush_is_empty() -> None:
    with HmbReplayServer(flushed=False) as s, SimpleConsumer(s.host, s.port, api_version="hmb") as c:
        assert list(c.fetch(FetchRequest("test", 0, 0, 1 << 20))) == []
        # HMB answers one Fetch per connection; the client reconnects for the next one.
        assert list(c.fetch(FetchRequest("test", 0, 0, 1 << 20))) == []
        assert s.fetches == 2 and s.violations == []


def test_other_apis_fail_locally(hmb: HmbReplayServer) -> None:
    with SimpleConsumer(hmb.host, hmb.port, api_version="hmb") as c:
        with pytest.raises(UnsupportedByBroker, match="HMB does not support ListOffsets"):
            c.get_offsets_before("test", 0, -1, 1)
    with NetClient(hmb.bootstrap, api_version="hmb") as nc:
        v = nc.versions(-1).result(5)
        for api in (8, 9, 10, 18, 2):
            with pytest.raises(UnsupportedByBroker, match="HMB"):
                v.version(api)
    assert hmb.seen == []


def test_same_client_code_against_the_embedded_broker(tmp_path: object) -> None:
    """The stricter embedded broker keeps the dialect honest: everything above works there."""
    with EmbeddedBroker(port=0, log_dir=str(tmp_path)) as b:
        topic = unique("hmbdialect")
        with Producer(metadata_broker_list=b.bootstrap, api_version="hmb", producer_type="async") as p:
            futs = p.send(ProducerData(topic, None, [b"m%03d" % i for i in range(50)]))
            p.flush()
            assert all(f.result(10) == (topic, 0, None) for f in futs)
        with SimpleConsumer(b.host, b.port, api_version="hmb") as c:
            offset, got = 0, []
            while True:
                recs = list(c.fetch(FetchRequest(topic, 0, offset, 100)))
                if not recs:
                    break
                got += [r.value for r in recs]
                offset = recs[-1].next_offset
            assert got == [b"m%03d" % i for i in range(50)]
        assert [r.value for r in read_partition(b.host, b.port, topic, 0)] == got
