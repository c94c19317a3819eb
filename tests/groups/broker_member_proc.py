"""A member of a broker-coordinated group in its own process, for kill -9 tests (not a test module).

    python broker_member_proc.py BOOTSTRAP GROUP TOPIC [key=value ...] [delay=SECONDS]

``key=value`` pairs are consumer properties; ``delay`` slows consumption down (a pause after
each message), so a test can kill the member in the middle of its share. Prints ``READY
<consumer_id> <partitions>`` once it owns its share (partitions comma-separated), then one line
per message handed out, ``M <partition> <offset> <value>``, flushed at once -- so whatever the
parent has read was really handed out before the process died.
"""

from __future__ import annotations

import sys
import time

from hmbclient.consumer.connector import Consumer
from hmbclient.errors import ConsumerTimeoutError


def main() -> None:
    bootstrap, group, topic, *rest = sys.argv[1:]
    props = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "broker"}
    pairs = dict(kv.split("=", 1) for kv in rest)
    delay = float(pairs.pop("delay", "0"))
    props.update(pairs)
    connector = Consumer.create(props)
    stream = connector.create_message_streams({topic: 1})[topic][0]
    connector.await_rebalance(60)
    owned = ",".join(str(p) for _, p in sorted(connector.owned_partitions()))
    out = sys.stdout
    out.write(f"READY {connector.consumer_id} {owned}\n")
    out.flush()
    while True:
        try:
            for m in stream:
                out.write(f"M {m.partition} {m.offset} {m.message.decode()}\n")
                out.flush()
                if delay:
                    time.sleep(delay)  # the pace is the point: a kill lands mid-share
        except ConsumerTimeoutError:
            continue


if __name__ == "__main__":
    main()
