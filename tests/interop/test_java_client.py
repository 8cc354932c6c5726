"""The official Java client (kafka-clients, via tests/java's InteropClient): produce and
consume with every codec, idempotent produce, and topic admin.

Skipped when the Java classes are not built (scripts/install-test-deps.sh or
scripts/build-java-tests.sh builds them into $STRATA_CACHE/java-classes)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import consume, create_topic, produce, wait_for_topic

REPO_ROOT = Path(__file__).resolve().parents[2]
STRATA_CACHE = Path(os.environ.get("STRATA_CACHE") or (Path.home() / ".cache" / "strata"))
CLASSES = STRATA_CACHE / "java-classes"
CLASS_FILE = CLASSES / "io" / "strata" / "interop" / "InteropClient.class"
MAIN = "io.strata.interop.InteropClient"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _classpath():
    if shutil.which("java") is None:
        return None, "java is not installed"
    if not CLASS_FILE.exists():
        return None, (f"{CLASS_FILE} is not built yet "
                      f"(run scripts/install-test-deps.sh or scripts/build-java-tests.sh)")
    script = REPO_ROOT / "scripts" / "java-classpath.sh"
    if not script.exists():
        return None, f"{script} does not exist"
    cp = subprocess.run(["bash", str(script), "clients"], capture_output=True, text=True)
    if cp.returncode != 0 or not cp.stdout.strip():
        return None, f"kafka-clients jars are missing: {cp.stderr.strip()}"
    return f"{CLASSES}:{cp.stdout.strip()}", None


CLASSPATH, SKIP_REASON = _classpath()
pytestmark = pytest.mark.skipif(CLASSPATH is None, reason=f"Java interop client: {SKIP_REASON}")

# A small, JIT-light JVM: these are short runs on a shared 2-core machine.
JVM_OPTS = ["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto"]


def java(bootstrap, command, *args, expect_rc=0, timeout=120):
    """Run InteropClient; returns the JSON objects it printed."""
    java_bin = os.path.join(os.environ["JAVA_HOME"], "bin", "java") \
        if os.environ.get("JAVA_HOME") else "java"
    cmd = [java_bin, *JVM_OPTS, "-cp", CLASSPATH, MAIN, command, "--bootstrap", bootstrap,
           *[str(a) for a in args]]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(line) for line in cp.stdout.splitlines() if line.startswith("{")]
    assert cp.returncode == expect_rc, \
        f"InteropClient {command} exited {cp.returncode} (wanted {expect_rc})\n" \
        f"stdout: {cp.stdout[-3000:]}\nstderr: {cp.stderr[-3000:]}"
    return lines


def _value(i, size=None):
    v = b"value-%d" % i
    return v if size is None else v + b"x" * (size - len(v))


@pytest.mark.parametrize("codec", CODECS)
def test_java_produced_codec_roundtrips_to_java_and_confluent_consumers(broker, topic_name,
                                                                       codec):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    n, size = 300, 700
    acks = java(broker.bootstrap, "produce", "--topic", topic_name, "--count", n,
                "--compression", codec, "--value-size", size, "--partition", 0)
    assert not [a for a in acks if "error" in a]
    assert sorted(a["offset"] for a in acks) == list(range(n))
    assert {a["index"]: a["offset"] for a in acks} == {i: i for i in range(n)}

    got = java(broker.bootstrap, "consume", "--topic", topic_name, "--count", n)
    assert [(r["offset"], r["key"], r["value"]) for r in got] == \
        [(i, f"key-{i}", _value(i, size).decode()) for i in range(n)]
    assert all(r["headers"] == [{"key": "strata-index", "value": str(r["offset"])}] for r in got)
    assert all(r["timestamp_type"] == "CreateTime" for r in got)

    recs = consume(broker.bootstrap, topic_name, n)
    assert [(r.key, r.value) for r in recs] == [(b"key-%d" % i, _value(i, size)) for i in range(n)]
    assert [r.headers for r in recs] == [[("strata-index", b"%d" % i)] for i in range(n)]


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_java_consumer_reads_records_produced_by_confluent(broker, topic_name, codec):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    recs = [{"key": b"k%d" % i, "value": b"v%d" % i, "partition": i % 2,
             "headers": [("h", b"%d" % i)], "timestamp": 1_600_000_000_000 + i}
            for i in range(100)]
    produce(broker.bootstrap, topic_name, recs, conf={"compression.type": codec})
    got = java(broker.bootstrap, "consume", "--topic", topic_name, "--count", 100)
    for p in (0, 1):
        mine = [r for r in got if r["partition"] == p]
        want = [r for r in recs if r["partition"] == p]
        assert [(r["offset"], r["key"], r["value"], r["timestamp"]) for r in mine] == \
            [(o, w["key"].decode(), w["value"].decode(), w["timestamp"])
             for o, w in enumerate(want)]
        assert [r["headers"] for r in mine] == \
            [[{"key": "h", "value": w["headers"][0][1].decode()}] for w in want]


def test_java_idempotent_producer_writes_each_record_once_in_order(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=3)
    n = 3000
    acks = java(broker.bootstrap, "produce", "--topic", topic_name, "--count", n,
                "--idempotent", "true", "--acks", "all", "--compression", "lz4",
                "--config", "max.in.flight.requests.per.connection=5",
                "--config", "retries=2147483647")
    assert not [a for a in acks if "error" in a]
    assert sorted(a["index"] for a in acks) == list(range(n))
    # Offsets per partition are dense and follow the send order.
    for p in range(3):
        mine = sorted((a for a in acks if a["partition"] == p), key=lambda a: a["index"])
        assert [a["offset"] for a in mine] == list(range(len(mine)))

    got = consume(broker.bootstrap, topic_name, n, partitions=range(3))
    assert len(got) == n
    assert sorted(r.value for r in got) == sorted(_value(i) for i in range(n))
    for p in range(3):
        idx = [int(dict(r.headers)["strata-index"]) for r in got if r.partition == p]
        assert idx == sorted(idx), f"partition {p} out of order"


def test_java_admin_create_describe_list_and_delete(broker, topic_name):
    out = java(broker.bootstrap, "admin-create", "--topic", topic_name, "--partitions", 3,
               "--topic-config", "retention.ms=3600000",
               "--topic-config", "cleanup.policy=delete")
    assert out == [{"created": topic_name, "partitions": 3, "replication_factor": 1}]
    wait_for_topic(broker.bootstrap, topic_name, 3)

    (desc,) = java(broker.bootstrap, "admin-describe", "--topic", topic_name)
    assert desc["topic"] == topic_name and desc["internal"] is False
    assert [p["partition"] for p in desc["partitions"]] == [0, 1, 2]
    for p in desc["partitions"]:
        assert p["replicas"] == [p["leader"]] and p["isr"] == [p["leader"]]
    assert desc["configs"]["retention.ms"] == "3600000"
    assert desc["topic_id"] not in ("", "AAAAAAAAAAAAAAAAAAAAAA")  # a real, non-zero id

    (lst,) = java(broker.bootstrap, "admin-list")
    assert topic_name in lst["topics"]

    (err,) = java(broker.bootstrap, "admin-create", "--topic", topic_name, expect_rc=1)
    assert err["error"].startswith("TopicExistsException")

    assert java(broker.bootstrap, "admin-delete", "--topic", topic_name) == [{"deleted": topic_name}]
    (err,) = java(broker.bootstrap, "admin-delete", "--topic", topic_name + "-nope", expect_rc=1)
    assert err["error"].startswith("UnknownTopicOrPartitionException")


def test_java_admin_describe_cluster_reports_this_broker(broker):
    (c,) = java(broker.bootstrap, "admin-describe")
    host, port = broker.bootstrap.split(":")
    assert [(n["host"], n["port"]) for n in c["nodes"]] == [(host, int(port))]
    assert c["cluster_id"]
    assert c["controller"] is not None


def test_java_produce_over_topic_max_message_bytes_fails_with_record_too_large(broker,
                                                                              topic_name):
    create_topic(broker.bootstrap, topic_name, config={"max.message.bytes": 10_000})
    out = java(broker.bootstrap, "produce", "--topic", topic_name, "--count", 1,
               "--value-size", 20_000, "--config", "max.request.size=1000000", expect_rc=1)
    (a,) = [o for o in out if "index" in o]
    assert a["error"].startswith("RecordTooLargeException")


@pytest.mark.groups
def test_java_consumer_group_subscribe_reads_everything_and_commits(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    produce(broker.bootstrap, topic_name,
            [{"value": b"g%d" % i, "partition": i % 2} for i in range(40)])
    group = f"{topic_name}-group"
    got = java(broker.bootstrap, "consume", "--topic", topic_name, "--count", 40,
               "--group", group, "--timeout-ms", 60000)
    assert sorted(r["value"] for r in got) == sorted(f"g{i}" for i in range(40))
    # The committed offsets are the log ends.
    from confluent_kafka import Consumer, TopicPartition
    from helpers import QUIET
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, **QUIET})
    try:
        committed = c.committed([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)],
                                timeout=30)
        assert [tp.offset for tp in committed] == [20, 20]
    finally:
        c.close()
