#!/usr/bin/env python3
"""Helper of benches/compaction.sh: the same client (confluent-kafka / librdkafka) drives both
brokers, and everything it measures is read the same way on both (the cleaner checkpoint and
the segment files on disk), so the figures compare like with like.

  compaction_tool.py create  --bootstrap B --topic T --partitions P --config k=v ...
  compaction_tool.py produce --bootstrap B --topic T --records N --keys K --value-size S --seed X
      keyed producer: record i gets key "key-<r>" with r uniform in [0, K) (seeded), a value of
      S bytes (random, incompressible) and no headers; acks=1, linger.ms=5, compression none.
      Prints one JSON object: records, bytes (key+value), seconds, rps, mbps, errors.
  compaction_tool.py clean   --bootstrap B --topic T --partitions P --data-dir D
                             [--timeout S] [--metrics URL]
      notes the sealed segments of T under D (the dirty section: every segment but the active
      one), sets cleanup.policy=compact with IncrementalAlterConfigs and waits until D's
      cleaner-offset-checkpoint has reached the active segment's base offset of every
      partition (no more cleanable bytes). Prints one JSON object: dirty_bytes, seconds (from
      the alter's reply to the checkpoint), mbps (MiB/s), bytes_after.
  compaction_tool.py alter   --bootstrap B --topic T --config k=v ...
  compaction_tool.py checkpoint --data-dir D --topic T --partitions P
      prints JSON: per partition the checkpoint offset and the active segment's base offset
  compaction_tool.py report --results results.jsonl
      prints the bench's table (one JSON object per target in the file)
  compaction_tool.py kafka-stats --log server.log [--topic T]
      sums the "Log cleaner thread N cleaned log ..." reports of Kafka's LogCleaner: passes,
      MiB processed, seconds, and the share spent indexing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from pathlib import Path


def kv_pairs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k:
            sys.exit(f"expected key=value, got {item!r}")
        out[k] = v
    return out


def admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def cmd_create(a) -> None:
    from confluent_kafka.admin import NewTopic

    ad = admin(a.bootstrap)  # kept alive until its futures resolve
    fut = ad.create_topics(
        [NewTopic(a.topic, num_partitions=a.partitions, replication_factor=1,
                  config=kv_pairs(a.config))], operation_timeout=30)
    fut[a.topic].result(timeout=60)
    # Wait until the topic is in the metadata (the leader is known).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = ad.list_topics(topic=a.topic, timeout=5)
        t = md.topics.get(a.topic)
        if t and t.error is None and len(t.partitions) == a.partitions \
                and all(p.leader >= 0 for p in t.partitions.values()):
            print(json.dumps({"created": a.topic}))
            return
        time.sleep(0.2)
    sys.exit(f"topic {a.topic} not in the metadata after 30s")


def alter(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource,
                                       ResourceType)

    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    ad = admin(bootstrap)  # kept alive until its futures resolve
    for f in ad.incremental_alter_configs([res]).values():
        f.result(timeout=60)


def cmd_alter(a) -> None:
    alter(a.bootstrap, a.topic, kv_pairs(a.config))
    print(json.dumps({"altered": a.topic}))


def cmd_produce(a) -> None:
    from confluent_kafka import Producer

    p = Producer({
        "bootstrap.servers": a.bootstrap,
        "acks": "1",
        "linger.ms": 5,
        "compression.type": "none",
        "batch.size": 1_000_000,
        "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 500_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "enable.idempotence": False,
    })
    rng = random.Random(a.seed)
    keys = [b"key-%07d" % k for k in range(a.keys)]
    # A pool of random values (incompressible), picked per record; 4096 distinct values.
    pool_raw = os.urandom(a.value_size * 4096 + 4096)
    values = [pool_raw[i * a.value_size:(i + 1) * a.value_size] for i in range(4096)]
    errors = 0
    delivered = 0

    def on_delivery(err, _msg):
        nonlocal errors, delivered
        if err is not None:
            errors += 1
        else:
            delivered += 1

    # Warm up the connection (metadata) before the clock starts.
    p.list_topics(topic=a.topic, timeout=10)
    nbytes = 0
    randrange = rng.randrange
    produce = p.produce
    topic = a.topic
    start = time.monotonic()
    for i in range(a.records):
        k = keys[randrange(a.keys)]
        v = values[i & 4095]
        nbytes += len(k) + len(v)
        while True:
            try:
                produce(topic, value=v, key=k, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
        if i & 1023 == 0:
            p.poll(0)
    left = p.flush(120)
    secs = time.monotonic() - start
    print(json.dumps({
        "records": a.records, "delivered": delivered, "errors": errors + left,
        "bytes": nbytes, "seconds": round(secs, 3),
        "rps": round(a.records / secs, 1), "mbps": round(nbytes / secs / 2**20, 2),
    }))
    if errors or left or delivered != a.records:
        sys.exit(1)


def read_checkpoint(data_dir: Path) -> dict[tuple[str, int], int]:
    """Kafka's cleaner-offset-checkpoint: version line, count line, 'topic partition offset'."""
    try:
        lines = (data_dir / "cleaner-offset-checkpoint").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3:
            try:
                out[(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                pass
    return out


def segments(data_dir: Path, topic: str, partition: int) -> list[tuple[int, int]]:
    """(base offset, size) of the live .log files of a partition, by base offset."""
    d = data_dir / f"{topic}-{partition}"
    out = []
    for f in d.glob("*.log"):
        try:
            out.append((int(f.stem), f.stat().st_size))
        except (ValueError, OSError):
            pass  # .cleaned/.swap/.deleted files have other suffixes; vanished ones are skipped
    return sorted(out)


def progress(data_dir: Path, topic: str, partitions: int) -> list[dict]:
    cp = read_checkpoint(data_dir)
    out = []
    for p in range(partitions):
        segs = segments(data_dir, topic, p)
        out.append({"partition": p, "checkpoint": cp.get((topic, p)),
                    "active_base": segs[-1][0] if segs else None,
                    "segments": len(segs), "bytes": sum(s for _, s in segs)})
    return out


def cleaned(prog: list[dict]) -> bool:
    return all(p["checkpoint"] is not None and p["active_base"] is not None
               and p["checkpoint"] >= p["active_base"] for p in prog)


def cmd_checkpoint(a) -> None:
    print(json.dumps(progress(Path(a.data_dir), a.topic, a.partitions)))


def cmd_clean(a) -> None:
    data_dir = Path(a.data_dir)
    before = progress(data_dir, a.topic, a.partitions)
    dirty = 0
    for p in range(a.partitions):
        segs = segments(data_dir, a.topic, p)
        dirty += sum(s for _, s in segs[:-1])
    alter(a.bootstrap, a.topic, {"cleanup.policy": "compact"})
    start = time.monotonic()
    deadline = start + a.timeout
    prog = before
    while time.monotonic() < deadline:
        prog = progress(data_dir, a.topic, a.partitions)
        if cleaned(prog):
            break
        time.sleep(0.05)
    secs = time.monotonic() - start
    ok = cleaned(prog)
    print(json.dumps({
        "ok": ok, "dirty_bytes": dirty, "seconds": round(secs, 3),
        "mbps": round(dirty / secs / 2**20, 2) if ok else None,
        "bytes_before": sum(p["bytes"] for p in before),
        "bytes_after": sum(p["bytes"] for p in prog),
        "segments_before": sum(p["segments"] for p in before),
        "segments_after": sum(p["segments"] for p in prog),
        "progress": prog,
    }))
    if not ok:
        sys.exit(1)


# Kafka 4.x LogCleaner report (numbers use thousands separators):
#   Log cleaner thread 0 cleaned log bench-a-0 (dirty section = [0, 1999873])
#   238.6 MB of log processed in 6.2 seconds (38.3 MB/sec).
#   Indexed 238.6 MB in 3.0 seconds (79.2 Mb/sec, 48.4% of total time)
REPORT = re.compile(r"Log cleaner thread \d+ cleaned log (\S+) \(dirty section = \[(\d+), (\d+)\]\)\s*"
                    r"([\d,.]+) MB of log processed in ([\d,.]+) seconds")
INDEXED = re.compile(r"Indexed ([\d,.]+) MB in ([\d,.]+) seconds")


def num(s: str) -> float:
    return float(s.replace(",", ""))


def cmd_kafka_stats(a) -> None:
    text = Path(a.log).read_text(errors="replace")
    passes, mib, secs, idx_secs = 0, 0.0, 0.0, 0.0
    for m in REPORT.finditer(text):
        log = m.group(1)
        if a.topic and not re.fullmatch(re.escape(a.topic) + r"-\d+", log):
            continue
        passes += 1
        mib += num(m.group(4))
        secs += num(m.group(5))
        im = INDEXED.search(text, m.end(), m.end() + 400)
        if im:
            idx_secs += num(im.group(2))
    print(json.dumps({"passes": passes, "mib_processed": round(mib, 1), "seconds": round(secs, 2),
                      "index_seconds": round(idx_secs, 2),
                      "mbps": round(mib / secs, 1) if secs else None}))


def cmd_report(a) -> None:
    """The table of benches/compaction.sh from its results.jsonl (one object per target)."""
    rows = {}
    for line in Path(a.results).read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            rows[r["target"]] = r

    def g(r, *path):
        for k in path:
            if not isinstance(r, dict) or r.get(k) is None:
                return None
            r = r[k]
        return r

    def f(v, fmt="{:.1f}"):
        return "-" if v is None else fmt.format(v)

    targets = [t for t in ("strata", "kafka") if t in rows]
    print(f"{'':44}" + "".join(f"{t:>14}" for t in targets))
    lines = [
        ("dirty bytes cleaned (MiB, sealed segments)", lambda r: f(g(r, "clean", "dirty_bytes") and g(r, "clean", "dirty_bytes") / 2**20)),
        ("segments before -> after", lambda r: "-" if g(r, "clean") is None else f"{g(r, 'clean', 'segments_before')} -> {g(r, 'clean', 'segments_after')}"),
        ("MiB on disk after cleaning", lambda r: f(g(r, "clean", "bytes_after") and g(r, "clean", "bytes_after") / 2**20)),
        ("time to clean, s (alter -> checkpoint)", lambda r: f(g(r, "clean", "seconds"), "{:.2f}")),
        ("cleaning MiB/s (wall)", lambda r: f(g(r, "clean", "mbps"))),
        ("cleaner's own MiB/s (pass stats)", lambda r: f(g(r, "clean_internal_mbps"))),
        ("broker CPU s during cleaning", lambda r: f(g(r, "clean_cpu_s"), "{:.2f}")),
        ("produce rec/s, no cleaning (topic a)", lambda r: f(g(r, "prod_a", "rps"), "{:,.0f}")),
        ("produce rec/s, no cleaning (topic b)", lambda r: f(g(r, "prod_b", "rps"), "{:,.0f}")),
        ("produce rec/s, compacted, idle cleaner (c)", lambda r: f(g(r, "prod_c", "rps"), "{:,.0f}")),
        ("produce rec/s while cleaning (topic b)", lambda r: f(g(r, "prod_while", "rps"), "{:,.0f}")),
        ("  MiB cleaned during that produce", lambda r: f(g(r, "while_cleaned_mib"))),
        ("  cleaner passes during that produce", lambda r: f(g(r, "while_passes"), "{:.0f}")),
        ("while cleaning / without (mean of a, b)", lambda r: f(g(r, "while_ratio") and 100 * g(r, "while_ratio"), "{:.1f}%")),
        ("while cleaning / compacted idle (c)", lambda r: f(g(r, "while_ratio_c") and 100 * g(r, "while_ratio_c"), "{:.1f}%")),
        ("status", lambda r: r.get("status", "?")),
    ]
    for label, fn in lines:
        print(f"{label:44}" + "".join(f"{fn(rows[t]):>14}" for t in targets))
    print()
    s, k = rows.get("strata"), rows.get("kafka")
    sm, km = g(s, "clean", "mbps"), g(k, "clean", "mbps")
    if sm and km:
        ratio = sm / km
        print(f"target: cleaning MiB/s >= 2x Kafka's: Strata {sm:.1f} / Kafka {km:.1f} = {ratio:.2f}x"
              f" -> {'MET' if ratio >= 2 else 'NOT MET'}")
    else:
        print("target: cleaning MiB/s >= 2x Kafka's: not measured (a side failed)")
    for t in targets:
        for key, what in (("while_ratio", "delete-policy topics a/b"),
                          ("while_ratio_c", "compacted topic c, cleaner idle")):
            w = g(rows[t], key)
            if w is not None:
                print(f"target: {t} produce while cleaning within 10% of without ({what}):"
                      f" {100 * w:.1f}% -> {'MET' if w >= 0.9 else 'NOT MET'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("create")
    s.add_argument("--bootstrap", required=True)
    s.add_argument("--topic", required=True)
    s.add_argument("--partitions", type=int, default=1)
    s.add_argument("--config", action="append", default=[])
    s.set_defaults(fn=cmd_create)
    s = sub.add_parser("alter")
    s.add_argument("--bootstrap", required=True)
    s.add_argument("--topic", required=True)
    s.add_argument("--config", action="append", default=[])
    s.set_defaults(fn=cmd_alter)
    s = sub.add_parser("produce")
    s.add_argument("--bootstrap", required=True)
    s.add_argument("--topic", required=True)
    s.add_argument("--records", type=int, required=True)
    s.add_argument("--keys", type=int, required=True)
    s.add_argument("--value-size", type=int, default=100)
    s.add_argument("--seed", type=int, default=1)
    s.set_defaults(fn=cmd_produce)
    s = sub.add_parser("clean")
    s.add_argument("--bootstrap", required=True)
    s.add_argument("--topic", required=True)
    s.add_argument("--partitions", type=int, default=1)
    s.add_argument("--data-dir", required=True)
    s.add_argument("--timeout", type=float, default=1800)
    s.set_defaults(fn=cmd_clean)
    s = sub.add_parser("checkpoint")
    s.add_argument("--data-dir", required=True)
    s.add_argument("--topic", required=True)
    s.add_argument("--partitions", type=int, default=1)
    s.set_defaults(fn=cmd_checkpoint)
    s = sub.add_parser("kafka-stats")
    s.add_argument("--log", required=True)
    s.add_argument("--topic")
    s.set_defaults(fn=cmd_kafka_stats)
    s = sub.add_parser("report")
    s.add_argument("--results", required=True)
    s.set_defaults(fn=cmd_report)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
