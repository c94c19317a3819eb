"""``hmb top``'s renderer (a pure function of two snapshots and the screen size) and its
parsing of the brokers' Prometheus scrapes."""

from __future__ import annotations

from hmbclient.top import GroupRow, PartitionRow, Snapshot, parse_topic_bytes, render


def _snap(at_ms: int, ends: dict[int, int], *, isr1: tuple[int, ...] = (1, 2)) -> Snapshot:
    return Snapshot(
        at_ms, "127.0.0.1:9092", brokers={1: ("127.0.0.1", 9092), 2: ("127.0.0.1", 9093)}, controller=2,
        partitions=[PartitionRow("orders", 0, 1, (1, 2), (1, 2), ends[0]),
                    PartitionRow("orders", 1, 2, (2, 1), isr1, ends[1]),
                    PartitionRow("audit", 0, -1, (1,), (), None)],
        groups=[GroupRow("billing", "broker", "Stable", 2, 40, 2)],
        topic_bytes={"orders": (2048.0, 512.0)},
    )


def test_rates_marks_and_sections() -> None:
    before = _snap(1_000, {0: 100, 1: 50})
    now = _snap(3_000, {0: 300, 1: 250}, isr1=(2,))
    lines = render(now, before, 200, 100, interval_s=2, clock="12:00:00")
    text = "\n".join(lines)
    assert lines[0].startswith("hmb top  127.0.0.1:9092  2 broker(s), controller 2  every 2 s  12:00:00")
    row = next(line.split() for line in lines if line.startswith("orders "))
    # 400 new messages in 2 s; 1 under-replicated; bytes from the scrape; 550 messages in all
    assert row == ["orders", "2", "1", "0", "200.0", "2,048", "512", "550"]
    audit = next(line.split() for line in lines if line.startswith("audit "))
    assert audit == ["audit", "1", "1", "1", "-", "-", "-", "-"]  # offline: no leader, no offsets
    assert "orders-1 !" in text and "orders-0 !" not in text
    assert any(line.split() == ["2*", "127.0.0.1:9093", "1", "2"] for line in lines)
    assert any(line.split() == ["billing", "broker", "Stable", "2", "2", "40"] for line in lines)


def test_first_frame_has_no_rates_and_a_small_screen_cuts_partitions_first() -> None:
    now = _snap(1_000, {0: 1, 1: 2})
    lines = render(now, None, 30, 19, interval_s=1)  # 17 lines before the partitions
    assert len(lines) == 19 and all(len(line) <= 30 for line in lines)
    assert any(line.startswith("GROUPS") for line in lines) and any(line.startswith("billing") for line in lines)
    assert lines[-1].startswith("... ") and lines[-1].endswith(" more")
    row = next(line.split() for line in render(now, None, 200, 100, interval_s=1) if line.startswith("orders "))
    assert row[4] == "-"


def test_errors_are_shown_not_raised() -> None:
    snap = Snapshot(1, "h:1", errors=["metadata: broker gone"])
    lines = render(snap, None, 100, 50, interval_s=1)
    assert lines[-1] == "! metadata: broker gone" and "(no consumer groups)" in lines


def test_parse_topic_bytes_sums_brokers_and_ignores_others() -> None:
    a = ('hmb_kafka_server_BrokerTopicMetrics_BytesInPerSec_rate{broker="0",topic="orders"} 100.5\n'
         'hmb_kafka_server_BrokerTopicMetrics_BytesInPerSec_rate{broker="0"} 999.0\n'
         'hmb_kafka_server_BrokerTopicMetrics_BytesOutPerSec_rate{broker="0",topic="orders"} 7.0\n'
         'hmb_kafka_server_BrokerTopicMetrics_BytesInPerSec_total{broker="0",topic="orders"} 1e9\n')
    b = 'hmb_kafka_server_BrokerTopicMetrics_BytesInPerSec_rate{broker="1",topic="orders"} 0.5\n'
    assert parse_topic_bytes([a, b]) == {"orders": (101.0, 7.0)}
