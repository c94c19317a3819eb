"""A partition log takes transaction markers (the producer state's Case F): a marker has no
sequence, an older epoch's marker is refused, a producer's sequences go on across its
transactions, the abort of a fenced producer (a marker of a newer epoch) starts that epoch at
sequence 0, and all of it survives a restart (snapshot) and a rebuild without one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hmbclient.broker.log.config import LogConfig
from hmbclient.broker.log.log import Log
from hmbclient.broker.log.producer_state import (
    BatchHeader,
    ProducerStateEntry,
    Verdict,
    apply_batch,
    check_batch,
    producer_batches,
)
from hmbclient.errors import BrokerError, ErrorCode
from hmbclient.protocol.records import NONE, decode_records
from hmbclient.protocol.records.control import (
    ControlType,
    EndTxnMarker,
    encode_control_batch,
    encode_transactional_batch,
)

TS = 1_700_000_000_000
COMMIT, ABORT = EndTxnMarker(ControlType.COMMIT, 0), EndTxnMarker(ControlType.ABORT, 0)


def txn(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    return encode_transactional_batch(NONE, [(None, v, TS) for v in values], pid, epoch, seq, timestamp_ms=TS)


def marker(pid: int, epoch: int, m: EndTxnMarker) -> bytes:
    return encode_control_batch(pid, epoch, m, timestamp_ms=TS)


def test_case_f_pure() -> None:
    entry = ProducerStateEntry(7, 3, (), TS)
    m = BatchHeader(7, 3, -1, -1, 10, 10, TS, True, True)
    assert check_batch(entry, m).verdict is Verdict.APPEND
    assert check_batch(entry, m._replace(producer_epoch=2)).error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert check_batch(entry, m._replace(producer_epoch=4)).verdict is Verdict.APPEND
    assert check_batch(None, m).verdict is Verdict.APPEND  # a producer this partition never saw
    data = BatchHeader(7, 3, 0, 1, 0, 1, TS, True)
    after = apply_batch(apply_batch(None, data), m)
    assert after.epoch == 3 and after.last_seq == 1  # sequences go on
    assert apply_batch(after, m._replace(producer_epoch=4)).batches == ()  # a new epoch starts empty
    (h,) = producer_batches(marker(7, 3, COMMIT))
    assert h.is_control and h.is_transactional and h.base_sequence == -1


def test_the_log_takes_markers_and_keeps_sequences(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=400))
    lg.append(txn(5, 0, 0, b"a", b"b"))
    lg.append(marker(5, 0, COMMIT), origin="coordinator")
    lg.append(txn(5, 0, 2, b"c"))  # the next transaction goes on from sequence 2
    with pytest.raises(BrokerError) as e:
        lg.append(txn(5, 0, 0, b"again"))
    assert e.value.errno == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    lg.append(marker(5, 1, ABORT), origin="coordinator")  # the coordinator fenced epoch 0: its abort carries epoch 1
    with pytest.raises(BrokerError) as e:
        lg.append(marker(5, 0, COMMIT), origin="coordinator")  # the zombie's late marker
    assert e.value.errno == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(BrokerError) as e:
        lg.append(txn(5, 0, 3, b"zombie"))
    assert e.value.errno == ErrorCode.INVALID_PRODUCER_EPOCH
    lg.append(txn(5, 1, 0, b"d"))  # the new producer starts at 0
    assert [r.value for r in decode_records(lg.read(0, 1 << 20)[0].read())] == [b"a", b"b", b"c", b"d"]
    end = lg.log_end_offset
    lg.close()
    again = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=400))
    assert again.log_end_offset == end
    again.append(txn(5, 1, 1, b"e"))
    with pytest.raises(BrokerError) as e:
        again.append(txn(5, 1, 5, b"gap"))
    assert e.value.errno == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    again.close()
    # without snapshots the state is rebuilt from the batches, markers included
    for name in os.listdir(tmp_path / "t-0"):
        if name.endswith(".snapshot"):
            os.remove(tmp_path / "t-0" / name)
    rebuilt = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=400))
    entry = rebuilt.producer_state.producers[5]
    assert (entry.epoch, entry.last_seq) == (1, 1)
    rebuilt.close()
