"""ListOffsets: earliest/latest watermarks and offsets by timestamp."""

import struct

import pytest
from confluent_kafka import OFFSET_END, TopicPartition
from confluent_kafka.admin import OffsetSpec

from helpers import _consumer, admin, create_topic, kp_consumer, produce, watermarks
from rawkafka import Conn, Reader, encode_uvarint as _uvarint

T0 = 1_650_000_000_000
TIMEOUT = 30


def _timestamped(topic_name, broker, stamps, batch_each=False):
    # The timestamps are years old: without retention.ms=-1 a retention check that happens to
    # run between the produce and the lookups (on Kafka too) deletes the records.
    create_topic(broker.bootstrap, topic_name, partitions=1, config={"retention.ms": -1})
    recs = [{"value": b"v%d" % i, "timestamp": ts} for i, ts in enumerate(stamps)]
    if batch_each:
        for r in recs:
            produce(broker.bootstrap, topic_name, [r])
    else:
        produce(broker.bootstrap, topic_name, recs)


def test_watermarks_of_empty_topic_are_zero_and_high_watermark_advances_on_produce(
        broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    assert watermarks(broker.bootstrap, topic_name, 0) == (0, 0)
    produce(broker.bootstrap, topic_name, [{"value": b"x", "partition": 0}] * 10)
    produce(broker.bootstrap, topic_name, [{"value": b"y", "partition": 1}] * 3)
    assert watermarks(broker.bootstrap, topic_name, 0) == (0, 10)
    assert watermarks(broker.bootstrap, topic_name, 1) == (0, 3)


def test_admin_list_offsets_earliest_latest_and_max_timestamp(broker, topic_name):
    stamps = [T0 + 5000, T0 + 1000, T0 + 9000, T0 + 3000]
    _timestamped(topic_name, broker, stamps)
    a = admin(broker.bootstrap)
    tp = TopicPartition(topic_name, 0)
    res = {}
    for name, spec in (("earliest", OffsetSpec.earliest()), ("latest", OffsetSpec.latest()),
                       ("max", OffsetSpec.max_timestamp())):
        fs = a.list_offsets({tp: spec}, request_timeout=TIMEOUT)
        res[name] = fs[tp].result(timeout=TIMEOUT)
    assert res["earliest"].offset == 0
    assert res["latest"].offset == 4
    assert res["max"].offset == 2
    assert res["max"].timestamp == T0 + 9000


def test_kafka_python_beginning_and_end_offsets(broker, topic_name):
    from kafka import TopicPartition as KTP
    create_topic(broker.bootstrap, topic_name, partitions=2)
    produce(broker.bootstrap, topic_name, [{"value": b"a", "partition": 1}] * 7)
    c = kp_consumer(broker.bootstrap)
    try:
        tps = [KTP(topic_name, 0), KTP(topic_name, 1)]
        assert c.beginning_offsets(tps) == {tps[0]: 0, tps[1]: 0}
        assert c.end_offsets(tps) == {tps[0]: 0, tps[1]: 7}
    finally:
        c.close()


@pytest.mark.parametrize("batch_each", [False, True], ids=["one-batch", "batch-per-record"])
def test_offsets_for_times_returns_first_offset_with_timestamp_at_or_after_target(
        broker, topic_name, batch_each):
    stamps = [T0 + 1000 * i for i in range(10)]
    _timestamped(topic_name, broker, stamps, batch_each)
    c = _consumer(broker.bootstrap)
    try:
        def lookup(ts):
            (r,) = c.offsets_for_times([TopicPartition(topic_name, 0, ts)], timeout=TIMEOUT)
            assert r.error is None
            return r.offset
        assert lookup(T0 - 100_000) == 0
        assert lookup(T0) == 0
        assert lookup(T0 + 1) == 1
        assert lookup(T0 + 1500) == 2
        assert lookup(T0 + 9000) == 9
        # No record at or after the target: offset -1 (librdkafka's OFFSET_END).
        assert lookup(T0 + 9001) == OFFSET_END
    finally:
        c.close()


def test_offsets_for_times_with_out_of_order_timestamps_returns_earliest_matching_offset(
        broker, topic_name):
    # Kafka returns the *first offset* whose timestamp is >= target, even when a later
    # record has a timestamp closer to the target.
    stamps = [T0 + 5000, T0 + 1000, T0 + 3000, T0 + 8000, T0 + 2000]
    _timestamped(topic_name, broker, stamps, batch_each=True)
    c = _consumer(broker.bootstrap)
    try:
        def lookup(ts):
            (r,) = c.offsets_for_times([TopicPartition(topic_name, 0, ts)], timeout=TIMEOUT)
            return r.offset
        assert lookup(T0 + 2000) == 0
        assert lookup(T0 + 6000) == 3
        assert lookup(T0 + 500) == 0
        assert lookup(T0 + 8001) == OFFSET_END
    finally:
        c.close()


def test_kafka_python_offsets_for_times(broker, topic_name):
    from kafka import TopicPartition as KTP
    stamps = [T0 + 1000 * i for i in range(5)]
    _timestamped(topic_name, broker, stamps)
    c = kp_consumer(broker.bootstrap)
    try:
        tp = KTP(topic_name, 0)
        r = c.offsets_for_times({tp: T0 + 2500})[tp]
        assert (r.offset, r.timestamp) == (3, T0 + 3000)
        r = c.offsets_for_times({tp: 0})[tp]
        assert (r.offset, r.timestamp) == (0, T0)
        assert c.offsets_for_times({tp: T0 + 10_000})[tp] is None
    finally:
        c.close()


def test_offsets_for_times_on_empty_partition_finds_nothing(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    c = _consumer(broker.bootstrap)
    try:
        (r,) = c.offsets_for_times([TopicPartition(topic_name, 0, T0)], timeout=TIMEOUT)
        assert r.offset == OFFSET_END
    finally:
        c.close()


def _list_offsets_raw(bootstrap: str, topic: str, version: int, timestamp: int):
    """One partition of a raw flexible ListOffsets (v6+) -> (error, timestamp, offset, epoch)."""
    name = topic.encode()
    body = struct.pack(">ib", -1, 0)  # replica_id (consumer), isolation_level
    body += _uvarint(2) + _uvarint(len(name) + 1) + name  # one topic
    body += _uvarint(2) + struct.pack(">iiq", 0, -1, timestamp) + b"\x00"  # one partition
    body += b"\x00"  # topic tagged fields
    if version >= 10:
        body += struct.pack(">i", 30_000)  # timeout_ms
    body += b"\x00"
    with Conn(bootstrap, timeout=30) as conn:
        r = Reader(conn.request_flexible(2, version, body))
    r.int32()  # throttle
    assert r.uvarint() - 1 == 1
    assert r.compact_string() == topic
    assert r.uvarint() - 1 == 1
    assert r.int32() == 0
    return r.int16(), r.int64(), r.int64(), r.int32()


def test_special_timestamps_need_their_version_and_tiered_ones_answer_minus_one_untiered(
        broker, topic_name):
    """Each special timestamp needs the ListOffsets version that introduced it (max timestamp
    v7, earliest local v8, latest tiered v9, earliest pending upload v11); an unknown negative
    one is refused with UNSUPPORTED_VERSION (35); on a topic that is not tiered the tiered
    ones answer offset -1 with no epoch. Same answers from Strata and Kafka 4.4."""
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce(broker.bootstrap, topic_name, [{"value": b"v%d" % i} for i in range(5)])
    unsupported = 35
    for ts, first in ((-3, 7), (-4, 8), (-5, 9), (-6, 11)):
        assert _list_offsets_raw(broker.bootstrap, topic_name, first - 1, ts)[0] == unsupported, ts
        err, _, offset, epoch = _list_offsets_raw(broker.bootstrap, topic_name, first, ts)
        assert err == 0, ts
        if ts == -4:
            assert offset == 0
        if ts in (-5, -6):
            assert (offset, epoch) == (-1, -1), ts
    assert _list_offsets_raw(broker.bootstrap, topic_name, 11, -7)[0] == unsupported
    err, _, offset, epoch = _list_offsets_raw(broker.bootstrap, topic_name, 11, -2)
    assert (err, offset, epoch) == (0, 0, 0)
