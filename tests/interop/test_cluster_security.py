"""Cluster mode over a secured inter-broker listener: three `strata serve` processes whose
inter-broker listener is SASL_SSL (mutual TLS + SASL/PLAIN) with ACLs on and
`super.users=User:broker`. confluent-kafka clients, also over SASL_SSL, create a topic with
replication factor 3 and min.insync.replicas=3, produce with acks=all (which needs every
follower to have fetched over the secure listener), read the records back from every
broker, and commit a transaction across partitions led by different brokers (the
coordinator's markers go over the secure listener too).

Strata only: the reference Kafka script runs a single node."""

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from conftest import TARGET, free_port
from helpers import QUIET, admin
from test_cluster import start_cluster

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(TARGET != "strata",
                       reason="starts a 3-node Strata quorum; kafka-ref.sh runs a single node"),
]

# The integration tests' certificates: a CA and a key + chain for 127.0.0.1 / localhost,
# usable as server and client certificate (tests/it/certs/make.sh).
CERTS = Path(__file__).resolve().parent.parent / "it" / "certs"
TOPIC = "secure-replicated"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="broker" password="broker-pw" user_broker="broker-pw" user_admin="admin-pw";')


def client_conf(brokers) -> dict:
    """An admin client over the SASL_SSL listeners (host names verified)."""
    return {
        "bootstrap.servers": ",".join(f"127.0.0.1:{b.sasl_port}" for b in brokers),
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "admin",
        "sasl.password": "admin-pw",
        "ssl.ca.location": str(CERTS / "ca.pem"),
        "ssl.certificate.location": str(CERTS / "broker.pem"),
        "ssl.key.location": str(CERTS / "broker.pem"),
        "ssl.endpoint.identification.algorithm": "https",
        **QUIET,
    }


@pytest.fixture
def secure_cluster(broker_factory):
    def listeners(b, rpc_port):
        b.sasl_port = free_port()
        advertised = f"PLAINTEXT://127.0.0.1:{b.port},SASL_SSL://127.0.0.1:{b.sasl_port}"
        b.props["listeners"] = f"{advertised},CONTROLLER://127.0.0.1:{rpc_port}"
        b.props["advertised.listeners"] = advertised

    yield from start_cluster(broker_factory, 3, listeners=listeners, **{
        "inter.broker.listener.name": "SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(CERTS / "broker.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(CERTS / "ca.pem"),
        "listener.name.sasl_ssl.ssl.client.auth": "required",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker;User:admin",
        "connections.max.reauth.ms": 5000,
        "transaction.state.log.num.partitions": 3,
    })


def wait_until(what, cond, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return
        except Exception:  # noqa: BLE001 - metadata may be briefly unavailable
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def read_all(conf: dict, partition: int, committed: bool, expect: int) -> list[bytes]:
    c = Consumer({**conf, "group.id": "interop-assign-only", "enable.auto.commit": False,
                  "isolation.level": "read_committed" if committed else "read_uncommitted"})
    try:
        c.assign([TopicPartition(TOPIC, partition, 0)])
        out = []
        deadline = time.monotonic() + 60
        while len(out) < expect and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value())
        return out
    finally:
        c.close()


def test_replication_and_transactions_run_over_a_sasl_ssl_inter_broker_listener(secure_cluster):
    conf = client_conf(secure_cluster)
    a = admin(conf["bootstrap.servers"], **{k: v for k, v in conf.items()
                                             if k != "bootstrap.servers"})
    wait_until("three brokers", lambda: len(a.list_topics(timeout=10).brokers) == 3)
    # Partition p led by broker p + 1; acks=all needs all three replicas in sync.
    topic = NewTopic(TOPIC, num_partitions=3, replication_factor=-1,
                     replica_assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]],
                     config={"min.insync.replicas": "3"})
    for f in a.create_topics([topic]).values():
        f.result(timeout=30)

    def in_sync():
        parts = a.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        return len(parts) == 3 and all(sorted(p.isrs) == [1, 2, 3] and p.leader == p.id + 1
                                       for p in parts.values())
    wait_until("every partition led by its preferred replica with a full ISR", in_sync)

    p = Producer({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    errors = []
    for i in range(300):
        p.produce(TOPIC, value=f"r{i}".encode(), partition=i % 3,
                  on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(60) == 0
    assert errors == []
    for part in range(3):
        got = read_all(conf, part, committed=False, expect=100)
        assert got == [f"r{i}".encode() for i in range(part, 300, 3)]
    assert in_sync(), "every follower still in the ISR"

    # A transaction over the three partitions: the coordinator writes markers to the other
    # leaders over the SASL_SSL listener.
    t = Producer({**conf, "transactional.id": "secure-tx", "acks": "all"})
    t.init_transactions(30)
    t.begin_transaction()
    for part in range(3):
        t.produce(TOPIC, value=f"tx{part}".encode(), partition=part)
    t.commit_transaction(30)
    for part in range(3):
        got = read_all(conf, part, committed=True, expect=101)
        assert got[-1] == f"tx{part}".encode(), got[-3:]


@pytest.mark.timeout(300)
def test_the_inter_broker_client_certificate_follows_a_keystore_reloaded_at_run_time(
        broker_factory, tmp_path):
    """Certificate rotation on a running cluster whose inter-broker listener is SSL with
    ssl.client.auth=required, every broker trusting an old and a new CA: each broker's
    keystore is replaced by one from the new CA, then every truststore by the new CA alone,
    through dynamic broker configs. Broker 3 is then killed and started again, and a topic
    it leads needs its followers to connect to it afresh: they must present their new
    certificates, the only ones it trusts, for acks=all with min.insync.replicas=3 to
    succeed."""
    pytest.importorskip("cryptography")
    from test_group_configs import inc_alter
    from test_tls_reload import BROKER, SET, _issue

    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old_ca, old_keystore = _issue(tmp_path / "old", "Old CA")
    new_ca, new_keystore = _issue(tmp_path / "new", "New CA")
    trust = tmp_path / "trust.pem"
    trust.write_bytes(old_ca.read_bytes() + new_ca.read_bytes())
    keystores = {i: tmp_path / f"node{i}.pem" for i in (1, 2, 3)}
    for i, path in keystores.items():
        path.write_bytes(old_keystore(f"old-{i}.pem")[0].read_bytes())

    def listeners(b, rpc_port):
        b.ssl_port = free_port()
        advertised = f"PLAINTEXT://127.0.0.1:{b.port},SSL://127.0.0.1:{b.ssl_port}"
        b.props["listeners"] = f"{advertised},CONTROLLER://127.0.0.1:{rpc_port}"
        b.props["advertised.listeners"] = advertised
        b.props["listener.name.ssl.ssl.keystore.location"] = str(keystores[int(b.props["node.id"])])

    gen = start_cluster(broker_factory, 3, listeners=listeners, **{
        "inter.broker.listener.name": "SSL",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
        "listener.name.ssl.ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.truststore.type": "PEM",
        "listener.name.ssl.ssl.truststore.location": str(trust),
        "listener.name.ssl.ssl.client.auth": "required",
    })
    brokers = next(gen)
    try:
        servers = ",".join(b.bootstrap for b in brokers)
        a = admin(servers)

        def create_and_fill(topic, leader):
            others = [i for i in (1, 2, 3) if i != leader]
            a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1,
                                      replica_assignment=[[leader, *others]],
                                      config={"min.insync.replicas": "3"})])[topic].result(30)

            def in_sync():
                p = a.list_topics(topic, timeout=10).topics[topic].partitions[0]
                return p.leader == leader and sorted(p.isrs) == [1, 2, 3]
            wait_until(f"{topic} led by {leader} with a full ISR", in_sync)
            p = Producer({"bootstrap.servers": servers, "acks": "all",
                          "enable.idempotence": True, "message.timeout.ms": 30000, **QUIET})
            errors = []
            for i in range(100):
                p.produce(topic, value=b"%d" % i, on_delivery=lambda e, _m: e and errors.append(e))
            assert p.flush(60) == 0 and errors == [], errors

        create_and_fill("before-rotation", 1)
        # Every keystore from the new CA (same subject and names), reloaded in place.
        for i, path in keystores.items():
            path.write_bytes(new_keystore(f"new-{i}.pem")[0].read_bytes())
            assert inc_alter(brokers[i - 1].bootstrap, str(i), [(
                "listener.name.ssl.ssl.keystore.location", SET, str(path))], rtype=BROKER) == (0, None)
        # Then only the new CA is trusted.
        trust.write_bytes(new_ca.read_bytes())
        for i in (1, 2, 3):
            assert inc_alter(brokers[i - 1].bootstrap, str(i), [(
                "listener.name.ssl.ssl.truststore.location", SET, str(trust))],
                rtype=BROKER) == (0, None)
        time.sleep(2)
        # Connections to broker 3 are opened afresh: only new client certificates pass.
        brokers[2].kill9()
        brokers[2].start()
        create_and_fill("after-rotation", 3)
        got = []
        c = Consumer({"bootstrap.servers": servers, "group.id": "rotation-check",
                      "auto.offset.reset": "earliest", **QUIET})
        try:
            c.assign([TopicPartition("after-rotation", 0, 0)])
            deadline = time.monotonic() + 60
            while len(got) < 100 and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    got.append(int(m.value()))
        finally:
            c.close()
        assert got == list(range(100))
    finally:
        gen.close()
