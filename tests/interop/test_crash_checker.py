"""The randomized crash checker (crash_checker.py) as a short campaign: one broker, and a
3-node RF=3 cluster, each with random kill -9 and SIGSTOP of brokers under idempotent and
transactional producers and a committing consumer group. Every acknowledged record must be
present exactly once, in order; transactions all-or-nothing; group offsets intact.

`STRATA_CRASH_CYCLES` sets the faults per configuration (default 4) and `STRATA_CRASH_SEED`
the seed (default: random, printed). benches/crash-checker.sh runs the long campaign."""

import os
import random

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
    b = broker_factory(props, name="crash-single")
    summary = crash_checker.run("single", [b], data_topics, "cctxn", CYCLES, seed(), 1)
    report(summary)


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
