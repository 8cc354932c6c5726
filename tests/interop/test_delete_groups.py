"""DeleteGroups at every version Kafka 4.4 serves, raw: deleted, not found, not empty and an
empty id, with v3's error-message field; the same answers from Strata and Kafka 4.4."""

from __future__ import annotations

import struct
import time

from confluent_kafka import TopicPartition

from helpers import _consumer, admin, create_topic, produce
from rawkafka import Conn, Reader, encode_uvarint as _uvarint


def _find_coordinator(conn: Conn, group: str) -> None:
    """Waits until the group's coordinator answers (single broker: this one)."""
    g = group.encode()
    body = struct.pack(">h", len(g)) + g
    deadline = time.monotonic() + 30
    while True:
        r = Reader(conn.request(10, 0, body))
        if r.int16() == 0:
            return
        assert time.monotonic() < deadline, "no group coordinator"
        time.sleep(0.2)


def delete_groups(bootstrap: str, version: int, groups: list[str]):
    """-> {group: (error_code, error_message or None)}; message only from v3."""
    with Conn(bootstrap, timeout=30) as conn:
        _find_coordinator(conn, groups[0] or "probe")
        if version >= 2:
            body = _uvarint(len(groups) + 1)
            for g in groups:
                body += _uvarint(len(g.encode()) + 1) + g.encode()
            body += b"\x00"
            r = Reader(conn.request_flexible(42, version, body))
        else:
            body = struct.pack(">i", len(groups))
            for g in groups:
                body += struct.pack(">h", len(g.encode())) + g.encode()
            r = Reader(conn.request(42, version, body))
    r.int32()  # throttle
    out = {}
    n = r.uvarint() - 1 if version >= 2 else r.int32()
    for _ in range(n):
        group = r.compact_string() if version >= 2 else r.string()
        code = r.int16()
        message = None
        if version >= 3:
            length = r.uvarint() - 1
            message = None if length < 0 else r.d[r.i:r.i + length].decode()
            r.i += max(length, 0)
        if version >= 2:
            r.skip_tagged_fields()
        out[group] = (code, message)
    return out


def _committed_group(bootstrap: str, topic: str, group: str) -> None:
    c = _consumer(bootstrap, {"group.id": group})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        c.close()


def test_delete_groups_answers_each_group_at_every_version(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce(broker.bootstrap, topic_name, [{"value": b"x"}])
    busy = f"{topic_name}-busy"
    member = _consumer(broker.bootstrap, {"group.id": busy, "session.timeout.ms": 30000})
    member.subscribe([topic_name])
    try:
        deadline = time.monotonic() + 60
        while not member.assignment():
            member.poll(0.2)
            assert time.monotonic() < deadline, "the member never joined"
        for version in (0, 1, 2, 3):
            done = f"{topic_name}-done-v{version}"
            _committed_group(broker.bootstrap, topic_name, done)
            missing = f"{topic_name}-missing-v{version}"
            got = delete_groups(broker.bootstrap, version, [done, missing, busy, ""])
            assert got[done] == (0, None)
            assert got[missing][0] == 69  # GROUP_ID_NOT_FOUND
            assert got[busy][0] == 68  # NON_EMPTY_GROUP
            assert got[""][0] == 69  # an empty id is not found either
            # v3 carries an error message per group; Kafka 4.4 leaves it null for these.
            assert all(m is None for _, m in got.values())
    finally:
        member.close()
    a = admin(broker.bootstrap)
    assert busy in {g.group_id for g in a.list_consumer_groups().result(timeout=30).valid}
