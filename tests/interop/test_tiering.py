"""Tiered storage (remote.storage.enable): sealed segments move to an S3-compatible bucket
(moto_server, started by the ``s3_server`` fixture) or a ``file://`` store and are deleted
locally only after upload. Real clients still read every record from offset 0 once the early
segments exist only remotely, offsets-by-timestamp find remote records, and a broker started on
an empty log dir with the same store settings restores the topics and their records.

Strata only: the reference Kafka broker has no remote storage plugin configured.

Topics use ``internal.segment.bytes`` (a test-only escape hatch below ``segment.bytes``'s
1 MiB minimum) for 64 KiB segments and ``local.retention.bytes=1`` so that every sealed segment
leaves the local disk as soon as it is uploaded. Progress is observed in the partition
directory: the smallest ``<base offset>.log`` base offset is the local log start.
"""

from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_END, TopicPartition
from confluent_kafka.admin import ConfigResource

from helpers import (_consumer, admin, consume, create_topic, kp_consume, kp_require_codec,
                     produce, wait_for_topic, watermarks)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("STRATA_TEST_TARGET", "strata").strip().lower() == "kafka",
        reason="the reference Kafka broker has no remote storage plugin configured"),
]

PARTS = 2
N = 20_000
SEGMENT_BYTES = 65536
# How long the broker may take to upload sealed segments and delete them locally.
REMOTE_TIMEOUT_S = 30.0
CONSUME_TIMEOUT_S = 120.0

REMOTE_TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    "local.retention.bytes": "1",
    "internal.segment.bytes": str(SEGMENT_BYTES),
    "retention.ms": "-1",
}
# lz4 on the wire; batches well below the segment size (a batch never spans segments).
PRODUCE_CONF = {"compression.type": "lz4", "linger.ms": 5, "batch.size": 16384}

SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")


def tiered_broker_props(store: dict[str, str]) -> dict[str, str]:
    return {
        **store,
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "200",
        # Kafka deletes local segments in its retention check; run it as often as uploads.
        "log.retention.check.interval.ms": "200",
        # A restore bug must not hide behind an auto-created topic.
        "auto.create.topics.enable": "false",
    }


def file_store_props(root: Path) -> dict[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    return {"strata.remote.store.url": root.resolve().as_uri()}


# --------------------------------------------------------------------------- helpers

def keyed_records(n: int, seed: int) -> list[dict]:
    """n keyed records with varied, mostly incompressible values that name their index."""
    rnd = random.Random(seed)
    return [{"key": b"key-%d" % (i % 997),
             "value": b"%06d:" % i + rnd.randbytes(rnd.randint(20, 200))}
            for i in range(n)]


def local_log_start(broker, topic: str, partition: int) -> int | None:
    """Base offset of the oldest local segment, or None if the partition has none."""
    try:
        names = os.listdir(broker.partition_dir(topic, partition))
    except FileNotFoundError:
        return None
    bases = [int(m.group(1)) for m in map(SEGMENT_FILE.match, names) if m]
    return min(bases) if bases else None


def local_segment_bases(broker, topic: str, partition: int) -> list[int]:
    names = os.listdir(broker.partition_dir(topic, partition))
    return sorted(int(m.group(1)) for m in map(SEGMENT_FILE.match, names) if m)


def wait_until_remote_only(broker, topic: str, upto: dict[int, int],
                           timeout: float = REMOTE_TIMEOUT_S) -> dict[int, int]:
    """Wait until, for every partition p, the records at offsets <= upto[p] are no longer on
    local disk (the local log start is past them): they were uploaded, since Strata deletes
    a local segment only after its upload. Returns the local log starts."""
    deadline = time.monotonic() + timeout
    starts: dict[int, int | None] = {}
    while True:
        starts = {p: local_log_start(broker, topic, p) for p in upto}
        if all(s is not None and s > upto[p] for p, s in starts.items()):
            return starts
        how = broker.died()
        if how is not None or time.monotonic() > deadline:
            raise AssertionError(
                f"{topic}: wanted offsets <= {upto} remote-only within {timeout}s, but the local "
                f"log starts are {starts} ({how or 'broker running'})\n"
                f"--- broker log tail ---\n{broker.log_tail(40)}")
        time.sleep(0.2)


def seal_records(broker, topic: str, last_offsets: dict[int, int]) -> int:
    """Produce filler records to each partition until the segment holding last_offsets[p] is
    sealed (a newer segment exists), so that it can be uploaded: the active segment never is.
    Returns how many fillers were produced."""
    rnd = random.Random(99)
    fillers = 0
    for p, last in last_offsets.items():
        for _ in range(2 * SEGMENT_BYTES // 16_000 + 2):
            if local_segment_bases(broker, topic, p)[-1] > last:
                break
            produce(broker.bootstrap, topic,
                    [{"value": b"filler:" + rnd.randbytes(16_000), "partition": p}],
                    conf=PRODUCE_CONF)
            fillers += 1
        else:
            raise AssertionError(f"{topic}-{p}: no new segment after {fillers} fillers: "
                                 f"{local_segment_bases(broker, topic, p)}")
    return fillers


def by_partition(delivered) -> dict[int, list]:
    out: dict[int, list] = {p: [] for p in range(PARTS)}
    for d in delivered:
        out.setdefault(d.partition, []).append(d)
    return {p: sorted(ds, key=lambda d: d.offset) for p, ds in out.items()}


def assert_every_record_once_in_order(delivered, got, client: str) -> None:
    """got holds each delivered record exactly once, in offset order per partition, with its
    key and value intact."""
    want = by_partition(delivered)
    have: dict[int, list] = {p: [] for p in want}
    for r in got:
        have.setdefault(r.partition, []).append(r)
    for p, ws in want.items():
        hs = have.get(p, [])
        assert [w.offset for w in ws] == list(range(len(ws))), f"partition {p}: delivery gaps"
        offsets = [h.offset for h in hs]
        if offsets != [w.offset for w in ws]:
            dups = len(offsets) - len(set(offsets))
            first_bad = next((i for i, (h, w) in enumerate(zip(offsets, ws)) if h != w.offset),
                             min(len(offsets), len(ws)))
            raise AssertionError(
                f"{client}, partition {p}: got {len(offsets)} records ({dups} duplicates), "
                f"wanted offsets 0..{len(ws) - 1}; first difference at index {first_bad}: "
                f"{offsets[first_bad:first_bad + 5]}")
        for h, w in zip(hs, ws):
            assert (h.key, h.value) == (w.key, w.value), \
                f"{client}, partition {p} offset {h.offset}: key/value differ from what was produced"


def store_keys(store) -> list[str]:
    """Every object key of a store: ("s3", server, prefix) or ("file", root)."""
    if store[0] == "s3":
        _, s3, prefix = store
        return [k[len(prefix) + 1:] for k in s3.keys(prefix + "/")]
    root = store[1]
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def assert_manifest_per_partition(keys: list[str], topic: str, partitions: int) -> None:
    for p in range(partitions):
        mine = [k for k in keys if topic in k and k.endswith(f"/{p}/manifest.json")]
        assert mine, f"no manifest.json for {topic}-{p} among {len(keys)} keys: {keys[:20]}"


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def tiered_broker(s3_server, module_broker_factory):
    """One broker whose remote store is the module's moto bucket, under the prefix "module"."""
    return module_broker_factory(name="tiered",
                                 props=tiered_broker_props(s3_server.broker_props("module")))


@pytest.fixture(scope="module")
def remote_topic(tiered_broker):
    """A 2-partition remote topic holding N keyed lz4 records whose early segments exist only
    in the bucket. Yields (topic, delivered)."""
    import uuid

    b = tiered_broker
    topic = f"tiered-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, partitions=PARTS, config=REMOTE_TOPIC_CONFIG)
    delivered, _ = produce(b.bootstrap, topic, keyed_records(N, seed=1), conf=PRODUCE_CONF)
    assert len(delivered) == N
    assert all(len(ds) > 0 for ds in by_partition(delivered).values()), "a partition got nothing"
    wait_until_remote_only(b, topic, {p: 0 for p in range(PARTS)})
    return topic, delivered


# --------------------------------------------------------------------------- tests

def test_confluent_consumer_reads_every_record_once_in_order_after_early_segments_went_remote(
        tiered_broker, remote_topic):
    b = tiered_broker
    topic, delivered = remote_topic
    for p, ds in by_partition(delivered).items():
        # The log start offset stays 0: only the local copy of the early segments is gone.
        assert watermarks(b.bootstrap, topic, p) == (0, len(ds))
        assert local_log_start(b, topic, p) > 0
    got = consume(b.bootstrap, topic, N, partitions=range(PARTS), timeout=CONSUME_TIMEOUT_S)
    assert_every_record_once_in_order(delivered, got, "confluent-kafka")


def test_kafka_python_consumer_reads_every_record_once_in_order_after_early_segments_went_remote(
        tiered_broker, remote_topic):
    kp_require_codec("lz4")
    b = tiered_broker
    topic, delivered = remote_topic
    assert all(local_log_start(b, topic, p) > 0 for p in range(PARTS))
    got = kp_consume(b.bootstrap, topic, N, partitions=range(PARTS), timeout=CONSUME_TIMEOUT_S)
    assert_every_record_once_in_order(delivered, got, "kafka-python")


def test_bucket_holds_segments_and_a_manifest_per_partition_under_the_prefix(
        s3_server, tiered_broker, remote_topic):
    b = tiered_broker
    topic, delivered = remote_topic
    everything = s3_server.keys()
    mine = [k for k in everything if topic in k]
    assert mine, f"no object of {topic} in bucket {s3_server.bucket}: {everything[:20]}"
    assert all(k.startswith("module/") for k in mine), \
        f"objects of {topic} outside the prefix 'module/': {[k for k in mine if not k.startswith('module/')][:10]}"
    assert_manifest_per_partition(mine, topic, PARTS)
    # More than the manifests: the segments themselves (and their indexes) are there.
    assert len(mine) > PARTS, mine
    # Declared binary and JSON, so a server that compresses what it cannot type leaves them.
    if s3_server.client is not None:
        for k in mine:
            ct = s3_server.client.head_object(Bucket=s3_server.bucket, Key=k)["ContentType"]
            want = "application/json" if k.endswith(".json") else "binary/octet-stream"
            assert ct == want, (k, ct)
    # Whatever the broker deleted from the bucket so far (e.g. replaced manifests, cleaned
    # orphans), the first record of every partition is still readable.
    for p, ds in by_partition(delivered).items():
        (first,) = consume(b.bootstrap, topic, 1, partitions=[p], allow_more=True,
                           timeout=CONSUME_TIMEOUT_S)[:1]
        assert (first.offset, first.value) == (0, ds[0].value)


def test_offsets_for_times_finds_records_that_exist_only_remotely(tiered_broker, topic_name):
    b = tiered_broker
    create_topic(b.bootstrap, topic_name, partitions=1, config=REMOTE_TOPIC_CONFIG)
    t0 = 1_650_000_000_000
    n = 3000
    rnd = random.Random(2)
    recs = [{"value": b"%06d:" % i + rnd.randbytes(150), "partition": 0, "timestamp": t0 + 1000 * i}
            for i in range(n)]
    delivered, _ = produce(b.bootstrap, topic_name, recs, conf=PRODUCE_CONF)
    assert [d.offset for d in sorted(delivered, key=lambda d: d.offset)] == list(range(n))
    starts = wait_until_remote_only(b, topic_name, {0: 0})
    local_start = starts[0]
    assert local_start < n, f"no local segment left? local log start {local_start} of {n}"

    c = _consumer(b.bootstrap)
    try:
        def lookup(ts):
            (r,) = c.offsets_for_times([TopicPartition(topic_name, 0, ts)], timeout=30)
            assert r.error is None, r.error
            return r.offset

        assert lookup(t0 - 100_000) == 0
        assert lookup(t0) == 0
        remote = sorted({1, local_start // 3, local_start // 2, local_start - 1})
        for i in remote:
            assert lookup(t0 + 1000 * i) == i, f"exact timestamp of remote offset {i}"
            assert lookup(t0 + 1000 * i - 500) == i, f"timestamp just before remote offset {i}"
        # The first local record, and one past the last.
        assert lookup(t0 + 1000 * local_start - 1) == local_start
        assert lookup(t0 + 1000 * (n - 1) + 1) == OFFSET_END
    finally:
        c.close()

    # The record found is served from remote storage, timestamp and value intact.
    i = local_start // 2
    (rec,) = consume(b.bootstrap, topic_name, 1, offset=i, allow_more=True)[:1]
    assert (rec.offset, rec.timestamp, rec.value) == (i, t0 + 1000 * i, recs[i]["value"])


@pytest.mark.parametrize("kind", ["file", "moto"])
def test_broker_on_empty_log_dir_restores_topic_and_records_from_the_store(
        request, broker_factory, tmp_path, topic_name, kind):
    if kind == "moto":
        s3 = request.getfixturevalue("s3_server")
        prefix = f"restore-{topic_name}"
        store_props = s3.broker_props(prefix)
        store = ("s3", s3, prefix)
    else:
        root = tmp_path / "store"
        store_props = file_store_props(root)
        store = ("file", root)
    parts = 3  # not the broker's num.partitions (2), so a re-created topic would show
    props = tiered_broker_props(store_props)

    b1 = broker_factory(props=props, name="origin")
    create_topic(b1.bootstrap, topic_name, partitions=parts, config=REMOTE_TOPIC_CONFIG)
    delivered, _ = produce(b1.bootstrap, topic_name, keyed_records(N, seed=3), conf=PRODUCE_CONF)
    want: dict[int, list] = {p: [] for p in range(parts)}
    for d in sorted(delivered, key=lambda d: d.offset):
        want[d.partition].append(d)
    assert all(want.values()), "a partition got no record"
    last = {p: len(ds) - 1 for p, ds in want.items()}
    # Only sealed segments are uploaded: roll past the last record, then wait until every
    # segment holding a produced record has left the local disk (so it is in the store).
    seal_records(b1, topic_name, last)
    wait_until_remote_only(b1, topic_name, last, timeout=2 * REMOTE_TIMEOUT_S)
    assert_manifest_per_partition(store_keys(store), topic_name, parts)
    b1.stop()

    b2 = broker_factory(props=props, name="restored", start=False)
    assert not any(b2.data_dir.iterdir()), "the new broker's log dir is not empty"
    b2.start()
    wait_for_topic(b2.bootstrap, topic_name, parts, timeout=60)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    configs = admin(b2.bootstrap).describe_configs([res])[res].result(timeout=30)
    assert configs["remote.storage.enable"].value == "true"

    for p, ds in want.items():
        low, high = watermarks(b2.bootstrap, topic_name, p)
        assert low == 0 and high >= len(ds), f"partition {p}: watermarks {(low, high)}"
        got = consume(b2.bootstrap, topic_name, len(ds), partitions=[p], allow_more=True,
                      timeout=CONSUME_TIMEOUT_S)[:len(ds)]
        assert_every_record_once_in_order(ds, got, f"after restore ({kind})")


def test_rehydration_brings_remote_segments_back_when_local_retention_is_raised(
        tiered_broker, topic_name):
    """kafka-configs raises local.retention.bytes and turns strata.remote.rehydrate.enable on:
    every partition's remote segments come back to the broker's disk (seen in the partition
    directory and on /metrics), confluent-kafka then reads every record once, in order, without
    one remote fetch, and the bucket still holds every segment."""
    import subprocess

    from java_apps import JVM_OPTS, _java_bin, classpath

    cp, why = classpath("tools")
    if cp is None:
        pytest.skip(f"kafka-configs needs the kafka-tools jars: {why}")
    b = tiered_broker
    n = 4_000
    create_topic(b.bootstrap, topic_name, partitions=PARTS, config=REMOTE_TOPIC_CONFIG)
    delivered, _ = produce(b.bootstrap, topic_name, keyed_records(n, seed=7), conf=PRODUCE_CONF)
    last = {p: ds[-1].offset for p, ds in by_partition(delivered).items()}
    fillers = seal_records(b, topic_name, last)
    wait_until_remote_only(b, topic_name, last)

    rehydrated_before = b.metric("strata_remote_segments_rehydrated_total")
    r = subprocess.run([_java_bin(), *JVM_OPTS, "-cp", cp, "org.apache.kafka.tools.ConfigCommand",
                        "--bootstrap-server", b.bootstrap, "--alter", "--entity-type", "topics",
                        "--entity-name", topic_name, "--add-config",
                        "local.retention.bytes=-1,strata.remote.rehydrate.enable=true"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    deadline = time.monotonic() + REMOTE_TIMEOUT_S
    while any(local_log_start(b, topic_name, p) != 0 for p in range(PARTS)):
        assert time.monotonic() < deadline, (
            f"local log starts {[local_log_start(b, topic_name, p) for p in range(PARTS)]}\n"
            f"{b.log_tail(40)}")
        time.sleep(0.2)
    rehydrated = b.metric("strata_remote_segments_rehydrated_total") - rehydrated_before
    assert rehydrated >= PARTS, rehydrated
    assert b.metric("strata_remote_rehydration_failures_total") == 0
    for p in range(PARTS):
        names = os.listdir(b.partition_dir(topic_name, p))
        assert not [x for x in names if x.endswith(".tmp")], names

    fetches = b.metric("strata_remote_fetches_total")
    got = consume(b.bootstrap, topic_name, n + fillers, partitions=range(PARTS),
                  timeout=CONSUME_TIMEOUT_S)
    got = [g for g in got if not g.value.startswith(b"filler:")]
    assert_every_record_once_in_order(delivered, got, "confluent-kafka after rehydration")
    assert b.metric("strata_remote_fetches_total") == fetches, "a read went to the bucket"


def test_remote_reads_over_tls_and_plaintext_are_served_from_the_disk_tier_files(
        broker_factory, tmp_path, topic_name):
    """Remote reads answered from the read cache's disk tier (ranges of its chunk files, sent
    with sendfile on PLAINTEXT and through the encrypter on SSL), with 64 KiB chunks so an
    answer spans several files: confluent-kafka over SSL reads every record once, in order,
    with a cold cache (the chunks reach the disk tier) and again from the disk tier alone (no
    GET), and so does a PLAINTEXT consumer."""
    from conftest import free_port
    from test_security import _make_certs

    pytest.importorskip("cryptography", reason="the test certificates need `cryptography`")
    (tmp_path / "certs").mkdir()
    certs = _make_certs(tmp_path / "certs")
    b = broker_factory(start=False, name="tls-tiered")
    ssl_port = free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{b.port},SSL://127.0.0.1:{ssl_port}"
    b.props.update({
        **tiered_broker_props(file_store_props(tmp_path / "store")),
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server),
        "strata.remote.chunk.bytes": "65536",
    })
    b.start()
    n = 6_000
    create_topic(b.bootstrap, topic_name, partitions=1, config=REMOTE_TOPIC_CONFIG)
    delivered, _ = produce(b.bootstrap, topic_name, keyed_records(n, seed=11), conf=PRODUCE_CONF)
    last = {0: delivered[-1].offset}
    fillers = seal_records(b, topic_name, last)
    wait_until_remote_only(b, topic_name, last)

    tls = {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca),
           "max.partition.fetch.bytes": 300_000}

    def read(bootstrap: str, conf: dict | None, what: str) -> None:
        got = consume(bootstrap, topic_name, n + fillers, conf=conf, timeout=CONSUME_TIMEOUT_S)
        got = [g for g in got if not g.value.startswith(b"filler:")]
        assert_every_record_once_in_order(delivered, got, what)

    read(f"127.0.0.1:{ssl_port}", tls, "SSL, cold cache")
    # The fetched chunks went to the disk tier (written behind the readers).
    deadline = time.monotonic() + 10
    while b.metric("strata_remote_cache_disk_bytes") == 0:
        assert time.monotonic() < deadline, "nothing reached the disk tier"
        time.sleep(0.1)
    assert b.metric("strata_remote_cache_disk_write_errors_total") == 0
    time.sleep(0.5)
    def chunk_gets() -> float:
        return (b.metric("strata_remote_cache_misses_total")
                + b.metric("strata_remote_readahead_gets_total"))

    gets = chunk_gets()
    read(f"127.0.0.1:{ssl_port}", tls, "SSL, from the disk tier")
    read(b.bootstrap, {"max.partition.fetch.bytes": 300_000}, "PLAINTEXT, from the disk tier")
    assert chunk_gets() == gets, "a read went to the bucket"
    assert b.metric("strata_remote_fetch_errors_total") == 0
