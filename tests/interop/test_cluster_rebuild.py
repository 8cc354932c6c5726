"""Rebuilding a whole cluster from its bucket: a 3-node cluster on moto (S3) loses every
broker disk and its metadata quorum; a new cluster started with
`strata.remote.cluster.restore.enable` on the same bucket takes back the topic (partition
count, replication factor, configs), every record at its offset, and the consumer group's
committed offsets: a confluent-kafka consumer in the group resumes exactly where it
committed, and new records follow the restored ones.

Strata only: Apache Kafka cannot rebuild a cluster from its tiered storage."""

import json
import time

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, NewTopic

from conftest import TARGET
from helpers import QUIET, admin, consume, produce, watermarks
from test_cluster import bootstrap, start_cluster, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(TARGET != "strata",
                       reason="Strata only: Kafka cannot rebuild a cluster from its bucket"),
]

PARTS = 3
N = 6000
GROUP = "rebuilt-consumers"
TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    "local.retention.bytes": "1",
    "internal.segment.bytes": "16384",
    "retention.ms": "-1",
    "max.message.bytes": "600000",
}


def cluster_props(s3, prefix: str) -> dict:
    return {
        **s3.broker_props(prefix),
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "strata.remote.internal.topics.enable": "true",
        "strata.remote.cluster.restore.enable": "true",
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.num.partitions": "3",
    }


def create_when_restore_decided(servers: str, topic: str) -> None:
    """CreateTopics answers REQUEST_TIMED_OUT until the new quorum has decided its restore."""
    deadline = time.monotonic() + 60
    while True:
        f = admin(servers).create_topics(
            [NewTopic(topic, num_partitions=PARTS, replication_factor=3, config=TOPIC_CONFIG)],
            request_timeout=15)
        try:
            f[topic].result(timeout=30)
            return
        except KafkaException as e:
            assert "restoring its topics from the bucket" in str(e), e
            assert time.monotonic() < deadline, e
            time.sleep(0.5)


def group_consumer(servers: str) -> Consumer:
    return Consumer({"bootstrap.servers": servers, "group.id": GROUP,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET})


def poll_records(c: Consumer, count: int, timeout: float = 90.0) -> list:
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append(m)
    assert len(out) == count, f"{len(out)} of {count} records"
    return out


def test_a_cluster_that_lost_every_disk_and_its_quorum_comes_back_from_its_bucket(
        broker_factory, s3_server, topic_name):
    prefix = f"rebuild-{topic_name}"
    props = cluster_props(s3_server, prefix)

    # 1. The cluster that is lost.
    first = start_cluster(broker_factory, 3, **props)
    brokers = next(first)
    servers = bootstrap(brokers)
    create_when_restore_decided(servers, topic_name)
    records = [{"key": b"k%d" % i, "value": b"v%06d" % i + b"." * 200} for i in range(N)]
    delivered, _ = produce(servers, topic_name, records,
                           conf={"enable.idempotence": True, "linger.ms": 5})
    want = {p: sorted((d.offset, d.value) for d in delivered if d.partition == p)
            for p in range(PARTS)}
    assert all(want.values())
    # A consumer in the group reads part of it and commits.
    c = group_consumer(servers)
    c.subscribe([topic_name])
    got = poll_records(c, N // 2)
    c.commit(asynchronous=False)
    committed = {tp.partition: tp.offset
                 for tp in c.committed([TopicPartition(topic_name, p) for p in range(PARTS)],
                                       timeout=30)}
    c.close()
    assert sum(max(o, 0) for o in committed.values()) >= len(got)
    # A clean shutdown uploads what is acknowledged; then every disk and the quorum are gone.
    for b in brokers:
        b.stop()
    first.close()
    # What survives is the bucket: its catalog lists the topic and the coordinators' topic.
    obj = s3_server.client.get_object(Bucket=s3_server.bucket,
                                      Key=f"{prefix}/_strata/catalog.json")
    catalog = json.loads(obj["Body"].read())
    assert catalog["topics"][topic_name]["replication_factor"] == 3
    assert catalog["topics"][topic_name]["partitions"] == PARTS
    assert "__consumer_offsets" in catalog["topics"]

    # 2. A new cluster on empty disks and an empty quorum, pointed at the same bucket.
    started = time.monotonic()
    second = start_cluster(broker_factory, 3, **props)
    brokers = next(second)
    try:
        servers = bootstrap(brokers)
        a = admin(servers)

        def restored():
            # Every broker's metadata, not one's: a client may bootstrap from any of them.
            for b in brokers:
                t = admin(b.bootstrap).list_topics(timeout=10).topics.get(topic_name)
                if t is None or len(t.partitions) != PARTS or not all(
                        p.leader >= 0 for p in t.partitions.values()):
                    return False
            return True

        wait_until("the topic restored with a leader per partition", restored, timeout=90)
        print(f"rebuilt the cluster in {time.monotonic() - started:.1f} s "
              f"({N} records, {PARTS} partitions)")
        md = a.list_topics(topic_name, timeout=10).topics[topic_name]
        assert all(len(p.replicas) == 3 for p in md.partitions.values()), {p.id: (p.replicas, p.isrs) for p in md.partitions.values()}
        res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
        configs = a.describe_configs([res])[res].result(timeout=30)
        assert configs["remote.storage.enable"].value == "true"
        assert configs["max.message.bytes"].value == "600000"

        # Every record at its offset, read from offset 0 (from the bucket).
        for p in range(PARTS):
            assert watermarks(servers, topic_name, p) == (0, len(want[p]))
            recs = consume(servers, topic_name, len(want[p]), partitions=(p,), timeout=120)
            assert [(r.offset, r.value) for r in recs] == want[p], f"partition {p}"

        # The group resumes exactly at its committed offsets.
        c = group_consumer(servers)
        c.subscribe([topic_name])
        rest = poll_records(c, N - sum(max(o, 0) for o in committed.values()), timeout=120)
        for m in rest:
            assert m.offset() >= max(committed[m.partition()], 0)
        firsts = {}
        for m in rest:
            firsts.setdefault(m.partition(), m.offset())
        for p, first_offset in firsts.items():
            assert first_offset == max(committed[p], 0), (p, first_offset, committed)
        assert sorted((m.partition(), m.offset()) for m in rest) == sorted(
            (p, o) for p in range(PARTS) for o, _ in want[p] if o >= max(committed[p], 0))
        c.close()

        # New records follow the restored ones.
        more, _ = produce(servers, topic_name, [{"value": b"after", "partition": 0}],
                          conf={"enable.idempotence": True})
        assert more[0].offset == len(want[0])
    finally:
        second.close()
