"""Exactly-once consume-transform-produce on a three-node cluster (replication factor 3),
with confluent-kafka: the consumer group's coordinator and the producer's transaction
coordinator are different brokers, so the group coordinator verifies each TxnOffsetCommit
with the transaction coordinator over the network. Every send_offsets_to_transaction of
at least 30 transactions completes promptly, and the output topic and the group's committed
offsets hold every input record exactly once.

Runs against a three-node Strata quorum, or three Kafka nodes (kafka-ref.sh with a static
controller quorum)."""

import base64
import os
import statistics
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from conftest import TARGET
from helpers import QUIET, admin, consume, watermarks
from test_cluster import bootstrap, start_cluster
from test_cluster_coordinators import KEY_GROUP, KEY_TRANSACTION, coordinator

pytestmark = [pytest.mark.slow]

# Few coordinator partitions: quick to create, and still spread over the three brokers.
COORDINATOR_PARTITIONS = {
    "offsets.topic.num.partitions": 6,
    "transaction.state.log.num.partitions": 6,
}
# kafka-ref.sh sets a single node's replication factors.
KAFKA_REPLICATION = {
    "offsets.topic.replication.factor": 3,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
}
SOURCE, SINK = "eos-source", "eos-sink"
PARTITIONS = 3
RECORDS = 300
PER_TRANSACTION = 10  # at most, so RECORDS take at least 30 transactions
# A healthy TxnOffsetCommit takes milliseconds; the client retries a retriable error every
# 500 ms until its own timeout, which is longer than this bound.
SEND_OFFSETS_BOUND_S = 10.0
SEND_OFFSETS_TIMEOUT_S = 30.0
# librdkafka's debug contexts for the producer, e.g. "eos,protocol" to see each
# TxnOffsetCommit and its error code while investigating.
CLIENT_DEBUG = os.environ.get("STRATA_TEST_TXN_DEBUG", "")


@pytest.fixture
def eos_cluster(broker_factory):
    """Three brokers, all voters (Strata's quorum, or Kafka's static controller quorum)."""
    if TARGET == "strata":
        yield from start_cluster(broker_factory, 3, **COORDINATOR_PARTITIONS)
        return
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

    def kafka_node(b, rpc_port):
        b.props["listeners"] = (f"PLAINTEXT://127.0.0.1:{b.port},"
                                f"CONTROLLER://127.0.0.1:{rpc_port}")
        b.env = {
            "KAFKA_REF_NODE_ID": b.props["node.id"],
            "KAFKA_REF_VOTERS": b.props["controller.quorum.voters"],
            "KAFKA_REF_CONTROLLER_PORT": str(rpc_port),
            "KAFKA_REF_CLUSTER_ID": cluster_id,
        }

    yield from start_cluster(broker_factory, 3, listeners=kafka_node,
                             **COORDINATOR_PARTITIONS, **KAFKA_REPLICATION)


def create_topics(brokers):
    fs = admin(bootstrap(brokers)).create_topics(
        [NewTopic(t, num_partitions=PARTITIONS, replication_factor=3,
                  config={"min.insync.replicas": "2"}) for t in (SOURCE, SINK)],
        request_timeout=30)
    for f in fs.values():
        f.result()


def ids_with_different_coordinators(brokers):
    """A group id and a transactional id coordinated by two different brokers."""
    group = "eos-group"
    group_node = coordinator(brokers, group, KEY_GROUP)
    for i in range(200):
        txn = f"eos-txn-{i}"
        txn_node = coordinator(brokers, txn, KEY_TRANSACTION)
        if txn_node != group_node:
            return group, group_node, txn, txn_node
    pytest.fail(f"every transactional id tried is coordinated by node {group_node}, "
                f"the group's coordinator")


@pytest.mark.timeout(300)
def test_send_offsets_to_transaction_completes_when_the_group_and_transaction_coordinators_differ(
        eos_cluster):
    cluster = eos_cluster
    create_topics(cluster)
    servers = bootstrap(cluster)
    seed = Producer({"bootstrap.servers": servers, "acks": "all",
                     "enable.idempotence": True, **QUIET})
    for n in range(RECORDS):
        seed.produce(SOURCE, value=b"%d" % n, partition=n % PARTITIONS)
    assert seed.flush(60) == 0

    group, group_node, txn, txn_node = ids_with_different_coordinators(cluster)
    print(f"group {group} coordinated by node {group_node}, "
          f"transactional id {txn} by node {txn_node}")

    consumer = Consumer({
        "bootstrap.servers": servers,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "session.timeout.ms": 30000,
        **QUIET,
    })
    producer_conf = {"bootstrap.servers": servers, "transactional.id": txn,
                     "transaction.timeout.ms": 60000, **QUIET}
    if CLIENT_DEBUG:
        producer_conf.update({"debug": CLIENT_DEBUG, "log_level": 7})
    producer = Producer(producer_conf)
    producer.init_transactions(60)
    consumer.subscribe([SOURCE])

    transformed = []  # what the committed transactions wrote, in order
    send_offsets_s = []
    deadline = time.monotonic() + 180
    try:
        while len(transformed) < RECORDS:
            assert time.monotonic() < deadline, (
                f"consumed {len(transformed)} of {RECORDS} records in "
                f"{len(send_offsets_s)} transactions")
            batch = []
            for m in consumer.consume(PER_TRANSACTION, 1.0):
                if m.error():
                    if m.error().retriable() or m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                batch.append(m)
            if not batch:
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce(SINK, value=b"out-" + m.value(), partition=m.partition())
            positions = consumer.position(consumer.assignment())
            started = time.monotonic()
            try:
                producer.send_offsets_to_transaction(
                    positions, consumer.consumer_group_metadata(), SEND_OFFSETS_TIMEOUT_S)
            except KafkaException as e:
                pytest.fail(f"send_offsets_to_transaction of transaction "
                            f"{len(send_offsets_s) + 1} failed after "
                            f"{time.monotonic() - started:.1f}s: {e}")
            took = time.monotonic() - started
            send_offsets_s.append(took)
            assert took < SEND_OFFSETS_BOUND_S, (
                f"send_offsets_to_transaction of transaction {len(send_offsets_s)} "
                f"took {took:.1f}s")
            producer.commit_transaction(60)
            transformed += [b"out-" + m.value() for m in batch]
    finally:
        consumer.close()

    print(f"{len(send_offsets_s)} transactions; send_offsets_to_transaction took "
          f"median {statistics.median(send_offsets_s) * 1000:.0f} ms, "
          f"max {max(send_offsets_s) * 1000:.0f} ms")
    assert len(send_offsets_s) >= RECORDS // PER_TRANSACTION

    # Exactly once: every input record in the sink once, and the group's committed offsets
    # at the end of every source partition.
    assert sorted(transformed) == sorted(b"out-%d" % n for n in range(RECORDS))
    sink = []
    for q in range(PARTITIONS):
        sink += consume(servers, SINK, RECORDS // PARTITIONS, partitions=(q,),
                        conf={"isolation.level": "read_committed"}, timeout=60)
    assert sorted(r.value for r in sink) == sorted(transformed)
    check = Consumer({"bootstrap.servers": servers, "group.id": group,
                      "enable.auto.commit": False, **QUIET})
    try:
        committed = check.committed(
            [TopicPartition(SOURCE, q) for q in range(PARTITIONS)], timeout=30)
    finally:
        check.close()
    ends = {q: watermarks(servers, SOURCE, q)[1] for q in range(PARTITIONS)}
    assert {tp.partition: tp.offset for tp in committed} == ends
