#!/usr/bin/env python3
"""Cluster rebuild from the bucket: how long a new 3-node Strata cluster takes to come back
from the bucket of one that lost every disk and its metadata quorum, for a stated amount of
data. Apache Kafka has no equivalent (its tiered storage cannot rebuild a cluster), so there
is no Kafka figure.

Steps, against s3s-fs (an S3 server over a directory that checks SigV4, installed by
scripts/install-test-deps.sh) on a free 127.0.0.1 port:
  1. start three brokers (all voters) with strata.remote.cluster.restore.enable and
     strata.remote.internal.topics.enable, on empty data dirs
  2. create a topic of BENCH_PARTITIONS partitions, RF 3, tiered, segment.bytes
     BENCH_SEGMENT_BYTES; produce BENCH_MB MiB of BENCH_RECORD_SIZE-byte records
     (confluent-kafka, idempotent, acks=all, lz4 off); a consumer group reads half and commits
  3. stop the brokers (SIGTERM: each uploads what it leads first), delete every data dir and
     metadata log
  4. start three new brokers on empty dirs, pointed at the same bucket; the clock runs from
     the first process start until
       - every partition has a leader (Metadata),
       - the group's committed offsets are served, equal to those committed in step 2,
       - a consumer has read the first record of every partition (from the bucket),
       - a consumer has read the last record of every partition
  5. print the table and the objects/bytes in the bucket

Environment: STRATA_BIN (default target/release/strata), STRATA_S3S_FS (default
$STRATA_CACHE/s3s-fs/bin/s3s-fs, STRATA_CACHE default ~/.cache/strata), BENCH_MB (default
256), BENCH_PARTITIONS (default 12), BENCH_RECORD_SIZE (default 1024), BENCH_SEGMENT_BYTES
(default 16777216), BENCH_DIR (default a new temp dir; logs stay there).

  benches/rebuild.py
  BENCH_MB=1024 BENCH_PARTITIONS=24 benches/rebuild.py
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
STRATA = Path(os.environ.get("STRATA_BIN", ROOT / "target" / "release" / "strata"))
CACHE = Path(os.environ.get("STRATA_CACHE", Path.home() / ".cache" / "strata"))
S3S = Path(os.environ.get("STRATA_S3S_FS", CACHE / "s3s-fs" / "bin" / "s3s-fs"))
MB = int(os.environ.get("BENCH_MB", "256"))
PARTS = int(os.environ.get("BENCH_PARTITIONS", "12"))
RECORD = int(os.environ.get("BENCH_RECORD_SIZE", "1024"))
SEGMENT = int(os.environ.get("BENCH_SEGMENT_BYTES", str(16 << 20)))
TOPIC = "rebuild-bench"
GROUP = "rebuild-bench-group"
QUIET = {"log_level": 0}
ACCESS, SECRET, BUCKET = "bench-access-key", "bench-secret-key", "strata-rebuild"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, cond, timeout: float = 300.0, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(every)


class Cluster:
    """Three `strata serve` processes, all voters, on empty dirs under `work`."""

    def __init__(self, work: Path, store: dict):
        self.work = work
        self.procs = []
        self.kafka = [free_port() for _ in range(3)]
        rpc = [free_port() for _ in range(3)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(rpc))
        self.admin_ports = [free_port() for _ in range(3)]
        self.configs = []
        for i in range(3):
            d = work / f"node{i + 1}"
            (d / "data").mkdir(parents=True)
            props = {
                "node.id": i + 1,
                "listeners": f"PLAINTEXT://127.0.0.1:{self.kafka[i]},CONTROLLER://127.0.0.1:{rpc[i]}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.kafka[i]}",
                "controller.listener.names": "CONTROLLER",
                "controller.quorum.voters": voters,
                "log.dirs": d / "data",
                "strata.admin.listener": f"127.0.0.1:{self.admin_ports[i]}",
                "auto.create.topics.enable": "false",
                "default.replication.factor": 3,
                "min.insync.replicas": 2,
                "remote.log.manager.task.interval.ms": 1000,
                "strata.remote.internal.topics.enable": "true",
                "strata.remote.cluster.restore.enable": "true",
                **store,
            }
            cfg = d / "server.properties"
            cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            self.configs.append(cfg)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.kafka)

    def start(self) -> float:
        t0 = time.monotonic()
        for i, cfg in enumerate(self.configs):
            log = open(cfg.parent / "strata.log", "ab")
            self.procs.append(subprocess.Popen(
                [str(STRATA), "serve", "--config", str(cfg)], stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
        for port in self.admin_ports:
            wait_for("a broker's /health", lambda p=port: health(p), timeout=120)
        return t0

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=90)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs = []

    def rss_mib(self) -> float:
        total = 0
        for p in self.procs:
            for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        return total / 1024


def health(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def create_topic(servers: str):
    a = AdminClient({"bootstrap.servers": servers, **QUIET})
    config = {"remote.storage.enable": "true", "local.retention.bytes": "1",
              "segment.bytes": str(SEGMENT), "retention.ms": "-1"}
    deadline = time.monotonic() + 60
    while True:
        f = a.create_topics([NewTopic(TOPIC, PARTS, 3, config=config)], request_timeout=15)
        try:
            f[TOPIC].result(timeout=30)
            return
        except Exception as e:  # noqa: BLE001 - retried while the restore is being decided
            if "restoring its topics" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def produce(servers: str) -> int:
    n = (MB << 20) // RECORD
    p = Producer({"bootstrap.servers": servers, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 20, "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20,
                  **QUIET})
    failed = []
    value = os.urandom(RECORD)
    for i in range(n):
        while True:
            try:
                p.produce(TOPIC, value, key=b"%d" % i, partition=i % PARTS,
                          on_delivery=lambda e, m: e and failed.append(e))
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(120) == 0 and not failed, failed[:3]
    return n


def consumer(servers: str, group: str | None = None) -> Consumer:
    conf = {"bootstrap.servers": servers, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "group.id": group or "rebuild-bench-reader", **QUIET}
    return Consumer(conf)


def commit_half(servers: str) -> dict:
    c = consumer(servers, GROUP)
    tps = [TopicPartition(TOPIC, p) for p in range(PARTS)]
    hw = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(PARTS)}
    offsets = [TopicPartition(TOPIC, p, hw[p] // 2) for p in range(PARTS)]
    c.commit(offsets=offsets, asynchronous=False)
    got = {tp.partition: tp.offset for tp in c.committed(tps, timeout=30)}
    c.close()
    return got


def committed(servers: str) -> dict | None:
    c = consumer(servers, GROUP)
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTS)]
        return {tp.partition: tp.offset for tp in c.committed(tps, timeout=5)}
    except Exception:  # noqa: BLE001 - coordinator not ready yet
        return None
    finally:
        c.close()


def leaders(servers: str) -> bool:
    a = AdminClient({"bootstrap.servers": servers, **QUIET})
    try:
        t = a.list_topics(TOPIC, timeout=5).topics.get(TOPIC)
    except Exception:  # noqa: BLE001 - brokers still starting
        return False
    return bool(t and not t.error and len(t.partitions) == PARTS
                and all(p.leader >= 0 for p in t.partitions.values()))


def read_at(servers: str, offsets: dict) -> bool:
    """Reads one record at offsets[p] of every partition."""
    c = consumer(servers)
    c.assign([TopicPartition(TOPIC, p, o) for p, o in offsets.items()])
    want = set(offsets)
    deadline = time.monotonic() + 300
    while want and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is None or m.error():
            continue
        if m.offset() == offsets[m.partition()]:
            want.discard(m.partition())
    c.close()
    return not want


def bucket_size(root: Path) -> tuple[int, int]:
    files = [f for f in (root / BUCKET).rglob("*") if f.is_file()]
    return len(files), sum(f.stat().st_size for f in files)


def main():
    for b in (STRATA, S3S):
        if not b.exists():
            sys.exit(f"{b} not found (cargo build --release; scripts/install-test-deps.sh)")
    work = Path(os.environ.get("BENCH_DIR") or tempfile.mkdtemp(prefix="strata-rebuild."))
    root = work / "s3"
    (root / BUCKET).mkdir(parents=True)
    port = free_port()
    s3log = open(work / "s3s-fs.log", "ab")
    s3 = subprocess.Popen([str(S3S), "--host", "127.0.0.1", "--port", str(port),
                           "--access-key", ACCESS, "--secret-key", SECRET, str(root)],
                          stdout=s3log, stderr=subprocess.STDOUT, start_new_session=True)
    store = {"strata.remote.store.url": f"s3://{BUCKET}/rebuild",
             "strata.remote.store.endpoint": f"http://127.0.0.1:{port}",
             "strata.remote.store.region": "us-east-1",
             "strata.remote.store.access.key.id": ACCESS,
             "strata.remote.store.secret.access.key": SECRET,
             "strata.remote.store.path.style": "true"}
    first = second = None
    try:
        first = Cluster(work / "first", store)
        first.start()
        wait_for("three brokers in Metadata", lambda: leaders_or_brokers(first.bootstrap))
        create_topic(first.bootstrap)
        t = time.monotonic()
        n = produce(first.bootstrap)
        produce_s = time.monotonic() - t
        c = consumer(first.bootstrap)
        ends = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
                for p in range(PARTS)}
        c.close()
        want = commit_half(first.bootstrap)
        t = time.monotonic()
        first.stop()
        stop_s = time.monotonic() - t
        objects, stored = bucket_size(root)
        shutil.rmtree(work / "first")

        second = Cluster(work / "second", store)
        t0 = second.start()
        started = time.monotonic() - t0
        wait_for("a leader for every partition", lambda: leaders(second.bootstrap))
        led = time.monotonic() - t0
        wait_for("the committed offsets", lambda: committed(second.bootstrap) == want,
                 every=0.2)
        offsets_back = time.monotonic() - t0
        assert read_at(second.bootstrap, {p: 0 for p in range(PARTS)})
        first_read = time.monotonic() - t0
        assert read_at(second.bootstrap, {p: ends[p] - 1 for p in range(PARTS)})
        last_read = time.monotonic() - t0
        rss = second.rss_mib()
        print(f"\nCluster rebuild from the bucket (s3s-fs), {n} records of {RECORD} B "
              f"({MB} MiB) in {PARTS} partitions, RF 3, segment.bytes {SEGMENT}")
        print(f"  produce (acks=all, idempotent, Python client)  {produce_s:8.1f} s")
        print(f"  clean stop of the 3 brokers (final uploads)    {stop_s:8.1f} s")
        print(f"  bucket                                         {objects} objects, "
              f"{stored / (1 << 20):.1f} MiB")
        print("  new cluster, from the first process start:")
        print(f"    three brokers healthy                        {started:8.2f} s")
        print(f"    every partition led (topic restored)         {led:8.2f} s")
        print(f"    committed offsets served, as committed       {offsets_back:8.2f} s")
        print(f"    first record of every partition read         {first_read:8.2f} s")
        print(f"    last record of every partition read          {last_read:8.2f} s")
        print(f"  RSS of the three new brokers                   {rss:8.0f} MiB")
        print("  Apache Kafka: no equivalent (a lost cluster cannot be rebuilt from its "
              "tiered storage)")
    finally:
        for c in (first, second):
            if c:
                c.stop()
        s3.terminate()
        s3.wait(timeout=30)
        print(f"work dir: {work}")


def leaders_or_brokers(servers: str) -> bool:
    a = AdminClient({"bootstrap.servers": servers, **QUIET})
    try:
        return len(a.list_topics(timeout=5).brokers) == 3
    except Exception:  # noqa: BLE001 - still starting
        return False


if __name__ == "__main__":
    main()
