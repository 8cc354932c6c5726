"""Durability: a clean restart keeps topics, configs and every record; after a
kill -9 during acks=all produce (log.flush.interval.messages=1) every acknowledged
record is still there at its acknowledged offset."""

import threading
import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import ConfigResource, NewPartitions, ResourceType

from helpers import (QUIET, admin, consume, create_topic, produce, topic_exists, wait_for_topic,
                     watermarks)

pytestmark = pytest.mark.slow

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def durable_broker(module_broker_factory):
    return module_broker_factory(name="durable")


def _records(n, parts):
    return [{"key": b"key-%d" % i, "value": b"value-%06d-" % i + bytes([i % 256]) * (i % 50),
             "partition": i % parts, "headers": [("i", b"%d" % i)], "timestamp": T0 + i}
            for i in range(n)]


def _assert_same(recs, got, parts):
    for p in range(parts):
        want = [r for r in recs if r["partition"] == p]
        have = [r for r in got if r.partition == p]
        assert [r.offset for r in have] == list(range(len(want)))
        assert [(r.key, r.value, r.headers, r.timestamp) for r in have] == \
            [(w["key"], w["value"], w["headers"], w["timestamp"]) for w in want]


def test_clean_restart_keeps_every_record_with_offsets_keys_headers_and_timestamps(
        durable_broker, topic_name):
    b = durable_broker
    create_topic(b.bootstrap, topic_name, partitions=3)
    recs = _records(900, 3)
    produce(b.bootstrap, topic_name, recs[:300], conf={"compression.type": "none"})
    produce(b.bootstrap, topic_name, recs[300:600], conf={"compression.type": "gzip"})
    produce(b.bootstrap, topic_name, recs[600:], conf={"compression.type": "zstd"})
    marks = [watermarks(b.bootstrap, topic_name, p) for p in range(3)]

    b.restart()

    wait_for_topic(b.bootstrap, topic_name, 3)
    assert [watermarks(b.bootstrap, topic_name, p) for p in range(3)] == marks
    got = consume(b.bootstrap, topic_name, len(recs), partitions=range(3))
    _assert_same(recs, got, 3)

    # Appends continue at the old log end.
    delivered, _ = produce(b.bootstrap, topic_name, [{"value": b"after", "partition": 1}])
    assert [(d.partition, d.offset) for d in delivered] == [(1, 300)]


def test_clean_restart_keeps_topics_partition_counts_configs_and_deletions(durable_broker,
                                                                           topic_name):
    b = durable_broker
    grown, deleted, configured = (f"{topic_name}-grown", f"{topic_name}-deleted",
                                  f"{topic_name}-configured")
    create_topic(b.bootstrap, grown, partitions=1)
    create_topic(b.bootstrap, deleted, partitions=1)
    create_topic(b.bootstrap, configured, partitions=2,
                 config={"retention.ms": "987654321", "message.timestamp.type": "LogAppendTime"})
    a = admin(b.bootstrap)
    a.create_partitions([NewPartitions(grown, 4)])[grown].result(timeout=30)
    wait_for_topic(b.bootstrap, grown, 4)
    a.delete_topics([deleted])[deleted].result(timeout=30)
    deadline = time.monotonic() + 30
    while topic_exists(b.bootstrap, deleted):
        assert time.monotonic() < deadline
        time.sleep(0.2)

    b.restart()

    wait_for_topic(b.bootstrap, grown, 4)
    wait_for_topic(b.bootstrap, configured, 2)
    assert not topic_exists(b.bootstrap, deleted)
    res = ConfigResource(ResourceType.TOPIC, configured)
    cfg = admin(b.bootstrap).describe_configs([res])[res].result(timeout=30)
    assert cfg["retention.ms"].value == "987654321"
    assert cfg["message.timestamp.type"].value == "LogAppendTime"


def test_restart_after_restart_keeps_data_and_empty_topics(durable_broker, topic_name):
    b = durable_broker
    empty = f"{topic_name}-empty"
    create_topic(b.bootstrap, topic_name, partitions=1)
    create_topic(b.bootstrap, empty, partitions=1)
    produce(b.bootstrap, topic_name, [{"value": b"v%d" % i} for i in range(50)])
    b.restart()
    produce(b.bootstrap, topic_name, [{"value": b"v%d" % i} for i in range(50, 100)])
    b.restart()
    assert watermarks(b.bootstrap, topic_name) == (0, 100)
    assert watermarks(b.bootstrap, empty) == (0, 0)
    got = consume(b.bootstrap, topic_name, 100)
    assert [r.value for r in got] == [b"v%d" % i for i in range(100)]


def test_kill9_during_acks_all_produce_loses_no_acknowledged_record(broker_factory, topic_name):
    parts = 3
    b = broker_factory(props={"log.flush.interval.messages": "1"}, name="kill9")
    create_topic(b.bootstrap, topic_name, partitions=parts)

    acked = {}  # (partition, offset) -> value
    failed = []
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 2,
                  "message.timeout.ms": 60000, "retry.backoff.ms": 100,
                  "reconnect.backoff.max.ms": 500, **QUIET})

    def cb(err, msg):
        if err is None:
            assert (msg.partition(), msg.offset()) not in acked
            acked[(msg.partition(), msg.offset())] = msg.value()
        else:
            failed.append(err)

    stop = threading.Event()
    sent = [0]

    def run():
        i = 0
        while not stop.is_set():
            try:
                p.produce(topic_name, value=b"rec-%07d" % i, partition=i % parts, on_delivery=cb)
                i += 1
            except BufferError:
                pass
            p.poll(0)
            if i % 20 == 0:
                time.sleep(0.005)
        sent[0] = i

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 60
        while len(acked) < 1500:
            assert time.monotonic() < deadline, f"only {len(acked)} acks; failed {failed[:3]}"
            time.sleep(0.02)
        b.kill9()  # mid-stream: requests are in flight
        acked_at_kill = len(acked)
        time.sleep(0.5)
    finally:
        stop.set()
        t.join(timeout=30)

    b.start()
    # Records queued or in flight at the kill are retried against the restarted broker.
    assert p.flush(90) == 0
    assert acked_at_kill < sent[0]
    errors = [e for e in failed if e.code() != KafkaError._MSG_TIMED_OUT]
    assert not errors, f"unexpected delivery errors: {errors[:5]}"

    for part in range(parts):
        low, high = watermarks(b.bootstrap, topic_name, part)
        assert low == 0
        acked_offsets = [o for (pp, o) in acked if pp == part]
        assert high >= max(acked_offsets) + 1, f"partition {part}: acked offsets beyond the log"
    total = sum(watermarks(b.bootstrap, topic_name, part)[1] for part in range(parts))
    got = consume(b.bootstrap, topic_name, total, partitions=range(parts))
    stored = {(r.partition, r.offset): r.value for r in got}
    missing = [(k, v) for k, v in acked.items() if stored.get(k) != v]
    assert not missing, f"{len(missing)} acknowledged records lost or changed, e.g. {missing[:5]}"
    # Every stored record is one the producer sent (duplicates from retries are allowed:
    # this producer is not idempotent).
    assert all(v.startswith(b"rec-") for v in stored.values())
    for part in range(parts):
        offs = sorted(o for (pp, o) in stored if pp == part)
        assert offs == list(range(len(offs))), f"partition {part}: gaps in offsets"
