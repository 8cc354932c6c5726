"""Reads an Iceberg table of `strata export --iceberg` with Spark and prints it as JSON on
stdout, for test_iceberg_export.py. Run with the spark-iceberg venv's python (pyspark 4.1,
which Iceberg's Spark runtime on Maven Central supports):

    python iceberg_spark_reader.py <table path> <iceberg-spark-runtime jar> [<snapshot id>]

Output: {"dtypes": [[name, type], ...], "rows": [[partition, offset, key, value, headers,
timestamp ms], ...], "snapshots": [snapshot ids]}; key, value and header values in base64.
"""

import base64
import json
import os
import sys
import tempfile

from pyspark.sql import SparkSession


def b64(v):
    return None if v is None else base64.b64encode(bytes(v)).decode()


def main() -> None:
    table, jar = sys.argv[1], sys.argv[2]
    version = sys.argv[3] if len(sys.argv) > 3 else None
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    local = tempfile.mkdtemp(prefix="spark-iceberg-")
    spark = (SparkSession.builder.master("local[1]").appName("strata-iceberg-read")
             .config("spark.jars", jar)
             .config("spark.sql.extensions",
                     "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
             .config("spark.driver.memory", "512m")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "1")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.local.dir", local)
             .config("spark.sql.warehouse.dir", os.path.join(local, "warehouse"))
             .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        reader = spark.read.format("iceberg")
        if version:
            reader = reader.option("versionAsOf", version)
        df = reader.load(table)
        rows = df.selectExpr("partition", "offset", "key", "value", "headers",
                             "unix_millis(timestamp) AS ts").collect()
        snapshots = [r["snapshot_id"] for r in
                     spark.read.format("iceberg").load(table + "#snapshots")
                     .select("snapshot_id").collect()]
        print(json.dumps({
            "dtypes": df.dtypes,
            "rows": [[r["partition"], r["offset"], b64(r["key"]), b64(r["value"]),
                      [[h["key"], b64(h["value"])] for h in r["headers"]], r["ts"]]
                     for r in rows],
            "snapshots": snapshots,
        }))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
