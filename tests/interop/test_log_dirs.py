"""Moving a replica between a broker's log dirs (AlterReplicaLogDirs), as Kafka 4.4 does it.

A broker with two `log.dirs`; Kafka's own kafka-reassign-partitions (kafka-tools) moves a
partition from one dir to the other with `log_dirs` in its plan while an idempotent acks=all
producer keeps writing, and `--verify` reports the move complete. The whole history is then
checked: every acknowledged record is in the partition exactly once, in order, at its offset;
the partition's files are in the new dir only; after a restart it is still all there. Raw
requests check Kafka's answers for a dir that is not a log dir and a partition that does not
exist. Those tests run on both targets; on Strata the broker is also aborted (as under kill -9)
at each durable step of a move, and restarted with every acknowledged record in place.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import time

import pytest
from confluent_kafka import Producer

from test_cluster import need_reassign_tool, reassign_tool
from conftest import TARGET
from helpers import QUIET, admin, consume, create_topic, produce
from rawkafka import Conn, Reader

LOG_DIR_NOT_FOUND, UNKNOWN_TOPIC_OR_PARTITION = 57, 3


@pytest.fixture
def two_dirs(broker_factory, tmp_path):
    dirs = [tmp_path / "disk-a", tmp_path / "disk-b"]
    b = broker_factory({"log.dirs": ",".join(str(d) for d in dirs)}, name="jbod")
    return b, dirs


def node_id(b) -> int:
    (broker_id,) = admin(b.bootstrap).list_topics(timeout=30).brokers
    return broker_id


def where(dirs, topic, partition=0):
    """The log dirs holding the partition's directory."""
    return [d for d in dirs if (d / f"{topic}-{partition}").is_dir()]


def alter_replica_log_dirs(bootstrap, path, topic, partitions):
    """AlterReplicaLogDirs v1 for one dir -> {partition: error code}."""
    t = topic.encode()
    p = path.encode()
    body = struct.pack(">i", 1) + struct.pack(">h", len(p)) + p
    body += struct.pack(">i", 1) + struct.pack(">h", len(t)) + t
    body += struct.pack(">i", len(partitions)) + b"".join(struct.pack(">i", x) for x in partitions)
    with Conn(bootstrap) as conn:
        r = Reader(conn.request(34, 1, body))
    r.int32()  # throttle
    out = {}
    for _ in range(r.int32()):
        r.string()
        for _ in range(r.int32()):
            index, code = r.int32(), r.int16()
            out[index] = code
    return out


class AckedProducer:
    """An idempotent acks=all producer writing numbered records until stopped; keeps the
    offset of every acknowledged value."""

    def __init__(self, bootstrap, topic):
        self.acked: dict[bytes, int] = {}
        self.failed = 0
        self._stop = threading.Event()
        self._p = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                            "enable.idempotence": True, "linger.ms": 5, **QUIET})
        self._topic = topic
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _cb(self, err, msg):
        if err is None:
            self.acked[msg.value()] = msg.offset()
        else:
            self.failed += 1

    def _run(self):
        i = 0
        while not self._stop.is_set():
            try:
                self._p.produce(self._topic, b"live-%08d" % i + b"." * 200, partition=0,
                                on_delivery=self._cb)
                i += 1
            except BufferError:
                pass
            self._p.poll(0.001 if i % 50 else 0.01)
        self._p.flush(30)

    def stop(self):
        self._stop.set()
        self._t.join(60)


@pytest.mark.timeout(300)
def test_kafka_reassign_partitions_moves_a_replica_between_log_dirs_under_load(two_dirs,
                                                                                 topic_name,
                                                                                 tmp_path):
    need_reassign_tool()
    b, dirs = two_dirs
    # Small segments, so the move copies many sealed ones and the active one changes.
    create_topic(b.bootstrap, topic_name, partitions=1, config={"segment.bytes": "1048576"})
    before = AckedProducer(b.bootstrap, topic_name)
    deadline = time.monotonic() + 60
    while len(before.acked) < 20_000 and time.monotonic() < deadline:
        time.sleep(0.1)
    (src,) = where(dirs, topic_name)
    dst = dirs[1] if src == dirs[0] else dirs[0]

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic_name, "partition": 0, "replicas": [node_id(b)],
         "log_dirs": [str(dst)]}]}))
    started = time.monotonic()
    out = reassign_tool(b.bootstrap, tmp_path, "--reassignment-json-file", str(plan),
                        "--execute")
    assert "Successfully started" in out, out
    replica = f"{topic_name}-0-{node_id(b)}"
    while True:
        out = reassign_tool(b.bootstrap, tmp_path, "--reassignment-json-file", str(plan),
                            "--verify")
        if f"Reassignment of replica {replica} completed successfully" in out:
            break
        assert f"Reassignment of replica {replica} is still in progress" in out, out
        assert time.monotonic() - started < 120, out
        time.sleep(1)
    moved_in = time.monotonic() - started
    time.sleep(1)  # the producer keeps writing to the moved replica
    before.stop()
    print(f"\nmoved {topic_name}-0 ({len(before.acked)} records acknowledged) between log "
          f"dirs in {moved_in:.1f}s")
    assert where(dirs, topic_name) == [dst]
    assert before.failed == 0

    def check_history():
        acked = sorted(before.acked.items(), key=lambda kv: kv[1])
        records = consume(b.bootstrap, topic_name, len(acked), timeout=120)
        got = [(r.value, r.offset) for r in records]
        # Every acknowledged record once, in order, at its offset (nothing else was written).
        assert got == acked

    check_history()
    b.restart()
    assert where(dirs, topic_name) == [dst]
    check_history()


def test_a_dir_that_is_not_a_log_dir_and_an_unknown_partition_get_kafkas_errors(two_dirs,
                                                                                topic_name,
                                                                                tmp_path):
    b, dirs = two_dirs
    create_topic(b.bootstrap, topic_name, partitions=1)
    assert alter_replica_log_dirs(b.bootstrap, str(tmp_path / "elsewhere"), topic_name,
                                  [0]) == {0: LOG_DIR_NOT_FOUND}
    assert alter_replica_log_dirs(b.bootstrap, str(dirs[1]), topic_name,
                                  [7]) == {7: UNKNOWN_TOPIC_OR_PARTITION}
    # The dir the replica is in already: nothing to do.
    (src,) = where(dirs, topic_name)
    assert alter_replica_log_dirs(b.bootstrap, str(src), topic_name, [0]) == {0: 0}


@pytest.mark.skipif(TARGET != "strata", reason="crash points are Strata's (STRATA_FAILPOINT)")
@pytest.mark.parametrize("point", [
    "log_dir_move.copied", "log_dir_move.old_renamed", "log_dir_move.live"])
def test_a_crash_at_each_step_of_a_move_keeps_every_acknowledged_record(
        broker_factory, tmp_path, monkeypatch, topic_name, point):
    """The broker aborts (as under kill -9) at each durable step of a move; restarted, it
    finishes the move (starting the copy again when the crash came before it was complete, as
    Kafka resumes a future replica): the partition ends in exactly one log dir, the new one,
    with every acknowledged record once, in order."""
    dirs = [tmp_path / "disk-a", tmp_path / "disk-b"]
    monkeypatch.setenv("STRATA_FAILPOINT", point)
    b = broker_factory({"log.dirs": ",".join(str(d) for d in dirs)}, name="crash")
    create_topic(b.bootstrap, topic_name, partitions=1, config={"segment.bytes": "1048576"})
    values = [b"rec-%06d" % i + b"." * 300 for i in range(8000)]
    delivered, _ = produce(b.bootstrap, topic_name,
                           [{"value": v, "partition": 0} for v in values],
                           conf={"acks": "all", "enable.idempotence": True})
    assert [d.offset for d in delivered] == list(range(len(values)))
    (src,) = where(dirs, topic_name)
    dst = dirs[1] if src == dirs[0] else dirs[0]
    assert alter_replica_log_dirs(b.bootstrap, str(dst), topic_name, [0]) == {0: 0}
    deadline = time.monotonic() + 60
    while b.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert b.proc.poll() is not None, "the broker did not reach the crash point"
    assert f"crash point {point}" in b.log_path.read_text(errors="replace")
    b.kill9()
    monkeypatch.delenv("STRATA_FAILPOINT")
    b.start()
    deadline = time.monotonic() + 60
    while where(dirs, topic_name) != [dst] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert where(dirs, topic_name) == [dst]
    deadline = time.monotonic() + 10
    leftovers = ["?"]
    while leftovers and time.monotonic() < deadline:
        leftovers = [p.name for d in dirs for p in d.iterdir()
                     if p.name.endswith(("-future", "-moved"))]
        time.sleep(0.1)
    assert leftovers == []
    records = consume(b.bootstrap, topic_name, len(values), timeout=120)
    assert [(r.value, r.offset) for r in records] == list(zip(values, range(len(values))))
    # The replica takes writes where it ended up, and a second move completes.
    more, _ = produce(b.bootstrap, topic_name, [{"value": b"after", "partition": 0}])
    assert more[0].offset == len(values)
    target = src
    assert alter_replica_log_dirs(b.bootstrap, str(target), topic_name, [0]) == {0: 0}
    deadline = time.monotonic() + 60
    while where(dirs, topic_name) != [target] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert where(dirs, topic_name) == [target]


def describe_log_dirs_v4(bootstrap):
    """DescribeLogDirs v4, every partition -> {dir: (total bytes, usable bytes,
    {(topic, partition, is_future)})}."""
    with Conn(bootstrap) as conn:
        r = Reader(conn.request_flexible(35, 4, b"\x00\x00"))
    r.int32()  # throttle
    assert r.int16() == 0
    out = {}
    for _ in range(r.uvarint() - 1):
        assert r.int16() == 0
        d = r.compact_string()
        replicas = set()
        for _ in range(r.uvarint() - 1):
            t = r.compact_string()
            for _ in range(r.uvarint() - 1):
                p = r.int32()
                r.int64(), r.int64()  # size, offset lag
                replicas.add((t, p, r.int8() == 1))
                r.skip_tagged_fields()
            r.skip_tagged_fields()
        total, usable = r.int64(), r.int64()
        r.skip_tagged_fields()
        out[d] = (total, usable, replicas)
    return out


def test_describe_log_dirs_reports_each_dirs_disk_space_and_replicas(two_dirs, topic_name):
    b, dirs = two_dirs
    create_topic(b.bootstrap, topic_name, partitions=2)
    described = describe_log_dirs_v4(b.bootstrap)
    assert set(described) == {str(d) for d in dirs}
    for d in dirs:
        total, usable, replicas = described[str(d)]
        st = os.statvfs(d)
        assert total == st.f_blocks * st.f_frsize
        # Usable space moves as the machine writes; it is the file system's, within 1 GiB.
        assert abs(usable - st.f_bavail * st.f_frsize) < 1 << 30, (usable, st.f_bavail)
        here = {(topic_name, p, False) for p in (0, 1) if (d / f"{topic_name}-{p}").is_dir()}
        assert {x for x in replicas if x[0] == topic_name} == here
