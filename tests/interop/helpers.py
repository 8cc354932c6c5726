"""Client-side helpers shared by the interop tests (confluent-kafka and kafka-python)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException,
                             Producer, TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

# librdkafka logs broker errors to stderr; pytest shows them only on failure.
QUIET = {"log_level": 3}


@dataclass
class Rec:
    """A consumed record, normalised across clients."""
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list = field(default_factory=list)  # [(str, bytes|None)]
    timestamp: int | None = None
    timestamp_type: str | None = None


@dataclass
class Delivered:
    partition: int
    offset: int
    value: bytes | None
    key: bytes | None = None
    timestamp: int | None = None


# --------------------------------------------------------------------------- admin

class _Admin(AdminClient):
    """AdminClient whose returned futures keep the client alive.

    librdkafka fails pending admin futures with _DESTROY when the client is garbage
    collected, which happens in one-liners like admin(b).create_topics(...)[t].result().
    """

    _FUTURE_METHODS = {"create_topics", "delete_topics", "create_partitions", "describe_configs",
                       "alter_configs", "incremental_alter_configs", "describe_topics",
                       "describe_cluster", "list_offsets", "delete_records"}

    def __getattribute__(self, name):
        attr = super().__getattribute__(name)
        if name not in _Admin._FUTURE_METHODS:
            return attr

        def call(*a, **kw):
            res = attr(*a, **kw)
            futs = res.values() if isinstance(res, dict) else [res]
            for f in futs:
                f._strata_keepalive = self
            return res
        return call


def admin(bootstrap: str, **conf) -> AdminClient:
    c = {"bootstrap.servers": bootstrap, "allow.auto.create.topics": False, **QUIET}
    c.update(conf)
    return _Admin(c)


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None,
                 timeout: float = 30.0) -> None:
    """Create a topic with confluent-kafka and wait until every partition has a leader."""
    a = admin(bootstrap)
    fs = a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                   config={k: str(v) for k, v in (config or {}).items()})],
                         request_timeout=timeout)
    fs[name].result(timeout=timeout)
    wait_for_topic(bootstrap, name, partitions, timeout=timeout, client=a)


def wait_for_topic(bootstrap: str, name: str, partitions: int | None = None,
                   timeout: float = 30.0, client=None) -> None:
    a = client or admin(bootstrap)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        md = a.list_topics(topic=name, timeout=10)
        t = md.topics.get(name)
        last = t
        if t is not None and t.error is None and t.partitions and \
                (partitions is None or len(t.partitions) == partitions) and \
                all(p.leader >= 0 and p.error is None for p in t.partitions.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"topic {name} not ready within {timeout}s: {last}")


def topic_metadata(bootstrap: str, name: str):
    """Metadata for one topic without triggering auto-creation."""
    md = admin(bootstrap).list_topics(topic=name, timeout=10)
    return md.topics.get(name)


def topic_exists(bootstrap: str, name: str) -> bool:
    md = admin(bootstrap).list_topics(timeout=10)
    return name in md.topics


# --------------------------------------------------------------------------- confluent produce/consume

def produce(bootstrap: str, topic: str, records, conf: dict | None = None,
            timeout: float = 60.0, expect_errors: bool = False):
    """Produce records with confluent-kafka.

    records: iterable of dicts with keys value, key, partition, headers, timestamp.
    Returns (delivered: list[Delivered], errors: list[KafkaError]) in delivery order.
    Unless expect_errors, asserts that nothing failed.
    """
    c = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **QUIET}
    c.update(conf or {})
    p = Producer(c)
    delivered: list[Delivered] = []
    errors: list = []

    def cb(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered.append(Delivered(msg.partition(), msg.offset(), msg.value(), msg.key(),
                                       msg.timestamp()[1]))

    n = 0
    for r in records:
        kw = {k: r[k] for k in ("key", "partition", "headers", "timestamp") if r.get(k) is not None}
        while True:
            try:
                p.produce(topic, value=r.get("value"), on_delivery=cb, **kw)
                break
            except BufferError:
                p.poll(0.1)
        n += 1
        p.poll(0)
    remaining = p.flush(timeout)
    assert remaining == 0, f"{remaining} messages still in flight after {timeout}s"
    if not expect_errors:
        assert not errors, f"delivery errors: {errors[:5]}"
    assert len(delivered) + len(errors) == n
    return delivered, errors


def _consumer(bootstrap: str, conf: dict | None = None) -> Consumer:
    c = {
        "bootstrap.servers": bootstrap,
        # librdkafka requires a group.id, but we only assign() and never commit.
        "group.id": "interop-assign-only",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
        "enable.partition.eof": False,
        **QUIET,
    }
    c.update(conf or {})
    return Consumer(c)


def _ts_type(t: int) -> str | None:
    from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME
    return {TIMESTAMP_CREATE_TIME: CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME: LOG_APPEND_TIME}.get(t)


def to_rec(m) -> Rec:
    ts_type, ts = m.timestamp()
    return Rec(m.partition(), m.offset(), m.key(), m.value(),
               [(k, v) for k, v in (m.headers() or [])], ts, _ts_type(ts_type))


def consume(bootstrap: str, topic: str, count: int, partitions=(0,), offset=OFFSET_BEGINNING,
            conf: dict | None = None, timeout: float = 60.0, allow_more: bool = False) -> list[Rec]:
    """Consume exactly `count` records (assign-only, no group) with confluent-kafka.

    After `count` records arrive it keeps polling briefly unless allow_more, to catch
    extra (duplicate) records. Returns them in arrival order.
    """
    c = _consumer(bootstrap, conf)
    try:
        c.assign([TopicPartition(topic, p, offset) for p in partitions])
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                err = m.error()
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.fatal() or not err.retriable():
                    raise KafkaException(err)
                continue
            out.append(to_rec(m))
        assert len(out) >= count, f"consumed {len(out)} of {count} records from {topic} in {timeout}s"
        if not allow_more:
            extra_deadline = time.monotonic() + 1.0
            while time.monotonic() < extra_deadline:
                m = c.poll(0.2)
                if m is not None and not m.error():
                    out.append(to_rec(m))
        return out
    finally:
        c.close()


def watermarks(bootstrap: str, topic: str, partition: int = 0, timeout: float = 10.0):
    c = _consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
    finally:
        c.close()


# --------------------------------------------------------------------------- kafka-python

def kp_producer(bootstrap: str, **kw):
    from kafka import KafkaProducer
    conf = dict(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                request_timeout_ms=30000, max_block_ms=30000)
    conf.update(kw)
    return KafkaProducer(**conf)


def kp_consumer(bootstrap: str, **kw):
    from kafka import KafkaConsumer
    conf = dict(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                auto_offset_reset="earliest", fetch_max_wait_ms=100,
                request_timeout_ms=30000)
    conf.update(kw)
    return KafkaConsumer(**conf)


def kp_produce(bootstrap: str, topic: str, records, timeout: float = 60.0, **kw):
    """Produce with kafka-python; returns list[Delivered] (raises on any error)."""
    p = kp_producer(bootstrap, **kw)
    try:
        futs = []
        for r in records:
            futs.append(p.send(topic, value=r.get("value"), key=r.get("key"),
                               partition=r.get("partition"), headers=r.get("headers"),
                               timestamp_ms=r.get("timestamp")))
        p.flush(timeout=timeout)
        out = []
        for f in futs:
            md = f.get(timeout=timeout)
            out.append(Delivered(md.partition, md.offset, None, None, md.timestamp))
        return out
    finally:
        p.close(timeout=10)


def kp_require_codec(codec: str) -> None:
    """Skip (with the reason) when kafka-python lacks the library for a codec."""
    import pytest
    from kafka import codec as kc
    check = {"none": lambda: True, "gzip": kc.has_gzip, "snappy": kc.has_snappy,
             "lz4": kc.has_lz4, "zstd": kc.has_zstd}[codec]
    if not check():
        pytest.skip(f"kafka-python has no {codec} library; "
                    f"pip install -r tests/interop/requirements.txt")


def kp_to_rec(r) -> Rec:
    ts_type = {0: CREATE_TIME, 1: LOG_APPEND_TIME}.get(r.timestamp_type)
    return Rec(r.partition, r.offset, r.key, r.value, list(r.headers or []), r.timestamp, ts_type)


def kp_consume(bootstrap: str, topic: str, count: int, partitions=(0,), timeout: float = 60.0,
               allow_more: bool = False, **kw) -> list[Rec]:
    """Consume `count` records from the beginning with kafka-python (assign-only, no group)."""
    from kafka import TopicPartition as KTP
    c = kp_consumer(bootstrap, **kw)
    try:
        tps = [KTP(topic, p) for p in partitions]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                out.extend(kp_to_rec(r) for r in recs)
        assert len(out) >= count, f"consumed {len(out)} of {count} records from {topic} in {timeout}s"
        if not allow_more:
            for recs in c.poll(timeout_ms=1000).values():
                out.extend(kp_to_rec(r) for r in recs)
        return out
    finally:
        c.close()
