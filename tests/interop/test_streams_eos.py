"""Kafka Streams (org.apache.kafka:kafka-streams, processing.guarantee=exactly_once_v2) word
count (tests/java StreamsWordCount: repartition topic, in-memory store with a changelog topic,
both created by Streams through the admin API) keeps exact counts when the broker restarts
mid-run. Runs against Strata or, with STRATA_TEST_TARGET=kafka, the reference broker.

Skipped when the Java classes or the kafka-streams jars are not installed
(scripts/install-test-deps.sh)."""

import collections
import os
import random
import threading
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from helpers import QUIET, create_topic
from java_apps import JavaProcess, skip_reason

MAIN = "io.strata.interop.StreamsWordCount"
_SKIP = skip_reason("streams-app", MAIN)
pytestmark = [pytest.mark.skipif(_SKIP is not None, reason=f"Kafka Streams app: {_SKIP}"),
              pytest.mark.slow, pytest.mark.groups]

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliett", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
         "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu"]
LINES = 3000
PARTITIONS = 2


def _text(rng):
    # Zipf-ish: a few words very often, the rest rarely, so keys see many updates.
    weights = [1.0 / (i + 1) for i in range(len(WORDS))]
    return [" ".join(rng.choices(WORDS, weights, k=rng.randint(1, 8))) for _ in range(LINES)]


class _Producer:
    """Produces lines in the background, slowly enough that a broker restart lands in the
    middle, with an idempotent producer that rides out the restart (no duplicates, no loss)."""

    def __init__(self, bootstrap, topic, lines, per_second):
        self.errors = []
        self.delivered = 0
        # log_level 0: the broker is down for a while on purpose; no connection-refused noise.
        self._p = Producer({**QUIET, "bootstrap.servers": bootstrap, "enable.idempotence": True,
                            "acks": "all", "linger.ms": 5, "message.timeout.ms": 180000,
                            "log_level": 0})
        self._t = threading.Thread(target=self._run, args=(topic, lines, per_second),
                                   daemon=True)
        self._t.start()

    def _cb(self, err, msg):
        if err is not None:
            self.errors.append(err)
        else:
            self.delivered += 1

    def _run(self, topic, lines, per_second):
        start = time.monotonic()
        for i, line in enumerate(lines):
            while time.monotonic() - start < i / per_second:
                self._p.poll(0.01)
            while True:
                try:
                    self._p.produce(topic, key=b"line-%d" % i, value=line.encode(),
                                    on_delivery=self._cb)
                    break
                except BufferError:
                    self._p.poll(0.1)
            self._p.poll(0)
        self._p.flush(200)

    def join(self, timeout):
        self._t.join(timeout)
        return not self._t.is_alive()


def _counts(bootstrap, topic, timeout=5.0):
    """Last value per key of the output topic read with read_committed from the beginning,
    until nothing new arrives for 2 s (or timeout)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wc-check-" + uuid.uuid4().hex,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.partition.eof": False,
                  **QUIET})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        last, seen = {}, time.monotonic()
        deadline = time.monotonic() + timeout
        while time.monotonic() - seen < 2.0 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                assert m.error().code() != KafkaError._FATAL, m.error()
                continue
            last[m.key().decode()] = int.from_bytes(m.value(), "big", signed=True)
            seen = time.monotonic()
        return last
    finally:
        c.close()


@pytest.mark.parametrize("how", ["restart", "kill9"])
@pytest.mark.timeout(900)
def test_streams_exactly_once_word_count_is_exact_across_a_broker_restart(
        broker_factory, topic_name, tmp_path, how):
    seed = int(os.environ.get("STRATA_TEST_SEED") or random.randrange(1 << 30))
    print(f"seed={seed} (STRATA_TEST_SEED)")
    rng = random.Random(seed)
    b = broker_factory()
    src, dst = topic_name + "-text", topic_name + "-counts"
    create_topic(b.bootstrap, src, partitions=PARTITIONS)
    create_topic(b.bootstrap, dst, partitions=PARTITIONS)
    lines = _text(rng)
    expected = collections.Counter(w for line in lines for w in line.split())

    app = JavaProcess("streams-app", MAIN,
                      ["--bootstrap", b.bootstrap, "--input", src, "--output", dst,
                       "--application-id", "wc-" + uuid.uuid4().hex[:8],
                       "--state-dir", tmp_path / "streams-state"],
                      tmp_path / "streams.stderr", stdin=True)
    producer = None
    try:
        running = app.wait_for(lambda e: e.get("to") == "RUNNING", timeout=180)
        assert running is not None, \
            f"Streams did not reach RUNNING: {app.all_events}\n{app.stderr_tail()}"
        producer = _Producer(b.bootstrap, src, lines, per_second=200)  # ~15 s of input
        # Restart the broker once the app has committed output and the input is half-way.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (producer.delivered < LINES // 3
                                               or not _counts(b.bootstrap, dst, timeout=3)):
            time.sleep(0.5)
        assert producer.delivered >= LINES // 3, f"input stalled: {producer.delivered}"
        print(f"{how} of the broker with {producer.delivered}/{LINES} lines delivered")
        if how == "restart":
            b.restart()
        else:
            b.kill9()
            time.sleep(1)
            b.start()
        assert producer.join(300), "the producer did not finish"
        assert not producer.errors, f"input delivery failed: {producer.errors[:5]}"

        want = {w: c for w, c in expected.items()}
        got, deadline = {}, time.monotonic() + 300
        while time.monotonic() < deadline:
            assert app.proc.poll() is None, \
                f"Streams app exited: {app.all_events[-5:]}\n{app.stderr_tail()}"
            got = _counts(b.bootstrap, dst, timeout=20)
            over = {w: (c, want.get(w)) for w, c in got.items() if c > want.get(w, 0)}
            assert not over, f"counted more than produced (got, want): {over}"
            if got == want:
                break
            time.sleep(2)
        assert got == want, \
            f"counts after {how}: missing/short {sorted((w, got.get(w), c) for w, c in want.items() if got.get(w) != c)[:10]}\n" \
            f"events: {app.all_events[-8:]}\n{app.stderr_tail()}"
        time.sleep(3)  # anything still in flight would show up as an over-count
        assert _counts(b.bootstrap, dst, timeout=20) == want
        assert not [e for e in app.all_events if e.get("ev") == "error"], app.all_events
        app.send("close")
        assert app.wait(90) == 0, f"Streams app did not close cleanly\n{app.stderr_tail()}"
    finally:
        if producer is not None:
            producer.join(5)
        app.close()
