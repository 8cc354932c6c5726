"""Group configs (GROUP config resources, type 32), as Kafka 4.4 serves them.

Kafka's own kafka-configs.sh (ConfigCommand, Java AdminClient) sets, describes and deletes them
when the Java tools are installed; DescribeConfigs, IncrementalAlterConfigs and AlterConfigs are
also sent as raw requests (librdkafka's ConfigResource has no GROUP type) to check every field
and every refusal's exact code and message. A KIP-848 member's ConsumerGroupHeartbeat then gets
the group's heartbeat interval, and a member that stops heartbeating is removed after the
group's session timeout, not the broker's.

The dedicated broker lowers the broker bounds (`group.consumer.min.heartbeat.interval.ms`,
`group.consumer.min.session.timeout.ms`) so the test can use short timings.
"""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from helpers import admin, create_topic
from java_apps import JVM_OPTS, _java_bin, classpath
from rawkafka import Conn, Reader, encode_compact_string as cs, encode_uvarint as uv

GROUP = 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DYNAMIC_GROUP_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 8, 4, 5
INVALID_CONFIG, INVALID_REQUEST, UNKNOWN_MEMBER_ID = 40, 42, 25

BROKER_PROPS = {
    "group.consumer.min.heartbeat.interval.ms": "1000",
    "group.consumer.min.session.timeout.ms": "6000",
}

# Kafka 4.4's group configs listed for a group that has none set (internal ones are hidden).
LISTED = {
    "consumer.session.timeout.ms": ("45000", 3),
    "consumer.heartbeat.interval.ms": ("5000", 3),
    "consumer.assignment.interval.ms": ("1000", 3),
    "share.session.timeout.ms": ("45000", 3),
    "share.heartbeat.interval.ms": ("5000", 3),
    "share.record.lock.duration.ms": ("30000", 3),
    "share.delivery.count.limit": ("5", 3),
    "share.partition.max.record.locks": ("2000", 3),
    "share.auto.offset.reset": ("latest", 2),
    "share.isolation.level": ("read_uncommitted", 2),
    "share.renew.acknowledge.enable": ("true", 1),
    "share.assignment.interval.ms": ("1000", 3),
    "streams.session.timeout.ms": ("45000", 3),
    "streams.heartbeat.interval.ms": ("5000", 3),
    "streams.num.standby.replicas": ("0", 3),
    "streams.initial.rebalance.delay.ms": ("3000", 3),
    "streams.assignment.interval.ms": ("1000", 3),
    "streams.rack.aware.assignment.tags": ("", 7),
    "streams.assignor.name": ("sticky", 2),
    "errors.deadletterqueue.topic.name": ("", 2),
    "errors.deadletterqueue.copy.record.enable": ("false", 1),
}


@pytest.fixture(scope="module")
def gbroker(module_broker_factory):
    return module_broker_factory(props=BROKER_PROPS, name="group-configs")


# ---------------------------------------------------------------------------- raw requests

def describe(bootstrap, name, keys=None, synonyms=True, docs=False, rtype=GROUP):
    """DescribeConfigs v4 for one resource (a GROUP unless `rtype` says otherwise)
    -> (error, message, {name: entry})."""
    body = uv(2) + bytes([rtype]) + cs(name)
    body += b"\x00" if keys is None else uv(len(keys) + 1) + b"".join(cs(k) for k in keys)
    body += b"\x00" + bytes([int(synonyms), int(docs)]) + b"\x00"
    with Conn(bootstrap) as conn:
        r = Reader(conn.request_flexible(32, 4, body))
    r.int32()
    assert r.uvarint() - 1 == 1
    err, msg = r.int16(), r.compact_string()
    r.int8(), r.compact_string()
    configs = {}
    for _ in range(r.uvarint() - 1):
        n, v, read_only, src, sensitive = (r.compact_string(), r.compact_string(), r.int8(),
                                           r.int8(), r.int8())
        syns = []
        for _ in range(r.uvarint() - 1):
            syns.append((r.compact_string(), r.compact_string(), r.int8()))
            r.skip_tagged_fields()
        ctype, doc = r.int8(), r.compact_string()
        r.skip_tagged_fields()
        configs[n] = dict(value=v, source=src, read_only=read_only, sensitive=sensitive,
                          synonyms=syns, type=ctype, doc=doc)
    return err, msg, configs


def inc_alter(bootstrap, name, ops, validate_only=False, rtype=GROUP):
    """IncrementalAlterConfigs v1 for one resource (a GROUP unless `rtype` says otherwise)
    -> (error, message)."""
    body = uv(2) + bytes([rtype]) + cs(name) + uv(len(ops) + 1)
    for k, op, v in ops:
        body += cs(k) + bytes([op]) + cs(v) + b"\x00"
    body += b"\x00" + bytes([int(validate_only)]) + b"\x00"
    with Conn(bootstrap) as conn:
        r = Reader(conn.request_flexible(44, 1, body))
    r.int32()
    assert r.uvarint() - 1 == 1
    return r.int16(), r.compact_string()


def alter(bootstrap, name, configs, validate_only=False, rtype=GROUP):
    """AlterConfigs v2 (replaces every config of the resource; a GROUP unless `rtype` says
    otherwise) -> (error, message)."""
    body = uv(2) + bytes([rtype]) + cs(name) + uv(len(configs) + 1)
    for k, v in configs:
        body += cs(k) + cs(v) + b"\x00"
    body += b"\x00" + bytes([int(validate_only)]) + b"\x00"
    with Conn(bootstrap) as conn:
        r = Reader(conn.request_flexible(33, 2, body))
    r.int32()
    assert r.uvarint() - 1 == 1
    return r.int16(), r.compact_string()


def heartbeat(conn, group, member_id, epoch, topics=None):
    """ConsumerGroupHeartbeat v0 -> (error, member_epoch, heartbeat_interval_ms). A join
    (epoch 0) subscribes to `topics`; later heartbeats leave everything unchanged."""
    body = cs(group) + cs(member_id) + epoch.to_bytes(4, "big", signed=True)
    body += cs(None) + cs(None)  # instance id, rack id
    body += (30000 if epoch == 0 else -1).to_bytes(4, "big", signed=True)
    if epoch == 0:
        body += uv(len(topics) + 1) + b"".join(cs(t) for t in topics)
    else:
        body += b"\x00"
    body += cs(None)  # server assignor
    body += uv(1) if epoch == 0 else b"\x00"  # owned partitions: none / unchanged
    body += b"\x00"
    r = Reader(conn.request_flexible(68, 0, body))
    r.int32()
    err = r.int16()
    r.compact_string(), r.compact_string()
    return err, r.int32(), r.int32()


def kafka_configs(bootstrap, *args):
    cp, why = classpath("tools")
    if cp is None:
        pytest.skip(f"kafka-configs needs the kafka-tools jars: {why}")
    r = subprocess.run([_java_bin(), *JVM_OPTS, "-cp", cp, "org.apache.kafka.tools.ConfigCommand",
                        "--bootstrap-server", bootstrap, *args],
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


# ---------------------------------------------------------------------------- tests

def test_kafka_configs_sets_describes_and_deletes_group_configs(gbroker):
    code, out = kafka_configs(gbroker.bootstrap, "--alter", "--entity-type", "groups",
                              "--entity-name", "kc-group", "--add-config",
                              "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=6000")
    assert code == 0, out
    assert "Completed updating config for group kc-group." in out, out
    code, out = kafka_configs(gbroker.bootstrap, "--describe", "--entity-type", "groups",
                              "--entity-name", "kc-group")
    assert code == 0, out
    assert "Dynamic configs for group kc-group are:" in out, out
    assert ("consumer.session.timeout.ms=50000 sensitive=false synonyms="
            "{DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=50000, "
            "DEFAULT_CONFIG:group.consumer.session.timeout.ms=45000}") in out, out
    assert ("consumer.heartbeat.interval.ms=6000 sensitive=false synonyms="
            "{DYNAMIC_GROUP_CONFIG:consumer.heartbeat.interval.ms=6000, "
            "DEFAULT_CONFIG:group.consumer.heartbeat.interval.ms=5000}") in out, out

    err, _, configs = describe(gbroker.bootstrap, "kc-group")
    assert err == 0
    assert configs["consumer.session.timeout.ms"]["value"] == "50000"
    assert configs["consumer.session.timeout.ms"]["source"] == DYNAMIC_GROUP_CONFIG

    code, out = kafka_configs(gbroker.bootstrap, "--alter", "--entity-type", "groups",
                              "--entity-name", "kc-group", "--delete-config",
                              "consumer.session.timeout.ms")
    assert code == 0, out
    err, _, configs = describe(gbroker.bootstrap, "kc-group")
    assert (configs["consumer.session.timeout.ms"]["value"],
            configs["consumer.session.timeout.ms"]["source"]) == ("45000", DEFAULT_CONFIG)
    assert configs["consumer.heartbeat.interval.ms"]["value"] == "6000"

    # Out of range: the tool fails with Kafka's message.
    code, out = kafka_configs(gbroker.bootstrap, "--alter", "--entity-type", "groups",
                              "--entity-name", "kc-group", "--add-config",
                              "consumer.session.timeout.ms=1")
    assert code != 0
    assert "consumer.session.timeout.ms must be in the range 6000 to 60000 inclusive." in out, out


def test_a_group_without_configs_describes_kafkas_list_with_types_sources_and_synonyms(gbroker):
    err, msg, configs = describe(gbroker.bootstrap, f"no-such-group-{uuid.uuid4().hex[:8]}",
                                 docs=True)
    assert (err, msg) == (0, "")
    assert {n: (c["value"], c["type"]) for n, c in configs.items()} == LISTED
    for n, c in configs.items():
        assert c["source"] == DEFAULT_CONFIG, n
        assert (c["read_only"], c["sensitive"]) == (0, 0), n
        assert c["doc"], n
        assert len(c["synonyms"]) == 1, n
    assert configs["consumer.session.timeout.ms"]["synonyms"] == [
        ("group.consumer.session.timeout.ms", "45000", DEFAULT_CONFIG)]
    assert configs["share.isolation.level"]["synonyms"] == [
        ("share.isolation.level", "read_uncommitted", DEFAULT_CONFIG)]
    assert configs["streams.assignor.name"]["synonyms"] == [
        ("group.streams.assignors", "sticky", DEFAULT_CONFIG)]
    # Without the flags: no synonyms, no documentation; configuration_keys filters.
    _, _, some = describe(gbroker.bootstrap, "g", keys=["consumer.heartbeat.interval.ms", "nope"],
                          synonyms=False, docs=False)
    assert list(some) == ["consumer.heartbeat.interval.ms"]
    assert some["consumer.heartbeat.interval.ms"]["synonyms"] == []
    assert some["consumer.heartbeat.interval.ms"]["doc"] is None


def test_internal_configs_are_accepted_and_described_once_set(gbroker):
    group = f"internal-{uuid.uuid4().hex[:8]}"
    assert inc_alter(gbroker.bootstrap, group,
                     [("consumer.assignor.offload.enable", SET, "false")]) == (0, None)
    _, _, configs = describe(gbroker.bootstrap, group)
    assert configs["consumer.assignor.offload.enable"]["value"] == "false"
    assert configs["consumer.assignor.offload.enable"]["source"] == DYNAMIC_GROUP_CONFIG
    assert "share.assignor.offload.enable" not in configs


HUGE = "9" * 30000

REFUSALS = [
    ([("no.such.config", SET, "1")], INVALID_CONFIG, "Unknown group config name: no.such.config"),
    ([("consumer.session.timeout.ms", SET, "100000")], INVALID_CONFIG,
     "consumer.session.timeout.ms must be in the range 6000 to 60000 inclusive."),
    ([("consumer.heartbeat.interval.ms", SET, "999")], INVALID_CONFIG,
     "consumer.heartbeat.interval.ms must be in the range 1000 to 15000 inclusive."),
    ([("consumer.session.timeout.ms", SET, "abc")], INVALID_CONFIG,
     "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ([("consumer.session.timeout.ms", SET, "1.5")], INVALID_CONFIG,
     "Invalid value 1.5 for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ([("consumer.session.timeout.ms", SET, "0")], INVALID_CONFIG,
     "Invalid value 0 for configuration consumer.session.timeout.ms: Value must be at least 1"),
    ([("consumer.session.timeout.ms", SET, HUGE)], INVALID_CONFIG,
     f"Invalid value {HUGE} for configuration consumer.session.timeout.ms: "
     "Not a number of type INT"),
    ([("x" * 5000, SET, "1")], INVALID_CONFIG, "Unknown group config name: " + "x" * 5000),
    # A message too long for a string: Kafka answers UNKNOWN_SERVER_ERROR without one.
    ([("consumer.session.timeout.ms", SET, "9" * 32767)], -1, None),
    ([("consumer.session.timeout.ms", SET, None)], INVALID_REQUEST,
     "Null value not supported for : consumer.session.timeout.ms"),
    ([("consumer.session.timeout.ms", APPEND, "1")], INVALID_CONFIG,
     "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST."),
    ([("streams.rack.aware.assignment.tags", SUBTRACT, "a")], INVALID_CONFIG,
     "Can't SUBTRACT to key streams.rack.aware.assignment.tags because its type is not LIST."),
    # An operation code that does not exist: Kafka fails the resource without a message.
    ([("consumer.session.timeout.ms", 7, "50000")], -1, None),
    ([("consumer.session.timeout.ms", SET, "46000"), ("consumer.session.timeout.ms", SET, "47000")],
     INVALID_REQUEST, "Error due to duplicate config keys"),
    ([("consumer.assignor.offload.enable", SET, "maybe")], INVALID_CONFIG,
     "Invalid value maybe for configuration consumer.assignor.offload.enable: "
     "Expected value to be either true or false"),
    ([("share.auto.offset.reset", SET, "by_duration:-PT1H")], INVALID_CONFIG,
     "Invalid value by_duration:-PT1H for configuration share.auto.offset.reset: Invalid value "
     "`by_duration:-PT1H` for configuration share.auto.offset.reset. The value must be either "
     "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."),
    ([("share.isolation.level", SET, "READ_COMMITTED")], INVALID_CONFIG,
     "Invalid value READ_COMMITTED for configuration share.isolation.level: "
     "String must be one of: read_committed, read_uncommitted"),
    ([("share.record.lock.duration.ms", SET, "3600001")], INVALID_CONFIG,
     "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive."),
    ([("share.delivery.count.limit", SET, "1")], INVALID_CONFIG,
     "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2"),
    ([("streams.num.standby.replicas", SET, "3")], INVALID_CONFIG,
     "streams.num.standby.replicas must be less than or equal to 2"),
    ([("streams.task.offset.interval.ms", SET, "5")], INVALID_CONFIG,
     "streams.task.offset.interval.ms must be greater than or equal to 15000"),
    ([("streams.assignor.name", SET, "nope")], INVALID_CONFIG,
     "streams.assignor.name 'nope' is not a registered task assignor. "
     "Registered assignors are: [sticky]."),
    ([("streams.rack.aware.assignment.tags", SET, "a,a")], INVALID_CONFIG,
     "streams.rack.aware.assignment.tags must not contain duplicate tag keys."),
    ([("errors.deadletterqueue.topic.name", SET, "__dlq")], INVALID_CONFIG,
     "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"),
    # Names are checked first, then types in Kafka's definition order, then the bounds.
    ([("zzz", SET, "1"), ("consumer.session.timeout.ms", SET, "x")], INVALID_CONFIG,
     "Unknown group config name: zzz"),
    ([("share.delivery.count.limit", SET, "11"), ("consumer.session.timeout.ms", SET, "x")],
     INVALID_CONFIG,
     "Invalid value x for configuration consumer.session.timeout.ms: Not a number of type INT"),
]


@pytest.mark.parametrize("ops,code,message", REFUSALS,
                         ids=[f"{i}-{ops[0][0][:30]}" for i, (ops, _, _) in enumerate(REFUSALS)])
def test_refused_group_configs_get_kafkas_code_and_message(gbroker, ops, code, message):
    group = f"refused-{uuid.uuid4().hex[:8]}"
    assert inc_alter(gbroker.bootstrap, group, ops) == (code, message)
    _, _, configs = describe(gbroker.bootstrap, group, synonyms=False)
    assert all(c["source"] == DEFAULT_CONFIG for c in configs.values()), "nothing was stored"


def test_empty_group_names_and_validate_only(gbroker):
    assert describe(gbroker.bootstrap, "")[:2] == (INVALID_REQUEST, "Group name must not be empty")
    assert inc_alter(gbroker.bootstrap, "", [("consumer.session.timeout.ms", SET, "50000")]) == (
        INVALID_REQUEST, "Default group resources are not allowed.")
    assert alter(gbroker.bootstrap, "", [("consumer.session.timeout.ms", "50000")]) == (
        INVALID_REQUEST, "Default group resources are not allowed.")
    group = f"validate-only-{uuid.uuid4().hex[:8]}"
    assert inc_alter(gbroker.bootstrap, group, [("consumer.session.timeout.ms", SET, "50000")],
                     validate_only=True) == (0, None)
    assert inc_alter(gbroker.bootstrap, group, [("consumer.session.timeout.ms", SET, "1")],
                     validate_only=True) == (
        INVALID_CONFIG, "consumer.session.timeout.ms must be in the range 6000 to 60000 inclusive.")
    _, _, configs = describe(gbroker.bootstrap, group)
    assert configs["consumer.session.timeout.ms"]["source"] == DEFAULT_CONFIG


def test_alter_configs_replaces_every_group_config(gbroker):
    group = f"legacy-{uuid.uuid4().hex[:8]}"
    assert inc_alter(gbroker.bootstrap, group, [("share.delivery.count.limit", SET, "7")]) == (0, None)
    assert alter(gbroker.bootstrap, group, [("consumer.session.timeout.ms", "50000")]) == (0, None)
    _, _, configs = describe(gbroker.bootstrap, group)
    assert configs["consumer.session.timeout.ms"]["source"] == DYNAMIC_GROUP_CONFIG
    assert configs["share.delivery.count.limit"]["source"] == DEFAULT_CONFIG
    assert alter(gbroker.bootstrap, group, [("consumer.session.timeout.ms", "1")]) == (
        INVALID_CONFIG, "consumer.session.timeout.ms must be in the range 6000 to 60000 inclusive.")
    assert alter(gbroker.bootstrap, group, [("nope", "1")]) == (
        INVALID_CONFIG, "Unknown group config name: nope")


def test_kip848_heartbeat_interval_and_session_timeout_follow_the_group_config(gbroker):
    configured, plain = f"hb-set-{uuid.uuid4().hex[:8]}", f"hb-plain-{uuid.uuid4().hex[:8]}"
    assert inc_alter(gbroker.bootstrap, configured, [
        ("consumer.heartbeat.interval.ms", SET, "1500"),
        ("consumer.session.timeout.ms", SET, "6000"),
    ]) == (0, None)
    members = {}
    with Conn(gbroker.bootstrap) as conn:
        for group in (configured, plain):
            member = uuid.uuid4().hex[:22]
            for _ in range(150):
                # FindCoordinator v0 first: Kafka creates __consumer_offsets on demand.
                g = group.encode()
                conn.request(10, 0, len(g).to_bytes(2, "big") + g)
                err, epoch, interval = heartbeat(conn, group, member, 0, ["group-configs-topic"])
                if err not in (14, 15, 16):  # coordinator loading / not available / elsewhere
                    break
                time.sleep(0.2)
            assert err == 0, (group, err)
            members[group] = (member, epoch, interval)
    assert members[configured][2] == 1500
    assert members[plain][2] == 5000
    # Both members go silent for longer than 6 s but much less than the broker's 45 s.
    time.sleep(10)
    with Conn(gbroker.bootstrap) as conn:
        member, epoch, _ = members[plain]
        assert heartbeat(conn, plain, member, epoch)[0] == 0
        member, epoch, _ = members[configured]
        assert heartbeat(conn, configured, member, epoch)[0] == UNKNOWN_MEMBER_ID
    # A change applies to the next heartbeat of a live member.
    assert inc_alter(gbroker.bootstrap, plain,
                     [("consumer.heartbeat.interval.ms", SET, "2500")]) == (0, None)
    with Conn(gbroker.bootstrap) as conn:
        member, epoch, _ = members[plain]
        assert heartbeat(conn, plain, member, epoch) == (0, epoch, 2500)


def test_group_configs_survive_a_restart_and_the_group_being_deleted(broker_factory):
    b = broker_factory(props={**BROKER_PROPS, "group.consumer.heartbeat.interval.ms": "4000"})
    group = "durable-group"
    # A broker setting from the config file stands behind the group's value.
    _, _, configs = describe(b.bootstrap, group)
    assert configs["consumer.heartbeat.interval.ms"]["value"] == "4000"
    assert configs["consumer.heartbeat.interval.ms"]["source"] == STATIC_BROKER_CONFIG
    assert configs["consumer.heartbeat.interval.ms"]["synonyms"] == [
        ("group.consumer.heartbeat.interval.ms", "4000", STATIC_BROKER_CONFIG),
        ("group.consumer.heartbeat.interval.ms", "5000", DEFAULT_CONFIG)]
    assert inc_alter(b.bootstrap, group, [("consumer.heartbeat.interval.ms", SET, "3000")]) == (0, None)
    b.restart()
    _, _, configs = describe(b.bootstrap, group)
    assert (configs["consumer.heartbeat.interval.ms"]["value"],
            configs["consumer.heartbeat.interval.ms"]["source"]) == ("3000", DYNAMIC_GROUP_CONFIG)
    assert configs["consumer.heartbeat.interval.ms"]["synonyms"] == [
        ("consumer.heartbeat.interval.ms", "3000", DYNAMIC_GROUP_CONFIG),
        ("group.consumer.heartbeat.interval.ms", "4000", STATIC_BROKER_CONFIG),
        ("group.consumer.heartbeat.interval.ms", "5000", DEFAULT_CONFIG)]
    # Deleting the group (created here by committing an offset) keeps its configs.
    topic = "durable-group-topic"
    create_topic(b.bootstrap, topic)
    a = admin(b.bootstrap)
    deadline = time.monotonic() + 60
    while True:
        done = a.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, 0, 0)])])[group].result(timeout=60)
        errors = [p.error for p in done.topic_partitions if p.error]
        if not errors:
            break
        assert time.monotonic() < deadline, errors
        time.sleep(0.5)
    a.delete_consumer_groups([group], request_timeout=30)[group].result(timeout=60)
    _, _, configs = describe(b.bootstrap, group)
    assert configs["consumer.heartbeat.interval.ms"]["value"] == "3000"
