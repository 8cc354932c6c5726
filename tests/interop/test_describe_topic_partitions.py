"""DescribeTopicPartitions (API key 75, KIP-966): the Java admin client's describeTopics
paginated by a small partition limit, and the raw protocol's cursor and errors, with the same
answers from Strata and the reference Kafka.

The Java part is skipped when the Java classes are not built (scripts/build-java-tests.sh)."""

import json
import os
import struct
import subprocess

import pytest

import java_apps
from helpers import create_topic, wait_for_topic
from rawkafka import Conn, Reader
from rawkafka import encode_compact_string as _compact_string
from rawkafka import encode_uvarint as _uvarint

API_DESCRIBE_TOPIC_PARTITIONS = 75
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUEST = 42
MAIN = "io.strata.interop.InteropClient"


def _request(topics, limit, cursor=None) -> bytes:
    body = _uvarint(len(topics) + 1)
    for t in topics:
        body += _compact_string(t) + b"\x00"
    body += struct.pack(">i", limit)
    if cursor is None:
        body += b"\xff"  # null struct
    else:
        body += b"\x01" + _compact_string(cursor[0]) + struct.pack(">i", cursor[1]) + b"\x00"
    return body + b"\x00"


def _int32s(r: Reader):
    n = r.uvarint() - 1
    return None if n < 0 else [r.int32() for _ in range(n)]


def describe(bootstrap, topics, limit, cursor=None):
    """One DescribeTopicPartitions v0 round trip: ({topic: (error, [partition dicts])}, cursor)."""
    with Conn(bootstrap) as c:
        r = Reader(c.request_flexible(API_DESCRIBE_TOPIC_PARTITIONS, 0,
                                      _request(topics, limit, cursor)))
    r.int32()  # throttle
    out = {}
    for _ in range(r.uvarint() - 1):
        error = r.int16()
        name = r.compact_string()
        r.i += 16  # topic id
        r.int8()  # is_internal
        parts = []
        for _ in range(r.uvarint() - 1):
            p = {"error": r.int16(), "partition": r.int32(), "leader": r.int32(),
                 "epoch": r.int32(), "replicas": _int32s(r), "isr": _int32s(r),
                 "elr": _int32s(r), "last_known_elr": _int32s(r), "offline": _int32s(r)}
            r.skip_tagged_fields()
            parts.append(p)
        r.int32()  # topic authorized operations
        r.skip_tagged_fields()
        out[name] = (error, parts)
    next_cursor = None
    if r.int8() == 1:
        next_cursor = (r.compact_string(), r.int32())
        r.skip_tagged_fields()
    r.skip_tagged_fields()
    return out, next_cursor


def _indices(resp, topic):
    return [p["partition"] for p in resp[topic][1]]


def test_describe_topic_partitions_pages_by_partition_limit_with_a_cursor(broker, topic_name):
    a, b = f"{topic_name}-a", f"{topic_name}-b"
    create_topic(broker.bootstrap, a, partitions=5)
    create_topic(broker.bootstrap, b, partitions=3)
    wait_for_topic(broker.bootstrap, a, 5)
    wait_for_topic(broker.bootstrap, b, 3)

    # The limit stops inside the first topic: the cursor names the first partition left out.
    resp, cursor = describe(broker.bootstrap, [b, a], 4)
    assert list(resp) == [a] and _indices(resp, a) == [0, 1, 2, 3]
    assert cursor == (a, 4)
    for p in resp[a][1]:
        assert p["error"] == 0 and p["leader"] >= 0
        assert p["replicas"] == [p["leader"]] and p["isr"] == [p["leader"]]
        assert p["elr"] == [] and p["last_known_elr"] == [] and p["offline"] == []
    resp, cursor = describe(broker.bootstrap, [b, a], 4, cursor)
    assert list(resp) == [a, b] and _indices(resp, a) == [4] and _indices(resp, b) == [0, 1, 2]
    assert cursor is None

    # The limit ends exactly with a topic: the cursor points at the next topic's start.
    resp, cursor = describe(broker.bootstrap, [a, b], 5)
    assert list(resp) == [a] and cursor == (b, 0)

    # A limit of 0 is raised to 1; one past a topic's last partition yields it empty.
    resp, cursor = describe(broker.bootstrap, [a, b], 0)
    assert _indices(resp, a) == [0] and cursor == (a, 1)
    resp, cursor = describe(broker.bootstrap, [a, b], 10, (a, 7))
    assert _indices(resp, a) == [] and _indices(resp, b) == [0, 1, 2] and cursor is None

    # A named unknown topic is answered with UNKNOWN_TOPIC_OR_PARTITION and takes no room.
    missing = f"{topic_name}-0-missing"
    resp, cursor = describe(broker.bootstrap, [missing, b], 3)
    assert resp[missing] == (UNKNOWN_TOPIC_OR_PARTITION, [])
    assert _indices(resp, b) == [0, 1, 2] and cursor is None

    # A cursor on a topic the request does not name, or on a negative partition, is refused.
    resp, cursor = describe(broker.bootstrap, [a], 10, (b, 0))
    assert resp == {a: (INVALID_REQUEST, [])} and cursor is None
    resp, cursor = describe(broker.bootstrap, [a], 10, (a, -1))
    assert resp == {a: (INVALID_REQUEST, [])} and cursor is None

    # Listing all topics from a cursor on a topic that does not exist starts at the next one.
    resp, _ = describe(broker.bootstrap, [], 2000, (f"{topic_name}-a0", 3))
    assert a not in resp and _indices(resp, b) == [0, 1, 2]


def _java(bootstrap, *args):
    cp, why = java_apps.classpath("clients")
    if cp is None or java_apps.skip_reason("clients", MAIN):
        pytest.skip(f"Java interop client: {why or java_apps.skip_reason('clients', MAIN)}")
    java_bin = os.path.join(os.environ["JAVA_HOME"], "bin", "java") \
        if os.environ.get("JAVA_HOME") else "java"
    cmd = [java_bin, *java_apps.JVM_OPTS, "-cp", cp, MAIN, "admin-describe-topics",
           "--bootstrap", bootstrap, *[str(a) for a in args]]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"stdout: {out.stdout[-3000:]}\nstderr: {out.stderr[-3000:]}"
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_java_admin_describe_topics_pages_through_every_partition(broker, topic_name):
    a, b = f"{topic_name}-a", f"{topic_name}-b"
    missing = f"{topic_name}-missing"
    create_topic(broker.bootstrap, a, partitions=5)
    create_topic(broker.bootstrap, b, partitions=3)
    wait_for_topic(broker.bootstrap, a, 5)
    wait_for_topic(broker.bootstrap, b, 3)

    # Two partitions a response: the client follows the cursor through four responses.
    paged = _java(broker.bootstrap, "--topic", a, "--topic", b, "--topic", missing,
                  "--partition-size-limit", 2)
    by_topic = {d["topic"]: d for d in paged}
    assert by_topic[missing]["error"].startswith("UnknownTopicOrPartitionException")
    for name, count in ((a, 5), (b, 3)):
        d = by_topic[name]
        assert d["internal"] is False and d["topic_id"] != "AAAAAAAAAAAAAAAAAAAAAA"
        assert [p["partition"] for p in d["partitions"]] == list(range(count))
        for p in d["partitions"]:
            assert p["replicas"] == [p["leader"]] and p["isr"] == [p["leader"]]
            assert p["elr"] == [] and p["last_known_elr"] == []

    # Without pagination the description is the same.
    whole = _java(broker.bootstrap, "--topic", a, "--topic", b, "--topic", missing)
    assert whole == paged


def test_kafka_topics_describe_pages_with_partition_size_limit_per_response(broker, topic_name):
    cp, why = java_apps.classpath("tools")
    if cp is None:
        pytest.skip(f"Kafka tools jars: {why}")
    create_topic(broker.bootstrap, topic_name, partitions=5)
    wait_for_topic(broker.bootstrap, topic_name, 5)
    java_bin = os.path.join(os.environ["JAVA_HOME"], "bin", "java") \
        if os.environ.get("JAVA_HOME") else "java"

    def kafka_topics_describe(*extra):
        cmd = [java_bin, *java_apps.JVM_OPTS, "-cp", cp, "org.apache.kafka.tools.TopicCommand",
               "--bootstrap-server", broker.bootstrap, "--describe", "--topic", topic_name,
               *extra]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL)
        assert out.returncode == 0, f"stdout: {out.stdout[-3000:]}\nstderr: {out.stderr[-3000:]}"
        return out.stdout

    paged = kafka_topics_describe("--partition-size-limit-per-response", "2")
    rows = [line.split() for line in paged.splitlines() if line.strip().startswith("Topic:")]
    # A summary line, then one line per partition: "Topic: T Partition: N Leader: L ...".
    partitions = [int(r[r.index("Partition:") + 1]) for r in rows if "Partition:" in r]
    assert partitions == [0, 1, 2, 3, 4], paged
    assert "Elr:" in paged and "LastKnownElr:" in paged
    assert paged == kafka_topics_describe()
