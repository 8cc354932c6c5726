"""A long-running consumer-group member, run as a subprocess by test_groups.py.

    python group_member.py --lib confluent|kafka-python --bootstrap HOST:PORT --topic T
        --group G [--instance-id I] [--session-timeout-ms MS] [--heartbeat-interval-ms MS]
        [--assignor range|roundrobin]

It speaks the same line protocol as the Java client's `InteropClient group-member`:
one JSON object a line on stdout, each with "ev" and "t" (epoch milliseconds):

* subscribed                   after subscribe()
* assigned {partitions}        the full assignment after every assignment callback
* revoked / lost {partitions}
* records {records: [[partition, offset, value], ...]}
                               a polled batch, reported after it was committed synchronously
* commit_failed {error, records}
* status {partitions}          answer to the stdin command "status"
* closed                       after close() returned

stdin commands: "status", "close" (close() the consumer: a dynamic member leaves the group,
a static one does not); EOF means close too. Runs with SIGTERM as parent-death signal, so it
never outlives the test process.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import signal
import sys
import threading
import time

_out_lock = threading.Lock()


def emit(ev: str, **kw) -> None:
    line = json.dumps({"ev": ev, "t": int(time.time() * 1000), **kw})
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Control:
    def __init__(self):
        self.close = threading.Event()
        self.status = threading.Event()
        threading.Thread(target=self._read, daemon=True, name="stdin").start()

    def _read(self):
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "close":
                break
            if cmd == "status":
                self.status.set()
        self.close.set()


def _text(v):
    return None if v is None else v.decode("utf-8", "replace")


def run_confluent(args, ctl: Control) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": f"strata-interop-{args.lib}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
        "partition.assignment.strategy": args.assignor,
        "log_level": 3,
    }
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    if args.session_timeout_ms:
        conf["session.timeout.ms"] = args.session_timeout_ms
    if args.heartbeat_interval_ms:
        conf["heartbeat.interval.ms"] = args.heartbeat_interval_ms
    c = Consumer(conf)
    current: set[int] = set()

    def on_assign(consumer, parts):
        # Eager assignors: `parts` is the whole new assignment.
        current.clear()
        current.update(tp.partition for tp in parts)
        emit("assigned", partitions=sorted(current))

    def on_revoke(consumer, parts):
        current.difference_update(tp.partition for tp in parts)
        emit("revoked", partitions=sorted(tp.partition for tp in parts))

    def on_lost(consumer, parts):
        current.difference_update(tp.partition for tp in parts)
        emit("lost", partitions=sorted(tp.partition for tp in parts))

    c.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit("subscribed")
    try:
        while not ctl.close.is_set():
            if ctl.status.is_set():
                ctl.status.clear()
                emit("status", partitions=sorted(tp.partition for tp in c.assignment()))
            msgs = c.consume(num_messages=500, timeout=0.2)
            items, offsets = [], {}
            for m in msgs:
                if m.error():
                    continue
                items.append([m.partition(), m.offset(), _text(m.value())])
                offsets[m.partition()] = m.offset() + 1
            if not items:
                continue
            try:
                c.commit(offsets=[TopicPartition(args.topic, p, o) for p, o in offsets.items()],
                         asynchronous=False)
                emit("records", records=items)
            except KafkaException as e:
                emit("commit_failed", error=str(e), records=items)
    finally:
        c.close()
    emit("closed")


def run_kafka_python(args, ctl: Control) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.structs import OffsetAndMetadata

    # The client's group log goes to stderr, which a failing test prints.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("kafka.coordinator").setLevel(logging.INFO)

    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    conf = dict(bootstrap_servers=args.bootstrap, group_id=args.group,
                client_id=f"strata-interop-{args.lib}", enable_auto_commit=False,
                auto_offset_reset="earliest", fetch_max_wait_ms=100,
                partition_assignment_strategy=[assignor[args.assignor]])
    if args.instance_id:
        conf["group_instance_id"] = args.instance_id
    if args.session_timeout_ms:
        conf["session_timeout_ms"] = args.session_timeout_ms
    if args.heartbeat_interval_ms:
        conf["heartbeat_interval_ms"] = args.heartbeat_interval_ms
    c = KafkaConsumer(**conf)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned):
            emit("assigned", partitions=sorted(tp.partition for tp in c.assignment()))

    # Topic metadata before the first join. kafka-python 3.0.12 loses a rejoin's result
    # when the rejoin was triggered by a metadata change (the leader assigned before it
    # knew the topic's partitions) and poll()'s timeout expires during JoinGroup/SyncGroup:
    # the next poll finds need_rejoin() false, never reads the finished join, and the member
    # stays without assignment or heartbeats until the coordinator expires it (seen under
    # CPU load against any broker). Knowing the partitions before joining avoids that rejoin.
    deadline = time.monotonic() + 30
    while not c.partitions_for_topic(args.topic) and time.monotonic() < deadline:
        time.sleep(0.05)
    c.subscribe([args.topic], listener=Listener())
    emit("subscribed")
    try:
        while not ctl.close.is_set():
            if ctl.status.is_set():
                ctl.status.clear()
                emit("status", partitions=sorted(tp.partition for tp in c.assignment()))
            batch = c.poll(timeout_ms=200)
            items, offsets = [], {}
            for tp, recs in batch.items():
                for r in recs:
                    items.append([r.partition, r.offset, _text(r.value)])
                    offsets[TopicPartition(tp.topic, tp.partition)] = \
                        OffsetAndMetadata(r.offset + 1, "", -1)
            if not items:
                continue
            try:
                c.commit(offsets=offsets)
                emit("records", records=items)
            except Exception as e:  # noqa: BLE001 - CommitFailedError and friends
                emit("commit_failed", error=f"{type(e).__name__}: {e}", records=items)
    finally:
        c.close()
    emit("closed")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", choices=["confluent", "kafka-python"], required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--instance-id")
    ap.add_argument("--session-timeout-ms", type=int)
    ap.add_argument("--heartbeat-interval-ms", type=int)
    ap.add_argument("--assignor", default="range", choices=["range", "roundrobin"])
    args = ap.parse_args()
    _die_with_parent()
    ctl = Control()
    try:
        (run_confluent if args.lib == "confluent" else run_kafka_python)(args, ctl)
    except Exception as e:  # noqa: BLE001
        emit("error", error=f"{type(e).__name__}: {e}")
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
