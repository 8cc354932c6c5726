"""Exactly-once consume-transform-produce with the official Java client (InteropClient
eos-transform: read_committed consumer, transactional producer, sendOffsetsToTransaction with
consumer.groupMetadata()), SIGKILLed at random moments and restarted with the same
transactional.id. Runs against Strata or, with STRATA_TEST_TARGET=kafka, the reference broker.

Skipped when the Java classes are not built (scripts/build-java-tests.sh)."""

import collections
import os
import random
import signal
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from helpers import QUIET, consume, create_topic, produce
from java_apps import JavaProcess, skip_reason

MAIN = "io.strata.interop.InteropClient"
_SKIP = skip_reason("clients", MAIN)
pytestmark = [pytest.mark.skipif(_SKIP is not None, reason=f"Java interop client: {_SKIP}"),
              pytest.mark.slow, pytest.mark.groups]

RECORDS = 2000
PARTITIONS = 3
COMMIT_EVERY = 50
KILLS = 5


def _setup(broker, topic_name):
    """Input and output topics, RECORDS input records; returns (src, dst, inputs, args)."""
    src, dst = topic_name + "-in", topic_name + "-out"
    create_topic(broker.bootstrap, src, partitions=PARTITIONS)
    create_topic(broker.bootstrap, dst, partitions=PARTITIONS)
    inputs = [b"in-%d" % i for i in range(RECORDS)]
    produce(broker.bootstrap, src, [{"key": b"k%d" % i, "value": v} for i, v in enumerate(inputs)],
            conf={"enable.idempotence": True})
    group, txn_id = "eos-" + uuid.uuid4().hex[:8], "eos-txn-" + uuid.uuid4().hex[:8]
    args = ["eos-transform", "--bootstrap", broker.bootstrap, "--input", src, "--output", dst,
            "--group", group, "--transactional-id", txn_id, "--commit-every", COMMIT_EVERY,
            "--record-delay-ms", 2]
    return src, dst, inputs, args


def _history(procs):
    return "\n".join(
        f"--- instance {n} (pid {p.pid}, rc {p.proc.poll()}): "
        f"{[e for e in p.all_events if e.get('ev') != 'committed'][-6:]} "
        f"commits={sum(e.get('ev') == 'committed' for e in p.all_events)}\n"
        f"{p.stderr_tail(15)}" for n, p in enumerate(procs))


def _assert_exactly_once(broker, dst, inputs, procs):
    """read_committed holds each input's transform exactly once; returns how many records a
    read_uncommitted consumer sees (the committed ones plus those of aborted transactions)."""
    committed = consume(broker.bootstrap, dst, len(inputs), partitions=range(PARTITIONS),
                        conf={"isolation.level": "read_committed"}, timeout=120)
    got = collections.Counter(r.value for r in committed)
    want = collections.Counter(v + b"!" for v in inputs)
    dups = {v: c for v, c in got.items() if c > 1}
    missing = sorted(set(want) - set(got))
    unexpected = sorted(set(got) - set(want))
    assert not dups and not missing and not unexpected, \
        f"read_committed output is not exactly-once: {len(dups)} duplicated " \
        f"(e.g. {list(dups.items())[:5]}), {len(missing)} missing (e.g. {missing[:5]}), " \
        f"{len(unexpected)} unexpected (e.g. {unexpected[:5]})\n{_history(procs)}"
    everything = _drain(broker.bootstrap, dst, PARTITIONS, "read_uncommitted")
    assert set(everything) == set(want), "read_uncommitted sees other values than the transforms"
    assert len(everything) >= len(inputs)
    return len(everything)


def _drain(bootstrap, topic, partitions, isolation, quiet_s=3.0, timeout=60.0):
    """Every record of the topic, read from the beginning until nothing new arrives for
    quiet_s seconds."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-drain",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": isolation, "enable.partition.eof": False, **QUIET})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out, last = [], time.monotonic()
        deadline = time.monotonic() + timeout
        while time.monotonic() - last < quiet_s and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                assert m.error().code() != KafkaError._FATAL, m.error()
                continue
            out.append(m.value())
            last = time.monotonic()
        return out
    finally:
        c.close()


@pytest.mark.timeout(900)
def test_java_transform_loop_killed_nine_and_restarted_outputs_each_input_exactly_once(
        broker, topic_name, tmp_path):
    seed = int(os.environ.get("STRATA_TEST_SEED") or random.randrange(1 << 30))
    print(f"seed={seed} (STRATA_TEST_SEED)")
    rng = random.Random(seed)
    src, dst, inputs, args = _setup(broker, topic_name)
    procs = []

    def start(n):
        p = JavaProcess("clients", MAIN, args, tmp_path / f"eos-{n}.stderr")
        procs.append(p)
        return p

    def history():
        return _history(procs)

    try:
        kills = 0
        finished = None
        for n in range(KILLS):
            p = start(n)
            # Let it commit at least once, so that every instance makes progress, then kill it
            # at a random moment: mid-transaction, between produce and commit, or mid-commit.
            ev = p.wait_for(lambda e: e.get("ev") in ("committed", "done"), timeout=180)
            assert ev is not None, f"instance {n} made no progress in 180s\n{history()}"
            if ev["ev"] == "done":
                finished = p
                break
            time.sleep(rng.uniform(0.0, 1.5))
            if p.proc.poll() is not None:
                assert p.proc.returncode == 0, f"instance {n} failed\n{history()}"
                finished = p
                break
            p.kill9()
            kills += 1
            committed = [e for e in p.all_events if e.get("ev") == "committed"]
            print(f"instance {n}: SIGKILL after {len(committed)} commit(s), "
                  f"{committed[-1]['total'] if committed else 0} record(s) committed")
        if finished is None:
            finished = start(KILLS)
        rc = finished.wait(timeout=300)
        assert rc == 0, f"the last instance did not finish cleanly (rc {rc})\n{history()}"
        assert finished.wait_for(lambda e: e.get("ev") == "done", timeout=10) is not None \
            or any(e.get("ev") == "done" for e in finished.all_events), history()
        assert kills >= 2, f"only {kills} kill(s) happened before the input ran out\n{history()}"
        # The killed instances never reported a fence: they died before the next one started.
        assert not [e for p in procs for e in p.all_events if e.get("ev") == "fenced"], history()

        seen = _assert_exactly_once(broker, dst, inputs, procs)
        print(f"{kills} kills; read_committed: {RECORDS} records, read_uncommitted: {seen} "
              f"({seen - RECORDS} from aborted transactions)")
    finally:
        for p in procs:
            p.close()


@pytest.mark.timeout(600)
def test_a_paused_transform_loop_is_fenced_by_its_successor_and_adds_nothing_when_resumed(
        broker, topic_name, tmp_path):
    src, dst, inputs, args = _setup(broker, topic_name)
    procs = []
    try:
        zombie = JavaProcess("clients", MAIN, args, tmp_path / "zombie.stderr")
        procs.append(zombie)
        assert zombie.wait_for(lambda e: e.get("ev") == "committed", timeout=180), _history(procs)
        time.sleep(0.3)  # most likely mid-transaction now
        os.kill(zombie.pid, signal.SIGSTOP)
        paused_at = len(zombie.all_events)
        # Same transactional.id: initTransactions bumps the epoch and aborts the zombie's open
        # transaction; the zombie's group membership expires, so the successor gets everything.
        successor = JavaProcess("clients", MAIN, args, tmp_path / "successor.stderr")
        procs.append(successor)
        assert successor.wait(300) == 0, f"the successor did not finish\n{_history(procs)}"
        os.kill(zombie.pid, signal.SIGCONT)
        rc = zombie.wait(120)
        after = zombie.all_events[paused_at:]
        assert not [e for e in after if e.get("ev") == "committed"], \
            f"the fenced zombie committed a transaction after resuming: {after}"
        assert rc is not None, f"the resumed zombie did not exit\n{_history(procs)}"
        print(f"zombie exit code {rc}, events after resuming: {after}")
        _assert_exactly_once(broker, dst, inputs, procs)
    finally:
        for p in procs:
            try:
                os.kill(p.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            p.close()
