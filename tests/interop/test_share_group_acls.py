"""Share-group authorization (KIP-932 with ACLs), as Kafka 4.4 does it.

One broker with Kafka's StandardAuthorizer, a PLAINTEXT listener whose principal
(User:ANONYMOUS) is a super user and serves as the administrator, and a SASL_PLAINTEXT listener
with PLAIN users alice and bob: the same setup as test_acls.py. ACLs are created with
confluent-kafka's AdminClient; every group and topic name is fresh per test.

Raw requests over an authenticated connection (SaslHandshake v1 + SaslAuthenticate v2) check
each API's exact codes and messages:

* ShareGroupHeartbeat: READ on the group (else GROUP_AUTHORIZATION_FAILED) and DESCRIBE on
  every subscribed topic, existing or not (else TOPIC_AUTHORIZATION_FAILED for the whole
  heartbeat); neither refusal carries a message, nor creates the group.
* ShareFetch / ShareAcknowledge: READ on the group (else a top-level
  GROUP_AUTHORIZATION_FAILED with no partitions) and READ on each topic (DESCRIBE and WRITE are
  not enough): TOPIC_AUTHORIZATION_FAILED per partition, no message, nothing acquired. A
  refused partition stays in the share session and is refused again in every incremental
  fetch; READ revoked mid-session refuses the acknowledgement of records already acquired.
* ShareGroupDescribe: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED, no message, empty
  state); the members' subscribed topics are not checked; authorized operations as asked.
* DescribeShareGroupOffsets: DESCRIBE on the group (else a group-level
  GROUP_AUTHORIZATION_FAILED without message) and on each asked topic (else start -1, lag -1,
  the zero topic id and TOPIC_AUTHORIZATION_FAILED "Topic authorization failed." per
  partition; with topics null the undescribable ones are left out).
* AlterShareGroupOffsets: READ on the group and on each topic; DeleteShareGroupOffsets:
  DELETE on the group and READ on each topic ("Group authorization failed." / "Topic
  authorization failed."); a refused topic is not changed, a refused group is not created.

And end to end with the Java KafkaShareConsumer (tests/java ShareConsumerApp with SASL client
properties): a user with READ on the group and the topic consumes every record; without READ
on the group poll() throws GroupAuthorizationException and nothing is delivered (until the ACL
is added); with DESCRIBE only on the topic, or nothing on it, TopicAuthorizationException.

Runs against Strata or, with STRATA_TEST_TARGET=kafka, the reference Kafka 4.4 (same
properties). The Java tests are skipped when the Java classes are not built
(scripts/build-java-tests.sh).
"""

from __future__ import annotations

import base64
import struct
import time
import uuid

import pytest
from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType,
                                   ResourcePatternType, ResourceType)

from conftest import free_port
from helpers import admin, create_topic
from rawkafka import Conn, Reader, encode_compact_string as cs, encode_uvarint as uv
from test_acls import JAAS, USERS, Cluster, allow, user
from test_offsets_by_topic_id import topic_id, wait_for_coordinator
from test_security import java_conf
from test_share_groups import (JOIN_S, _SKIP, ShareApp, apps, produce_numbered,  # noqa: F401
                               set_group_configs)

pytestmark = pytest.mark.groups
needs_java = pytest.mark.skipif(_SKIP is not None, reason=f"Java share consumer: {_SKIP}")

API_SASL_HANDSHAKE, API_SASL_AUTHENTICATE = 17, 36
API_SHARE_GROUP_HEARTBEAT, API_SHARE_GROUP_DESCRIBE = 76, 77
API_SHARE_FETCH, API_SHARE_ACKNOWLEDGE = 78, 79
API_DESCRIBE_OFFSETS, API_ALTER_OFFSETS, API_DELETE_OFFSETS = 90, 91, 92

NONE, UNKNOWN_TOPIC_OR_PARTITION = 0, 3
TOPIC_DENIED, GROUP_DENIED, GROUP_ID_NOT_FOUND = 29, 30, 69
TOPIC_DENIED_MSG, GROUP_DENIED_MSG = "Topic authorization failed.", "Group authorization failed."
ACCEPT = 1
ZERO_ID = uuid.UUID(int=0)
NOT_ASKED = -2147483648  # authorized operations not asked for (or group refused)
# Authorized-operation bits of a group (AclOperation codes): READ 3, DESCRIBE 8.
OPS_DESCRIBE = 1 << 8
OPS_READ_DESCRIBE = (1 << 3) | (1 << 8)

READ, WRITE, DESCRIBE, DELETE = (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE,
                                 AclOperation.DELETE)
GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC


@pytest.fixture(scope="module")
def cluster(module_broker_factory) -> Cluster:
    """PLAINTEXT (super user ANONYMOUS) + SASL_PLAINTEXT (PLAIN: alice, bob), StandardAuthorizer."""
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


def revoke(c: Cluster, rt, name, principal, op):
    flt = AclBindingFilter(rt, name, ResourcePatternType.LITERAL, principal, None, op,
                           AclPermissionType.ALLOW)
    a = admin(c.admin_bootstrap)
    assert a.delete_acls([flt])[flt].result(timeout=30), f"no ACL {op} on {name} to revoke"


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def new_group(c: Cluster) -> str:
    """A fresh share-group name with share.auto.offset.reset=earliest (set by the admin); its
    coordinator is ready."""
    group = fresh("share-acl")
    set_group_configs(c.admin_bootstrap, group, {"share.auto.offset.reset": "earliest"})
    wait_for_coordinator(c.admin_bootstrap, group)
    return group


def new_topics(c: Cluster, *names: str, records: int = 5) -> dict[str, uuid.UUID]:
    """Creates one-partition topics with `records` records each -> {name: topic id}."""
    out = {}
    for name in names:
        create_topic(c.admin_bootstrap, name)
        produce_numbered(c.admin_bootstrap, name, 0, records)
        out[name] = topic_id(c.admin_bootstrap, name)
    return out


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what} not reached within {timeout}s"
        time.sleep(0.3)


def join(conn, group: str, member: str, topics: list[str]) -> dict:
    """Joins a share group with a raw heartbeat and heartbeats until the member has an
    assignment -> {topic id: [partitions]}."""
    err, msg, epoch, _ = heartbeat(conn, group, member, 0, topics)
    assert (err, msg) == (NONE, None) and epoch > 0

    def assigned():
        nonlocal epoch
        err, msg, epoch, assignment = heartbeat(conn, group, member, epoch, topics)
        assert (err, msg) == (NONE, None)
        return assignment
    return wait_for(assigned, JOIN_S, f"an assignment in group {group}")


# ---------------------------------------------------------------------------- connections

class SaslConn(Conn):
    """A raw connection authenticated with SASL/PLAIN (SaslHandshake v1, SaslAuthenticate v2)."""

    def __init__(self, bootstrap: str, name: str, timeout: float = 30.0):
        super().__init__(bootstrap, timeout)
        mech = b"PLAIN"
        r = Reader(self.request(API_SASL_HANDSHAKE, 1, struct.pack(">h", len(mech)) + mech))
        assert r.int16() == 0, "SaslHandshake PLAIN refused"
        token = b"\0" + name.encode() + b"\0" + USERS[name].encode()
        r = Reader(self.request_flexible(API_SASL_AUTHENTICATE, 2,
                                         uv(len(token) + 1) + token + b"\x00"))
        err, msg = r.int16(), r.compact_string()
        assert err == 0, f"SaslAuthenticate for {name}: {err} {msg}"


def kafka_uuid() -> str:
    """A member id as the Java client makes one (Uuid.toString: url-safe base64, 22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _uuid(r: Reader) -> uuid.UUID:
    u = uuid.UUID(bytes=r.d[r.i:r.i + 16])
    r.i += 16
    return u


# ---------------------------------------------------------------------------- raw requests

def heartbeat(conn: Conn, group: str, member: str, epoch: int, topics: list[str] | None):
    """ShareGroupHeartbeat v1 -> (error, message, member epoch, {topic_id: [partitions]} or
    None)."""
    body = cs(group) + cs(member) + struct.pack(">i", epoch) + cs(None)
    if topics is None:
        body += b"\x00"
    else:
        body += uv(len(topics) + 1) + b"".join(cs(t) for t in topics)
    body += b"\x00"
    r = Reader(conn.request_flexible(API_SHARE_GROUP_HEARTBEAT, 1, body))
    r.int32()  # throttle
    err, msg = r.int16(), r.compact_string()
    r.compact_string()  # member id
    member_epoch = r.int32()
    r.int32()  # heartbeat interval
    assignment = None
    if r.int8() >= 0:
        assignment = {}
        for _ in range(r.uvarint() - 1):
            tid = _uuid(r)
            assignment[tid] = [r.int32() for _ in range(r.uvarint() - 1)]
            r.skip_tagged_fields()
        r.skip_tagged_fields()
    return err, msg, member_epoch, assignment


def share_fetch(conn: Conn, group: str, member: str, epoch: int,
                topics: dict[uuid.UUID, list[int]], acks: dict | None = None, wait_ms: int = 500):
    """ShareFetch v1 -> (error, message, {(topic_id, partition): (error, message,
    [(first, last, delivery_count)])}). acks: {(topic_id, partition): [(first, last, type)]}."""
    acks = acks or {}
    body = cs(group) + cs(member) + struct.pack(">iiiiii", epoch, wait_ms, 1, 1 << 20, 500, 500)
    body += uv(len(topics) + 1)
    for tid, parts in topics.items():
        body += tid.bytes + uv(len(parts) + 1)
        for p in parts:
            batches = acks.get((tid, p), [])
            body += struct.pack(">i", p) + uv(len(batches) + 1)
            for first, last, kind in batches:
                body += struct.pack(">qq", first, last) + uv(2) + struct.pack(">b", kind) + b"\x00"
            body += b"\x00"
        body += b"\x00"
    body += uv(1) + b"\x00"  # no forgotten topics, tags
    r = Reader(conn.request_flexible(API_SHARE_FETCH, 1, body))
    r.int32()
    err, msg = r.int16(), r.compact_string()
    r.int32()  # acquisition lock timeout
    out = {}
    for _ in range(r.uvarint() - 1):
        tid = _uuid(r)
        for _ in range(r.uvarint() - 1):
            idx, perr, pmsg = r.int32(), r.int16(), r.compact_string()
            r.int16(), r.compact_string()  # acknowledge error
            r.int32(), r.int32()  # current leader
            r.skip_tagged_fields()
            n = r.uvarint() - 1  # records
            r.i += max(n, 0)
            acquired = []
            for _ in range(r.uvarint() - 1):
                acquired.append((r.int64(), r.int64(), r.int16()))
                r.skip_tagged_fields()
            r.skip_tagged_fields()
            out[(tid, idx)] = (perr, pmsg, acquired)
        r.skip_tagged_fields()
    return err, msg, out


def share_acknowledge(conn: Conn, group: str, member: str, epoch: int, acks: dict):
    """ShareAcknowledge v1; acks {(topic_id, partition): [(first, last, type)]} -> (error,
    message, {(topic_id, partition): (error, message)})."""
    by_topic: dict = {}
    for (tid, p), batches in acks.items():
        by_topic.setdefault(tid, {})[p] = batches
    body = cs(group) + cs(member) + struct.pack(">i", epoch) + uv(len(by_topic) + 1)
    for tid, parts in by_topic.items():
        body += tid.bytes + uv(len(parts) + 1)
        for p, batches in parts.items():
            body += struct.pack(">i", p) + uv(len(batches) + 1)
            for first, last, kind in batches:
                body += struct.pack(">qq", first, last) + uv(2) + struct.pack(">b", kind) + b"\x00"
            body += b"\x00"
        body += b"\x00"
    body += b"\x00"
    r = Reader(conn.request_flexible(API_SHARE_ACKNOWLEDGE, 1, body))
    r.int32()
    err, msg = r.int16(), r.compact_string()
    out = {}
    for _ in range(r.uvarint() - 1):
        tid = _uuid(r)
        for _ in range(r.uvarint() - 1):
            idx, perr, pmsg = r.int32(), r.int16(), r.compact_string()
            r.int32(), r.int32()
            r.skip_tagged_fields()
            r.skip_tagged_fields()
            out[(tid, idx)] = (perr, pmsg)
        r.skip_tagged_fields()
    return err, msg, out


def describe_group(conn: Conn, groups: list[str], authorized_operations: bool = False) -> dict:
    """ShareGroupDescribe v1 -> {group: (error, message, state, [(member id, [subscribed
    topics])], authorized operations)}."""
    body = uv(len(groups) + 1) + b"".join(cs(g) for g in groups)
    body += bytes([1 if authorized_operations else 0]) + b"\x00"
    r = Reader(conn.request_flexible(API_SHARE_GROUP_DESCRIBE, 1, body))
    r.int32()
    out = {}
    for _ in range(r.uvarint() - 1):
        err, msg, gid, state = r.int16(), r.compact_string(), r.compact_string(), r.compact_string()
        r.int32(), r.int32(), r.compact_string()  # epochs, assignor
        members = []
        for _ in range(r.uvarint() - 1):
            mid = r.compact_string()
            r.compact_string(), r.int32(), r.compact_string(), r.compact_string()
            subscribed = [r.compact_string() for _ in range(r.uvarint() - 1)]
            for _ in range(r.uvarint() - 1):
                r.i += 16
                r.compact_string()
                for _ in range(r.uvarint() - 1):
                    r.int32()
                r.skip_tagged_fields()
            r.skip_tagged_fields()
            r.skip_tagged_fields()
            members.append((mid, sorted(subscribed)))
        ops = r.int32()
        r.skip_tagged_fields()
        out[gid] = (err, msg, state, members, ops)
    return out


def describe_offsets(conn: Conn, version: int, group: str, topics: dict | None):
    """DescribeShareGroupOffsets v0/v1 for one group; topics {name: [partitions]} or None
    (all) -> (error, message, {(topic, partition): (topic id, start, leader epoch, lag, error,
    message)}); lag None at v0."""
    body = uv(2) + cs(group)
    if topics is None:
        body += b"\x00"
    else:
        body += uv(len(topics) + 1)
        for name, parts in topics.items():
            body += cs(name) + uv(len(parts) + 1) + b"".join(struct.pack(">i", p) for p in parts)
            body += b"\x00"
    body += b"\x00\x00"
    r = Reader(conn.request_flexible(API_DESCRIBE_OFFSETS, version, body))
    r.int32()
    assert r.uvarint() - 1 == 1
    assert r.compact_string() == group
    parts = {}
    for _ in range(r.uvarint() - 1):
        name, tid = r.compact_string(), _uuid(r)
        for _ in range(r.uvarint() - 1):
            idx, start, epoch = r.int32(), r.int64(), r.int32()
            lag = r.int64() if version >= 1 else None
            err, msg = r.int16(), r.compact_string()
            r.skip_tagged_fields()
            parts[(name, idx)] = (tid, start, epoch, lag, err, msg)
        r.skip_tagged_fields()
    err, msg = r.int16(), r.compact_string()
    return err, msg, parts


def alter_offsets(conn: Conn, group: str, offsets: dict):
    """AlterShareGroupOffsets v0; offsets {topic: {partition: start}} -> (error, message,
    {(topic, partition): (topic id, error, message)})."""
    body = cs(group) + uv(len(offsets) + 1)
    for name, parts in offsets.items():
        body += cs(name) + uv(len(parts) + 1)
        for p, off in parts.items():
            body += struct.pack(">iq", p, off) + b"\x00"
        body += b"\x00"
    body += b"\x00"
    r = Reader(conn.request_flexible(API_ALTER_OFFSETS, 0, body))
    r.int32()
    err, msg = r.int16(), r.compact_string()
    parts = {}
    for _ in range(r.uvarint() - 1):
        name, tid = r.compact_string(), _uuid(r)
        for _ in range(r.uvarint() - 1):
            idx, perr, pmsg = r.int32(), r.int16(), r.compact_string()
            r.skip_tagged_fields()
            parts[(name, idx)] = (tid, perr, pmsg)
        r.skip_tagged_fields()
    return err, msg, parts


def delete_offsets(conn: Conn, group: str, topics: list[str]):
    """DeleteShareGroupOffsets v0 -> (error, message, {topic: (topic id, error, message)})."""
    body = cs(group) + uv(len(topics) + 1) + b"".join(cs(t) + b"\x00" for t in topics) + b"\x00"
    r = Reader(conn.request_flexible(API_DELETE_OFFSETS, 0, body))
    r.int32()
    err, msg = r.int16(), r.compact_string()
    out = {}
    for _ in range(r.uvarint() - 1):
        name, tid = r.compact_string(), _uuid(r)
        out[name] = (tid, r.int16(), r.compact_string())
        r.skip_tagged_fields()
    return err, msg, out
