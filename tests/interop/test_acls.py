"""ACLs: Kafka's StandardAuthorizer semantics with real clients.

One broker with `authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer`,
a PLAINTEXT listener whose principal (User:ANONYMOUS) is a super user, used as the
administrator (kafka-acls does the same with an admin principal), and a SASL_PLAINTEXT listener
with PLAIN users alice and bob. ACLs are created with confluent-kafka's AdminClient.

For librdkafka, kafka-python and the Java client: a principal without READ on a topic, without
WRITE on it, without READ on its consumer group, with a PREFIXED ACL, and with a DENY that
overrides an ALLOW, each gets the refusal Kafka gives, and nothing is written or read. Metadata
hides the topics a principal may not describe. The ACL APIs themselves (Create/Describe/
DeleteAcls) are checked for filters, validation messages, the CLUSTER permission they need and
persistence across a restart.

The same properties start the reference Kafka (STRATA_TEST_TARGET=kafka).
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                   AclPermissionType, ResourcePatternType, ResourceType)

from conftest import free_port
from helpers import QUIET, admin, create_topic, produce, watermarks
from test_security import CLIENTS, Spec, attempt, java, java_conf, kp_conf, rdk_conf, values

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
# The group the assign-only consumers of test_security's helpers carry (librdkafka looks up
# its coordinator even when it only assigns partitions).
ASSIGN_GROUP = "security-assign-only"

# The refusal each client shows (error name or exception class).
TOPIC_REFUSED = {"librdkafka": r"TOPIC_AUTHORIZATION_FAILED",
                 "kafka-python": r"TopicAuthorizationFailedError",
                 "java": r"TopicAuthorizationException"}
GROUP_REFUSED = {"librdkafka": r"GROUP_AUTHORIZATION_FAILED",
                 "kafka-python": r"GroupAuthorizationFailedError",
                 "java": r"GroupAuthorizationException"}


class Cluster:
    def __init__(self, broker, sasl_port):
        self.broker = broker
        self.sasl_port = sasl_port

    @property
    def admin_bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"


def start_acl_broker(module_broker_factory) -> Cluster:
    """PLAINTEXT (super user ANONYMOUS) + SASL_PLAINTEXT (PLAIN: alice, bob), with the
    StandardAuthorizer."""
    b = module_broker_factory(start=False)
    sasl_port = free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    b.props.update({
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
    })
    b.start()
    return Cluster(b, sasl_port)


@pytest.fixture(scope="module")
def cluster(module_broker_factory) -> Cluster:
    c = start_acl_broker(module_broker_factory)
    allow(c, ResourceType.GROUP, ASSIGN_GROUP, "User:*", AclOperation.READ)
    return c


def user(name: str) -> Spec:
    return Spec("SASL_PLAINTEXT", "PLAIN", name, USERS[name])


def allow(c: Cluster, rt, name, principal, op, pattern=ResourcePatternType.LITERAL,
          permission=AclPermissionType.ALLOW):
    binding = AclBinding(rt, name, pattern, principal, "*", op, permission)
    a = admin(c.admin_bootstrap)  # keep the client alive until the result is in
    for f in a.create_acls([binding]).values():
        f.result(timeout=30)


def deny(c: Cluster, rt, name, principal, op):
    allow(c, rt, name, principal, op, permission=AclPermissionType.DENY)


def seeded(c: Cluster, topic: str, n: int = 3) -> list[bytes]:
    """A topic with n records, created and written by the administrator."""
    create_topic(c.admin_bootstrap, topic)
    vals = values(n, prefix="seed")
    produce(c.admin_bootstrap, topic, [{"value": v, "partition": 0} for v in vals])
    return vals


def errors_match(got, pattern):
    text = "\n".join(map(str, got.errors))
    assert re.search(pattern, text), f"wanted /{pattern}/ in the client's errors:\n{text}"


# --------------------------------------------------------------------------- topics

@pytest.mark.parametrize("client", CLIENTS)
def test_consumer_without_read_on_the_topic_is_refused(cluster, topic_name, client):
    seeded(cluster, topic_name)
    # WRITE implies DESCRIBE, so alice sees the topic but may not read it.
    allow(cluster, ResourceType.TOPIC, topic_name, "User:alice", AclOperation.WRITE)
    got = attempt(client, cluster.sasl_bootstrap, user("alice"), topic_name, want=3, timeout=6)
    errors_match(got, TOPIC_REFUSED[client])
    assert got.consumed == []


@pytest.mark.parametrize("client", CLIENTS)
def test_producer_without_write_on_the_topic_is_refused(cluster, topic_name, client):
    seeded(cluster, topic_name, n=1)
    allow(cluster, ResourceType.TOPIC, topic_name, "User:alice", AclOperation.READ)
    # WRITE on some other topic: idempotent producers (kafka-python's default) need it, or
    # IDEMPOTENT_WRITE on the cluster, for InitProducerId; otherwise they fail there with
    # CLUSTER_AUTHORIZATION_FAILED before reaching the topic (as on Kafka).
    allow(cluster, ResourceType.TOPIC, f"{topic_name}-elsewhere", "User:alice",
          AclOperation.WRITE)
    got = attempt(client, cluster.sasl_bootstrap, user("alice"), topic_name, values(3),
                  timeout=6)
    errors_match(got, TOPIC_REFUSED[client])
    assert got.produced == []
    assert watermarks(cluster.admin_bootstrap, topic_name) == (0, 1)


@pytest.mark.parametrize("client", CLIENTS)
def test_read_and_write_acls_let_the_principal_in(cluster, topic_name, client):
    create_topic(cluster.admin_bootstrap, topic_name)
    for op in (AclOperation.READ, AclOperation.WRITE):
        allow(cluster, ResourceType.TOPIC, topic_name, "User:alice", op)
    got = attempt(client, cluster.sasl_bootstrap, user("alice"), topic_name, values(4), want=4,
                  timeout=30)
    assert got.produced == values(4), got.errors
    assert got.consumed == values(4), got.errors


@pytest.mark.parametrize("client", CLIENTS)
def test_prefixed_acl_covers_matching_topics_only(cluster, client):
    prefix = f"pfx-{uuid.uuid4().hex[:8]}-"
    inside, outside = prefix + "orders", f"other-{uuid.uuid4().hex[:8]}"
    for t in (inside, outside):
        create_topic(cluster.admin_bootstrap, t)
    for op in (AclOperation.READ, AclOperation.WRITE):
        allow(cluster, ResourceType.TOPIC, prefix, "User:alice", op,
              pattern=ResourcePatternType.PREFIXED)
    got = attempt(client, cluster.sasl_bootstrap, user("alice"), inside, values(2), want=2,
                  timeout=30)
    assert got.produced == values(2), got.errors
    assert got.consumed == values(2), got.errors
    got = attempt(client, cluster.sasl_bootstrap, user("alice"), outside, values(2), timeout=6)
    errors_match(got, TOPIC_REFUSED[client])
    assert got.produced == []
    assert watermarks(cluster.admin_bootstrap, outside) == (0, 0)


@pytest.mark.parametrize("client", CLIENTS)
def test_deny_overrides_allow(cluster, topic_name, client):
    seeded(cluster, topic_name)
    # Everyone may do anything with the topic, but alice is denied READ.
    allow(cluster, ResourceType.TOPIC, topic_name, "User:*", AclOperation.ALL)
    deny(cluster, ResourceType.TOPIC, topic_name, "User:alice", AclOperation.READ)
    got = attempt(client, cluster.sasl_bootstrap, user("alice"), topic_name, want=3, timeout=6)
    errors_match(got, TOPIC_REFUSED[client])
    assert got.consumed == []
    got = attempt(client, cluster.sasl_bootstrap, user("bob"), topic_name, want=3, timeout=30)
    assert got.consumed == values(3, prefix="seed"), got.errors


# --------------------------------------------------------------------------- groups

def _group_consume(client, c: Cluster, s: Spec, topic, group, timeout=8.0):
    """Subscribes with a consumer group; returns (consumed values, errors)."""
    consumed, errors = [], []
    if client == "librdkafka":
        consumer = Consumer({"bootstrap.servers": c.sasl_bootstrap, **QUIET, **rdk_conf(s),
                             "group.id": group, "auto.offset.reset": "earliest",
                             "error_cb": lambda e: errors.append(f"{e.name()}: {e.str()}")})
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and not errors:
                m = consumer.poll(0.3)
                if m is None:
                    continue
                if m.error():
                    errors.append(f"{m.error().name()}: {m.error().str()}")
                else:
                    consumed.append(m.value())
        finally:
            consumer.close()
    elif client == "kafka-python":
        from kafka import KafkaConsumer
        consumer = None
        try:
            consumer = KafkaConsumer(topic, bootstrap_servers=c.sasl_bootstrap, group_id=group,
                                     auto_offset_reset="earliest",
                                     request_timeout_ms=int(timeout * 1000), **kp_conf(s))
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                for recs in consumer.poll(timeout_ms=300).values():
                    consumed.extend(r.value for r in recs)
        except Exception as e:  # noqa: BLE001 - the refusal under test
            errors.append(f"{type(e).__name__}: {e}")
        finally:
            if consumer is not None:
                consumer.close()
    else:
        r = java(c.sasl_bootstrap, "consume", "--topic", topic, "--count", 1, "--group", group,
                 "--timeout-ms", int(timeout * 1000), *java_conf(s))
        consumed = [x["value"].encode() for x in r.lines if "offset" in x]
        errors = r.errors
    return consumed, errors


@pytest.mark.parametrize("client", CLIENTS)
def test_consumer_group_without_group_read_is_refused(cluster, topic_name, client):
    seeded(cluster, topic_name)
    allow(cluster, ResourceType.TOPIC, topic_name, "User:alice", AclOperation.READ)
    group = f"no-acl-{uuid.uuid4().hex[:8]}"
    consumed, errors = _group_consume(client, cluster, user("alice"), topic_name, group)
    assert consumed == []
    text = "\n".join(errors)
    assert re.search(GROUP_REFUSED[client], text), text
    # With READ on the group, the same consumer gets the records.
    allow(cluster, ResourceType.GROUP, group, "User:alice", AclOperation.READ)
    consumed, errors = _group_consume(client, cluster, user("alice"), topic_name, group,
                                      timeout=30)
    assert consumed[:1] == [b"seed0"], errors


# --------------------------------------------------------------------------- metadata

def test_metadata_lists_only_topics_the_principal_may_describe(cluster):
    tag = uuid.uuid4().hex[:8]
    visible, hidden = f"visible-{tag}", f"hidden-{tag}"
    for t in (visible, hidden):
        create_topic(cluster.admin_bootstrap, t)
    allow(cluster, ResourceType.TOPIC, visible, "User:bob", AclOperation.DESCRIBE)
    bob = admin(cluster.sasl_bootstrap, **rdk_conf(user("bob")))
    md = bob.list_topics(timeout=20)
    names = set(md.topics)
    assert visible in names
    assert hidden not in names
    assert "__consumer_offsets" not in names
    # Asking for the hidden topic by name is refused, not answered.
    md = bob.list_topics(hidden, timeout=20)
    assert md.topics[hidden].error is not None
    assert md.topics[hidden].error.name() == "TOPIC_AUTHORIZATION_FAILED"
    assert md.topics[hidden].partitions == {}

    from kafka import KafkaConsumer
    kc = KafkaConsumer(bootstrap_servers=cluster.sasl_bootstrap, **kp_conf(user("bob")))
    try:
        topics = kc.topics()
    finally:
        kc.close()
    assert visible in topics and hidden not in topics


# --------------------------------------------------------------------------- the ACL APIs

def test_acl_apis_filter_validate_and_persist(cluster):
    a = admin(cluster.admin_bootstrap)
    tag = uuid.uuid4().hex[:8]
    literal = AclBinding(ResourceType.TOPIC, f"api-{tag}", ResourcePatternType.LITERAL,
                         "User:carol", "*", AclOperation.READ, AclPermissionType.ALLOW)
    prefixed = AclBinding(ResourceType.TOPIC, f"api-{tag[:4]}", ResourcePatternType.PREFIXED,
                          "User:carol", "10.0.0.1", AclOperation.WRITE, AclPermissionType.DENY)
    for f in a.create_acls([literal, prefixed]).values():
        f.result(timeout=30)

    def described(pattern_type, name=f"api-{tag}"):
        flt = AclBindingFilter(ResourceType.TOPIC, name, pattern_type, None, None,
                               AclOperation.ANY, AclPermissionType.ANY)
        return set(a.describe_acls(flt).result(timeout=30))

    assert described(ResourcePatternType.MATCH) == {literal, prefixed}
    assert described(ResourcePatternType.LITERAL) == {literal}
    assert described(ResourcePatternType.ANY) == {literal}

    # Validation: Kafka's INVALID_REQUEST messages (confluent-kafka calls CLUSTER "BROKER").
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL,
                     "User:carol", "*", AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException, match="The only valid name for the CLUSTER resource is "
                                             "kafka-cluster"):
        a.create_acls([bad])[bad].result(timeout=30)

    # A principal without ALTER / DESCRIBE on the cluster may not touch ACLs.
    alice = admin(cluster.sasl_bootstrap, **rdk_conf(user("alice")))
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        alice.create_acls([literal])[literal].result(timeout=30)
    # (librdkafka drops DescribeAcls' top-level error code, so ask with kafka-python.)
    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePatternFilter)
    from kafka.admin import ResourceType as KResourceType
    from kafka.errors import ClusterAuthorizationFailedError
    kp_admin = KafkaAdminClient(bootstrap_servers=cluster.sasl_bootstrap, **kp_conf(user("alice")))
    try:
        any_topic = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                              permission_type=ACLPermissionType.ANY,
                              resource_pattern=ResourcePatternFilter(
                                  KResourceType.TOPIC, None, ACLResourcePatternType.ANY))
        with pytest.raises(ClusterAuthorizationFailedError):
            kp_admin.describe_acls(any_topic)
    finally:
        kp_admin.close()

    # ACLs survive a restart (Strata keeps them in its metadata file; Kafka in its metadata log).
    cluster.broker.restart()
    a = admin(cluster.admin_bootstrap)
    assert described(ResourcePatternType.MATCH) == {literal, prefixed}

    # DeleteAcls returns what each filter removed.
    flt = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, "User:carol", None,
                           AclOperation.ANY, AclPermissionType.ANY)
    deleted = a.delete_acls([flt])[flt].result(timeout=30)
    assert set(deleted) == {literal, prefixed}
    assert described(ResourcePatternType.MATCH) == set()
