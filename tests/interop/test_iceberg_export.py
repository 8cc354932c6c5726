"""Iceberg tables over the export (`strata export --iceberg`): records produced with a real
client to a tiered topic (keys, null values, headers, timestamps over four days, a committed
and an aborted transaction) are exported as an Apache Iceberg table, in a directory and in the
S3-compatible test server (moto), and read back with pyiceberg and DuckDB's iceberg extension
(loaded by path from its PyPI package), which must see exactly the produced records: every
acknowledged, non-aborted record once, at its offset, nothing else. The exporter is killed at
each of its durable steps (a file landed without its checkpoint, every file checkpointed
without the table commit, manifests written without metadata, metadata created without the
version hint) and re-run: the table still holds every record exactly once. A second export
after more records adds one snapshot; the first stays readable (time travel).

Strata only: the reference Kafka broker has no export.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from helpers import create_topic
from test_parquet_export import (Produced, _binary, kill_between_file_and_checkpoint,
                                 run_export, wait_for_high_watermark_checkpoint)
from test_tiering import (REMOTE_TOPIC_CONFIG, seal_records, tiered_broker_props,
                          wait_until_remote_only)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
duckdb = pytest.importorskip("duckdb")
pyiceberg_table = pytest.importorskip("pyiceberg.table")
expressions = pytest.importorskip("pyiceberg.expressions")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("STRATA_TEST_TARGET", "strata").strip().lower() == "kafka",
        reason="the reference Kafka broker has no export"),
]

PARTS = 2
RECORDS = 3000
T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
STEP_MS = 97_000        # 3000 records over about 3.4 days
DAY_MS = 86_400_000


def produce(bootstrap: str, topic: str, produced: Produced, start: int, n: int) -> None:
    rnd = random.Random(start)
    p, cb = produced.producer(bootstrap, {"linger.ms": 5, "compression.type": "zstd"})
    for i in range(start, start + n):
        headers = [("i", b"%d" % i)] + ([("dup", b"a"), ("dup", None)] if i % 3 == 0 else [])
        p.produce(topic, key=None if i % 5 == 0 else b"k%d" % (i % 97),
                  value=None if i % 13 == 0 else b"v%d:" % i + rnd.randbytes(rnd.randint(0, 64)),
                  headers=headers, timestamp=T0 + i * STEP_MS, partition=i % PARTS,
                  on_delivery=cb(headers))
        p.poll(0)
    assert p.flush(60) == 0


def produce_transactions(bootstrap: str, topic: str, produced: Produced, start: int) -> int:
    i = start
    for outcome in ["commit", "abort"]:
        p, cb = produced.producer(bootstrap, {"transactional.id": f"ice-{uuid.uuid4().hex[:8]}",
                                              "linger.ms": 5}, into_aborted=outcome == "abort")
        p.init_transactions(30)
        p.begin_transaction()
        for _ in range(200):
            h = [("txn", outcome.encode())]
            p.produce(topic, key=b"t%d" % i, value=b"txn:%d" % i, headers=h,
                      timestamp=T0 + i * STEP_MS, partition=i % PARTS, on_delivery=cb(h))
            p.poll(0)
            i += 1
        # librdkafka purges unsent records on abort: flush so they reach the log first.
        assert p.flush(60) == 0
        if outcome == "commit":
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    return i


@pytest.fixture(scope="module")
def iceberg_topic(s3_server, module_broker_factory):
    """A tiered 2-partition topic whose records span four days, sealed, partly uploaded.
    Returns (broker, topic, produced, next index)."""
    props = tiered_broker_props(s3_server.broker_props("iceberg-src"))
    props["log.flush.offset.checkpoint.interval.ms"] = "200"
    b = module_broker_factory(name="iceberg", props=props)
    topic = f"ice-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, partitions=PARTS, config=REMOTE_TOPIC_CONFIG)
    produced = Produced()
    produce(b.bootstrap, topic, produced, 0, RECORDS)
    nxt = produce_transactions(b.bootstrap, topic, produced, RECORDS)
    last = {p: max(o for (q, o) in list(produced.records) + list(produced.aborted) if q == p)
            for p in range(PARTS)}
    seal_records(b, topic, {p: o + 1 for p, o in last.items()})
    wait_until_remote_only(b, topic, {p: 0 for p in range(PARTS)})
    wait_for_high_watermark_checkpoint(b, topic, range(PARTS))
    return b, topic, produced, nxt


def table_rows(arrow_table) -> dict[tuple[int, int], tuple]:
    """(partition, offset) -> (key, value, headers, timestamp ms) of every row; duplicates
    fail."""
    cols = arrow_table.to_pydict()
    ts = arrow_table.column("timestamp").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    out = {}
    for i, us in enumerate(ts.to_pylist()):
        k = (cols["partition"][i], cols["offset"][i])
        assert k not in out, f"{k} is in the table twice"
        out[k] = (cols["key"][i], cols["value"][i],
                  [(h["key"], h["value"]) for h in cols["headers"][i]], us // 1000)
    return out


def assert_exactly_produced(rows: dict, produced: Produced, reader: str) -> None:
    """Every tracked record is in the table with its key, value, headers and timestamp; no
    aborted record is; anything else is a filler (produced to seal the segments)."""
    missing = [k for k in produced.records if k not in rows]
    assert not missing, f"{reader}: {len(missing)} records missing, e.g. {sorted(missing)[:5]}"
    for k, want in produced.records.items():
        assert rows[k] == want, f"{reader}: {k} differs\n got {rows[k]}\nwant {want}"
    assert not set(rows) & produced.aborted, f"{reader}: aborted records in the table"
    for (p, o), (_, v, _, _) in rows.items():
        if (p, o) not in produced.records:
            assert v.startswith(b"filler:"), f"{reader}: stray row {(p, o)}"


def static_table(metadata: str, properties: dict | None = None):
    return pyiceberg_table.StaticTable.from_metadata(metadata, properties=properties or {})


def current_metadata(table_dir: Path) -> str:
    hint = (table_dir / "metadata" / "version-hint.text").read_text().strip()
    return str(table_dir / "metadata" / f"v{hint}.metadata.json")


def duckdb_with_iceberg(s3_server=None):
    """DuckDB with its avro and iceberg extensions (and httpfs for S3) LOADed by path from
    their PyPI packages: no download from DuckDB's extension repository."""
    con = duckdb.connect()
    names = ["avro", "iceberg"] + (["httpfs"] if s3_server else [])
    for name in names:
        try:
            mod = __import__(f"duckdb_extension_{name}")
        except ModuleNotFoundError:
            pytest.fail(f"duckdb-extension-{name} is not installed: "
                        "pip install -r tests/interop/requirements.txt")
        path = (Path(mod.__file__).parent / "extensions" / f"v{duckdb.__version__}"
                / f"{name}.duckdb_extension")
        assert path.is_file(), f"no {name} extension for DuckDB {duckdb.__version__} at {path}"
        con.execute(f"LOAD '{path}'")
    if s3_server:
        con.execute(f"SET s3_endpoint = '{s3_server.endpoint.removeprefix('http://')}'")
        con.execute("SET s3_url_style = 'path'")
        con.execute("SET s3_use_ssl = false")
        con.execute(f"SET s3_region = '{s3_server.region}'")
        con.execute(f"SET s3_access_key_id = '{s3_server.access_key}'")
        con.execute(f"SET s3_secret_access_key = '{s3_server.secret_key}'")
    return con


def duckdb_rows(con, source: str) -> dict:
    t = con.sql(f"SELECT partition, \"offset\", key, value, headers, timestamp "
                f"FROM iceberg_scan('{source}')").to_arrow_table()
    return table_rows(t)


def test_iceberg_table_reads_back_exactly_in_pyiceberg_and_duckdb(iceberg_topic, tmp_path):
    b, topic, produced, _ = iceberg_topic
    out = tmp_path / "lake"
    r = run_export(b, topic, str(out), "--iceberg")
    assert "iceberg: committed" in r.stdout, r.stdout
    table_dir = out / f"topic={topic}"
    metadata = current_metadata(table_dir)

    t = static_table(metadata)
    schema = {f.name: (f.field_id, str(f.field_type), f.required) for f in t.schema().fields}
    assert schema["offset"] == (3, "long", True)
    assert schema["timestamp"] == (4, "timestamptz", True)
    assert schema["key"] == (6, "binary", False)
    assert [(f.name, str(f.transform)) for f in t.spec().fields] == [
        ("partition", "identity"), ("timestamp_day", "day")]
    rows = table_rows(t.scan().to_arrow())
    assert_exactly_produced(rows, produced, "pyiceberg")

    # Each data file holds one Kafka partition and one day, as its partition tuple says.
    tasks = list(t.scan().plan_files())
    days = set()
    for task in tasks:
        part, day = task.file.partition[0], task.file.partition[1]
        days.add(day)
        f = pq.read_table(task.file.file_path, columns=["partition", "timestamp"])
        assert set(f.column("partition").to_pylist()) == {part}
        got_days = {int(v.timestamp() * 1000) // DAY_MS for v in f.column("timestamp").to_pylist()}
        assert got_days == {day}, task.file.file_path
    assert len(days) >= 4, days

    # Partition pruning: a filter on Kafka partition and time plans only matching files.
    day0 = (T0 + 24 * 3600 * 1000) // DAY_MS
    flt = expressions.And(expressions.EqualTo("partition", 1),
                          expressions.GreaterThanOrEqual("timestamp", (day0 + 1) * DAY_MS * 1000))
    pruned = list(t.scan(row_filter=flt).plan_files())
    assert 0 < len(pruned) < len(tasks)
    assert all(task.file.partition[0] == 1 for task in pruned)
    subset = table_rows(t.scan(row_filter=flt).to_arrow())
    want = {k for k, v in rows.items() if k[0] == 1 and v[3] >= (day0 + 1) * DAY_MS}
    assert set(subset) == want

    con = duckdb_with_iceberg()
    assert_exactly_produced(duckdb_rows(con, str(table_dir)), produced, "duckdb")
    n_snapshots = len(con.sql(f"SELECT * FROM iceberg_snapshots('{table_dir}')").fetchall())
    assert n_snapshots == 1

    # A re-run commits nothing and adds no snapshot.
    r2 = run_export(b, topic, str(out), "--iceberg")
    assert "nothing new to commit" in r2.stdout, r2.stdout
    assert current_metadata(table_dir) == metadata


def spark_iceberg() -> tuple[Path, str] | str:
    """(python of the spark-iceberg venv, Iceberg's Spark runtime jar), or why not: both come
    from scripts/install-test-deps.sh (pyspark 4.1 in its own venv, as Iceberg's runtime on
    Maven Central is built for Spark 4.1), and Spark needs Java 17+."""
    from test_parquet_export import _java_major
    major = _java_major()
    if major is None or major < 17:
        return f"Spark needs Java 17+ (found {major})"
    cache = Path(os.environ.get("STRATA_CACHE", Path.home() / ".cache" / "strata"))
    python = cache / "spark-iceberg-venv" / "bin" / "python"
    if not python.exists():
        return f"{python} is missing: run scripts/install-test-deps.sh"
    script = Path(__file__).resolve().parents[2] / "scripts" / "java-classpath.sh"
    cp = subprocess.run(["bash", str(script), "spark-iceberg"], capture_output=True, text=True)
    if cp.returncode != 0 or not cp.stdout.strip():
        return f"no Iceberg Spark runtime jar: {cp.stderr.strip()}"
    return python, cp.stdout.strip().replace(":", ",")


def spark_read(table_dir: Path, snapshot_id: int | None = None) -> dict:
    found = spark_iceberg()
    if isinstance(found, str):
        pytest.skip(found)
    python, jar = found
    reader = Path(__file__).resolve().parent / "iceberg_spark_reader.py"
    cmd = [str(python), str(reader), str(table_dir), jar]
    if snapshot_id is not None:
        cmd.append(str(snapshot_id))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"Spark failed ({r.returncode}):\n{r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def spark_rows(out: dict) -> dict:
    import base64

    def raw(v):
        return None if v is None else base64.b64decode(v)
    rows = {}
    for p, o, k, v, headers, ts in out["rows"]:
        assert (p, o) not in rows, f"spark: {(p, o)} is in the table twice"
        rows[(p, o)] = (raw(k), raw(v), [(hk, raw(hv)) for hk, hv in headers], ts)
    return rows


def test_iceberg_table_reads_back_exactly_in_spark(iceberg_topic, tmp_path):
    b, topic, produced, _ = iceberg_topic
    out = tmp_path / "spark"
    run_export(b, topic, str(out), "--iceberg")
    table_dir = out / f"topic={topic}"
    got = spark_read(table_dir)
    types = dict(got["dtypes"])
    assert types["offset"] == "bigint" and types["timestamp"] == "timestamp", got["dtypes"]
    assert types["headers"] == "array<struct<key:string,value:binary>>", got["dtypes"]
    rows = spark_rows(got)
    assert_exactly_produced(rows, produced, "spark")
    assert rows == table_rows(static_table(current_metadata(table_dir)).scan().to_arrow())
    assert len(got["snapshots"]) == 1


def test_more_records_add_a_snapshot_and_the_first_stays_readable(iceberg_topic, tmp_path):
    b, topic, produced, nxt = iceberg_topic
    out = tmp_path / "incremental"
    run_export(b, topic, str(out), "--iceberg")
    table_dir = out / f"topic={topic}"
    first = static_table(current_metadata(table_dir))
    first_rows = table_rows(first.scan().to_arrow())
    first_id = first.current_snapshot().snapshot_id

    more = Produced()
    produce(b.bootstrap, topic, more, nxt, 400)
    # The later tests export these too.
    produced.records.update(more.records)
    wait_for_high_watermark_checkpoint(b, topic, range(PARTS))
    r = run_export(b, topic, str(out), "--iceberg")
    assert "iceberg: committed" in r.stdout, r.stdout
    t = static_table(current_metadata(table_dir))
    assert len(t.metadata.snapshots) == 2
    rows = table_rows(t.scan().to_arrow())
    for k, v in more.records.items():
        assert rows[k] == v
    assert {k: v for k, v in rows.items() if k in first_rows} == first_rows
    assert len(rows) == len(first_rows) + len(more.records)
    # Time travel: the first snapshot still reads as it was.
    assert table_rows(t.scan(snapshot_id=first_id).to_arrow()) == first_rows
    con = duckdb_with_iceberg()
    assert len(duckdb_rows(con, str(table_dir))) == len(rows)
    # Spark (where installed) reads the first snapshot as it was.
    if not isinstance(spark_iceberg(), str):
        old = spark_read(table_dir, first_id)
        assert spark_rows(old) == first_rows and len(old["snapshots"]) == 2


@pytest.mark.parametrize("crash", ["file-landed", "export.checkpointed",
                                   "iceberg.manifests_written", "iceberg.metadata_committed"])
def test_exporter_killed_at_each_durable_step_leaves_every_record_in_the_table_once(
        iceberg_topic, tmp_path, crash):
    b, topic, produced, _ = iceberg_topic
    out = tmp_path / "crash"
    cmd = [str(_binary()), "export", "--topic", topic, "--out", str(out), "--iceberg",
           "--parallelism", "1", "--file-bytes", "20000", "--config", str(b.config_path)]
    if crash == "file-landed":
        kill_between_file_and_checkpoint(cmd, out)
    else:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "STRATA_FAILPOINT": crash})
        assert r.returncode != 0 and f"crash point {crash}" in r.stderr, (r.returncode, r.stderr)
    table_dir = out / f"topic={topic}"
    if crash == "iceberg.metadata_committed":
        # The new version exists; the hint still names the empty table.
        assert (table_dir / "metadata" / "v2.metadata.json").is_file()
        assert (table_dir / "metadata" / "version-hint.text").read_text().strip() == "1"
    else:
        assert not (table_dir / "metadata" / "v2.metadata.json").exists()

    run_export(b, topic, str(out), "--iceberg")
    metadata = current_metadata(table_dir)
    t = static_table(metadata)
    rows = table_rows(t.scan().to_arrow())
    assert_exactly_produced(rows, produced, f"pyiceberg after {crash}")
    con = duckdb_with_iceberg()
    assert duckdb_rows(con, str(table_dir)) == rows
    # Every landed file is in the table once, and nothing else is.
    in_table = sorted(os.path.realpath(task.file.file_path) for task in t.scan().plan_files())
    assert in_table == sorted(os.path.realpath(f) for f in table_dir.glob("partition=*/*.parquet"))


def test_iceberg_table_in_a_bucket_reads_back_exactly(iceberg_topic, s3_server):
    b, topic, produced, _ = iceberg_topic
    prefix = f"lake-{uuid.uuid4().hex[:6]}"
    r = run_export(b, topic, f"s3://{s3_server.bucket}/{prefix}", "--iceberg")
    assert "iceberg: committed" in r.stdout, r.stdout
    location = r.stdout.split("table metadata ")[-1].strip()
    assert location.startswith(f"s3://{s3_server.bucket}/{prefix}/topic={topic}/metadata/v")
    hint = s3_server.client.get_object(
        Bucket=s3_server.bucket,
        Key=f"{prefix}/topic={topic}/metadata/version-hint.text")["Body"].read().decode()
    assert location.endswith(f"/v{hint}.metadata.json")
    t = static_table(location, {
        "s3.endpoint": s3_server.endpoint, "s3.region": s3_server.region,
        "s3.access-key-id": s3_server.access_key, "s3.secret-access-key": s3_server.secret_key,
        "s3.path-style-access": "true"})
    rows = table_rows(t.scan().to_arrow())
    assert_exactly_produced(rows, produced, "pyiceberg over S3")
    con = duckdb_with_iceberg(s3_server)
    assert duckdb_rows(con, f"s3://{s3_server.bucket}/{prefix}/topic={topic}") == rows
    meta = json.loads(s3_server.client.get_object(
        Bucket=s3_server.bucket, Key=location.split(f"{s3_server.bucket}/", 1)[1])["Body"].read())
    offsets = json.loads(meta["snapshots"][-1]["summary"]["strata.export.next-offsets"])
    assert set(offsets) == {str(p) for p in range(PARTS)}


def test_continuous_export_commits_each_upload_to_the_table(iceberg_topic, s3_server):
    """strata.export.parquet=true with strata.export.iceberg=true: the tiering task exports
    what is remote into the table (backfill), commits it, then does the same for each segment
    it uploads afterwards. Last in this module: it produces more records to the shared topic."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    from helpers import admin

    b, topic, produced, nxt = iceberg_topic
    # Earlier tests may have produced records still in the active segment, which continuous
    # export (remote segments only) does not read: seal them so they are uploaded.
    upto = {p: max(o for (q, o) in produced.records if q == p) for p in range(PARTS)}
    seal_records(b, topic, {p: o + 1 for p, o in upto.items()})
    prefix = f"continuous-{uuid.uuid4().hex[:6]}"
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in [("strata.export.parquet", "true"),
                            ("strata.export.iceberg", "true"),
                            ("strata.export.parquet.target", f"s3://{s3_server.bucket}/{prefix}")]
    ])
    admin(b.bootstrap).incremental_alter_configs([res])[res].result(timeout=30)
    props = {"s3.endpoint": s3_server.endpoint, "s3.region": s3_server.region,
             "s3.access-key-id": s3_server.access_key,
             "s3.secret-access-key": s3_server.secret_key, "s3.path-style-access": "true"}

    def table_now():
        try:
            hint = s3_server.client.get_object(
                Bucket=s3_server.bucket,
                Key=f"{prefix}/topic={topic}/metadata/version-hint.text")["Body"].read().decode()
        except Exception:
            return None
        t = static_table(
            f"s3://{s3_server.bucket}/{prefix}/topic={topic}/metadata/v{hint}.metadata.json",
            props)
        return t if t.current_snapshot() else None

    def wait_for(records: dict, what: str) -> dict:
        deadline = time.monotonic() + 90
        while True:
            t = table_now()
            rows = table_rows(t.scan().to_arrow()) if t else {}
            if all(k in rows for k in records):
                return rows
            assert time.monotonic() < deadline, (
                f"{what}: {sum(k in rows for k in records)} of {len(records)} records in the "
                f"table within 90s\n{b.log_tail(30)}")
            time.sleep(0.5)

    # Backfill: every tracked record is committed without producing anything new.
    rows = wait_for(produced.records, "backfill")
    assert_exactly_produced(rows, produced, "continuous backfill")

    # New records, over another two days: committed once their segment is uploaded.
    more = Produced()
    produce(b.bootstrap, topic, more, nxt + 1000, 300)
    produced.records.update(more.records)
    last = {p: max(o for (q, o) in more.records if q == p) for p in range(PARTS)}
    seal_records(b, topic, {p: o + 1 for p, o in last.items()})
    rows = wait_for(more.records, "new uploads")
    assert_exactly_produced(rows, produced, "continuous")
    t = table_now()
    assert len(t.metadata.snapshots) >= 2
    con = duckdb_with_iceberg(s3_server)
    assert duckdb_rows(con, f"s3://{s3_server.bucket}/{prefix}/topic={topic}") == rows


def _rest_catalog(tmp_path_factory, credential: str | None = None):
    """An Iceberg REST catalog: Iceberg's own RESTCatalogServlet over a JdbcCatalog on SQLite
    (tests/interop/iceberg_rest/RestServer.java, compiled here against the iceberg-rest jar
    set of scripts/install-test-deps.sh), on a free port; with `credential`
    (`<client_id>:<secret>`) it requires OAuth2 client credentials. Yields its URI; stopped
    by pid."""
    from conftest import free_port
    from test_parquet_export import _java_major
    major = _java_major()
    if major is None or major < 17:
        pytest.skip(f"the REST catalog needs Java 17+ (found {major})")
    script = Path(__file__).resolve().parents[2] / "scripts" / "java-classpath.sh"
    cp = subprocess.run(["bash", str(script), "iceberg-rest"], capture_output=True, text=True)
    if cp.returncode != 0 or not cp.stdout.strip():
        pytest.skip(f"no iceberg-rest jars: {cp.stderr.strip()}")
    jars = cp.stdout.strip()
    work = tmp_path_factory.mktemp("iceberg-rest")
    source = Path(__file__).resolve().parent / "iceberg_rest" / "RestServer.java"
    subprocess.run(["javac", "-cp", jars, "-d", str(work / "classes"), str(source)], check=True)
    port = free_port()
    log = open(work / "server.log", "w")
    proc = subprocess.Popen(["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp",
                             f"{work / 'classes'}:{jars}", "RestServer", str(port),
                             str(work / "data"), *([credential] if credential else [])],
                            stdout=log, stderr=subprocess.STDOUT)
    uri = f"http://127.0.0.1:{port}"
    try:
        import urllib.error
        import urllib.request
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/v1/config", timeout=2):
                    break
            except urllib.error.HTTPError:
                break  # it answers (401 without a token)
            except OSError:
                assert proc.poll() is None, (work / "server.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "the REST catalog did not start in 60s"
                time.sleep(0.2)
        yield uri
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def rest_catalog(tmp_path_factory):
    yield from _rest_catalog(tmp_path_factory)


OAUTH_CREDENTIAL = "strata-exporter:s3cret-for-tests"


@pytest.fixture(scope="module")
def oauth_rest_catalog(tmp_path_factory):
    """A REST catalog that requires OAuth2 client credentials (OAUTH_CREDENTIAL)."""
    yield from _rest_catalog(tmp_path_factory, OAUTH_CREDENTIAL)


def rest_table(uri: str, namespace: str, topic: str, credential: str | None = None):
    from pyiceberg.catalog.rest import RestCatalog
    props = {"credential": credential} if credential else {}
    return RestCatalog("strata-test", uri=uri, **props).load_table((namespace, topic))


@pytest.mark.parametrize("crash", [None, "iceberg.manifests_written",
                                   "iceberg.metadata_committed"])
def test_iceberg_table_committed_through_a_rest_catalog(iceberg_topic, rest_catalog, tmp_path,
                                                        crash):
    b, topic, produced, _ = iceberg_topic
    namespace = f"ns_{uuid.uuid4().hex[:6]}"
    out = tmp_path / "rest"
    args = ["--iceberg", "--iceberg-catalog", rest_catalog, "--iceberg-namespace", namespace]
    if crash:
        cmd = [str(_binary()), "export", "--topic", topic, "--out", str(out),
               "--config", str(b.config_path), *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "STRATA_FAILPOINT": crash})
        assert r.returncode != 0 and f"crash point {crash}" in r.stderr, (r.returncode, r.stderr)
        snapshots = rest_table(rest_catalog, namespace, topic).metadata.snapshots
        assert len(snapshots) == (1 if crash == "iceberg.metadata_committed" else 0)
    r = run_export(b, topic, str(out), *args)
    assert ("nothing new to commit" if crash == "iceberg.metadata_committed"
            else "iceberg: committed") in r.stdout, r.stdout
    t = rest_table(rest_catalog, namespace, topic)
    assert len(t.metadata.snapshots) == 1
    rows = table_rows(t.scan().to_arrow())
    assert_exactly_produced(rows, produced, f"pyiceberg through the REST catalog ({crash})")
    summary = t.metadata.snapshots[0].summary.additional_properties
    offsets = json.loads(summary["strata.export.next-offsets"])
    assert set(offsets) == {str(p) for p in range(PARTS)}
    # Every landed file is in the table once.
    in_table = sorted(os.path.realpath(task.file.file_path) for task in t.scan().plan_files())
    table_dir = out / f"topic={topic}"
    assert in_table == sorted(os.path.realpath(f) for f in table_dir.glob("partition=*/*.parquet"))
    # A re-run commits nothing.
    r = run_export(b, topic, str(out), *args)
    assert "nothing new to commit" in r.stdout, r.stdout
    assert len(rest_table(rest_catalog, namespace, topic).metadata.snapshots) == 1


def test_iceberg_export_authenticates_to_the_rest_catalog_with_oauth2_client_credentials(
        iceberg_topic, oauth_rest_catalog, tmp_path):
    """A catalog that wants OAuth2 (as Polaris and managed catalogs do): `strata export`
    exchanges STRATA_ICEBERG_CATALOG_CREDENTIAL for a bearer token and commits; a wrong secret
    fails with the token endpoint's answer, never the secret; pyiceberg, with the same
    credential, reads exactly the produced records."""
    b, topic, produced, _ = iceberg_topic
    namespace = f"ns_{uuid.uuid4().hex[:6]}"
    out = tmp_path / "oauth"
    cmd = [str(_binary()), "export", "--topic", topic, "--out", str(out),
           "--config", str(b.config_path), "--iceberg", "--iceberg-catalog",
           oauth_rest_catalog, "--iceberg-namespace", namespace]
    wrong = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={
        **os.environ, "STRATA_ICEBERG_CATALOG_CREDENTIAL": "strata-exporter:wrong-secret"})
    assert wrong.returncode != 0, wrong.stdout
    assert "OAuth2 token endpoint" in wrong.stderr and "401" in wrong.stderr, wrong.stderr
    assert "wrong-secret" not in wrong.stderr + wrong.stdout
    none = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert none.returncode != 0 and "401" in none.stderr, none.stderr
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={
        **os.environ, "STRATA_ICEBERG_CATALOG_CREDENTIAL": OAUTH_CREDENTIAL})
    assert r.returncode == 0 and "iceberg: committed" in r.stdout, (r.stdout, r.stderr)
    t = rest_table(oauth_rest_catalog, namespace, topic, OAUTH_CREDENTIAL)
    rows = table_rows(t.scan().to_arrow())
    assert_exactly_produced(rows, produced, "pyiceberg through the OAuth2 REST catalog")


def test_continuous_export_commits_through_a_rest_catalog_with_oauth2(
        broker_factory, oauth_rest_catalog, tmp_path, topic_name):
    """Continuous export (strata.export.parquet + strata.export.iceberg) with the broker's
    strata.export.iceberg.catalog.* settings: each upload is committed through the REST
    catalog, authenticated with OAuth2 client credentials; pyiceberg through the catalog reads
    exactly the produced records, backfill and later uploads alike."""
    from confluent_kafka.admin import NewTopic
    from helpers import admin

    namespace = f"ns_{uuid.uuid4().hex[:6]}"
    out = tmp_path / "continuous-rest"
    b = broker_factory(props={
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "strata.remote.store.url": (tmp_path / "store").resolve().as_uri(),
        "strata.export.iceberg.catalog.uri": oauth_rest_catalog,
        "strata.export.iceberg.catalog.namespace": namespace,
        "strata.export.iceberg.catalog.credential": OAUTH_CREDENTIAL,
    })
    config = {"remote.storage.enable": "true", "local.retention.bytes": "1",
              "internal.segment.bytes": "16384", "retention.ms": "-1",
              "strata.export.parquet": "true", "strata.export.iceberg": "true",
              "strata.export.parquet.target": str(out)}
    f = admin(b.bootstrap).create_topics([NewTopic(topic_name, PARTS, 1, config=config)])
    f[topic_name].result(timeout=30)
    produced = Produced()
    produce(b.bootstrap, topic_name, produced, 0, 400)
    last = {p: max(o for (q, o) in produced.records if q == p) for p in range(PARTS)}
    seal_records(b, topic_name, {p: o + 1 for p, o in last.items()})

    deadline = time.monotonic() + 90
    while True:
        try:
            t = rest_table(oauth_rest_catalog, namespace, topic_name, OAUTH_CREDENTIAL)
            rows = table_rows(t.scan().to_arrow()) if t.current_snapshot() else {}
        except Exception:  # noqa: BLE001 - not registered yet
            rows = {}
        if all(k in rows for k in produced.records):
            break
        assert time.monotonic() < deadline, (
            f"{sum(k in rows for k in produced.records)} of {len(produced.records)} records "
            f"in the table within 90s\n{b.log_tail(30)}")
        time.sleep(0.5)
    assert_exactly_produced(rows, produced, "continuous export through the OAuth2 REST catalog")
