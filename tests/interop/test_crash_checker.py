"""The randomized crash checker (crash_checker.py) as a short campaign: one broker, and a
3-node RF=3 cluster, each with random kill -9 and SIGSTOP of brokers under idempotent and
transactional producers and a committing consumer group. Every acknowledged record must be
present exactly once, in order; transactions all-or-nothing; group offsets intact.

`STRATA_CRASH_CYCLES` sets the faults per configuration (default 4) and `STRATA_CRASH_SEED`
the seed (default: random, printed). benches/crash-checker.sh runs the long campaign."""

import contextlib
import os
import random
import subprocess

import pytest

import crash_checker
from conftest import TARGET
from test_cluster import start_cluster
from test_tiering import file_store_props, tiered_broker_props

CYCLES = int(os.environ.get("STRATA_CRASH_CYCLES", "4"))


def seed() -> int:
    return int(os.environ.get("STRATA_CRASH_SEED", random.randrange(1 << 31)))


def report(summary):
    print(summary.line())
    for p in summary.problems[:20]:
        print("  ", p)
    assert summary.acknowledged > 0, "nothing was acknowledged: the workload did not run"
    assert summary.ok, summary.line()


COMPACTED = {"cleanup.policy": "compact", "segment.ms": "2000", "min.cleanable.dirty.ratio": "0.01"}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_single_broker_keeps_every_acknowledged_record_through_random_kills(broker_factory,
                                                                            tmp_path):
    data_topics = {"ccplain": {}, "cccompacted": COMPACTED}
    props = {"auto.create.topics.enable": "false"}
    if TARGET == "strata":
        props.update(tiered_broker_props(file_store_props(tmp_path / "bucket")))
        tiered = {"remote.storage.enable": "true", "local.retention.bytes": "1",
                  "internal.segment.bytes": "65536", "retention.ms": "-1"}
        data_topics["cctiered"] = tiered
        data_topics["cctieredcompacted"] = {**tiered, **COMPACTED}
    extra = {}
    if TARGET == "strata":
        extra["bucket-outage"] = crash_checker.BucketOutage(tmp_path / "bucket")
    b = broker_factory(props, name="crash-single", start=False)
    # Kafka halts when its only log dir fails, so the full disk is a Strata-only fault.
    with small_disk(b.data_dir if TARGET == "strata" else None) as mounted:
        if mounted:
            extra["disk-full"] = crash_checker.FullDisk(b.data_dir)
        b.start()
        try:
            summary = crash_checker.run("single", [b], data_topics, "cctxn", CYCLES, seed(), 1,
                                        extra)
        finally:
            b.stop()
    report(summary)


@contextlib.contextmanager
def small_disk(path, size="256m"):
    """A tmpfs of `size` on `path` when this process may mount (CI runs as root); yields
    whether it did. Unmounted on the way out."""
    mounted = False
    if path is None:
        yield False
        return
    if os.geteuid() == 0:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                                  str(path)], capture_output=True).returncode == 0
    if not mounted:
        print(f"crash-checker: no small disk at {path} (not root, or mount refused): "
              f"the disk-full fault is skipped")
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(TARGET != "strata", reason="starts a 3-node Strata quorum")
def test_three_node_cluster_keeps_every_acknowledged_record_through_random_kills(
        broker_factory):
    for brokers in start_cluster(broker_factory, 3, **{"replica.lag.time.max.ms": 3000}):
        data_topics = {"ccplain": {"min.insync.replicas": "2"},
                       "cccompacted": {**COMPACTED, "min.insync.replicas": "2"}}
        summary = crash_checker.run("cluster-rf3", brokers, data_topics, "cctxn", CYCLES,
                                    seed(), 3)
        report(summary)
