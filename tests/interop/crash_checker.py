"""A randomized crash checker: real clients keep producing and consuming while brokers are
killed with SIGKILL or paused with SIGSTOP at random moments (and, where the caller sets them
up, the disk fills or the bucket goes away for a while); afterwards the whole history is
checked.

Workload (all confluent-kafka, so librdkafka's retries and idempotence are what is tested):
- an idempotent acks=all producer writes numbered records to every data topic (plain,
  compacted with unique keys, and, where the broker tiers, tiered and tiered+compacted),
  recording the offset each acknowledged record got;
- a transactional producer writes transactions of TXN_SIZE records, committing or aborting
  at random; a commit whose outcome the client could not learn is "unknown";
- a consumer in a group reads the plain topic and commits its position synchronously,
  recording every commit the broker acknowledged.

Checks, after the faults stop and every broker is back:
- every acknowledged record is present exactly once, at its acknowledged offset (lost);
- no record appears twice (duplicated) and each partition's numbers rise with the offset
  (out of order);
- read_committed shows every committed transaction whole, no aborted one, and each unknown
  one whole or not at all;
- the group's committed offsets are at least the last acknowledged commit and at most the
  last attempted one.

`run(...)` returns a summary dict; the caller asserts on it and prints it.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException,
                             Producer, TopicPartition)
from confluent_kafka.admin import NewTopic

from helpers import QUIET, admin

PARTITIONS = 3
TXN_SIZE = 5


@dataclass
class Summary:
    config: str
    seed: int
    cycles: int = 0
    faults: dict = field(default_factory=dict)
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    wrong_offset: int = 0
    txn_committed: int = 0
    txn_aborted: int = 0
    txn_unknown: int = 0
    txn_violations: int = 0
    group_commits: int = 0
    group_violations: int = 0
    client_fatal: int = 0
    problems: list = field(default_factory=list)

    def line(self) -> str:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()))
        return (f"crash-checker: config {self.config} seed {self.seed} cycles {self.cycles} "
                f"({faults}) acknowledged {self.acknowledged} lost {self.lost} "
                f"duplicated {self.duplicated} out-of-order {self.out_of_order} "
                f"wrong-offset {self.wrong_offset} txn committed {self.txn_committed} "
                f"aborted {self.txn_aborted} unknown {self.txn_unknown} "
                f"txn-violations {self.txn_violations} group commits {self.group_commits} "
                f"group-violations {self.group_violations} client-fatal {self.client_fatal}")

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.out_of_order or self.wrong_offset
                    or self.txn_violations or self.group_violations or self.client_fatal)


class IdempotentWriter:
    """Numbered records `<topic>:<n>` (key `k<n>`) to partition n % PARTITIONS of each topic."""

    def __init__(self, bootstrap: str, topics: list[str]):
        self.topics = topics
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": 300000, "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000, **QUIET})
        self.acked: dict[tuple[str, int], dict[int, int]] = {}  # (topic, part) -> n -> offset
        self.sent = 0
        self.fatal = None
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg):
        if err is not None:
            return
        n = int(msg.value().split(b":")[1])
        with self.lock:
            self.acked.setdefault((msg.topic(), msg.partition()), {})[n] = msg.offset()

    def _run(self):
        try:
            while not self.stop.is_set():
                for t in self.topics:
                    try:
                        self.producer.produce(t, key=b"k%d" % self.sent,
                                              value=t.encode() + b":%d" % self.sent,
                                              partition=self.sent % PARTITIONS,
                                              on_delivery=self._delivered)
                    except BufferError:
                        self.producer.poll(0.05)
                self.sent += 1
                self.producer.poll(0.002)
            self.producer.flush(300)
        except KafkaException as e:
            # A fatal idempotence error (e.g. the broker lost a sequence): the producer is
            # unusable, which Kafka never makes a client suffer for a fault it recovered from.
            self.fatal = str(e)


class TransactionalWriter:
    """Transactions of TXN_SIZE records `txn:<t>:<i>` to one topic, committed or aborted."""

    def __init__(self, bootstrap: str, topic: str, rnd: random.Random):
        self.bootstrap = bootstrap
        self.topic = topic
        self.rnd = rnd
        self.txn_id = f"crash-checker-{uuid.uuid4().hex[:8]}"
        self.outcome: dict[int, str] = {}  # txn number -> committed | aborted | unknown
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.producer = None

    def _new_producer(self):
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.txn_id,
                      "transaction.timeout.ms": 60000, "message.timeout.ms": 60000,
                      "topic.metadata.refresh.interval.ms": 1000, **QUIET})
        deadline = time.monotonic() + 120
        while True:
            try:
                p.init_transactions(30)
                return p
            except KafkaException as e:
                if time.monotonic() > deadline or e.args[0].fatal():
                    raise
                time.sleep(0.5)

    def _run(self):
        t = 0
        self.producer = self._new_producer()
        while not self.stop.is_set():
            p = self.producer
            commit = self.rnd.random() < 0.7
            try:
                p.begin_transaction()
                for i in range(TXN_SIZE):
                    p.produce(self.topic, value=b"txn:%d:%d" % (t, i), partition=t % PARTITIONS)
                # Aborted records must reach the log (librdkafka purges unsent ones on abort).
                p.flush(60)
                if commit:
                    self._finish(p.commit_transaction)
                    self.outcome[t] = "committed"
                else:
                    self._finish(p.abort_transaction)
                    self.outcome[t] = "aborted"
            except _Uncertain:
                self.outcome[t] = "unknown"
                self.producer = self._new_producer()
            except KafkaException as e:
                err = e.args[0]
                if err.txn_requires_abort():
                    try:
                        self._finish(p.abort_transaction)
                        self.outcome[t] = "aborted"
                    except (_Uncertain, KafkaException):
                        self.outcome[t] = "unknown"
                        self.producer = self._new_producer()
                else:
                    self.outcome[t] = "unknown"
                    self.producer = self._new_producer()
            t += 1

    @staticmethod
    def _finish(call):
        """Commit or abort, retrying while librdkafka says the call may be retried."""
        deadline = time.monotonic() + 60
        while True:
            try:
                call(30)
                return
            except KafkaException as e:
                err = e.args[0]
                if err.retriable() and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                if err.txn_requires_abort():
                    raise
                raise _Uncertain() from e


class _Uncertain(Exception):
    """The client could not learn how a commit or abort ended."""


class GroupReader:
    """A group member on the plain topic that commits synchronously after every poll."""

    def __init__(self, bootstrap: str, topic: str):
        self.group = f"crash-checker-{uuid.uuid4().hex[:8]}"
        self.topic = topic
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": self.group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000, "topic.metadata.refresh.interval.ms": 1000, **QUIET})
        self.acked_commit: dict[int, int] = {}  # partition -> last offset the broker acked
        self.attempted: dict[int, int] = {}  # partition -> highest offset ever sent in a commit
        self.commits = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        self.consumer.subscribe([self.topic])
        while not self.stop.is_set():
            msgs = self.consumer.consume(100, 0.2)
            positions = {}
            for m in msgs:
                if m.error() is None:
                    positions[m.partition()] = m.offset() + 1
            if not positions:
                continue
            offsets = [TopicPartition(self.topic, p, o) for p, o in positions.items()]
            for p, o in positions.items():
                self.attempted[p] = max(self.attempted.get(p, 0), o)
            try:
                result = self.consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException:
                continue
            for tp in result or []:
                if tp.error is None:
                    self.acked_commit[tp.partition] = tp.offset
                    self.commits += 1
        self.consumer.close()


def read_partition(bootstrap: str, topic: str, partition: int, isolation: str,
                   timeout: float = 120.0) -> list[tuple[int, bytes]]:
    """Every record of the partition from the beginning to its high watermark."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "enable.partition.eof": True, **QUIET})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                _, high = c.get_watermark_offsets(TopicPartition(topic, partition), 10)
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        out = []
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    if m.offset() >= high:
                        return out
                    continue
                continue
            out.append((m.offset(), m.value()))
            if m.offset() + 1 >= high:
                return out
        raise AssertionError(f"could not read {topic}-{partition} to {high} in {timeout}s "
                             f"(got {len(out)} records)")
    finally:
        c.close()


def create_topics(bootstrap: str, topics: dict[str, dict], replication: int):
    a = admin(bootstrap)
    fs = a.create_topics([NewTopic(t, num_partitions=PARTITIONS, replication_factor=replication,
                                   config=cfg) for t, cfg in topics.items()], request_timeout=60)
    for f in fs.values():
        f.result()


class FullDisk:
    """Fills the filesystem of `path` (a small tmpfs the caller mounted) with a filler file for
    a while, then frees it: appends fail with KAFKA_STORAGE_ERROR meanwhile."""

    def __init__(self, path):
        self.path = path

    def __call__(self, rnd: random.Random):
        filler = os.path.join(self.path, "filler")
        try:
            with open(filler, "wb") as f:
                chunk = b"\0" * (1 << 20)
                while True:
                    f.write(chunk)
                    f.flush()
        except OSError:
            pass  # ENOSPC: the disk is full
        try:
            time.sleep(rnd.uniform(0.5, 2.0))
        finally:
            os.remove(filler)


class BucketOutage:
    """Puts a plain file where a file:// bucket's directory was, for a while: every request
    to the bucket fails (the store cannot recreate the directory)."""

    def __init__(self, path):
        self.path = str(path)

    def __call__(self, rnd: random.Random):
        away = self.path + ".away"
        os.rename(self.path, away)
        try:
            with open(self.path, "wb"):
                pass
            time.sleep(rnd.uniform(0.5, 3.0))
        finally:
            if os.path.isdir(self.path):  # recreated between the rename and the file
                os.rename(self.path, away + ".late")
            else:
                os.remove(self.path)
            os.rename(away, self.path)


def fault(brokers, rnd: random.Random, summary: Summary, bootstrap_alive, extra=None):
    """One random fault: SIGKILL then restart, or SIGSTOP then SIGCONT, of a random broker, or
    one of `extra` (name -> callable taking the generator), such as a full disk."""
    b = rnd.choice(brokers)
    kinds = ["kill9", "kill9", "pause", *(extra or {})]
    kind = rnd.choice(kinds)
    summary.faults[kind] = summary.faults.get(kind, 0) + 1
    if kind in (extra or {}):
        extra[kind](rnd)
    elif kind == "kill9":
        b.kill9()
        time.sleep(rnd.uniform(0.0, 2.0))
        b.start()
    else:
        os.kill(b.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(rnd.uniform(0.5, 3.0))
        finally:
            os.kill(b.proc.pid, signal.SIGCONT)
    bootstrap_alive()


def run(config: str, brokers, data_topics: dict[str, dict], txn_topic: str, cycles: int,
        seed: int, replication: int, extra_faults=None) -> Summary:
    rnd = random.Random(seed)
    summary = Summary(config=config, seed=seed)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    topics = dict(data_topics)
    topics[txn_topic] = {}
    create_topics(bootstrap, topics, replication)
    plain = next(iter(data_topics))

    writer = IdempotentWriter(bootstrap, list(data_topics))
    txns = TransactionalWriter(bootstrap, txn_topic, rnd)
    group = GroupReader(bootstrap, plain)
    for w in (writer, txns, group):
        w.thread.start()

    def all_up():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                md = admin(bootstrap).list_topics(timeout=5)
                if all(p.leader >= 0 for t in topics for p in md.topics[t].partitions.values()):
                    return
            except Exception:  # noqa: BLE001 - brokers are coming back
                pass
            time.sleep(0.2)

    try:
        time.sleep(1.0)
        for _ in range(cycles):
            time.sleep(rnd.uniform(0.3, 2.0))
            fault(brokers, rnd, summary, all_up, extra_faults)
            summary.cycles += 1
        time.sleep(1.0)
    finally:
        for w in (group, txns, writer):
            w.stop.set()
        for w in (group, txns, writer):
            w.thread.join(360)

    # ---------------------------------------------------------------- the history
    if writer.fatal:
        summary.client_fatal += 1
        summary.problems.append(f"idempotent producer failed: {writer.fatal}")
    for t in data_topics:
        for p in range(PARTITIONS):
            acked = writer.acked.get((t, p), {})
            summary.acknowledged += len(acked)
            log = read_partition(bootstrap, t, p, "read_uncommitted")
            where: dict[int, list[int]] = {}
            previous = -1
            for offset, value in log:
                n = int(value.split(b":")[1])
                where.setdefault(n, []).append(offset)
                if n <= previous:
                    summary.out_of_order += 1
                    summary.problems.append(f"{t}-{p}: {n} at {offset} after {previous}")
                previous = max(previous, n)
            for n, offsets in where.items():
                if len(offsets) > 1:
                    summary.duplicated += len(offsets) - 1
                    summary.problems.append(f"{t}-{p}: {n} at offsets {offsets}")
            for n, offset in acked.items():
                if n not in where:
                    summary.lost += 1
                    summary.problems.append(f"{t}-{p}: acknowledged {n} at {offset} is gone")
                elif offset not in where[n]:
                    summary.wrong_offset += 1
                    summary.problems.append(f"{t}-{p}: {n} acked at {offset}, found at {where[n]}")

    seen: dict[int, list[int]] = {}
    for p in range(PARTITIONS):
        for _, value in read_partition(bootstrap, txn_topic, p, "read_committed"):
            _, t, i = value.split(b":")
            seen.setdefault(int(t), []).append(int(i))
    for t, outcome in txns.outcome.items():
        got = sorted(seen.get(t, []))
        if outcome == "committed":
            summary.txn_committed += 1
            ok = got == list(range(TXN_SIZE))
        elif outcome == "aborted":
            summary.txn_aborted += 1
            ok = not got
        else:
            summary.txn_unknown += 1
            ok = got in ([], list(range(TXN_SIZE)))
        if not ok:
            summary.txn_violations += 1
            summary.problems.append(f"transaction {t} ({outcome}) shows records {got}")

    summary.group_commits = group.commits
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group.group, **QUIET})
    try:
        committed = c.committed([TopicPartition(plain, p) for p in range(PARTITIONS)], 30)
    finally:
        c.close()
    for tp in committed:
        low = group.acked_commit.get(tp.partition)
        high = group.attempted.get(tp.partition)
        if low is None:
            continue
        if not (low <= tp.offset <= (high or low)):
            summary.group_violations += 1
            summary.problems.append(f"group offset of {plain}-{tp.partition} is {tp.offset}, "
                                    f"acknowledged {low}, attempted up to {high}")
    return summary
