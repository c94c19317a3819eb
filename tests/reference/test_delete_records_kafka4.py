"""DeleteRecords (issue 27) driven by three real clients -- Kafka's own ``kafka-delete-records.sh``
(``org.apache.kafka.tools.DeleteRecordsCommand``), kafka-python's ``KafkaAdminClient`` and
confluent-kafka's ``AdminClient`` -- against our broker and against Apache Kafka 4.4 (the
package's ``kafka4``): the same script must give the same low watermarks and error codes, and
leave the same earliest offsets behind (ListOffsets earliest, and a fetch below the new start
is OFFSET_OUT_OF_RANGE).

The cases: an offset inside the log, -1 (the high watermark), an offset below the current log
start (nothing moves; the answer is the current low watermark), an offset past the high
watermark and -2 (OFFSET_OUT_OF_RANGE), a partition that does not exist, and a
``cleanup.policy=compact`` topic (POLICY_VIOLATION: Kafka refuses it; ``compact,delete`` is
accepted). hmbclient.admin.delete_records is checked on the same topics: its pre-checks refuse
what the broker would refuse, before anything is deleted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.errors import KafkaError

from hmbclient import SimpleConsumer, admin
from hmbclient.broker import EmbeddedBroker
from hmbclient.errors import BrokerError, ErrorCode, OffsetOutOfRangeError
from hmbclient.testing import ApacheKafka, kafka_java

from .helpers import unique

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def ours() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(group_initial_rebalance_delay_ms=0) as b:
        yield b


def _tool(bootstrap: str, tmp: Path, entries: list[tuple[str, int, int]], labels: dict[str, str]) -> list[str]:
    """kafka-delete-records.sh's per-partition lines: ``T-p low_watermark N`` or ``T-p error
    ExceptionClass``, topics by their ``labels`` (the messages differ between brokers and
    versions, the classes do not)."""
    f = tmp / f"{unique('offsets')}.json"
    f.write_text(json.dumps({"partitions": [{"topic": t, "partition": p, "offset": o} for t, p, o in entries], "version": 1}))
    done = kafka_java("org.apache.kafka.tools.DeleteRecordsCommand", "--bootstrap-server", bootstrap, "--offset-json-file", str(f),
                      timeout_s=90, check=False)
    out = []
    for line in done.stdout.splitlines():
        m = re.match(r"partition: (\S+)\s+(low_watermark: (\d+)|error: ([\w.]+))", line)
        if m:
            name = m.group(1)
            for full, label in labels.items():
                name = name.replace(full, label)
            out.append(f"{name} low_watermark {m.group(3)}" if m.group(3) else f"{name} error {m.group(4).rsplit('.', 1)[-1].rstrip(':')}")
    assert out, f"no partition lines from DeleteRecordsCommand (exit {done.returncode}):\n{done.stdout}\n{done.stderr[-2000:]}"
    return sorted(out)


def _kafka_python(kp: KafkaAdminClient, tp: tuple[str, int], offset: int) -> Any:
    try:
        r = kp.delete_records({KpTopicPartition(*tp): offset}, timeout_ms=10_000)
        return ("low_watermark", r[KpTopicPartition(*tp)]["low_watermark"])
    except KafkaError as e:
        return ("error", getattr(e, "errno", type(e).__name__))


def _confluent(ck: AdminClient, tp: tuple[str, int], offset: int) -> Any:
    futures = ck.delete_records([CkTopicPartition(tp[0], tp[1], offset)], request_timeout=20, operation_timeout=10)
    try:
        return ("low_watermark", next(iter(futures.values())).result(timeout=30).low_watermark)
    except KafkaException as e:
        return ("error", e.args[0].code())


def _earliest(bootstrap: str, topic: str, partition: int) -> tuple[int, bool]:
    """(ListOffsets earliest, whether a fetch one below it is OFFSET_OUT_OF_RANGE)."""
    host, port = bootstrap.rsplit(":", 1)
    c = SimpleConsumer(host, int(port), client_id="delrec-check")
    try:
        start = c.get_offsets_before(topic, partition, -2, 1)[0]
        below_refused = False
        if start > 0:
            from hmbclient import FetchRequest

            try:
                list(c.fetch(FetchRequest(topic, partition, start - 1, 1 << 16)))
            except OffsetOutOfRangeError:
                below_refused = True
        return start, below_refused
    finally:
        c.close()


def _admin_code(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except BrokerError as e:
        return ("error", e.errno)


def script(bootstrap: str, tmp: Path) -> dict[str, Any]:
    topic, compacted, both = unique("delrec"), unique("delrec-compact"), unique("delrec-compact-delete")
    admin.create_topic(bootstrap, topic, 3, 1)
    admin.create_topic(bootstrap, compacted, 1, 1, configs={"cleanup.policy": "compact"})
    admin.create_topic(bootstrap, both, 1, 1, configs={"cleanup.policy": "compact,delete"})
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    for t, parts in ((topic, 3), (compacted, 1), (both, 1)):
        for p in range(parts):
            for i in range(10):
                producer.send(t, key=b"k%d" % (i % 4), value=b"v%d" % i, partition=p)
    producer.flush(30)
    producer.close()
    labels = {both: "CD", compacted: "C", topic: "T"}  # longest first: the names share prefixes
    out: dict[str, Any] = {}
    # Kafka's tool: inside, the high watermark; then below the start, past the HW, -2, unknown
    out["tool"] = _tool(bootstrap, tmp, [(topic, 0, 4), (topic, 1, -1)], labels)
    out["tool refusals"] = _tool(bootstrap, tmp, [(topic, 0, 2), (topic, 1, 11), (topic, 2, -2)], labels)
    out["tool policy"] = _tool(bootstrap, tmp, [(compacted, 0, 3), (both, 0, 3)], labels)
    kp = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    try:
        out["kafka-python"] = [_kafka_python(kp, (topic, 2), 6), _kafka_python(kp, (topic, 2), 50), _kafka_python(kp, (topic, 0), -1)]
    finally:
        kp.close()
    ck = AdminClient({"bootstrap.servers": bootstrap})
    out["confluent"] = [_confluent(ck, (topic, 2), 8), _confluent(ck, (topic, 2), 11), _confluent(ck, (compacted, 0), 1)]
    out["earliest"] = [_earliest(bootstrap, topic, p) for p in range(3)]
    out["hmbclient"] = [
        _admin_code(lambda: sorted((labels[t], p, lw) for (t, p), lw in admin.delete_records(bootstrap, {(both, 0): 5}).items())),
        _admin_code(admin.delete_records, bootstrap, {(compacted, 0): 2}),
    ]
    with pytest.raises(OffsetOutOfRangeError, match="past its high watermark 10: no records deleted"):
        admin.delete_records(bootstrap, {(both, 0): 6, (topic, 1): 99})
    out["after refused input"] = _earliest(bootstrap, both, 0)
    admin.delete_topics(bootstrap, [topic, compacted, both])
    return out


def test_delete_records_same_as_kafka_4(ours: EmbeddedBroker, kafka4: ApacheKafka, tmp_path: Path) -> None:
    theirs = script(kafka4.bootstrap, tmp_path)
    mine = script(ours.bootstrap, tmp_path)
    assert mine == theirs, f"ours:   {mine}\nkafka4: {theirs}"
    # ... and the script saw deletions and refusals, not only one kind
    assert theirs["earliest"] == [(10, True), (10, True), (8, True)]
    assert [line.split(" ", 1)[1] for line in theirs["tool refusals"]] == ["low_watermark 4", "error OffsetOutOfRangeException",
                                                                            "error OffsetOutOfRangeException"]
    assert theirs["confluent"][2] == ("error", ErrorCode.POLICY_VIOLATION)
    assert theirs["after refused input"] == (5, True)
