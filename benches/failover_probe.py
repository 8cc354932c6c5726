#!/usr/bin/env python3
"""Leadership recovery after kill -9, for benches/cluster.sh (confluent-kafka; the same client
and settings against Strata and Kafka).

  failover_probe.py kill --bootstrap B --topic T --pids 1=PID,... --addrs 1=HOST:PORT,...
                         --quorum-leader N --victim partition-leader|quorum-leader
                         [--warmup S] [--timeout S]
      Waits until every partition of T has a leader and a full ISR and picks a partition: one
      led by a broker other than N, the metadata quorum leader (partition-leader), or one led
      by N (quorum-leader: the kill also costs a quorum election). Runs an idempotent acks=all
      producer on that partition (one record every ~5 ms) until acknowledgements flow, then
      sends SIGKILL to the partition leader's process and measures, from the kill:
        ack_s       until the first record produced after the kill is acknowledged
        metadata_s  until Metadata (asked of the surviving brokers, every 50 ms) names a
                    leader other than the killed broker
      Prints one JSON line: partition, victim, quorum_leader, new_leader, ack_s, metadata_s,
      delivery_errors, acked. Exits 3 if no partition fits the rule.
  failover_probe.py wait-isr --bootstrap B --topic T --replicas N [--timeout S]
      Waits until every partition of T has a leader and N in-sync replicas (after a restart).
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


def partitions(a, topic, timeout=2.0):
    """{partition: (leader, replicas, isr)} of topic as one broker reports it."""
    md = a.list_topics(topic, timeout=timeout)
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        raise KafkaException(f"no metadata for {topic}: {t.error if t else 'missing'}")
    return {i: (p.leader, sorted(p.replicas), sorted(p.isrs)) for i, p in t.partitions.items()}


def wait_isr(a, topic, replicas, timeout):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = partitions(a, topic)
            if all(leader >= 0 and len(reps) == replicas and len(isr) == replicas
                   for leader, reps, isr in last.values()):
                return last
        except KafkaException as e:
            last = str(e)
        time.sleep(0.2)
    sys.exit(f"not every partition of {topic} has a leader and {replicas} in-sync replicas "
             f"after {timeout}s (last: {last})")


class ProbeProducer:
    """Produces to partition 0 on its own thread; remembers when each record was produced
    and when it was acknowledged."""

    def __init__(self, bootstrap, topic, partition):
        self.p = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
        self.topic = topic
        self.partition = partition
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
                self.p.produce(self.topic, value=b"%d" % n, partition=self.partition,
                               on_delivery=self._cb)
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
    addrs = {int(k): v for k, v in (kv.split("=") for kv in args.addrs.split(","))}
    a = admin(args.bootstrap)
    parts = wait_isr(a, args.topic, len(pids), args.timeout)
    if args.victim == "quorum-leader":
        fits = [p for p, (leader, _, _) in sorted(parts.items()) if leader == args.quorum_leader]
    else:
        fits = [p for p, (leader, _, _) in sorted(parts.items()) if leader != args.quorum_leader]
    if not fits:
        print(json.dumps({"skipped": f"no partition led by {args.victim} "
                          f"(quorum leader {args.quorum_leader}, leaders "
                          f"{ {p: v[0] for p, v in parts.items()} })"}))
        return 3
    partition = fits[0]

    prod = ProbeProducer(args.bootstrap, args.topic, partition)
    try:
        start = time.monotonic()
        while prod.acks_since(time.monotonic() - 1.0) < 20:
            if time.monotonic() - start > args.timeout:
                sys.exit(f"the probe producer got no acknowledgements within {args.timeout}s "
                         f"(errors: {prod.errors[:3]})")
            time.sleep(0.1)
        time.sleep(args.warmup)
        leader = partitions(a, args.topic)[partition][0]
        if leader not in pids:
            sys.exit(f"leader {leader} of partition {partition} is not one of {sorted(pids)}")
        survivors = admin(",".join(v for k, v in addrs.items() if k != leader))
        partitions(survivors, args.topic)  # connect before the kill

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
                    nl = partitions(survivors, args.topic, timeout=1.0)[partition][0]
                    if nl >= 0 and nl != leader:
                        new_leader, metadata_at = nl, time.monotonic()
                except KafkaException:
                    pass
            time.sleep(0.05)
    finally:
        prod.stop.set()
        prod.thread.join(60)

    print(json.dumps({
        "partition": partition,
        "victim": leader,
        "quorum_leader": args.quorum_leader,
        "new_leader": new_leader,
        "ack_s": None if ack_at is None else round(ack_at - killed_at, 3),
        "metadata_s": None if metadata_at is None else round(metadata_at - killed_at, 3),
        "delivery_errors": len(prod.errors),
        "first_error": prod.errors[0][1] if prod.errors else None,
        "acked": len(prod.acked_at),
        "produced": len(prod.produced_at),
    }))
    return 0 if ack_at is not None and metadata_at is not None else 1


def cmd_wait_isr(args):
    parts = wait_isr(admin(args.bootstrap), args.topic, args.replicas, args.timeout)
    print(json.dumps({p: {"leader": v[0], "isr": v[2]} for p, v in sorted(parts.items())}))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("kill")
    k.add_argument("--bootstrap", required=True)
    k.add_argument("--topic", required=True)
    k.add_argument("--pids", required=True, help="node.id=pid,... of every broker")
    k.add_argument("--addrs", required=True, help="node.id=host:port,... of every broker")
    k.add_argument("--quorum-leader", type=int, required=True,
                   help="node.id of the metadata quorum leader (active controller)")
    k.add_argument("--victim", choices=["partition-leader", "quorum-leader"], required=True)
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
