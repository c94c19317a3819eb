"""InitProducerId (api key 22) v0-1: producer ids for idempotent producers.

Why the broker serves it: kafka-python 3 (and other clients) enable idempotence by default
against any broker that looks >= 0.11, and treat a missing InitProducerId as fatal. The codec
schemas live in ``protocol.api.admin`` with the other APIs. Transactional ids are refused:
there is no transaction coordinator. The partitions' logs de-duplicate what the producers send
(``log.producer_state``).

Uniqueness (invariant: no id is handed out twice, across the brokers of a cluster and across
restarts; ids are never derived from a clock). A broker takes *blocks* of
:data:`BLOCK_SIZE` ids and hands them out one by one; a block is recorded durably before any id
of it is used, so a crash can waste the rest of a block but never reissue an id. Where the
blocks come from:

- ZooKeeper (``zookeeper.connect`` set): ``/latest_producer_id_block`` in Kafka's JSON format,
  ``{"version":1,"broker":<id>,"block_start":"<first>","block_end":"<last>"}``; a broker
  reads it, writes the next block conditional on the version it read, and on a conflict
  (another broker won) reads again (bounded tries).
- Standalone: the same JSON in ``<log dir>/producer-id-block``, written to a temporary file,
  fsynced and renamed.
- In memory (:class:`MemoryBlockSource`): a broker built without a store (unit tests of the
  request paths); unique within the process only.

The next block is a pure function of the last one (:func:`next_block`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any, NamedTuple, Protocol

from hmbclient.errors import CoordinationError, ErrorCode, StorageError
from hmbclient.protocol import api

__all__ = [
    "BLOCK_SIZE",
    "FileBlockSource",
    "INIT_PRODUCER_ID",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "MemoryBlockSource",
    "PRODUCER_ID_BLOCK_PATH",
    "ProducerIdBlock",
    "ProducerIdManager",
    "ZkBlockSource",
    "decode_block",
    "encode_block",
    "next_block",
]

log = logging.getLogger("hmbclient.broker.producer_ids")

INIT_PRODUCER_ID = int(api.ApiKey.INIT_PRODUCER_ID)

InitProducerIdRequest = api.InitProducerIdRequest
InitProducerIdResponse = api.InitProducerIdResponse

BLOCK_SIZE = 1000
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
STANDALONE_FILE = "producer-id-block"
_MAX_ID = 2**63 - 1
_ZK_TRIES = 20


class ProducerIdBlock(NamedTuple):
    broker_id: int
    first: int
    last: int


def encode_block(block: ProducerIdBlock) -> bytes:
    """Kafka's ``ProducerIdBlockZNode`` JSON (ids as decimal strings)."""
    body = {"version": 1, "broker": block.broker_id, "block_start": str(block.first), "block_end": str(block.last)}
    return json.dumps(body, separators=(",", ":")).encode()


def decode_block(data: bytes) -> ProducerIdBlock:
    """Parse :func:`encode_block`'s JSON.

    Raises:
        ValueError: not that JSON (we refuse to guess the next free id).
    """
    try:
        obj = json.loads(data)
        block = ProducerIdBlock(int(obj["broker"]), int(obj["block_start"]), int(obj["block_end"]))
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"malformed producer id block {data[:200]!r}: {e}") from None
    if not 0 <= block.first <= block.last:
        raise ValueError(f"malformed producer id block {data[:200]!r}: bad range")
    return block


def next_block(last: ProducerIdBlock | None, broker_id: int, size: int = BLOCK_SIZE) -> ProducerIdBlock:
    """The block after ``last`` (the first block is ``[0, size-1]``).

    Raises:
        CoordinationError: the id space is exhausted.
    """
    first = 0 if last is None else last.last + 1
    if first > _MAX_ID - size:
        raise CoordinationError("producer ids exhausted")
    return ProducerIdBlock(broker_id, first, first + size - 1)


class BlockSource(Protocol):
    def allocate(self, broker_id: int) -> ProducerIdBlock: ...


class MemoryBlockSource:
    """Blocks from a counter in memory: unique within this process only."""

    def __init__(self) -> None:
        self._last: ProducerIdBlock | None = None
        self._lock = threading.Lock()

    def allocate(self, broker_id: int) -> ProducerIdBlock:
        with self._lock:
            self._last = next_block(self._last, broker_id)
            return self._last


class FileBlockSource:
    """Blocks recorded in a file (a standalone broker's log directory)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def allocate(self, broker_id: int) -> ProducerIdBlock:
        """The next block, recorded in the file before it is returned.

        Raises:
            StorageError: the file cannot be read, parsed or written.
        """
        try:
            with open(self.path, "rb") as f:
                last: ProducerIdBlock | None = decode_block(f.read())
        except FileNotFoundError:
            last = None
        except (OSError, ValueError) as e:
            raise StorageError(f"{self.path}: {e}") from e
        block = next_block(last, broker_id)
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(encode_block(block))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            fd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise StorageError(f"cannot record producer id block in {self.path}: {e}") from e
        return block


class ZkBlockSource:
    """Blocks recorded in ZooKeeper at ``/latest_producer_id_block`` (a kazoo client)."""

    def __init__(self, zk: Any) -> None:
        self.zk = zk

    def allocate(self, broker_id: int) -> ProducerIdBlock:
        """The next block, recorded in ZooKeeper before it is returned.

        Raises:
            CoordinationError: ZooKeeper trouble, a malformed znode, or too many conflicts.
        """
        from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

        for _ in range(_ZK_TRIES):
            try:
                try:
                    data, stat = self.zk.get(PRODUCER_ID_BLOCK_PATH)
                except NoNodeError:
                    data, stat = None, None
                try:
                    last = decode_block(data) if data else None
                except ValueError as e:
                    raise CoordinationError(f"{PRODUCER_ID_BLOCK_PATH}: {e}") from e
                block = next_block(last, broker_id)
                if stat is None:
                    self.zk.create(PRODUCER_ID_BLOCK_PATH, encode_block(block))
                else:
                    self.zk.set(PRODUCER_ID_BLOCK_PATH, encode_block(block), version=stat.version)
                return block
            except (BadVersionError, NodeExistsError):
                continue  # another broker took the block we read: read again
            except KazooException as e:
                raise CoordinationError(f"producer id block allocation failed: {e!r}") from e
        raise CoordinationError(f"producer id block allocation lost {_ZK_TRIES} races in a row")


class ProducerIdManager:
    """Hands out producer ids from blocks (see the module docstring).

    Args:
        broker_id: recorded in each block this broker takes.
        source: where blocks come from (None: in memory until :meth:`attach`).
    """

    def __init__(self, broker_id: int = 0, source: BlockSource | None = None) -> None:
        self.broker_id = broker_id
        self._source: BlockSource = source or MemoryBlockSource()
        self._next = 0
        self._last = -1  # the current block is [_next, _last]
        self._lock = threading.Lock()

    def attach(self, source: BlockSource, broker_id: int) -> None:
        """Take blocks from ``source`` from now on (the current block is dropped)."""
        with self._lock:
            self._source = source
            self.broker_id = broker_id
            self._next, self._last = 0, -1

    def next_id(self) -> int:
        """The next unused id.

        Raises:
            CoordinationError: no block could be recorded in ZooKeeper.
            StorageError: no block could be recorded in the log directory.
        """
        with self._lock:
            if self._next > self._last:
                block = self._source.allocate(self.broker_id)
                log.info("broker %d: producer id block [%d, %d]", self.broker_id, block.first, block.last)
                self._next, self._last = block.first, block.last
            pid = self._next
            self._next += 1
            return pid

    def handle_init_producer_id(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        if req.transactional_id is not None:
            log.info("InitProducerId with transactional id %r refused: no transactions", req.transactional_id)
            channel.send(resp_cls(0, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1))
            return
        try:
            pid = self.next_id()
        except (CoordinationError, StorageError) as e:
            log.error("InitProducerId: %s", e)
            channel.send(resp_cls(0, ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1))
            return
        channel.send(resp_cls(0, ErrorCode.NONE, pid, 0))
