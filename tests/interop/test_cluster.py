"""Cluster mode: three `strata serve` processes form one metadata quorum
(controller.quorum.voters). A topic with replication factor 3 and min.insync.replicas=2
keeps every acknowledged record, once, in order, while its partition leader is killed
with SIGKILL (and restarted) several times under an idempotent acks=all producer;
AdminClient.elect_leaders moves leadership back to the preferred replica after a
restart; and Kafka's own kafka-reassign-partitions (kafka-tools, Java AdminClient)
moves a partition to other brokers with its records and offsets.

Strata only: the reference Kafka script runs a single node."""

import json
import subprocess
import threading
import time

import pytest
from confluent_kafka import ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

import java_apps
from conftest import TARGET, free_port
from helpers import QUIET, admin, consume, produce

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(TARGET != "strata",
                       reason="starts a 3-node Strata quorum; kafka-ref.sh runs a single node"),
]

TOPIC = "cluster-kill9"
KILL_CYCLES = 5


@pytest.fixture
def cluster(broker_factory):
    """Three brokers, all voters, started together (registration needs a quorum)."""
    rpc_ports = [free_port() for _ in range(3)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(rpc_ports))
    brokers = []
    for i in range(3):
        b = broker_factory({
            "node.id": i + 1,
            "cluster.id": "interop-cluster",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": voters,
            "broker.session.timeout.ms": 3000,
            "broker.heartbeat.interval.ms": 500,
            "default.replication.factor": 3,
            "min.insync.replicas": 2,
            "auto.create.topics.enable": "false",
        }, name=f"node{i + 1}", start=False)
        b.props["listeners"] = (f"PLAINTEXT://127.0.0.1:{b.port},"
                                f"CONTROLLER://127.0.0.1:{rpc_ports[i]}")
        brokers.append(b)
    errors = []
    # The brokers must start together, so each starts on its own thread; the threads live
    # as long as the brokers (the child gets SIGTERM when the thread that forked it exits).
    release = threading.Event()

    def start(b):
        try:
            b.start()
        except BaseException as e:  # noqa: BLE001 - pytest.fail too; reported below
            errors.append(e)
        release.wait()

    threads = [threading.Thread(target=start, args=(b,), daemon=True) for b in brokers]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 150
    while not all(b.running for b in brokers) and not errors and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        if errors:
            raise errors[0]
        assert all(b.running for b in brokers), "the three brokers did not start"
        yield brokers
    finally:
        for b in brokers:
            b.stop()
        release.set()
        for t in threads:
            t.join()


def bootstrap(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers)


def partition_state(brokers):
    """(leader, isr) of partition 0, asked of a running broker."""
    live = [b for b in brokers if b.running]
    md = admin(bootstrap(live)).list_topics(TOPIC, timeout=10)
    p = md.topics[TOPIC].partitions[0]
    return p.leader, sorted(p.isrs)


def wait_until(what, cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return
        except Exception:  # noqa: BLE001 - metadata may be briefly unavailable
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class NumberedProducer:
    """Produces 0, 1, 2, ... with an idempotent acks=all producer on its own thread and
    records, per number, the acknowledged offset and when it was acknowledged."""

    def __init__(self, bootstrap_servers):
        self.producer = Producer({
            "bootstrap.servers": bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120000,
            "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
            **QUIET,
        })
        self.sent = 0
        self.acked = {}  # number -> (offset, ack time)
        self.produced_at = []  # number -> when it was handed to the producer
        self.errors = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg):
        now = time.monotonic()
        n = int(msg.value())
        with self.lock:
            if err is not None:
                self.errors.append((n, str(err)))
            else:
                self.acked[n] = (msg.offset(), now)

    def _run(self):
        while not self.stop.is_set():
            try:
                now = time.monotonic()
                self.producer.produce(TOPIC, value=b"%d" % self.sent, partition=0,
                                      on_delivery=self._delivered)
                self.produced_at.append(now)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.005)
        self.producer.flush(120)

    def first_ack_after(self, t):
        """When the first record produced after `t` was acknowledged (None: not yet)."""
        with self.lock:
            times = [at for n, (_, at) in self.acked.items() if self.produced_at[n] > t]
        return min(times) if times else None


@pytest.mark.timeout(240)
def test_acked_records_survive_repeated_kill9_of_the_partition_leader(cluster):
    a = admin(bootstrap(cluster))
    fs = a.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=3,
                                   config={"min.insync.replicas": "2"})], request_timeout=30)
    fs[TOPIC].result()
    wait_until("a leader and a full ISR", lambda: partition_state(cluster)[1] == [1, 2, 3])

    p = NumberedProducer(bootstrap(cluster))
    p.thread.start()
    recoveries = []
    try:
        for cycle in range(KILL_CYCLES):
            time.sleep(2.0)
            leader, _ = partition_state(cluster)
            victim = cluster[leader - 1]
            victim.kill9()  # returns once the process is gone
            killed_at = time.monotonic()
            wait_until("an acknowledged produce after the kill",
                       lambda: p.first_ack_after(killed_at) is not None, timeout=60)
            recovery = p.first_ack_after(killed_at) - killed_at
            new_leader, isr = partition_state(cluster)
            recoveries.append(recovery)
            print(f"cycle {cycle + 1}: killed leader {leader}; new leader {new_leader} "
                  f"(ISR {isr}); first acked produce {recovery:.2f}s after the kill")
            victim.start()
            wait_until("the restarted broker back in the ISR",
                       lambda: partition_state(cluster)[1] == [1, 2, 3], timeout=60)
        time.sleep(1.0)
    finally:
        p.stop.set()
        p.thread.join(150)
    print(f"kill cycles: {len(recoveries)}; recovery times: "
          + ", ".join(f"{r:.2f}s" for r in recoveries)
          + f"; records produced: {p.sent}")

    assert not p.errors, f"delivery errors: {p.errors[:5]}"
    assert len(recoveries) == KILL_CYCLES
    # Every produced number was acknowledged, each at its own offset, in order.
    assert sorted(p.acked) == list(range(p.sent))
    offsets = [p.acked[n][0] for n in range(p.sent)]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)

    # A consumer reads everything, once, in order, at the acknowledged offsets.
    records = consume(bootstrap(cluster), TOPIC, p.sent, timeout=60)
    assert [int(r.value) for r in records] == list(range(p.sent))
    assert [r.offset for r in records] == offsets


REASSIGN_TOPIC = "cluster-reassign"
REASSIGN_TOOL = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


def reassign_tool(bootstrap_servers, tmp_path, *args):
    """Runs kafka-reassign-partitions (kafka-tools) and returns its stdout; fails on errors."""
    cp, why = java_apps.classpath("tools")
    assert cp is not None, why
    cmd = [java_apps._java_bin(), *java_apps.JVM_OPTS, "-cp", cp, REASSIGN_TOOL,
           "--bootstrap-server", bootstrap_servers, *args]
    with open(tmp_path / "reassign-tool.log", "ab") as err:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, timeout=180)
    text = out.stdout.decode("utf-8", "replace")
    assert out.returncode == 0, f"{args}: exit {out.returncode}\n{text}"
    return text


def reassign_state(brokers):
    """(leader, replicas, isr) of the reassigned topic's partition 0."""
    md = admin(bootstrap(brokers)).list_topics(REASSIGN_TOPIC, timeout=10)
    p = md.topics[REASSIGN_TOPIC].partitions[0]
    return p.leader, list(p.replicas), sorted(p.isrs)


@pytest.mark.timeout(300)
def test_kafka_reassign_partitions_moves_a_partition_with_its_records(cluster, tmp_path):
    _, why = java_apps.classpath("tools")
    if why:
        pytest.skip(f"kafka-reassign-partitions needs the kafka-tools jars: {why}")
    servers = bootstrap(cluster)
    a = admin(servers)
    fs = a.create_topics([NewTopic(REASSIGN_TOPIC, num_partitions=1, replication_factor=-1,
                                   replica_assignment=[[1]])],
                         request_timeout=30)
    fs[REASSIGN_TOPIC].result()
    wait_until("broker 1 leads", lambda: reassign_state(cluster)[0] == 1)
    values = [b"record-%d" % i for i in range(300)]
    delivered, _ = produce(servers, REASSIGN_TOPIC,
                           [{"value": v, "partition": 0} for v in values])
    offsets = [d.offset for d in delivered]
    assert offsets == list(range(300))

    plan = tmp_path / "reassign.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": REASSIGN_TOPIC, "partition": 0, "replicas": [2, 3],
         "log_dirs": ["any", "any"]}]}))
    started = time.monotonic()
    out = reassign_tool(servers, tmp_path, "--reassignment-json-file", str(plan), "--execute")
    assert "Successfully started partition reassignment" in out, out
    wait_until("the partition on brokers 2 and 3",
               lambda: (lambda s: s[0] in (2, 3) and sorted(s[1]) == [2, 3] and s[2] == [2, 3])(
                   reassign_state(cluster)), timeout=60)
    print(f"kafka-reassign-partitions moved {REASSIGN_TOPIC}-0 from [1] to [2, 3] in "
          f"{time.monotonic() - started:.1f}s")
    out = reassign_tool(servers, tmp_path, "--reassignment-json-file", str(plan), "--verify",
                        "--preserve-throttles")
    assert f"Reassignment of partition {REASSIGN_TOPIC}-0 is completed" in out, out

    # The records moved with their offsets; the new replicas keep taking writes.
    records = consume(servers, REASSIGN_TOPIC, 300, timeout=60)
    assert [r.value for r in records] == values
    assert [r.offset for r in records] == offsets
    delivered, _ = produce(servers, REASSIGN_TOPIC, [{"value": b"after", "partition": 0}])
    assert delivered[0].offset == 300


@pytest.mark.timeout(180)
def test_elect_leaders_preferred_moves_leadership_back_after_a_restart(cluster):
    topic = "cluster-elect"
    a = admin(bootstrap(cluster))
    a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)],
                    request_timeout=30)[topic].result()

    def state():
        live = [b for b in cluster if b.running]
        p = admin(bootstrap(live)).list_topics(topic, timeout=10).topics[topic].partitions[0]
        return p.leader, sorted(p.isrs), list(p.replicas)

    wait_until("a leader and a full ISR", lambda: state()[1] == [1, 2, 3])
    leader, _, replicas = state()
    preferred = replicas[0]
    assert leader == preferred

    # The preferred leader stops; another ISR member takes over; it restarts and rejoins.
    cluster[preferred - 1].stop()
    wait_until("a new leader", lambda: state()[0] not in (-1, preferred))
    cluster[preferred - 1].start()
    wait_until("the restarted broker back in the ISR", lambda: state()[1] == [1, 2, 3],
               timeout=60)
    leader, _, _ = state()
    assert leader != preferred, "leadership moved back without an election"

    tp = TopicPartition(topic, 0)
    a = admin(bootstrap(cluster))
    # No timeout kwargs: confluent-kafka 2.16's elect_leaders raises SystemError with them.
    result = a.elect_leaders(ElectionType.PREFERRED, [tp]).result()
    assert list(result) == [tp]
    assert result[tp] is None, result[tp]
    wait_until("the preferred replica leads", lambda: state()[0] == preferred, timeout=10)

    # Once more: not needed; and an unknown partition.
    result = a.elect_leaders(ElectionType.PREFERRED, [tp]).result()
    assert result[tp].code() == KafkaError.ELECTION_NOT_NEEDED, result[tp]
    missing = TopicPartition(topic, 5)
    result = a.elect_leaders(ElectionType.PREFERRED, [missing]).result()
    assert result[missing].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, result[missing]
    # Every partition: none needs an election any more.
    assert a.elect_leaders(ElectionType.PREFERRED, None).result() == {}
