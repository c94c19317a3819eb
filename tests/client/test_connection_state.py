"""A broker connection's state machine, driven through a real NetClient and broker: the states it
passes through, CLOSED for good after close, and illegal moves refused. The transition table
(``_TRANSITIONS``) and ``_enter`` are private to hmbclient.net.connection and tested here on
purpose: they are the state machine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hmbclient.broker import EmbeddedBroker
from hmbclient.errors import KafkaConnectionError
from hmbclient.net import NetClient
from hmbclient.net.connection import _TRANSITIONS, ConnState

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("states"))) as b:
        yield b


def test_every_state_has_its_transitions_and_closed_is_final() -> None:
    assert set(_TRANSITIONS) == set(ConnState)
    assert _TRANSITIONS[ConnState.CLOSED] == frozenset()
    for state, targets in _TRANSITIONS.items():
        if state is not ConnState.CLOSED:
            assert ConnState.CLOSED in targets


def test_ready_then_closed_for_good(embedded: EmbeddedBroker) -> None:
    client = NetClient(embedded.bootstrap)
    node = client.bootstrap_ids[0]
    client.versions(node).result(10)
    assert client.is_ready(node)
    conn = client._conns[node]  # NetClient does not hand out its connections; the state machine is the subject
    client.close()
    assert conn.state is ConnState.CLOSED and conn.closed and conn.sock is None
    with pytest.raises(KafkaConnectionError):
        client.versions(node).result(5)
    with pytest.raises(AssertionError, match="closed -> connecting"):
        conn._enter(ConnState.CONNECTING)
