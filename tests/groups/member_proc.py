"""A group member in its own process, for kill -9 tests (not a test module).

    python member_proc.py ZK_CONNECT GROUP TOPIC [key=value ...] [delay=SECONDS]

``key=value`` pairs are consumer properties; ``delay`` slows consumption down (a pause after
each message), so a test can kill the member in the middle of its share. Prints ``READY <consumer_id>`` once it owns its share, then one line per message handed out,
``M <partition> <offset> <value>``, flushed at once -- so whatever the parent has read was
really handed out before the process died.
"""

from __future__ import annotations

import sys
import time

from hmbclient.consumer.connector import Consumer
from hmbclient.errors import ConsumerTimeoutError


def main() -> None:
    zk, group, topic, *rest = sys.argv[1:]
    props = {"zookeeper.connect": zk, "group.id": group}
    pairs = dict(kv.split("=", 1) for kv in rest)
    delay = float(pairs.pop("delay", "0"))
    props.update(pairs)
    connector = Consumer.create(props)
    stream = connector.create_message_streams({topic: 1})[topic][0]
    connector.await_rebalance(30)
    out = sys.stdout
    out.write(f"READY {connector.consumer_id}\n")
    out.flush()
    while True:
        try:
            for m in stream:
                out.write(f"M {m.partition} {m.offset} {m.message.decode()}\n")
                out.flush()
                if delay:
                    time.sleep(delay)  # deliberately slow, so the parent can kill it mid-share
        except ConsumerTimeoutError:
            continue


if __name__ == "__main__":
    main()
