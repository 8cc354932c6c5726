"""Share-group admin APIs (KIP-932), raw: ShareGroupDescribe (77), DescribeShareGroupOffsets
(90, v0 and v1 with Lag), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92), ListGroups
v5 with a types filter and DeleteGroups on share groups, plus the output of Kafka's
ShareGroupCommand --describe. The members are tests/java's ShareConsumerApp (see
test_share_groups.py, whose helpers are reused). Expectations are Kafka 4.4's.

Skipped when the Java classes are not built (scripts/build-java-tests.sh)."""

from __future__ import annotations

import struct
import subprocess
import time
import uuid

import pytest

from helpers import _consumer, create_topic
from java_apps import JVM_OPTS, _java_bin, classpath
from rawkafka import Conn, Reader, encode_compact_string as cs, encode_uvarint as uv
from test_delete_groups import _find_coordinator, delete_groups
from test_share_groups import JOIN_S, _SKIP, apps, produce_numbered, share_group  # noqa: F401

pytestmark = [pytest.mark.skipif(_SKIP is not None, reason=f"Java share consumer: {_SKIP}"),
              pytest.mark.groups]

API_LIST_GROUPS, API_SHARE_GROUP_DESCRIBE = 16, 77
API_DESCRIBE_OFFSETS, API_ALTER_OFFSETS, API_DELETE_OFFSETS = 90, 91, 92
NONE, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP = 0, 69, 68
UNKNOWN_TOPIC_OR_PARTITION = 3

SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"


# ---------------------------------------------------------------------------- raw requests

def _conn(bootstrap: str, group: str) -> Conn:
    conn = Conn(bootstrap, timeout=30)
    _find_coordinator(conn, group)
    return conn


def share_group_describe(bootstrap: str, groups: list[str]) -> dict:
    """ShareGroupDescribe v1 -> {group: (error_code, error_message, state, epoch, [member ids])}."""
    body = uv(len(groups) + 1) + b"".join(cs(g) for g in groups) + b"\x00" + b"\x00"
    with _conn(bootstrap, groups[0]) as conn:
        r = Reader(conn.request_flexible(API_SHARE_GROUP_DESCRIBE, 1, body))
    r.int32()  # throttle
    out = {}
    for _ in range(r.uvarint() - 1):
        err, msg, gid, state = r.int16(), r.compact_string(), r.compact_string(), r.compact_string()
        epoch, _assignment_epoch, _assignor = r.int32(), r.int32(), r.compact_string()
        members = []
        for _ in range(r.uvarint() - 1):
            mid = r.compact_string()
            r.compact_string(), r.int32(), r.compact_string(), r.compact_string()  # rack..host
            for _ in range(r.uvarint() - 1):
                r.compact_string()  # subscribed topic names
            for _ in range(r.uvarint() - 1):  # assignment topic partitions
                r.i += 16
                r.compact_string()
                for _ in range(r.uvarint() - 1):
                    r.int32()
                r.skip_tagged_fields()
            r.skip_tagged_fields()  # assignment
            r.skip_tagged_fields()  # member
            members.append(mid)
        r.int32()  # authorized operations
        r.skip_tagged_fields()
        out[gid] = (err, msg, state, epoch, members)
    return out


def describe_offsets_body(group: str, topics: dict | None) -> bytes:
    """A DescribeShareGroupOffsets v0/v1 body for one group; topics {name: [partitions]} or
    None (all)."""
    body = uv(2) + cs(group)
    if topics is None:
        body += b"\x00"
    else:
        body += uv(len(topics) + 1)
        for name, parts in topics.items():
            body += cs(name) + uv(len(parts) + 1) + b"".join(struct.pack(">i", p) for p in parts)
            body += b"\x00"
    return body + b"\x00" + b"\x00"  # group tags, request tags


def describe_offsets(bootstrap: str, version: int, group: str, topics: dict | None = None):
    """DescribeShareGroupOffsets v0/v1 for one group; topics {name: [partitions]} or None (all)
    -> (group error, group message, {(topic, partition): (start, leader_epoch, lag, error,
    message)}); lag is None at v0."""
    with _conn(bootstrap, group) as conn:
        r = Reader(conn.request_flexible(API_DESCRIBE_OFFSETS, version,
                                         describe_offsets_body(group, topics)))
    r.int32()  # throttle
    n = r.uvarint() - 1
    assert n == 1, f"{n} groups in the response"
    gid = r.compact_string()
    assert gid == group
    parts = {}
    for _ in range(r.uvarint() - 1):
        name = r.compact_string()
        r.i += 16  # topic id
        for _ in range(r.uvarint() - 1):
            idx, start, epoch = r.int32(), r.int64(), r.int32()
            lag = r.int64() if version >= 1 else None
            err, msg = r.int16(), r.compact_string()
            r.skip_tagged_fields()
            parts[(name, idx)] = (start, epoch, lag, err, msg)
        r.skip_tagged_fields()
    err, msg = r.int16(), r.compact_string()
    return err, msg, parts


def alter_offsets(bootstrap: str, group: str, offsets: dict):
    """AlterShareGroupOffsets v0; offsets {topic: {partition: start}} -> (error, message,
    {(topic, partition): (error, message)})."""
    body = cs(group) + uv(len(offsets) + 1)
    for name, parts in offsets.items():
        body += cs(name) + uv(len(parts) + 1)
        for p, off in parts.items():
            body += struct.pack(">iq", p, off) + b"\x00"
        body += b"\x00"
    body += b"\x00"
    with _conn(bootstrap, group) as conn:
        r = Reader(conn.request_flexible(API_ALTER_OFFSETS, 0, body))
    r.int32()
    err, msg = r.int16(), r.compact_string()
    parts = {}
    for _ in range(r.uvarint() - 1):
        name = r.compact_string()
        r.i += 16
        for _ in range(r.uvarint() - 1):
            idx, perr, pmsg = r.int32(), r.int16(), r.compact_string()
            r.skip_tagged_fields()
            parts[(name, idx)] = (perr, pmsg)
        r.skip_tagged_fields()
    return err, msg, parts


def delete_offsets(bootstrap: str, group: str, topics: list[str]):
    """DeleteShareGroupOffsets v0 -> (error, message, {topic: (error, message)})."""
    body = cs(group) + uv(len(topics) + 1) + b"".join(cs(t) + b"\x00" for t in topics) + b"\x00"
    with _conn(bootstrap, group) as conn:
        r = Reader(conn.request_flexible(API_DELETE_OFFSETS, 0, body))
    r.int32()
    err, msg = r.int16(), r.compact_string()
    out = {}
    for _ in range(r.uvarint() - 1):
        name = r.compact_string()
        r.i += 16
        out[name] = (r.int16(), r.compact_string())
        r.skip_tagged_fields()
    return err, msg, out


def list_groups_v5(bootstrap: str, types: list[str], states: list[str] = ()) -> dict:
    """ListGroups v5 -> (error, {group: (protocol_type, state, type)})."""
    body = uv(len(states) + 1) + b"".join(cs(s) for s in states)
    body += uv(len(types) + 1) + b"".join(cs(t) for t in types) + b"\x00"
    with Conn(bootstrap, timeout=30) as conn:
        r = Reader(conn.request_flexible(API_LIST_GROUPS, 5, body))
    r.int32()
    err = r.int16()
    out = {}
    for _ in range(r.uvarint() - 1):
        gid, ptype, state, gtype = (r.compact_string(), r.compact_string(), r.compact_string(),
                                    r.compact_string())
        r.skip_tagged_fields()
        out[gid] = (ptype, state, gtype)
    return err, out


# ---------------------------------------------------------------------------- helpers

def wait_for(cond, timeout, what):
    """Polls cond() until it returns a truthy value; returns it."""
    deadline = time.monotonic() + timeout
    while True:
        last = cond()
        if last:
            return last
        assert time.monotonic() < deadline, f"{what} not reached within {timeout}s"
        time.sleep(0.3)


def group_state(bootstrap, group):
    """(error, state) of ShareGroupDescribe."""
    err, _msg, state, _epoch, _members = share_group_describe(bootstrap, [group])[group]
    return err, state


def wait_state(bootstrap, group, state, timeout=30):
    wait_for(lambda: group_state(bootstrap, group) == (NONE, state), timeout,
             f"group {group} {state}")


def accept_and_close(apps, bootstrap, group, topic, name, n):
    """A ShareConsumerApp member that accepts n records (commitSync) and then closes."""
    app = apps(bootstrap, group, topic, "accept", name, "--max-records", n)
    app.finish(JOIN_S + 20)
    assert sorted(app.accepted()) == list(range(n)), app.history()
    wait_state(bootstrap, group, "Empty")
    return app


def committed_classic_group(bootstrap, topic):
    from confluent_kafka import TopicPartition

    group = f"classic-{uuid.uuid4().hex[:8]}"
    c = _consumer(bootstrap, {"group.id": group})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        c.close()
    return group


def share_group_command(bootstrap, *args):
    """Kafka's ShareGroupCommand (tools jars) -> stdout; asserts exit code 0."""
    cp, why = classpath("tools")
    if cp is None:
        pytest.skip(f"Kafka tools jars: {why}")
    out = subprocess.run([_java_bin(), *JVM_OPTS, "-cp", cp, SHARE_GROUP_COMMAND,
                          "--bootstrap-server", bootstrap, *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"ShareGroupCommand {args}: {out.returncode}\n{out.stdout}\n" \
                                f"{out.stderr[-3000:]}"
    return out.stdout


# Answers for a partition without share-group state: start offset -1, leader epoch 0, lag -1
# (v1; None at v0), no error.
NO_STATE = {0: (-1, 0, None, NONE, None), 1: (-1, 0, -1, NONE, None)}


# ---------------------------------------------------------------------------- tests

def test_share_group_describe_of_unknown_and_non_share_groups(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    unknown = f"share-unknown-{uuid.uuid4().hex[:8]}"
    # Group configs alone do not make a group.
    configured = share_group(broker.bootstrap)
    classic = committed_classic_group(broker.bootstrap, topic_name)
    got = share_group_describe(broker.bootstrap, [unknown, configured, classic])
    assert got == {
        unknown: (GROUP_ID_NOT_FOUND, f"Group {unknown} not found.", "", 0, []),
        configured: (GROUP_ID_NOT_FOUND, f"Group {configured} not found.", "", 0, []),
        classic: (GROUP_ID_NOT_FOUND, f"Group {classic} is not a share group.", "", 0, []),
    }


def test_describe_share_group_offsets_of_unknown_and_consumer_groups(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    unknown = f"share-unknown-{uuid.uuid4().hex[:8]}"
    classic = committed_classic_group(broker.bootstrap, topic_name)
    for group in (unknown, classic):
        for version in (0, 1):
            # No group-level error: each asked partition comes back without state.
            got = describe_offsets(broker.bootstrap, version, group, {topic_name: [0]})
            assert got == (NONE, None, {(topic_name, 0): NO_STATE[version]}), (group, version)
            # Topics null (all): no topics.
            got = describe_offsets(broker.bootstrap, version, group, None)
            assert got == (NONE, None, {}), (group, version)


def test_describe_share_group_offsets_start_offset_and_lag(broker, topic_name, apps):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    group = share_group(broker.bootstrap)
    produce_numbered(broker.bootstrap, topic_name, 0, 10)
    accept_and_close(apps, broker.bootstrap, group, topic_name, "first", 10)
    # All ten accepted: lag 0. The start offset is where the share-partition's persisted state
    # says: Strata persists the start moved by the acknowledgement (10); Kafka's state write of
    # the acknowledgement still carries the start from before it moved (0), and catches up with
    # its next write. The lag is the same on both.
    tp = (topic_name, 0)

    def offsets(version, topics, lag):
        status, message, parts = describe_offsets(broker.bootstrap, version, group, topics)
        assert (status, message, set(parts)) == (NONE, None, {tp}), parts
        start, epoch, got_lag, code, text = parts[tp]
        assert start in (0, 10) and epoch == 0 and (code, text) == (NONE, None), parts
        assert got_lag == (lag if version else None), parts

    for version in (0, 1):
        offsets(version, {topic_name: [0]}, 0)
    produce_numbered(broker.bootstrap, topic_name, 10, 15)
    for version in (0, 1):
        offsets(version, {topic_name: [0]}, 5)
        offsets(version, None, 5)
    # A member acquires the five new records and holds them: they still count as lag.
    holder = apps(broker.bootstrap, group, topic_name, "hold", "holder")
    holder.wait_for(lambda e: e.get("event") == "holding", JOIN_S, "holding")
    assert sorted(r["offset"] for r in holder.records()) == list(range(10, 15))
    offsets(1, None, 5)
    # Its close releases them (a state write): the start offset is now 10, lag still 5.
    holder.close()
    wait_state(broker.bootstrap, group, "Empty")
    assert describe_offsets(broker.bootstrap, 1, group, None) == \
        (NONE, None, {tp: (10, 0, 5, NONE, None)})


def test_alter_share_group_offsets_of_missing_and_non_share_groups(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce_numbered(broker.bootstrap, topic_name, 0, 4)
    # A group id that does not exist: Kafka creates the share group (Empty) with the offsets.
    group = f"share-new-{uuid.uuid4().hex[:8]}"
    got = alter_offsets(broker.bootstrap, group, {topic_name: {0: 1}})
    assert got == (NONE, None, {(topic_name, 0): (NONE, None)})
    assert share_group_describe(broker.bootstrap, [group])[group] == (NONE, None, "Empty", 1, [])
    assert describe_offsets(broker.bootstrap, 1, group, None) == \
        (NONE, None, {(topic_name, 0): (1, 0, 3, NONE, None)})
    assert list_groups_v5(broker.bootstrap, ["share"])[1][group] == ("share", "Empty", "share")
    # A classic consumer group: not a share group, for Alter and Delete alike.
    classic = committed_classic_group(broker.bootstrap, topic_name)
    want = (GROUP_ID_NOT_FOUND, f"Group {classic} is not a share group.", {})
    assert alter_offsets(broker.bootstrap, classic, {topic_name: {0: 0}}) == want
    assert delete_offsets(broker.bootstrap, classic, [topic_name]) == want
    # DeleteShareGroupOffsets does not create a group.
    missing = f"share-missing-{uuid.uuid4().hex[:8]}"
    assert delete_offsets(broker.bootstrap, missing, [topic_name]) == \
        (GROUP_ID_NOT_FOUND, f"Group {missing} not found.", {})
    assert share_group_describe(broker.bootstrap, [missing])[missing][0] == GROUP_ID_NOT_FOUND


def test_alter_and_delete_share_group_offsets_need_an_empty_group(broker, topic_name, apps):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    group = share_group(broker.bootstrap)
    produce_numbered(broker.bootstrap, topic_name, 0, 10)
    holder = apps(broker.bootstrap, group, topic_name, "hold", "holder")
    holder.wait_for(lambda e: e.get("event") == "holding", JOIN_S, "holding")
    assert group_state(broker.bootstrap, group) == (NONE, "Stable")
    not_empty = (NON_EMPTY_GROUP, "The group is not empty.", {})
    assert alter_offsets(broker.bootstrap, group, {topic_name: {0: 3}}) == not_empty
    assert delete_offsets(broker.bootstrap, group, [topic_name]) == not_empty
    assert delete_groups(broker.bootstrap, 3, [group]) == {group: (NON_EMPTY_GROUP, None)}
    holder.close()  # releases its records
    wait_state(broker.bootstrap, group, "Empty")

    # Empty: the start offset moves to 3; a partition and a topic that do not exist fail alone.
    got = alter_offsets(broker.bootstrap, group, {topic_name: {0: 3, 5: 1}, "no-such-topic": {0: 1}})
    unknown = (UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
    assert got == (NONE, None, {(topic_name, 0): (NONE, None), (topic_name, 5): unknown,
                                ("no-such-topic", 0): unknown})
    assert describe_offsets(broker.bootstrap, 1, group, None) == \
        (NONE, None, {(topic_name, 0): (3, 0, 7, NONE, None)})
    # A new member gets the records from offset 3 on, each as a first delivery.
    after = apps(broker.bootstrap, group, topic_name, "accept", "after-alter", "--idle-exit-ms", 3000)
    after.finish(JOIN_S + 20)
    assert [(r["offset"], r["delivery_count"]) for r in after.records()] == \
        [(o, 1) for o in range(3, 10)]


def test_delete_share_group_offsets_of_an_empty_group(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce_numbered(broker.bootstrap, topic_name, 0, 4)
    group = f"share-del-{uuid.uuid4().hex[:8]}"
    assert alter_offsets(broker.bootstrap, group, {topic_name: {0: 2}})[0] == NONE
    got = delete_offsets(broker.bootstrap, group, [topic_name, "no-such-topic"])
    assert got == (NONE, None, {
        topic_name: (NONE, None),
        "no-such-topic": (UNKNOWN_TOPIC_OR_PARTITION,
                          "This server does not host this topic-partition.")})
    # The offsets are gone; the group stays.
    assert describe_offsets(broker.bootstrap, 1, group, None) == (NONE, None, {})
    assert describe_offsets(broker.bootstrap, 1, group, {topic_name: [0]}) == \
        (NONE, None, {(topic_name, 0): NO_STATE[1]})
    assert group_state(broker.bootstrap, group) == (NONE, "Empty")


def test_list_groups_v5_filters_share_groups(broker, topic_name, apps):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    group = share_group(broker.bootstrap)
    produce_numbered(broker.bootstrap, topic_name, 0, 5)
    member = apps(broker.bootstrap, group, topic_name, "accept", "member")
    member.wait_until(lambda: set(member.accepted()) >= set(range(5)), JOIN_S, "five records")
    assert list_groups_v5(broker.bootstrap, ["share"])[1].get(group) == ("share", "Stable", "share")
    assert list_groups_v5(broker.bootstrap, ["share"], ["Stable"])[1].get(group) == \
        ("share", "Stable", "share")
    assert group not in list_groups_v5(broker.bootstrap, ["share"], ["Empty"])[1]
    assert group not in list_groups_v5(broker.bootstrap, ["consumer", "classic"])[1]
    member.close()
    wait_for(lambda: list_groups_v5(broker.bootstrap, ["share"])[1].get(group)
             == ("share", "Empty", "share"), 30, "the group listed Empty")
    err, groups = list_groups_v5(broker.bootstrap, [])
    assert err == NONE and groups.get(group) == ("share", "Empty", "share")


def test_delete_groups_deletes_an_empty_share_group(broker, topic_name, apps):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    group = share_group(broker.bootstrap)
    produce_numbered(broker.bootstrap, topic_name, 0, 5)
    accept_and_close(apps, broker.bootstrap, group, topic_name, "member", 5)
    assert describe_offsets(broker.bootstrap, 1, group, None)[2] != {}
    assert delete_groups(broker.bootstrap, 3, [group]) == {group: (NONE, None)}
    assert share_group_describe(broker.bootstrap, [group])[group][:2] == \
        (GROUP_ID_NOT_FOUND, f"Group {group} not found.")
    for version in (0, 1):
        assert describe_offsets(broker.bootstrap, version, group, None) == (NONE, None, {})
        assert describe_offsets(broker.bootstrap, version, group, {topic_name: [0]}) == \
            (NONE, None, {(topic_name, 0): NO_STATE[version]})
    assert group not in list_groups_v5(broker.bootstrap, ["share"])[1]
    # A second delete: not found.
    assert delete_groups(broker.bootstrap, 3, [group]) == {group: (GROUP_ID_NOT_FOUND, None)}


def test_share_group_command_describes_start_offset_and_lag(broker, topic_name, apps):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    group = share_group(broker.bootstrap)
    produce_numbered(broker.bootstrap, topic_name, 0, 10)
    accept_and_close(apps, broker.bootstrap, group, topic_name, "member", 10)
    produce_numbered(broker.bootstrap, topic_name, 10, 15)
    out = share_group_command(broker.bootstrap, "--describe", "--group", group)
    rows = [line.split() for line in out.splitlines() if line.strip()]
    assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"], out
    # The same numbers as DescribeShareGroupOffsets v1: the start offset is 10 on Strata, 0 on
    # Kafka (its persisted start lags one write; see the start offset test); the lag is 5.
    assert len(rows) == 2 and rows[1][:3] == [group, topic_name, "0"], out
    assert rows[1][3] in ("0", "10") and rows[1][4] == "5", out
    assert group in share_group_command(broker.bootstrap, "--list").split()
