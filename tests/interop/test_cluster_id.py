"""One cluster id per cluster: three `strata serve` processes started without `cluster.id`
form a quorum that settles one id, and every broker answers Metadata (also through
confluent-kafka's list_topics()) and DescribeCluster with it, before and after the active
controller is restarted; librdkafka, bootstrapped with all three, never warns that its
brokers belong to different clusters.

Strata only (three-process quorum; the reference Kafka script runs a single node)."""

import logging

import pytest
from confluent_kafka.admin import AdminClient

import rawkafka
from conftest import TARGET
from helpers import QUIET
from test_cluster import bootstrap, start_cluster, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(TARGET != "strata",
                       reason="starts a 3-node Strata quorum; kafka-ref.sh runs a single node"),
]


@pytest.fixture
def unformatted_cluster(broker_factory):
    """Three brokers, all voters, none with a cluster.id setting."""
    yield from start_cluster(broker_factory, 3, **{"cluster.id": ""})


def cluster_ids(brokers) -> dict[str, tuple[str, str, str]]:
    """{broker name: (Metadata's and DescribeCluster's cluster_id as that broker answers,
    confluent-kafka's list_topics().cluster_id bootstrapped with that broker)}. librdkafka
    may send list_topics to any broker it has learned of; the raw requests go to that one."""
    ids = {}
    for b in brokers:
        if not b.running:
            continue
        with rawkafka.Conn(b.bootstrap, timeout=10) as conn:
            metadata = conn.metadata_cluster_id()
            described = conn.describe_cluster_id()
        md = AdminClient({"bootstrap.servers": b.bootstrap, **QUIET}).list_topics(timeout=20)
        ids[b.name] = (metadata, described, md.cluster_id)
    return ids


def assert_one_cluster_id(brokers) -> str:
    ids = cluster_ids(brokers)
    values = {v for pair in ids.values() for v in pair}
    assert len(values) == 1, f"brokers report different cluster ids: {ids}"
    (cluster_id,) = values
    assert cluster_id and len(cluster_id) == 22, ids
    return cluster_id


class Captured(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.mark.timeout(240)
def test_every_broker_reports_the_quorums_cluster_id(unformatted_cluster):
    cluster = unformatted_cluster
    cluster_id = assert_one_cluster_id(cluster)
    for b in cluster:
        text = (b.data_dir / "meta.properties").read_text()
        assert f"cluster.id={cluster_id}\n" in text, (b.name, text)

    # One client over all three: librdkafka warns when its brokers name different clusters.
    log = logging.getLogger("strata-interop-cluster-id")
    log.setLevel(logging.DEBUG)
    captured = Captured()
    log.addHandler(captured)
    client = AdminClient({"bootstrap.servers": bootstrap(cluster), "logger": log,
                          "topic.metadata.refresh.interval.ms": 200})
    for _ in range(10):
        assert client.list_topics(timeout=20).cluster_id == cluster_id

    # The active controller restarts: another broker leads the quorum, the id stays.
    with rawkafka.Conn(cluster[0].bootstrap, timeout=10) as conn:
        leader = conn.describe_cluster_controller()
    assert leader in (1, 2, 3)
    cluster[leader - 1].stop()

    def new_controller():
        other = cluster[leader % 3]
        with rawkafka.Conn(other.bootstrap, timeout=10) as conn:
            return conn.describe_cluster_controller() not in (-1, leader)

    wait_until("another active controller", new_controller, timeout=60)
    assert assert_one_cluster_id(cluster) == cluster_id
    cluster[leader - 1].start()
    assert assert_one_cluster_id(cluster) == cluster_id
    for _ in range(10):
        assert client.list_topics(timeout=20).cluster_id == cluster_id
    client.poll(0)  # delivers the client's queued log lines to the logger
    warnings = [line for line in captured.lines if "multiple clusters" in line
                or "different ClusterId" in line]
    assert not warnings, warnings
