"""Dynamic broker configs (BROKER config resources, type 4), as Kafka 4.4 accepts them.

Kafka decides which broker settings AlterConfigs may change at run time and where
(`DynamicBrokerConfig`): some per broker only, some also as the cluster-wide default (the
empty resource name), the rest never. A client library's own broker test suite sets
`sasl.kerberos.min.time.before.relogin` on a broker and reads it back; this file checks that
and every refusal's exact code and message, with confluent-kafka where its admin client can
say it and raw requests where it cannot (it refuses an empty broker name), and with Kafka's
own `kafka-configs` tool. Every test runs on both targets.

Strata accepts and stores the Kafka settings it has no use for (Kerberos, thread pools), as it
ignores them in its properties file; it refuses, with its own message, the settings it reads
only at start-up, so that a change never seems to apply when it does not.
"""

from __future__ import annotations

import re
import socket
import struct
import time

import pytest

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from conftest import TARGET
from helpers import admin, create_topic
from test_group_configs import describe, inc_alter, kafka_configs

BROKER = 4
SET, DELETE, APPEND = 0, 1, 2
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3
INVALID_REQUEST = 42
RELOGIN = "sasl.kerberos.min.time.before.relogin"


@pytest.fixture(scope="module")
def dbroker(module_broker_factory):
    return module_broker_factory(name="dynamic-broker-configs")


def node_id(b) -> str:
    (broker_id,) = admin(b.bootstrap).list_topics(timeout=30).brokers
    return str(broker_id)


def described(b, name: str, key: str, until, timeout: float = 15.0) -> dict:
    """`key` as DescribeConfigs lists it on broker resource `name`, once `until(entry)` holds
    (Kafka applies a change when its metadata record reaches the broker: a moment later).
    The entry is None when the key is not listed."""
    deadline = time.monotonic() + timeout
    while True:
        err, msg, configs = describe(b.bootstrap, name, rtype=BROKER)
        assert err == 0, msg
        entry = configs.get(key)
        if until(entry) or time.monotonic() > deadline:
            assert until(entry), (key, entry)
            return entry


def names_in(message: str) -> set[str]:
    """The setting names of a Kafka refusal ("...: [a, b]"; Kafka prints them in hash order)."""
    m = re.search(r": \[([^\]]*)\]$", message or "")
    assert m, message
    return {n.strip() for n in m.group(1).split(",")}


def test_a_per_broker_setting_is_set_described_and_deleted_with_the_admin_client(dbroker):
    me = node_id(dbroker)
    a = admin(dbroker.bootstrap)
    res = ConfigResource(ResourceType.BROKER, me, incremental_configs=[
        ConfigEntry(RELOGIN, "58000", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res])[res].result(timeout=30)

    c = described(dbroker, me, RELOGIN,
                  lambda e: e and (RELOGIN, "58000", DYNAMIC_BROKER_CONFIG) in e["synonyms"])
    assert c["source"] == DYNAMIC_BROKER_CONFIG, c
    assert (c["read_only"], c["sensitive"], c["type"]) == (0, 0, 5), c  # LONG
    # The admin client's own DescribeConfigs sees it too.
    seen = admin(dbroker.bootstrap).describe_configs(
        [ConfigResource(ResourceType.BROKER, me)])
    entry = list(seen.values())[0].result(timeout=30)[RELOGIN]
    assert entry.source == DYNAMIC_BROKER_CONFIG, entry

    assert inc_alter(dbroker.bootstrap, me, [(RELOGIN, DELETE, None)], rtype=BROKER) == (0, None)
    described(dbroker, me, RELOGIN, lambda e: e is None or all(
        src != DYNAMIC_BROKER_CONFIG for _, _, src in e["synonyms"]))


def test_kafka_configs_sets_a_broker_setting_and_a_cluster_default(dbroker):
    me = node_id(dbroker)
    code, out = kafka_configs(dbroker.bootstrap, "--alter", "--entity-type", "brokers",
                              "--entity-name", me, "--add-config",
                              "sasl.kerberos.ticket.renew.jitter=0.07")
    assert code == 0, out
    code, out = kafka_configs(dbroker.bootstrap, "--alter", "--entity-type", "brokers",
                              "--entity-default", "--add-config", "num.replica.fetchers=2")
    assert code == 0, out
    code, out = kafka_configs(dbroker.bootstrap, "--describe", "--entity-type", "brokers",
                              "--entity-name", me)
    assert code == 0, out
    assert "sasl.kerberos.ticket.renew.jitter=0.07" in out, out
    code, out = kafka_configs(dbroker.bootstrap, "--describe", "--entity-type", "brokers",
                              "--entity-default")
    assert code == 0, out
    assert "num.replica.fetchers=2" in out, out
    code, out = kafka_configs(dbroker.bootstrap, "--alter", "--entity-type", "brokers",
                              "--entity-default", "--delete-config", "num.replica.fetchers")
    assert code == 0, out


def test_a_cluster_default_is_listed_on_the_default_resource_and_as_a_synonym(dbroker):
    me = node_id(dbroker)
    assert inc_alter(dbroker.bootstrap, "", [("background.threads", SET, "5")],
                     rtype=BROKER) == (0, None)
    c = described(dbroker, "", "background.threads", lambda e: e is not None)
    assert (c["value"], c["source"]) == ("5", DYNAMIC_DEFAULT_BROKER_CONFIG), c
    # Only dynamic defaults are listed on the default resource.
    _, _, configs = describe(dbroker.bootstrap, "", rtype=BROKER)
    assert all(c["source"] == DYNAMIC_DEFAULT_BROKER_CONFIG for c in configs.values()), configs
    # This broker's own value comes first, the default after it.
    assert inc_alter(dbroker.bootstrap, me, [("background.threads", SET, "6")],
                     rtype=BROKER) == (0, None)
    c = described(dbroker, me, "background.threads", lambda e: e and e["synonyms"][:2] == [
        ("background.threads", "6", DYNAMIC_BROKER_CONFIG),
        ("background.threads", "5", DYNAMIC_DEFAULT_BROKER_CONFIG)])
    assert c["source"] == DYNAMIC_BROKER_CONFIG, c
    if TARGET == "strata":
        # Kafka's value is its running thread pool's size, which lags the stored setting.
        assert c["value"] == "6", c
    for name in (me, ""):
        assert inc_alter(dbroker.bootstrap, name, [("background.threads", DELETE, None)],
                         rtype=BROKER) == (0, None)


def test_per_broker_settings_are_refused_at_the_cluster_default(dbroker):
    for key, value in ((RELOGIN, "58000"), ("listeners", "PLAINTEXT://127.0.0.1:1"),
                       ("listener.name.plaintext.ssl.cipher.suites", "TLS_AES_128_GCM_SHA256")):
        err, msg = inc_alter(dbroker.bootstrap, "", [(key, SET, value)], rtype=BROKER)
        assert err == INVALID_REQUEST, (key, msg)
        assert msg == ("Cannot update these configs at default cluster level, broker id must "
                       f"be specified: [{key}]"), msg


def test_settings_that_never_change_at_run_time_are_refused(dbroker):
    me = node_id(dbroker)
    for name in (me, ""):
        err, msg = inc_alter(dbroker.bootstrap, name,
                             [("broker.rack", SET, "r1"), ("log.dirs", SET, "/elsewhere")],
                             rtype=BROKER)
        assert err == INVALID_REQUEST, msg
        assert msg.startswith("Cannot update these configs dynamically: ["), msg
        assert names_in(msg) == {"broker.rack", "log.dirs"}, msg
    # Named before a bad value elsewhere in the same request.
    err, msg = inc_alter(dbroker.bootstrap, me, [("node.id", SET, "2"),
                                                 ("log.retention.ms", SET, "abc")], rtype=BROKER)
    assert (err, msg) == (INVALID_REQUEST, "Cannot update these configs dynamically: [node.id]")


def test_a_security_store_setting_needs_a_listener_prefix(dbroker):
    err, msg = inc_alter(dbroker.bootstrap, node_id(dbroker),
                         [("ssl.keystore.location", SET, "/nonexistent.jks")], rtype=BROKER)
    assert (err, msg) == (INVALID_REQUEST, "These security configs can be dynamically updated "
                          "only per-listener using the listener prefix: [ssl.keystore.location]")


@pytest.mark.parametrize("key,value,reason", [
    (RELOGIN, "abc", "Not a number of type LONG"),
    ("log.retention.ms", "abc", "Not a number of type LONG"),
    ("message.max.bytes", "abc", "Not a number of type INT"),
    ("max.connections", "abc", "Not a number of type INT"),
    ("background.threads", "0", "Value must be at least 1"),
    ("num.io.threads", "-3", "Value must be at least 1"),
])
def test_values_are_checked_with_kafkas_types_and_bounds(dbroker, key, value, reason):
    for name in (node_id(dbroker), ""):
        err, msg = inc_alter(dbroker.bootstrap, name, [(key, SET, value)], rtype=BROKER)
        assert (err, msg) == (INVALID_REQUEST,
                              f"Invalid value {value} for configuration {key}: {reason}")


def test_another_brokers_id_is_refused(dbroker):
    me = node_id(dbroker)
    err, msg = inc_alter(dbroker.bootstrap, "7", [("background.threads", SET, "5")],
                         rtype=BROKER)
    assert (err, msg) == (INVALID_REQUEST, f"Unexpected broker id, expected {me}, but received 7")


def test_a_list_setting_takes_append(dbroker):
    me = node_id(dbroker)
    key = "sasl.kerberos.principal.to.local.rules"
    assert inc_alter(dbroker.bootstrap, me, [(key, SET, "RULE:[1:$1]")],
                     rtype=BROKER) == (0, None)
    assert inc_alter(dbroker.bootstrap, me, [(key, APPEND, "DEFAULT")],
                     rtype=BROKER) == (0, None)
    described(dbroker, me, key, lambda e: e and (key, "RULE:[1:$1],DEFAULT",
                                                 DYNAMIC_BROKER_CONFIG) in e["synonyms"])
    assert inc_alter(dbroker.bootstrap, me, [(key, DELETE, None)], rtype=BROKER) == (0, None)


def test_a_setting_strata_reads_at_start_up_is_refused_on_strata_and_applied_on_kafka(dbroker):
    """The documented difference: Kafka changes a listener's TLS client authentication at
    once; Strata reads `ssl.client.auth` only when it opens its listeners and says so rather
    than store a value that does nothing."""
    me = node_id(dbroker)
    err, msg = inc_alter(dbroker.bootstrap, me, [("ssl.client.auth", SET, "none")],
                         rtype=BROKER)
    if TARGET == "kafka":
        assert (err, msg) == (0, None)
        inc_alter(dbroker.bootstrap, me, [("ssl.client.auth", DELETE, None)], rtype=BROKER)
    else:
        assert (err, msg) == (INVALID_REQUEST, "Strata reads these configs only at start-up: set "
                              "them in the broker's properties and restart it: "
                              "[ssl.client.auth]")


def connects(bootstrap: str, source: str) -> socket.socket | None:
    """A connection from `source` that answers ApiVersions, or None if the broker closes it."""
    host, port = bootstrap.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))
    try:
        s.sendall(struct.pack(">ihhih", 10, 18, 0, 1, -1))  # ApiVersions v0, no client id
        head = s.recv(4)
        if len(head) < 4:
            s.close()
            return None
        return s
    except OSError:
        s.close()
        return None


def test_a_per_ip_connection_limit_applies_at_once(dbroker):
    """max.connections.per.ip.overrides set dynamically holds 127.0.0.2 to one connection
    (new ones are closed) and deleting it lets them in again."""
    me = node_id(dbroker)
    key = "max.connections.per.ip.overrides"
    assert inc_alter(dbroker.bootstrap, me, [(key, SET, "127.0.0.2:1")], rtype=BROKER) == (0, None)
    held = []
    try:
        deadline = time.monotonic() + 15
        while True:  # Kafka applies it when its metadata record arrives
            first = connects(dbroker.bootstrap, "127.0.0.2")
            assert first is not None
            held.append(first)
            if connects(dbroker.bootstrap, "127.0.0.2") is None:
                break
            assert time.monotonic() < deadline, "the override never applied"
            for s in held:
                s.close()
            held.clear()
            time.sleep(0.5)
        # Other addresses are not held to it.
        other = connects(dbroker.bootstrap, "127.0.0.1")
        assert other is not None
        other.close()
        assert inc_alter(dbroker.bootstrap, me, [(key, DELETE, None)], rtype=BROKER) == (0, None)
        deadline = time.monotonic() + 15
        while (second := connects(dbroker.bootstrap, "127.0.0.2")) is None:
            assert time.monotonic() < deadline, "the override was never removed"
            time.sleep(0.5)
        second.close()
    finally:
        for s in held:
            s.close()
        inc_alter(dbroker.bootstrap, me, [(key, DELETE, None)], rtype=BROKER)
    # A host that does not resolve is accepted (and matches no connection), as in Kafka.
    assert inc_alter(dbroker.bootstrap, me, [(key, SET, "no-such-host.invalid:1")],
                     rtype=BROKER) == (0, None)
    assert inc_alter(dbroker.bootstrap, me, [(key, DELETE, None)], rtype=BROKER) == (0, None)

def test_replication_throttle_rates_and_throttled_replicas_are_checked_as_kafka_checks_them(
        dbroker, topic_name):
    """What kafka-reassign-partitions --throttle sets: the brokers' rates and the topic's
    throttled replicas (the throttle itself is exercised on a Strata cluster in
    test_cluster.py)."""
    TOPIC, INVALID_CONFIG = 2, 40
    for name in (node_id(dbroker), ""):
        for value, reason in (("-1", "Value must be at least 0"),
                              ("abc", "Not a number of type LONG")):
            err, msg = inc_alter(dbroker.bootstrap, name,
                                 [("leader.replication.throttled.rate", SET, value)],
                                 rtype=BROKER)
            assert (err, msg) == (INVALID_REQUEST, f"Invalid value {value} for configuration "
                                  f"leader.replication.throttled.rate: {reason}")
    assert inc_alter(dbroker.bootstrap, "", [("follower.replication.throttled.rate", SET,
                                              "1000000")], rtype=BROKER) == (0, None)
    c = described(dbroker, "", "follower.replication.throttled.rate", lambda e: e is not None)
    assert (c["value"], c["source"]) == ("1000000", DYNAMIC_DEFAULT_BROKER_CONFIG), c
    assert inc_alter(dbroker.bootstrap, "", [("follower.replication.throttled.rate", DELETE,
                                              None)], rtype=BROKER) == (0, None)

    create_topic(dbroker.bootstrap, topic_name, partitions=2)
    key = "leader.replication.throttled.replicas"
    for bad in ("x", " 0 : 1 ", "*,0:1"):
        err, msg = inc_alter(dbroker.bootstrap, topic_name, [(key, SET, bad)], rtype=TOPIC)
        assert err == INVALID_CONFIG, (bad, msg)
        assert msg.endswith(f"{key} must be the literal '*' or a list of replicas in the "
                            "following format: [partitionId]:[brokerId],[partitionId]:"
                            "[brokerId],..."), msg
    for good in ("0:1,1:1", "*", "0:1,"):
        assert inc_alter(dbroker.bootstrap, topic_name, [(key, SET, good)],
                         rtype=TOPIC) == (0, None), good
    _, _, configs = describe(dbroker.bootstrap, topic_name, keys=[key], rtype=TOPIC)
    assert (configs[key]["value"], configs[key]["source"], configs[key]["type"]) == \
        ("0:1,", 1, 7), configs
