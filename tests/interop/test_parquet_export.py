"""Parquet export (`strata export`): records produced with real clients (every compression
codec, keys, null values, repeated header keys, explicit timestamps, committed and aborted
transactions) to a tiered topic are exported from the bucket's segments and the sealed local
segments, then read back with pyarrow, DuckDB and Spark (pyspark, local[1], skipped without
Java 17+) and compared exactly. Exports go to a local directory and to the S3-compatible test
server (moto), which pyarrow, DuckDB (httpfs) and Spark (s3a://, with the spark-s3 jar set of
scripts/install-test-deps.sh: hadoop-aws and the AWS SDK modules it uses) read back; an
exporter killed with SIGKILL between writing a file and committing its checkpoint is re-run
and leaves no duplicate and no gap. `--value-schema` adds typed columns decoded from JSON
values next to the raw value.

Strata only: the reference Kafka broker has no remote storage plugin configured.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition

from helpers import QUIET, _consumer, create_topic
from test_tiering import (REMOTE_TOPIC_CONFIG, seal_records, tiered_broker_props,
                          wait_until_remote_only)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
ds = pytest.importorskip("pyarrow.dataset")
duckdb = pytest.importorskip("duckdb")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("STRATA_TEST_TARGET", "strata").strip().lower() == "kafka",
        reason="the reference Kafka broker has no remote storage plugin configured"),
]

PARTS = 2
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 1500
T0 = 1_700_000_000_000
EXPORT_TIMEOUT_S = 120
CHECKPOINT_TIMEOUT_S = 30


def _binary() -> Path:
    b = Path(os.environ.get("STRATA_BIN", "target/debug/strata"))
    return b if b.is_absolute() else Path(__file__).resolve().parents[2] / b


class Produced:
    """What the log should hold: (partition, offset) -> (key, value, headers, timestamp)."""

    def __init__(self):
        self.records: dict[tuple[int, int], tuple] = {}
        self.aborted: set[tuple[int, int]] = set()

    def producer(self, bootstrap: str, conf: dict, into_aborted: bool = False) -> Producer:
        def cb_for(headers):
            # Delivery reports carry no headers: remember the ones produced.
            def cb(err, msg):
                assert err is None, err
                key = (msg.partition(), msg.offset())
                if into_aborted:
                    self.aborted.add(key)
                else:
                    self.records[key] = (msg.key(), msg.value(), list(headers),
                                         msg.timestamp()[1])
            return cb
        return Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         **QUIET, **conf}), cb_for


def record(i: int, rnd: random.Random) -> dict:
    headers = [("idx", b"%d" % i), ("dup", b"a"), ("dup", b"b")]
    if i % 7 == 0:
        headers.append(("nullhdr", None))
    return {
        "key": None if i % 5 == 0 else b"key-%d" % (i % 113),
        "value": None if i % 11 == 0 else b"%07d:" % i + rnd.randbytes(rnd.randint(0, 300)),
        "headers": headers,
        "timestamp": T0 + i * 10,
        "partition": i % PARTS,
    }


def produce_all(bootstrap: str, topic: str, produced: Produced) -> None:
    rnd = random.Random(7)
    i = 0
    for codec in CODECS:
        p, cb = produced.producer(bootstrap, {"compression.type": codec, "linger.ms": 5,
                                              "batch.size": 16384})
        for _ in range(PER_CODEC):
            r = record(i, rnd)
            p.produce(topic, value=r["value"], key=r["key"], headers=r["headers"],
                      timestamp=r["timestamp"], partition=r["partition"],
                      on_delivery=cb(r["headers"]))
            p.poll(0)
            i += 1
        assert p.flush(60) == 0
    # Transactions: committed, aborted (its records reach the log, then an ABORT marker),
    # committed again.
    for outcome in ["commit", "abort", "commit"]:
        tid = f"export-{uuid.uuid4().hex[:8]}"
        p, cb = produced.producer(bootstrap, {"transactional.id": tid, "compression.type": "zstd",
                                              "linger.ms": 5}, into_aborted=outcome == "abort")
        p.init_transactions(30)
        p.begin_transaction()
        for _ in range(400):
            r = record(i, rnd)
            p.produce(topic, value=r["value"], key=r["key"], headers=r["headers"],
                      timestamp=r["timestamp"], partition=r["partition"],
                      on_delivery=cb(r["headers"]))
            p.poll(0)
            i += 1
        assert p.flush(60) == 0
        if outcome == "commit":
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)


def checkpointed_high_watermarks(broker, topic: str) -> dict[int, int]:
    """The high watermarks of `topic` in the log dir's `replication-offset-checkpoint`
    (`topic partition offset` lines after a version and a count line): what `strata export`
    caps the sealed local segments at."""
    try:
        lines = (broker.data_dir / "replication-offset-checkpoint").read_text().splitlines()
    except FileNotFoundError:
        return {}
    out = {}
    for line in lines[2:]:
        f = line.split()
        if len(f) == 3 and f[0] == topic:
            out[int(f[1])] = int(f[2])
    return out


def wait_for_high_watermark_checkpoint(broker, topic: str, partitions,
                                       timeout: float = CHECKPOINT_TIMEOUT_S) -> None:
    """Wait until the high-watermark checkpoint holds each partition's current high watermark
    (every acknowledged record, fillers included), so that an export reads every sealed
    segment rather than stopping at an older checkpoint."""
    c = _consumer(broker.bootstrap, {"isolation.level": "read_uncommitted"})
    try:
        want = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in partitions}
    finally:
        c.close()
    deadline = time.monotonic() + timeout
    while True:
        got = checkpointed_high_watermarks(broker, topic)
        if all(got.get(p, -1) >= hw for p, hw in want.items()):
            return
        how = broker.died()
        if how is not None or time.monotonic() > deadline:
            raise AssertionError(
                f"{topic}: wanted the high watermarks {want} checkpointed within {timeout}s, "
                f"but {broker.data_dir / 'replication-offset-checkpoint'} holds {got} "
                f"({how or 'broker running'})\n--- broker log tail ---\n{broker.log_tail(40)}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def exported_topic(s3_server, module_broker_factory):
    """A tiered 2-partition topic with every kind of record, sealed and mostly uploaded.
    Yields (broker, topic, produced)."""
    props = tiered_broker_props(s3_server.broker_props("export-src"))
    # The exporter caps local segments at the high-watermark checkpoint: keep it fresh.
    props["log.flush.offset.checkpoint.interval.ms"] = "200"
    b = module_broker_factory(name="export", props=props)
    topic = f"export-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, partitions=PARTS, config=REMOTE_TOPIC_CONFIG)
    produced = Produced()
    produce_all(b.bootstrap, topic, produced)
    last = {p: max(o for (q, o) in list(produced.records) + list(produced.aborted) if q == p)
            for p in range(PARTS)}
    # Roll past the last record (+ its transaction marker) so every produced record is in a
    # sealed segment, then wait until the early segments are remote-only.
    seal_records(b, topic, {p: o + 1 for p, o in last.items()})
    wait_until_remote_only(b, topic, {p: 0 for p in range(PARTS)})
    wait_for_high_watermark_checkpoint(b, topic, range(PARTS))
    return b, topic, produced, last


def run_export(broker, topic: str, out: str, *extra: str, env: dict | None = None,
               check: bool = True) -> subprocess.CompletedProcess:
    cmd = [str(_binary()), "export", "--topic", topic, "--out", out,
           "--config", str(broker.config_path), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S,
                       env={**os.environ, **(env or {})})
    if check:
        assert r.returncode == 0, f"{cmd} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r


def checkpoint_ends(read_json, topic: str) -> dict[int, int]:
    return {p: read_json(f"topic={topic}/partition={p}/_checkpoint.json")["next_offset"]
            for p in range(PARTS)}


def expected_rows(produced: Produced, ends: dict[int, int]) -> list[tuple]:
    """Non-aborted produced records below each partition's exported end, by (partition,
    offset). Fillers are produced by seal_records through helpers.produce and are not
    tracked: rows are compared by the tracked records only, plus a gap check."""
    out = []
    for (p, o), (k, v, h, ts) in sorted(produced.records.items()):
        if o < ends[p]:
            out.append((p, o, k, v, h, ts))
    return out


def rows_from_arrow(table) -> list[tuple]:
    t = table.sort_by([("partition", "ascending"), ("offset", "ascending")])
    cols = t.to_pydict()
    # DuckDB hands TIMESTAMPTZ back in microseconds; the file holds milliseconds.
    ts = t.column("timestamp").cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_pylist()
    return [(cols["partition"][i], cols["offset"][i], cols["key"][i], cols["value"][i],
             [(h["key"], h["value"]) for h in cols["headers"][i]], ts[i])
            for i in range(t.num_rows)]


def assert_exact(rows: list[tuple], produced: Produced, ends: dict[int, int], last, reader: str):
    offsets = [(r[0], r[1]) for r in rows]
    assert len(offsets) == len(set(offsets)), f"{reader}: duplicate offsets"
    assert not set(offsets) & produced.aborted, f"{reader}: aborted records were exported"
    for p in range(PARTS):
        assert ends[p] > last[p], f"{reader}: partition {p} exported only below {ends[p]}"
    want = expected_rows(produced, ends)
    tracked = [r for r in rows if (r[0], r[1]) in produced.records]
    assert len(tracked) == len(want), f"{reader}: {len(tracked)} rows, wanted {len(want)}"
    for got, w in zip(tracked, want):
        assert got == w, f"{reader}: row differs\n got {got}\nwant {w}"
    # Every other row is a filler (produced after the tracked records), never a gap filler.
    others = [r for r in rows if (r[0], r[1]) not in produced.records]
    for r in others:
        assert r[1] > last[r[0]] and r[3].startswith(b"filler:"), f"{reader}: stray row {r[:2]}"


def test_export_to_a_directory_reads_back_exactly_in_pyarrow_and_duckdb(exported_topic, tmp_path):
    b, topic, produced, last = exported_topic
    out = tmp_path / "export"
    r = run_export(b, topic, str(out))
    assert "exported" in r.stdout, r.stdout
    assert "records" in r.stderr, r.stderr  # the progress line

    def read_json(rel):
        return json.loads((out / rel).read_text())
    ends = checkpoint_ends(read_json, topic)

    files = sorted(out.glob(f"topic={topic}/partition=*/*.parquet"))
    assert files, list(out.rglob("*"))
    for f in files:
        first, last_off = (int(x) for x in f.stem.split("-"))
        offs = pq.read_table(f, columns=["offset"]).column("offset").to_pylist()
        assert (offs[0], offs[-1]) == (first, last_off), f.name
        md = pq.ParquetFile(f).metadata
        assert md.row_group(0).column(0).compression == "ZSTD"
        stats = md.row_group(0).column(2).statistics  # offset
        assert stats is not None and stats.has_min_max and stats.min == first

    schema = pq.read_schema(files[0])
    assert schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
    assert schema.field("key").type == pa.binary()
    assert schema.field("headers").type.value_type == pa.struct(
        [pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])

    # pyarrow, as a Hive-partitioned dataset (partition columns come from the file too).
    dataset = ds.dataset(out, format="parquet", partitioning="hive",
                         exclude_invalid_files=True)
    table = dataset.to_table(columns=["partition", "offset", "key", "value", "headers",
                                      "timestamp"])
    assert_exact(rows_from_arrow(table), produced, ends, last, "pyarrow")

    # DuckDB, the way a user would query it.
    con = duckdb.connect()
    glob = str(out / "topic=*" / "partition=*" / "*.parquet")
    n, distinct = con.sql(
        f"SELECT count(*), count(DISTINCT (partition, \"offset\")) FROM read_parquet('{glob}', "
        f"hive_partitioning = false)").fetchall()[0]
    assert n == distinct
    dtable = con.sql(
        f"SELECT partition, \"offset\", key, value, headers, timestamp FROM read_parquet('{glob}')"
    ).to_arrow_table()
    assert_exact(rows_from_arrow(dtable), produced, ends, last, "duckdb")
    ts_type = con.sql(f"SELECT typeof(timestamp) FROM read_parquet('{glob}') LIMIT 1").fetchall()[0][0]
    assert ts_type == "TIMESTAMP WITH TIME ZONE"
    # Row-group pruning has what it needs: min/max offset per file.
    (mn,) = con.sql(f"SELECT min(\"offset\") FROM read_parquet('{glob}') WHERE partition = 0").fetchall()[0]
    assert mn == 0

    # A re-run has nothing left to do and writes nothing.
    before = {f: f.read_bytes() for f in files}
    r2 = run_export(b, topic, str(out))
    assert sorted(out.glob(f"topic={topic}/partition=*/*.parquet")) == files
    assert {f: f.read_bytes() for f in files} == before


def test_export_to_s3_reads_back_exactly_in_pyarrow_and_duckdb(exported_topic, s3_server, tmp_path):
    b, topic, produced, last = exported_topic
    prefix = f"exports-{uuid.uuid4().hex[:6]}"
    run_export(b, topic, f"s3://{s3_server.bucket}/{prefix}")
    keys = s3_server.keys(prefix + "/")
    assert any(k.endswith(".parquet") for k in keys), keys[:10]
    assert all(k.startswith(f"{prefix}/topic={topic}/partition=") for k in keys), keys[:10]

    def read_json(rel):
        return json.loads(s3_server.client.get_object(
            Bucket=s3_server.bucket, Key=f"{prefix}/{rel}")["Body"].read())
    ends = checkpoint_ends(read_json, topic)

    from pyarrow import fs
    s3 = fs.S3FileSystem(access_key=s3_server.access_key, secret_key=s3_server.secret_key,
                         region=s3_server.region, scheme="http",
                         endpoint_override=s3_server.endpoint.removeprefix("http://"))
    dataset = ds.dataset(f"{s3_server.bucket}/{prefix}", filesystem=s3, format="parquet",
                         partitioning="hive", exclude_invalid_files=True)
    table = dataset.to_table(columns=["partition", "offset", "key", "value", "headers",
                                      "timestamp"])
    assert_exact(rows_from_arrow(table), produced, ends, last, "pyarrow over S3")

    # DuckDB queries the bucket directly through its httpfs extension (hive partitioning on,
    # as a user would read the export).
    con = duckdb_on_s3(s3_server)
    url = f"s3://{s3_server.bucket}/{prefix}/topic={topic}/*/*.parquet"
    n, distinct = con.sql(
        f"SELECT count(*), count(DISTINCT (partition, \"offset\")) FROM read_parquet('{url}', "
        f"hive_partitioning = true)").fetchall()[0]
    assert n == distinct
    dtable = con.sql(
        f"SELECT partition, \"offset\", key, value, headers, timestamp FROM "
        f"read_parquet('{url}', hive_partitioning = true)").to_arrow_table()
    assert_exact(rows_from_arrow(dtable), produced, ends, last, "duckdb over S3")


def duckdb_on_s3(s3_server):
    """A DuckDB connection with httpfs loaded and pointed at the moto server.

    The extension comes from the duckdb-extension-httpfs package (pinned next to duckdb in
    requirements.txt) and is LOADed by file path: no download from DuckDB's extension
    repository at test time."""
    try:
        import duckdb_extension_httpfs
    except ModuleNotFoundError:
        pytest.fail("duckdb-extension-httpfs is not installed: "
                    "pip install -r tests/interop/requirements.txt")
    path = (Path(duckdb_extension_httpfs.__file__).parent / "extensions"
            / f"v{duckdb.__version__}" / "httpfs.duckdb_extension")
    assert path.is_file(), f"no httpfs extension for DuckDB {duckdb.__version__} at {path}"
    con = duckdb.connect()
    con.execute(f"LOAD '{path}'")
    con.execute(f"SET s3_endpoint = '{s3_server.endpoint.removeprefix('http://')}'")
    con.execute("SET s3_url_style = 'path'")
    con.execute("SET s3_use_ssl = false")
    con.execute(f"SET s3_region = '{s3_server.region}'")
    con.execute(f"SET s3_access_key_id = '{s3_server.access_key}'")
    con.execute(f"SET s3_secret_access_key = '{s3_server.secret_key}'")
    return con


def kill_between_file_and_checkpoint(cmd: list[str], out: Path) -> None:
    """Runs the exporter `cmd` with a pause between each file landing and its checkpoint, and
    kills it with SIGKILL inside the pause after its third file under `out`."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "STRATA_EXPORT_FAILPOINT_PAUSE_MS": "400"})
    try:
        deadline = time.monotonic() + 60
        while len(list(out.glob("topic=*/partition=*/*.parquet"))) < 3:
            assert proc.poll() is None, "the exporter finished before it could be killed"
            assert time.monotonic() < deadline, "the exporter wrote no files"
            time.sleep(0.05)
        # Inside the pause: the newest file has landed, its checkpoint not yet.
        time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_exporter_killed_between_file_and_checkpoint_reruns_without_duplicates_or_gaps(
        exported_topic, tmp_path):
    b, topic, produced, last = exported_topic
    out = tmp_path / "crash"
    kill_between_file_and_checkpoint(
        [str(_binary()), "export", "--topic", topic, "--out", str(out), "--parallelism", "1",
         "--config", str(b.config_path)], out)
    first_run = {f.relative_to(out): f.read_bytes()
                 for f in out.glob("topic=*/partition=*/*.parquet")}
    cps = {p: json.loads(c.read_text())["next_offset"]
           for p, c in ((int(c.parent.name.split("=")[1]), c)
                        for c in out.glob("topic=*/partition=*/_checkpoint.json"))}
    # The file written but not checkpointed exists: a name starting at the checkpoint.
    uncovered = [f for f in first_run
                 if int(f.stem.split("-")[0]) >= cps.get(int(f.parent.name.split("=")[1]), 0)]
    assert uncovered, f"no file beyond the checkpoints {cps}: {sorted(first_run)}"

    run_export(b, topic, str(out))
    files = sorted(out.glob("topic=*/partition=*/*.parquet"))
    # Files of the killed run are rewritten under the same name with the same bytes.
    for rel, data in first_run.items():
        assert (out / rel).read_bytes() == data, f"{rel} differs after the re-run"
    assert not list(out.rglob("*.tmp")), "spool files left behind"
    table = ds.dataset(out, format="parquet", partitioning="hive",
                       exclude_invalid_files=True).to_table(
        columns=["partition", "offset", "key", "value", "headers", "timestamp"])
    ends = checkpoint_ends(lambda rel: json.loads((out / rel).read_text()), topic)
    assert_exact(rows_from_arrow(table), produced, ends, last, "after kill -9 and re-run")
    # Files tile each partition: no offset range overlaps another.
    for p in range(PARTS):
        ranges = sorted(tuple(int(x) for x in f.stem.split("-"))
                        for f in files if f.parent.name == f"partition={p}")
        for (a0, a1), (b0, b1) in zip(ranges, ranges[1:]):
            assert a1 < b0, f"partition {p}: {a0}-{a1} overlaps {b0}-{b1}"


def test_offset_and_time_ranges_select_exactly_those_records(exported_topic, tmp_path):
    b, topic, produced, last = exported_topic
    out = tmp_path / "ranges"
    run_export(b, topic, str(out), "--partitions", "0", "--from-offset", "100",
               "--to-offset", "1200")
    t = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    offs = sorted(t.column("offset").to_pylist())
    want = sorted(o for (p, o) in produced.records if p == 0 and 100 <= o < 1200)
    assert offs == want
    assert set(t.column("partition").to_pylist()) == {0}

    # By time: records of partition 1 with CreateTime in [T0+20000, T0+40000].
    out2 = tmp_path / "times"
    run_export(b, topic, str(out2), "--partitions", "1",
               "--from-time", "2023-11-14T22:13:40Z", "--to-time", str(T0 + 40_000))
    t2 = ds.dataset(out2, format="parquet", partitioning="hive").to_table()
    got = sorted(t2.column("offset").to_pylist())
    want2 = sorted(o for (p, o), (_, _, _, ts) in produced.records.items()
                   if p == 1 and T0 + 20_000 <= ts <= T0 + 40_000)
    assert got == want2


def _java_major() -> int | None:
    """The major version of the `java` on PATH (or under JAVA_HOME), None without one."""
    import re
    import shutil
    java = shutil.which("java")
    if os.environ.get("JAVA_HOME"):
        java = str(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    if not java or not Path(java).exists():
        return None
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 else major


def spark_s3a_jars() -> tuple[str | None, str | None]:
    """(spark.jars value: hadoop-aws and the AWS SDK modules s3a needs, None) or (None, why
    not). The jars are the spark-s3 set of scripts/install-test-deps.sh; pyspark ships the
    hadoop they go with."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "java-classpath.sh"
    cp = subprocess.run(["bash", str(script), "spark-s3"], capture_output=True, text=True)
    if cp.returncode != 0 or not cp.stdout.strip():
        return None, f"no s3a jars for Spark (hadoop-aws, AWS SDK): {cp.stderr.strip()}"
    return cp.stdout.strip().replace(":", ","), None


def s3a_conf(s3_server) -> dict[str, str]:
    """Spark settings that point s3a:// at the moto server (what a user sets for MinIO & co)."""
    return {
        "spark.hadoop.fs.s3a.endpoint": s3_server.endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": s3_server.region,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.access.key": s3_server.access_key,
        "spark.hadoop.fs.s3a.secret.key": s3_server.secret_key,
        # Static keys only: the default chain would also ask the EC2 instance metadata address.
        "spark.hadoop.fs.s3a.aws.credentials.provider":
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }


@pytest.fixture(scope="module")
def spark(tmp_path_factory, s3_server):
    """A local Spark session (one core, small heap, no UI), stopped at the module's end.
    When the spark-s3 jars are installed it also reads s3a:// from the module's moto server
    (spark.jars must be set before the JVM starts, so it is this one session)."""
    major = _java_major()
    if major is None:
        pytest.skip("Spark needs Java: no java on PATH or under JAVA_HOME")
    if major < 17:
        pytest.skip(f"pyspark 4 needs Java 17 or newer, found Java {major}")
    pytest.importorskip("pyspark", reason="pyspark is not installed "
                        "(pip install -r tests/interop/requirements.txt)")
    from pyspark.sql import SparkSession
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    jars, _ = spark_s3a_jars()
    builder = (SparkSession.builder.master("local[1]").appName("strata-parquet-export")
               .config("spark.driver.memory", "512m")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
               .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC"))
    if jars:
        builder = builder.config("spark.jars", jars).config(map=s3a_conf(s3_server))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark_s3a(spark):
    """The Spark session, for a test that reads s3a:// (skips without the spark-s3 jars)."""
    _, why_not = spark_s3a_jars()
    if why_not:
        pytest.skip(why_not)
    return spark


def rows_from_spark(df) -> list[tuple]:
    """(partition, offset, key, value, headers, timestamp ms) per row, like rows_from_arrow;
    the timestamp as epoch millis so no time zone is involved."""
    rows = df.selectExpr("partition", "offset", "key", "value", "headers",
                         "unix_millis(timestamp) AS ts").orderBy("partition", "offset").collect()

    def b(v):  # Spark hands binary columns back as bytearrays
        return None if v is None else bytes(v)
    return [(r["partition"], r["offset"], b(r["key"]), b(r["value"]),
             [(h["key"], b(h["value"])) for h in r["headers"]], r["ts"]) for r in rows]


def test_export_reads_back_exactly_in_spark_with_hive_partition_discovery(
        spark, exported_topic, tmp_path):
    b, topic, produced, last = exported_topic
    out = tmp_path / "spark"
    run_export(b, topic, str(out))
    ends = checkpoint_ends(lambda rel: json.loads((out / rel).read_text()), topic)

    # The whole export, partition columns discovered from topic=/partition= directories
    # (_checkpoint.json is skipped: Spark ignores files starting with '_').
    df = spark.read.parquet(str(out))
    types = dict(df.dtypes)
    assert types["topic"] == "string" and types["partition"] == "int", df.dtypes
    assert types["offset"] == "bigint" and types["timestamp"] == "timestamp", df.dtypes
    assert types["key"] == "binary" and types["value"] == "binary", df.dtypes
    assert types["headers"] == "array<struct<key:string,value:binary>>", df.dtypes
    assert df.select("topic").distinct().collect()[0]["topic"] == topic
    assert df.count() == df.select("partition", "offset").distinct().count()
    assert_exact(rows_from_spark(df), produced, ends, last, "spark")

    # docs/export.md's line: one topic's directory, filtered on offset.
    since = spark.read.parquet(str(out / f"topic={topic}")).where("offset >= 1000")
    got = sorted((r["partition"], r["offset"]) for r in since.select("partition", "offset").collect())
    want = sorted((p, o) for (p, o) in produced.records if o >= 1000 and o < ends[p])
    assert [k for k in got if k in produced.records] == want
    assert all(o >= 1000 for _, o in got)


def test_export_to_s3_reads_back_exactly_in_spark_over_s3a(spark_s3a, exported_topic, s3_server):
    spark = spark_s3a
    b, topic, produced, last = exported_topic
    prefix = f"spark-{uuid.uuid4().hex[:6]}"
    run_export(b, topic, f"s3://{s3_server.bucket}/{prefix}")

    def read_json(rel):
        return json.loads(s3_server.client.get_object(
            Bucket=s3_server.bucket, Key=f"{prefix}/{rel}")["Body"].read())
    ends = checkpoint_ends(read_json, topic)

    # The whole export from the bucket, topic and partition discovered from the key prefixes
    # (the _checkpoint.json objects are skipped like the local files).
    df = spark.read.parquet(f"s3a://{s3_server.bucket}/{prefix}")
    types = dict(df.dtypes)
    assert types["topic"] == "string" and types["partition"] == "int", df.dtypes
    assert types["offset"] == "bigint" and types["timestamp"] == "timestamp", df.dtypes
    assert types["headers"] == "array<struct<key:string,value:binary>>", df.dtypes
    assert [r["topic"] for r in df.select("topic").distinct().collect()] == [topic]
    assert df.count() == df.select("partition", "offset").distinct().count()
    assert_exact(rows_from_spark(df), produced, ends, last, "spark over s3a")

    # docs/export.md's line: one topic's prefix, filtered on offset.
    since = spark.read.parquet(f"s3a://{s3_server.bucket}/{prefix}/topic={topic}").where(
        "offset >= 1000")
    got = sorted((r["partition"], r["offset"]) for r in since.select("partition", "offset").collect())
    want = sorted((p, o) for (p, o) in produced.records if o >= 1000 and o < ends[p])
    assert [k for k in got if k in produced.records] == want
    assert all(o >= 1000 for _, o in got)


VALUE_SCHEMA = {"fields": [
    {"name": "id", "type": "long"},
    {"name": "n", "type": "int"},
    {"name": "amount", "type": "double"},
    {"name": "ts", "type": "timestamp_ms"},
    {"name": "ok", "type": "boolean", "nullable": True},
    {"name": "tags", "type": "string", "nullable": True},
]}


def json_value(i: int) -> tuple[bytes | None, str]:
    """The i-th value of the typed-columns test and how it should decode."""
    kind = i % 6
    if kind == 0:
        return json.dumps({"id": i, "n": -i, "amount": i + 0.25, "ts": T0 + i, "ok": i % 4 == 0,
                           "tags": f"t{i}", "extra": [1, 2]}).encode(), "typed"
    if kind == 1:  # nullable fields absent; nested JSON kept as text; an RFC 3339 time
        return json.dumps({"id": i, "n": i, "amount": i, "ts": "2023-11-14T22:13:20.007Z",
                           "tags": {"a": [i]}}).encode(), "typed"
    if kind == 2:
        return b"not json %d" % i, "not_json"
    if kind == 3:  # id of the wrong type, n out of int range
        return json.dumps({"id": str(i), "n": 2**40, "amount": 1.5, "ts": T0}).encode(), "mismatched"
    if kind == 4:  # a required field missing
        return json.dumps({"n": 1, "amount": 2, "ts": T0}).encode(), "mismatched"
    return None, "null"


def test_value_schema_decodes_json_values_into_typed_columns_next_to_the_raw_value(
        exported_topic, tmp_path):
    from helpers import produce
    b = exported_topic[0]
    topic = f"export-json-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, partitions=1, config=REMOTE_TOPIC_CONFIG)
    records = [json_value(i) for i in range(300)]
    delivered, _ = produce(b.bootstrap, topic, [{"value": v, "partition": 0} for v, _ in records])
    in_order = sorted(delivered, key=lambda d: d.offset)
    assert [d.value for d in in_order] == [v for v, _ in records]
    by_offset = {d.offset: records[i] for i, d in enumerate(in_order)}
    seal_records(b, topic, {0: max(by_offset)})
    wait_for_high_watermark_checkpoint(b, topic, [0])
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(VALUE_SCHEMA))
    out = tmp_path / "typed"
    r = run_export(b, topic, str(out), "--value-schema", str(schema_file))

    t = ds.dataset(out, format="parquet", partitioning="hive",
                   exclude_invalid_files=True).to_table().sort_by("offset")
    s = t.schema
    assert s.field("value").type == pa.binary()  # the raw value stays
    assert [(f.name, f.type) for f in s if f.name.startswith("value_")] == [
        ("value_id", pa.int64()), ("value_n", pa.int32()), ("value_amount", pa.float64()),
        ("value_ts", pa.timestamp("ms", tz="UTC")), ("value_ok", pa.bool_()),
        ("value_tags", pa.string())]
    cols = t.to_pydict()
    ts_ms = t.column("value_ts").cast(pa.int64()).to_pylist()
    offsets = cols["offset"]
    assert offsets[:len(by_offset)] == sorted(by_offset), "a record is missing"
    fillers = 0
    for row, o in enumerate(offsets):
        typed = {k: cols["value_" + k][row] for k in ("id", "n", "amount", "ok", "tags")}
        typed["ts"] = ts_ms[row]
        if o not in by_offset:
            assert cols["value"][row].startswith(b"filler:")
            assert set(typed.values()) == {None}
            fillers += 1
            continue
        raw, kind = by_offset[o]
        i = json.loads(raw)["id"] if kind == "typed" else None
        assert cols["value"][row] == raw, o
        if kind == "typed" and i % 6 == 0:
            assert typed == {"id": i, "n": -i, "amount": i + 0.25, "ts": T0 + i,
                             "ok": i % 4 == 0, "tags": f"t{i}"}, o
        elif kind == "typed":
            assert typed == {"id": i, "n": i, "amount": float(i), "ts": 1_700_000_000_007,
                             "ok": None, "tags": json.dumps({"a": [i]}, separators=(",", ":"))}, o
        elif kind == "mismatched" and b'"id"' in raw:
            assert typed == {"id": None, "n": None, "amount": 1.5, "ts": T0, "ok": None,
                             "tags": None}, o
        elif kind == "mismatched":
            assert typed == {"id": None, "n": 1, "amount": 2.0, "ts": T0, "ok": None,
                             "tags": None}, o
        else:  # not JSON, or a null value
            assert set(typed.values()) == {None}, o
    kinds = [k for _, k in by_offset.values()]
    not_json = kinds.count("not_json") + fillers
    assert (f"{not_json} values not JSON objects, {kinds.count('mismatched')} not matching"
            in r.stdout), r.stdout

    # A schema that cannot be read is refused before anything is written.
    bad = tmp_path / "bad.json"
    bad.write_text('{"fields": [{"name": "x", "type": "decimal"}]}')
    r2 = run_export(b, topic, str(tmp_path / "never"), "--value-schema", str(bad), check=False)
    assert r2.returncode != 0 and "unknown type 'decimal'" in r2.stderr, r2.stderr
    assert not (tmp_path / "never").exists()


def test_continuous_export_backfills_remote_data_and_follows_new_uploads(
        exported_topic, s3_server):
    """strata.export.parquet=true on a topic that already has remote data: the tiering task
    exports what is remote (backfill), then each segment it uploads afterwards. Last in this
    module: it produces more records to the shared topic."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    from helpers import admin, produce

    b, topic, produced, last = exported_topic
    prefix = f"continuous-{uuid.uuid4().hex[:6]}"
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("strata.export.parquet", "true",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("strata.export.parquet.target", f"s3://{s3_server.bucket}/{prefix}",
                    incremental_operation=AlterConfigOpType.SET),
    ])
    admin(b.bootstrap).incremental_alter_configs([res])[res].result(timeout=30)

    def read_json(rel):
        return json.loads(s3_server.client.get_object(
            Bucket=s3_server.bucket, Key=f"{prefix}/{rel}")["Body"].read())

    def ends_now():
        try:
            return checkpoint_ends(read_json, topic)
        except Exception:
            return None

    # Backfill: every tracked record is exported without producing anything new.
    deadline = time.monotonic() + 60
    while not (ends_now() and all(e > last[p] for p, e in ends_now().items())):
        assert time.monotonic() < deadline, f"no backfill within 60s: {ends_now()}\n{b.log_tail(30)}"
        time.sleep(0.5)

    # New records: exported once their segment is sealed and uploaded.
    before = ends_now()
    more, _ = produce(b.bootstrap, topic, [{"value": b"late-%d" % i, "partition": i % PARTS}
                                           for i in range(200)])
    newest = {p: max(d.offset for d in more if d.partition == p) for p in range(PARTS)}
    seal_records(b, topic, newest)
    deadline = time.monotonic() + 60
    while not all(e > newest[p] for p, e in (ends_now() or {}).items()):
        assert time.monotonic() < deadline, f"new records not exported: {ends_now()} vs {newest}"
        time.sleep(0.5)
    assert all(ends_now()[p] > before[p] for p in range(PARTS))

    from pyarrow import fs
    s3 = fs.S3FileSystem(access_key=s3_server.access_key, secret_key=s3_server.secret_key,
                         region=s3_server.region, scheme="http",
                         endpoint_override=s3_server.endpoint.removeprefix("http://"))
    table = ds.dataset(f"{s3_server.bucket}/{prefix}", filesystem=s3, format="parquet",
                       partitioning="hive", exclude_invalid_files=True).to_table(
        columns=["partition", "offset", "key", "value", "headers", "timestamp"])
    rows = rows_from_arrow(table)
    offsets = [(r[0], r[1]) for r in rows]
    assert len(offsets) == len(set(offsets)), "duplicates in the continuous export"
    tracked = [r for r in rows if (r[0], r[1]) in produced.records]
    assert tracked == expected_rows(produced, {p: last[p] + 1 for p in range(PARTS)})
    late = {(d.partition, d.offset): d.value for d in more}
    got_late = {(r[0], r[1]): r[3] for r in rows if (r[0], r[1]) in late}
    assert got_late == late

    # /metrics: files and records written, and no lag once caught up.
    assert b.metric("strata_export_files_total") >= 1
    assert b.metric("strata_export_records_total") >= len(tracked) + len(late)
    assert b.metric("strata_export_bytes_total") > 0
    assert b.metric("strata_export_errors_total") == 0

    def lags():
        return {(p, unit): b.metric(f"strata_export_lag_{unit}",
                                    f'{{topic="{topic}",partition="{p}"}}')
                for p in range(PARTS) for unit in ("records", "seconds")}
    deadline = time.monotonic() + 30
    while any(lags().values()):
        assert time.monotonic() < deadline, f"export lag not 0 within 30s: {lags()}"
        time.sleep(0.5)


def test_records_only_in_the_active_segment_are_exported_and_an_open_transaction_holds_back_the_rest(
        broker_factory, topic_name, tmp_path):
    """Nothing sealed: every record is in the active segment, and all of it is exported.
    A transaction left open stops the next run at its first record; with nothing exportable
    the command says why and fails; once it commits, a re-run exports the rest."""
    b = broker_factory(props={"log.flush.offset.checkpoint.interval.ms": "200"})
    create_topic(b.bootstrap, topic_name, partitions=1)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, **QUIET})
    for i in range(20_000):
        p.produce(topic_name, key=b"k%d" % i, value=b"v%d" % i, partition=0)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    wait_for_high_watermark_checkpoint(b, topic_name, [0])
    out = tmp_path / "export"
    r = run_export(b, topic_name, str(out))
    assert "exported 20000 records" in r.stdout, r.stdout
    con = duckdb.connect()
    glob = str(out / "topic=*" / "partition=*" / "*.parquet")
    n, lo, hi, distinct = con.sql(
        f"SELECT count(*), min(\"offset\"), max(\"offset\"), count(DISTINCT \"offset\") "
        f"FROM read_parquet('{glob}')").fetchall()[0]
    assert (n, lo, hi, distinct) == (20_000, 0, 19_999, 20_000)
    (v,) = con.sql(f"SELECT value FROM read_parquet('{glob}') WHERE \"offset\" = 12345").fetchall()[0]
    assert v == b"v12345"

    txn = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": topic_name + "-tx",
                    **QUIET})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(5):
        txn.produce(topic_name, value=b"t%d" % i, partition=0)
    assert txn.flush(30) == 0
    for i in range(10):
        p.produce(topic_name, value=b"after%d" % i, partition=0)
    assert p.flush(30) == 0
    wait_for_high_watermark_checkpoint(b, topic_name, [0])
    r = run_export(b, topic_name, str(out), check=False)
    assert r.returncode != 0, r.stdout
    assert "offsets 20000..20015 not exported: in a transaction still open" in r.stdout, r.stdout
    assert "nothing exported" in r.stderr, r.stderr

    txn.commit_transaction(30)
    wait_for_high_watermark_checkpoint(b, topic_name, [0])
    r = run_export(b, topic_name, str(out))
    assert "exported 15 records" in r.stdout, r.stdout
    (n, distinct) = con.sql(
        f"SELECT count(*), count(DISTINCT \"offset\") FROM read_parquet('{glob}')").fetchall()[0]
    assert n == distinct == 20_015
