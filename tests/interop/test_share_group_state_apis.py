"""The share-group state APIs (KIP-932) that a share-partition leader sends to the share
coordinator: InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85,
v0-1), DeleteShareGroupState (86) and ReadShareGroupStateSummary (87, v0-1), plus FindCoordinator
v6 with key type 2 (share: "groupId:topicId:partition"). Sent raw, as a broker would, with exact
answers checked: error codes and messages, state and leader epochs, start offsets, state batches
and the delivery complete count. Runs against Strata or, with STRATA_TEST_TARGET=kafka, the
reference broker (Kafka 4.4), whose answers are the expectations.

What Kafka 4.4 does, as these tests pin it:

* Reading a share-partition that was never initialized (or whose topic id is unknown) is
  INVALID_REQUEST "Read operation on uninitialized share partition not allowed." with the schema's
  zeros behind it (state epoch 0, start offset 0, no batches); its summary is no error, start
  offset -1, delivery complete count -1. Writing it is INVALID_REQUEST too; Initialize and Delete of
  an unknown topic id are UNKNOWN_TOPIC_OR_PARTITION.
* Only Initialize sets the state epoch (a write with a lower one is FENCED_STATE_EPOCH, a higher one
  is accepted and changes nothing); only Read raises the leader epoch (a write or read with a lower
  one is then FENCED_LEADER_EPOCH; a write never moves it, so a higher write epoch fences nobody).
* A write never moves the start offset back; the delivery complete count is the writer's when the
  start offset advances, the larger of the two when it stays, and unchanged when the write's start
  offset is behind.
* Kafka creates __share_group_state on the first share lookup: until then the coordinator answers
  COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS, retried here for up to
  30 s.

The topic id is taken from Metadata v12; Kafka spells it in a share key as URL-safe base64
without padding (confluent-kafka's Uuid str() uses the standard alphabet, with '+' and '/')."""

from __future__ import annotations

import base64
import struct
import time
import uuid
from collections import namedtuple

import pytest

from helpers import create_topic, produce
from rawkafka import Conn, Reader, encode_compact_string as cs, encode_uvarint as uv

pytestmark = pytest.mark.groups

API_METADATA, API_FIND_COORDINATOR = 3, 10
API_INITIALIZE, API_READ, API_WRITE, API_DELETE, API_READ_SUMMARY = 83, 84, 85, 86, 87
SHARE_KEY_TYPE = 2

UNKNOWN_TOPIC_OR_PARTITION, COORDINATOR_LOAD_IN_PROGRESS = 3, 14
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 15, 16
INVALID_REQUEST, FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH = 42, 74, 124
RETRIABLE = {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}
RETRY_S = 30

READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
FENCED_LEADER_MSG = "The leader epoch in the request is older than the epoch on the broker."
FENCED_STATE_MSG = "The coordinator rejected the request because the state epoch did not match."
UNKNOWN_TP_MSG = "This server does not host this topic-partition."
NEGATIVE_LEADER_EPOCH_MSG = "The leader epoch cannot be a negative number."

# Delivery states of a state batch.
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4

Status = namedtuple("Status", "partition error message")
ReadResult = namedtuple("ReadResult", "partition error message state_epoch start_offset batches")
Summary = namedtuple("Summary",
                     "partition error message state_epoch leader_epoch start_offset "
                     "delivery_complete_count")


# ---------------------------------------------------------------------------- encoding

def _array(items) -> bytes:
    return uv(len(items) + 1) + b"".join(items)


def _uuid(r: Reader) -> uuid.UUID:
    u = uuid.UUID(bytes=r.d[r.i:r.i + 16])
    r.i += 16
    return u


def kafka_uuid_string(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def share_key(group: str, topic_id: uuid.UUID, partition: int) -> str:
    return f"{group}:{kafka_uuid_string(topic_id)}:{partition}"


def new_group() -> str:
    return f"share-state-{uuid.uuid4().hex[:10]}"


# ---------------------------------------------------------------------------- Metadata v12

def metadata_v12(bootstrap: str, topic: str):
    """Metadata v12 for one topic -> ([(node_id, host, port)], topic_id)."""
    body = _array([b"\x00" * 16 + cs(topic) + b"\x00"]) + b"\x00\x00" + b"\x00"
    with Conn(bootstrap) as c:
        r = Reader(c.request_flexible(API_METADATA, 12, body))
    r.int32()  # throttle
    brokers = []
    for _ in range(r.uvarint() - 1):
        node, host, port = r.int32(), r.compact_string(), r.int32()
        r.compact_string()  # rack
        r.skip_tagged_fields()
        brokers.append((node, host, port))
    r.compact_string()  # cluster id
    r.int32()  # controller id
    found = None
    for _ in range(r.uvarint() - 1):
        err, name, tid = r.int16(), r.compact_string(), _uuid(r)
        r.int8()  # is_internal
        for _ in range(r.uvarint() - 1):
            r.int16(), r.int32(), r.int32(), r.int32()
            for _ in range(3):  # replicas, isr, offline replicas
                for _ in range(r.uvarint() - 1):
                    r.int32()
            r.skip_tagged_fields()
        r.int32()  # topic authorized operations
        r.skip_tagged_fields()
        if name == topic:
            assert err == 0, f"Metadata error {err} for {topic}"
            found = tid
    assert found is not None and found != uuid.UUID(int=0), f"no topic id for {topic}"
    return brokers, found


def new_topic(bootstrap: str, topic: str, records: int = 0) -> uuid.UUID:
    """Create a 1-partition topic (with `records` records in it) -> its topic id."""
    create_topic(bootstrap, topic, partitions=1)
    if records:
        produce(bootstrap, topic, [{"value": b"v%d" % i, "partition": 0} for i in range(records)])
    return metadata_v12(bootstrap, topic)[1]


# ---------------------------------------------------------------------------- FindCoordinator

def find_coordinators(bootstrap: str, keys: list[str], key_type: int = SHARE_KEY_TYPE,
                      version: int = 6):
    """FindCoordinator v4+ -> [(key, node_id, host, port, error_code, error_message)]."""
    body = struct.pack(">b", key_type) + _array([cs(k) for k in keys]) + b"\x00"
    with Conn(bootstrap) as c:
        r = Reader(c.request_flexible(API_FIND_COORDINATOR, version, body))
    r.int32()  # throttle
    out = []
    for _ in range(r.uvarint() - 1):
        key, node, host, port = r.compact_string(), r.int32(), r.compact_string(), r.int32()
        err, msg = r.int16(), r.compact_string()
        r.skip_tagged_fields()
        out.append((key, node, host, port, err, msg))
    r.skip_tagged_fields()
    assert r.i == len(r.d), "trailing bytes in the FindCoordinator response"
    return out


def wait_for_share_coordinator(bootstrap: str, key: str):
    """FindCoordinator v6 (share) for one key until it is not a retriable coordinator error
    (Kafka creates __share_group_state on the first lookup) -> its answer."""
    deadline = time.monotonic() + RETRY_S
    while True:
        (answer,) = find_coordinators(bootstrap, [key])
        if answer[4] not in RETRIABLE:
            return answer
        assert time.monotonic() < deadline, f"no share coordinator for {key}: {answer}"
        time.sleep(0.5)


# ---------------------------------------------------------------------------- state APIs

def _parse_results(r: Reader, tail, kind):
    """[(topic_id, [kind(partition, error, message, *tail(r))])] of a state API response."""
    topics = []
    for _ in range(r.uvarint() - 1):
        tid = _uuid(r)
        parts = []
        for _ in range(r.uvarint() - 1):
            p, err, msg = r.int32(), r.int16(), r.compact_string()
            parts.append(kind(p, err, msg, *tail(r)))
            r.skip_tagged_fields()
        r.skip_tagged_fields()
        topics.append((tid, parts))
    r.skip_tagged_fields()
    assert r.i == len(r.d), f"trailing bytes in the response: {r.d[r.i:]!r}"
    return topics


def _read_tail(r: Reader):
    state_epoch, start = r.int32(), r.int64()
    batches = []
    for _ in range(r.uvarint() - 1):
        batches.append((r.int64(), r.int64(), r.int8(), r.int16()))
        r.skip_tagged_fields()
    return state_epoch, start, batches


def _summary_tail(version):
    def tail(r: Reader):
        state_epoch, leader_epoch, start = r.int32(), r.int32(), r.int64()
        dcc = r.int32() if version >= 1 else None
        return state_epoch, leader_epoch, start, dcc
    return tail


def _call(bootstrap: str, api: int, version: int, group: str, topics, encode_partition, tail,
          kind):
    """Send one state API request; retry while any partition has a retriable coordinator error.
    topics: [(topic_id, [partition tuple])] -> [(topic_id, [kind])]."""
    body = cs(group) + _array([tid.bytes + _array([encode_partition(p) + b"\x00" for p in ps])
                               + b"\x00" for tid, ps in topics]) + b"\x00"
    deadline = time.monotonic() + RETRY_S
    while True:
        with Conn(bootstrap) as c:
            result = _parse_results(Reader(c.request_flexible(api, version, body)), tail, kind)
        errors = {p.error for _, ps in result for p in ps}
        if not errors & RETRIABLE:
            return result
        assert time.monotonic() < deadline, f"API {api}: coordinator not ready: {result}"
        time.sleep(0.5)


def _single(result, topic_id):
    assert len(result) == 1 and result[0][0] == topic_id and len(result[0][1]) == 1, result
    return result[0][1][0]


def initialize_many(bootstrap, group, topics):
    """topics: [(topic_id, [(partition, state_epoch, start_offset)])]."""
    return _call(bootstrap, API_INITIALIZE, 0, group, topics,
                 lambda p: struct.pack(">iiq", *p), lambda r: (), Status)


def initialize(bootstrap, group, topic_id, state_epoch, start_offset, partition=0) -> Status:
    return _single(initialize_many(bootstrap, group,
                                   [(topic_id, [(partition, state_epoch, start_offset)])]),
                   topic_id)


def read_many(bootstrap, group, topics):
    """topics: [(topic_id, [(partition, leader_epoch)])]."""
    return _call(bootstrap, API_READ, 0, group, topics, lambda p: struct.pack(">ii", *p),
                 _read_tail, ReadResult)


def read(bootstrap, group, topic_id, leader_epoch, partition=0) -> ReadResult:
    return _single(read_many(bootstrap, group, [(topic_id, [(partition, leader_epoch)])]),
                   topic_id)


def write(bootstrap, group, topic_id, state_epoch, leader_epoch, start_offset, batches,
          delivery_complete_count=-1, version=1, partition=0) -> Status:
    """WriteShareGroupState v0 or v1 (v1 carries the delivery complete count).
    batches: [(first_offset, last_offset, delivery_state, delivery_count)]."""
    def encode(_):
        out = struct.pack(">iiiq", partition, state_epoch, leader_epoch, start_offset)
        if version >= 1:
            out += struct.pack(">i", delivery_complete_count)
        return out + _array([struct.pack(">qqbh", *b) + b"\x00" for b in batches])
    return _single(_call(bootstrap, API_WRITE, version, group, [(topic_id, [partition])], encode,
                         lambda r: (), Status), topic_id)


def delete_many(bootstrap, group, topics):
    """topics: [(topic_id, [partition])]."""
    return _call(bootstrap, API_DELETE, 0, group, topics, lambda p: struct.pack(">i", p),
                 lambda r: (), Status)


def delete(bootstrap, group, topic_id, partition=0) -> Status:
    return _single(delete_many(bootstrap, group, [(topic_id, [partition])]), topic_id)


def summary_many(bootstrap, group, topics, version=1):
    """topics: [(topic_id, [(partition, leader_epoch)])]."""
    return _call(bootstrap, API_READ_SUMMARY, version, group, topics,
                 lambda p: struct.pack(">ii", *p), _summary_tail(version), Summary)


def summary(bootstrap, group, topic_id, leader_epoch, partition=0, version=1) -> Summary:
    return _single(summary_many(bootstrap, group, [(topic_id, [(partition, leader_epoch)])],
                                version), topic_id)


def by_topic(result):
    """[(topic_id, [results])] -> {topic_id: sorted results} (Kafka's topic order is a hash's)."""
    out = {}
    for tid, parts in result:
        assert tid not in out, f"topic {tid} answered twice: {result}"
        out[tid] = sorted(parts)
    return out


OK = (0, None)


# ---------------------------------------------------------------------------- tests

def test_api_versions_advertise_the_share_group_state_apis(broker):
    with Conn(broker.bootstrap) as c:
        versions = c.api_versions()
    assert {k: versions.get(k) for k in range(83, 88)} == {
        API_INITIALIZE: (0, 0), API_READ: (0, 0), API_WRITE: (0, 1), API_DELETE: (0, 0),
        API_READ_SUMMARY: (0, 1)}


def test_find_coordinator_v6_share_keys(broker, topic_name):
    bootstrap = broker.bootstrap
    tid = new_topic(bootstrap, topic_name)
    brokers, _ = metadata_v12(bootstrap, topic_name)
    assert len(brokers) == 1
    node, host, port = brokers[0]
    group = new_group()
    key = share_key(group, tid, 0)
    assert wait_for_share_coordinator(bootstrap, key) == (key, node, host, port, 0, "")

    # The coordinator is the hash of the key's parts: a partition the topic does not have and a
    # topic id no topic has still get the (single) coordinator.
    for k in (share_key(group, tid, 5), share_key(group, uuid.uuid4(), 0)):
        assert find_coordinators(bootstrap, [k]) == [(k, node, host, port, 0, "")]

    # Malformed share keys: each is INVALID_REQUEST with Kafka's empty message, answered in the
    # order asked, next to a valid key that still gets its coordinator.
    slash_id = "UK1XL4f/TIOMoVJzBUil7Q"  # 16 bytes in standard base64, not URL-safe
    bad = ["nocolons", "", f"{group}:{kafka_uuid_string(tid)}",
           f"{group}:{kafka_uuid_string(tid)}:x", f"{group}:{slash_id}:0",
           f"{group}:not-a-topic-id:0"]
    assert find_coordinators(bootstrap, [key] + bad) == \
        [(key, node, host, port, 0, "")] + [(k, -1, "", -1, INVALID_REQUEST, "") for k in bad]

    # Key type 2 (share) needs FindCoordinator v6: v5 refuses it, per key.
    assert find_coordinators(bootstrap, [key], version=5) == \
        [(key, -1, "", -1, INVALID_REQUEST, "")]


def test_a_share_partition_never_initialized(broker, topic_name):
    bootstrap = broker.bootstrap
    tid = new_topic(bootstrap, topic_name, records=3)
    group = new_group()
    wait_for_share_coordinator(bootstrap, share_key(group, tid, 0))
    unknown = uuid.uuid4()

    # Read: INVALID_REQUEST, with the schema's zeros (not -1) behind it; also for a topic id no
    # topic has (the "uninitialized" check comes first) and at leader epoch 0 or 5.
    uninitialized = (0, INVALID_REQUEST, READ_UNINITIALIZED, 0, 0, [])
    assert read(bootstrap, group, tid, 0) == uninitialized
    assert read(bootstrap, group, tid, 5) == uninitialized
    assert read(bootstrap, group, unknown, 0) == uninitialized
    # A negative leader epoch is refused first.
    assert read(bootstrap, group, tid, -1) == \
        (0, INVALID_REQUEST, NEGATIVE_LEADER_EPOCH_MSG, 0, 0, [])

    # Summary: no error, start offset -1 and delivery complete count -1 ("not initialized");
    # for an unknown topic id UNKNOWN_TOPIC_OR_PARTITION.
    assert summary(bootstrap, group, tid, 0) == (0, *OK, 0, 0, -1, -1)
    assert summary(bootstrap, group, tid, 0, version=0) == (0, *OK, 0, 0, -1, None)
    assert summary(bootstrap, group, unknown, 0) == \
        (0, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TP_MSG, 0, 0, 0, -1)

    # Write: INVALID_REQUEST too (even for an unknown topic id); Delete: nothing to delete is
    # fine; Initialize and Delete of an unknown topic id: UNKNOWN_TOPIC_OR_PARTITION.
    assert write(bootstrap, group, tid, 0, 0, 0, []) == (0, INVALID_REQUEST, WRITE_UNINITIALIZED)
    assert write(bootstrap, group, unknown, 0, 0, 0, []) == \
        (0, INVALID_REQUEST, WRITE_UNINITIALIZED)
    assert delete(bootstrap, group, tid) == (0, *OK)
    assert delete(bootstrap, group, unknown) == (0, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TP_MSG)
    assert initialize(bootstrap, group, unknown, 0, 0) == \
        (0, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TP_MSG)

    # None of that created any state.
    assert read(bootstrap, group, tid, 0) == uninitialized
    assert summary(bootstrap, group, tid, 0) == (0, *OK, 0, 0, -1, -1)


def test_initialize_write_read_and_summary(broker, topic_name):
    bootstrap = broker.bootstrap
    tid = new_topic(bootstrap, topic_name, records=12)
    group = new_group()
    wait_for_share_coordinator(bootstrap, share_key(group, tid, 0))

    assert initialize(bootstrap, group, tid, 0, 5) == (0, *OK)
    # Initialize sets the delivery complete count to 0.
    assert summary(bootstrap, group, tid, 0) == (0, *OK, 0, 0, 5, 0)
    assert read(bootstrap, group, tid, 0) == (0, *OK, 0, 5, [])

    # A v1 write at leader epoch 1: offsets 6-7 acknowledged, 8-9 archived (4 offsets at or past
    # the start offset completed, as the writer counts them).
    batches = [(6, 7, ACKNOWLEDGED, 1), (8, 9, ARCHIVED, 2)]
    assert write(bootstrap, group, tid, 0, 1, 6, batches, delivery_complete_count=4) == (0, *OK)
    # The write moved the start offset and stored the writer's count, not the leader epoch:
    # only a read raises it.
    assert summary(bootstrap, group, tid, 0) == (0, *OK, 0, 0, 6, 4)
    assert read(bootstrap, group, tid, 1) == (0, *OK, 0, 6, batches)
    assert summary(bootstrap, group, tid, 1) == (0, *OK, 0, 1, 6, 4)
    assert summary(bootstrap, group, tid, 1, version=0) == (0, *OK, 0, 1, 6, None)

    # A v0 write (no count: -1) at the same start offset adds a batch and keeps the count.
    assert write(bootstrap, group, tid, 0, 1, 6, [(10, 10, AVAILABLE, 1)], version=0) == (0, *OK)
    assert read(bootstrap, group, tid, 1) == (0, *OK, 0, 6, batches + [(10, 10, AVAILABLE, 1)])
    assert summary(bootstrap, group, tid, 1) == (0, *OK, 0, 1, 6, 4)

    # Advancing the start offset drops the batches before it and takes the writer's count.
    assert write(bootstrap, group, tid, 0, 1, 8, [], delivery_complete_count=2) == (0, *OK)
    after = [(8, 9, ARCHIVED, 2), (10, 10, AVAILABLE, 1)]
    assert read(bootstrap, group, tid, 1) == (0, *OK, 0, 8, after)
    assert summary(bootstrap, group, tid, 1) == (0, *OK, 0, 1, 8, 2)

    # A start offset behind the stored one moves nothing back and keeps the stored count.
    assert write(bootstrap, group, tid, 0, 1, 5, [], delivery_complete_count=9) == (0, *OK)
    assert read(bootstrap, group, tid, 1) == (0, *OK, 0, 8, after)
    assert summary(bootstrap, group, tid, 1) == (0, *OK, 0, 1, 8, 2)
    # At the same start offset the larger count wins.
    assert write(bootstrap, group, tid, 0, 1, 8, [], delivery_complete_count=1) == (0, *OK)
    assert summary(bootstrap, group, tid, 1) == (0, *OK, 0, 1, 8, 2)
    assert write(bootstrap, group, tid, 0, 1, 8, [], delivery_complete_count=3) == (0, *OK)
    assert summary(bootstrap, group, tid, 1) == (0, *OK, 0, 1, 8, 3)


def test_leader_and_state_epoch_fencing(broker, topic_name):
    bootstrap = broker.bootstrap
    tid = new_topic(bootstrap, topic_name)
    group = new_group()
    wait_for_share_coordinator(bootstrap, share_key(group, tid, 0))

    assert initialize(bootstrap, group, tid, 0, 5) == (0, *OK)
    assert read(bootstrap, group, tid, 0) == (0, *OK, 0, 5, [])
    batches = [(6, 7, ACKNOWLEDGED, 1), (8, 9, ARCHIVED, 2)]
    assert write(bootstrap, group, tid, 0, 1, 6, batches, delivery_complete_count=4) == (0, *OK)
    assert read(bootstrap, group, tid, 1) == (0, *OK, 0, 6, batches)

    # After the read at leader epoch 1, epoch 0 is fenced for writes and reads, with the
    # schema's zeros behind a fenced read; the summary is not fenced.
    assert write(bootstrap, group, tid, 0, 0, 6, []) == (0, FENCED_LEADER_EPOCH, FENCED_LEADER_MSG)
    assert read(bootstrap, group, tid, 0) == (0, FENCED_LEADER_EPOCH, FENCED_LEADER_MSG, 0, 0, [])
    assert summary(bootstrap, group, tid, 0) == (0, *OK, 0, 1, 6, 4)
    # A write at a higher leader epoch is accepted but raises nothing: epoch 1 still writes.
    assert write(bootstrap, group, tid, 0, 2, 6, []) == (0, *OK)
    assert write(bootstrap, group, tid, 0, 1, 6, []) == (0, *OK)
    assert summary(bootstrap, group, tid, 1) == (0, *OK, 0, 1, 6, 4)
    assert read(bootstrap, group, tid, 1) == (0, *OK, 0, 6, batches)

    # Initialize at state epoch 1 replaces the state: its start offset, no batches, count 0
    # (and the summary's leader epoch 0), but the leader epoch fence stays.
    assert initialize(bootstrap, group, tid, 1, 7) == (0, *OK)
    assert read(bootstrap, group, tid, 1) == (0, *OK, 1, 7, [])
    assert summary(bootstrap, group, tid, 1) == (0, *OK, 1, 0, 7, 0)
    assert read(bootstrap, group, tid, 0) == (0, FENCED_LEADER_EPOCH, FENCED_LEADER_MSG, 0, 0, [])

    # A write carrying the older state epoch 0 is fenced; state epoch 1 writes; a higher one is
    # accepted and does not change the state epoch.
    assert write(bootstrap, group, tid, 0, 1, 7, [(7, 7, ACKNOWLEDGED, 1)],
                 delivery_complete_count=1) == (0, FENCED_STATE_EPOCH, FENCED_STATE_MSG)
    assert write(bootstrap, group, tid, 1, 1, 7, [(7, 7, ACKNOWLEDGED, 1)],
                 delivery_complete_count=1) == (0, *OK)
    assert write(bootstrap, group, tid, 2, 1, 7, [], delivery_complete_count=1) == (0, *OK)
    assert read(bootstrap, group, tid, 1) == (0, *OK, 1, 7, [(7, 7, ACKNOWLEDGED, 1)])
    assert summary(bootstrap, group, tid, 1) == (0, *OK, 1, 0, 7, 1)

    # Initialize with an older state epoch is fenced too; the same one is accepted.
    assert initialize(bootstrap, group, tid, 0, 7) == (0, FENCED_STATE_EPOCH, FENCED_STATE_MSG)
    assert initialize(bootstrap, group, tid, 1, 7) == (0, *OK)


def test_delete_returns_the_share_partition_to_never_initialized(broker, topic_name):
    bootstrap = broker.bootstrap
    tid = new_topic(bootstrap, topic_name, records=5)
    group = new_group()
    wait_for_share_coordinator(bootstrap, share_key(group, tid, 0))

    assert initialize(bootstrap, group, tid, 1, 3) == (0, *OK)
    assert read(bootstrap, group, tid, 2) == (0, *OK, 1, 3, [])
    assert write(bootstrap, group, tid, 1, 2, 3, [(3, 4, ACKNOWLEDGED, 1)],
                 delivery_complete_count=2) == (0, *OK)

    assert delete(bootstrap, group, tid) == (0, *OK)
    assert read(bootstrap, group, tid, 2) == (0, INVALID_REQUEST, READ_UNINITIALIZED, 0, 0, [])
    assert summary(bootstrap, group, tid, 2) == (0, *OK, 0, 0, -1, -1)
    assert write(bootstrap, group, tid, 1, 2, 3, []) == (0, INVALID_REQUEST, WRITE_UNINITIALIZED)
    assert delete(bootstrap, group, tid) == (0, *OK)

    # The epochs went with the state: state epoch 0 initializes again, leader epoch 0 reads.
    assert initialize(bootstrap, group, tid, 0, 2) == (0, *OK)
    assert read(bootstrap, group, tid, 0) == (0, *OK, 0, 2, [])
    assert summary(bootstrap, group, tid, 0) == (0, *OK, 0, 0, 2, 0)


def test_requests_for_several_partitions_and_an_empty_group_id(broker, topic_name):
    bootstrap = broker.bootstrap
    tid = new_topic(bootstrap, topic_name)
    group = new_group()
    wait_for_share_coordinator(bootstrap, share_key(group, tid, 0))
    unknown = uuid.uuid4()

    # One answer per topic, each with every partition asked.
    assert by_topic(initialize_many(bootstrap, group, [(tid, [(0, 0, 4), (1, 0, 0)])])) == {
        tid: [(0, *OK), (1, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TP_MSG)]}
    assert by_topic(read_many(bootstrap, group, [(tid, [(0, 0), (1, 0), (2, 0)]),
                                                (unknown, [(0, 0)])])) == {
        tid: [(0, *OK, 0, 4, []), (1, INVALID_REQUEST, READ_UNINITIALIZED, 0, 0, []),
              (2, INVALID_REQUEST, READ_UNINITIALIZED, 0, 0, [])],
        unknown: [(0, INVALID_REQUEST, READ_UNINITIALIZED, 0, 0, [])]}
    assert by_topic(summary_many(bootstrap, group, [(tid, [(0, 0), (1, 0)]),
                                                   (unknown, [(0, 0)])])) == {
        tid: [(0, *OK, 0, 0, 4, 0), (1, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TP_MSG, 0, 0, 0, -1)],
        unknown: [(0, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TP_MSG, 0, 0, 0, -1)]}
    assert by_topic(delete_many(bootstrap, group, [(tid, [0, 1])])) == {
        tid: [(0, *OK), (1, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TP_MSG)]}
    assert read(bootstrap, group, tid, 0) == (0, INVALID_REQUEST, READ_UNINITIALIZED, 0, 0, [])

    # An empty group id gets an empty answer (no topics at all) from each API.
    assert initialize_many(bootstrap, "", [(tid, [(0, 0, 0)])]) == []
    assert read_many(bootstrap, "", [(tid, [(0, 0)])]) == []
    assert summary_many(bootstrap, "", [(tid, [(0, 0)])]) == []
    assert delete_many(bootstrap, "", [(tid, [0])]) == []
    assert _call(bootstrap, API_WRITE, 1, "", [(tid, [0])],
                 lambda _: struct.pack(">iiiqi", 0, 0, 0, 0, -1) + _array([]),
                 lambda r: (), Status) == []
