"""OffsetCommit v10, OffsetFetch v10 and TxnOffsetCommit v6 (Kafka 4.4): topics named by id on
the raw protocol, with the same answers from Strata and the reference Kafka. An id the broker
does not know is UNKNOWN_TOPIC_ID for each of its partitions; offsets committed by id are the
offsets of the topic's name at v9; a deleted topic's id stays unknown after its name is
reused."""

import struct
import time
import uuid

import pytest

from helpers import admin, create_topic
from rawkafka import Conn, Reader
from rawkafka import encode_compact_string as _compact_string
from rawkafka import encode_uvarint as _uvarint

API_OFFSET_COMMIT = 8
API_OFFSET_FETCH = 9
API_FIND_COORDINATOR = 10
API_INIT_PRODUCER_ID = 22
API_ADD_OFFSETS_TO_TXN = 25
API_END_TXN = 26
API_TXN_OFFSET_COMMIT = 28
API_DESCRIBE_TOPIC_PARTITIONS = 75

UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_TOPIC_ID = 100
TIMEOUT = 30

pytestmark = pytest.mark.groups


def _compact_array(items) -> bytes:
    if items is None:
        return b"\x00"
    return _uvarint(len(items) + 1) + b"".join(items)


def _uuid(r: Reader) -> uuid.UUID:
    u = uuid.UUID(bytes=r.d[r.i:r.i + 16])
    r.i += 16
    return u


def _int32s(r: Reader):
    n = r.uvarint() - 1
    return None if n < 0 else [r.int32() for _ in range(n)]


def topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    """The topic's id, from DescribeTopicPartitions v0."""
    body = _compact_array([_compact_string(topic) + b"\x00"]) + struct.pack(">i", 100) + b"\xff"
    with Conn(bootstrap) as c:
        r = Reader(c.request_flexible(API_DESCRIBE_TOPIC_PARTITIONS, 0, body + b"\x00"))
    r.int32()  # throttle
    assert r.uvarint() - 1 == 1
    assert r.int16() == 0, "topic not described"
    assert r.compact_string() == topic
    return _uuid(r)


def wait_for_coordinator(bootstrap: str, group: str, key_type: int = 0) -> None:
    """FindCoordinator v2 until the coordinator of a group (`key_type` 0) or a transactional
    id (1) is ready (Kafka creates its topic on the first lookup)."""
    key = group.encode()
    body = struct.pack(">h", len(key)) + key + struct.pack(">b", key_type)
    deadline = time.monotonic() + TIMEOUT
    while True:
        with Conn(bootstrap) as c:
            r = Reader(c.request(API_FIND_COORDINATOR, 2, body))
        r.int32()  # throttle
        error = r.int16()
        if error == 0:
            return
        assert time.monotonic() < deadline, f"no coordinator for {group}: error {error}"
        time.sleep(0.2)


def offset_commit_v10(bootstrap: str, group: str, topics) -> dict:
    """A simple commit (no member, generation -1). `topics`: [(id, [(partition, offset,
    metadata)])] -> {(id, partition): error}."""
    entries = []
    for tid, parts in topics:
        ps = [struct.pack(">iqi", p, off, -1) + _compact_string(meta) + b"\x00"
              for p, off, meta in parts]
        entries.append(tid.bytes + _compact_array(ps) + b"\x00")
    body = (_compact_string(group) + struct.pack(">i", -1) + _compact_string("")
            + _compact_string(None) + _compact_array(entries) + b"\x00")
    with Conn(bootstrap) as c:
        r = Reader(c.request_flexible(API_OFFSET_COMMIT, 10, body))
    r.int32()  # throttle
    out = {}
    for _ in range(r.uvarint() - 1):
        tid = _uuid(r)
        for _ in range(r.uvarint() - 1):
            p, error = r.int32(), r.int16()
            r.skip_tagged_fields()
            out[(tid, p)] = error
        r.skip_tagged_fields()
    return out


def _fetch_topics(r: Reader, named_by_id: bool) -> dict:
    out = {}
    for _ in range(r.uvarint() - 1):
        topic = _uuid(r) if named_by_id else r.compact_string()
        for _ in range(r.uvarint() - 1):
            p, offset, epoch = r.int32(), r.int64(), r.int32()
            metadata, error = r.compact_string(), r.int16()
            r.skip_tagged_fields()
            out[(topic, p)] = (offset, epoch, metadata, error)
        r.skip_tagged_fields()
    return out


def offset_fetch(bootstrap: str, version: int, group: str, topics) -> dict:
    """OffsetFetch v9 (`topics` by name) or v10 (by id) for one group; `topics` None asks for
    all -> {(topic, partition): (offset, leader epoch, metadata, error)}."""
    if topics is None:
        wanted = None
    else:
        wanted = [(t.bytes if version >= 10 else _compact_string(t))
                  + _compact_array([struct.pack(">i", p) for p in ps]) + b"\x00"
                  for t, ps in topics]
    group_entry = (_compact_string(group) + _compact_string(None) + struct.pack(">i", -1)
                   + _compact_array(wanted) + b"\x00")
    body = _compact_array([group_entry]) + b"\x00" + b"\x00"  # require_stable=false
    with Conn(bootstrap) as c:
        r = Reader(c.request_flexible(API_OFFSET_FETCH, version, body))
    r.int32()  # throttle
    assert r.uvarint() - 1 == 1
    assert r.compact_string() == group
    out = _fetch_topics(r, version >= 10)
    assert r.int16() == 0, "group error"
    return out


def test_offsets_committed_and_fetched_by_topic_id(broker, topic_name):
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic_name, partitions=2)
    tid = topic_id(bootstrap, topic_name)
    stranger = uuid.uuid4()
    group = f"{topic_name}-g"
    wait_for_coordinator(bootstrap, group)

    committed = offset_commit_v10(bootstrap, group, [
        (tid, [(0, 5, "m"), (1, 6, None), (7, 1, None)]),
        (stranger, [(0, 1, None), (1, 1, None)]),
    ])
    assert committed == {
        (tid, 0): 0,
        (tid, 1): 0,
        # A partition the known topic does not have.
        (tid, 7): UNKNOWN_TOPIC_OR_PARTITION,
        (stranger, 0): UNKNOWN_TOPIC_ID,
        (stranger, 1): UNKNOWN_TOPIC_ID,
    }

    by_id = offset_fetch(bootstrap, 10, group, [(tid, [0, 1]), (stranger, [0])])
    assert by_id == {
        (tid, 0): (5, -1, "m", 0),
        (tid, 1): (6, -1, "", 0),
        (stranger, 0): (-1, -1, "", UNKNOWN_TOPIC_ID),
    }
    # All topics, named by id.
    assert offset_fetch(bootstrap, 10, group, None) == {
        (tid, 0): (5, -1, "m", 0),
        (tid, 1): (6, -1, "", 0),
    }
    # Stored by name: v9 sees the same offsets under the topic's name.
    assert offset_fetch(bootstrap, 9, group, [(topic_name, [0, 1])]) == {
        (topic_name, 0): (5, -1, "m", 0),
        (topic_name, 1): (6, -1, "", 0),
    }


def test_the_id_of_a_deleted_topic_stays_unknown_when_its_name_is_reused(broker, topic_name):
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic_name, partitions=1)
    old = topic_id(bootstrap, topic_name)
    group = f"{topic_name}-g"
    wait_for_coordinator(bootstrap, group)
    assert offset_commit_v10(bootstrap, group, [(old, [(0, 3, None)])]) == {(old, 0): 0}

    a = admin(bootstrap)
    a.delete_topics([topic_name], request_timeout=TIMEOUT)[topic_name].result(timeout=TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while True:  # Kafka may still be removing the old topic
        try:
            create_topic(bootstrap, topic_name, partitions=1)
            break
        except Exception:
            assert time.monotonic() < deadline, "topic not re-created"
            time.sleep(0.5)
    new = topic_id(bootstrap, topic_name)
    assert new != old

    assert offset_fetch(bootstrap, 10, group, [(old, [0])]) == {
        (old, 0): (-1, -1, "", UNKNOWN_TOPIC_ID),
    }
    assert offset_commit_v10(bootstrap, group, [(old, [(0, 4, None)])]) == {
        (old, 0): UNKNOWN_TOPIC_ID,
    }
    # Deleting the topic deleted its committed offsets: the re-created topic has none, by id
    # or by name (Strata forgets them at its coordinator's next timer pass).
    deadline = time.monotonic() + TIMEOUT
    while offset_fetch(bootstrap, 10, group, [(new, [0])]) != {(new, 0): (-1, -1, "", 0)}:
        assert time.monotonic() < deadline, "the deleted topic's offsets are still there"
        time.sleep(0.2)


def _txn_call(bootstrap: str, api: int, version: int, body: bytes) -> int:
    """A flexible request whose answer is (throttle, error, ...) -> error."""
    with Conn(bootstrap) as c:
        r = Reader(c.request_flexible(api, version, body + b"\x00"))
    r.int32()  # throttle
    return r.int16()


def begin_offsets_transaction(bootstrap: str, txn: str, group: str) -> tuple[int, int]:
    """InitProducerId v4, then AddOffsetsToTxn v4 for `group` -> (producer id, epoch)."""
    wait_for_coordinator(bootstrap, txn, key_type=1)
    body = _compact_string(txn) + struct.pack(">iqh", 60_000, -1, -1) + b"\x00"
    deadline = time.monotonic() + TIMEOUT
    while True:
        with Conn(bootstrap) as c:
            r = Reader(c.request_flexible(API_INIT_PRODUCER_ID, 4, body))
        r.int32()  # throttle
        error, pid, epoch = r.int16(), r.int64(), r.int16()
        if error == 0:
            break
        assert time.monotonic() < deadline, f"InitProducerId: error {error}"
        time.sleep(0.2)
    added = _txn_call(bootstrap, API_ADD_OFFSETS_TO_TXN, 4,
                      _compact_string(txn) + struct.pack(">qh", pid, epoch)
                      + _compact_string(group))
    assert added == 0, f"AddOffsetsToTxn: error {added}"
    return pid, epoch


def txn_offset_commit_v6(bootstrap: str, txn: str, group: str, producer, topics) -> dict:
    """`topics`: [(id, [(partition, offset)])] -> {(id, partition): error}."""
    pid, epoch = producer
    entries = []
    for tid, parts in topics:
        ps = [struct.pack(">iqi", p, off, -1) + _compact_string("") + b"\x00"
              for p, off in parts]
        entries.append(tid.bytes + _compact_array(ps) + b"\x00")
    body = (_compact_string(txn) + _compact_string(group) + struct.pack(">qhi", pid, epoch, -1)
            + _compact_string("") + _compact_string(None) + _compact_array(entries) + b"\x00")
    with Conn(bootstrap) as c:
        r = Reader(c.request_flexible(API_TXN_OFFSET_COMMIT, 6, body))
    r.int32()  # throttle
    out = {}
    for _ in range(r.uvarint() - 1):
        tid = _uuid(r)
        for _ in range(r.uvarint() - 1):
            p, error = r.int32(), r.int16()
            r.skip_tagged_fields()
            out[(tid, p)] = error
        r.skip_tagged_fields()
    return out


def test_transactional_offsets_committed_by_topic_id(broker, topic_name):
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic_name, partitions=2)
    tid = topic_id(bootstrap, topic_name)
    stranger = uuid.uuid4()
    group, txn = f"{topic_name}-g", f"{topic_name}-txn"
    wait_for_coordinator(bootstrap, group)
    producer = begin_offsets_transaction(bootstrap, txn, group)

    committed = txn_offset_commit_v6(bootstrap, txn, group, producer, [
        (tid, [(0, 11), (1, 12)]),
        (stranger, [(0, 1)]),
    ])
    assert committed == {(tid, 0): 0, (tid, 1): 0, (stranger, 0): UNKNOWN_TOPIC_ID}

    ended = _txn_call(bootstrap, API_END_TXN, 4,
                      _compact_string(txn) + struct.pack(">qhb", *producer, 1))
    assert ended == 0, f"EndTxn: error {ended}"
    # The offsets count once the COMMIT marker is in __consumer_offsets.
    want = {(tid, 0): (11, -1, "", 0), (tid, 1): (12, -1, "", 0)}
    deadline = time.monotonic() + TIMEOUT
    while (got := offset_fetch(bootstrap, 10, group, [(tid, [0, 1])])) != want:
        assert time.monotonic() < deadline, f"committed offsets {got}"
        time.sleep(0.2)
