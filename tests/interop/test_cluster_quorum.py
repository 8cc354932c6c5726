"""Kafka's own kafka-metadata-quorum tool (kafka-tools, Admin.describeMetadataQuorum) reads the
metadata quorum of a 3-process Strata cluster through DescribeQuorum: the active controller,
its epoch and the three voters, before and after the active controller is killed.

Strata only (three-process quorum; the reference Kafka script runs a single node)."""

import re
import subprocess
import time

import java_apps
import rawkafka
import pytest

from conftest import TARGET
from test_cluster import bootstrap, cluster, start_cluster, wait_until  # noqa: F401 - the fixture

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


def quorum_tool(brokers, tmp_path, *args, config=None):
    """kafka-metadata-quorum against the running brokers -> (exit status, stdout+stderr)."""
    cp, why = java_apps.classpath("tools")
    assert cp is not None, why
    live = [b for b in brokers if b.running]
    cmd = [java_apps._java_bin(), *java_apps.JVM_OPTS, "-cp", cp, QUORUM_TOOL,
           "--bootstrap-server", bootstrap(live)]
    if config is not None:
        cmd += ["--command-config", str(config)]
    out = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=180,
                         stdin=subprocess.DEVNULL)
    return out.returncode, out.stdout + out.stderr


def replication(brokers, tmp_path) -> dict[int, tuple[str, str]]:
    """`describe --replication`: node id -> (directory id, Leader/Follower/Observer)."""
    code, text = quorum_tool(brokers, tmp_path, "describe", "--replication")
    assert code == 0, text
    rows = {}
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 7 and cols[0].isdigit():
            rows[int(cols[0])] = (cols[1], cols[-1])
    return rows


def with_a_joining_fourth_node(broker_factory, **fourth):
    """Four brokers; 1-3 vote, 4 observes: as a Kafka 4.4 controller added to a running
    quorum, it names the quorum with controller.quorum.bootstrap.servers, not the voters,
    and takes the extra settings `fourth`."""
    def listeners(b, rpc_port):
        b.props["listeners"] = (f"PLAINTEXT://127.0.0.1:{b.port},"
                                f"CONTROLLER://127.0.0.1:{rpc_port}")
        if b.props["node.id"] == "4":
            voters = b.props.pop("controller.quorum.voters")
            b.props["controller.quorum.bootstrap.servers"] = ",".join(
                v.split("@", 1)[1] for v in voters.split(","))
            b.props.update(fourth)

    yield from start_cluster(broker_factory, 4, voters=3, listeners=listeners,
                             **{"process.roles": "broker,controller"})


@pytest.fixture
def three_voters_and_an_observer(broker_factory):
    yield from with_a_joining_fourth_node(broker_factory)


@pytest.mark.timeout(300)
def test_an_observer_with_auto_join_becomes_a_voter_by_itself(broker_factory, tmp_path):
    """controller.quorum.auto.join.enable=true (KIP-1186): the fourth node adds itself to the
    voters once it has caught up, with no add-controller; the four voters commit metadata."""
    from confluent_kafka.admin import NewTopic
    from helpers import admin

    _, why = java_apps.classpath("tools")
    if why:
        pytest.skip(f"kafka-metadata-quorum needs the kafka-tools jars: {why}")
    gen = with_a_joining_fourth_node(broker_factory,
                                     **{"controller.quorum.auto.join.enable": "true"})
    nodes = next(gen)
    try:
        def voters():
            s = quorum_status(nodes, tmp_path)
            return {int(v) for v in re.findall(r'"id": (\d+)', s["CurrentVoters"])}

        wait_until("node 4 among the voters", lambda: voters() == {1, 2, 3, 4}, timeout=90)
        rows = replication(nodes, tmp_path)
        assert all(rows[i][1] in ("Leader", "Follower") for i in (1, 2, 3, 4)), rows
        a = admin(bootstrap(nodes))
        a.create_topics([NewTopic("after-auto-join", num_partitions=1,
                                  replication_factor=3)])["after-auto-join"].result(timeout=30)
    finally:
        gen.close()


@pytest.mark.timeout(420)
def test_a_voter_is_replaced_under_load_with_kafkas_quorum_tool(three_voters_and_an_observer,
                                                                 tmp_path):
    """KIP-853 on a running cluster: `kafka-metadata-quorum add-controller` promotes observer
    4 (the tool reads its config file and directory id), `remove-controller` removes the
    quorum's leader by the directory id `describe --replication` lists, and the removed node
    is killed. Meanwhile an idempotent acks=all producer runs: every acknowledged record is
    there once, in order; the new quorum commits metadata, and keeps its voters across a
    kill -9 and restart of the new voter."""
    from confluent_kafka.admin import NewTopic
    from test_cluster import NumberedProducer, partition_state
    from helpers import admin, consume

    _, why = java_apps.classpath("tools")
    if why:
        pytest.skip(f"kafka-metadata-quorum needs the kafka-tools jars: {why}")
    nodes = three_voters_and_an_observer
    topic = "cluster-kill9"
    a = admin(bootstrap(nodes))
    a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3,
                              config={"min.insync.replicas": "2"})])[topic].result(timeout=30)
    wait_until("a leader and a full ISR", lambda: len(partition_state(nodes)[1]) == 3)
    p = NumberedProducer(bootstrap(nodes))
    p.thread.start()
    try:
        wait_until("acknowledged records", lambda: len(p.acked) > 100, timeout=60)
        # Each node reports its directory id once it has written its meta.properties.
        rows = {}

        def every_directory_id():
            rows.update(replication(nodes, tmp_path))
            return len(rows) == 4 and all(d != "AAAAAAAAAAAAAAAAAAAAAA" for d, _ in rows.values())

        wait_until("every node's directory id", every_directory_id, timeout=60)
        assert rows[4][1] == "Observer", rows
        assert {rows[i][1] for i in (1, 2, 3)} <= {"Leader", "Follower"}, rows

        code, text = quorum_tool(nodes, tmp_path, "add-controller", config=nodes[3].config_path)
        assert code == 0, text
        assert f"Added controller 4 with directory id {rows[4][0]}" in text, text
        wait_until("4 votes", lambda: replication(nodes, tmp_path)[4][1] in ("Leader", "Follower"))
        code, text = quorum_tool(nodes, tmp_path, "add-controller", config=nodes[3].config_path)
        assert code != 0 and "DuplicateVoterException" in text, text

        status = quorum_status(nodes, tmp_path)
        leader = int(status["LeaderId"])
        assert leader in (1, 2, 3), status
        code, text = quorum_tool(nodes, tmp_path, "remove-controller", "--controller-id",
                                 str(leader), "--controller-directory-id", rows[4][0])
        assert code != 0 and "VoterNotFoundException" in text, text
        code, text = quorum_tool(nodes, tmp_path, "remove-controller", "--controller-id",
                                 str(leader), "--controller-directory-id", rows[leader][0])
        assert code == 0, text
        nodes[leader - 1].kill9()
        killed_at = time.monotonic()
        voters = {1, 2, 3, 4} - {leader}

        def new_quorum():
            s = quorum_status(nodes, tmp_path)
            found = {int(v) for v in re.findall(r'"id": (\d+)', s["CurrentVoters"])}
            return found == voters and int(s["LeaderId"]) in voters

        wait_until("the three voters left lead the quorum", new_quorum, timeout=60)
        wait_until("acks after the kill", lambda: p.first_ack_after(killed_at) is not None,
                   timeout=60)
        # The new quorum commits metadata.
        a = admin(bootstrap([b for b in nodes if b.running]))
        a.create_topics([NewTopic("after-replace", num_partitions=1,
                                  replication_factor=3)])["after-replace"].result(timeout=30)

        # The new voter keeps its vote across a crash: it is not in the config's voters.
        nodes[3].kill9()
        nodes[3].start()
        wait_until("4 is a voter again after its restart", new_quorum, timeout=60)
        a.create_topics([NewTopic("after-restart", num_partitions=1,
                                  replication_factor=2)])["after-restart"].result(timeout=30)
        time.sleep(1.0)
    finally:
        p.stop.set()
        p.thread.join(150)

    print(f"added voter 4, removed and killed the quorum leader {leader}; "
          f"{p.sent} records produced meanwhile")
    assert not p.errors, f"delivery errors: {p.errors[:5]}"
    assert sorted(p.acked) == list(range(p.sent))
    offsets = [p.acked[n][0] for n in range(p.sent)]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    live = [b for b in nodes if b.running]
    records = consume(bootstrap(live), topic, p.sent, timeout=60)
    assert [int(r.value) for r in records] == list(range(p.sent))
    assert [r.offset for r in records] == offsets
