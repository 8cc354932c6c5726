"""Transaction version 2 (KIP-890 part 2) with the official Java client: the producer epoch
is bumped at every transaction end, writes add their partitions to the transaction, and
`kafka-features downgrade` of transaction.version takes the clients back to the classic
protocol, durably. The same checks run against Kafka 4.4.

The producer epoch each commit leaves in a partition is read from DescribeProducers (the
epoch of the COMMIT marker): a new transactional id starts at epoch 0, so with TV2 one
initTransactions + commit leaves epoch 1, the next run (init bumps, commit bumps) epoch 3;
with TV1 the commits keep the epoch: 0, then 1."""

from __future__ import annotations

import struct
import uuid

import pytest

from helpers import consume, create_topic
from rawkafka import Conn, Reader, encode_compact_string
from test_features import SAFE_DOWNGRADE, UPGRADE, update_features
from test_java_client import CLASSPATH, SKIP_REASON, java

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CLASSPATH is None, reason=f"Java interop client: {SKIP_REASON}")]


def producer_epochs(bootstrap: str, topic: str, partition: int = 0) -> dict[int, int]:
    """DescribeProducers v0 for one partition -> {producer id: epoch}."""
    body = (bytes([2]) + encode_compact_string(topic) + bytes([2])
            + struct.pack(">i", partition) + b"\x00" + b"\x00")
    with Conn(bootstrap) as conn:
        r = Reader(conn.request_flexible(61, 0, body))
    r.int32()  # throttle
    assert r.uvarint() - 1 == 1
    assert r.compact_string() == topic
    assert r.uvarint() - 1 == 1
    assert r.int32() == partition
    code = r.int16()
    r.compact_string()
    assert code == 0, f"DescribeProducers error {code}"
    producers = {}
    for _ in range(r.uvarint() - 1):
        pid, epoch = r.int64(), r.int32()
        r.int32(), r.int64(), r.int32(), r.int64()
        r.skip_tagged_fields()
        producers[pid] = epoch
    return producers


def commit_twice(bootstrap: str, topic: str) -> list[int]:
    """Two Java producer runs with one transactional id, one committed record each; the
    epochs the partition saw after each."""
    txn_id = "tv-" + uuid.uuid4().hex[:8]
    epochs = []
    for run in range(2):
        java(bootstrap, "produce", "--topic", topic, "--count", 1, "--partition", 0,
             "--transactional-id", txn_id, "--value-prefix", f"run{run}-")
        (epoch,) = producer_epochs(bootstrap, topic).values()
        epochs.append(epoch)
    return epochs


def finalized(bootstrap: str) -> tuple[dict, int]:
    with Conn(bootstrap) as conn:
        _, epoch, levels = conn.features(4)
    return levels, epoch


def test_java_transactional_producer_bumps_the_epoch_at_every_commit(broker, topic_name):
    levels, _ = finalized(broker.bootstrap)
    assert levels["transaction.version"] == (2, 2)
    create_topic(broker.bootstrap, topic_name, partitions=1)
    assert commit_twice(broker.bootstrap, topic_name) == [1, 3]
    got = consume(broker.bootstrap, topic_name, 2, partitions=[0],
                  conf={"isolation.level": "read_committed"})
    assert [r.value for r in got] == [b"run0-0", b"run1-0"]


def test_downgraded_transaction_version_is_kept_across_a_restart_and_clients_follow_it(
        broker_factory, topic_name):
    b = broker_factory()
    _, epoch0 = finalized(b.bootstrap)
    code, message, _ = update_features(b.bootstrap, 2, [("transaction.version", 1, UPGRADE)],
                                       False)
    assert code == 95 and "without setting the upgrade type" in message, message
    code, message, _ = update_features(b.bootstrap, 2,
                                       [("transaction.version", 0, SAFE_DOWNGRADE)], False)
    assert code == 0, message
    levels, epoch1 = finalized(b.bootstrap)
    assert "transaction.version" not in levels and epoch1 > epoch0, (levels, epoch1)
    b.restart()
    levels, epoch2 = finalized(b.bootstrap)
    assert "transaction.version" not in levels and epoch2 >= epoch1, (levels, epoch2)
    # New clients see TV0 and keep the epoch at commit.
    create_topic(b.bootstrap, topic_name, partitions=1)
    assert commit_twice(b.bootstrap, topic_name) == [0, 1]
    code, message, _ = update_features(b.bootstrap, 2, [("transaction.version", 2, UPGRADE)],
                                       False)
    assert code == 0, message
    levels, _ = finalized(b.bootstrap)
    assert levels["transaction.version"] == (2, 2)
    create_topic(b.bootstrap, topic_name + "-tv2", partitions=1)
    assert commit_twice(b.bootstrap, topic_name + "-tv2") == [1, 3]


def _write_txn_marker(conn: Conn, topic: str, producer: tuple[int, int], tv: int) -> int:
    """WriteTxnMarkers v2: one COMMIT marker for partition 0 of `topic`, with transaction
    version `tv`; returns the partition's error code."""
    pid, epoch = producer
    marker = (struct.pack(">qh?", pid, epoch, True)
              + b"\x02" + encode_compact_string(topic) + b"\x02" + struct.pack(">i", 0)
              + b"\x00"  # topic tagged fields
              + struct.pack(">ib", 0, tv)  # coordinator epoch, transaction version
              + b"\x00")  # marker tagged fields
    r = Reader(conn.request_flexible(27, 2, b"\x02" + marker + b"\x00"))
    assert r.uvarint() == 2 and r.int64() == pid
    assert r.uvarint() == 2 and r.compact_string() == topic
    assert r.uvarint() == 2 and r.int32() == 0
    return r.int16()


def test_a_transaction_version_2_marker_must_carry_a_bumped_epoch(broker, topic_name):
    """WriteTxnMarkers v2 (what a Kafka 4.4 coordinator sends a partition leader): the
    coordinator bumps the producer epoch to end a TV2 transaction, so a marker at the epoch
    of the ongoing transaction's records is refused with INVALID_PRODUCER_EPOCH and one above
    it is written. With no transaction ongoing, a marker at the producer's epoch is written
    again (Kafka 4.4.0 does so) and a legacy one below it is refused."""
    from kafka import KafkaProducer
    create_topic(broker.bootstrap, topic_name, partitions=1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap,
                             transactional_id=f"tv2-marker-{uuid.uuid4()}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic_name, b"open", partition=0).get(timeout=30)
        ids = producer._transaction_manager.producer_id_and_epoch
        pid, epoch = ids.producer_id, ids.epoch
        with Conn(broker.bootstrap) as conn:
            assert _write_txn_marker(conn, topic_name, (pid, epoch), 2) == 47
            assert _write_txn_marker(conn, topic_name, (pid, epoch + 1), 2) == 0
            assert _write_txn_marker(conn, topic_name, (pid, epoch + 1), 2) == 0
            assert _write_txn_marker(conn, topic_name, (pid, epoch), 1) == 47
    finally:
        producer.close(timeout=5)
