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
  state) and DESCRIBE on every topic assigned to a member (else TOPIC_AUTHORIZATION_FAILED "The
  group has described topic(s) that the client is not authorized to describe.", nothing
  described); subscribed topics are not checked; authorized operations when asked for.
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

from helpers import admin, create_topic
from rawkafka import Conn, Reader, encode_compact_string as cs, encode_uvarint as uv
from test_acls import USERS, Cluster, allow, start_acl_broker, user
from test_share_group_admin import describe_offsets_body
from test_offsets_by_topic_id import topic_id, wait_for_coordinator
from test_security import java_conf
from test_share_groups import (JOIN_S, _SKIP, apps, produce_numbered,  # noqa: F401
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
    return start_acl_broker(module_broker_factory)


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
    """Polls cond() until it is truthy; returns it. what: a text or a callable giving one."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what() if callable(what) else what} not reached within "
                                 f"{timeout}s")
        time.sleep(0.3)


def join(conn, group: str, member: str, topics: list[str]):
    """Joins a share group with raw heartbeats until the member has a non-empty assignment
    -> (member epoch, {topic id: [partitions]})."""
    err, msg, epoch, first = heartbeat(conn, group, member, 0, topics)
    assert (err, msg) == (NONE, None) and epoch > 0, (err, msg, epoch)
    if first:  # assigned at once (a later heartbeat carries an assignment only when it changes)
        return epoch, first

    def assigned():
        nonlocal epoch
        err, msg, epoch, assignment = heartbeat(conn, group, member, epoch, topics)
        assert (err, msg) == (NONE, None)
        return assignment
    assignment = wait_for(assigned, JOIN_S, f"an assignment in group {group}")
    return epoch, assignment


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
    r = Reader(conn.request_flexible(API_DESCRIBE_OFFSETS, version,
                                     describe_offsets_body(group, topics)))
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


# ---------------------------------------------------------------------------- heartbeat

def test_heartbeat_needs_group_read_and_describe_on_every_subscribed_topic(cluster):
    group = new_group(cluster)
    readable, described, hidden = fresh("hb-read"), fresh("hb-desc"), fresh("hb-hidden")
    new_topics(cluster, readable, described, hidden)
    allow(cluster, TOPIC, readable, "User:alice", READ)  # READ implies DESCRIBE
    allow(cluster, TOPIC, described, "User:alice", DESCRIBE)
    member = kafka_uuid()
    refused_group = (GROUP_DENIED, None, 0, None)
    refused_topic = (TOPIC_DENIED, None, 0, None)
    with SaslConn(cluster.sasl_bootstrap, "alice") as conn:
        # No ACL on the group, then DESCRIBE only: READ is what a member needs.
        assert heartbeat(conn, group, member, 0, [readable]) == refused_group
        allow(cluster, GROUP, group, "User:alice", DESCRIBE)
        assert heartbeat(conn, group, member, 0, [readable]) == refused_group
        allow(cluster, GROUP, group, "User:alice", READ)
        # One subscribed topic it may not describe refuses the whole heartbeat, also a topic
        # that does not exist (its existence is not revealed).
        assert heartbeat(conn, group, member, 0, [readable, hidden]) == refused_topic
        assert heartbeat(conn, group, member, 0, [hidden]) == refused_topic
        assert heartbeat(conn, group, member, 0, [fresh("hb-missing")]) == refused_topic
        # None of the refusals made a group.
        with Conn(cluster.admin_bootstrap) as a:
            assert describe_group(a, [group])[group][:2] == \
                (GROUP_ID_NOT_FOUND, f"Group {group} not found.")
        # DESCRIBE (or READ) on every subscribed topic: the member joins and gets both.
        epoch, assignment = join(conn, group, member, [readable, described])
        ids = {topic_id(cluster.admin_bootstrap, t): t for t in (readable, described)}
        assert {ids.get(t, t): p for t, p in assignment.items()} == {readable: [0], described: [0]}
        with Conn(cluster.admin_bootstrap) as a:
            err, _msg, state, members, _ops = describe_group(a, [group])[group]
        assert (err, state, members) == (NONE, "Stable", [(member, sorted([readable, described]))])
        # A member of the group that adds an undescribable topic is refused too.
        assert heartbeat(conn, group, member, epoch, [readable, hidden]) == refused_topic
        # The member leaves.
        assert heartbeat(conn, group, member, -1, None)[:3] == (NONE, None, -1)


# ---------------------------------------------------------------------------- fetch / ack

def test_share_fetch_needs_group_read_and_read_on_each_topic(cluster):
    group = new_group(cluster)
    readable, described, hidden = fresh("sf-read"), fresh("sf-desc"), fresh("sf-hidden")
    ids = new_topics(cluster, readable, described, hidden)
    allow(cluster, TOPIC, readable, "User:alice", READ)
    # DESCRIBE and WRITE, not READ: a member may subscribe to it but not fetch from it.
    allow(cluster, TOPIC, described, "User:alice", DESCRIBE)
    allow(cluster, TOPIC, described, "User:alice", WRITE)
    member = kafka_uuid()
    every = {ids[t]: [0] for t in (readable, described, hidden)}
    group_refused = (GROUP_DENIED, None, {})
    with SaslConn(cluster.sasl_bootstrap, "alice") as conn:
        # Without READ on the group: a top-level refusal, whatever the session epoch.
        assert share_fetch(conn, group, member, 0, every) == group_refused
        assert share_fetch(conn, group, member, 3, every) == group_refused
        allow(cluster, GROUP, group, "User:alice", DESCRIBE)
        assert share_fetch(conn, group, member, 0, every) == group_refused
        allow(cluster, GROUP, group, "User:alice", READ)
        join(conn, group, member, [readable, described])
        # READ on the group: the readable topic's records are acquired; the others are refused
        # per partition, without a message and without records.
        refused = {(ids[described], 0): (TOPIC_DENIED, None, []),
                   (ids[hidden], 0): (TOPIC_DENIED, None, [])}
        answers = []

        def fetched():
            answers.append(share_fetch(conn, group, member, 0, every))
            return answers[-1][2].get((ids[readable], 0), (0, None, []))[2]
        wait_for(fetched, JOIN_S, "records acquired")
        for err, msg, parts in answers:
            assert (err, msg) == (NONE, None) and \
                {k: v for k, v in parts.items() if k in refused} == refused, answers
        assert answers[-1][2] == {(ids[readable], 0): (NONE, None, [(0, 4, 1)]), **refused}
        # The refused partitions are part of the share session: an incremental fetch naming
        # no topic reports them again (and nothing new for the readable one).
        assert share_fetch(conn, group, member, 1, {}) == (NONE, None, refused)
        assert share_fetch(conn, group, member, 2, {ids[readable]: [0]}) == (NONE, None, refused)
        assert share_fetch(conn, group, member, -1, {})[0] == NONE
    # bob may read every topic but not the group.
    for t in (readable, described, hidden):
        allow(cluster, TOPIC, t, "User:bob", READ)
    with SaslConn(cluster.sasl_bootstrap, "bob") as conn:
        assert share_fetch(conn, group, kafka_uuid(), 0, every) == group_refused


def test_share_acknowledge_needs_group_read_and_read_on_each_topic(cluster):
    group = new_group(cluster)
    readable, described, revoked = fresh("ack-read"), fresh("ack-desc"), fresh("ack-revoked")
    ids = new_topics(cluster, readable, described, revoked)
    for t in (readable, revoked):
        allow(cluster, TOPIC, t, "User:alice", READ)
    allow(cluster, TOPIC, described, "User:alice", DESCRIBE)
    allow(cluster, GROUP, group, "User:alice", READ)
    member = kafka_uuid()
    every = {ids[t]: [0] for t in (readable, described, revoked)}
    with SaslConn(cluster.sasl_bootstrap, "alice") as conn:
        join(conn, group, member, [readable, described, revoked])
        acquired = {}

        def fetched():
            _err, _msg, parts = share_fetch(conn, group, member, 0, every)
            acquired.update({k: v for k, v in parts.items() if v[2]})
            return {(ids[readable], 0), (ids[revoked], 0)} <= set(acquired)
        wait_for(fetched, JOIN_S, "records acquired from both readable topics")
        assert acquired[(ids[readable], 0)] == (NONE, None, [(0, 4, 1)])
        assert acquired[(ids[revoked], 0)] == (NONE, None, [(0, 4, 1)])
        # READ on one topic is taken away while its records are acquired: a fetch of the
        # session naming it refuses it (once the broker has the change).
        revoke(cluster, TOPIC, revoked, "User:alice", READ)
        epoch = 1

        def refused():
            nonlocal epoch
            err, _msg, parts = share_fetch(conn, group, member, epoch, {ids[revoked]: [0]},
                                           wait_ms=100)
            epoch += 1
            assert err == NONE
            return parts.get((ids[revoked], 0)) == (TOPIC_DENIED, None, [])
        wait_for(refused, 30, "the revoked topic refused")
        # Acknowledging: the readable topic's records are accepted; the others are refused
        # per partition, without a message.
        every_ack = {(ids[t], 0): [(0, 4, ACCEPT)] for t in (readable, described, revoked)}
        assert share_acknowledge(conn, group, member, epoch, every_ack) == (NONE, None, {
            (ids[readable], 0): (NONE, None),
            (ids[described], 0): (TOPIC_DENIED, None),
            (ids[revoked], 0): (TOPIC_DENIED, None)})
        # bob, with DESCRIBE only on the group: a top-level refusal.
        allow(cluster, GROUP, group, "User:bob", DESCRIBE)
        with SaslConn(cluster.sasl_bootstrap, "bob") as other:
            assert share_acknowledge(other, group, member, 1, every_ack) == (GROUP_DENIED, None, {})
        # The accepted records are done (no lag); the refused acknowledgement left the
        # revoked topic's records unaccepted (they still count as lag).
        seen = []
        with Conn(cluster.admin_bootstrap) as a:
            def lags():
                _e, _m, parts = describe_offsets(a, 1, group, {readable: [0], revoked: [0]})
                seen.append({name: v[3] for (name, _p), v in parts.items()})
                return seen[-1] == {readable: 0, revoked: 5}
            wait_for(lags, 30, lambda: f"lag 0 on {readable} and 5 on {revoked} ({seen[-1]})")


# ---------------------------------------------------------------------------- describe

def test_share_group_describe_needs_group_describe_and_describe_on_assigned_topics(cluster):
    group = new_group(cluster)
    t1, t2, missing = fresh("sgd-1"), fresh("sgd-2"), fresh("sgd-missing-topic")
    ids = new_topics(cluster, t1, t2)
    for t in (t1, t2, missing):
        allow(cluster, TOPIC, t, "User:alice", DESCRIBE)
    allow(cluster, GROUP, group, "User:alice", READ)
    member = kafka_uuid()
    missing_group = fresh("sgd-missing-group")
    refused = (GROUP_DENIED, None, "", [], NOT_ASKED)
    topic_refused = (TOPIC_DENIED, "The group has described topic(s) that the client is not "
                                   "authorized to describe.", "", [], NOT_ASKED)
    with SaslConn(cluster.sasl_bootstrap, "alice") as conn:
        # Subscribed to a topic that does not exist: never assigned.
        epoch, assignment = join(conn, group, member, [t1, t2, missing])

        def both_assigned():
            nonlocal epoch, assignment
            err, _msg, epoch, got = heartbeat(conn, group, member, epoch, [t1, t2, missing])
            assert err == NONE
            assignment = got if got is not None else assignment
            return set(assignment) == {ids[t1], ids[t2]}
        wait_for(both_assigned, JOIN_S, "both topics assigned")
        with SaslConn(cluster.sasl_bootstrap, "bob") as bob:
            # No ACL: refused alike for a share group and a group that does not exist.
            assert describe_group(bob, [group, missing_group], True) == \
                {group: refused, missing_group: refused}
            # DESCRIBE on the group is not enough while a member is assigned a topic bob may
            # not describe (the group's details are withheld).
            allow(cluster, GROUP, group, "User:bob", DESCRIBE)
            assert describe_group(bob, [group, missing_group], True) == \
                {group: topic_refused, missing_group: refused}
            allow(cluster, TOPIC, t1, "User:bob", DESCRIBE)
            assert describe_group(bob, [group], True)[group] == topic_refused
            # DESCRIBE (here through READ) on every assigned topic: described, with the
            # subscription to the topic bob may not describe (subscriptions are not checked).
            allow(cluster, TOPIC, t2, "User:bob", READ)
            want = (NONE, None, "Stable", [(member, sorted([t1, t2, missing]))])
            assert describe_group(bob, [group], True)[group] == want + (OPS_DESCRIBE,)
            assert describe_group(bob, [group], False)[group] == want + (NOT_ASKED,)
        # The member's user, with READ on the group, may read and describe it.
        assert describe_group(conn, [group], True)[group] == want + (OPS_READ_DESCRIBE,)
        assert heartbeat(conn, group, member, -1, None)[0] == NONE


# ---------------------------------------------------------------------------- offsets APIs

def test_describe_share_group_offsets_needs_group_and_topic_describe(cluster):
    group = fresh("share-acl-off")
    t1, t2, hidden = fresh("dso-1"), fresh("dso-2"), fresh("dso-hidden")
    ids = new_topics(cluster, t1, t2, hidden)
    wait_for_coordinator(cluster.admin_bootstrap, group)
    with Conn(cluster.admin_bootstrap) as a:
        assert alter_offsets(a, group, {t1: {0: 1}, t2: {0: 2}, hidden: {0: 3}})[:2] == \
            (NONE, None)
    allow(cluster, TOPIC, t1, "User:bob", DESCRIBE)
    allow(cluster, TOPIC, t2, "User:bob", READ)
    asked = {t1: [0], t2: [0], hidden: [0, 1], "dso-no-such-topic": [0]}
    with SaslConn(cluster.sasl_bootstrap, "bob") as bob:
        for version in (0, 1):
            # Without DESCRIBE on the group: a group-level refusal without a message.
            assert describe_offsets(bob, version, group, asked) == (GROUP_DENIED, None, {})
            assert describe_offsets(bob, version, group, None) == (GROUP_DENIED, None, {})
        allow(cluster, GROUP, group, "User:bob", DESCRIBE)
        for version in (0, 1):
            lag = (lambda n: n) if version else (lambda n: None)
            refused = (ZERO_ID, -1, 0, lag(-1), TOPIC_DENIED, TOPIC_DENIED_MSG)
            # A topic bob may not describe, existing or not: refused per partition.
            assert describe_offsets(bob, version, group, asked) == (NONE, None, {
                (t1, 0): (ids[t1], 1, 0, lag(4), NONE, None),
                (t2, 0): (ids[t2], 2, 0, lag(3), NONE, None),
                (hidden, 0): refused, (hidden, 1): refused,
                ("dso-no-such-topic", 0): refused})
            # All topics (null): the undescribable one is left out.
            assert describe_offsets(bob, version, group, None) == (NONE, None, {
                (t1, 0): (ids[t1], 1, 0, lag(4), NONE, None),
                (t2, 0): (ids[t2], 2, 0, lag(3), NONE, None)})


def test_alter_share_group_offsets_needs_group_read_and_topic_read(cluster):
    group = fresh("share-acl-alter")
    readable, described, hidden = fresh("aso-read"), fresh("aso-desc"), fresh("aso-hidden")
    ids = new_topics(cluster, readable, described, hidden)
    wait_for_coordinator(cluster.admin_bootstrap, group)
    allow(cluster, TOPIC, readable, "User:bob", READ)
    allow(cluster, TOPIC, described, "User:bob", DESCRIBE)
    offsets = {readable: {0: 1, 7: 1}, described: {0: 2}, hidden: {0: 3},
               "aso-no-such-topic": {0: 1}}
    group_refused = (GROUP_DENIED, GROUP_DENIED_MSG, {})
    with SaslConn(cluster.sasl_bootstrap, "bob") as bob:
        # No ACL on the group, then DESCRIBE only: refused, and no group is made.
        assert alter_offsets(bob, group, offsets) == group_refused
        allow(cluster, GROUP, group, "User:bob", DESCRIBE)
        assert alter_offsets(bob, group, offsets) == group_refused
        with Conn(cluster.admin_bootstrap) as a:
            assert describe_group(a, [group])[group][0] == GROUP_ID_NOT_FOUND
        # READ on the group: each topic needs READ (checked before it is looked up). Kafka
        # names the topic id of a refused topic that exists.
        allow(cluster, GROUP, group, "User:bob", READ)
        assert alter_offsets(bob, group, offsets) == (NONE, None, {
            (readable, 0): (ids[readable], NONE, None),
            (readable, 7): (ids[readable], UNKNOWN_TOPIC_OR_PARTITION,
                            "This server does not host this topic-partition."),
            (described, 0): (ids[described], TOPIC_DENIED, TOPIC_DENIED_MSG),
            (hidden, 0): (ids[hidden], TOPIC_DENIED, TOPIC_DENIED_MSG),
            ("aso-no-such-topic", 0): (ZERO_ID, TOPIC_DENIED, TOPIC_DENIED_MSG)})
    # Only the readable topic got a start offset.
    with Conn(cluster.admin_bootstrap) as a:
        assert describe_offsets(a, 1, group, None) == \
            (NONE, None, {(readable, 0): (ids[readable], 1, 0, 4, NONE, None)})
        assert describe_group(a, [group])[group][:3] == (NONE, None, "Empty")


def test_delete_share_group_offsets_needs_group_delete_and_topic_read(cluster):
    group = fresh("share-acl-del")
    readable, described, hidden = fresh("dlo-read"), fresh("dlo-desc"), fresh("dlo-hidden")
    ids = new_topics(cluster, readable, described, hidden)
    wait_for_coordinator(cluster.admin_bootstrap, group)
    with Conn(cluster.admin_bootstrap) as a:
        assert alter_offsets(a, group, {t: {0: 1} for t in ids})[:2] == (NONE, None)
    allow(cluster, TOPIC, readable, "User:bob", READ)
    allow(cluster, TOPIC, described, "User:bob", DESCRIBE)
    topics = [readable, described, hidden, "dlo-no-such-topic"]
    group_refused = (GROUP_DENIED, GROUP_DENIED_MSG, {})
    with SaslConn(cluster.sasl_bootstrap, "bob") as bob:
        # No ACL, DESCRIBE, then READ on the group: DELETE is what it takes.
        assert delete_offsets(bob, group, topics) == group_refused
        allow(cluster, GROUP, group, "User:bob", DESCRIBE)
        assert delete_offsets(bob, group, topics) == group_refused
        allow(cluster, GROUP, group, "User:bob", READ)
        assert delete_offsets(bob, group, topics) == group_refused
        allow(cluster, GROUP, group, "User:bob", DELETE)
        # Each topic needs READ; a refused one comes back with the zero topic id.
        refused = (ZERO_ID, TOPIC_DENIED, TOPIC_DENIED_MSG)
        assert delete_offsets(bob, group, topics) == (NONE, None, {
            readable: (ids[readable], NONE, None), described: refused, hidden: refused,
            "dlo-no-such-topic": refused})
    # Only the readable topic's offsets are gone.
    with Conn(cluster.admin_bootstrap) as a:
        assert describe_offsets(a, 1, group, None) == (NONE, None, {
            (described, 0): (ids[described], 1, 0, 4, NONE, None),
            (hidden, 0): (ids[hidden], 1, 0, 4, NONE, None)})


# ---------------------------------------------------------------------------- Java client

def _refused_app(app, *wanted: str, timeout=JOIN_S):
    """Waits for the app's first poll_error, closes it; asserts every error is one of wanted
    and no record came."""
    app.wait_for(lambda e: e.get("event") in ("poll_error", "error"), timeout, "a refusal")
    app.proc.send("close")
    assert app.proc.wait(60) == 0, app.history()
    errors = [e["error"] for e in app.events() if e.get("event") in ("poll_error", "error")]
    assert errors and set(errors) <= set(wanted), (set(errors), app.history())
    assert app.records() == [], app.history()


def _committed(app, n: int, others=()):
    """Waits until the app has accepted offsets 0..n-1 and every commitSync it made for them has
    returned (closing it during one would interrupt it)."""
    def done():
        polls = {r["poll"] for r in app.records()}
        return set(app.accepted()) >= set(range(n)) and \
            len(app.events("commit")) >= len(polls)
    app.wait_until(done, JOIN_S + 20, f"{app.name} accepts and commits every record",
                   [app, *others])


@needs_java
def test_java_share_consumer_needs_read_on_the_group(cluster, apps):
    topic = fresh("java-acl")
    new_topics(cluster, topic, records=10)
    granted, refused = new_group(cluster), new_group(cluster)
    for who in ("alice", "bob"):
        allow(cluster, TOPIC, topic, f"User:{who}", READ)
    allow(cluster, GROUP, granted, "User:alice", READ)
    alice = apps(cluster.sasl_bootstrap, granted, topic, "accept", "alice",
                 *java_conf(user("alice")))
    bob = apps(cluster.sasl_bootstrap, refused, topic, "accept", "bob-refused",
               *java_conf(user("bob")))
    _committed(alice, 10, [bob])
    _refused_app(bob, f"GroupAuthorizationException: Not authorized to access group: {refused}")
    alice.close()
    assert sorted(alice.accepted()) == list(range(10))
    assert all(r["delivery_count"] == 1 for r in alice.records())
    # With READ on its group, bob's next consumer gets every record (none was acquired for
    # that group before).
    allow(cluster, GROUP, refused, "User:bob", READ)
    later = apps(cluster.sasl_bootstrap, refused, topic, "accept", "bob-allowed",
                 *java_conf(user("bob")))
    _committed(later, 10)
    later.close()
    assert [(r["offset"], r["delivery_count"]) for r in later.records()] == \
        [(o, 1) for o in range(10)]


@needs_java
def test_java_share_consumer_needs_read_on_the_topic(cluster, apps):
    described, hidden = fresh("java-desc"), fresh("java-hidden")
    new_topics(cluster, described, hidden, records=5)
    g1, g2 = new_group(cluster), new_group(cluster)
    allow(cluster, GROUP, g1, "User:alice", READ)
    allow(cluster, GROUP, g2, "User:bob", READ)
    allow(cluster, TOPIC, described, "User:alice", DESCRIBE)
    # DESCRIBE only: the member joins and is assigned the partition; its ShareFetch is refused.
    alice = apps(cluster.sasl_bootstrap, g1, described, "accept", "alice-describe-only",
                 *java_conf(user("alice")))
    # Nothing on the topic: its metadata is refused (the client names the topic) and so is the
    # heartbeat (TOPIC_AUTHORIZATION_FAILED with no message: the client shows the default one).
    bob = apps(cluster.sasl_bootstrap, g2, hidden, "accept", "bob-no-topic-acl",
               *java_conf(user("bob")))
    _refused_app(alice, f"TopicAuthorizationException: Not authorized to access topics: "
                        f"[{described}]", timeout=JOIN_S + 20)
    _refused_app(bob, "TopicAuthorizationException: Topic authorization failed.",
                 f"TopicAuthorizationException: Not authorized to access topics: [{hidden}]")
