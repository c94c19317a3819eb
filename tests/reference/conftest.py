"""Apache Kafka itself as the reference (issue 22): real Kafka brokers and Kafka's Java clients
from the jars ``make peers`` fetched (peers/*/pom.xml), side by side with hmbclient and our broker.

Fixtures: ``kafka4`` is one Kafka 4.x node (KRaft) shared by this package's tests, with PLAINTEXT,
SASL_SSL (PLAIN, SCRAM-SHA-256/512; user alice) and SSL listeners. Missing jars fail loudly
(``ApacheKafkaNotFoundError``: run ``make peers``), never a skip.

Helpers (java_read_all, the Java consumer every test checks against) are in ``helpers.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hmbclient.testing import ApacheKafka


@pytest.fixture(scope="package")  # stopped when tests/reference is done, not at session end
def kafka4() -> Iterator[ApacheKafka]:
    with ApacheKafka(listeners=("PLAINTEXT", "SASL_SSL", "SSL"), sasl={"alice": "alice-secret"}) as kafka:
        yield kafka
