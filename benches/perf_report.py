#!/usr/bin/env python3
"""Helpers for benches/compare.sh (standard library only).

  perf_report.py producer FILE   -> "records_per_sec mb_per_sec p50 p99 p999 avg max records"
                                    from ProducerPerformance output (its final summary line)
  perf_report.py consumer FILE   -> "mb_per_sec records_per_sec records" from ConsumerPerformance
                                    output
  perf_report.py table RESULTS   -> prints the comparison table for results.tsv
  perf_report.py failover FILE   -> prints the leadership recovery times of benches/cluster.sh
                                    (failover.tsv), per kill -9 cycle, with medians and ratios
  perf_report.py cost FILE       -> prints the idle and low-rate cost of benches/cluster.sh
                                    (cost.tsv), with the Strata/Kafka ratios
"""
import re
import statistics
import sys

PRODUCER_RE = re.compile(
    r"(?P<n>\d+) records sent, (?P<rps>[\d.]+) records/sec \((?P<mbps>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, "
    r"(?P<p50>[\d.]+) ms 50th, (?P<p95>[\d.]+) ms 95th, (?P<p99>[\d.]+) ms 99th, "
    r"(?P<p999>[\d.]+) ms 99\.9th"
)


def producer(path):
    last = None
    with open(path, errors="replace") as f:
        for line in f:
            m = PRODUCER_RE.search(line)
            if m:
                last = m
    if not last:
        sys.exit("no ProducerPerformance summary line in " + path)
    print(" ".join(last.group(k) for k in ("rps", "mbps", "p50", "p99", "p999", "avg", "max", "n")))


def consumer(path):
    # Header: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, ...
    header = None
    with open(path, errors="replace") as f:
        for line in f:
            cols = [c.strip() for c in line.split(",")]
            if "MB.sec" in cols:
                header = cols
                continue
            if header and len(cols) >= len(header) - 1:
                try:
                    row = dict(zip(header, cols))
                    print(float(row["MB.sec"]), float(row["nMsg.sec"]),
                          int(float(row["data.consumed.in.nMsg"])))
                    return
                except (KeyError, ValueError):
                    continue
    sys.exit("no ConsumerPerformance result line in " + path)


COLS = [
    # key, heading, format
    ("prod_mbps", "MB/s", "{:.1f}"),
    ("prod_rps", "records/s", "{:.0f}"),
    ("p50", "p50 ms", "{:.0f}"),
    ("p99", "p99 ms", "{:.0f}"),
    ("p999", "p99.9 ms", "{:.0f}"),
    ("cons_mbps", "cons MB/s", "{:.1f}"),
    ("rss_mib", "peak RSS MiB", "{:.0f}"),
    ("cpu_s", "broker CPU s", "{:.1f}"),
]


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def table(path):
    rows = []
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            if line.strip():
                rows.append(dict(zip(header, line.rstrip("\n").split("\t"))))
    if not rows:
        print("(no results)")
        return

    out = []
    heads = ["target", "acks"] + [c[1] for c in COLS] + ["status"]

    def fmt_row(r):
        cells = [r["target"], r["acks"]]
        for key, _, f in COLS:
            v = num(r.get(key))
            cells.append(f.format(v) if v is not None else "-")
        cells.append(r.get("status", ""))
        return cells

    acks_order = []
    for r in rows:
        if r["acks"] not in acks_order:
            acks_order.append(r["acks"])
    for acks in acks_order:
        by_target = {r["target"]: r for r in rows if r["acks"] == acks}
        for r in rows:
            if r["acks"] == acks:
                out.append(fmt_row(r))
        s, k = by_target.get("strata"), by_target.get("kafka")
        if s and k and s.get("status") == "ok" and k.get("status") == "ok":
            cells = ["strata/kafka", acks]
            for key, _, _ in COLS:
                a, b = num(s.get(key)), num(k.get(key))
                cells.append("{:.2f}x".format(a / b) if a is not None and b else "-")
            cells.append("")
            out.append(cells)

    widths = [max(len(str(x)) for x in col) for col in zip(heads, *out)]
    line = "  ".join(h.ljust(w) if i < 2 else h.rjust(w) for i, (h, w) in enumerate(zip(heads, widths)))
    print(line)
    print("-" * len(line))
    for cells in out:
        print("  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w)
                        for i, (c, w) in enumerate(zip(cells, widths))))
    print("ratios: higher is better for MB/s, records/s, cons MB/s; lower is better for"
          " latency, RSS and CPU.")


def read_rows(path):
    """The rows of a results TSV file with a header line, as dicts."""
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        return [dict(zip(header, line.rstrip("\n").split("\t"))) for line in f if line.strip()]


def print_table(heads, rows, left=2):
    widths = [max(len(str(x)) for x in col) for col in zip(heads, *rows)]

    def fmt(cells):
        return "  ".join(str(c).ljust(w) if i < left else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))
    line = fmt(heads)
    print(line)
    print("-" * len(line))
    for cells in rows:
        print(fmt(cells))


def failover(path):
    """Per kill -9 cycle: the partition, the killed broker, the metadata quorum leader, the new
    partition leader, seconds until a produce was acknowledged and until Metadata named a new
    leader; medians per target and kind of victim, and the Strata/Kafka ratio of the medians."""
    rows = read_rows(path)
    if not rows:
        print("(no results)")
        return
    out, medians = [], {}
    for kind in dict.fromkeys(r["kind"] for r in rows):
        for target in dict.fromkeys(r["target"] for r in rows):
            mine = [r for r in rows if r["target"] == target and r["kind"] == kind]
            if not mine:
                continue
            for r in mine:
                out.append([target, kind, r["cycle"], r["partition"], r["victim"],
                            r["quorum_leader"], r["new_leader"], r["ack_s"], r["metadata_s"],
                            r["delivery_errors"], r["status"]])
            ok = [r for r in mine if r["status"] == "ok"]
            med = {k: statistics.median(float(r[k]) for r in ok) if ok else None
                   for k in ("ack_s", "metadata_s")}
            medians[target, kind] = med
            out.append([target, kind, "median", "", "", "", "",
                        *("{:.2f}".format(med[k]) if med[k] is not None else "-"
                          for k in ("ack_s", "metadata_s")),
                        "", "{} of {} ok".format(len(ok), len(mine))])
        s, k = medians.get(("strata", kind)), medians.get(("kafka", kind))
        if s and k:
            out.append(["strata/kafka", kind, "median", "", "", "", "",
                        *("{:.2f}x".format(s[c] / k[c]) if s[c] is not None and k[c] else "-"
                          for c in ("ack_s", "metadata_s")), "", ""])
    print_table(["target", "killed", "cycle", "partition", "victim", "quorum leader",
                 "new leader", "produce acked s", "metadata s", "delivery errors", "status"],
                out, left=3)
    print("killed: the leader of a partition that the metadata quorum leader does not lead"
          " (partition-leader), or that it leads (quorum-leader: the kill also costs a quorum"
          " election). Seconds from SIGKILL until a record produced after the kill was"
          " acknowledged (acks=all, idempotent), and until Metadata from a surviving broker"
          " named another leader; lower is better.")


def cost(path):
    """Broker CPU-s per minute of a quiet cluster and at a low produce rate, per target, and
    the Strata/Kafka ratios."""
    rows = read_rows(path)
    if not rows:
        print("(no results)")
        return
    keys = ("idle_cpu_s_per_min", "low_rate_cpu_s_per_min", "low_rate_rps", "low_rate_p99_ms")
    def cell(r, k):
        v = num(r.get(k))
        return "-" if v is None else ("{:.0f}".format(v) if k == "low_rate_rps" else r[k])
    out = [[r["target"], *(cell(r, k) for k in keys), r.get("status", "")] for r in rows]
    by = {r["target"]: r for r in rows if r.get("status") == "ok"}
    s, k = by.get("strata"), by.get("kafka")
    if s and k:
        cells = []
        for key in keys:
            a, b = num(s.get(key)), num(k.get(key))
            cells.append("{:.2f}x".format(a / b) if a is not None and b else "-")
        out.append(["strata/kafka", *cells, ""])
    print_table(["target", "idle CPU-s/min", "low-rate CPU-s/min", "low-rate records/s",
                 "low-rate p99 ms", "status"], out, left=1)
    print("lower is better for CPU and latency.")


def main():
    cmds = {"producer": producer, "consumer": consumer, "table": table, "failover": failover,
            "cost": cost}
    if len(sys.argv) != 3 or sys.argv[1] not in cmds:
        sys.exit(__doc__)
    cmds[sys.argv[1]](sys.argv[2])


if __name__ == "__main__":
    main()
