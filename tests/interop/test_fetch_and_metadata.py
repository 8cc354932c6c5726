"""Fetch edge cases (out-of-range offsets and auto.offset.reset, unknown topics and
partitions) and Metadata topic auto-creation (auto.create.topics.enable)."""

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from helpers import (QUIET, create_topic, kp_consumer, produce, topic_exists,
                     topic_metadata, wait_for_topic)
from rawkafka import API_FETCH, API_VERSIONS, Conn

OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3


@pytest.fixture(scope="module")
def noauto_broker(module_broker_factory):
    """A broker with auto.create.topics.enable=false."""
    return module_broker_factory(props={"auto.create.topics.enable": "false"}, name="noauto")


def _raw(bootstrap):
    conn = Conn(bootstrap)
    lo, hi = conn.api_versions().get(API_FETCH, (None, None))
    if lo is None or not lo <= 4 <= hi:
        conn.close()
        pytest.skip(f"broker does not serve Fetch v4 (range {lo}..{hi})")
    return conn


# --------------------------------------------------------------------------- out of range

def _five_records(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce(broker.bootstrap, topic_name, [{"value": b"r%d" % i} for i in range(5)])


@pytest.mark.parametrize("offset", [100, 6, -5], ids=["far-past-end", "past-end", "negative"])
def test_raw_fetch_outside_log_fails_with_offset_out_of_range(broker, topic_name, offset):
    _five_records(broker, topic_name)
    with _raw(broker.bootstrap) as conn:
        err, _hw, records = conn.fetch_v4(topic_name, 0, offset)
    assert err == OFFSET_OUT_OF_RANGE
    assert not records


def test_raw_fetch_at_log_end_is_not_an_error_and_returns_no_records(broker, topic_name):
    _five_records(broker, topic_name)
    with _raw(broker.bootstrap) as conn:
        err, hw, records = conn.fetch_v4(topic_name, 0, 5, max_wait_ms=0)
    assert (err, hw) == (0, 5)
    assert not records


def test_confluent_out_of_range_offset_with_reset_earliest_restarts_from_log_start(broker,
                                                                                    topic_name):
    _five_records(broker, topic_name)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "oor",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET})
    try:
        c.assign([TopicPartition(topic_name, 0, 100)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append((m.offset(), m.value()))
        assert got == [(i, b"r%d" % i) for i in range(5)]
    finally:
        c.close()


def test_confluent_out_of_range_offset_with_reset_latest_only_sees_new_records(broker,
                                                                               topic_name):
    _five_records(broker, topic_name)
    import json
    state = {}

    def stats(js):
        p = json.loads(js).get("topics", {}).get(topic_name, {}).get("partitions", {}).get("0")
        if p:
            state.update(fetch_state=p.get("fetch_state"), next_offset=p.get("next_offset"))

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "oor",
                  "auto.offset.reset": "latest", "enable.auto.commit": False,
                  "statistics.interval.ms": 100, "stats_cb": stats, **QUIET})
    try:
        c.assign([TopicPartition(topic_name, 0, 100)])
        # Wait until the consumer has reset to the log end and is fetching from there.
        deadline = time.monotonic() + 30
        while not (state.get("fetch_state") == "active" and state.get("next_offset") == 5):
            assert time.monotonic() < deadline, f"consumer did not reset to the end: {state}"
            m = c.poll(0.2)
            assert m is None or m.error(), f"unexpected record at offset {m.offset()}"
        produce(broker.bootstrap, topic_name, [{"value": b"new"}])
        got = None
        deadline = time.monotonic() + 30
        while got is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got = (m.offset(), m.value())
        assert got == (5, b"new")
    finally:
        c.close()


def test_confluent_out_of_range_offset_with_reset_error_reports_offset_out_of_range(
        broker, topic_name):
    _five_records(broker, topic_name)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "oor",
                  "auto.offset.reset": "error", "enable.auto.commit": False, **QUIET})
    try:
        c.assign([TopicPartition(topic_name, 0, 100)])
        err = None
        deadline = time.monotonic() + 30
        while err is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error(), "got a record although the offset was out of range"
                err = m.error()
        assert err is not None
        assert err.code() == KafkaError._AUTO_OFFSET_RESET
        assert "out of range" in err.str().lower()
    finally:
        c.close()


@pytest.mark.parametrize("reset,expected", [("earliest", [0, 1, 2, 3, 4]), ("latest", [])])
def test_kafka_python_out_of_range_offset_follows_auto_offset_reset(broker, topic_name,
                                                                    reset, expected):
    from kafka import TopicPartition as KTP
    _five_records(broker, topic_name)
    c = kp_consumer(broker.bootstrap, auto_offset_reset=reset)
    try:
        tp = KTP(topic_name, 0)
        c.assign([tp])
        c.seek(tp, 100)
        got = []
        deadline = time.monotonic() + (30 if expected else 3)
        while len(got) < 5 and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                got.extend(r.offset for r in recs)
        assert got == expected
        assert c.position(tp) == 5
    finally:
        c.close()


def test_kafka_python_out_of_range_offset_without_reset_policy_raises(broker, topic_name):
    from kafka import TopicPartition as KTP
    from kafka.errors import OffsetOutOfRangeError
    _five_records(broker, topic_name)
    c = kp_consumer(broker.bootstrap, auto_offset_reset="none")
    try:
        tp = KTP(topic_name, 0)
        c.assign([tp])
        c.seek(tp, 100)
        with pytest.raises(OffsetOutOfRangeError):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                c.poll(timeout_ms=500)
    finally:
        c.close()


# --------------------------------------------------------------------------- unknown topics

def test_raw_fetch_of_nonexistent_topic_fails_with_unknown_topic_and_does_not_create_it(
        broker, topic_name):
    with _raw(broker.bootstrap) as conn:
        err, _hw, records = conn.fetch_v4(topic_name, 0, 0)
    assert err == UNKNOWN_TOPIC_OR_PARTITION
    assert not records
    assert not topic_exists(broker.bootstrap, topic_name)


def test_raw_fetch_of_nonexistent_partition_fails_with_unknown_topic_or_partition(
        broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    with _raw(broker.bootstrap) as conn:
        err, _hw, records = conn.fetch_v4(topic_name, 3, 0)
    assert err == UNKNOWN_TOPIC_OR_PARTITION
    assert not records


def test_consumer_assigned_to_nonexistent_topic_gets_nothing_and_does_not_create_it(
        broker, topic_name):
    # Consumers send Metadata with allow_auto_topic_creation=false: even with
    # auto.create.topics.enable=true the topic must not appear.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ghost", **QUIET})
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            m = c.poll(0.3)
            assert m is None or m.error(), "received a record from a nonexistent topic"
    finally:
        c.close()
    assert not topic_exists(broker.bootstrap, topic_name)


# --------------------------------------------------------------------------- auto-creation

def test_producer_metadata_request_auto_creates_topic_with_num_partitions(broker, topic_name):
    p = Producer({"bootstrap.servers": broker.bootstrap, "allow.auto.create.topics": True,
                  **QUIET})
    p.list_topics(topic=topic_name, timeout=10)  # Metadata with allow_auto_topic_creation
    wait_for_topic(broker.bootstrap, topic_name, 2)  # num.partitions=2 on the test broker
    t = topic_metadata(broker.bootstrap, topic_name)
    assert sorted(t.partitions) == [0, 1]


def test_producing_to_unknown_topic_auto_creates_it_and_delivers(broker, topic_name):
    delivered, _ = produce(broker.bootstrap, topic_name,
                           [{"value": b"first", "partition": 1}, {"value": b"second"}])
    assert len(delivered) == 2
    wait_for_topic(broker.bootstrap, topic_name, 2)


def test_kafka_python_producer_auto_creates_topic(broker, topic_name):
    from helpers import kp_produce
    delivered = kp_produce(broker.bootstrap, topic_name, [{"value": b"x", "partition": 0}])
    assert [(d.partition, d.offset) for d in delivered] == [(0, 0)]
    wait_for_topic(broker.bootstrap, topic_name, 2)


def test_metadata_for_unknown_topic_without_auto_create_is_unknown_topic_or_partition(
        noauto_broker, topic_name):
    p = Producer({"bootstrap.servers": noauto_broker.bootstrap,
                  "allow.auto.create.topics": True, **QUIET})
    md = p.list_topics(topic=topic_name, timeout=10)
    t = md.topics[topic_name]
    assert t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert not t.partitions
    assert not topic_exists(noauto_broker.bootstrap, topic_name)


def test_producing_to_unknown_topic_without_auto_create_fails_and_creates_nothing(
        noauto_broker, topic_name):
    _, errors = produce(noauto_broker.bootstrap, topic_name, [{"value": b"lost"}],
                        conf={"message.timeout.ms": 4000}, expect_errors=True)
    assert len(errors) == 1
    # librdkafka keeps waiting for the topic to appear until the message times out.
    assert errors[0].code() in (KafkaError._MSG_TIMED_OUT, KafkaError.UNKNOWN_TOPIC_OR_PART,
                                KafkaError._UNKNOWN_TOPIC)
    assert not topic_exists(noauto_broker.bootstrap, topic_name)


def test_kafka_python_send_to_unknown_topic_without_auto_create_times_out(noauto_broker,
                                                                         topic_name):
    from kafka.errors import KafkaTimeoutError
    from helpers import kp_producer
    p = kp_producer(noauto_broker.bootstrap, max_block_ms=3000)
    try:
        with pytest.raises(KafkaTimeoutError):
            p.send(topic_name, b"lost").get(timeout=10)
    finally:
        p.close(timeout=5)
    assert not topic_exists(noauto_broker.bootstrap, topic_name)


def test_explicit_create_still_works_without_auto_create(noauto_broker, topic_name):
    create_topic(noauto_broker.bootstrap, topic_name, partitions=3)
    delivered, _ = produce(noauto_broker.bootstrap, topic_name, [{"value": b"ok", "partition": 2}])
    assert [(d.partition, d.offset) for d in delivered] == [(2, 0)]


def test_api_versions_v5_tells_a_client_that_reached_another_cluster_or_node_to_rebootstrap(
        broker):
    """ApiVersions v5 names the cluster and node the client expects: the right ones (or
    none) get the API list; another cluster id or node id gets REBOOTSTRAP_REQUIRED (129)
    and no list; a cluster without a node (or the reverse) is INVALID_REQUEST (42); the
    connection stays usable."""
    with Conn(broker.bootstrap) as conn:
        cluster = conn.describe_cluster_id()
        node = conn.describe_cluster_controller()
        err, apis = conn.api_versions_v5(cluster, node)
        assert err == 0 and apis[API_VERSIONS][1] >= 5
        assert conn.api_versions_v5(None, -1)[0] == 0
        for other_cluster, other_node in ((cluster + "x", node), (cluster, node + 1)):
            assert conn.api_versions_v5(other_cluster, other_node) == (129, {})
        assert conn.api_versions_v5(cluster, -1) == (42, {})
        assert conn.api_versions_v5(None, node) == (42, {})
        assert API_FETCH in conn.api_versions()
