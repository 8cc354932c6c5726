"""Kafka's own kafka-metadata-quorum tool (kafka-tools, Admin.describeMetadataQuorum) reads the
metadata quorum of a 3-process Strata cluster through DescribeQuorum: the active controller,
its epoch and the three voters, before and after the active controller is killed.

Strata only (three-process quorum; the reference Kafka script runs a single node)."""

import subprocess
import time

import java_apps
import rawkafka
import pytest

from conftest import TARGET
from test_cluster import bootstrap, cluster, wait_until  # noqa: F401 - the fixture

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(TARGET != "strata",
                       reason="starts a 3-node Strata quorum; kafka-ref.sh runs a single node"),
]

QUORUM_TOOL = "org.apache.kafka.tools.MetadataQuorumCommand"


def quorum_status(brokers, tmp_path) -> dict[str, str]:
    """`kafka-metadata-quorum describe --status` against the running brokers, as key: value."""
    cp, why = java_apps.classpath("tools")
    assert cp is not None, why
    live = [b for b in brokers if b.running]
    cmd = [java_apps._java_bin(), *java_apps.JVM_OPTS, "-cp", cp, QUORUM_TOOL,
           "--bootstrap-server", bootstrap(live), "describe", "--status"]
    with open(tmp_path / "quorum-tool.log", "ab") as err:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, timeout=120)
    text = out.stdout.decode("utf-8", "replace")
    assert out.returncode == 0, f"exit {out.returncode}\n{text}"
    return {k.strip(): v.strip() for k, _, v in
            (line.partition(":") for line in text.splitlines() if ":" in line)}


@pytest.mark.timeout(240)
def test_kafka_metadata_quorum_tool_describes_the_quorum_and_its_new_leader(cluster, tmp_path):
    _, why = java_apps.classpath("tools")
    if why:
        pytest.skip(f"kafka-metadata-quorum needs the kafka-tools jars: {why}")
    status = quorum_status(cluster, tmp_path)
    print(status)
    leader = int(status["LeaderId"])
    epoch = int(status["LeaderEpoch"])
    assert leader in (1, 2, 3)
    assert int(status["HighWatermark"]) > 0
    for voter in (1, 2, 3):
        assert f'"id": {voter}' in status["CurrentVoters"], status["CurrentVoters"]

    # Kill the active controller: the tool then reports another leader at a later epoch.
    cluster[leader - 1].kill9()
    found = {}

    def moved():
        found.update(quorum_status(cluster, tmp_path))
        return int(found["LeaderId"]) != leader

    started = time.monotonic()
    wait_until("a new quorum leader in kafka-metadata-quorum", moved, timeout=60)
    print(f"new quorum leader {found['LeaderId']} (epoch {found['LeaderEpoch']}) "
          f"{time.monotonic() - started:.1f}s after killing {leader}")
    assert int(found["LeaderEpoch"]) > epoch
    cluster[leader - 1].start()


@pytest.mark.timeout(240)
def test_a_feature_level_set_on_one_broker_reaches_every_broker_and_survives_a_restart(cluster):
    from test_features import SAFE_DOWNGRADE, UPGRADE, update_features

    def levels(b):
        with rawkafka.Conn(b.bootstrap, timeout=10) as conn:
            _, epoch, finalized = conn.features(4)
        return finalized.get("transaction.version"), epoch

    code, message, _ = update_features(cluster[1].bootstrap, 2,
                                       [("transaction.version", 1, SAFE_DOWNGRADE)], False)
    assert code == 0, message
    wait_until("every broker applies transaction.version 1",
               lambda: all(levels(b)[0] == (1, 1) for b in cluster))
    epochs = {levels(b)[1] for b in cluster}
    assert len(epochs) == 1 and epochs.pop() > 0
    cluster[2].kill9()
    cluster[2].start()
    wait_until("the restarted broker keeps transaction.version 1",
               lambda: levels(cluster[2])[0] == (1, 1))
    code, message, _ = update_features(cluster[2].bootstrap, 2,
                                       [("transaction.version", 2, UPGRADE)], False)
    assert code == 0, message
    wait_until("every broker applies transaction.version 2",
               lambda: all(levels(b)[0] == (2, 2) for b in cluster))


@pytest.mark.timeout(300)
def test_kafka_cluster_tool_unregisters_a_dead_broker_which_registers_again_when_restarted(
        cluster, tmp_path):
    """`kafka-cluster unregister --id 3` with broker 3 killed: the cluster stops listing it
    and its partitions are led elsewhere; an unknown id is refused with Kafka's message.
    Started again, broker 3 registers again and is listed."""
    from helpers import admin

    cp, why = java_apps.classpath("tools")
    if cp is None:
        pytest.skip(f"kafka-cluster needs the kafka-tools jars: {why}")

    def cluster_tool(*args):
        live = [b for b in cluster if b.running]
        cmd = [java_apps._java_bin(), *java_apps.JVM_OPTS, "-cp", cp,
               "org.apache.kafka.tools.ClusterTool", *args, "--bootstrap-server", bootstrap(live)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)

    def listed():
        live = [b for b in cluster if b.running]
        md = admin(bootstrap(live)).list_topics(timeout=10)
        return set(md.brokers), md

    from confluent_kafka.admin import NewTopic
    fs = admin(bootstrap(cluster)).create_topics(
        [NewTopic("unregister-me", num_partitions=3, replication_factor=3)])
    fs["unregister-me"].result(timeout=30)
    wait_until("unregister-me has leaders", lambda: all(
        p.leader >= 0 for p in listed()[1].topics["unregister-me"].partitions.values()))
    cluster[2].kill9()
    out = cluster_tool("unregister", "--id", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    wait_until("broker 3 is no longer listed", lambda: listed()[0] == {1, 2})
    _, md = listed()
    for t in md.topics.values():
        for p in t.partitions.values():
            assert p.leader != 3, (t.topic, p.id, p.leader)
    bad = cluster_tool("unregister", "--id", "9")
    assert bad.returncode != 0
    assert "Broker ID 9 is not currently registered" in bad.stdout + bad.stderr
    cluster[2].start()
    wait_until("broker 3 registers again", lambda: listed()[0] == {1, 2, 3}, timeout=60)
