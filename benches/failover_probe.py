#!/usr/bin/env python3
"""Leadership recovery after kill -9, for benches/cluster.sh (confluent-kafka; the same client
and settings against Strata and Kafka).

  failover_probe.py kill --bootstrap B --topic T --pids 1=PID,... --addrs 1=HOST:PORT,...
                         [--warmup S] [--timeout S]
      Waits until partition 0 of T has a leader and a full ISR, runs an idempotent acks=all
      producer on partition 0 (one record every ~5 ms) until acknowledgements flow, then sends
      SIGKILL to the partition leader's process and measures, from the kill:
        ack_s       until the first record produced after the kill is acknowledged
        metadata_s  until Metadata (asked of the surviving brokers, every 50 ms) names a
                    leader other than the killed broker
      Prints one JSON line: victim, new_leader, controller (the active controller before the
      kill, as DescribeCluster reports it), ack_s, metadata_s, delivery_errors, acked.
  failover_probe.py wait-isr --bootstrap B --topic T --replicas N [--timeout S]
      Waits until partition 0 of T has a leader and N in-sync replicas (after a restart).
"""
import argparse
import json
import os
import signal
import sys
import threading
import time

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

QUIET = {"log_level": 3}
PRODUCER = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 0,
    "message.timeout.ms": 120000,
    # Retry every 100 ms (no exponential backoff up to 1 s), so the measurement is not
    # quantised by the client's backoff.
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 100,
    "topic.metadata.refresh.interval.ms": 1000,
    **QUIET,
}


def admin(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False,
                        "socket.timeout.ms": 2000, **QUIET})


def partition0(a, topic, timeout=2.0):
    """(leader, replicas, isr) of partition 0 of topic as one broker reports it."""
    md = a.list_topics(topic, timeout=timeout)
    t = md.topics.get(topic)
    if t is None or t.error is not None or 0 not in t.partitions:
        raise KafkaException(f"no metadata for {topic}: {t.error if t else 'missing'}")
    p = t.partitions[0]
    return p.leader, sorted(p.replicas), sorted(p.isrs)


def wait_isr(a, topic, replicas, timeout):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = partition0(a, topic)
            leader, reps, isr = last
            if leader >= 0 and len(reps) == replicas and len(isr) == replicas:
                return last
        except KafkaException as e:
            last = str(e)
        time.sleep(0.2)
    sys.exit(f"partition 0 of {topic} has no leader with {replicas} in-sync replicas after "
             f"{timeout}s (last: {last})")


class ProbeProducer:
    """Produces to partition 0 on its own thread; remembers when each record was produced
    and when it was acknowledged."""

    def __init__(self, bootstrap, topic):
        self.p = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
        self.topic = topic
        self.produced_at = []
        self.acked_at = {}
        self.errors = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _cb(self, err, msg):
        now = time.monotonic()
        n = int(msg.value())
        with self.lock:
            if err is not None:
                self.errors.append((n, str(err)))
            else:
                self.acked_at[n] = now

    def _run(self):
        n = 0
        while not self.stop.is_set():
            now = time.monotonic()
            try:
                self.p.produce(self.topic, value=b"%d" % n, partition=0, on_delivery=self._cb)
                with self.lock:
                    self.produced_at.append(now)
                n += 1
            except BufferError:
                pass
            self.p.poll(0.005)
        self.p.flush(30)

    def first_ack_after(self, t):
        with self.lock:
            times = [at for n, at in self.acked_at.items() if self.produced_at[n] > t]
        return min(times) if times else None

    def acks_since(self, t):
        with self.lock:
            return sum(1 for at in self.acked_at.values() if at > t)


def pid_gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def cmd_kill(args):
    pids = {int(k): int(v) for k, v in (kv.split("=") for kv in args.pids.split(","))}
    ports = {int(k): v for k, v in (kv.split("=") for kv in args.addrs.split(","))}
    a = admin(args.bootstrap)
    leader, reps, _ = wait_isr(a, args.topic, len(pids), args.timeout)
    controller = None
    try:
        controller = a.describe_cluster(request_timeout=5).result().controller.id
    except Exception:  # noqa: BLE001 - informational only
        pass

    prod = ProbeProducer(args.bootstrap, args.topic)
    try:
        start = time.monotonic()
        while prod.acks_since(time.monotonic() - 1.0) < 20:
            if time.monotonic() - start > args.timeout:
                sys.exit(f"the probe producer got no acknowledgements within {args.timeout}s "
                         f"(errors: {prod.errors[:3]})")
            time.sleep(0.1)
        time.sleep(args.warmup)
        leader, _, _ = partition0(a, args.topic)
        if leader not in pids:
            sys.exit(f"leader {leader} of partition 0 is not one of the brokers {sorted(pids)}")
        survivors = admin(",".join(v for k, v in ports.items() if k != leader))
        partition0(survivors, args.topic)  # connect before the kill

        killed_at = time.monotonic()
        os.kill(pids[leader], signal.SIGKILL)
        while not pid_gone(pids[leader]):
            time.sleep(0.001)

        new_leader, metadata_at, ack_at = None, None, None
        deadline = killed_at + args.timeout
        while (metadata_at is None or ack_at is None) and time.monotonic() < deadline:
            if ack_at is None:
                ack_at = prod.first_ack_after(killed_at)
            if metadata_at is None:
                try:
                    nl, _, _ = partition0(survivors, args.topic, timeout=1.0)
                    if nl >= 0 and nl != leader:
                        new_leader, metadata_at = nl, time.monotonic()
                except KafkaException:
                    pass
            time.sleep(0.05)
    finally:
        prod.stop.set()
        prod.thread.join(60)

    print(json.dumps({
        "victim": leader,
        "new_leader": new_leader,
        "controller": controller,
        "ack_s": None if ack_at is None else round(ack_at - killed_at, 3),
        "metadata_s": None if metadata_at is None else round(metadata_at - killed_at, 3),
        "delivery_errors": len(prod.errors),
        "first_error": prod.errors[0][1] if prod.errors else None,
        "acked": len(prod.acked_at),
        "produced": len(prod.produced_at),
    }))
    return 0 if ack_at is not None and metadata_at is not None else 1


def cmd_wait_isr(args):
    leader, reps, isr = wait_isr(admin(args.bootstrap), args.topic, args.replicas, args.timeout)
    print(json.dumps({"leader": leader, "replicas": reps, "isr": isr}))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("kill")
    k.add_argument("--bootstrap", required=True)
    k.add_argument("--topic", required=True)
    k.add_argument("--pids", required=True, help="node.id=pid,... of every broker")
    k.add_argument("--addrs", required=True, help="node.id=host:port,... of every broker")
    k.add_argument("--warmup", type=float, default=2.0)
    k.add_argument("--timeout", type=float, default=60.0)
    w = sub.add_parser("wait-isr")
    w.add_argument("--bootstrap", required=True)
    w.add_argument("--topic", required=True)
    w.add_argument("--replicas", type=int, required=True)
    w.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()
    sys.exit(cmd_kill(args) if args.cmd == "kill" else cmd_wait_isr(args))


if __name__ == "__main__":
    main()
