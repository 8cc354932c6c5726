"""kcat (the librdkafka command-line client): metadata listing, produce and consume.
Skipped when neither kcat nor kafkacat is installed."""

import json
import shutil
import subprocess

import pytest

from helpers import consume, create_topic, produce

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat/kafkacat is not installed "
                                "(scripts/install-test-deps.sh installs it)")


def kcat(bootstrap, *args, stdin=None, timeout=60):
    cp = subprocess.run([KCAT, "-b", bootstrap, *args], input=stdin, capture_output=True,
                        timeout=timeout)
    assert cp.returncode == 0, f"kcat {' '.join(args)} exited {cp.returncode}: {cp.stderr!r}"
    return cp.stdout


def test_kcat_metadata_lists_broker_and_topic_partitions(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=3)
    md = json.loads(kcat(broker.bootstrap, "-L", "-J", "-t", topic_name))
    host, port = broker.bootstrap.split(":")
    assert [(b["name"].rsplit(":", 1)[0], b["name"].rsplit(":", 1)[1]) for b in md["brokers"]] \
        == [(host, port)]
    (t,) = [t for t in md["topics"] if t["topic"] == topic_name]
    assert "error" not in t
    assert sorted(p["partition"] for p in t["partitions"]) == [0, 1, 2]
    leader = md["brokers"][0]["id"]
    assert all(p["leader"] == leader for p in t["partitions"])


def test_kcat_plain_listing_mentions_topic(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    out = kcat(broker.bootstrap, "-L").decode()
    assert f'topic "{topic_name}" with 2 partitions' in out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produced_keyed_records_are_consumed_by_kcat_and_confluent(broker, topic_name,
                                                                        codec):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    lines = [f"k{i}:value {i} {'x' * i}" for i in range(50)]
    kcat(broker.bootstrap, "-P", "-t", topic_name, "-p", "0", "-K:", "-z", codec,
         "-H", "origin=kcat", stdin=("\n".join(lines) + "\n").encode())

    out = kcat(broker.bootstrap, "-C", "-t", topic_name, "-o", "beginning", "-e", "-q",
               "-f", "%o|%k|%s|%h\n").decode()
    assert out.splitlines() == [f"{i}|k{i}|value {i} {'x' * i}|origin=kcat" for i in range(50)]

    got = consume(broker.bootstrap, topic_name, 50)
    assert [(r.key, r.value, r.headers) for r in got] == \
        [(b"k%d" % i, b"value %d " % i + b"x" * i, [("origin", b"kcat")]) for i in range(50)]


def test_kcat_consumes_records_produced_by_confluent_with_timestamps(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    produce(broker.bootstrap, topic_name,
            [{"key": b"a", "value": b"one", "partition": 1, "timestamp": 1_600_000_000_000},
             {"key": b"b", "value": b"two", "partition": 1, "timestamp": 1_600_000_000_001}])
    out = kcat(broker.bootstrap, "-C", "-t", topic_name, "-p", "1", "-o", "beginning", "-e",
               "-q", "-f", "%p|%o|%T|%k|%s\n").decode()
    assert out.splitlines() == ["1|0|1600000000000|a|one", "1|1|1600000000001|b|two"]


def test_kcat_consume_from_offset_and_count(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce(broker.bootstrap, topic_name, [{"value": b"m%d" % i} for i in range(20)])
    out = kcat(broker.bootstrap, "-C", "-t", topic_name, "-p", "0", "-o", "15", "-c", "3",
               "-q", "-f", "%o:%s\n").decode()
    assert out.splitlines() == ["15:m15", "16:m16", "17:m17"]
    out = kcat(broker.bootstrap, "-C", "-t", topic_name, "-p", "0", "-o", "-2", "-e", "-q",
               "-f", "%o:%s\n").decode()
    assert out.splitlines() == ["18:m18", "19:m19"]
