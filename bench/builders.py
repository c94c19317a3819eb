"""Micro-benchmark of building and decoding the hot messages at the versions in use.

    .venv/bin/python bench/builders.py [--n 20000]

Client side: a 10-partition Produce request (v7, one topic) built with ``versions.build`` and
encoded; a 10-partition Fetch request (v10) built from field dicts (the fetcher) and from
positional rows (SimpleConsumer), encoded. Broker side: the 10-partition Produce and Fetch
responses built row by row (the positional row builder of the response's partition struct) and
encoded; decoding of the Produce request and of the Fetch response. Prints microseconds per
message (best of 5 timeit repeats). Not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import os
import sys
import timeit
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]

from hmbclient.net.versions import DIALECTS  # noqa: E402
from hmbclient.protocol.api.base import REQUESTS, ApiKey  # noqa: E402

PARTS = 10
RECORDS = b"\x00" * 16 + b"\x02" + b"\x00" * 83


def cases() -> dict[str, Any]:
    versions = DIALECTS["2.1"].initial_versions()
    assert versions is not None
    produce = versions.request_class(ApiKey.PRODUCE)
    fetch = versions.request_class(ApiKey.FETCH)

    def produce_request() -> bytes:
        req = versions.build(ApiKey.PRODUCE, transactional_id=None, acks=1, timeout_ms=30_000,
                             topics=[("events", [(p, RECORDS) for p in range(PARTS)])])
        return req.encode()

    def fetch_request_dicts() -> bytes:
        asks = [{"partition": p, "fetch_offset": 1000, "log_start_offset": -1, "current_leader_epoch": -1,
                 "partition_max_bytes": 1 << 20} for p in range(PARTS)]
        req = versions.build(ApiKey.FETCH, replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=0x7FFFFFFF,
                             isolation_level=0, session_id=0, session_epoch=-1,
                             topics=[{"topic": "events", "partitions": asks}], forgotten_topics_data=[])
        return req.encode()

    def fetch_request_rows() -> bytes:
        row = fetch.nested("topics", "partitions").row(
            "partition", "fetch_offset", "partition_max_bytes", "current_leader_epoch", "log_start_offset"
        )
        plist = [row(p, 1000, 1 << 20, -1, -1) for p in range(PARTS)]
        return versions.build(ApiKey.FETCH, replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20,
                              isolation_level=0, session_id=0, session_epoch=-1,
                              topics=[("events", plist)], forgotten_topics_data=[]).encode()

    produce_resp = produce.RESPONSE_TYPE
    fetch_resp = fetch.RESPONSE_TYPE

    def produce_response() -> bytes:
        row = produce_resp.nested("topics", "partitions").row(
            "partition", "error_code", "base_offset", "log_append_time", "log_start_offset"
        )
        plist = [row(p, 0, 1000 + p, -1, 0) for p in range(PARTS)]
        return produce_resp.build(topics=[("events", plist)], throttle_time_ms=0).encode()

    def fetch_response() -> bytes:
        row = fetch_resp.nested("topics", "partitions").row(
            "partition", "error_code", "high_watermark", "last_stable_offset", "log_start_offset", "aborted_transactions", "records"
        )
        plist = [row(p, 0, 2000, 2000, 0, None, RECORDS) for p in range(PARTS)]
        return fetch_resp.build(throttle_time_ms=0, error_code=0, session_id=0, topics=[("events", plist)]).encode()

    produce_bytes = memoryview(produce_request())
    fetch_resp_bytes = memoryview(fetch_response())
    return {
        "client Produce v7 request build+encode": produce_request,
        "client Fetch v10 request (dicts) build+encode": fetch_request_dicts,
        "client Fetch v10 request (rows) build+encode": fetch_request_rows,
        "broker Produce v7 response build+encode": produce_response,
        "broker Fetch v10 response build+encode": fetch_response,
        "broker Produce v7 request decode": lambda: produce.decode(produce_bytes),
        "client Fetch v10 response decode": lambda: fetch_resp.decode(fetch_resp_bytes),
        "(reference) ApiVersions v0 request build": lambda: REQUESTS[(18, 0)].build(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    args = parser.parse_args()
    for label, fn in cases().items():
        best = min(timeit.repeat(fn, number=args.n, repeat=5)) / args.n
        print(f"{label:<50} {best * 1e6:8.2f} us")
    with open("/proc/loadavg") as f:
        print("load average:", f.read().split()[:3])


if __name__ == "__main__":
    main()
