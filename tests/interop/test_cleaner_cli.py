"""`strata cleaner status`: the log cleaner's state as read from a running broker's admin
/metrics: one row per compacted partition (topic, partition, dirty ratio) and the cleaner's
totals. Strata only (the reference Kafka broker has no admin listener).
"""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest

from helpers import create_topic, produce

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("STRATA_TEST_TARGET", "strata").strip().lower() == "kafka",
        reason="`strata cleaner status` reads Strata's admin listener"),
]

MIB = 1 << 20
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": str(MIB),
    "min.cleanable.dirty.ratio": "0.01",
}


def cleaner_status(broker, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(broker.binary), "cleaner", "status", "--admin", f"127.0.0.1:{broker.admin_port}",
         *args], capture_output=True, text=True, timeout=30)


def rows(out: str) -> dict[tuple[str, int], float]:
    """(topic, partition) -> dirty ratio, from the table's rows."""
    got = {}
    for line in out.splitlines():
        m = re.match(r"^(\S+)\s+(\d+)\s+([0-9.]+)\s", line)
        if m:
            got[(m.group(1), int(m.group(2)))] = float(m.group(3))
    return got


def totals(out: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in
            (line.partition(":") for line in out.splitlines() if ":" in line)}


def test_cleaner_status_lists_the_compacted_partition_with_its_dirty_ratio_and_totals(
        broker_factory, topic_name):
    broker = broker_factory(props={"log.cleaner.backoff.ms": "200"}, name="cleaner-cli")
    b = broker.bootstrap
    plain = f"{topic_name}-plain"
    create_topic(b, topic_name, partitions=2, config=COMPACTED)
    create_topic(b, plain, partitions=1)
    # ~3 MiB of updates of 100 keys in partition 0: three sealed segments to clean.
    produce(b, topic_name, [{"key": b"key-%d" % (i % 100), "value": b"v" * 1024, "partition": 0}
                            for i in range(3000)], conf={"linger.ms": 5})
    produce(b, plain, [{"key": b"k", "value": b"v"}])

    deadline = time.monotonic() + 90
    while True:
        r = cleaner_status(broker)
        assert r.returncode == 0, r.stderr
        got, tot = rows(r.stdout), totals(r.stdout)
        if got.get((topic_name, 0)) == 0.0 and int(tot.get("passes", "0")) >= 1:
            break
        assert time.monotonic() < deadline, f"no cleaned {topic_name}/0 in:\n{r.stdout}"
        time.sleep(1)

    assert (topic_name, 1) in got, r.stdout
    assert not any(t == plain for t, _ in got), "a delete-policy topic is not listed"
    assert int(tot["bytes cleaned"].split()[0]) > 2 * MIB, r.stdout
    assert tot["errors"] == "0", r.stdout
    assert tot["last pass duration"].endswith(" s"), r.stdout

    only = cleaner_status(broker, "--topic", topic_name)
    assert only.returncode == 0, only.stderr
    assert set(rows(only.stdout)) == {(topic_name, 0), (topic_name, 1)}, only.stdout


def test_cleaner_status_fails_with_a_message_when_no_broker_listens(broker_factory):
    broker = broker_factory(name="cleaner-cli-down")
    broker.stop()
    r = cleaner_status(broker)
    assert r.returncode != 0
    assert "cannot connect to the admin listener" in r.stderr
