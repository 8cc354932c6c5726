"""Parquet export benchmark (run through benches/export.sh).

Starts one Strata broker, produces BENCH_RECORDS records to a 1-partition topic, then exports
the sealed segments' offset range [0, end) to Parquet two ways and prints both:

  strata export   the `strata export` command (--parallelism 1: one partition, one core of
                  conversion plus its reader task)
  consumer+arrow  what users do today: a confluent-kafka consumer reads the same offsets from
                  the broker and pyarrow writes Parquet (zstd, same columns but producer_id)

Figures: payload MB (keys + values as produced) per wall second and per CPU second of the
exporting process (for the consumer path also with the broker's CPU for serving the fetches
added), peak RSS of the exporting process, output size.
"""

from __future__ import annotations

import json
import os
import random
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def consume_to_parquet(bootstrap: str, topic: str, end: int, out: str) -> None:
    """The consumer path, in its own process so its CPU and RSS are its own."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from confluent_kafka import Consumer, TopicPartition

    schema = pa.schema([
        ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
        ("timestamp", pa.timestamp("ms", tz="UTC")), ("timestamp_type", pa.string()),
        ("key", pa.binary()), ("value", pa.binary()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-export",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760,
                  "queued.max.messages.kbytes": 262144, "log_level": 3})
    c.assign([TopicPartition(topic, 0, 0)])
    w = pq.ParquetWriter(out, schema, compression="zstd")
    cols = {n: [] for n in schema.names}
    done = False
    t0 = time.monotonic()

    def flush():
        if cols["offset"]:
            w.write_table(pa.table(cols, schema=schema))
            for v in cols.values():
                v.clear()

    while not done:
        for m in c.consume(10000, 1.0):
            if m.error():
                continue
            if m.offset() >= end:
                done = True
                break
            tt, ts = m.timestamp()
            cols["topic"].append(m.topic())
            cols["partition"].append(m.partition())
            cols["offset"].append(m.offset())
            cols["timestamp"].append(ts)
            cols["timestamp_type"].append("CreateTime" if tt == 1 else "LogAppendTime")
            cols["key"].append(m.key())
            cols["value"].append(m.value())
            cols["headers"].append([{"key": k, "value": v} for k, v in (m.headers() or [])])
            if m.offset() == end - 1:
                done = True
                break
        if len(cols["offset"]) >= 65536:
            flush()
        if time.monotonic() - t0 > 1800:
            raise SystemExit("consumer path timed out")
    flush()
    w.close()
    c.close()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--consume":
        consume_to_parquet(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
        return
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    strata = os.environ["STRATA_BIN"]
    records = env_int("BENCH_RECORDS", 400_000)
    size = env_int("BENCH_RECORD_SIZE", 512)
    compression = os.environ.get("BENCH_COMPRESSION", "lz4")
    segment = env_int("BENCH_SEGMENT_BYTES", 32 << 20)
    work = Path(os.environ.get("BENCH_DIR") or tempfile.mkdtemp(prefix="strata-export."))
    work.mkdir(parents=True, exist_ok=True)
    port, admin_port = free_port(), free_port()
    data = work / "data"
    conf = work / "server.properties"
    conf.write_text("\n".join([
        f"listeners=PLAINTEXT://127.0.0.1:{port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
        f"log.dirs={data}",
        f"strata.admin.listener=127.0.0.1:{admin_port}",
        f"strata.remote.store.url=file://{work / 'objects'}",
        "log.flush.offset.checkpoint.interval.ms=200",
    ]) + "\n")
    log = open(work / "strata.log", "wb")
    broker = subprocess.Popen([strata, "serve", "--config", str(conf)], stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or broker.poll() is not None:
                    raise SystemExit(f"broker did not start; see {work / 'strata.log'}")
                time.sleep(0.2)
        bootstrap = f"127.0.0.1:{port}"
        topic = "bench-export"
        a = AdminClient({"bootstrap.servers": bootstrap})
        a.create_topics([NewTopic(topic, 1, 1, config={
            "internal.segment.bytes": str(segment)})])[topic].result(30)

        # JSON-like values: compressible about 2-3x, as real event payloads are.
        rnd = random.Random(1)
        words = [("%x" % rnd.getrandbits(40)) for _ in range(5000)]
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": compression,
                      "linger.ms": 20, "batch.size": 262144, "acks": "1", "log_level": 3})
        payload = 0
        t0 = time.monotonic()
        for i in range(records):
            body = " ".join(rnd.choice(words) for _ in range(size // 11))
            value = (json.dumps({"id": i, "user": f"user-{i % 9973}", "text": body})
                     .encode()[:size])
            key = b"user-%d" % (i % 9973)
            payload += len(key) + len(value)
            while True:
                try:
                    p.produce(topic, key=key, value=value, headers=[("src", b"bench")])
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
        assert p.flush(300) == 0
        print(f"produced {records} records ({payload / 1e6:.1f} MB payload, {compression}) "
              f"in {time.monotonic() - t0:.1f}s", file=sys.stderr)
        time.sleep(1.0)  # high-watermark checkpoint

        # Path A: strata export.
        out_a = work / "out-strata"
        t0 = time.monotonic()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.Popen([strata, "export", "--topic", topic, "--out", str(out_a),
                                 "--config", str(conf), "--parallelism", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        stdout, _ = proc.communicate()
        wall_a = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise SystemExit(f"strata export failed:\n{stdout.decode()}")
        cpu_a = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        rss_a = after.ru_maxrss / 1024  # children's peak (the largest child so far)
        cp = json.loads((out_a / f"topic={topic}" / "partition=0" / "_checkpoint.json")
                        .read_text())
        end = cp["next_offset"]
        share = end / records  # payload is uniform per record
        mb = payload * share / 1e6
        out_mb_a = sum(f.stat().st_size for f in out_a.rglob("*.parquet")) / 1e6

        # Path B: consumer + pyarrow, in a child process.
        out_b = work / "out-consumer.parquet"
        broker_cpu0 = proc_cpu_seconds(broker.pid)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, __file__, "--consume", bootstrap, topic, str(end),
                            str(out_b)], check=True, capture_output=True, text=True)
        wall_b = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        broker_cpu_b = proc_cpu_seconds(broker.pid) - broker_cpu0
        cpu_b = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        rss_b = int(r.stdout.split()[-1]) / 1024
        out_mb_b = out_b.stat().st_size / 1e6

        print()
        print(f"Parquet export of offsets 0..{end} ({end} records, {mb:.1f} MB of keys+values, "
              f"producer compression {compression}, {os.cpu_count()} cores)")
        hdr = (f"{'path':<16} {'wall s':>7} {'MB/s':>8} {'cpu s':>7} {'MB/s/core':>10} "
               f"{'peak RSS MB':>12} {'out MB':>7}")
        print(hdr)
        print("-" * len(hdr))
        print(f"{'strata export':<16} {wall_a:>7.2f} {mb / wall_a:>8.1f} {cpu_a:>7.2f} "
              f"{mb / max(cpu_a, 1e-3):>10.1f} {rss_a:>12.0f} {out_mb_a:>7.1f}")
        print(f"{'consumer+arrow':<16} {wall_b:>7.2f} {mb / wall_b:>8.1f} {cpu_b:>7.2f} "
              f"{mb / max(cpu_b, 1e-3):>10.1f} {rss_b:>12.0f} {out_mb_b:>7.1f}")
        print(f"{'  +broker cpu':<16} {'':>7} {'':>8} {cpu_b + broker_cpu_b:>7.2f} "
              f"{mb / max(cpu_b + broker_cpu_b, 1e-3):>10.1f}")
        print(f"speed-up per core: {(mb / max(cpu_a, 1e-3)) / (mb / max(cpu_b + broker_cpu_b, 1e-3)):.1f}x "
              f"(vs consumer incl. broker), {(mb / max(cpu_a, 1e-3)) / (mb / max(cpu_b, 1e-3)):.1f}x "
              f"(vs consumer alone); wall {wall_b / wall_a:.1f}x (target: >= 3x)")
        print("peak RSS: the export process; the consumer's includes Python and pyarrow")
    finally:
        broker.terminate()
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()
        if os.environ.get("BENCH_KEEP_DATA") != "1":
            import shutil
            shutil.rmtree(data, ignore_errors=True)
            shutil.rmtree(work / "out-strata", ignore_errors=True)
            (work / "out-consumer.parquet").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
