"""Record fields: keys, headers and timestamps survive the broker; the topic's
message.timestamp.type decides between CreateTime and LogAppendTime."""

import time

import pytest

from helpers import (CREATE_TIME, LOG_APPEND_TIME, consume, create_topic, kp_consume,
                     kp_produce, produce)

T0 = 1_600_000_000_123  # 2020-09-13, an explicit producer timestamp in the past
# Records stamped T0 are past the default 7-day retention: a retention check that happens to
# run between the produce and the consume (on Kafka too) would delete them.
KEEP_OLD = {"retention.ms": -1}

HEADERS = [
    ("trace-id", b"abc123"),
    ("dup", b"first"),
    ("dup", b"second"),           # repeated header keys keep their order
    ("empty", b""),
    ("binary", bytes(range(256))),
    ("unicode-\u00e9\u4e2d", "v\u00e9".encode()),
]


def _records():
    return [
        {"key": b"k0", "value": b"v0", "headers": HEADERS, "timestamp": T0},
        {"key": None, "value": b"null-key", "headers": [("only", b"1")], "timestamp": T0 + 1},
        {"key": b"", "value": b"empty-key", "timestamp": T0 + 2},
        {"key": b"tombstone", "value": None, "timestamp": T0 + 3},
        {"key": bytes(range(256)), "value": b"", "headers": [("n", None)], "timestamp": T0 - 5000},
    ]


def _check_fields(want, got):
    assert [r.offset for r in got] == list(range(len(want)))
    for w, r in zip(want, got):
        assert r.key == w["key"]
        assert r.value == w["value"]
        assert r.timestamp == w["timestamp"]
        assert r.timestamp_type == CREATE_TIME
        assert [(k, v) for k, v in r.headers] == list(w.get("headers") or [])


def test_keys_headers_and_create_timestamps_are_preserved_confluent(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1, config=KEEP_OLD)
    recs = _records()
    delivered, _ = produce(broker.bootstrap, topic_name, recs)
    # CreateTime topic: the delivery report carries the producer's timestamp.
    assert [d.timestamp for d in sorted(delivered, key=lambda d: d.offset)] == \
        [r["timestamp"] for r in recs]
    _check_fields(recs, consume(broker.bootstrap, topic_name, len(recs)))
    _check_fields(recs, kp_consume(broker.bootstrap, topic_name, len(recs)))


def test_keys_headers_and_create_timestamps_are_preserved_kafka_python(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1, config=KEEP_OLD)
    # kafka-python wants header values as bytes (no null header values).
    recs = [r for r in _records() if not any(v is None for _, v in r.get("headers") or [])]
    delivered = kp_produce(broker.bootstrap, topic_name, recs)
    assert [d.timestamp for d in delivered] == [r["timestamp"] for r in recs]
    _check_fields(recs, kp_consume(broker.bootstrap, topic_name, len(recs)))
    _check_fields(recs, consume(broker.bootstrap, topic_name, len(recs)))


def test_record_without_explicit_timestamp_gets_producer_wall_clock_create_time(broker,
                                                                               topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    before = int(time.time() * 1000)
    produce(broker.bootstrap, topic_name, [{"value": b"now"}])
    after = int(time.time() * 1000)
    (r,) = consume(broker.bootstrap, topic_name, 1)
    assert r.timestamp_type == CREATE_TIME
    assert before - 1000 <= r.timestamp <= after + 1000


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_log_append_time_topic_overrides_producer_timestamps_with_broker_time(broker, topic_name,
                                                                             client):
    create_topic(broker.bootstrap, topic_name, partitions=1,
                 config={"message.timestamp.type": "LogAppendTime"})
    recs = [{"key": b"k%d" % i, "value": b"v%d" % i, "timestamp": T0 + i} for i in range(5)]
    before = int(time.time() * 1000)
    if client == "confluent":
        delivered, _ = produce(broker.bootstrap, topic_name, recs)
    else:
        delivered = kp_produce(broker.bootstrap, topic_name, recs)
    after = int(time.time() * 1000)

    for got in (consume(broker.bootstrap, topic_name, len(recs)),
                kp_consume(broker.bootstrap, topic_name, len(recs))):
        assert [r.value for r in got] == [r["value"] for r in recs]
        for r in got:
            assert r.timestamp_type == LOG_APPEND_TIME
            assert before - 1000 <= r.timestamp <= after + 1000, (r.timestamp, before, after)

    # The produce response reports the log append time back to the producer.
    for d in delivered:
        assert before - 1000 <= d.timestamp <= after + 1000, (d.timestamp, before, after)


def test_create_time_topic_config_keeps_producer_timestamps(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1,
                 config={"message.timestamp.type": "CreateTime"})
    recs = [{"value": b"v%d" % i, "timestamp": T0 + 1000 * i} for i in range(4)]
    produce(broker.bootstrap, topic_name, recs)
    got = consume(broker.bootstrap, topic_name, len(recs))
    assert [(r.timestamp, r.timestamp_type) for r in got] == \
        [(T0 + 1000 * i, CREATE_TIME) for i in range(4)]


def test_records_keep_per_partition_order_and_partition_assignment(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=3)
    recs = [{"key": b"k%d" % (i % 7), "value": b"%d" % i, "partition": i % 3}
            for i in range(300)]
    delivered, _ = produce(broker.bootstrap, topic_name, recs)
    got = consume(broker.bootstrap, topic_name, len(recs), partitions=(0, 1, 2))
    for p in range(3):
        want = [r["value"] for r in recs if r["partition"] == p]
        have = [r.value for r in got if r.partition == p]
        assert have == want
        assert [r.offset for r in got if r.partition == p] == list(range(len(want)))


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_records_produced_with_each_acks_setting_land_in_the_log(broker, topic_name, acks):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    recs = [{"value": b"acks-%s-%d" % (acks.encode(), i)} for i in range(100)]
    delivered, _ = produce(broker.bootstrap, topic_name, recs, conf={"acks": acks})
    if acks == "0":
        # No produce response: the client cannot know the offsets.
        assert all(d.offset is None or d.offset < 0 for d in delivered)
    else:
        assert sorted(d.offset for d in delivered) == list(range(100))
    got = consume(broker.bootstrap, topic_name, len(recs))
    assert [r.value for r in got] == [r["value"] for r in recs]
