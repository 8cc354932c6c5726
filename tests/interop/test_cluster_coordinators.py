"""Cluster mode coordinators with real clients: a consumer group's committed offsets and a
transactional producer's state live in the quorum's `__consumer_offsets` /
`__transaction_state` (replication factor 3), so they survive a SIGKILL of the broker that
coordinated them: a new consumer of the group resumes exactly at the committed offsets, and
a new transactional producer fences the old one and commits through the next coordinator.

Strata only (three-process quorum; the reference Kafka script runs a single node)."""

import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from conftest import TARGET
from helpers import QUIET, admin, consume
from rawkafka import Conn, Reader
from test_cluster import bootstrap, cluster, wait_until  # noqa: F401 - the fixture
from test_groups import members  # noqa: F401 - the fixture

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(TARGET != "strata",
                       reason="starts a 3-node Strata quorum; kafka-ref.sh runs a single node"),
]

TOPIC = "cluster-coordinated"
PARTITIONS = 3
API_FIND_COORDINATOR = 10
KEY_GROUP, KEY_TRANSACTION = 0, 1


def find_coordinator(brokers, key: str, key_type: int):
    """The node FindCoordinator v1 names on a running broker (None while not available)."""
    for b in brokers:
        if not b.running:
            continue
        k = key.encode()
        with Conn(b.bootstrap, timeout=10) as c:
            r = Reader(c.request(API_FIND_COORDINATOR, 1,
                                 struct.pack(">h", len(k)) + k + struct.pack(">b", key_type)))
        r.int32()  # throttle
        error = r.int16()
        r.string()  # error message
        node = r.int32()
        return node if error == 0 else None
    return None


def coordinator(brokers, key, key_type, not_node=None, timeout=60.0):
    found = {}

    def named():
        found["node"] = find_coordinator(brokers, key, key_type)
        return found["node"] is not None and found["node"] != not_node

    wait_until(f"a coordinator for {key}", named, timeout=timeout)
    return found["node"]


def group_consumer(servers, group):
    return Consumer({
        "bootstrap.servers": servers,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10000,
        "topic.metadata.refresh.interval.ms": 1000,
        **QUIET,
    })


def poll_values(consumer, count, timeout=60.0):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF or m.error().retriable():
                continue
            raise KafkaException(m.error())
        out.append((m.partition(), m.offset(), int(m.value())))
    return out


def create_topic(brokers):
    fs = admin(bootstrap(brokers)).create_topics(
        [NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3,
                  config={"min.insync.replicas": "2"})], request_timeout=30)
    fs[TOPIC].result()


@pytest.mark.timeout(240)
def test_committed_offsets_survive_kill9_of_the_group_coordinator(cluster):
    create_topic(cluster)
    p = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all",
                  "enable.idempotence": True, **QUIET})
    for n in range(600):
        p.produce(TOPIC, value=b"%d" % n, partition=n % PARTITIONS)
    assert p.flush(60) == 0

    # The first member reads about half, commits synchronously and leaves.
    c1 = group_consumer(bootstrap(cluster), "survivors")
    c1.subscribe([TOPIC])
    first = poll_values(c1, 300)
    assert len(first) >= 300, f"consumed {len(first)} of 300"
    committed = c1.commit(asynchronous=False)
    assert all(tp.error is None for tp in committed), committed
    position = {tp.partition: tp.offset for tp in committed}
    c1.close()

    # Kill the group's coordinator; every broker agrees on one, then on its successor.
    victim = coordinator(cluster, "survivors", KEY_GROUP)
    cluster[victim - 1].kill9()
    killed_at = time.monotonic()
    successor = coordinator(cluster, "survivors", KEY_GROUP, not_node=victim)
    print(f"group coordinator {victim} killed; {successor} coordinates the group "
          f"{time.monotonic() - killed_at:.2f}s later")

    # A new member resumes exactly where the group committed: every record after the
    # committed offsets, once, and nothing before them. (A partition the first member never
    # read has no committed offset and is read from the start.)
    start = {q: max(position.get(q, 0), 0) for q in range(PARTITIONS)}
    live = [b for b in cluster if b.running]
    c2 = group_consumer(bootstrap(live), "survivors")
    c2.subscribe([TOPIC])
    try:
        rest = poll_values(c2, 600 - sum(start.values()), timeout=90)
        rest += poll_values(c2, 1, timeout=2)  # anything extra is a duplicate
        got = c2.committed([TopicPartition(TOPIC, q) for q in range(PARTITIONS)], timeout=30)
    finally:
        c2.close()
    assert {tp.partition: tp.offset for tp in got} == position, "committed offsets after the kill"
    per_partition = 600 // PARTITIONS
    assert sorted((q, o) for q, o, _ in rest) == [
        (q, o) for q in range(PARTITIONS) for o in range(start[q], per_partition)]
    cluster[victim - 1].start()


@pytest.mark.timeout(240)
def test_transactions_continue_after_kill9_of_the_transaction_coordinator(cluster):
    create_topic(cluster)

    def txn_producer(servers):
        tp = Producer({"bootstrap.servers": servers, "transactional.id": "cluster-tx",
                       "transaction.timeout.ms": 20000, **QUIET})
        tp.init_transactions(60)
        return tp

    tp = txn_producer(bootstrap(cluster))
    tp.begin_transaction()
    for n in range(30):
        tp.produce(TOPIC, value=b"%d" % n, partition=n % PARTITIONS)
    tp.commit_transaction(60)
    # A transaction left open when its coordinator dies.
    tp.begin_transaction()
    for n in range(1000, 1030):
        tp.produce(TOPIC, value=b"%d" % n, partition=n % PARTITIONS)
    tp.flush(30)

    victim = coordinator(cluster, "cluster-tx", KEY_TRANSACTION)
    cluster[victim - 1].kill9()
    successor = coordinator(cluster, "cluster-tx", KEY_TRANSACTION, not_node=victim)
    print(f"transaction coordinator {victim} killed; {successor} took over")

    # A new producer with the same id: its coordinator aborts the open transaction and
    # fences the old producer; its own transaction commits.
    live = [b for b in cluster if b.running]
    tp2 = txn_producer(bootstrap(live))
    tp2.begin_transaction()
    for n in range(2000, 2030):
        tp2.produce(TOPIC, value=b"%d" % n, partition=n % PARTITIONS)
    tp2.commit_transaction(60)
    with pytest.raises(KafkaException):
        tp.commit_transaction(20)

    records = []
    for q in range(PARTITIONS):
        records += consume(bootstrap(live), TOPIC, 20, partitions=(q,),
                           conf={"isolation.level": "read_committed"}, timeout=60)
    values = sorted(int(r.value) for r in records)
    assert values == list(range(30)) + list(range(2000, 2030)), values
    cluster[victim - 1].start()


@pytest.mark.timeout(300)
def test_kip848_members_go_on_after_kill9_of_their_group_coordinator(cluster, members):
    """Java consumers of a KIP-848 group (group.protocol=consumer) on a 3-node cluster: the
    broker that coordinates the group is killed with SIGKILL. The group's state is in its
    __consumer_offsets partition (replication factor 3), so the next coordinator loads it and
    the members heartbeat on at their epochs: no partition is lost or revoked, and every
    record is consumed exactly once with the offsets committed."""
    import test_groups as tg

    tg._needs_java("java")
    topic, group = "kip848-failover", "kip848-failover-g"
    admin(bootstrap(cluster)).create_topics(
        [NewTopic(topic, num_partitions=tg.PARTITIONS, replication_factor=3,
                  config={"min.insync.replicas": "2"})], request_timeout=30)[topic].result()
    servers = bootstrap(cluster)
    ms = [members("java", servers, topic, group, name=f"failover-{i}", group_protocol="consumer")
          for i in range(2)]
    tg.wait_balanced(ms)
    v1 = tg.produce_phase(servers, topic, "one", 20)
    tg.wait_consumed(ms, v1)
    time.sleep(2)
    held = {m.name: sorted(m.partitions) for m in ms}

    def rebalance_events(m):
        return {kind: len(m.of(kind)) for kind in ("assigned", "revoked", "lost")}

    before = {m.name: rebalance_events(m) for m in ms}
    victim = coordinator(cluster, group, KEY_GROUP)
    cluster[victim - 1].kill9()
    successor = coordinator(cluster, group, KEY_GROUP, not_node=victim)
    print(f"group coordinator {victim} killed; {successor} coordinates the group")
    live = bootstrap([b for b in cluster if b.running])
    v2 = tg.produce_phase(live, topic, "two", 20)
    tg.wait_consumed(ms, v2, timeout=120)
    cluster[victim - 1].start()
    v3 = tg.produce_phase(servers, topic, "three", 20)
    tg.wait_consumed(ms, v3, timeout=90)
    for m in ms:
        assert rebalance_events(m) == before[m.name], \
            f"a rebalance after the failover (lost: the member was fenced)\n{m.describe()}"
        assert sorted(m.partitions) == held[m.name], m.describe()
    for m in ms:
        m.close()
    tg.assert_consumed_once_and_committed(servers, group, topic, ms, v1 | v2 | v3)
