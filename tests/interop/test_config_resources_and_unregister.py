"""ListConfigResources (KIP-1142) and UnregisterBroker, raw and through Kafka's own tools
(`kafka-configs --describe` without an entity name, `kafka-cluster unregister`), on Strata
and on Kafka 4.4 with the same answers. The cluster case (unregistering a dead broker of a
3-node cluster, and its return) is in test_cluster_quorum.py."""

from __future__ import annotations

import struct
import subprocess

import pytest

import java_apps
from helpers import admin, create_topic
from rawkafka import Conn, Reader

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
UNSUPPORTED_VERSION, BROKER_ID_NOT_REGISTERED = 35, 102


def list_config_resources(bootstrap: str, version: int, types=()) -> tuple[int, set]:
    body = b""
    if version >= 1:
        body += bytes([len(types) + 1]) + bytes(types)
    with Conn(bootstrap) as conn:
        r = Reader(conn.request_flexible(74, version, body + b"\x00"))
    r.int32()  # throttle
    code = r.int16()
    found = set()
    for _ in range(r.uvarint() - 1):
        name = r.compact_string()
        kind = r.int8() if version >= 1 else None
        r.skip_tagged_fields()
        found.add((name, kind))
    return code, found


def unregister(bootstrap: str, broker_id: int) -> tuple[int, str | None]:
    with Conn(bootstrap) as conn:
        r = Reader(conn.request_flexible(64, 0, struct.pack(">i", broker_id) + b"\x00"))
    r.int32()
    return r.int16(), r.compact_string()


def node_id(bootstrap: str) -> int:
    (only,) = admin(bootstrap).list_topics(timeout=10).brokers
    return only


def test_list_config_resources_lists_topics_and_brokers_by_type(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    me = str(node_id(broker.bootstrap))
    # v0 lists client-metrics subscriptions: none on either broker.
    assert list_config_resources(broker.bootstrap, 0) == (0, set())
    code, everything = list_config_resources(broker.bootstrap, 1)
    assert code == 0
    assert {(topic_name, TOPIC), (me, BROKER)} <= everything
    assert all(kind in (TOPIC, BROKER, BROKER_LOGGER, GROUP, CLIENT_METRICS)
               for _, kind in everything)
    code, topics = list_config_resources(broker.bootstrap, 1, [TOPIC])
    assert code == 0 and (topic_name, TOPIC) in topics
    assert {kind for _, kind in topics} == {TOPIC}
    assert list_config_resources(broker.bootstrap, 1, [BROKER]) == (0, {(me, BROKER)})
    # A type asked for twice is listed once; one Kafka does not know is refused.
    assert list_config_resources(broker.bootstrap, 1, [BROKER, BROKER]) == (0, {(me, BROKER)})
    assert list_config_resources(broker.bootstrap, 1, [99]) == (UNSUPPORTED_VERSION, set())


def test_unregister_broker_refuses_an_unknown_id(broker):
    me = node_id(broker.bootstrap)
    for unknown in (me + 41, -1):
        assert unregister(broker.bootstrap, unknown) == (
            BROKER_ID_NOT_REGISTERED, f"Broker ID {unknown} is not currently registered")


def test_unregister_broker_accepts_the_broker_itself(broker_factory):
    """Its own broker (on a broker of its own: Kafka then lists no broker until it registers
    again, a single Strata node stays listed)."""
    b = broker_factory()
    assert unregister(b.bootstrap, node_id(b.bootstrap)) == (0, "")


def test_kafka_configs_describes_every_topic_without_a_name(broker, topic_name):
    cp, why = java_apps.classpath("tools")
    if cp is None:
        pytest.skip(f"Kafka tools jars: {why}")
    create_topic(broker.bootstrap, topic_name, partitions=1,
                 config={"retention.ms": "123456"})
    cmd = [java_apps._java_bin(), *java_apps.JVM_OPTS, "-cp", cp,
           "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", broker.bootstrap,
           "--describe", "--entity-type", "topics"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"Dynamic configs for topic {topic_name} are:" in out.stdout, out.stdout[-3000:]
    assert "retention.ms=123456" in out.stdout


def test_list_config_resources_lists_the_groups_with_configs(broker, topic_name):
    from test_group_configs import inc_alter
    group = topic_name + "-g"
    assert inc_alter(broker.bootstrap, group,
                     [("consumer.session.timeout.ms", 0, "50000")])[0] == 0
    code, groups = list_config_resources(broker.bootstrap, 1, [GROUP])
    assert code == 0 and (group, GROUP) in groups
    assert {kind for _, kind in groups} == {GROUP}
    # Deleting the config takes the group off the list.
    assert inc_alter(broker.bootstrap, group, [("consumer.session.timeout.ms", 1, None)])[0] == 0
    assert (group, GROUP) not in list_config_resources(broker.bootstrap, 1, [GROUP])[1]
