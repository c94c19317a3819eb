"""A broker that answered the ApiVersions probe once is never taken for a 0.8 broker later: a
probe lost to a network fault (here FaultProxy closing the link on every ApiVersions answer,
as a partition or a restarting broker would) makes the attempt fail and retry, and once the
fault heals the producer writes with its modern versions again. Before the fix the connection
fell back to the legacy versions for good ("speaks Produce up to v0")."""

from __future__ import annotations

import pytest

from hmbclient import Producer, ProducerData
from hmbclient.broker import EmbeddedBroker
from hmbclient.errors import HmbError
from hmbclient.protocol.api.base import ApiKey
from hmbclient.testing import FaultProxy, drop_when


def test_a_lost_probe_after_a_good_one_is_a_fault_not_a_downgrade(tmp_path) -> None:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path)) as b, FaultProxy(("127.0.0.1", b.port)) as proxy:
        p = Producer(metadata_broker_list=proxy.bootstrap, request_required_acks=1, message_send_max_retries=0,
                     request_timeout_ms=3_000)
        try:
            p.produce("probe-fault", b"before")
            assert p.flush(10) == 0
            proxy.set_rule(drop_when(lambda a: a.api_key == ApiKey.API_VERSIONS))
            proxy.cut()
            for i in range(3):  # every reconnect loses its probe answer: the sends fail, retriably
                with pytest.raises(HmbError) as err:
                    p.send(ProducerData("probe-fault", None, b"during-%d" % i))
                assert "up to v0" not in str(err.value)
            proxy.set_rule(None)
            p.produce("probe-fault", b"after")
            assert p.flush(15) == 0
            versions = p._client.versions(p._client.known_nodes()[0]).result(10)
            assert versions.probed and versions.version(ApiKey.PRODUCE) >= 3
        finally:
            p.close()
