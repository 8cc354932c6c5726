#!/usr/bin/env python3
"""Helpers for benches/tiering.sh. Run with the test venv's Python ($STRATA_VENV/bin/python):
`bucket` and `delete-prefix` need boto3, `create-topic` / `alter-topic` need
confluent-kafka; the rest is standard library only.

  tiering_report.py bucket ENDPOINT BUCKET
      create BUCKET on an S3-compatible server (any credentials; moto does not check them)
  tiering_report.py delete-prefix ENDPOINT REGION BUCKET PREFIX
      delete every object under PREFIX (ENDPOINT empty: AWS S3; credentials from the
      environment); prints how many
  tiering_report.py create-topic BOOTSTRAP TOPIC PARTITIONS [k=v ...]
  tiering_report.py alter-topic BOOTSTRAP TOPIC k=v [k=v ...]
      IncrementalAlterConfigs SET on a topic
  tiering_report.py snapshot URL FILE
      save the broker's /metrics text to FILE
  tiering_report.py segments DATA_DIR TOPIC PARTITIONS
      -> "sealed_segments sealed_bytes active_bytes" from the partition directories
  tiering_report.py wait-upload URL TOPIC SEGMENTS ACTIVE_BYTES TIMEOUT_S BEFORE
      poll /metrics every 50 ms until SEGMENTS more segments are uploaded than at the start
      and the topic's strata_remote_upload_lag_bytes is at most ACTIVE_BYTES (only the
      active segment is left); prints the seconds it took
  tiering_report.py table RESULTS_DIR
      prints the figures from the snapshots and key=value files that tiering.sh wrote
"""
import json
import os
import re
import statistics
import sys
import time
import urllib.request

METRIC_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')
LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
MIB = 1 << 20
GIB = 1 << 30


def parse_metrics(text):
    """{(name, frozenset(labels)): value}"""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC_RE.match(line.strip())
        if not m:
            continue
        labels = frozenset(LABEL_RE.findall(m.group(2) or ""))
        try:
            out[(m.group(1), labels)] = float(m.group(3))
        except ValueError:
            pass
    return out


def fetch_metrics(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode("utf-8", "replace")


def value(metrics, name, **labels):
    """Sum of a metric over every series whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in metrics.items() if n == name and want <= set(ls))


def requests_by_op(metrics, topic):
    ops = {}
    for (n, ls), v in metrics.items():
        d = dict(ls)
        if n == "strata_remote_requests_total" and d.get("topic") == topic:
            ops[d.get("op", "?")] = ops.get(d.get("op", "?"), 0) + v
    return ops


# ------------------------------------------------------------------ commands

def cmd_bucket(endpoint, bucket):
    import boto3
    from botocore.config import Config
    client = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id="strata-bench", aws_secret_access_key="strata-bench",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}))
    client.create_bucket(Bucket=bucket)


def cmd_delete_prefix(endpoint, region, bucket, prefix):
    import boto3
    from botocore.config import Config
    style = "path" if endpoint else "auto"
    client = boto3.client("s3", endpoint_url=endpoint or None, region_name=region,
                          config=Config(s3={"addressing_style": style}, retries={"max_attempts": 3}))
    deleted = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        for i in range(0, len(keys), 1000):
            r = client.delete_objects(Bucket=bucket, Delete={"Objects": keys[i:i + 1000], "Quiet": True})
            if r.get("Errors"):
                sys.exit(f"delete-prefix: {len(r['Errors'])} objects not deleted, first: {r['Errors'][0]}")
            deleted += len(keys[i:i + 1000])
    print(f"deleted {deleted} objects under s3://{bucket}/{prefix}")


def kv(pairs):
    out = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep:
            sys.exit(f"expected k=v, got {p!r}")
        out[k] = v
    return out


def cmd_create_topic(bootstrap, topic, partitions, *configs):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(topic, int(partitions), 1, config=kv(configs))],
                             request_timeout=30)
    fs[topic].result(timeout=30)


def cmd_alter_topic(bootstrap, topic, *configs):
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in kv(configs).items()]
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout=30)


def cmd_snapshot(url, path):
    text = fetch_metrics(url)
    with open(path, "w") as f:
        f.write(text)


def segments(data_dir, topic, partitions):
    sealed = sealed_bytes = active = 0
    for p in range(int(partitions)):
        d = os.path.join(data_dir, f"{topic}-{p}")
        logs = sorted(n for n in os.listdir(d) if re.fullmatch(r"\d{20}\.log", n))
        sizes = [os.path.getsize(os.path.join(d, n)) for n in logs]
        if not sizes:
            continue
        sealed += sum(1 for s in sizes[:-1] if s > 0)
        sealed_bytes += sum(sizes[:-1])
        active += sizes[-1]
    return sealed, sealed_bytes, active


def cmd_segments(data_dir, topic, partitions):
    print(*segments(data_dir, topic, partitions))


def cmd_wait_upload(url, topic, want_segments, active_bytes, timeout_s, before):
    """Seconds until want_segments more segments than in the snapshot `before` (taken before
    the uploads were enabled: a fast store uploads the first one before this starts) are
    uploaded and only the active segment lags."""
    want_segments, active_bytes, timeout_s = int(want_segments), int(active_bytes), float(timeout_s)
    start = time.monotonic()
    with open(before) as f:
        base = value(parse_metrics(f.read()), "strata_remote_segments_uploaded_total")
    while True:
        m = parse_metrics(fetch_metrics(url))
        done = value(m, "strata_remote_segments_uploaded_total") - base
        lag = value(m, "strata_remote_upload_lag_bytes", topic=topic)
        if done >= want_segments and lag <= active_bytes:
            print(f"{time.monotonic() - start:.3f}")
            return
        if time.monotonic() - start > timeout_s:
            sys.exit(f"timeout after {timeout_s:.0f}s: {done:.0f}/{want_segments} segments "
                     f"uploaded, upload lag {lag:.0f} bytes (active segment {active_bytes})")
        time.sleep(0.05)


def cmd_wait_rehydrated(data_dir, topic, partitions, want_bytes, timeout_s):
    """Seconds until the topic's local segments hold want_bytes again (rehydration)."""
    want_bytes, timeout_s = int(want_bytes), float(timeout_s)
    start = time.monotonic()
    while True:
        have = sum(os.path.getsize(os.path.join(data_dir, f"{topic}-{p}", n))
                   for p in range(int(partitions))
                   for n in os.listdir(os.path.join(data_dir, f"{topic}-{p}"))
                   if n.endswith(".log"))
        if have >= want_bytes:
            print(f"{time.monotonic() - start:.3f}")
            return
        if time.monotonic() - start > timeout_s:
            sys.exit(f"timeout after {timeout_s:.0f}s: {have} of {want_bytes} bytes local")
        time.sleep(0.05)


def read_kv(path):
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                k, sep, v = line.rstrip("\n").partition("=")
                if sep:
                    out[k] = v
    return out


def cpu_rows(r, rows):
    """Cores used during each read (cpu_<phase>_start/end: machine busy, broker and store
    ticks, time of day, and PSI's microseconds with some task waiting for a core)."""
    hz = os.sysconf("SC_CLK_TCK")
    for phase, label in (("local", "local"), ("cold", "remote, cold"), ("warm", "remote, warm")):
        start, end = r.get(f"cpu_{phase}_start"), r.get(f"cpu_{phase}_end")
        if not start or not end:
            continue
        a, b = start.split(","), end.split(",")
        seconds = float(b[3]) - float(a[3])
        if seconds <= 0:
            continue
        busy, broker, store = (int(y) - int(x) for x, y in zip(a[:3], b[:3]))
        cores = lambda ticks: ticks / hz / seconds
        rest = cores(busy) - cores(broker) - cores(store)
        rows.append((f"cores used, {label} read: all / broker / store / rest",
                     f"{cores(busy):.2f} / {cores(broker):.2f} / {cores(store):.2f} / {rest:.2f}",
                     "", ""))
        if len(a) > 4 and len(b) > 4 and a[4] and b[4]:
            waited = (int(b[4]) - int(a[4])) / 1e6
            rows.append((f"some task waiting for a core, {label} read",
                         f"{100 * waited / seconds:.0f}% of the read ({waited:.2f} s)", "", ""))


def fnum(v):
    """A number, also a size such as 256MiB or 1GB; None if it is not one."""
    if v is None:
        return None
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]i?B)?\s*", str(v))
    if not m:
        return None
    mult = {None: 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
            "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[m.group(2)]
    try:
        return float(m.group(1)) * mult
    except ValueError:
        return None


def consumer_result(path):
    """{MB.sec, fetch.MB.sec, data.consumed.in.MB, ...} from ConsumerPerformance output."""
    header = None
    if not os.path.exists(path):
        return {}
    with open(path, errors="replace") as f:
        for line in f:
            cols = [c.strip() for c in line.split(",")]
            if "MB.sec" in cols:
                header = cols
                continue
            if header and len(cols) >= len(header) - 1:
                return dict(zip(header, cols))
    return {}


def cmd_table(results_dir):
    r = read_kv(os.path.join(results_dir, "results.env"))

    def snap(name):
        p = os.path.join(results_dir, f"metrics-{name}.prom")
        return parse_metrics(open(p).read()) if os.path.exists(p) else {}

    topic = r.get("tiered_topic", "")
    rows = []  # (figure, value, target, verdict)

    # -- upload
    u0, u1 = snap("upload-start"), snap("upload-end")
    up_bytes = value(u1, "strata_remote_uploaded_bytes_total") - value(u0, "strata_remote_uploaded_bytes_total")
    up_secs = fnum(r.get("upload_seconds"))
    up_segs = value(u1, "strata_remote_segments_uploaded_total") - value(u0, "strata_remote_segments_uploaded_total")
    up_ops0, up_ops1 = requests_by_op(u0, topic), requests_by_op(u1, topic)
    up_ops = {k: up_ops1.get(k, 0) - up_ops0.get(k, 0) for k in up_ops1}
    up_reqs = sum(up_ops.values())
    cl_reqs = sum(requests_by_op(u1, "").values()) - sum(requests_by_op(u0, "").values())

    # -- consumes
    cons = {k: consumer_result(os.path.join(results_dir, f"consumer-{k}.out"))
            for k in ("local", "cold", "warm", "rehydrated")}
    mbps = {k: fnum(v.get("MB.sec")) for k, v in cons.items()}
    fmbps = {k: fnum(v.get("fetch.MB.sec")) for k, v in cons.items()}
    recs = {k: fnum(v.get("data.consumed.in.nMsg")) for k, v in cons.items()}

    def read_phase(name):
        a, b = snap(f"{name}-start"), snap(f"{name}-end")
        ops_a, ops_b = requests_by_op(a, topic), requests_by_op(b, topic)
        ops = {k: ops_b.get(k, 0) - ops_a.get(k, 0) for k in ops_b}
        d = lambda n: value(b, n) - value(a, n)
        return {
            "ops": ops,
            "reqs": sum(ops.values()),
            "downloaded": d("strata_remote_downloaded_bytes_total"),
            "hits": d("strata_remote_cache_hits_total"),
            "misses": d("strata_remote_cache_misses_total"),
            "readahead_gets": d("strata_remote_readahead_gets_total"),
            "fetches": d("strata_remote_fetches_total"),
            "fetch_errors": d("strata_remote_fetch_errors_total"),
            "read_s": d("strata_remote_read_seconds_total"),
            "reads": d("strata_remote_reads_total"),
        }

    cold, warm = read_phase("cold"), read_phase("warm")
    read_bytes = fnum(r.get("tiered_segment_bytes")) or 0

    def ratio(a, b):
        return a / b if a is not None and b else None

    def f(v, fmt="{:.1f}"):
        return fmt.format(v) if v is not None else "-"

    def verdict(ok):
        return "-" if ok is None else ("ok" if ok else "MISSED")

    upload_mbps = up_bytes / MIB / up_secs if up_secs else None
    rows.append(("upload MB/s (sealed segments, after produce)", f(upload_mbps),
                 "", ""))
    rows.append(("  segments / MiB uploaded / seconds",
                 f"{up_segs:.0f} / {up_bytes / MIB:.0f} / {f(up_secs, '{:.2f}')}", "", ""))
    # Requests scale with the number of segments, not bytes: one PUT of the segment's bundle
    # (log, indexes, snapshot, epochs in one object) and one of the partition's manifest.
    # Kafka's RemoteStorageManager plugins write five or six objects per segment. Per GiB, the
    # figure is the per-segment one times the segments in a GiB (1 at Kafka's default
    # segment.bytes of 1 GiB).
    per_seg_up = up_reqs / up_segs if up_segs else None
    per_gib_up = up_reqs / (up_bytes / GIB) if up_bytes else None
    rows.append(("requests per segment uploaded", f(per_seg_up),
                 "<= 3", verdict(per_seg_up <= 3 if per_seg_up is not None else None)))
    rows.append(("  by op (topic): " + ", ".join(f"{k}={v:.0f}" for k, v in sorted(up_ops.items()) if v),
                 f"{f(per_gib_up)}/GiB" if per_gib_up is not None else "-", "", ""))
    rows.append(("  cluster objects (catalog), not counted", f"{cl_reqs:.0f}", "", ""))
    for k, label in (("local", "consume MB/s, local disk"),
                     ("cold", "consume MB/s, remote, cold cache"),
                     ("warm", "consume MB/s, remote, warm cache")):
        target, ok = "", None
        if k == "cold":
            target = ">= 0.9x local"
            ok = ratio(mbps["cold"], mbps["local"])
            ok = None if ok is None else ok >= 0.9
        if k == "warm":
            target = ">= 1.0x local"
            ok = ratio(mbps["warm"], mbps["local"])
            ok = None if ok is None else ok >= 1.0
        x = ratio(mbps[k], mbps["local"])
        cell = f(mbps[k]) + (f" ({x:.2f}x)" if k != "local" and x is not None else "")
        rows.append((label, cell, target, verdict(ok)))
        rows.append((f"  fetch-only MB/s / records", f"{f(fmbps[k])} / {f(recs[k], '{:.0f}')}", "", ""))
    rounds = int(fnum(r.get("rounds")) or 1)
    if rounds > 1:
        # Each round's cold and warm rates against its own local read, then the medians.
        cold_x, warm_x = [], []
        for i in range(1, rounds + 1):
            sfx = "" if i == 1 else f"-{i}"
            l, c, w = (fnum(consumer_result(os.path.join(results_dir, f"consumer-{k}{sfx}.out"))
                            .get("MB.sec")) for k in ("local", "cold", "warm"))
            cx, wx = ratio(c, l), ratio(w, l)
            if cx is not None and wx is not None:
                cold_x.append(cx)
                warm_x.append(wx)
            rows.append((f"  round {i}: consume MB/s local / cold / warm",
                         f"{f(l)} / {f(c)} ({f(cx, '{:.2f}')}x) / {f(w)} ({f(wx, '{:.2f}')}x)",
                         "", ""))
        if cold_x:
            mc, mw = statistics.median(cold_x), statistics.median(warm_x)
            rows.append((f"median of {len(cold_x)} rounds: cold / warm x local",
                         f"{mc:.2f}x / {mw:.2f}x", ">= 0.9x / >= 1.0x",
                         verdict(mc >= 0.9 and mw >= 1.0)))
    r0, r1 = snap("rehydrate-start"), snap("rehydrate-end")
    re_bytes = (value(r1, "strata_remote_rehydrated_bytes_total")
                - value(r0, "strata_remote_rehydrated_bytes_total"))
    re_secs = fnum(r.get("rehydrate_seconds"))
    re_segs = (value(r1, "strata_remote_segments_rehydrated_total")
               - value(r0, "strata_remote_segments_rehydrated_total"))
    if re_secs:
        rows.append(("rehydration MB/s (download, check, install)",
                     f"{f(re_bytes / MIB / re_secs)} ({re_segs:.0f} segments, {re_bytes / MIB:.0f} MiB, {re_secs:.2f} s)",
                     "", ""))
    if mbps.get("rehydrated") is not None:
        x = ratio(mbps["rehydrated"], mbps["local"])
        rows.append(("consume MB/s, rehydrated (local disk again)",
                     f(mbps["rehydrated"]) + (f" ({x:.2f}x)" if x is not None else ""), "", ""))
        rehydrated = read_phase("rehydrated")
        rows.append(("  remote fetches while reading rehydrated data", f"{rehydrated['fetches']:.0f}",
                     "0", verdict(rehydrated["fetches"] == 0)))
    for name, ph in (("cold", cold), ("warm", warm)):
        per_gib = ph["reqs"] / (read_bytes / GIB) if read_bytes else None
        rows.append((f"requests per GiB read, {name} cache", f(per_gib), "", ""))
        rows.append(("  by op: " + (", ".join(f"{k}={v:.0f}" for k, v in sorted(ph["ops"].items()) if v) or "none"),
                     f"{ph['downloaded'] / MIB:.0f} MiB downloaded", "", ""))
        lookups = ph["hits"] + ph["misses"]
        mean_ms = ph["read_s"] / ph["reads"] * 1000 if ph["reads"] else None
        rows.append((f"  reads' chunk hit ratio / read-ahead GETs / remote fetches / mean read ms",
                     f"{f(ph['hits'] / lookups if lookups else None, '{:.2f}')} / {ph['readahead_gets']:.0f}"
                     f" / {ph['fetches']:.0f} / {f(mean_ms, '{:.2f}')}",
                     "", ""))
    w0, w1, w2 = (fnum(r.get(k)) for k in ("write_bytes_cold_start", "write_bytes_cold_end",
                                            "write_bytes_warm_end"))
    if None not in (w0, w1, w2):
        rows.append(("broker disk writes (cache disk tier) cold / warm, MiB",
                     f"{(w1 - w0) / MIB:.0f} / {(w2 - w1) / MIB:.0f}", "", ""))
    cpu_rows(r, rows)
    mem = fnum(r.get("cache_memory_bytes"))
    disk = fnum(r.get("cache_disk_bytes"))
    rss = fnum(r.get("rss_peak_kib"))
    anon = fnum(r.get("rss_anon_peak_kib"))
    hwm = fnum(r.get("vm_hwm_kib"))
    rows.append(("broker peak VmRSS during remote reads, MiB", f(rss / 1024 if rss else None, "{:.0f}"),
                 "bounded by cache", ""))
    rows.append(("broker peak RssAnon during remote reads, MiB", f(anon / 1024 if anon else None, "{:.0f}"),
                 f"memory cache {mem / MIB:.0f} MiB" if mem is not None else "", ""))
    rows.append(("  VmHWM since restart / RssAnon before reads, MiB",
                 f"{f(hwm / 1024 if hwm else None, '{:.0f}')} / {f(fnum(r.get('rss_anon_before_kib')) and fnum(r.get('rss_anon_before_kib')) / 1024, '{:.0f}')}",
                 f"disk cache {disk / MIB:.0f} MiB" if disk is not None else "", ""))
    rows.append(("remote data read (tiered topic, MiB)", f"{read_bytes / MIB:.0f}", "", ""))

    heads = ("figure", "value", "target", "")
    widths = [max(len(str(x)) for x in col) for col in zip(heads, *rows)]
    line = "  ".join(h.ljust(w) for h, w in zip(heads, widths))
    print(line)
    print("-" * len(line))
    for cells in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip())
    json.dump({"upload_mbps": upload_mbps, "consume_mbps": mbps, "fetch_mbps": fmbps,
               "requests_per_gib_uploaded": per_gib_up, "requests_per_segment_uploaded": per_seg_up,
               "cold": cold, "warm": warm,
               "rss_peak_kib": rss, "rss_anon_peak_kib": anon},
              open(os.path.join(results_dir, "results.json"), "w"), indent=1, default=str)


COMMANDS = {
    "bucket": (cmd_bucket, 2),
    "delete-prefix": (cmd_delete_prefix, 4),
    "create-topic": (cmd_create_topic, -3),
    "alter-topic": (cmd_alter_topic, -3),
    "snapshot": (cmd_snapshot, 2),
    "segments": (cmd_segments, 3),
    "wait-upload": (cmd_wait_upload, 6),
    "wait-rehydrated": (cmd_wait_rehydrated, 5),
    "table": (cmd_table, 1),
}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    fn, n = COMMANDS[sys.argv[1]]
    args = sys.argv[2:]
    if (n >= 0 and len(args) != n) or (n < 0 and len(args) < -n):
        sys.exit(__doc__)
    fn(*args)


if __name__ == "__main__":
    main()
