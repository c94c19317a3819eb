"""A TCP server that replays the recorded HMB broker (tests/data/hmb/hmb-wire.json).

It answers the way HMB did on the wire, byte for byte, except for the two fields a replay must
adapt: the correlation id of correctly framed answers (echoed from the request, as HMB does)
and the broker port in Metadata answers (our ephemeral port instead of 4343).

* Metadata (3): the recorded Metadata v0 answer (one broker, topic "test" with partition 0).
* Produce (2 -> 0): the recorded acknowledgement ("partition 0, error 0, offset 0"); a message
  with a non-null key gets no answer at all, as HMB gave none.
* Fetch (1): the first Fetch on a connection gets the recorded 500-message answer (size 0 and
  correlation id 0 in the frame header) once ``flushed`` (500 messages were produced or the
  server was built with ``flushed=True``), else the recorded empty answer; a second Fetch on
  the same connection gets nothing, as recorded.
* Any other API key: recorded in ``violations`` and never answered (HMB's handler would die).
"""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path
from typing import Any

from .loopback import LoopbackServer

# tests/data/hmb/README.md describes the recording: which broker, which cases, the JSON fields.
CAPTURES = Path(__file__).resolve().parents[1] / "data" / "hmb" / "hmb-wire.json"


def load_cases() -> dict[str, dict[str, Any]]:
    if not CAPTURES.exists():
        raise AssertionError(f"HMB wire captures not found at {CAPTURES}")
    return {c["case"]: c for c in json.loads(CAPTURES.read_text())}


def _has_key(message_set: bytes) -> bool:
    """Whether any v0 message in a message set carries a non-null key."""
    pos = 0
    while pos + 12 <= len(message_set):
        (size,) = struct.unpack_from(">i", message_set, pos + 8)
        # offset(8) size(4) crc(4) magic(1) attributes(1) key_length(4)
        (klen,) = struct.unpack_from(">i", message_set, pos + 18)
        if klen != -1:
            return True
        pos += 12 + size
    return False


def _produce_has_key(body: bytes) -> bool:
    # Produce v0 body: acks int16, timeout int32, [topic [partition message_set]]
    pos = 6
    (nt,) = struct.unpack_from(">i", body, pos)
    pos += 4
    for _ in range(nt):
        (sl,) = struct.unpack_from(">h", body, pos)
        pos += 2 + sl
        (np_,) = struct.unpack_from(">i", body, pos)
        pos += 4
        for _ in range(np_):
            (ml,) = struct.unpack_from(">i", body, pos + 4)
            if _has_key(body[pos + 8 : pos + 8 + ml]):
                return True
            pos += 8 + ml
    return False


class HmbReplayServer(LoopbackServer):
    def __init__(self, *, flushed: bool = True) -> None:
        self.cases = load_cases()
        self.flushed = flushed
        self.produced = 0
        self.seen: list[int] = []
        self.violations: list[int] = []
        self.fetches = 0
        super().__init__()

    def _answer(self, case: str, cid: int) -> bytes:
        raw = bytearray(bytes.fromhex(self.cases[case]["response_hex"]))
        struct.pack_into(">i", raw, 4, cid)
        return bytes(raw)

    def _metadata(self, cid: int) -> bytes:
        raw = bytearray(self._answer("metadata_v0_all_topics", cid))
        # size(4) cid(4) brokers count(4) node_id(4) host(int16 + bytes) port(int32)
        (hl,) = struct.unpack_from(">h", raw, 16)
        struct.pack_into(">i", raw, 18 + hl, self.port)
        return bytes(raw)

    def handle(self, c: socket.socket) -> None:
        buf = b""
        fetches_here = 0
        try:
            while True:
                data = c.recv(65536)
                if not data:
                    return
                buf += data
                while len(buf) >= 4:
                    (n,) = struct.unpack_from(">i", buf)
                    if len(buf) < 4 + n:
                        break
                    frame, buf = buf[4 : 4 + n], buf[4 + n :]
                    key, version, cid = struct.unpack_from(">hhi", frame)
                    (clen,) = struct.unpack_from(">h", frame, 8)
                    body = frame[10 + max(clen, 0) :]
                    self.seen.append(key)
                    if key not in (0, 1, 3) or version != 0:
                        self.violations.append(key)
                        continue  # HMB never answers these (and its handler dies)
                    if key == 3:
                        c.sendall(self._metadata(cid))
                    elif key == 0:
                        if _produce_has_key(body):
                            continue  # recorded: no reply at all
                        self.produced += 1
                        c.sendall(self._answer("produce_v0_null_key", cid))
                    else:
                        fetches_here += 1
                        self.fetches += 1
                        if fetches_here > 1:
                            continue  # recorded: a second Fetch on a connection is not answered
                        case = "fetch_v0_after_flush" if self.flushed else "fetch_v0_before_flush"
                        c.sendall(bytes.fromhex(self.cases[case]["response_hex"]))
        except OSError:
            return
