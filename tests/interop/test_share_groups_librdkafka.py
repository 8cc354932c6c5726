"""Share groups with librdkafka's share consumer (confluent-kafka's ShareConsumer, KIP-932),
against Strata or, with STRATA_TEST_TARGET=kafka, the reference broker. Every record must be
accepted exactly once across the members; released records come back with a higher delivery
count. Skipped when the installed confluent-kafka has no ShareConsumer."""

from __future__ import annotations

import collections
import time
import uuid

import confluent_kafka
import pytest

from helpers import create_topic, produce
from test_share_groups import set_group_configs

ShareConsumer = getattr(confluent_kafka, "ShareConsumer", None)
pytestmark = [
    pytest.mark.skipif(ShareConsumer is None,
                       reason="this confluent-kafka has no ShareConsumer (librdkafka < 2.16)"),
    pytest.mark.groups,
]


def _group(bootstrap: str) -> str:
    group = f"rdk-share-{uuid.uuid4().hex[:10]}"
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    return group


def _member(bootstrap: str, group: str, topic: str):
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


def _produce(bootstrap: str, topic: str, n: int) -> None:
    produce(bootstrap, topic, [{"key": b"k%d" % i, "value": b"v%d" % i, "partition": 0}
                               for i in range(n)])


def test_librdkafka_share_consumers_accept_each_record_exactly_once(broker, topic_name):
    n = 600
    create_topic(broker.bootstrap, topic_name, partitions=1)
    _produce(broker.bootstrap, topic_name, n)
    group = _group(broker.bootstrap)
    members = [_member(broker.bootstrap, group, topic_name) for _ in range(2)]
    accepted = collections.Counter()
    by_member = collections.Counter()
    deadline = time.time() + 90
    try:
        while sum(accepted.values()) < n and time.time() < deadline:
            for i, c in enumerate(members):
                for m in c.poll(0.5):
                    assert m.error() is None, m.error()
                    assert m.value() == b"v%d" % m.offset(), (m.offset(), m.value())
                    c.acknowledge(m, confluent_kafka.AcknowledgeType.ACCEPT)
                    accepted[m.offset()] += 1
                    by_member[i] += 1
                c.commit_sync()
    finally:
        for c in members:
            c.close()
    assert sorted(accepted) == list(range(n)), f"missing {set(range(n)) - set(accepted)}"
    twice = [o for o, k in accepted.items() if k > 1]
    assert not twice, f"accepted more than once: {twice[:10]}"


def test_librdkafka_released_records_come_back_with_a_higher_delivery_count(broker, topic_name):
    n = 20
    create_topic(broker.bootstrap, topic_name, partitions=1)
    _produce(broker.bootstrap, topic_name, n)
    group = _group(broker.bootstrap)
    c = _member(broker.bootstrap, group, topic_name)
    deliveries = collections.defaultdict(list)
    deadline = time.time() + 90
    try:
        while (len(deliveries) < n or any(len(d) < 2 for d in deliveries.values())) \
                and time.time() < deadline:
            msgs = c.poll(0.5)
            for m in msgs:
                assert m.error() is None, m.error()
                deliveries[m.offset()].append(m.delivery_count())
                first = len(deliveries[m.offset()]) == 1
                c.acknowledge(m, confluent_kafka.AcknowledgeType.RELEASE if first
                              else confluent_kafka.AcknowledgeType.ACCEPT)
            if msgs:
                c.commit_sync()
        # Everything accepted: nothing more comes.
        assert not [m for m in c.poll(3.0) if m.error() is None]
    finally:
        c.close()
    assert {o: d for o, d in deliveries.items()} == {o: [1, 2] for o in range(n)}
