"""Client quotas with real clients (KIP-219 throttling).

Quotas are set with AlterClientQuotas from kafka-python's protocol classes (neither Python admin
client wraps the API) and checked with DescribeClientQuotas; Kafka's kafka-configs.sh
(ConfigCommand, when the Java tools are installed) sets, describes and deletes them too. Then, on
a dedicated broker:

* a librdkafka producer whose client-id has producer_byte_rate is slowed to the quota
  (within 10 %, measured over ~35 s) and sees throttle_time_ms through throttle_cb, while a
  concurrent producer without a quota gets all it offers (several times the quota);
* a librdkafka consumer whose client-id has consumer_byte_rate is held to that rate too,
  measured over whole throttle cycles (a fast consumer reads in window-sized bursts).

The measured figures are printed (run pytest with -s to see them).
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING
from kafka import KafkaAdminClient
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from helpers import create_topic
from java_apps import JVM_OPTS, _java_bin, classpath

QUOTA = 512 * 1024  # bytes per second
MESSAGE = bytes(range(256)) * 40  # 10 KiB
PRODUCE_SECONDS = 35.0
CONSUME_SECONDS = 36.0
# The unthrottled producer offers this much (and must get it all).
FREE_OFFERED = 4 * QUOTA


class QuotaAdmin:
    """AlterClientQuotas / DescribeClientQuotas through kafka-python's connection manager."""

    def __init__(self, bootstrap: str):
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="quota-admin")

    def close(self):
        self.admin.close()

    def _send(self, request):
        async def send():
            return await self.admin._manager.send(request)
        return self.admin._manager.run(send)

    def alter(self, entity: list[tuple[str, str | None]], ops: dict[str, float | None],
              validate_only: bool = False):
        """[(error_code, error_message)] of one entity alteration; None values remove keys."""
        op_list = [(k, 0.0 if v is None else float(v), v is None) for k, v in ops.items()]
        r = self._send(AlterClientQuotasRequest(entries=[(entity, op_list)],
                                                validate_only=validate_only))
        return [(e.error_code, e.error_message) for e in r.entries]

    def describe(self, components: list[tuple[str, int, str | None]], strict: bool = False):
        """{((type, name), ...): {key: value}}, or raises on a top-level error. An entity's
        parts are sorted by type: their order in the response is not specified (Kafka lists
        client-id before user)."""
        r = self._send(DescribeClientQuotasRequest(components=components, strict=strict))
        assert r.error_code == 0, (r.error_code, r.error_message)
        return {tuple(sorted(((e.entity_type, e.entity_name) for e in entry.entity),
                             key=lambda part: part[0])):
                {v.key: v.value for v in entry.values} for entry in r.entries}


@pytest.fixture(scope="module")
def quota_broker(module_broker_factory):
    # A dedicated broker: its quota sensors start empty.
    return module_broker_factory(name="quotas")


@pytest.fixture(scope="module")
def quota_admin(quota_broker):
    a = QuotaAdmin(quota_broker.bootstrap)
    yield a
    a.close()


def test_quotas_are_set_and_described_with_kafkas_validation(quota_admin):
    ok = quota_admin.alter([("client-id", "quota-slow")], {"producer_byte_rate": QUOTA})
    assert ok == [(0, ok[0][1])] and not ok[0][1]
    ok = quota_admin.alter([("client-id", "quota-reader")], {"consumer_byte_rate": QUOTA})
    assert ok[0][0] == 0
    bad = quota_admin.alter([("client-id", "quota-slow")], {"producer_byte_rate": -1})
    assert bad == [(42, "Quota producer_byte_rate must be greater than 0")]
    bad = quota_admin.alter([("client-id", "x")], {"connection_creation_rate": 5})
    assert bad == [(42, "Invalid configuration key connection_creation_rate")]
    only_validated = quota_admin.alter([("user", None)], {"request_percentage": 50},
                                       validate_only=True)
    assert only_validated[0][0] == 0
    described = quota_admin.describe([("client-id", 2, None)], strict=True)
    assert described == {
        (("client-id", "quota-slow"),): {"producer_byte_rate": float(QUOTA)},
        (("client-id", "quota-reader"),): {"consumer_byte_rate": float(QUOTA)},
    }
    assert quota_admin.describe([("user", 1, None)]) == {}, "validate_only changed nothing"


def test_kafka_configs_sets_and_describes_quotas(quota_broker, quota_admin):
    """Kafka's own kafka-configs.sh (ConfigCommand) against the broker, as docs/quotas.md shows."""
    cp, why = classpath("tools")
    if cp is None:
        pytest.skip(why)

    def kafka_configs(*args):
        r = subprocess.run([_java_bin(), *JVM_OPTS, "-cp", cp, "org.apache.kafka.tools.ConfigCommand",
                            "--bootstrap-server", quota_broker.bootstrap, *args],
                           capture_output=True, text=True, timeout=120)
        return r.returncode, r.stdout + r.stderr

    code, out = kafka_configs("--alter", "--entity-type", "users", "--entity-name", "carol",
                              "--entity-type", "clients", "--entity-default",
                              "--add-config", "producer_byte_rate=1024,request_percentage=25")
    assert code == 0, out
    assert quota_admin.describe([("user", 0, "carol")]) == {
        (("client-id", None), ("user", "carol")): {
            "producer_byte_rate": 1024.0, "request_percentage": 25.0},
    }
    code, out = kafka_configs("--describe", "--entity-type", "users", "--entity-name", "carol",
                              "--entity-type", "clients", "--entity-default")
    # (The order of the values is not specified: Kafka prints them in hash order.)
    assert code == 0, out
    assert "producer_byte_rate=1024.0" in out and "request_percentage=25.0" in out, out
    code, out = kafka_configs("--alter", "--entity-type", "users", "--entity-name", "carol",
                              "--entity-type", "clients", "--entity-default",
                              "--delete-config", "producer_byte_rate,request_percentage")
    assert code == 0, out
    assert quota_admin.describe([("user", 0, "carol")]) == {}


class Meter:
    """Bytes acknowledged (produce) or received (consume), and throttle events."""

    def __init__(self):
        self.lock = threading.Lock()
        self.bytes = 0
        self.errors = 0
        self.throttles_ms: list[float] = []

    def delivered(self, err, msg):
        with self.lock:
            if err is None:
                self.bytes += len(msg.value())
            else:
                self.errors += 1

    def throttled(self, event):
        # librdkafka reports the broker's throttle_time_ms of each throttled response.
        if event.throttle_time > 0:
            with self.lock:
                self.throttles_ms.append(event.throttle_time * 1000.0)


def _producer(bootstrap: str, client_id: str, meter: Meter) -> Producer:
    return Producer({
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "linger.ms": 5,
        "batch.size": 65536,
        "compression.type": "none",
        "queue.buffering.max.kbytes": 4096,
        "message.timeout.ms": 120000,
        "throttle_cb": meter.throttled,
        "log_level": 3,
    })


def _produce_flat_out(p: Producer, topic: str, meter: Meter, until: float):
    while time.monotonic() < until:
        try:
            p.produce(topic, MESSAGE, on_delivery=meter.delivered)
            p.poll(0)
        except BufferError:
            p.poll(0.05)


def _produce_paced(p: Producer, topic: str, meter: Meter, rate: float, start: float,
                   until: float):
    offered = 0
    while (now := time.monotonic()) < until:
        while offered < rate * (now - start):
            p.produce(topic, MESSAGE, on_delivery=meter.delivered)
            offered += len(MESSAGE)
        p.poll(0.01)


def test_a_producer_over_its_byte_quota_is_slowed_to_it_and_others_are_not(
        quota_broker, quota_admin, topic_name):
    quota_admin.alter([("client-id", "quota-slow")], {"producer_byte_rate": QUOTA})
    bootstrap = quota_broker.bootstrap
    slow_topic, free_topic = f"{topic_name}-slow", f"{topic_name}-free"
    create_topic(bootstrap, slow_topic, partitions=2)
    create_topic(bootstrap, free_topic, partitions=2)
    slow_meter, free_meter = Meter(), Meter()
    slow = _producer(bootstrap, "quota-slow", slow_meter)
    free = _producer(bootstrap, "quota-free", free_meter)
    start = time.monotonic()
    until = start + PRODUCE_SECONDS
    threads = [
        threading.Thread(target=_produce_flat_out, args=(slow, slow_topic, slow_meter, until)),
        threading.Thread(target=_produce_paced,
                         args=(free, free_topic, free_meter, FREE_OFFERED, start, until)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    slow_rate = slow_meter.bytes / elapsed
    free_rate = free_meter.bytes / elapsed
    errors = slow_meter.errors + free_meter.errors
    # Drop what the throttled producer still has queued (purged messages report errors).
    slow.purge()
    slow.flush(30)
    free.flush(30)
    throttles = slow_meter.throttles_ms
    print(f"\nproducer quota {QUOTA} B/s over {elapsed:.1f} s: "
          f"throttled producer {slow_rate:.0f} B/s ({slow_rate / QUOTA:.1%} of quota), "
          f"unthrottled producer {free_rate:.0f} B/s (offered {FREE_OFFERED} B/s); "
          f"throttle_time_ms seen {len(throttles)} times, "
          f"mean {sum(throttles) / max(len(throttles), 1):.0f} ms, max {max(throttles, default=0):.0f} ms; "
          f"unthrottled producer throttled {len(free_meter.throttles_ms)} times")
    assert errors == 0
    assert abs(slow_rate - QUOTA) / QUOTA < 0.10, f"throttled producer at {slow_rate:.0f} B/s"
    assert throttles, "librdkafka saw throttle_time_ms"
    assert free_rate >= 0.9 * FREE_OFFERED, f"unthrottled producer at {free_rate:.0f} B/s"
    assert free_rate >= 3 * slow_rate
    assert not free_meter.throttles_ms


def _bursts(arrivals: list[tuple[float, int]], gap: float) -> list[tuple[float, int]]:
    """(start time, bytes) of each run of arrivals separated by more than `gap` seconds."""
    out: list[tuple[float, int]] = []
    last = None
    for t, n in arrivals:
        if last is None or t - last > gap:
            out.append((t, 0))
        out[-1] = (out[-1][0], out[-1][1] + n)
        last = t
    return out


def test_a_consumer_over_its_byte_quota_is_held_to_it(quota_broker, quota_admin, topic_name):
    """A fast consumer reads in bursts: a throttled fetch is answered empty and not counted,
    so it gets nothing until the samples holding its last burst leave the 11 x 1 s window,
    then a window's worth at once (Kafka behaves the same). Its rate is therefore measured
    over whole throttle cycles, from the start of the first burst to the start of the last."""
    quota_admin.alter([("client-id", "quota-reader")], {"consumer_byte_rate": QUOTA})
    bootstrap = quota_broker.bootstrap
    topic = f"{topic_name}-read"
    create_topic(bootstrap, topic, partitions=1)
    # More than the consumer may read in the test.
    fill = Meter()
    p = _producer(bootstrap, "quota-filler", fill)
    total = int(1.5 * QUOTA * CONSUME_SECONDS)
    for _ in range(total // len(MESSAGE)):
        while True:
            try:
                p.produce(topic, MESSAGE, on_delivery=fill.delivered)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0 and fill.errors == 0
    meter = Meter()
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"{topic}-group",
        "client.id": "quota-reader",
        "enable.auto.commit": False,
        "fetch.max.bytes": 262144,
        "message.max.bytes": 262144,
        "max.partition.fetch.bytes": 262144,
        "throttle_cb": meter.throttled,
        "log_level": 3,
    })
    arrivals: list[tuple[float, int]] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        start = time.monotonic()
        while time.monotonic() - start < CONSUME_SECONDS:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                arrivals.append((time.monotonic(), len(m.value())))
        elapsed = time.monotonic() - start
    finally:
        c.close()
    consumed = sum(n for _, n in arrivals)
    bursts = _bursts(arrivals, gap=2.0)
    throttles = meter.throttles_ms
    print(f"\nconsumer quota {QUOTA} B/s: consumed {consumed} of {fill.bytes} bytes in "
          f"{elapsed:.1f} s ({consumed / elapsed:.0f} B/s overall) in {len(bursts)} bursts "
          f"{[(round(t - start, 1), n) for t, n in bursts]}; throttle_time_ms seen "
          f"{len(throttles)} times, max {max(throttles, default=0):.0f} ms")
    assert throttles, "librdkafka saw fetch throttle_time_ms"
    assert len(bursts) >= 3, bursts
    # No burst is more than one quota window (11 x 1 s) allows.
    assert max(n for _, n in bursts) <= QUOTA * 11 * 1.1, bursts
    cycles = bursts[-1][0] - bursts[0][0]
    cycle_rate = sum(n for _, n in bursts[:-1]) / cycles
    print(f"consumer rate over {len(bursts) - 1} whole throttle cycles ({cycles:.1f} s): "
          f"{cycle_rate:.0f} B/s ({cycle_rate / QUOTA:.1%} of quota)")
    assert abs(cycle_rate - QUOTA) / QUOTA < 0.15, f"consumer at {cycle_rate:.0f} B/s"
