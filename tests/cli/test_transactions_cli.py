"""``hmb transactions --list/--describe`` and ``hmbclient.admin.list_transactions`` /
``describe_transactions`` against the embedded broker (ListTransactions and DescribeTransactions
are flexible-only requests: header v2 on the wire): an open transaction of a confluent-kafka
producer is listed Ongoing with its partitions, a committed one CompleteCommit, an unknown id is
TRANSACTIONAL_ID_NOT_FOUND (exit 1 with the error named).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hmbclient.admin import describe_transactions, list_transactions
from hmbclient.broker import EmbeddedBroker
from hmbclient.errors import BrokerError, ErrorCode

HMB = [sys.executable, "-m", "hmbclient.cli"]

pytestmark = pytest.mark.timeout(120)


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HMB, *args], capture_output=True, text=True, timeout=timeout, env=dict(os.environ, PYTHONUNBUFFERED="1"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("txn-cli")), num_partitions=2) as b:
        yield b


def _producer(bootstrap: str, tid: str) -> Any:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, "transaction.timeout.ms": 60_000})
    p.init_transactions(30)
    return p


def test_list_and_describe(broker: EmbeddedBroker) -> None:
    topic = f"txn-cli-{uuid.uuid4().hex[:6]}"
    done, open_ = f"done-{topic}", f"open-{topic}"
    p = _producer(broker.bootstrap, done)
    p.begin_transaction()
    p.produce(topic, b"v", partition=0)
    p.commit_transaction(30)
    q = _producer(broker.bootstrap, open_)
    q.begin_transaction()
    q.produce(topic, b"w", partition=1)
    q.flush(30)

    listed = {tid: state for tid, _pid, state in list_transactions(broker.bootstrap)}
    assert listed[done] == "CompleteCommit" and listed[open_] == "Ongoing"
    (info,) = describe_transactions(broker.bootstrap, [open_])
    assert info.state == "Ongoing" and info.partitions == ((topic, 1),) and info.producer_epoch == 0 and info.timeout_ms == 60_000
    with pytest.raises(BrokerError) as e:
        describe_transactions(broker.bootstrap, ["never-seen"])
    assert e.value.errno == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

    out = run("transactions", "--list", "-b", broker.bootstrap)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split()[2] for line in out.stdout.splitlines()[1:]}
    assert rows[done] == "CompleteCommit" and rows[open_] == "Ongoing"
    out = run("transactions", "--describe", open_, "-b", broker.bootstrap)
    assert out.returncode == 0, out.stderr
    assert f"{topic}-1" in out.stdout and "Ongoing" in out.stdout
    out = run("transactions", "--describe", "never-seen", "-b", broker.bootstrap)
    assert out.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in out.stderr, (out.stdout, out.stderr)
    q.abort_transaction(30)
