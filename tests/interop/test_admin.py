"""Topic administration: CreateTopics, Metadata, CreatePartitions, DeleteTopics,
DescribeConfigs — through confluent-kafka's AdminClient and kafka-python's
KafkaAdminClient, with Kafka's error codes."""

import time

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (ConfigResource, ConfigSource, NewPartitions, NewTopic,
                                   ResourceType)

from helpers import admin, create_topic, produce, topic_exists, wait_for_topic

TIMEOUT = 30


def _create(bootstrap, *topics, **kw):
    fs = admin(bootstrap).create_topics(list(topics), request_timeout=TIMEOUT, **kw)
    return {name: f for name, f in fs.items()}


def _error_code(future):
    with pytest.raises(KafkaException) as ei:
        future.result(timeout=TIMEOUT)
    return ei.value.args[0].code()


def _wait_gone(bootstrap, name, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not topic_exists(bootstrap, name):
            return
        time.sleep(0.2)
    raise AssertionError(f"topic {name} still listed {timeout}s after deletion")


# --------------------------------------------------------------------------- confluent-kafka

def test_create_topic_with_partitions_and_configs_is_listed_and_described(broker, topic_name):
    fs = _create(broker.bootstrap, NewTopic(topic_name, num_partitions=3, replication_factor=1,
                                            config={"retention.ms": "123456789",
                                                    "cleanup.policy": "delete"}))
    assert fs[topic_name].result(timeout=TIMEOUT) is None
    wait_for_topic(broker.bootstrap, topic_name, 3)

    md = admin(broker.bootstrap).list_topics(timeout=TIMEOUT)
    assert topic_name in md.topics
    t = md.topics[topic_name]
    assert sorted(t.partitions) == [0, 1, 2]
    broker_ids = set(md.brokers)
    assert len(broker_ids) == 1
    for p in t.partitions.values():
        assert p.leader in broker_ids
        assert p.replicas == [p.leader]
        assert p.isrs == [p.leader]

    res = ConfigResource(ResourceType.TOPIC, topic_name)
    cfg = admin(broker.bootstrap).describe_configs([res])[res].result(timeout=TIMEOUT)
    assert cfg["retention.ms"].value == "123456789"
    assert cfg["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert cfg["cleanup.policy"].value == "delete"


def test_create_topic_with_default_partition_count_uses_broker_num_partitions(broker, topic_name):
    # num_partitions=-1 / replication_factor=-1 means "broker default" (CreateTopics v4+).
    fs = _create(broker.bootstrap, NewTopic(topic_name, num_partitions=-1, replication_factor=-1))
    fs[topic_name].result(timeout=TIMEOUT)
    wait_for_topic(broker.bootstrap, topic_name, 2)  # BASE_PROPS num.partitions=2


def test_create_existing_topic_fails_with_topic_already_exists(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    fs = _create(broker.bootstrap, NewTopic(topic_name, num_partitions=5, replication_factor=1))
    assert _error_code(fs[topic_name]) == KafkaError.TOPIC_ALREADY_EXISTS
    # The original topic is untouched.
    wait_for_topic(broker.bootstrap, topic_name, 2)


def test_create_topic_replication_factor_above_broker_count_fails_with_invalid_replication_factor(
        broker, topic_name):
    fs = _create(broker.bootstrap, NewTopic(topic_name, num_partitions=1, replication_factor=3))
    assert _error_code(fs[topic_name]) == KafkaError.INVALID_REPLICATION_FACTOR
    assert not topic_exists(broker.bootstrap, topic_name)


def test_create_topic_with_invalid_name_fails_with_invalid_topic(broker):
    name = "bad topic name!"
    fs = _create(broker.bootstrap, NewTopic(name, num_partitions=1, replication_factor=1))
    assert _error_code(fs[name]) == KafkaError.TOPIC_EXCEPTION


def test_create_topic_with_invalid_config_value_fails_with_invalid_config(broker, topic_name):
    fs = _create(broker.bootstrap, NewTopic(topic_name, num_partitions=1, replication_factor=1,
                                            config={"cleanup.policy": "not-a-policy"}))
    assert _error_code(fs[topic_name]) == KafkaError.INVALID_CONFIG
    assert not topic_exists(broker.bootstrap, topic_name)


def test_validate_only_create_does_not_create_the_topic(broker, topic_name):
    fs = _create(broker.bootstrap, NewTopic(topic_name, num_partitions=2, replication_factor=1),
                 validate_only=True)
    assert fs[topic_name].result(timeout=TIMEOUT) is None
    time.sleep(0.5)
    assert not topic_exists(broker.bootstrap, topic_name)


def test_more_than_10000_partitions_in_one_request_fail_with_policy_violation(broker, topic_name):
    # Kafka's controller counts every topic's partitions (-1: num.partitions) and refuses the
    # whole request past 10,000, before it creates anything.
    names = [f"{topic_name}-a", f"{topic_name}-b", f"{topic_name}-c"]
    fs = _create(broker.bootstrap,
                 NewTopic(names[0], num_partitions=6000, replication_factor=1),
                 NewTopic(names[1], num_partitions=3999, replication_factor=1),
                 NewTopic(names[2], num_partitions=-1, replication_factor=-1))  # 2
    for name in names:
        with pytest.raises(KafkaException) as ei:
            fs[name].result(timeout=TIMEOUT)
        err = ei.value.args[0]
        assert err.code() == KafkaError.POLICY_VIOLATION, (name, err)
        assert "Excessively large number of partitions per request." in err.str(), (name, err)
    for name in names:
        assert not topic_exists(broker.bootstrap, name)
    # Fewer pass (validated only: nothing is created).
    fs = _create(broker.bootstrap,
                 NewTopic(names[0], num_partitions=3000, replication_factor=1),
                 NewTopic(names[1], num_partitions=2000, replication_factor=1),
                 validate_only=True)
    for name in names[:2]:
        assert fs[name].result(timeout=TIMEOUT) is None


def test_describe_topics_reports_partitions_and_leader(broker, topic_name):
    from confluent_kafka import TopicCollection

    create_topic(broker.bootstrap, topic_name, partitions=4)
    fs = admin(broker.bootstrap).describe_topics(TopicCollection([topic_name]),
                                                 request_timeout=TIMEOUT)
    desc = fs[topic_name].result(timeout=TIMEOUT)
    assert desc.name == topic_name
    assert not desc.is_internal
    assert [p.id for p in desc.partitions] == [0, 1, 2, 3]
    for p in desc.partitions:
        assert p.leader is not None
        assert [n.id for n in p.replicas] == [p.leader.id]
        assert [n.id for n in p.isr] == [p.leader.id]


def test_describe_unknown_topic_fails_with_unknown_topic_or_partition(broker, topic_name):
    from confluent_kafka import TopicCollection

    fs = admin(broker.bootstrap).describe_topics(TopicCollection([topic_name]),
                                                 request_timeout=TIMEOUT)
    assert _error_code(fs[topic_name]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert not topic_exists(broker.bootstrap, topic_name)


def test_create_partitions_grows_topic_and_new_partitions_accept_writes(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    fs = admin(broker.bootstrap).create_partitions([NewPartitions(topic_name, 3)],
                                                   request_timeout=TIMEOUT)
    assert fs[topic_name].result(timeout=TIMEOUT) is None
    wait_for_topic(broker.bootstrap, topic_name, 3)
    delivered, _ = produce(broker.bootstrap, topic_name,
                           [{"value": b"p2", "partition": 2}, {"value": b"p1", "partition": 1}])
    assert sorted((d.partition, d.offset) for d in delivered) == [(1, 0), (2, 0)]


@pytest.mark.parametrize("new_total", [1, 2], ids=["same-count", "fewer"])
def test_create_partitions_not_increasing_count_fails_with_invalid_partitions(
        broker, topic_name, new_total):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    fs = admin(broker.bootstrap).create_partitions([NewPartitions(topic_name, new_total)],
                                                   request_timeout=TIMEOUT)
    assert _error_code(fs[topic_name]) == KafkaError.INVALID_PARTITIONS
    wait_for_topic(broker.bootstrap, topic_name, 2)


def test_create_partitions_for_unknown_topic_fails_with_unknown_topic_or_partition(
        broker, topic_name):
    fs = admin(broker.bootstrap).create_partitions([NewPartitions(topic_name, 3)],
                                                   request_timeout=TIMEOUT)
    assert _error_code(fs[topic_name]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_topic_removes_it_from_metadata(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    produce(broker.bootstrap, topic_name, [{"value": b"x"}])
    fs = admin(broker.bootstrap).delete_topics([topic_name], request_timeout=TIMEOUT)
    assert fs[topic_name].result(timeout=TIMEOUT) is None
    _wait_gone(broker.bootstrap, topic_name)
    md = admin(broker.bootstrap).list_topics(topic=topic_name, timeout=TIMEOUT)
    assert md.topics[topic_name].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_unknown_topic_fails_with_unknown_topic_or_partition(broker, topic_name):
    fs = admin(broker.bootstrap).delete_topics([topic_name], request_timeout=TIMEOUT)
    assert _error_code(fs[topic_name]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_deleted_topic_can_be_recreated_empty(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce(broker.bootstrap, topic_name, [{"value": b"old"}] * 3)
    admin(broker.bootstrap).delete_topics([topic_name])[topic_name].result(timeout=TIMEOUT)
    _wait_gone(broker.bootstrap, topic_name)
    # Deletion completes asynchronously in Kafka; retry the create while it finishes.
    deadline = time.monotonic() + 30
    while True:
        fs = _create(broker.bootstrap, NewTopic(topic_name, num_partitions=1, replication_factor=1))
        try:
            fs[topic_name].result(timeout=TIMEOUT)
            break
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    wait_for_topic(broker.bootstrap, topic_name, 1)
    from helpers import watermarks
    assert watermarks(broker.bootstrap, topic_name) == (0, 0)


def test_describe_configs_returns_defaults_for_unset_topic_configs(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1, config={"retention.bytes": "1048576"})
    res = ConfigResource(ResourceType.TOPIC, topic_name)
    cfg = admin(broker.bootstrap).describe_configs([res])[res].result(timeout=TIMEOUT)
    assert cfg["retention.bytes"].value == "1048576"
    assert cfg["retention.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not cfg["retention.bytes"].is_default
    # Unset configs are reported with their (broker) default.
    assert cfg["cleanup.policy"].value == "delete"
    assert cfg["cleanup.policy"].is_default
    assert cfg["message.timestamp.type"].value == "CreateTime"
    assert cfg["compression.type"].value == "producer"
    assert cfg["max.message.bytes"].value == "1048588"
    for name in ("segment.bytes", "retention.ms", "min.insync.replicas"):
        assert name in cfg


def test_describe_configs_for_unknown_topic_fails_with_unknown_topic_or_partition(
        broker, topic_name):
    res = ConfigResource(ResourceType.TOPIC, topic_name)
    fut = admin(broker.bootstrap).describe_configs([res])[res]
    assert _error_code(fut) == KafkaError.UNKNOWN_TOPIC_OR_PART


# --------------------------------------------------------------------------- kafka-python

@pytest.fixture
def kp_admin(broker):
    from kafka import KafkaAdminClient
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        yield a
    finally:
        a.close()


def test_kafka_python_create_list_describe_delete_topic(broker, kp_admin, topic_name):
    kp_admin.create_topics({topic_name: {"num_partitions": 3, "replication_factor": 1,
                                         "configs": {"retention.ms": "3600000"}}})
    wait_for_topic(broker.bootstrap, topic_name, 3)
    assert topic_name in kp_admin.list_topics()

    (desc,) = kp_admin.describe_topics([topic_name])
    assert desc["name"] == topic_name
    assert desc["error_code"] == 0
    assert sorted(p["partition_index"] for p in desc["partitions"]) == [0, 1, 2]

    kp_admin.delete_topics([topic_name])
    _wait_gone(broker.bootstrap, topic_name)


def test_kafka_python_duplicate_create_raises_topic_already_exists(broker, kp_admin, topic_name):
    from kafka.errors import TopicAlreadyExistsError
    create_topic(broker.bootstrap, topic_name, partitions=1)
    with pytest.raises(TopicAlreadyExistsError):
        kp_admin.create_topics({topic_name: {"num_partitions": 1, "replication_factor": 1}})


@pytest.mark.parametrize("partitions", [0, -5], ids=["zero", "negative"])
def test_kafka_python_create_with_non_positive_partitions_fails_with_invalid_partitions(
        broker, kp_admin, topic_name, partitions):
    # confluent-kafka validates partition counts client-side; kafka-python sends them as-is.
    r = kp_admin.create_topics({topic_name: {"num_partitions": partitions,
                                             "replication_factor": 1}},
                               raise_errors=False)
    (t,) = r["topics"]
    assert t["error_code"] == 37  # INVALID_PARTITIONS
    assert not topic_exists(broker.bootstrap, topic_name)


@pytest.mark.parametrize("rf", [0, 2], ids=["zero", "above-broker-count"])
def test_kafka_python_create_with_bad_replication_factor_fails_with_invalid_replication_factor(
        broker, kp_admin, topic_name, rf):
    from kafka.errors import InvalidReplicationFactorError
    with pytest.raises(InvalidReplicationFactorError):
        kp_admin.create_topics({topic_name: {"num_partitions": 1, "replication_factor": rf}})
    assert not topic_exists(broker.bootstrap, topic_name)


def test_kafka_python_create_partitions_and_describe_configs(broker, kp_admin, topic_name):
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType
    create_topic(broker.bootstrap, topic_name, partitions=1, config={"retention.ms": "7200000"})
    kp_admin.create_partitions({topic_name: 4})
    wait_for_topic(broker.bootstrap, topic_name, 4)

    cfg = kp_admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, topic_name)],
                                    config_filter="all")
    entries = cfg["topic"][topic_name]
    assert entries["retention.ms"]["value"] == "7200000"
    assert entries["cleanup.policy"]["value"] == "delete"


def test_incremental_alter_configs_sets_and_deletes_topic_config(broker, topic_name):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    create_topic(broker.bootstrap, topic_name, partitions=1, config={"retention.ms": "100000"})
    a = admin(broker.bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", "50000", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res])[res].result(timeout=TIMEOUT)

    def describe():
        r = ConfigResource(ResourceType.TOPIC, topic_name)
        return admin(broker.bootstrap).describe_configs([r])[r].result(timeout=TIMEOUT)

    cfg = describe()
    assert cfg["retention.ms"].value == "200000"
    assert cfg["max.message.bytes"].value == "50000"

    res = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    a.incremental_alter_configs([res])[res].result(timeout=TIMEOUT)
    cfg = describe()
    assert cfg["retention.ms"].is_default
    assert cfg["retention.ms"].value == "604800000"  # back to the broker default (7 days)
    assert cfg["max.message.bytes"].value == "50000"


def test_incremental_alter_configs_with_invalid_value_fails_with_invalid_config(broker,
                                                                                topic_name):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    create_topic(broker.bootstrap, topic_name, partitions=1)
    res = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "not-a-number", incremental_operation=AlterConfigOpType.SET)])
    fut = admin(broker.bootstrap).incremental_alter_configs([res])[res]
    assert _error_code(fut) == KafkaError.INVALID_CONFIG


def test_describe_broker_configs_reports_broker_settings(broker):
    md = admin(broker.bootstrap).list_topics(timeout=TIMEOUT)
    (broker_id,) = md.brokers
    res = ConfigResource(ResourceType.BROKER, str(broker_id))
    cfg = admin(broker.bootstrap).describe_configs([res])[res].result(timeout=TIMEOUT)
    assert cfg["num.partitions"].value == "2"
    assert cfg["auto.create.topics.enable"].value == "true"
    assert cfg["message.max.bytes"].value == "1048588"
