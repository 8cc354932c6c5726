"""Fetch long-polling: a fetch waiting for data (large fetch.wait.max.ms) is answered
as soon as a record is appended, not when the wait expires; a fetch without data
is held for max wait instead of returning at once."""

import threading
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from helpers import QUIET, create_topic, kp_consumer, produce, watermarks
from rawkafka import API_FETCH, Conn

MAX_WAIT_MS = 10_000
# "Well before the max wait": generous for a loaded 2-core machine, far below 10 s.
PROMPT_S = 2.0


def _produce_later(bootstrap, topic, delay, value, out):
    def run():
        time.sleep(delay)
        out["sent_at"] = time.monotonic()
        produce(bootstrap, topic, [{"value": value}], conf={"linger.ms": 0})
        out["acked_at"] = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_confluent_consumer_waiting_in_long_poll_receives_new_record_promptly(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce(broker.bootstrap, topic_name, [{"value": b"old"}])
    _, high = watermarks(broker.bootstrap, topic_name)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "long-poll",
                  "enable.auto.commit": False, "fetch.wait.max.ms": MAX_WAIT_MS,
                  "fetch.min.bytes": 1, **QUIET})
    try:
        c.assign([TopicPartition(topic_name, 0, high)])
        # Let the consumer connect and park a fetch at the end of the log.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            assert m is None or m.error(), f"unexpected record {m.value() if m else None}"
        info = {}
        t = _produce_later(broker.bootstrap, topic_name, 0.0, b"new", info)
        got = None
        deadline = time.monotonic() + MAX_WAIT_MS / 1000 + 10
        while got is None and time.monotonic() < deadline:
            m = c.poll(0.05)
            if m is not None and not m.error():
                got = m
        received_at = time.monotonic()
        t.join(30)
        assert got is not None and got.value() == b"new"
        assert got.offset() == high
        latency = received_at - info["sent_at"]
        assert latency < PROMPT_S, f"record arrived {latency:.2f}s after produce (max wait 10s)"
    finally:
        c.close()


def test_kafka_python_consumer_waiting_in_long_poll_receives_new_record_promptly(broker,
                                                                               topic_name):
    from kafka import TopicPartition as KTP
    create_topic(broker.bootstrap, topic_name, partitions=1)
    c = kp_consumer(broker.bootstrap, fetch_max_wait_ms=MAX_WAIT_MS, fetch_min_bytes=1,
                    request_timeout_ms=MAX_WAIT_MS + 20_000)
    try:
        tp = KTP(topic_name, 0)
        c.assign([tp])
        c.seek_to_end(tp)
        assert c.position(tp) == 0
        assert c.poll(timeout_ms=2000) == {}
        info = {}
        t = _produce_later(broker.bootstrap, topic_name, 0.0, b"new", info)
        got = []
        deadline = time.monotonic() + MAX_WAIT_MS / 1000 + 10
        while not got and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=100).values():
                got.extend(recs)
        received_at = time.monotonic()
        t.join(30)
        assert [r.value for r in got] == [b"new"]
        latency = received_at - info["sent_at"]
        assert latency < PROMPT_S, f"record arrived {latency:.2f}s after produce (max wait 10s)"
    finally:
        c.close()


def _require_fetch_v4(conn):
    lo, hi = conn.api_versions().get(API_FETCH, (None, None))
    if lo is None or not lo <= 4 <= hi:
        pytest.skip(f"broker does not serve Fetch v4 (range {lo}..{hi})")


def test_raw_fetch_at_log_end_is_answered_when_a_record_is_appended(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce(broker.bootstrap, topic_name, [{"value": b"a"}, {"value": b"b"}])
    with Conn(broker.bootstrap) as conn:
        _require_fetch_v4(conn)
        info = {}
        t = _produce_later(broker.bootstrap, topic_name, 1.5, b"c", info)
        start = time.monotonic()
        err, hw, records = conn.fetch_v4(topic_name, 0, 2, max_wait_ms=MAX_WAIT_MS)
        done = time.monotonic()
        t.join(30)
    assert err == 0
    assert hw == 3
    assert records, "fetch returned no records"
    assert b"c" in records
    # It waited for the append (it was not answered empty at once) ...
    assert done - start >= 1.0, f"fetch returned after {done - start:.2f}s, before the append"
    # ... and was answered promptly after it.
    assert done - info["sent_at"] < PROMPT_S, \
        f"fetch answered {done - info['sent_at']:.2f}s after the produce"


def test_raw_fetch_without_new_data_is_held_until_max_wait(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce(broker.bootstrap, topic_name, [{"value": b"only"}])
    with Conn(broker.bootstrap) as conn:
        _require_fetch_v4(conn)
        start = time.monotonic()
        err, hw, records = conn.fetch_v4(topic_name, 0, 1, max_wait_ms=1500)
        elapsed = time.monotonic() - start
    assert err == 0
    assert hw == 1
    assert not records
    assert 1.2 <= elapsed < 1.5 + PROMPT_S, f"empty fetch returned after {elapsed:.2f}s"


def test_raw_fetch_with_data_available_returns_immediately(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce(broker.bootstrap, topic_name, [{"value": b"ready"}])
    with Conn(broker.bootstrap) as conn:
        _require_fetch_v4(conn)
        start = time.monotonic()
        err, hw, records = conn.fetch_v4(topic_name, 0, 0, max_wait_ms=MAX_WAIT_MS)
        elapsed = time.monotonic() - start
    assert err == 0 and hw == 1 and b"ready" in records
    assert elapsed < PROMPT_S
