"""Figures of strata-loadgen runs for benches/compare.sh and benches/cluster.sh.

  loadgen_report.py row TARGET ACKS STATUS CPU0 CPU1 CPU2 RSS PRODUCE_LINE CONSUME_LINE
      one loadgen.tsv row: the generator's figures, and the brokers' CPU seconds per GiB of
      produce (CPU1 - CPU0) and of consume (CPU2 - CPU1)
  loadgen_report.py best-floor BEST NEW   the floor line with the higher MB/s
  loadgen_report.py shares LOADGEN_TSV FLOOR_LINE
      each produce row as a share of the floor's MB/s and a multiple of its CPU-s per GiB
"""
import sys

HEADER = ("target\tacks\tprod_MB/s\tp50_ms\tp99_ms\tp99.9_ms\tprod_cpu_s/GiB\tcons_MB/s"
          "\tcons_cpu_s/GiB\trss_MiB\tloadgen_cpu_s\tstatus")


def kv(line):
    """The key=value fields of a loadgen line (after its first word)."""
    return dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)


def row(target, acks, status, c0, c1, c2, rss, prod, cons):
    p, c = kv(prod), kv(cons)

    def per_gib(cpu, d):
        gib = int(d.get("bytes", 0)) / 2**30
        return f"{cpu / gib:.2f}" if gib else "-"

    loadgen_cpu = float(p.get("loadgen_cpu_s", 0)) + float(c.get("loadgen_cpu_s", 0))
    return "\t".join([
        target, acks, p.get("mb_per_s", "-"), p.get("p50_ms", "-"), p.get("p99_ms", "-"),
        p.get("p999_ms", "-"), per_gib(float(c1) - float(c0), p), c.get("mb_per_s", "-"),
        per_gib(float(c2) - float(c1), c), rss, f"{loadgen_cpu:.2f}", status])


def best_floor(best, new):
    def mbps(line):
        return float(kv(line)["mb_per_s"]) if line else -1
    return new if mbps(new) > mbps(best) else best


def shares(path, floor_line):
    rows = [line.rstrip("\n").split("\t") for line in open(path)]
    head, rows = rows[0], rows[1:]
    floor = kv(floor_line)
    fm, fc = float(floor["mb_per_s"]), float(floor["cpu_s_per_gib"])
    print(f"\nfloor (loopback TCP + page-cache append, no protocol): {fm:.1f} MB/s, "
          f"{fc:.2f} CPU-s/GiB")
    for r in rows:
        d = dict(zip(head, r))
        try:
            mbps, cpu = float(d["prod_MB/s"]), float(d["prod_cpu_s/GiB"])
        except ValueError:
            continue
        print(f"{d['target']:>7} acks={d['acks']:<3}: produce {100 * mbps / fm:.0f}% of the "
              f"floor's MB/s, broker CPU-s/GiB {cpu / fc:.2f}x the floor's")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "header":
        print(HEADER)
    elif cmd == "row":
        print(row(*args))
    elif cmd == "best-floor":
        print(best_floor(*args))
    elif cmd == "shares":
        shares(*args)
    else:
        sys.exit(f"unknown command {cmd}")
