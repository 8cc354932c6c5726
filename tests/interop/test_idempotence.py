"""Idempotent producers (enable.idempotence): every record lands exactly once and in
order per partition, also when the producer has to retry across a broker restart."""

import threading
import time

import pytest
from confluent_kafka import Producer

from helpers import QUIET, consume, create_topic, kp_consume, kp_produce, produce

PARTS = 3


def _seq_records(n, parts=PARTS):
    return [{"key": b"k", "value": b"%d:%06d" % (i % parts, i), "partition": i % parts}
            for i in range(n)]


def _assert_exactly_once_in_order(records, got, parts=PARTS):
    for p in range(parts):
        want = [r["value"] for r in records if r["partition"] == p]
        have = [r.value for r in got if r.partition == p]
        assert len(have) == len(set(have)), f"partition {p}: duplicates"
        assert have == want, f"partition {p}: got {len(have)} records, wanted {len(want)} in order"
        offs = [r.offset for r in got if r.partition == p]
        assert offs == list(range(len(want))), f"partition {p}: offsets not contiguous from 0"


def test_confluent_idempotent_producer_writes_each_record_once_in_order(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=PARTS)
    recs = _seq_records(3000)
    delivered, _ = produce(broker.bootstrap, topic_name, recs,
                           conf={"enable.idempotence": True, "acks": "all",
                                 "max.in.flight.requests.per.connection": 5,
                                 "linger.ms": 2, "batch.num.messages": 100})
    assert len(delivered) == len(recs)
    got = consume(broker.bootstrap, topic_name, len(recs), partitions=range(PARTS))
    _assert_exactly_once_in_order(recs, got)


def test_kafka_python_idempotent_producer_writes_each_record_once_in_order(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=PARTS)
    recs = _seq_records(1500)
    delivered = kp_produce(broker.bootstrap, topic_name, recs, enable_idempotence=True,
                           acks="all", max_in_flight_requests_per_connection=5, linger_ms=2,
                           batch_size=4096)
    assert len(delivered) == len(recs)
    got = kp_consume(broker.bootstrap, topic_name, len(recs), partitions=range(PARTS))
    _assert_exactly_once_in_order(recs, got)


@pytest.mark.slow
def test_idempotent_producer_retrying_across_broker_restart_has_no_duplicates_or_reordering(
        broker_factory, topic_name):
    b = broker_factory()
    create_topic(b.bootstrap, topic_name, partitions=PARTS)
    errors, acked = [], []
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "acks": "all",
                  "max.in.flight.requests.per.connection": 5, "linger.ms": 5,
                  "message.timeout.ms": 120000, "retry.backoff.ms": 100,
                  "reconnect.backoff.max.ms": 500, **QUIET})

    def cb(err, msg):
        (errors if err else acked).append(err or msg.value())

    sent = []
    stop = threading.Event()

    def run():
        i = 0
        while not stop.is_set():
            r = {"key": b"k", "value": b"%d:%06d" % (i % PARTS, i), "partition": i % PARTS}
            while True:
                try:
                    p.produce(topic_name, value=r["value"], key=r["key"],
                              partition=r["partition"], on_delivery=cb)
                    break
                except BufferError:
                    p.poll(0.05)
            sent.append(r)
            i += 1
            p.poll(0)
            if i % 20 == 0:
                time.sleep(0.01)  # ~2000 records/s, spread over the restart

    def wait_acks(n, timeout=60):
        deadline = time.monotonic() + timeout
        while len(acked) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(acked) >= n, f"only {len(acked)} of {n} acks; errors: {errors[:3]}"

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        wait_acks(1000)
        b.restart()  # in-flight requests fail; the producer retries with the same sequences
        sent_during_restart = len(sent)
        wait_acks(sent_during_restart + 1000, timeout=120)
    finally:
        stop.set()
        t.join(timeout=30)
    assert p.flush(120) == 0
    assert not errors, f"delivery errors: {errors[:5]}"
    assert len(acked) == len(sent)

    got = consume(b.bootstrap, topic_name, len(sent), partitions=range(PARTS))
    _assert_exactly_once_in_order(sent, got)
