"""The transaction coordinator served by an embedded broker, over the wire with hand-built
requests: FindCoordinator with key_type 1, InitProducerId with a transactional id (epoch
bumps, bad input, the idempotent path untouched), ``__transaction_state`` as an internal topic,
and the state surviving a restart and a kill -9 (loaded back from ``__transaction_state``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hmbclient.broker import EmbeddedBroker
from hmbclient.broker.process import BrokerProcess
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api import FindCoordinatorRequest, InitProducerIdRequest, MetadataRequest

from .conftest import RawClient, wait_until

E = ErrorCode
RETRIABLE = (E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR, E.CONCURRENT_TRANSACTIONS)


def find(c: RawClient, tid: str, version: int = 2) -> Any:
    return c.request(FindCoordinatorRequest[version].build(key=tid, key_type=1))


def init(c: RawClient, tid: str | None, timeout_ms: int = 60_000, version: int = 1) -> Any:
    """InitProducerId, retried while the coordinator loads (as a client does)."""
    out: list[Any] = []

    def once() -> bool:
        r = c.request(InitProducerIdRequest[version](transactional_id=tid, transaction_timeout_ms=timeout_ms))
        out.append(r)
        return r.error_code not in RETRIABLE

    wait_until(once, 20.0, f"InitProducerId({tid!r}) past the coordinator's loading", diag=lambda: out[-1:])
    return out[-1]


def test_find_coordinator_and_init_producer_id(tmp_path: Path) -> None:
    with EmbeddedBroker(log_dir=str(tmp_path), num_partitions=1) as b, RawClient(b.host, b.port) as c:
        r = wait_until(lambda: (x := find(c, "tx-1")).error_code == 0 and x, 20.0, "FindCoordinator(key_type 1)")
        assert (r.node_id, r.host, r.port) == (b.config.broker_id, b.host, b.port)
        assert find(c, "tx-1", version=1).node_id == b.config.broker_id
        assert find(c, "").error_code == E.INVALID_REQUEST

        first = init(c, "tx-1")
        assert first.error_code == 0 and first.producer_epoch == 0 and first.producer_id >= 0
        again = init(c, "tx-1")
        assert (again.error_code, again.producer_id, again.producer_epoch) == (0, first.producer_id, 1)
        other = init(c, "tx-2")
        assert other.error_code == 0 and other.producer_id != first.producer_id and other.producer_epoch == 0

        assert init(c, "tx-1", timeout_ms=0).error_code == E.INVALID_TRANSACTION_TIMEOUT
        assert init(c, "tx-1", timeout_ms=b.config.transaction_max_timeout_ms + 1).error_code == E.INVALID_TRANSACTION_TIMEOUT
        assert init(c, "").error_code == E.INVALID_REQUEST
        plain = init(c, None)  # the idempotent path
        assert plain.error_code == 0 and plain.producer_epoch == 0 and plain.producer_id not in (first.producer_id, other.producer_id)

        md = c.request(MetadataRequest[1](topics=["__transaction_state"]))
        (t,) = md.topics
        assert t.error_code == 0 and t.is_internal and len(t.partitions) == b.config.transaction_state_log_num_partitions

        coordinator = b.broker.transactions
        assert coordinator is not None
        txn = coordinator.metadata_of("tx-1")
        assert txn is not None and (txn.producer_id, txn.producer_epoch, txn.state.label, txn.pending) == (first.producer_id, 1, "Empty", None)


def test_the_epoch_survives_a_restart(tmp_path: Path) -> None:
    with EmbeddedBroker(log_dir=str(tmp_path), num_partitions=1) as b:
        with RawClient(b.host, b.port) as c:
            a0, a1 = init(c, "tx-a"), init(c, "tx-a")
        assert (a0.producer_epoch, a1.producer_epoch) == (0, 1)
        b.stop()
        b.start()
        with RawClient(b.host, b.port) as c:
            a2 = init(c, "tx-a")
        assert (a2.error_code, a2.producer_id, a2.producer_epoch) == (0, a0.producer_id, 2)


def test_the_epoch_survives_kill_9(tmp_path: Path) -> None:
    with BrokerProcess(str(tmp_path), num_partitions=1) as bp:
        with RawClient(bp.host, bp.port) as c:
            a0 = init(c, "tx-k")
            init(c, "tx-k")
        bp.kill()
        bp.start()
        with RawClient(bp.host, bp.port) as c:
            a2 = init(c, "tx-k")
        assert (a2.error_code, a2.producer_id, a2.producer_epoch) == (0, a0.producer_id, 2)


def test_transactional_ids_need_their_own_acls(tmp_path: Path) -> None:
    """Write on the TransactionalId to init its producer, Describe (or Write) to find its
    coordinator; Write on topics or IdempotentWrite on the cluster give neither."""
    from hmbclient.broker.security.authorizer import Acl, FileAclStore
    from hmbclient.broker.security.credentials import FileCredentialStore, make_credential
    from hmbclient.protocol.api import ApiKey
    from hmbclient.protocol.api.base import REQUESTS

    creds = FileCredentialStore(str(tmp_path / "credentials.json"))
    for user in ("owner", "looker", "topicwriter"):
        creds.put(user, {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", f"{user}-pw")})
    acls = FileAclStore(str(tmp_path / "acls.json"))
    acls.add([
        Acl.make("TransactionalId", "app-", "User:owner", "Write", pattern_type="PREFIXED"),
        Acl.make("TransactionalId", "app-1", "User:looker", "Describe"),
        Acl.make("Topic", "*", "User:topicwriter", "Write"),
        Acl.make("Cluster", "kafka-cluster", "User:topicwriter", "IdempotentWrite"),
    ])  # fmt: skip
    with EmbeddedBroker(
        log_dir=str(tmp_path / "logs"),
        listeners=["SASL_PLAINTEXT://127.0.0.1:0"],
        sasl_credentials_file=creds.path,
        authorizer_class_name="kafka.security.authorizer.AclAuthorizer",
        authorizer_acls_file=acls.path,
    ) as b:
        got = {}
        for user in ("owner", "looker", "topicwriter"):
            with RawClient("127.0.0.1", b.port) as c:
                assert c.request(REQUESTS[(ApiKey.SASL_HANDSHAKE, 1)].build(mechanism="PLAIN")).error_code == 0
                assert c.request(REQUESTS[(ApiKey.SASL_AUTHENTICATE, 1)].build(auth_bytes=f"\0{user}\0{user}-pw".encode())).error_code == 0
                found = wait_until(lambda c=c: (r := find(c, "app-1")).error_code not in RETRIABLE and r, 20.0, "FindCoordinator")
                got[user] = (found.error_code, init(c, "app-1").error_code, find(c, "other").error_code)
    fail = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert got == {"owner": (0, 0, fail), "looker": (0, fail, fail), "topicwriter": (fail, fail, fail)}
